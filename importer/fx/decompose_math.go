package fx

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
	c   *call
	err error
}

// op emits target(args...).
func (e *expr) op(target string, args ...any) *fxgraph.Node {
	return e.opKw(target, nil, args...)
}

// opKw emits target(args..., **kw).
func (e *expr) opKw(target string, kw map[string]any, args ...any) *fxgraph.Node {
	if e.err != nil {
		return nil
	}
	n, err := e.c.emit("", target, args, kw)
	e.err = err
	return n
}

// formula is a decomposition written as an expression of the call's
// arguments: it returns the output nodes in order.
type formula func(c *call, e *expr) ([]*fxgraph.Node, error)

// decFormula runs f and binds its outputs.
func decFormula(f formula) decomposer {
	return func(c *call) error {
		e := &expr{c: c}
		outs, err := f(c, e)
		if err == nil {
			err = e.err
		}
		if err != nil {
			return err
		}
		for i, n := range outs {
			if i >= len(c.outs) {
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
func unary(f func(c *call, e *expr, x *fxgraph.Node) *fxgraph.Node) decomposer {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{f(c, e, x)}, nil
	})
}

// binary is a formula of self and a second tensor argument.
func binary(other string, f func(c *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node) decomposer {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
			y = c.b.scalarConst(x.Val().DType, v)
		}
		return []*fxgraph.Node{f(c, e, x, y)}, nil
	})
}

// number returns a number argument or its default (def when absent or None).
func (c *call) number(name string, def float64) any {
	v := c.arg(name)
	if v == nil {
		return def
	}
	return v
}

var mathDecompositions = map[string]decomposer{
	"aten.square.default": unary(func(_ *call, e *expr, x *fxgraph.Node) *fxgraph.Node { return e.op("aten.mul.Tensor", x, x) }),
	"aten.erfc.default": unary(func(_ *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		return e.op("aten.rsub.Scalar", e.op("aten.erf.default", x), 1.0)
	}),
	"aten.sgn.default":           decRename("aten.sign.default"),
	"aten.special_expm1.default": decRename("aten.expm1.default"),
	"aten.clip.default":          decRename("aten.clamp.default"),
	"aten.clip.Tensor":           decRename("aten.clamp.Tensor"),
	"aten.max.other":             decRename("aten.maximum.default"),
	"aten.min.other":             decRename("aten.minimum.default"),
	"aten.numpy_T.default":       decNumpyT,
	"aten.frac.default": unary(func(_ *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		return e.op("aten.sub.Tensor", x, e.op("aten.trunc.default", x))
	}),
	"aten.log_sigmoid.default": unary(func(_ *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable for large |x|.
		return e.op("aten.sub.Tensor", e.op("aten.clamp.default", x, nil, 0.0),
			e.op("aten.log1p.default", e.op("aten.exp.default", e.op("aten.neg.default", e.op("aten.abs.default", x)))))
	}),
	"aten.selu.default": unary(func(_ *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		return e.op("aten.elu.default", x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0)
	}),
	"aten.celu.default": unary(func(c *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		a, ok := fxgraph.AsFloat(c.number("alpha", 1))
		if !ok || a == 0 {
			e.err = c.errorf(ErrUnsupported, "celu alpha %s", fxgraph.FormatArg(c.arg("alpha")))
			return nil
		}
		return e.op("aten.elu.default", x, a, 1.0, 1/a)
	}),
	"aten.hardshrink.default": unary(func(c *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		keep := e.op("aten.gt.Scalar", e.op("aten.abs.default", x), c.number("lambd", 0.5))
		return e.op("aten.where.ScalarOther", keep, x, 0.0)
	}),
	"aten.logit.default": unary(func(c *call, e *expr, x *fxgraph.Node) *fxgraph.Node {
		if eps, ok := fxgraph.AsFloat(c.arg("eps")); ok {
			x = e.op("aten.clamp.default", x, eps, 1-eps)
		}
		return e.op("aten.log.default", e.op("aten.div.Tensor", x, e.op("aten.rsub.Scalar", x, 1.0)))
	}),
	"aten.addcmul.default": decAddc("aten.mul.Tensor"),
	"aten.addcdiv.default": decAddc("aten.div.Tensor"),
	"aten.lerp.Scalar":     decLerp,
	"aten.lerp.Tensor":     decLerp,
	"aten.outer.default": binary("vec2", func(_ *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		return e.op("aten.mul.Tensor", e.op("aten.unsqueeze.default", x, int64(1)), y)
	}),
	"aten.hypot.default": binary("other", func(_ *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		return e.op("aten.sqrt.default", e.op("aten.add.Tensor", e.op("aten.mul.Tensor", x, x), e.op("aten.mul.Tensor", y, y)))
	}),
	"aten.logaddexp.default": binary("other", func(_ *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// max(x, y) + log1p(exp(-|x - y|))
		m := e.op("aten.maximum.default", x, y)
		d := e.op("aten.neg.default", e.op("aten.abs.default", e.op("aten.sub.Tensor", x, y)))
		return e.op("aten.add.Tensor", m, e.op("aten.log1p.default", e.op("aten.exp.default", d)))
	}),
	"aten.xlogy.Tensor": binary("other", func(_ *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// 0 where x == 0 (unless y is NaN), else x * log(y).
		p := e.op("aten.mul.Tensor", x, e.op("aten.log.default", y))
		zero := e.op("aten.logical_and.default", e.op("aten.eq.Scalar", x, 0.0), e.op("aten.logical_not.default", e.op("aten.isnan.default", y)))
		return e.op("aten.where.ScalarSelf", zero, 0.0, p)
	}),
	"aten.floor_divide.default": binary("other", func(_ *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		return e.opKw("aten.div.Tensor_mode", map[string]any{"rounding_mode": "floor"}, x, y)
	}),
	"aten.floor_divide.Scalar": decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{e.opKw("aten.div.Scalar_mode", map[string]any{"rounding_mode": "floor"}, x, c.arg("other"))}, nil
	}),
	"aten.isclose.default": binary("other", func(c *call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// |x - y| <= atol + rtol * |y|, or x == y (infinities).
		rtol, _ := fxgraph.AsFloat(c.number("rtol", 1e-5))
		atol, _ := fxgraph.AsFloat(c.number("atol", 1e-8))
		diff := e.op("aten.abs.default", e.op("aten.sub.Tensor", x, y))
		tol := e.op("aten.add.Tensor", e.op("aten.mul.Tensor", e.op("aten.abs.default", y), rtol), atol)
		close := e.op("aten.logical_or.default", e.op("aten.eq.Tensor", x, y), e.op("aten.le.Tensor", diff, tol))
		if eqNaN, _ := fxgraph.AsInt(c.arg("equal_nan")); eqNaN != 0 {
			close = e.op("aten.logical_or.default", close, e.op("aten.logical_and.default", e.op("aten.isnan.default", x), e.op("aten.isnan.default", y)))
		}
		return close
	}),
	"aten.glu.default":                decGLU,
	"aten.prelu.default":              decPReLU,
	"aten.rms_norm.default":           decRMSNorm,
	"aten.std.dim":                    decVarDim("aten.std.correction", false),
	"aten.var.dim":                    decVarDim("aten.var.correction", false),
	"aten.std.default":                decVarDim("aten.std.correction", false),
	"aten.var.default":                decVarDim("aten.var.correction", false),
	"aten.var_mean.dim":               decVarDim("aten.var.correction", true),
	"aten.std_mean.dim":               decVarDim("aten.std.correction", true),
	"aten.var_mean.correction":        decVarDim("aten.var.correction", true),
	"aten.std_mean.correction":        decVarDim("aten.std.correction", true),
	"aten.var_mean.default":           decVarDim("aten.var.correction", true),
	"aten.std_mean.default":           decVarDim("aten.std.correction", true),
	"aten.narrow.default":             decNarrow,
	"aten.tile.default":               decTile,
	"aten.repeat_interleave.self_int": decRepeatInterleave,
	"aten.one_hot.default":            decOneHot,
	"aten.instance_norm.default":      decInstanceNorm,
	"aten.cosine_similarity.default":  decCosineSimilarity,
	"aten.count_nonzero.default":      decCountNonzero,
	"aten.count_nonzero.dim_IntList":  decCountNonzero,
	"aten.aminmax.default":            decAminmax,
	"aten.argsort.default":            decArgsort,
	"aten.argsort.stable":             decArgsort,
	"aten.scatter_add.default":        decScatterAdd,
	"aten.mse_loss.default":           decMSELoss,
	"aten.broadcast_tensors.default":  decBroadcastTensors,
}

// decNumpyT reverses the dims (x.T).
func decNumpyT(c *call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	r := x.Val().Rank()
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(r - 1 - i)
	}
	return c.one("aten.permute.default", []any{x, ints64(perm)}, nil)
}

// decAddc is addcmul/addcdiv: self + value * (tensor1 op tensor2).
func decAddc(op string) decomposer {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
			p = e.op("aten.mul.Tensor", p, c.number("value", 1))
		}
		return []*fxgraph.Node{e.op("aten.add.Tensor", x, p)}, nil
	})
}

// decLerp is self + weight * (end - self).
func decLerp(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		end, err := c.tensor("end")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{e.op("aten.add.Tensor", x, e.op("aten.mul.Tensor", e.op("aten.sub.Tensor", end, x), c.arg("weight")))}, nil
	})(c)
}

// decGLU is a * sigmoid(b) for the two halves a, b of dim.
func decGLU(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
		a := e.op("aten.slice.Tensor", x, int64(k), int64(0), h, int64(1))
		b := e.op("aten.slice.Tensor", x, int64(k), h, size.Size, int64(1))
		return []*fxgraph.Node{e.op("aten.mul.Tensor", a, e.op("aten.sigmoid.default", b))}, nil
	})(c)
}

// decPReLU is where(x > 0, x, weight * x), weight per channel (dim 1).
func decPReLU(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
			w = e.op("aten.reshape.default", w, shape)
		}
		return []*fxgraph.Node{e.op("aten.where.self", e.op("aten.gt.Scalar", x, 0.0), x, e.op("aten.mul.Tensor", x, w))}, nil
	})(c)
}

// decRMSNorm is x * rsqrt(mean(x^2 over the normalized dims) + eps) *
// weight, computed in float32 at least; eps defaults to the dtype's
// machine epsilon.
func decRMSNorm(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
			xf = e.opKw("aten._to_copy.default", map[string]any{"dtype": tensor.Float32}, x)
		}
		ms := e.op("aten.mean.dim", e.op("aten.mul.Tensor", xf, xf), ints64(dims), true)
		y := e.op("aten.mul.Tensor", xf, e.op("aten.rsqrt.default", e.op("aten.add.Tensor", ms, eps)))
		if xf != x {
			y = e.opKw("aten._to_copy.default", map[string]any{"dtype": dt}, y)
		}
		if w != nil {
			y = e.op("aten.mul.Tensor", y, w)
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
func decVarDim(target string, withMean bool) decomposer {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
		return []*fxgraph.Node{v, e.op("aten.mean.dim", x, mdims, keep)}, nil
	})
}

// decNarrow is slice(dim, start, start + length).
func decNarrow(c *call) error {
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
	return c.one("aten.slice.Tensor", []any{x, d, start, start + length, int64(1)}, nil)
}

// decTile is repeat with the dims padded with leading ones to x's rank (or
// x padded with leading size-1 dims to the dims' length).
func decTile(c *call) error {
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
	return c.one("aten.repeat.default", []any{x, ints64(dims)}, nil)
}

// decRepeatInterleave repeats each element repeats times along dim (the
// flattened tensor without dim): unsqueeze, expand, reshape.
func decRepeatInterleave(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
			x = e.op("aten.reshape.default", x, []any{int64(-1)})
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
		u := e.op("aten.unsqueeze.default", x, int64(k+1))
		exp := append(append(append([]any{}, dims[:k+1]...), n), dims[k+1:]...)
		y := e.op("aten.expand.default", u, exp)
		m, err := c.product([]any{dims[k], n})
		if err != nil {
			return nil, err
		}
		shape := append(append(append([]any{}, dims[:k]...), m), dims[k+1:]...)
		return []*fxgraph.Node{e.op("aten.reshape.default", y, shape)}, nil
	})(c)
}

// decOneHot is (x[..., None] == arange(num_classes)) as int64.
func decOneHot(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
		ar := c.b.g.AddConstant(c.b.freshName("one_hot_classes"), tensor.FromInt64s(classes))
		eq := e.op("aten.eq.Tensor", e.op("aten.unsqueeze.default", x, int64(-1)), ar)
		return []*fxgraph.Node{e.opKw("aten._to_copy.default", map[string]any{"dtype": tensor.Int64}, eq)}, nil
	})(c)
}

// decInstanceNorm normalizes each (sample, channel) over its spatial dims:
// native_group_norm with one group per channel.
func decInstanceNorm(c *call) error {
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
	return c.item("aten.native_group_norm.default", []any{x, nilIfNone(w), nilIfNone(b), dims[0], dims[1], hw, dims[1], eps}, nil, 0)
}

// decCosineSimilarity is sum(x1*x2) / sqrt(max(sum(x1^2) * sum(x2^2),
// eps^2)) over dim.
func decCosineSimilarity(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
			return e.op("aten.sum.dim_IntList", x, []any{d}, false)
		}
		num := sum(e.op("aten.mul.Tensor", a, b))
		den := e.op("aten.mul.Tensor", sum(e.op("aten.mul.Tensor", a, a)), sum(e.op("aten.mul.Tensor", b, b)))
		den = e.op("aten.sqrt.default", e.op("aten.clamp.default", den, eps*eps))
		return []*fxgraph.Node{e.op("aten.div.Tensor", num, den)}, nil
	})(c)
}

// decCountNonzero sums x != 0 over the dims (all without).
func decCountNonzero(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		nz := e.opKw("aten._to_copy.default", map[string]any{"dtype": tensor.Int64}, e.op("aten.ne.Scalar", x, 0.0))
		dims := c.arg("dim")
		if d, ok := fxgraph.AsInt(dims); ok {
			dims = []any{d}
		}
		if dims == nil {
			return []*fxgraph.Node{e.op("aten.sum.default", nz)}, nil
		}
		return []*fxgraph.Node{e.op("aten.sum.dim_IntList", nz, dims, false)}, nil
	})(c)
}

// decAminmax is (amin, amax) over dim (all dims without one).
func decAminmax(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
		return []*fxgraph.Node{e.op("aten.amin.default", x, dims, keep), e.op("aten.amax.default", x, dims, keep)}, nil
	})(c)
}

// decArgsort is the indices output of sort.
func decArgsort(c *call) error {
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
	return c.item("aten.sort.stable", []any{x}, map[string]any{"stable": true, "dim": d, "descending": desc}, 1)
}

// decScatterAdd is scatter_reduce(sum, include_self).
func decScatterAdd(c *call) error {
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
	return c.one("aten.scatter_reduce.two", []any{x, d, idx, src, "sum"}, map[string]any{"include_self": true})
}

// decMSELoss is (self - target)^2, averaged (reduction 1), summed (2) or
// kept (0).
func decMSELoss(c *call) error {
	return decFormula(func(c *call, e *expr) ([]*fxgraph.Node, error) {
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
		d := e.op("aten.sub.Tensor", x, y)
		sq := e.op("aten.mul.Tensor", d, d)
		switch red {
		case 0:
			return []*fxgraph.Node{sq}, nil
		case 1:
			return []*fxgraph.Node{e.op("aten.mean.default", sq)}, nil
		case 2:
			return []*fxgraph.Node{e.op("aten.sum.default", sq)}, nil
		}
		return nil, c.errorf(ErrFormat, "mse_loss reduction %d", red)
	})(c)
}

// decBroadcastTensors expands every tensor to the broadcast shape (size-1
// dims take the other tensors' size, symbolic or not).
func decBroadcastTensors(c *call) error {
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
		y, err := c.emit(c.outName(i), "aten.expand.default", []any{n, shape}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, y); err != nil {
			return err
		}
	}
	return nil
}
