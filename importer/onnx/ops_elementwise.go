package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Pointwise ONNX operators. ONNX requires identical input dtypes where ATen
// promotes, so the IR nodes emitted here compute in the inputs' dtype; where
// ATen's result dtype differs from ONNX's (true division of integers,
// float-valued functions of integers, Pow with mixed dtypes) the converter
// picks another ATen overload or casts back.

// ewCastTo converts n to dt with aten._to_copy when its dtype differs.
func ewCastTo(c *Ctx, n *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	if Meta(n).DType == dt {
		return n, nil
	}
	return c.EmitKw(fxgraph.Aten_ToCopy, []any{n}, map[string]any{"dtype": dt})
}

// ewNoString rejects string tensors, which no pointwise op computes on.
func ewNoString(n *fxgraph.Node) error {
	if Meta(n).DType == tensor.String {
		return Unsupported("string tensors")
	}
	return nil
}

// ewUnary converts a one-input op to target, cast back to the input dtype
// when ATen's result dtype differs (e.g. erf of an integer tensor).
func ewUnary(target *fxgraph.Op) Converter {
	return func(c *Ctx, _ *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		if err := ewNoString(x); err != nil {
			return err
		}
		y, err := c.Emit(target, x)
		if err != nil {
			return err
		}
		if y, err = ewCastTo(c, y, Meta(x).DType); err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// ewPredicate converts a one-input op with a bool result.
func ewPredicate(target *fxgraph.Op) Converter {
	return func(c *Ctx, _ *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		if err := ewNoString(x); err != nil {
			return err
		}
		y, err := c.Emit(target, x)
		if err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// ewBinaryInputs returns the two inputs of a binary op, applying the legacy
// broadcast/axis attributes of opsets before 7 (B aligned with A from axis).
func ewBinaryInputs(c *Ctx) (a, b *fxgraph.Node, err error) {
	if a, err = c.Input(0); err != nil {
		return nil, nil, err
	}
	if b, err = c.Input(1); err != nil {
		return nil, nil, err
	}
	if err := ewNoString(a); err != nil {
		return nil, nil, err
	}
	if err := ewNoString(b); err != nil {
		return nil, nil, err
	}
	if c.Opset >= 7 || c.AttrInt("broadcast", 0) == 0 || c.Attr("axis") == nil {
		return a, b, nil
	}
	ra, rb := Meta(a).Rank(), Meta(b).Rank()
	axis := c.AttrInt("axis", 0)
	if axis < 0 {
		axis += int64(ra)
	}
	if axis < 0 || axis+int64(rb) > int64(ra) {
		return nil, nil, fmt.Errorf("broadcast axis %d does not fit ranks %d and %d", c.AttrInt("axis", 0), ra, rb)
	}
	// Numpy broadcasting aligns trailing dims: append size-1 dims to B.
	for i := axis + int64(rb); i < int64(ra); i++ {
		if b, err = c.Emit(fxgraph.AtenUnsqueeze, b, int64(-1)); err != nil {
			return nil, nil, err
		}
	}
	return a, b, nil
}

// ewBinary converts a two-input op whose ATen result has the ONNX dtype.
func ewBinary(target *fxgraph.Op) Converter {
	return func(c *Ctx, _ *Node) error {
		a, b, err := ewBinaryInputs(c)
		if err != nil {
			return err
		}
		y, err := c.Emit(target, a, b)
		if err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// ewDiv converts Div: true division for floats, truncating division for
// integers (ONNX integer Div rounds toward zero).
func ewDiv(c *Ctx, _ *Node) error {
	a, b, err := ewBinaryInputs(c)
	if err != nil {
		return err
	}
	var y *fxgraph.Node
	if dt := Meta(a).DType; dt.IsInt() || dt == tensor.Bool {
		y, err = c.EmitKw(fxgraph.AtenDivTensorMode, []any{a, b}, map[string]any{"rounding_mode": "trunc"})
	} else {
		y, err = c.Emit(fxgraph.AtenDivTensor, a, b)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewPow converts Pow: the result has the base's dtype (opset 12 allows a
// different exponent dtype). An integer base with a float exponent is
// computed in float64 and truncated, as the ONNX reference does.
func ewPow(c *Ctx, _ *Node) error {
	a, b, err := ewBinaryInputs(c)
	if err != nil {
		return err
	}
	dt := Meta(a).DType
	base := a
	if (dt.IsInt() || dt == tensor.Bool) && Meta(b).DType.IsFloat() {
		if base, err = ewCastTo(c, a, tensor.Float64); err != nil {
			return err
		}
	}
	y, err := c.Emit(fxgraph.AtenPowTensorTensor, base, b)
	if err != nil {
		return err
	}
	if y, err = ewCastTo(c, y, dt); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewMod converts Mod: fmod=0 is the floor modulo (sign of the divisor,
// aten.remainder), fmod=1 the truncated one (sign of the dividend, aten.fmod).
func ewMod(c *Ctx, _ *Node) error {
	a, b, err := ewBinaryInputs(c)
	if err != nil {
		return err
	}
	target := fxgraph.AtenRemainderTensor
	switch c.AttrInt("fmod", 0) {
	case 0:
	case 1:
		target = fxgraph.AtenFmodTensor
	default:
		return fmt.Errorf("fmod must be 0 or 1, got %d", c.AttrInt("fmod", 0))
	}
	y, err := c.Emit(target, a, b)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewBitShift converts BitShift (direction LEFT or RIGHT; unsigned inputs).
func ewBitShift(c *Ctx, _ *Node) error {
	var target *fxgraph.Op
	switch d := c.AttrString("direction", ""); d {
	case "LEFT":
		target = fxgraph.AtenBitwiseLeftShiftTensor
	case "RIGHT":
		target = fxgraph.AtenBitwiseRightShiftTensor
	default:
		return fmt.Errorf("direction must be LEFT or RIGHT, got %q", d)
	}
	return ewBinary(target)(c, nil)
}

// ewVariadic converts Max, Min and Sum: a chain of binary ops over all
// inputs (with broadcasting); Mean divides the sum by the input count.
func ewVariadic(target *fxgraph.Op, mean bool) Converter {
	return func(c *Ctx, _ *Node) error {
		ins, err := c.Inputs()
		if err != nil {
			return err
		}
		if len(ins) == 0 {
			return fmt.Errorf("needs at least one input")
		}
		y := ins[0]
		if err := ewNoString(y); err != nil {
			return err
		}
		for _, x := range ins[1:] {
			if y, err = c.Emit(target, y, x); err != nil {
				return err
			}
		}
		if mean && len(ins) > 1 {
			dt := Meta(y).DType
			if !dt.IsFloat() {
				return Unsupported("Mean of %s tensors", dt)
			}
			if y, err = c.Emit(fxgraph.AtenDivScalar, y, float64(len(ins))); err != nil {
				return err
			}
		}
		c.SetOutput(0, y)
		return nil
	}
}

// ewScalarLit returns v as a literal of the kind that keeps x's dtype in
// ATen's promotion: an int for integer tensors, a float otherwise.
func ewScalarLit(x *fxgraph.Node, v float64) any {
	if dt := Meta(x).DType; dt.IsInt() || dt == tensor.Bool {
		return int64(v)
	}
	return v
}

// ewClip converts Clip: min/max attributes before opset 11, optional
// (scalar tensor) inputs from 11 on. No bound at all is the identity.
func ewClip(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if err := ewNoString(x); err != nil {
		return err
	}
	var lo, hi any
	target := fxgraph.AtenClampTensor
	if c.Opset < 11 {
		target = fxgraph.AtenClamp
		if v := c.AttrFloat("min", math.Inf(-1)); !math.IsInf(v, -1) {
			lo = ewScalarLit(x, v)
		}
		if v := c.AttrFloat("max", math.Inf(1)); !math.IsInf(v, 1) {
			hi = ewScalarLit(x, v)
		}
	} else {
		for i, dst := range []*any{&lo, &hi} {
			b, err := c.OptInput(i + 1)
			if err != nil {
				return err
			}
			if b == nil {
				continue
			}
			if Meta(b).DType != Meta(x).DType {
				return fmt.Errorf("bound %d has dtype %s, the input %s", i+1, Meta(b).DType, Meta(x).DType)
			}
			*dst = b
		}
	}
	if lo == nil && hi == nil {
		c.SetOutput(0, x)
		return nil
	}
	y, err := c.Emit(target, x, lo, hi)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewWhere converts Where(condition, X, Y).
func ewWhere(c *Ctx, _ *Node) error {
	cond, err := c.Input(0)
	if err != nil {
		return err
	}
	a, err := c.Input(1)
	if err != nil {
		return err
	}
	b, err := c.Input(2)
	if err != nil {
		return err
	}
	if err := ewNoString(a); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenWhereSelf, cond, a, b)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewEqual converts Equal: aten.eq, or for strings (opset 19 on) a host
// comparison.
func ewEqual(c *Ctx, n *Node) error {
	if a, err := c.Input(0); err == nil && Meta(a).DType == tensor.String {
		return stringBinaryConvert(fxgraph.XserveStringEqual)(c, n)
	}
	return ewBinary(fxgraph.AtenEqTensor)(c, n)
}

// ewCastDType maps Cast's "to" code to a dtype; string and the types
// without an IR dtype are Unsupported.
func ewCastDType(code int64) (tensor.DType, error) {
	dt, err := DType(int32(code))
	if err != nil {
		return tensor.Invalid, Unsupported("cast to %s", onnxTypeName(int32(code)))
	}
	return dt, nil
}

// ewCast emits the conversion of x to dt: aten._to_copy (round to nearest
// even for floats, truncation toward zero for float to integer, x != 0 for
// bool), with ONNX's rules for the 8- and 4-bit types (castNarrow).
func ewCast(c *Ctx, x *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	src := Meta(x).DType
	if src == tensor.String || dt == tensor.String {
		return stringCast(c, x, dt)
	}
	if src == dt {
		return x, nil
	}
	if y, ok, err := castNarrow(c, x, dt); ok || err != nil {
		return y, err
	}
	return ewCastTo(c, x, dt)
}

// ewCastConv converts Cast(to).
func ewCastConv(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if c.Attr("to") == nil {
		return fmt.Errorf("attribute to is required")
	}
	dt, err := ewCastDType(c.AttrInt("to", 0))
	if err != nil {
		return err
	}
	y, err := ewCast(c, x, dt)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewCastLike converts CastLike(input, target_type).
func ewCastLike(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	like, err := c.Input(1)
	if err != nil {
		return err
	}
	y, err := ewCast(c, x, Meta(like).DType)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewIdentity binds the output to the input.
func ewIdentity(c *Ctx, _ *Node) error {
	x, err := c.AnyInput(0) // a tensor, a sequence or an optional
	if err != nil {
		return err
	}
	c.SetOutput(0, x)
	return nil
}

// ewAllTrue returns a bool tensor of x's shape full of true.
func ewAllTrue(c *Ctx, x *fxgraph.Node) (*fxgraph.Node, error) {
	m := Meta(x)
	if dims, ok := m.Shape.Static(); ok {
		t := tensor.New(tensor.Bool, dims...)
		for i := range t.Data {
			t.Data[i] = 1
		}
		return c.Constant("dropout_mask", t), nil
	}
	// b == b of a bool view of x is true everywhere, whatever x holds.
	b, err := ewCastTo(c, x, tensor.Bool)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenEqTensor, b, b)
}

// ewDropout converts Dropout. In inference mode it is the identity, with
// an all-true mask (or all-ones of the input dtype before opset 10) when the
// mask output is requested. Training mode, or a training_mode known only at
// run time, draws random numbers (rndDropout).
func ewDropout(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	training := false
	var trainingNode *fxgraph.Node // a training_mode computed at run time
	ratio := float64(c.AttrFloat("ratio", 0.5))
	var ratioNode *fxgraph.Node
	switch {
	case c.Opset < 7:
		training = c.AttrInt("is_test", 0) == 0
	case c.Opset >= 12:
		if c.HasInput(2) {
			if t := c.Const(2); t != nil {
				training = t.NumElements() > 0 && t.Int64At(0) != 0
			} else if trainingNode, err = c.Input(2); err != nil {
				return err
			}
		}
		if c.HasInput(1) {
			if t := c.Const(1); t != nil && t.NumElements() > 0 {
				ratio = t.Float64At(0)
			} else if ratioNode, err = c.Input(1); err != nil {
				return err
			}
		}
	}
	if trainingNode != nil || training && (ratio != 0 || ratioNode != nil) {
		if ratioNode == nil {
			ratioNode = c.ScalarConst(Meta(x).DType, ratio)
		}
		if c.Opset < 10 && c.HasOutput(1) {
			return Unsupported("Dropout in training mode with a mask output before opset 10")
		}
		return rndDropout(c, x, ratioNode, trainingNode)
	}
	c.SetOutput(0, x)
	if c.HasOutput(1) {
		mask, err := ewAllTrue(c, x)
		if err != nil {
			return err
		}
		if c.Opset < 10 {
			if mask, err = ewCastTo(c, mask, Meta(x).DType); err != nil {
				return err
			}
		}
		c.SetOutput(1, mask)
	}
	return nil
}

// ewActivation emits target(x, args...) for an activation, cast back to the
// input dtype.
func ewActivation(c *Ctx, target *fxgraph.Op, args func(c *Ctx) []any) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if err := ewNoString(x); err != nil {
		return err
	}
	y, err := c.Emit(target, append([]any{x}, args(c)...)...)
	if err != nil {
		return err
	}
	if y, err = ewCastTo(c, y, Meta(x).DType); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

func ewLeakyRelu(c *Ctx, _ *Node) error {
	return ewActivation(c, fxgraph.AtenLeakyRelu, func(c *Ctx) []any {
		return []any{c.AttrFloat("alpha", float64(float32(0.01)))}
	})
}

func ewElu(c *Ctx, _ *Node) error {
	return ewActivation(c, fxgraph.AtenElu, func(c *Ctx) []any {
		return []any{c.AttrFloat("alpha", 1)}
	})
}

// ewSelu is elu with alpha and scale gamma.
func ewSelu(c *Ctx, _ *Node) error {
	return ewActivation(c, fxgraph.AtenElu, func(c *Ctx) []any {
		return []any{
			c.AttrFloat("alpha", float64(float32(1.67326319217681884765625))),
			c.AttrFloat("gamma", float64(float32(1.05070102214813232421875))),
		}
	})
}

// ewCelu is torch's celu decomposition: elu(x, alpha, 1, 1/alpha).
func ewCelu(c *Ctx, _ *Node) error {
	alpha := c.AttrFloat("alpha", 1)
	if alpha == 0 {
		return fmt.Errorf("alpha must be non-zero")
	}
	return ewActivation(c, fxgraph.AtenElu, func(c *Ctx) []any {
		return []any{alpha, 1.0, 1 / alpha}
	})
}

func ewThresholdedRelu(c *Ctx, _ *Node) error {
	return ewActivation(c, fxgraph.AtenThreshold, func(c *Ctx) []any {
		return []any{c.AttrFloat("alpha", 1), 0.0}
	})
}

func ewGelu(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	approx := c.AttrString("approximate", "none")
	if approx != "none" && approx != "tanh" {
		return Unsupported("Gelu approximate=%q", approx)
	}
	y, err := c.EmitKw(fxgraph.AtenGelu, []any{x}, map[string]any{"approximate": approx})
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewHardSigmoid is clamp(alpha*x + beta, 0, 1) (ONNX's default alpha 0.2
// differs from torch's hardsigmoid).
func ewHardSigmoid(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	alpha := c.AttrFloat("alpha", float64(float32(0.2)))
	beta := c.AttrFloat("beta", 0.5)
	y, err := c.Emit(fxgraph.AtenMulScalar, x, alpha)
	if err != nil {
		return err
	}
	if y, err = c.Emit(fxgraph.AtenAddScalar, y, beta); err != nil {
		return err
	}
	if y, err = c.Emit(fxgraph.AtenClamp, y, 0.0, 1.0); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewSoftsign is x / (1 + |x|).
func ewSoftsign(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	a, err := c.Emit(fxgraph.AtenAbs, x)
	if err != nil {
		return err
	}
	if a, err = c.Emit(fxgraph.AtenAddScalar, a, 1.0); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenDivTensor, x, a)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewPRelu is where(x < 0, x * slope, x), slope broadcasting to x.
func ewPRelu(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	slope, err := c.Input(1)
	if err != nil {
		return err
	}
	// Opsets before 7 accept a 1-D slope over the channel dim (dim 1).
	if sm, xm := Meta(slope), Meta(x); c.Opset < 7 && sm.Rank() == 1 && xm.Rank() > 2 && !(sm.Shape[0] == fxgraph.D(1)) {
		for i := 2; i < xm.Rank(); i++ {
			if slope, err = c.Emit(fxgraph.AtenUnsqueeze, slope, int64(-1)); err != nil {
				return err
			}
		}
	}
	neg, err := c.Emit(fxgraph.AtenLtScalar, x, ewScalarLit(x, 0))
	if err != nil {
		return err
	}
	m, err := c.Emit(fxgraph.AtenMulTensor, x, slope)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenWhereSelf, neg, m, x)
	if err != nil {
		return err
	}
	if !Meta(y).Shape.Equal(Meta(x).Shape) && Meta(y).Shape.IsStatic() && Meta(x).Shape.IsStatic() {
		return fmt.Errorf("slope %s does not broadcast to input %s", Meta(slope).Shape, Meta(x).Shape)
	}
	c.SetOutput(0, y)
	return nil
}

// ewShrink is where(x < -lambd, x + bias, where(x > lambd, x - bias, 0)).
func ewShrink(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if err := ewNoString(x); err != nil {
		return err
	}
	lambd := c.AttrFloat("lambd", 0.5)
	bias := c.AttrFloat("bias", 0)
	dt := Meta(x).DType
	lo, err := c.Emit(fxgraph.AtenLtScalar, x, -lambd)
	if err != nil {
		return err
	}
	hi, err := c.Emit(fxgraph.AtenGtScalar, x, lambd)
	if err != nil {
		return err
	}
	plus, err := c.Emit(fxgraph.AtenAddScalar, x, ewScalarLit(x, bias))
	if err != nil {
		return err
	}
	minus, err := c.Emit(fxgraph.AtenSubScalar, x, ewScalarLit(x, bias))
	if err != nil {
		return err
	}
	zero := c.ScalarConst(dt, 0)
	inner, err := c.Emit(fxgraph.AtenWhereSelf, hi, minus, zero)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenWhereSelf, lo, plus, inner)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewSign is sign(x), keeping NaN (ONNX follows numpy; torch.sign(NaN) is 0).
func ewSign(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if err := ewNoString(x); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenSign, x)
	if err != nil {
		return err
	}
	if Meta(x).DType.IsFloat() {
		nan, err := c.Emit(fxgraph.AtenIsnan, x)
		if err != nil {
			return err
		}
		if y, err = c.Emit(fxgraph.AtenWhereSelf, nan, x, y); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	return nil
}

// ewIsInf converts IsInf(detect_positive, detect_negative).
func ewIsInf(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if err := ewNoString(x); err != nil {
		return err
	}
	pos, neg := c.AttrInt("detect_positive", 1) != 0, c.AttrInt("detect_negative", 1) != 0
	var y *fxgraph.Node
	switch {
	case pos && neg:
		y, err = c.Emit(fxgraph.AtenIsinf, x)
	case pos:
		y, err = c.Emit(fxgraph.AtenEqScalar, x, math.Inf(1))
	case neg:
		y, err = c.Emit(fxgraph.AtenEqScalar, x, math.Inf(-1))
	default: // detects nothing: b != b of a bool is false everywhere
		var b *fxgraph.Node
		if b, err = c.Emit(fxgraph.AtenIsinf, x); err == nil {
			y, err = c.Emit(fxgraph.AtenNeTensor, b, b)
		}
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// registerElementwise registers converters of pointwise ONNX operators.
func registerElementwise(cs converters) {
	for op, target := range map[string]*fxgraph.Op{
		"Neg": fxgraph.AtenNeg, "Abs": fxgraph.AtenAbs, "Exp": fxgraph.AtenExp,
		"Log": fxgraph.AtenLog, "Sqrt": fxgraph.AtenSqrt, "Reciprocal": fxgraph.AtenReciprocal,
		"Sin": fxgraph.AtenSin, "Cos": fxgraph.AtenCos, "Tan": fxgraph.AtenTan,
		"Asin": fxgraph.AtenAsin, "Acos": fxgraph.AtenAcos, "Atan": fxgraph.AtenAtan,
		"Sinh": fxgraph.AtenSinh, "Cosh": fxgraph.AtenCosh, "Asinh": fxgraph.AtenAsinh,
		"Acosh": fxgraph.AtenAcosh, "Atanh": fxgraph.AtenAtanh, "Tanh": fxgraph.XserveORTTanh,
		"Sigmoid": fxgraph.AtenSigmoid, "Relu": fxgraph.AtenRelu, "Erf": fxgraph.AtenErf,
		"Floor": fxgraph.AtenFloor, "Ceil": fxgraph.AtenCeil, "Round": fxgraph.AtenRound,
		"HardSwish": fxgraph.AtenHardswish, "Softplus": fxgraph.AtenSoftplus,
		"Mish": fxgraph.AtenMish, "BitwiseNot": fxgraph.AtenBitwiseNot,
	} {
		cs.add(op, ewUnary(target))
	}
	cs.add("Not", ewPredicate(fxgraph.AtenLogicalNot))
	cs.add("IsNaN", ewPredicate(fxgraph.AtenIsnan))
	cs.add("IsInf", ewIsInf)
	cs.add("Sign", ewSign)
	for op, target := range map[string]*fxgraph.Op{
		"Add": fxgraph.AtenAddTensor, "Sub": fxgraph.AtenSubTensor, "Mul": fxgraph.AtenMulTensor,
		"Less": fxgraph.AtenLtTensor, "LessOrEqual": fxgraph.AtenLeTensor,
		"Greater": fxgraph.AtenGtTensor, "GreaterOrEqual": fxgraph.AtenGeTensor,
		"BitwiseAnd": fxgraph.AtenBitwiseAndTensor, "BitwiseOr": fxgraph.AtenBitwiseOrTensor,
		"BitwiseXor": fxgraph.AtenBitwiseXorTensor,
	} {
		cs.add(op, ewBinary(target))
	}
	cs.add("Equal", ewEqual)
	cs.add("And", ewBinary(fxgraph.AtenLogicalAnd))
	cs.add("Or", ewBinary(fxgraph.AtenLogicalOr))
	cs.add("Xor", ewBinary(fxgraph.AtenLogicalXor))
	cs.add("Div", ewDiv)
	cs.add("Pow", ewPow)
	cs.add("Mod", ewMod)
	cs.add("BitShift", ewBitShift)
	cs.add("Max", ewVariadic(fxgraph.AtenMaximum, false))
	cs.add("Min", ewVariadic(fxgraph.AtenMinimum, false))
	cs.add("Sum", ewVariadic(fxgraph.AtenAddTensor, false))
	cs.add("Mean", ewVariadic(fxgraph.AtenAddTensor, true))
	cs.add("Clip", ewClip)
	cs.add("Where", ewWhere)
	cs.add("Cast", ewCastConv)
	cs.add("CastLike", ewCastLike)
	cs.add("Identity", ewIdentity)
	cs.add("Dropout", ewDropout)
	cs.add("LeakyRelu", ewLeakyRelu)
	cs.add("Elu", ewElu)
	cs.add("Selu", ewSelu)
	cs.add("Celu", ewCelu)
	cs.add("ThresholdedRelu", ewThresholdedRelu)
	cs.add("Gelu", ewGelu)
	cs.add("HardSigmoid", ewHardSigmoid)
	cs.add("Softsign", ewSoftsign)
	cs.add("PRelu", ewPRelu)
	cs.add("Shrink", ewShrink)
}
