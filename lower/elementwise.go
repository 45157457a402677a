package lower

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// Pointwise operators. Every rule converts its operands to the dtype the IR
// says the node computes in (torch type promotion, see fxgraph.ResultType),
// broadcasts them to the result's dims and applies StableHLO ops. float16
// and bfloat16 transcendental math is computed in float32 and rounded back,
// as PyTorch does on CPU.

// ewFn is a pointwise function of already prepared operands.
type ewFn func(ctx *Context, n *fxgraph.Node, x ...*stablehlo.Value) (*stablehlo.Value, error)

// ewDims returns v's dims as int64.
func ewDims(v *stablehlo.Value) []int64 {
	d := v.Type().Dims
	out := make([]int64, len(d))
	for i, x := range d {
		out[i] = int64(x)
	}
	return out
}

// ewDType returns the IR dtype of v.
func ewDType(v *stablehlo.Value) tensor.DType {
	dt, err := DTypeOf(v.Type().Elem)
	if err != nil {
		return tensor.Invalid
	}
	return dt
}

// ewFull is a constant of v's dtype and shape holding x.
func ewFull(ctx *Context, v *stablehlo.Value, x float64) (*stablehlo.Value, error) {
	s, err := ctx.ScalarLike(v, x)
	if err != nil {
		return nil, err
	}
	return ctx.BroadcastTo(s, ewDims(v))
}

// ewLiteral makes a rank-0 constant of IR dtype dt from a Python number,
// exactly for integers.
func ewLiteral(ctx *Context, dt tensor.DType, a any) (*stablehlo.Value, error) {
	t := tensor.New(dt)
	switch {
	case dt == tensor.Bool:
		f, ok := fxgraph.AsFloat(a)
		if !ok {
			return nil, fmt.Errorf("literal %s is not a number", fxgraph.FormatArg(a))
		}
		if f != 0 {
			t.Data[0] = 1
		}
	case dt.IsInt():
		i, ok := fxgraph.AsInt(a)
		if !ok {
			f, okf := fxgraph.AsFloat(a)
			if !okf {
				return nil, fmt.Errorf("literal %s is not a number", fxgraph.FormatArg(a))
			}
			i = int64(math.Trunc(f))
		}
		t.SetInt64(0, i)
	default:
		f, ok := fxgraph.AsFloat(a)
		if !ok {
			return nil, fmt.Errorf("literal %s is not a number", fxgraph.FormatArg(a))
		}
		t.SetFloat64(0, f)
	}
	return ctx.Constant(t)
}

// ewOperand returns argument i (or kwarg name) of n, a tensor node or a
// Python number, converted to dt and broadcast to dims.
func ewOperand(ctx *Context, n *fxgraph.Node, i int, name string, dt tensor.DType, dims []int64) (*stablehlo.Value, error) {
	a := n.ArgOr(i, name, nil)
	var v *stablehlo.Value
	var err error
	if m, ok := a.(*fxgraph.Node); ok {
		if v, err = ctx.Value(m); err != nil {
			return nil, err
		}
		if v, err = ctx.ConvertTo(v, dt); err != nil {
			return nil, err
		}
	} else if v, err = ewLiteral(ctx, dt, a); err != nil {
		return nil, fmt.Errorf("argument %s: %w", name, err)
	}
	return ctx.BroadcastTo(v, dims)
}

// ewToBool converts v to bool as torch does (non-zero is true; NaN is true).
func ewToBool(ctx *Context, v *stablehlo.Value) (*stablehlo.Value, error) {
	dt := ewDType(v)
	if dt == tensor.Bool {
		return v, nil
	}
	zero, err := ewFull(ctx, v, 0)
	if err != nil {
		return nil, err
	}
	return ewCompare(v, zero, stablehlo.NE)
}

// ewCompare compares two values of the same dtype.
func ewCompare(a, b *stablehlo.Value, dir stablehlo.Direction) (*stablehlo.Value, error) {
	ct := stablehlo.CompareFloat
	d := a.Type().Elem
	switch {
	case d.IsFloat():
	case d.IsUnsigned() || ewDType(a) == tensor.Bool:
		ct = stablehlo.CompareUnsign
	default:
		ct = stablehlo.CompareSigned
	}
	return a.Block().Compare(a, b, dir, ct)
}

// ewCmpConst compares v against the constant x.
func ewCmpConst(ctx *Context, v *stablehlo.Value, dir stablehlo.Direction, x float64) (*stablehlo.Value, error) {
	c, err := ewFull(ctx, v, x)
	if err != nil {
		return nil, err
	}
	return ewCompare(v, c, dir)
}

// ewBinConst applies op(v, x) with the constant x.
func ewBinConst(ctx *Context, op binOp, v *stablehlo.Value, x float64) (*stablehlo.Value, error) {
	c, err := ewFull(ctx, v, x)
	if err != nil {
		return nil, err
	}
	return op(v.Block(), v, c)
}

// ewConstBin applies op(x, v) with the constant x.
func ewConstBin(ctx *Context, op binOp, x float64, v *stablehlo.Value) (*stablehlo.Value, error) {
	c, err := ewFull(ctx, v, x)
	if err != nil {
		return nil, err
	}
	return op(v.Block(), c, v)
}

// ewMathDType is the dtype float math on dt is computed in.
func ewMathDType(dt tensor.DType) tensor.DType {
	if dt == tensor.Float16 || dt == tensor.BFloat16 {
		return tensor.Float32
	}
	return dt
}

func ewIsIntLike(dt tensor.DType) bool { return dt.IsInt() || dt == tensor.Bool }

// ewTrunc rounds toward zero.
func ewTrunc(ctx *Context, x *stablehlo.Value) (*stablehlo.Value, error) {
	neg, err := ewCmpConst(ctx, x, stablehlo.LT, 0)
	if err != nil {
		return nil, err
	}
	c, err := x.Block().Ceil(x)
	if err != nil {
		return nil, err
	}
	f, err := x.Block().Floor(x)
	if err != nil {
		return nil, err
	}
	return neg.Block().Select(neg, c, f)
}

// ewFloatUnary are the float-valued unary functions, applied to float32 or
// float64 values.
var ewFloatUnary = map[*fxgraph.Op]func(c *chain, n *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value{
	fxgraph.AtenExp: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Exponential, x)
	},
	fxgraph.AtenExpm1: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).ExponentialMinusOne, x)
	},
	fxgraph.AtenExp2: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.bin((*stablehlo.Block).Power, c.k(x, 2), x)
	},
	fxgraph.AtenLog: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Log, x)
	},
	fxgraph.AtenLog1p: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).LogPlusOne, x)
	},
	fxgraph.AtenLog2: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.div(c.un((*stablehlo.Block).Log, x), c.k(x, math.Ln2))
	},
	fxgraph.AtenLog10: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.div(c.un((*stablehlo.Block).Log, x), c.k(x, math.Ln10))
	},
	fxgraph.AtenSqrt: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Sqrt, x)
	},
	fxgraph.AtenRsqrt: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Rsqrt, x)
	},
	fxgraph.AtenReciprocal: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.div(c.k(x, 1), x)
	},
	fxgraph.AtenSin: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Sine, x)
	},
	fxgraph.AtenCos: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Cosine, x)
	},
	fxgraph.AtenTan: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Tan, x)
	},
	fxgraph.AtenTanh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Tanh, x)
	},
	fxgraph.AtenSigmoid: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Logistic, x)
	},
	// ONNX Runtime's CPU float32 Tanh is MLAS's approximation, the one its
	// quantized LSTM gates use (rnn.go); elsewhere it is tanh.
	fxgraph.XserveORTTanh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		if c.err != nil || x == nil || c.ctx.Options.Platform != "cpu" || x.Type().Elem != stablehlo.F32 {
			return c.un((*stablehlo.Block).Tanh, x)
		}
		return c.set((&rnnB{blk: x.Block()}).mlasTanh(x))
	},
	fxgraph.AtenErf: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.un((*stablehlo.Block).Erf, x)
	},
	fxgraph.AtenAtan: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.bin((*stablehlo.Block).Atan2, x, c.k(x, 1))
	},
	// asin(x) = atan2(x, sqrt((1-x)(1+x))); NaN outside [-1, 1].
	fxgraph.AtenAsin: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		one := c.k(x, 1)
		r := c.un((*stablehlo.Block).Sqrt, c.mul(c.sub(one, x), c.add(one, x)))
		return c.bin((*stablehlo.Block).Atan2, x, r)
	},
	// acos(x) = atan2(sqrt((1-x)(1+x)), x).
	fxgraph.AtenAcos: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		one := c.k(x, 1)
		r := c.un((*stablehlo.Block).Sqrt, c.mul(c.sub(one, x), c.add(one, x)))
		return c.bin((*stablehlo.Block).Atan2, r, x)
	},
	// sinh(x) = (expm1(x) - expm1(-x)) / 2, accurate near 0.
	fxgraph.AtenSinh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		d := c.sub(c.un((*stablehlo.Block).ExponentialMinusOne, x), c.un((*stablehlo.Block).ExponentialMinusOne, c.un((*stablehlo.Block).Negate, x)))
		return c.mul(d, c.k(x, 0.5))
	},
	fxgraph.AtenCosh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		s := c.add(c.un((*stablehlo.Block).Exponential, x), c.un((*stablehlo.Block).Exponential, c.un((*stablehlo.Block).Negate, x)))
		return c.mul(s, c.k(x, 0.5))
	},
	// asinh(x) = sign(x) * log1p(|x| + x²/(1 + sqrt(1 + x²))), and
	// sign(x) * (log(|x|) + ln 2) for huge |x| where x² overflows.
	fxgraph.AtenAsinh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		one := c.k(x, 1)
		a := c.un((*stablehlo.Block).Abs, x)
		a2 := c.mul(a, a)
		small := c.un((*stablehlo.Block).LogPlusOne, c.add(a, c.div(a2, c.add(one, c.un((*stablehlo.Block).Sqrt, c.add(one, a2))))))
		big := c.add(c.un((*stablehlo.Block).Log, a), c.k(x, math.Ln2))
		r := c.sel(c.cmp(a, c.k(x, 1e15), stablehlo.GT), big, small)
		return c.mul(c.un((*stablehlo.Block).Sign, x), r)
	},
	// acosh(x) = log1p(t + sqrt(t(t+2))) with t = x-1; log(x) + ln 2 for huge x.
	fxgraph.AtenAcosh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		t := c.sub(x, c.k(x, 1))
		small := c.un((*stablehlo.Block).LogPlusOne, c.add(t, c.un((*stablehlo.Block).Sqrt, c.mul(t, c.add(t, c.k(x, 2))))))
		big := c.add(c.un((*stablehlo.Block).Log, x), c.k(x, math.Ln2))
		return c.sel(c.cmp(x, c.k(x, 1e15), stablehlo.GT), big, small)
	},
	// atanh(x) = log1p(2x/(1-x)) / 2.
	fxgraph.AtenAtanh: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		q := c.div(c.add(x, x), c.sub(c.k(x, 1), x))
		return c.mul(c.un((*stablehlo.Block).LogPlusOne, q), c.k(x, 0.5))
	},
	fxgraph.AtenHardsigmoid: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.div(ewRelu6(c, c.add(x, c.k(x, 3))), c.k(x, 6))
	},
	fxgraph.AtenHardswish: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		r := c.div(ewRelu6(c, c.add(x, c.k(x, 3))), c.k(x, 6))
		return c.mul(x, r)
	},
	fxgraph.AtenSilu: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.mul(x, c.un((*stablehlo.Block).Logistic, x))
	},
	fxgraph.AtenMish: func(c *chain, _ *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		return c.mul(x, c.un((*stablehlo.Block).Tanh, ewSoftplus(c, x, 1, 20)))
	},
	fxgraph.AtenLeakyRelu: func(c *chain, n *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		s, err := n.ParamFloat("negative_slope")
		c.set(nil, err)
		pos := c.cmp(x, c.k(x, 0), stablehlo.GT)
		return c.sel(pos, x, c.mul(x, c.k(x, s)))
	},
	fxgraph.AtenElu: func(c *chain, n *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		alpha, err := n.ParamFloat("alpha")
		c.set(nil, err)
		scale, err := n.ParamFloat("scale")
		c.set(nil, err)
		inScale, err := n.ParamFloat("input_scale")
		c.set(nil, err)
		pos := c.cmp(x, c.k(x, 0), stablehlo.GT)
		xs := x
		if inScale != 1 {
			xs = c.mul(x, c.k(x, inScale))
		}
		neg := c.mul(c.un((*stablehlo.Block).ExponentialMinusOne, xs), c.k(x, alpha*scale))
		p := x
		if scale != 1 {
			p = c.mul(x, c.k(x, scale))
		}
		return c.sel(pos, p, neg)
	},
	fxgraph.AtenGelu: func(c *chain, n *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		a, _ := n.Param("approximate") // checked by the shape rule
		if a != "none" && a != "tanh" {
			c.set(nil, fmt.Errorf("gelu: approximate %s not supported", fxgraph.FormatArg(a)))
			return nil
		}
		return ewGelu(c, x, a == "tanh")
	},
	fxgraph.AtenSoftplus: func(c *chain, n *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value {
		beta, err := n.ParamFloat("beta")
		c.set(nil, err)
		th, err := n.ParamFloat("threshold")
		c.set(nil, err)
		return ewSoftplus(c, x, beta, th)
	},
}

// ewGelu is x * (1 + erf(x / sqrt 2)) / 2, or its tanh approximation.
func ewGelu(c *chain, x *stablehlo.Value, tanh bool) *stablehlo.Value {
	half := c.mul(x, c.k(x, 0.5))
	if !tanh {
		e := c.un((*stablehlo.Block).Erf, c.mul(x, c.k(x, 1/math.Sqrt2)))
		return c.mul(half, c.add(c.k(x, 1), e))
	}
	x3 := c.mul(c.mul(x, x), x)
	inner := c.mul(c.k(x, math.Sqrt(2/math.Pi)), c.add(x, c.mul(x3, c.k(x, 0.044715))))
	return c.mul(half, c.add(c.k(x, 1), c.un((*stablehlo.Block).Tanh, inner)))
}

func ewRelu6(c *chain, x *stablehlo.Value) *stablehlo.Value {
	return c.min(c.max(x, c.k(x, 0)), c.k(x, 6))
}

// ewSoftplus is torch's softplus: x where beta*x > threshold, else
// log1p(exp(beta*x))/beta.
func ewSoftplus(c *chain, x *stablehlo.Value, beta, threshold float64) *stablehlo.Value {
	bx := x
	if beta != 1 {
		bx = c.mul(x, c.k(x, beta))
	}
	sp := c.un((*stablehlo.Block).LogPlusOne, c.un((*stablehlo.Block).Exponential, bx))
	if beta != 1 {
		sp = c.div(sp, c.k(x, beta))
	}
	return c.sel(c.cmp(bx, c.k(x, threshold), stablehlo.GT), x, sp)
}

// ewFloatUnaryRule lowers a float-valued unary op: integer inputs are
// converted to the result dtype, half floats computed in float32.
func ewFloatUnaryRule(f func(c *chain, n *fxgraph.Node, x *stablehlo.Value) *stablehlo.Value) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		if in[0] == nil {
			return nil, fmt.Errorf("argument 0 is not a tensor")
		}
		dt, _ := Out(n, 0)
		if !dt.IsFloat() {
			return nil, fmt.Errorf("result dtype %s is not a float", dt)
		}
		x, err := ctx.ConvertTo(in[0], ewMathDType(dt))
		if err != nil {
			return nil, err
		}
		c := &chain{ctx: ctx}
		y := f(c, n, x)
		if c.err != nil {
			return nil, c.err
		}
		if y, err = ctx.ConvertTo(y, dt); err != nil {
			return nil, err
		}
		return []*stablehlo.Value{y}, nil
	}
}

// ewSameUnary are unary ops that keep the dtype (and accept integers).
var ewSameUnary = map[*fxgraph.Op]func(ctx *Context, n *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error){
	fxgraph.AtenNeg: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		switch {
		case dt == tensor.Bool:
			return nil, fmt.Errorf("neg of a bool tensor is not supported")
		case dt.IsUnsigned():
			return ewConstBin(ctx, (*stablehlo.Block).Subtract, 0, x)
		}
		return x.Block().Negate(x)
	},
	fxgraph.AtenAbs: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if dt == tensor.Bool || dt.IsUnsigned() {
			return x, nil
		}
		return x.Block().Abs(x)
	},
	fxgraph.AtenSign: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if dt == tensor.Bool {
			return x, nil
		}
		s, err := x.Block().Sign(x)
		if err != nil || !dt.IsFloat() {
			return s, err
		}
		// torch.sign(NaN) is 0, StableHLO's sign is NaN.
		nan, err := ewCompare(x, x, stablehlo.NE)
		if err != nil {
			return nil, err
		}
		zero, err := ewFull(ctx, x, 0)
		if err != nil {
			return nil, err
		}
		return nan.Block().Select(nan, zero, s)
	},
	fxgraph.AtenRelu: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if dt == tensor.Bool {
			return nil, fmt.Errorf("relu of a bool tensor is not supported")
		}
		return ewBinConst(ctx, (*stablehlo.Block).Maximum, x, 0)
	},
	fxgraph.AtenFloor: ewRoundRule((*stablehlo.Block).Floor),
	fxgraph.AtenCeil:  ewRoundRule((*stablehlo.Block).Ceil),
	fxgraph.AtenRound: ewRoundRule((*stablehlo.Block).RoundNearestEven),
	fxgraph.AtenTrunc: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if !dt.IsFloat() {
			return x, nil
		}
		return ewTrunc(ctx, x)
	},
	fxgraph.AtenClone: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, _ tensor.DType) (*stablehlo.Value, error) {
		return x, nil
	},
	fxgraph.AtenBitwiseNot: func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if !ewIsIntLike(dt) {
			return nil, fmt.Errorf("bitwise_not of %s is not supported", dt)
		}
		return x.Block().Not(x)
	},
	fxgraph.AtenHardtanh: func(ctx *Context, n *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		lo, err := n.ParamFloat("min_val")
		if err != nil {
			return nil, err
		}
		hi, err := n.ParamFloat("max_val")
		if err != nil {
			return nil, err
		}
		if ewIsIntLike(dt) {
			lo, hi = math.Ceil(lo), math.Floor(hi) // the integers within [lo, hi]
		}
		y, err := ewBinConst(ctx, (*stablehlo.Block).Maximum, x, lo)
		if err != nil {
			return nil, err
		}
		return ewBinConst(ctx, (*stablehlo.Block).Minimum, y, hi)
	},
	fxgraph.AtenThreshold: func(ctx *Context, n *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		th, err := n.ParamFloat("threshold")
		if err != nil {
			return nil, err
		}
		val, err := n.ParamFloat("value")
		if err != nil {
			return nil, err
		}
		if ewIsIntLike(dt) {
			th = math.Floor(th) // x <= th for an integer x
		}
		le, err := ewCmpConst(ctx, x, stablehlo.LE, th)
		if err != nil {
			return nil, err
		}
		v, err := ewFull(ctx, x, val)
		if err != nil {
			return nil, err
		}
		return le.Block().Select(le, v, x)
	},
}

func ewRoundRule(op unOp) func(ctx *Context, n *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
	return func(ctx *Context, _ *fxgraph.Node, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if !dt.IsFloat() {
			return x, nil
		}
		return op(x.Block(), x)
	}
}

// ewBoolUnary are unary predicates; x keeps its input dtype.
var ewBoolUnary = map[*fxgraph.Op]func(ctx *Context, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error){
	fxgraph.AtenLogicalNot: func(ctx *Context, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if dt == tensor.Bool {
			return x.Block().Not(x)
		}
		return ewCmpConst(ctx, x, stablehlo.EQ, 0)
	},
	fxgraph.AtenIsnan: func(ctx *Context, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if !dt.IsFloat() {
			return ctx.Full(tensor.Bool, 0, ewDims(x))
		}
		return ewCompare(x, x, stablehlo.NE)
	},
	fxgraph.AtenIsinf: func(ctx *Context, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if !dt.IsFloat() {
			return ctx.Full(tensor.Bool, 0, ewDims(x))
		}
		a, err := x.Block().Abs(x)
		if err != nil {
			return nil, err
		}
		return ewCmpConst(ctx, a, stablehlo.EQ, math.Inf(1))
	},
	fxgraph.AtenIsfinite: func(ctx *Context, x *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
		if !dt.IsFloat() {
			return ctx.Full(tensor.Bool, 1, ewDims(x))
		}
		return x.Block().IsFinite(x)
	},
}

// ewBinary lowers binary ops whose operands are converted to the compute
// dtype ct (the result's, or the promoted one for comparisons).
type ewBinary struct {
	// cmp marks comparisons and logical ops (bool result; operands are
	// converted to their promoted dtype, or to bool for logical ops).
	cmp bool
	// logical converts the operands to bool.
	logical bool
	// math computes half floats in float32.
	math bool
	f    func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error)
}

func ewSimple(op binOp, boolOp binOp) func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
	return func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
		if ct == tensor.Bool {
			if boolOp == nil {
				return nil, fmt.Errorf("%s of bool tensors is not supported", n.Target)
			}
			return boolOp(a.Block(), a, b)
		}
		return op(a.Block(), a, b)
	}
}

func ewCmp(dir stablehlo.Direction) func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
	return func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
		return ewCompare(a, b, dir)
	}
}

func ewIntOnly(op binOp) func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
	return func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
		if !ewIsIntLike(ct) {
			return nil, fmt.Errorf("%s needs integer operands, got %s", n.Target, ct)
		}
		return op(a.Block(), a, b)
	}
}

// ewFloorAdjust turns C-style (truncating) integer division results into
// floor division: where the remainder r is non-zero and its sign differs
// from the divisor's, q -= 1 (div) or r += b (remainder).
func ewFloorAdjust(ctx *Context, a, b *stablehlo.Value, wantRemainder bool) (*stablehlo.Value, error) {
	c := &chain{ctx: ctx}
	r := c.bin((*stablehlo.Block).Remainder, a, b)
	zero := c.k(b, 0)
	nz := c.cmp(r, zero, stablehlo.NE)
	diff := c.bin((*stablehlo.Block).Xor, c.cmp(r, zero, stablehlo.LT), c.cmp(b, zero, stablehlo.LT))
	adj := c.and(nz, diff)
	var out *stablehlo.Value
	if wantRemainder {
		out = c.sel(adj, c.add(r, b), r)
	} else {
		q := c.div(a, b)
		out = c.sel(adj, c.sub(q, c.k(q, 1)), q)
	}
	return out, c.err
}

var ewBinaryRules = map[*fxgraph.Op]ewBinary{
	fxgraph.AtenMulTensor:       {f: mulRule},
	fxgraph.AtenMaximum:         {f: ewSimple(MaxNaN, (*stablehlo.Block).Or)},
	fxgraph.AtenMinimum:         {f: ewSimple(MinNaN, (*stablehlo.Block).And)},
	fxgraph.AtenDivTensor:       {math: true, f: ewSimple((*stablehlo.Block).Divide, nil)},
	fxgraph.AtenPowTensorTensor: {math: true, f: ewSimple((*stablehlo.Block).Power, nil)},
	fxgraph.AtenAtan2:           {math: true, f: ewSimple((*stablehlo.Block).Atan2, nil)},
	fxgraph.AtenFmodTensor:      {math: true, f: ewSimple((*stablehlo.Block).Remainder, nil)},
	fxgraph.AtenRemainderTensor: {math: true, f: func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
		if ct == tensor.Bool {
			return nil, fmt.Errorf("remainder of bool tensors is not supported")
		}
		if ct.IsUnsigned() {
			return a.Block().Remainder(a, b)
		}
		return ewFloorAdjust(ctx, a, b, true)
	}},
	fxgraph.AtenBitwiseAndTensor: {f: ewIntOnly((*stablehlo.Block).And)},
	fxgraph.AtenBitwiseOrTensor:  {f: ewIntOnly((*stablehlo.Block).Or)},
	fxgraph.AtenBitwiseXorTensor: {f: ewIntOnly((*stablehlo.Block).Xor)},
	fxgraph.AtenBitwiseLeftShiftTensor: {f: func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
		if !ct.IsInt() {
			return nil, fmt.Errorf("shift needs integer operands, got %s", ct)
		}
		return a.Block().ShiftLeft(a, b)
	}},
	fxgraph.AtenBitwiseRightShiftTensor: {f: func(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
		if !ct.IsInt() {
			return nil, fmt.Errorf("shift needs integer operands, got %s", ct)
		}
		if ct.IsUnsigned() {
			return a.Block().ShiftRightLogical(a, b)
		}
		return a.Block().ShiftRightArithmetic(a, b)
	}},
	fxgraph.AtenEqTensor:   {cmp: true, f: ewCmp(stablehlo.EQ)},
	fxgraph.AtenNeTensor:   {cmp: true, f: ewCmp(stablehlo.NE)},
	fxgraph.AtenLtTensor:   {cmp: true, f: ewCmp(stablehlo.LT)},
	fxgraph.AtenLeTensor:   {cmp: true, f: ewCmp(stablehlo.LE)},
	fxgraph.AtenGtTensor:   {cmp: true, f: ewCmp(stablehlo.GT)},
	fxgraph.AtenGeTensor:   {cmp: true, f: ewCmp(stablehlo.GE)},
	fxgraph.AtenLogicalAnd: {cmp: true, logical: true, f: ewSimple(nil, (*stablehlo.Block).And)},
	fxgraph.AtenLogicalOr:  {cmp: true, logical: true, f: ewSimple(nil, (*stablehlo.Block).Or)},
	fxgraph.AtenLogicalXor: {cmp: true, logical: true, f: ewSimple(nil, (*stablehlo.Block).Xor)},
}

func ewBinaryRule(b ewBinary) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		outDT, dims := Out(n, 0)
		ct := outDT
		if b.cmp {
			var err error
			if ct, err = fxgraph.ResultType(n.Arg(0), n.Arg(1)); err != nil {
				return nil, err
			}
		}
		var x, y *stablehlo.Value
		var err error
		if b.logical {
			// Each operand becomes bool on its own (no promotion).
			if x, err = ewLogicalOperand(ctx, n, 0, "self", dims); err != nil {
				return nil, err
			}
			if y, err = ewLogicalOperand(ctx, n, 1, "other", dims); err != nil {
				return nil, err
			}
			ct = tensor.Bool
		} else {
			mt := ct
			if b.math {
				mt = ewMathDType(ct)
			}
			second := "other"
			if n.Op == fxgraph.AtenPowTensorTensor || n.Op == fxgraph.AtenPowTensorScalar || n.Op == fxgraph.AtenPowScalar {
				second = "exponent"
			}
			if x, err = ewOperand(ctx, n, 0, "self", mt, dims); err != nil {
				return nil, err
			}
			if y, err = ewOperand(ctx, n, 1, second, mt, dims); err != nil {
				return nil, err
			}
			ct = mt
		}
		r, err := b.f(ctx, n, x, y, ct)
		if err != nil {
			return nil, err
		}
		if r, err = ctx.ConvertTo(r, outDT); err != nil {
			return nil, err
		}
		return []*stablehlo.Value{r}, nil
	}
}

func ewLogicalOperand(ctx *Context, n *fxgraph.Node, i int, name string, dims []int64) (*stablehlo.Value, error) {
	a := n.ArgOr(i, name, nil)
	if m, ok := a.(*fxgraph.Node); ok {
		v, err := ctx.Value(m)
		if err != nil {
			return nil, err
		}
		if v, err = ewToBool(ctx, v); err != nil {
			return nil, err
		}
		return ctx.BroadcastTo(v, dims)
	}
	v, err := ewLiteral(ctx, tensor.Bool, a)
	if err != nil {
		return nil, err
	}
	return ctx.BroadcastTo(v, dims)
}

// ewAddRule lowers add/sub (self ± alpha*other) and rsub (other -
// alpha*self), .Tensor and .Scalar.
func ewAddRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, dims := Out(n, 0)
	a, err := ewOperand(ctx, n, 0, "self", dt, dims)
	if err != nil {
		return nil, err
	}
	b, err := ewOperand(ctx, n, 1, "other", dt, dims)
	if err != nil {
		return nil, err
	}
	rsub := n.Op == fxgraph.AtenRsubTensor || n.Op == fxgraph.AtenRsubScalar
	if rsub {
		a, b = b, a
	}
	alpha, err := n.Param("alpha")
	if err != nil {
		return nil, err
	}
	af, ok := fxgraph.AsFloat(alpha)
	if !ok {
		return nil, fmt.Errorf("alpha is %s, want a number", fxgraph.FormatArg(alpha))
	}
	if af != 1 {
		if dt == tensor.Bool {
			if af == 0 {
				b, err = ctx.Full(tensor.Bool, 0, dims)
			}
		} else {
			var k *stablehlo.Value
			if k, err = ewLiteral(ctx, dt, alpha); err == nil {
				if k, err = ctx.BroadcastTo(k, dims); err == nil {
					b, err = b.Block().Multiply(b, k)
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	var r *stablehlo.Value
	switch {
	case n.Op == fxgraph.AtenAddTensor || n.Op == fxgraph.AtenAddScalar:
		if dt == tensor.Bool {
			r, err = a.Block().Or(a, b)
		} else {
			r, err = a.Block().Add(a, b)
		}
	case dt == tensor.Bool:
		return nil, fmt.Errorf("subtraction of bool tensors is not supported")
	default:
		r, err = a.Block().Subtract(a, b)
	}
	if err != nil {
		return nil, err
	}
	return []*stablehlo.Value{r}, nil
}

// ewDivModeRule lowers div.Tensor_mode / div.Scalar_mode.
func ewDivModeRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, dims := Out(n, 0)
	mode := n.ArgOr(2, "rounding_mode", nil)
	mt := ewMathDType(dt)
	a, err := ewOperand(ctx, n, 0, "self", mt, dims)
	if err != nil {
		return nil, err
	}
	b, err := ewOperand(ctx, n, 1, "other", mt, dims)
	if err != nil {
		return nil, err
	}
	var r *stablehlo.Value
	switch {
	case dt == tensor.Bool:
		return nil, fmt.Errorf("division of bool tensors is not supported")
	case mode == nil:
		r, err = a.Block().Divide(a, b)
	case mode == "trunc" && dt.IsInt():
		r, err = a.Block().Divide(a, b)
	case mode == "floor" && dt.IsUnsigned():
		r, err = a.Block().Divide(a, b)
	case mode == "floor" && dt.IsInt():
		r, err = ewFloorAdjust(ctx, a, b, false)
	case mode == "trunc":
		if r, err = a.Block().Divide(a, b); err == nil {
			r, err = ewTrunc(ctx, r)
		}
	case mode == "floor":
		if r, err = a.Block().Divide(a, b); err == nil {
			r, err = r.Block().Floor(r)
		}
	default:
		return nil, fmt.Errorf("rounding_mode %s not supported", fxgraph.FormatArg(mode))
	}
	if err != nil {
		return nil, err
	}
	if r, err = ctx.ConvertTo(r, dt); err != nil {
		return nil, err
	}
	return []*stablehlo.Value{r}, nil
}

// ewWhereRule lowers where.self and its scalar overloads.
func ewWhereRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, dims := Out(n, 0)
	cn, err := n.InputNode(0)
	if err != nil {
		return nil, err
	}
	c, err := ctx.Value(cn)
	if err != nil {
		return nil, err
	}
	if c, err = ewToBool(ctx, c); err != nil {
		return nil, err
	}
	if c, err = ctx.BroadcastTo(c, dims); err != nil {
		return nil, err
	}
	a, err := ewOperand(ctx, n, 1, "self", dt, dims)
	if err != nil {
		return nil, err
	}
	b, err := ewOperand(ctx, n, 2, "other", dt, dims)
	if err != nil {
		return nil, err
	}
	r, err := c.Block().Select(c, a, b)
	if err != nil {
		return nil, err
	}
	return []*stablehlo.Value{r}, nil
}

// ewClampRule lowers clamp.default and clamp.Tensor: min(max(x, lo), hi),
// NaN propagating, hi winning when lo > hi (as torch).
func ewClampRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, dims := Out(n, 0)
	x, err := ewOperand(ctx, n, 0, "self", dt, dims)
	if err != nil {
		return nil, err
	}
	if dt == tensor.Bool {
		return nil, fmt.Errorf("clamp of bool tensors is not supported")
	}
	if n.ArgOr(1, "min", nil) != nil {
		lo, err := ewOperand(ctx, n, 1, "min", dt, dims)
		if err != nil {
			return nil, err
		}
		if x, err = x.Block().Maximum(x, lo); err != nil {
			return nil, err
		}
	}
	if n.ArgOr(2, "max", nil) != nil {
		hi, err := ewOperand(ctx, n, 2, "max", dt, dims)
		if err != nil {
			return nil, err
		}
		if x, err = x.Block().Minimum(x, hi); err != nil {
			return nil, err
		}
	}
	return []*stablehlo.Value{x}, nil
}

// ewToCopyRule lowers _to_copy: a dtype conversion (to bool: x != 0).
func ewToCopyRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	if in[0] == nil {
		return nil, fmt.Errorf("argument 0 is not a tensor")
	}
	dt, _ := Out(n, 0)
	var r *stablehlo.Value
	var err error
	if dt == tensor.Bool {
		r, err = ewToBool(ctx, in[0])
	} else {
		r, err = ctx.ConvertTo(in[0], dt)
	}
	if err != nil {
		return nil, err
	}
	return []*stablehlo.Value{r}, nil
}

// ewViewDTypeRule lowers view.dtype (same element size) to a bitcast.
func ewViewDTypeRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	if in[0] == nil {
		return nil, fmt.Errorf("argument 0 is not a tensor")
	}
	dt, _ := Out(n, 0)
	x, err := ctx.Elem(dt)
	if err != nil {
		return nil, err
	}
	if x.Bits() != in[0].Type().Elem.Bits() {
		return nil, fmt.Errorf("view.dtype to %s changes the element size in the program (NarrowInt64?)", dt)
	}
	r, err := in[0].Block().BitcastConvert(in[0], x)
	if err != nil {
		return nil, err
	}
	return []*stablehlo.Value{r}, nil
}

// registerElementwise registers the rules of pointwise operators.
func registerElementwise(r *Registry) {
	for target, f := range ewFloatUnary {
		r.Register(target, ewFloatUnaryRule(f))
	}
	for target, f := range ewSameUnary {
		f := f
		r.Register(target, func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
			if in[0] == nil {
				return nil, fmt.Errorf("argument 0 is not a tensor")
			}
			dt, _ := Out(n, 0)
			x, err := ctx.ConvertTo(in[0], dt)
			if err != nil {
				return nil, err
			}
			y, err := f(ctx, n, x, dt)
			if err != nil {
				return nil, err
			}
			return []*stablehlo.Value{y}, nil
		})
	}
	for target, f := range ewBoolUnary {
		f := f
		r.Register(target, func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
			if in[0] == nil {
				return nil, fmt.Errorf("argument 0 is not a tensor")
			}
			dt, _, err := InMeta(n, 0)
			if err != nil {
				return nil, err
			}
			y, err := f(ctx, in[0], dt)
			if err != nil {
				return nil, err
			}
			return []*stablehlo.Value{y}, nil
		})
	}
	for target, b := range ewBinaryRules {
		r.Register(target, ewBinaryRule(b))
	}
	for _, op := range fxgraph.Ops() { // .Scalar overloads lower like their .Tensor twin
		if op.Twin == nil {
			continue
		}
		rule, ok := r.Lookup(op.Twin)
		if !ok {
			panic("lower: " + op.Name + " has twin " + op.Twin.Name + ", which has no rule yet")
		}
		r.Register(op, rule)
	}
	for _, t := range []*fxgraph.Op{fxgraph.AtenAddTensor, fxgraph.AtenAddScalar, fxgraph.AtenSubTensor, fxgraph.AtenSubScalar, fxgraph.AtenRsubTensor, fxgraph.AtenRsubScalar} {
		r.Register(t, ewAddRule)
	}
	r.Register(fxgraph.AtenDivTensorMode, ewDivModeRule)
	r.Register(fxgraph.AtenDivScalarMode, ewDivModeRule)
	for _, t := range []*fxgraph.Op{fxgraph.AtenWhereSelf, fxgraph.AtenWhereScalarSelf, fxgraph.AtenWhereScalarOther, fxgraph.AtenWhereScalar} {
		r.Register(t, ewWhereRule)
	}
	r.Register(fxgraph.AtenClamp, ewClampRule)
	r.Register(fxgraph.AtenClampTensor, ewClampRule)
	r.Register(fxgraph.Aten_ToCopy, ewToCopyRule)
	r.Register(fxgraph.AtenViewDtype, ewViewDTypeRule)
}
