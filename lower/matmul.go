package lower

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// dot is a dot_general with the context's precision for float operands,
// with b.epi applied when the platform's Dot did it (b.epiUsed).
func (b *nnB) dot(x *stablehlo.Value, xc, xb []int64, y *stablehlo.Value, yc, yb []int64) *stablehlo.Value {
	epi := b.epi
	b.epi, b.epiUsed = nil, false
	if b.err != nil {
		return nil
	}
	dims := stablehlo.DotDims{LhsBatch: xb, RhsBatch: yb, LhsContract: xc, RhsContract: yc}
	if dot := b.ctx.Primitives().Dot; dot != nil {
		v, done, err := dot(b.ctx, x, y, dims, epi)
		if err != nil {
			return b.set(nil, err)
		}
		if v != nil {
			b.epiUsed = epi != nil && done
			return v
		}
	}
	prec := stablehlo.PrecisionDefault
	if x.Type().Elem.IsFloat() {
		prec = b.ctx.Precision()
	}
	return b.set(x.Block().DotGeneral(x, y, dims, prec, stablehlo.Invalid))
}

// nnAddmm lowers beta*self + alpha*(mat1 @ mat2); self is ignored when beta
// is 0, as in PyTorch. With unit alpha and beta and a bias over the output
// columns (a linear layer: torch.export's and the ONNX importer's Gemm),
// the bias is the product's epilogue, for the platform's Dot to add.
func nnAddmm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	beta, err := n.ParamFloat("beta")
	if err != nil {
		return nil, err
	}
	alpha, err := n.ParamFloat("alpha")
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := ctx.ComputeDType(dt)
	if alpha == 1 && beta == 1 && len(outDims) == 2 {
		if _, bd, err := InMeta(n, 0); err == nil && tensor.NumElements(bd) == outDims[1] && (len(bd) == 1 || (len(bd) == 2 && bd[0] == 1)) {
			b.epi = &Epilogue{Bias: b.reshape(b.convert(in[0], cdt), []int64{outDims[1]})}
		}
	}
	y := b.dot(b.convert(in[1], cdt), []int64{1}, nil, b.convert(in[2], cdt), []int64{0}, nil)
	y = nnScaleBy(b, y, alpha)
	if beta != 0 && !b.epiUsed {
		c := b.bcast(b.convert(in[0], cdt), outDims)
		c = nnScaleBy(b, c, beta)
		y = b.add(y, c)
	}
	return b.out(b.convert(y, dt))
}

// nnMatmul lowers NumPy matmul: 1-D operands get a unit dim (removed from
// the result), batch dims broadcast; a 2-D right operand contracts without
// broadcasting.
func nnMatmul(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	b := &nnB{chain: chain{ctx: ctx}}
	y, err := nnMatmulProduct(b, n, in, false)
	if err != nil {
		return nil, err
	}
	return b.out(b.convert(b.reshape(y, outDims), dt))
}

// nnMatmulProduct is the matmul of n's first two arguments in the compute
// dtype, other transposed when transposed (a matrix), with b.epi passed to
// the product.
func nnMatmulProduct(b *nnB, n *fxgraph.Node, in []*stablehlo.Value, transposed bool) (*stablehlo.Value, error) {
	dt, _ := Out(n, 0)
	_, ad, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	_, bd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	cdt := b.ctx.ComputeDType(dt)
	x, y := b.convert(in[0], cdt), b.convert(in[1], cdt)
	if len(ad) == 1 {
		ad = []int64{1, ad[0]}
		x = b.reshape(x, ad)
	}
	if len(bd) == 1 {
		bd = []int64{bd[0], 1}
		y = b.reshape(y, bd)
	}
	if len(bd) == 2 {
		yc := int64(0)
		if transposed {
			yc = 1
		} else if w, ok := nnTransposedMatrix(b.ctx, n.Arg(1)); ok {
			y, yc = b.convert(w, cdt), 1
		}
		return b.dot(x, []int64{int64(len(ad) - 1)}, nil, y, []int64{yc}, nil), nil
	}
	nb := max(len(ad), len(bd)) - 2
	batch := make([]int64, nb)
	for i := range batch {
		batch[i] = 1
	}
	for _, s := range [][]int64{ad[:len(ad)-2], bd[:len(bd)-2]} {
		off := nb - len(s)
		for i, d := range s {
			if d != 1 {
				batch[off+i] = d
			}
		}
	}
	x = b.bcast(x, append(append([]int64(nil), batch...), ad[len(ad)-2:]...))
	y = b.bcast(y, append(append([]int64(nil), batch...), bd[len(bd)-2:]...))
	ba := nnRange(0, nb)
	return b.dot(x, []int64{int64(nb + 1)}, ba, y, []int64{int64(nb)}, ba), nil
}

// nnTransposedMatrix returns the lowered value of W where arg is W's
// transpose, W a matrix (aten.t, or aten.permute with dims [1, 0]: ONNX
// exports of a tied LM head, MatMul(x, Transpose(embedding))): the product
// then contracts W's second dim in place, where a transpose of W would be
// made on every call (on CPU a [32000, 768] head's is a 98 MB copy per
// decode step, which the matrix-product kernel cannot fold).
func nnTransposedMatrix(ctx *Context, arg any) (*stablehlo.Value, bool) {
	t, ok := arg.(*fxgraph.Node)
	if !ok || (t.Op != fxgraph.AtenT && t.Op != fxgraph.AtenPermute) {
		return nil, false
	}
	if t.Op == fxgraph.AtenPermute {
		dims, err := t.IntsArg(1, "dims", nil)
		if err != nil || len(dims) != 2 || dims[0] != 1 || dims[1] != 0 {
			return nil, false
		}
	}
	w, ok := t.Arg(0).(*fxgraph.Node)
	if !ok || w.Val().Rank() != 2 {
		return nil, false
	}
	v, err := ctx.Value(w)
	return v, err == nil
}

// nnLinear lowers input @ weight.T + bias; a [out] bias of a matrix weight
// is the product's epilogue, for the platform's Dot to add.
func nnLinear(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	_, wd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := ctx.ComputeDType(dt)
	var bias *stablehlo.Value
	if len(in) > 2 && in[2] != nil {
		bias = b.convert(in[2], cdt)
		if _, bd, err := InMeta(n, 2); err == nil && len(wd) == 2 && len(bd) == 1 && bd[0] == wd[0] {
			b.epi = &Epilogue{Bias: bias}
		}
	}
	y := b.dot(b.convert(in[0], cdt), []int64{int64(len(xd) - 1)}, nil, b.convert(in[1], cdt), []int64{int64(len(wd) - 1)}, nil)
	y = b.reshape(y, outDims)
	if bias != nil && !b.epiUsed {
		y = b.add(y, b.bcast(bias, outDims))
	}
	return b.out(b.convert(y, dt))
}

// nnMatmulFused lowers xserve.matmul_fused: the product with its epilogue
// (the platform's Dot may apply it; else it follows the product).
func nnMatmulFused(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	transposed, err := n.ParamBool("transpose_other")
	if err != nil {
		return nil, err
	}
	epi, err := nnLowerEpilogue(ctx, n, ctx.ComputeDType(dt))
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	b.epi = epi
	y, err := nnMatmulProduct(b, n, in, transposed)
	if err != nil {
		return nil, err
	}
	y = b.reshape(y, outDims)
	if !b.epiUsed {
		y = nnApplyEpilogue(b, y, epi, outDims)
	}
	return b.out(b.convert(y, dt))
}

// nnLowerEpilogue returns the epilogue of fused node n with its values in
// the compute dtype cdt: a bias as a [N] vector.
func nnLowerEpilogue(ctx *Context, n *fxgraph.Node, cdt tensor.DType) (*Epilogue, error) {
	e, err := fxgraph.FusedEpilogue(n)
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	epi := &Epilogue{Activation: e.Activation, Alpha: e.Alpha}
	if e.Bias != nil {
		v, err := ctx.Value(e.Bias)
		if err != nil {
			return nil, err
		}
		_, outDims := Out(n, 0)
		epi.Bias = b.reshape(b.convert(v, cdt), []int64{outDims[len(outDims)-1]})
	}
	if e.Residual != nil {
		v, err := ctx.Value(e.Residual)
		if err != nil {
			return nil, err
		}
		epi.Residual = b.convert(v, cdt)
	}
	return epi, b.err
}

// nnApplyEpilogue applies epi (nil for none) to the product y of dims
// outDims: bias, residual, activation.
func nnApplyEpilogue(b *nnB, y *stablehlo.Value, epi *Epilogue, outDims []int64) *stablehlo.Value {
	if epi == nil || b.err != nil {
		return y
	}
	if epi.Bias != nil {
		y = b.add(y, b.bcastIn(epi.Bias, outDims, []int64{int64(len(outDims) - 1)}))
	}
	if epi.Residual != nil {
		y = b.add(y, epi.Residual)
	}
	return nnActivate(&b.chain, y, epi.Activation, epi.Alpha)
}

// nnActivate applies activation act (fxgraph.Activations) to y, as the
// elementwise rules of the ops it stands for compute it.
func nnActivate(c *chain, y *stablehlo.Value, act string, alpha float64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	zero := func() *stablehlo.Value { return c.k(y, 0) }
	switch act {
	case "":
		return y
	case "relu":
		return c.max(y, zero())
	case "relu6":
		return ewRelu6(c, y)
	case "sigmoid":
		return c.un((*stablehlo.Block).Logistic, y)
	case "silu":
		return c.mul(y, c.un((*stablehlo.Block).Logistic, y))
	case "hardswish":
		return c.mul(y, c.div(ewRelu6(c, c.add(y, c.k(y, 3))), c.k(y, 6)))
	case "tanh":
		return c.un((*stablehlo.Block).Tanh, y)
	case "gelu", "gelu_tanh":
		return ewGelu(c, y, act == "gelu_tanh")
	case "leaky_relu":
		return c.sel(c.cmp(y, zero(), stablehlo.GT), y, c.mul(y, c.k(y, alpha)))
	}
	c.set(nil, fmt.Errorf("unknown activation %q", act))
	return nil
}

func nnMM(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, _ := Out(n, 0)
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := ctx.ComputeDType(dt)
	y := b.dot(b.convert(in[0], cdt), []int64{1}, nil, b.convert(in[1], cdt), []int64{0}, nil)
	return b.out(b.convert(y, dt))
}

func nnBMM(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, _ := Out(n, 0)
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := ctx.ComputeDType(dt)
	y := b.dot(b.convert(in[0], cdt), []int64{2}, []int64{0}, b.convert(in[1], cdt), []int64{1}, []int64{0})
	return b.out(b.convert(y, dt))
}

// nnScaleBy multiplies y by the number arg (no-op for 1); integer results
// need an integral factor.
func nnScaleBy(b *nnB, y *stablehlo.Value, f float64) *stablehlo.Value {
	if f == 1 || b.err != nil {
		return y
	}
	if !y.Type().Elem.IsFloat() && f != math.Trunc(f) {
		b.err = fmt.Errorf("non-integral factor %v for an integer result", f)
		return nil
	}
	return b.mul(y, b.full(y, f, nnDimsOf(y)))
}

func nnDimsOf(v *stablehlo.Value) []int64 {
	d := v.Type().Dims
	out := make([]int64, len(d))
	for i, x := range d {
		out[i] = int64(x)
	}
	return out
}
