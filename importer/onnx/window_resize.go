package onnx

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// resizeWindow is Resize (linear, half_pixel or pytorch_half_pixel) of a
// float32 tensor of static shape to run-time sizes along its last two
// axes, with ONNX Runtime's bilinear arithmetic (upsample.cc): the source
// coordinate per output index in float32, clamped into the input, the two
// neighbours' weights |in - i1| and |in - i2| (both 0.5 where the
// neighbours coincide), and the four products summed in ORT's order.
func resizeWindow(c *Ctx) (*window, error) {
	coord := c.AttrString("coordinate_transformation_mode", "half_pixel")
	if c.Opset < 11 || c.AttrString("mode", "nearest") != "linear" || (coord != "half_pixel" && coord != "pytorch_half_pixel") ||
		c.AttrInt("antialias", 0) != 0 || c.Attr("axes") != nil || c.AttrString("keep_aspect_ratio_policy", "stretch") != "stretch" ||
		!c.HasInput(3) || c.HasInput(2) && c.Const(2) != nil && c.Const(2).NumElements() != 0 {
		return nil, nil
	}
	x, err := c.Input(0)
	if err != nil {
		return nil, err
	}
	d, ok := Meta(x).Shape.Static()
	sizes, err := c.Input(3)
	if err != nil || !ok || len(d) < 2 || Meta(x).DType != tensor.Float32 {
		return nil, err
	}
	r := len(d)
	w := &window{g: c.s.g, dtype: tensor.Float32, bound: make([]int64, r)}
	if w.extent, err = elements(c, sizes, int64(r)); err != nil {
		return nil, err
	}
	for k := range r {
		w.bound[k] = staticBound(c.s.g, sizes, int64(k))
		if k < r-2 && w.bound[k] != d[k] {
			return nil, nil // ORT interpolates other axes another way
		}
	}
	var axes [2]*linearAxis
	for j := range axes {
		k := r - 2 + j
		if axes[j], err = newLinearAxis(c, w.extent[k], d[k], coord == "pytorch_half_pixel"); err != nil {
			return nil, err
		}
	}
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		return bilinearAt(c, x, co, axes)
	}
	return w, nil
}

// linearAxis is one interpolated axis of Resize: input size n, output size
// out (run time), scale out/n in float32.
type linearAxis struct {
	n        int64
	out      *fxgraph.Node
	scale    *fxgraph.Node
	pytorchH bool
}

func newLinearAxis(c *Ctx, out *fxgraph.Node, n int64, pytorch bool) (*linearAxis, error) {
	of, err := nnCast(c, out, tensor.Float32)
	if err != nil {
		return nil, err
	}
	scale, err := ieeeDivide(c, of, c.ScalarConst(tensor.Float32, float64(n)))
	if err != nil {
		return nil, err
	}
	return &linearAxis{n: n, out: out, scale: scale, pytorchH: pytorch}, nil
}

// taps returns, per output index i (int64), the two input indices and
// their weights: i1, i2, d1 = |in - i1|, d2 = |in - i2|.
func (a *linearAxis) taps(c *Ctx, i *fxgraph.Node) (i1, i2, d1, d2 *fxgraph.Node, err error) {
	e := &emitChain{c: c}
	f := e.cast(i, tensor.Float32)
	half := c.ScalarConst(tensor.Float32, 0.5)
	in := e.op(fxgraph.AtenSubTensor, e.divide(e.op(fxgraph.AtenAddTensor, f, half), a.scale), half)
	if a.pytorchH {
		one := e.op(fxgraph.AtenGtScalar, a.out, int64(1))
		in = e.op(fxgraph.AtenWhereSelf, one, in, c.ScalarConst(tensor.Float32, 0))
	}
	in = e.op(fxgraph.AtenClamp, in, 0.0, float64(a.n-1))
	i1 = e.op(fxgraph.AtenMinimum, e.cast(in, tensor.Int64), c.ScalarConst(tensor.Int64, float64(a.n-1)))
	i2 = e.op(fxgraph.AtenMinimum, e.op(fxgraph.AtenAddScalar, i1, int64(1)), c.ScalarConst(tensor.Int64, float64(a.n-1)))
	d1 = e.op(fxgraph.AtenAbs, e.op(fxgraph.AtenSubTensor, in, e.cast(i1, tensor.Float32)))
	d2 = e.op(fxgraph.AtenAbs, e.op(fxgraph.AtenSubTensor, in, e.cast(i2, tensor.Float32)))
	same := e.op(fxgraph.AtenEqTensor, i1, i2)
	d1 = e.op(fxgraph.AtenWhereSelf, same, half, d1)
	d2 = e.op(fxgraph.AtenWhereSelf, same, half, d2)
	return i1, i2, d1, d2, e.err
}

// bilinearAt reads Resize's output at coordinates co: the leading axes as
// they are, the last two interpolated.
func bilinearAt(c *Ctx, x *fxgraph.Node, co []*fxgraph.Node, axes [2]*linearAxis) (*fxgraph.Node, error) {
	r := len(co)
	y1, y2, dy1, dy2, err := axes[0].taps(c, co[r-2])
	if err != nil {
		return nil, err
	}
	x1, x2, dx1, dx2, err := axes[1].taps(c, co[r-1])
	if err != nil {
		return nil, err
	}
	e := &emitChain{c: c}
	tap := func(yi, xi, wy, wx *fxgraph.Node) *fxgraph.Node {
		at := append(append([]*fxgraph.Node{}, co[:r-2]...), yi, xi)
		v, err := gatherAt(c, x, at)
		if err != nil {
			e.err = err
			return nil
		}
		return e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenMulTensor, wx, wy), v)
	}
	sum := e.op(fxgraph.AtenAddTensor, tap(y1, x1, dy2, dx2), tap(y1, x2, dy2, dx1))
	sum = e.op(fxgraph.AtenAddTensor, sum, tap(y2, x1, dy1, dx2))
	sum = e.op(fxgraph.AtenAddTensor, sum, tap(y2, x2, dy1, dx1))
	return sum, e.err
}

func (e *emitChain) cast(v *fxgraph.Node, dt tensor.DType) *fxgraph.Node {
	if e.err != nil || v == nil {
		return nil
	}
	n, err := nnCast(e.c, v, dt)
	e.err = err
	return n
}

func (e *emitChain) divide(a, b *fxgraph.Node) *fxgraph.Node {
	if e.err != nil || a == nil {
		return nil
	}
	n, err := ieeeDivide(e.c, a, b)
	e.err = err
	return n
}
