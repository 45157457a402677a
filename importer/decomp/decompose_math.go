package decomp

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Pointwise and reduction operators of the full ATen surface, each a small
// formula over IR operators (the formulas of torch/_refs and
// torch/_decomp, written out here).

// expr emits a chain of IR operators on behalf of a call, keeping the first
// error, so that a formula reads as one expression per line.
type expr struct {
	c   *Call
	err error
}

// op emits target(args...).
func (e *expr) op(target *fxgraph.Op, args ...any) *fxgraph.Node {
	return e.opKw(target, nil, args...)
}

// opKw emits target(args..., **kw).
func (e *expr) opKw(target *fxgraph.Op, kw map[string]any, args ...any) *fxgraph.Node {
	if e.err != nil {
		return nil
	}
	n, err := e.c.emit("", target, args, kw)
	e.err = err
	return n
}

// formula is a decomposition written as an expression of the call's
// arguments: it returns the output nodes in order.
type formula func(c *Call, e *expr) ([]*fxgraph.Node, error)

// decFormula runs f and binds its outputs.
func decFormula(f formula) Func {
	return func(c *Call) error {
		e := &expr{c: c}
		outs, err := f(c, e)
		if err == nil {
			err = e.err
		}
		if err != nil {
			return err
		}
		for i, n := range outs {
			if i >= len(c.Outs) {
				break
			}
			if err := c.bind(i, n); err != nil {
				return err
			}
		}
		return nil
	}
}

// unary is a formula of self alone.
func unary(f func(c *Call, e *expr, x *fxgraph.Node) *fxgraph.Node) Func {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{f(c, e, x)}, nil
	})
}

// binary is a formula of self and a second tensor argument.
func binary(other string, f func(c *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node) Func {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		y, ok := c.arg(other).(*fxgraph.Node)
		if !ok {
			// torch.export passes a Python number where the schema says
			// Tensor (x // 0.3): a rank-0 constant of x's dtype.
			v, isNum := fxgraph.AsFloat(c.arg(other))
			if !isNum {
				return nil, c.errorf(ErrFormat, "argument %s is %s, want a tensor or a number", other, fxgraph.FormatArg(c.arg(other)))
			}
			y = c.scalarConst(x.Val().DType, v)
		}
		return []*fxgraph.Node{f(c, e, x, y)}, nil
	})
}

// number returns a number argument or its default (def when absent or None).
func (c *Call) number(name string, def float64) any {
	v := c.arg(name)
	if v == nil {
		return def
	}
	return v
}

var mathDecompositions = map[*fxgraph.Op]Func{
	fxgraph.AtenSquare: unary(func(_ *Call, e *expr, x *fxgraph.Node) *fxgraph.Node { return e.op(fxgraph.AtenMulTensor, x, x) }),
	fxgraph.AtenErfc: unary(func(_ *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		return e.op(fxgraph.AtenRsubScalar, e.op(fxgraph.AtenErf, x), 1.0)
	}),
	fxgraph.AtenSgn:          decRename(fxgraph.AtenSign),
	fxgraph.AtenSpecialExpm1: decRename(fxgraph.AtenExpm1),
	fxgraph.AtenClip:         decRename(fxgraph.AtenClamp),
	fxgraph.AtenClipTensor:   decRename(fxgraph.AtenClampTensor),
	fxgraph.AtenMaxOther:     decRename(fxgraph.AtenMaximum),
	fxgraph.AtenMinOther:     decRename(fxgraph.AtenMinimum),
	fxgraph.AtenNumpyT:       decNumpyT,
	fxgraph.AtenFrac: unary(func(_ *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		return e.op(fxgraph.AtenSubTensor, x, e.op(fxgraph.AtenTrunc, x))
	}),
	fxgraph.AtenLogSigmoid: unary(func(_ *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable for large |x|.
		return e.op(fxgraph.AtenSubTensor, e.op(fxgraph.AtenClamp, x, nil, 0.0),
			e.op(fxgraph.AtenLog1p, e.op(fxgraph.AtenExp, e.op(fxgraph.AtenNeg, e.op(fxgraph.AtenAbs, x)))))
	}),
	fxgraph.AtenSelu: unary(func(_ *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		return e.op(fxgraph.AtenElu, x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0)
	}),
	fxgraph.AtenCelu: unary(func(c *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		a, ok := fxgraph.AsFloat(c.number("alpha", 1))
		if !ok || a == 0 {
			e.err = c.errorf(ErrUnsupported, "celu alpha %s", fxgraph.FormatArg(c.arg("alpha")))
			return nil
		}
		return e.op(fxgraph.AtenElu, x, a, 1.0, 1/a)
	}),
	fxgraph.AtenHardshrink: unary(func(c *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		keep := e.op(fxgraph.AtenGtScalar, e.op(fxgraph.AtenAbs, x), c.number("lambd", 0.5))
		return e.op(fxgraph.AtenWhereScalarOther, keep, x, 0.0)
	}),
	fxgraph.AtenLogit: unary(func(c *Call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		if eps, ok := fxgraph.AsFloat(c.arg("eps")); ok {
			x = e.op(fxgraph.AtenClamp, x, eps, 1-eps)
		}
		return e.op(fxgraph.AtenLog, e.op(fxgraph.AtenDivTensor, x, e.op(fxgraph.AtenRsubScalar, x, 1.0)))
	}),
	fxgraph.AtenAddcmul:    decAddc(fxgraph.AtenMulTensor),
	fxgraph.AtenAddcdiv:    decAddc(fxgraph.AtenDivTensor),
	fxgraph.AtenLerpScalar: decLerp,
	fxgraph.AtenLerpTensor: decLerp,
	fxgraph.AtenOuter: binary("vec2", func(_ *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		return e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenUnsqueeze, x, int64(1)), y)
	}),
	fxgraph.AtenHypot: binary("other", func(_ *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		return e.op(fxgraph.AtenSqrt, e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulTensor, x, x), e.op(fxgraph.AtenMulTensor, y, y)))
	}),
	fxgraph.AtenLogaddexp: binary("other", func(_ *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// max(x, y) + log1p(exp(-|x - y|))
		m := e.op(fxgraph.AtenMaximum, x, y)
		d := e.op(fxgraph.AtenNeg, e.op(fxgraph.AtenAbs, e.op(fxgraph.AtenSubTensor, x, y)))
		return e.op(fxgraph.AtenAddTensor, m, e.op(fxgraph.AtenLog1p, e.op(fxgraph.AtenExp, d)))
	}),
	fxgraph.AtenXlogyTensor: binary("other", func(_ *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// 0 where x == 0 (unless y is NaN), else x * log(y).
		p := e.op(fxgraph.AtenMulTensor, x, e.op(fxgraph.AtenLog, y))
		zero := e.op(fxgraph.AtenLogicalAnd, e.op(fxgraph.AtenEqScalar, x, 0.0), e.op(fxgraph.AtenLogicalNot, e.op(fxgraph.AtenIsnan, y)))
		return e.op(fxgraph.AtenWhereScalarSelf, zero, 0.0, p)
	}),
	fxgraph.AtenFloorDivide: binary("other", func(_ *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		return e.opKw(fxgraph.AtenDivTensorMode, map[string]any{"rounding_mode": "floor"}, x, y)
	}),
	fxgraph.AtenFloorDivideScalar: decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{e.opKw(fxgraph.AtenDivScalarMode, map[string]any{"rounding_mode": "floor"}, x, c.arg("other"))}, nil
	}),
	fxgraph.AtenIsclose: binary("other", func(c *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// |x - y| <= atol + rtol * |y|, or x == y (infinities).
		rtol, _ := fxgraph.AsFloat(c.number("rtol", 1e-5))
		atol, _ := fxgraph.AsFloat(c.number("atol", 1e-8))
		diff := e.op(fxgraph.AtenAbs, e.op(fxgraph.AtenSubTensor, x, y))
		tol := e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenAbs, y), rtol), atol)
		close := e.op(fxgraph.AtenLogicalOr, e.op(fxgraph.AtenEqTensor, x, y), e.op(fxgraph.AtenLeTensor, diff, tol))
		if eqNaN, _ := fxgraph.AsInt(c.arg("equal_nan")); eqNaN != 0 {
			close = e.op(fxgraph.AtenLogicalOr, close, e.op(fxgraph.AtenLogicalAnd, e.op(fxgraph.AtenIsnan, x), e.op(fxgraph.AtenIsnan, y)))
		}
		return close
	}),
	fxgraph.AtenGlu:                     decGLU,
	fxgraph.AtenPrelu:                   decPReLU,
	fxgraph.AtenRmsNorm:                 decRMSNorm,
	fxgraph.AtenStdDim:                  decVarDim(fxgraph.AtenStdCorrection, false),
	fxgraph.AtenVarDim:                  decVarDim(fxgraph.AtenVarCorrection, false),
	fxgraph.AtenStd:                     decVarDim(fxgraph.AtenStdCorrection, false),
	fxgraph.AtenVar:                     decVarDim(fxgraph.AtenVarCorrection, false),
	fxgraph.AtenVarMeanDim:              decVarDim(fxgraph.AtenVarCorrection, true),
	fxgraph.AtenStdMeanDim:              decVarDim(fxgraph.AtenStdCorrection, true),
	fxgraph.AtenVarMeanCorrection:       decVarDim(fxgraph.AtenVarCorrection, true),
	fxgraph.AtenStdMeanCorrection:       decVarDim(fxgraph.AtenStdCorrection, true),
	fxgraph.AtenVarMean:                 decVarDim(fxgraph.AtenVarCorrection, true),
	fxgraph.AtenStdMean:                 decVarDim(fxgraph.AtenStdCorrection, true),
	fxgraph.AtenNarrow:                  decNarrow,
	fxgraph.AtenTile:                    decTile,
	fxgraph.AtenRepeatInterleaveSelfInt: decRepeatInterleave,
	fxgraph.AtenOneHot:                  decOneHot,
	fxgraph.AtenInstanceNorm:            decInstanceNorm,
	fxgraph.AtenCosineSimilarity:        decCosineSimilarity,
	fxgraph.AtenCountNonzero:            decCountNonzero,
	fxgraph.AtenCountNonzeroDimIntList:  decCountNonzero,
	fxgraph.AtenAminmax:                 decAminmax,
	fxgraph.AtenArgsort:                 decArgsort,
	fxgraph.AtenArgsortStable:           decArgsort,
	fxgraph.AtenScatterAdd:              decScatterAdd,
	fxgraph.AtenMseLoss:                 decMSELoss,
	fxgraph.AtenBroadcastTensors:        decBroadcastTensors,
}

// decNumpyT reverses the dims (x.T).
func decNumpyT(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	r := x.Val().Rank()
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(r - 1 - i)
	}
	return c.one(fxgraph.AtenPermute, []any{x, ints64(perm)}, nil)
}

// decAddc is addcmul/addcdiv: self + value * (tensor1 op tensor2).
func decAddc(op *fxgraph.Op) Func {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		t1, err := c.tensor("tensor1")
		if err != nil {
			return nil, err
		}
		t2, err := c.tensor("tensor2")
		if err != nil {
			return nil, err
		}
		p := e.op(op, t1, t2)
		if v, ok := fxgraph.AsFloat(c.number("value", 1)); !ok || v != 1 {
			p = e.op(fxgraph.AtenMulTensor, p, c.number("value", 1))
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenAddTensor, x, p)}, nil
	})
}

// decLerp is self + weight * (end - self).
func decLerp(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		end, err := c.tensor("end")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenAddTensor, x, e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenSubTensor, end, x), c.arg("weight")))}, nil
	})(c)
}

// decGLU is a * sigmoid(b) for the two halves a, b of dim.
func decGLU(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		d, err := c.intArg("dim")
		if err != nil {
			return nil, err
		}
		k, err := fxgraph.NormDim(d, x.Val().Rank())
		if err != nil {
			return nil, c.errorf(ErrFormat, "glu dim %d of %s", d, x.Val())
		}
		size := x.Val().Shape[k]
		if !size.IsStatic() || size.Size%2 != 0 {
			return nil, c.errorf(ErrUnsupported, "glu along dim %d of %s (want a static even size)", k, x.Val())
		}
		h := size.Size / 2
		a := e.op(fxgraph.AtenSliceTensor, x, int64(k), int64(0), h, int64(1))
		b := e.op(fxgraph.AtenSliceTensor, x, int64(k), h, size.Size, int64(1))
		return []*fxgraph.Node{e.op(fxgraph.AtenMulTensor, a, e.op(fxgraph.AtenSigmoid, b))}, nil
	})(c)
}

// decPReLU is where(x > 0, x, weight * x), weight per channel (dim 1).
func decPReLU(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		w, err := c.tensor("weight")
		if err != nil {
			return nil, err
		}
		if r := x.Val().Rank(); r >= 2 && w.Val().Rank() == 1 {
			shape := []any{int64(-1)}
			for i := 2; i < r; i++ {
				shape = append(shape, int64(1))
			}
			w = e.op(fxgraph.AtenReshape, w, shape)
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenWhereSelf, e.op(fxgraph.AtenGtScalar, x, 0.0), x, e.op(fxgraph.AtenMulTensor, x, w))}, nil
	})(c)
}

// decRMSNorm is x * rsqrt(mean(x^2 over the normalized dims) + eps) *
// weight, computed in float32 at least; eps defaults to the dtype's
// machine epsilon.
func decRMSNorm(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("input")
		if err != nil {
			return nil, err
		}
		ns, err := c.ints("normalized_shape", 0)
		if err != nil {
			return nil, err
		}
		w, err := c.optTensor("weight")
		if err != nil {
			return nil, err
		}
		dt := x.Val().DType
		eps, ok := fxgraph.AsFloat(c.arg("eps"))
		if !ok {
			eps = machineEps(dt)
		}
		r := x.Val().Rank()
		dims := make([]int64, len(ns))
		for i := range dims {
			dims[i] = int64(r - len(ns) + i)
		}
		xf := x
		if dt == tensor.Float16 || dt == tensor.BFloat16 {
			xf = e.opKw(fxgraph.Aten_ToCopy, map[string]any{"dtype": tensor.Float32}, x)
		}
		ms := e.op(fxgraph.AtenMeanDim, e.op(fxgraph.AtenMulTensor, xf, xf), ints64(dims), true)
		y := e.op(fxgraph.AtenMulTensor, xf, e.op(fxgraph.AtenRsqrt, e.op(fxgraph.AtenAddTensor, ms, eps)))
		if xf != x {
			y = e.opKw(fxgraph.Aten_ToCopy, map[string]any{"dtype": dt}, y)
		}
		if w != nil {
			y = e.op(fxgraph.AtenMulTensor, y, w)
		}
		return []*fxgraph.Node{y}, nil
	})(c)
}

// machineEps is torch.finfo(dt).eps.
func machineEps(dt tensor.DType) float64 {
	switch dt {
	case tensor.Float16:
		return 0.0009765625
	case tensor.BFloat16:
		return 0.0078125
	case tensor.Float64:
		return 2.220446049250313e-16
	}
	return 1.1920928955078125e-07
}

// decVarDim maps var/std with unbiased (the .dim and .default overloads)
// or correction to the IR's .correction form; withMean adds the mean as a
// second output (var_mean, std_mean).
func decVarDim(target *fxgraph.Op, withMean bool) Func {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		var corr any = int64(1)
		if v := c.arg("correction"); v != nil {
			corr = v
		} else if u, ok := fxgraph.AsInt(c.arg("unbiased")); ok && u == 0 {
			corr = int64(0)
		}
		keep := false
		if k, ok := fxgraph.AsInt(c.arg("keepdim")); ok {
			keep = k != 0
		}
		dims := c.arg("dim")
		kw := map[string]any{"correction": corr, "keepdim": keep}
		v := e.opKw(target, kw, x, dims)
		if !withMean {
			return []*fxgraph.Node{v}, nil
		}
		mdims := dims
		if mdims == nil {
			all := make([]int64, x.Val().Rank())
			for i := range all {
				all[i] = int64(i)
			}
			mdims = ints64(all)
		}
		return []*fxgraph.Node{v, e.op(fxgraph.AtenMeanDim, x, mdims, keep)}, nil
	})
}

// decNarrow is slice(dim, start, start + length).
func decNarrow(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	start, ok1 := fxgraph.AsInt(c.arg("start"))
	length, ok2 := fxgraph.AsInt(c.arg("length"))
	if !ok1 || !ok2 {
		return c.errorf(ErrUnsupported, "narrow with symbolic start %s or length %s", fxgraph.FormatArg(c.arg("start")), fxgraph.FormatArg(c.arg("length")))
	}
	if start < 0 {
		k, err := fxgraph.NormDim(d, x.Val().Rank())
		if err != nil || !x.Val().Shape[k].IsStatic() {
			return c.errorf(ErrUnsupported, "narrow with negative start %d along dim %d of %s", start, d, x.Val())
		}
		start += x.Val().Shape[k].Size
	}
	return c.one(fxgraph.AtenSliceTensor, []any{x, d, start, start + length, int64(1)}, nil)
}

// decTile is repeat with the dims padded with leading ones to x's rank (or
// x padded with leading size-1 dims to the dims' length).
func decTile(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	dims, err := c.ints("dims", 0)
	if err != nil {
		return err
	}
	r := x.Val().Rank()
	for len(dims) < r {
		dims = append([]int64{1}, dims...)
	}
	return c.one(fxgraph.AtenRepeat, []any{x, ints64(dims)}, nil)
}

// decRepeatInterleave repeats each element repeats times along dim (the
// flattened tensor without dim): unsqueeze, expand, reshape.
func decRepeatInterleave(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		n, ok := fxgraph.AsInt(c.arg("repeats"))
		if !ok {
			return nil, c.errorf(ErrUnsupported, "repeat_interleave with symbolic repeats %s", fxgraph.FormatArg(c.arg("repeats")))
		}
		var k int
		if c.arg("dim") == nil {
			x = e.op(fxgraph.AtenReshape, x, []any{int64(-1)})
			if e.err != nil {
				return nil, e.err
			}
		} else {
			d, _ := fxgraph.AsInt(c.arg("dim"))
			if k, err = fxgraph.NormDim(d, x.Val().Rank()); err != nil {
				return nil, c.errorf(ErrFormat, "repeat_interleave dim %d of %s", d, x.Val())
			}
		}
		dims, err := c.dims(x)
		if err != nil {
			return nil, err
		}
		u := e.op(fxgraph.AtenUnsqueeze, x, int64(k+1))
		exp := append(append(append([]any{}, dims[:k+1]...), n), dims[k+1:]...)
		y := e.op(fxgraph.AtenExpand, u, exp)
		m, err := c.product([]any{dims[k], n})
		if err != nil {
			return nil, err
		}
		shape := append(append(append([]any{}, dims[:k]...), m), dims[k+1:]...)
		return []*fxgraph.Node{e.op(fxgraph.AtenReshape, y, shape)}, nil
	})(c)
}

// decOneHot is (x[..., None] == arange(num_classes)) as int64.
func decOneHot(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		n, err := c.intArg("num_classes")
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, c.errorf(ErrUnsupported, "one_hot without num_classes (the class count would depend on the data)")
		}
		classes := make([]int64, n)
		for i := range classes {
			classes[i] = int64(i)
		}
		ar := c.constant("one_hot_classes", tensor.FromInt64s(classes))
		eq := e.op(fxgraph.AtenEqTensor, e.op(fxgraph.AtenUnsqueeze, x, int64(-1)), ar)
		return []*fxgraph.Node{e.opKw(fxgraph.Aten_ToCopy, map[string]any{"dtype": tensor.Int64}, eq)}, nil
	})(c)
}

// decInstanceNorm normalizes each (sample, channel) over its spatial dims:
// native_group_norm with one group per channel.
func decInstanceNorm(c *Call) error {
	x, err := c.tensor("input")
	if err != nil {
		return err
	}
	use, err := c.boolArg("use_input_stats")
	if err != nil {
		return err
	}
	if !use {
		return c.errorf(ErrUnsupported, "instance_norm with running statistics (track_running_stats=True in eval mode)")
	}
	w, err := c.optTensor("weight")
	if err != nil {
		return err
	}
	b, err := c.optTensor("bias")
	if err != nil {
		return err
	}
	eps, err := c.floatArg("eps")
	if err != nil {
		return err
	}
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	if len(dims) < 3 || !isInt(dims[1]) {
		return c.errorf(ErrUnsupported, "instance_norm of %s (want N, C static, spatial dims)", x.Val())
	}
	hw, err := c.product(dims[2:])
	if err != nil {
		return err
	}
	return c.item(fxgraph.AtenNativeGroupNorm, []any{x, nilIfNone(w), nilIfNone(b), dims[0], dims[1], hw, dims[1], eps}, nil, 0)
}

// decCosineSimilarity is sum(x1*x2) / sqrt(max(sum(x1^2) * sum(x2^2),
// eps^2)) over dim.
func decCosineSimilarity(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		a, err := c.tensor("x1")
		if err != nil {
			return nil, err
		}
		b, err := c.tensor("x2")
		if err != nil {
			return nil, err
		}
		d, err := c.intArg("dim")
		if err != nil {
			return nil, err
		}
		eps, err := c.floatArg("eps")
		if err != nil {
			return nil, err
		}
		sum := func(x *fxgraph.Node) *fxgraph.Node {
			return e.op(fxgraph.AtenSumDimIntList, x, []any{d}, false)
		}
		num := sum(e.op(fxgraph.AtenMulTensor, a, b))
		den := e.op(fxgraph.AtenMulTensor, sum(e.op(fxgraph.AtenMulTensor, a, a)), sum(e.op(fxgraph.AtenMulTensor, b, b)))
		den = e.op(fxgraph.AtenSqrt, e.op(fxgraph.AtenClamp, den, eps*eps))
		return []*fxgraph.Node{e.op(fxgraph.AtenDivTensor, num, den)}, nil
	})(c)
}

// decCountNonzero sums x != 0 over the dims (all without).
func decCountNonzero(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		nz := e.opKw(fxgraph.Aten_ToCopy, map[string]any{"dtype": tensor.Int64}, e.op(fxgraph.AtenNeScalar, x, 0.0))
		dims := c.arg("dim")
		if d, ok := fxgraph.AsInt(dims); ok {
			dims = []any{d}
		}
		if dims == nil {
			return []*fxgraph.Node{e.op(fxgraph.AtenSum, nz)}, nil
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenSumDimIntList, nz, dims, false)}, nil
	})(c)
}

// decAminmax is (amin, amax) over dim (all dims without one).
func decAminmax(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		keep := false
		if k, ok := fxgraph.AsInt(c.arg("keepdim")); ok {
			keep = k != 0
		}
		var dims []any
		if d, ok := fxgraph.AsInt(c.arg("dim")); ok {
			dims = []any{d}
		} else {
			for i := 0; i < x.Val().Rank(); i++ {
				dims = append(dims, int64(i))
			}
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenAmin, x, dims, keep), e.op(fxgraph.AtenAmax, x, dims, keep)}, nil
	})(c)
}

// decArgsort is the indices output of sort.
func decArgsort(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	desc, err := c.boolArg("descending")
	if err != nil {
		return err
	}
	return c.item(fxgraph.AtenSortStable, []any{x}, map[string]any{"stable": true, "dim": d, "descending": desc}, 1)
}

// decScatterAdd is scatter_reduce(sum, include_self).
func decScatterAdd(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	idx, err := c.tensor("index")
	if err != nil {
		return err
	}
	src, err := c.tensor("src")
	if err != nil {
		return err
	}
	return c.one(fxgraph.AtenScatterReduceTwo, []any{x, d, idx, src, "sum"}, map[string]any{"include_self": true})
}

// decMSELoss is (self - target)^2, averaged (reduction 1), summed (2) or
// kept (0).
func decMSELoss(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		y, err := c.tensor("target")
		if err != nil {
			return nil, err
		}
		red, err := c.intArg("reduction")
		if err != nil {
			return nil, err
		}
		d := e.op(fxgraph.AtenSubTensor, x, y)
		sq := e.op(fxgraph.AtenMulTensor, d, d)
		switch red {
		case 0:
			return []*fxgraph.Node{sq}, nil
		case 1:
			return []*fxgraph.Node{e.op(fxgraph.AtenMean, sq)}, nil
		case 2:
			return []*fxgraph.Node{e.op(fxgraph.AtenSum, sq)}, nil
		}
		return nil, c.errorf(ErrFormat, "mse_loss reduction %d", red)
	})(c)
}

// decBroadcastTensors expands every tensor to the broadcast shape (size-1
// dims take the other tensors' size, symbolic or not).
func decBroadcastTensors(c *Call) error {
	list, ok := c.arg("tensors").([]any)
	if !ok {
		return c.errorf(ErrFormat, "broadcast_tensors of %s", fxgraph.FormatArg(c.arg("tensors")))
	}
	rank := 0
	var nodes []*fxgraph.Node
	for _, v := range list {
		n, ok := v.(*fxgraph.Node)
		if !ok {
			return c.errorf(ErrFormat, "broadcast_tensors operand %s", fxgraph.FormatArg(v))
		}
		nodes = append(nodes, n)
		rank = max(rank, n.Val().Rank())
	}
	shape := make([]any, rank)
	for i := range shape {
		shape[i] = int64(1)
	}
	for _, n := range nodes {
		dims, err := c.dims(n)
		if err != nil {
			return err
		}
		off := rank - len(dims)
		for i, d := range dims {
			if isOne(shape[off+i]) || (isInt(shape[off+i]) && !isInt(d)) {
				shape[off+i] = d
			}
		}
	}
	for i, n := range nodes {
		if c.outName(i) == "" {
			continue
		}
		y, err := c.emit(c.outName(i), fxgraph.AtenExpand, []any{n, shape}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, y); err != nil {
			return err
		}
	}
	return nil
}
