package onnx

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// qConvConsts are a QLinearConv's constant quantization parameters.
type qConvConsts struct {
	xScale, yScale float32
	wScale         []float32 // one, or one per output channel
	xZP, yZP       int64
	out            tensor.DType
}

// qConstSingle is constant input i holding one value (ok false when it
// is not constant or holds several); an absent optional input is def.
func qConstSingle(c *Ctx, i int, def float64) (float64, bool) {
	if !c.HasInput(i) {
		return def, true
	}
	t := c.Const(i)
	if t == nil || t.NumElements() != 1 {
		return 0, false
	}
	return t.Float64s()[0], true
}

// qLinearConvConsts reads QLinearConv's scales and zero points when they
// are constants of the forms xserve.qlinear_conv takes: a single input and
// output scale and zero point, the weight's scale single or per output
// channel (out values), its zero point absent or all zero.
func qLinearConvConsts(c *Ctx, out int64) (q qConvConsts, ok bool) {
	xs, ok1 := qConstSingle(c, 1, 0)
	xz, ok2 := qConstSingle(c, 2, 0)
	ys, ok3 := qConstSingle(c, 6, 0)
	yz, ok4 := qConstSingle(c, 7, 0)
	ws := c.Const(4)
	if !ok1 || !ok2 || !ok3 || !ok4 || ws == nil || (ws.NumElements() != 1 && ws.NumElements() != out) {
		return q, false
	}
	if c.HasInput(5) {
		wz := c.Const(5)
		if wz == nil {
			return q, false
		}
		for _, v := range wz.Int64s() {
			if v != 0 {
				return q, false
			}
		}
	}
	q.out = tensor.Uint8
	if c.HasInput(7) {
		z, err := c.Input(7)
		if err != nil {
			return q, false
		}
		q.out = Meta(z).DType
	}
	q.xScale, q.yScale, q.xZP, q.yZP = float32(xs), float32(ys), int64(xz), int64(yz)
	for _, v := range ws.Float64s() {
		q.wScale = append(q.wScale, float32(v))
	}
	return q, true
}

// requantScale is the float32 multiplier of each of out channels, as ONNX
// Runtime computes it: x_scale * w_scale[c] / y_scale, each step rounded to
// float32.
func (q qConvConsts) requantScale(out int64) *tensor.Tensor {
	t := tensor.New(tensor.Float32, out)
	for c := range out {
		ws := q.wScale[0]
		if len(q.wScale) > 1 {
			ws = q.wScale[c]
		}
		t.SetFloat64(c, float64(float32(float32(q.xScale*ws)/q.yScale)))
	}
	return t
}

// qLinearConvFused converts QLinearConv to one xserve.qlinear_conv node
// when its operands take that form (constant scales and zero points as
// qLinearConvConsts says, an int8 weight, symmetric padding); done false
// leaves the node to the integer arithmetic of nnQLinear.
func qLinearConvFused(c *Ctx) (done bool, err error) {
	x, err := c.Input(0)
	if err != nil {
		return false, err
	}
	w, err := c.Input(3)
	if err != nil {
		return false, err
	}
	xm, wm := Meta(x), Meta(w)
	wd, static := wm.Shape.Static()
	if !static || wm.DType != tensor.Int8 || (xm.DType != tensor.Uint8 && xm.DType != tensor.Int8) || wm.Rank() < 3 || wm.Rank() > 5 || xm.Rank() != wm.Rank() {
		return false, nil
	}
	q, ok := qLinearConvConsts(c, wd[0])
	if !ok || (q.out != tensor.Uint8 && q.out != tensor.Int8) {
		return false, nil
	}
	spatial := wm.Rank() - 2
	s, d, lo, hi, err := nnConvWindow(c, x, w, spatial)
	if err != nil || !nnSymmetric(lo, hi) {
		return false, err
	}
	var bias any
	if c.HasInput(8) {
		if bias, err = c.Input(8); err != nil {
			return false, err
		}
	}
	scale := c.Constant(c.node.Name+"_requant_scale", q.requantScale(wd[0]))
	y, err := c.Emit(fxgraph.XserveQLinearConv, x, w, bias, ints(s), ints(lo), ints(d), false, ints(make([]int64, spatial)),
		c.AttrInt("group", 1), scale, q.xZP, q.yZP, q.out == tensor.Int8)
	if err != nil {
		return false, err
	}
	c.SetOutput(0, y)
	return true, nil
}
