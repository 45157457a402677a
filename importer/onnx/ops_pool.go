package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerPool registers LpPool. (MaxPool, AveragePool and the global
// pools are in ops_nn.go; AveragePool with dilations comes here through
// nnDilatedAveragePool.)
func registerPool(cs converters) {
	cs.add("LpPool", nnLpPool)
}

// windowSum returns, for every pooling window of x [N, C, spatial...], the
// sum of its taps (dilated, strided, over x zero-padded by the pads and by
// whatever ceil_mode's last window needs beyond them): a convolution of
// each channel with a kernel of ones, which, unlike avg_pool, takes
// dilations. The output has ONNX's pooling size (nnPoolSize).
func windowSum(c *Ctx, x *fxgraph.Node, p nnPoolAttrs) (*fxgraph.Node, []int64, error) {
	xm := Meta(x)
	d, ok := xm.Shape.Static()
	if !ok {
		return nil, nil, Unsupported("pooling with dilations of symbolic shape %s", xm.Shape)
	}
	sp := d[2:]
	ek := nnEffective(p.k, p.d)
	out := make([]int64, len(sp))
	hi := make([]int64, len(sp))
	for j, in := range sp {
		out[j] = nnPoolSize(in, p.lo[j], p.hi[j], ek[j], p.s[j], p.ceil)
		hi[j] = max(p.hi[j], (out[j]-1)*p.s[j]+ek[j]-in-p.lo[j])
	}
	flat := append([]any{d[0] * d[1], int64(1)}, ints(sp)...)
	y, err := c.Emit(fxgraph.AtenView, x, flat)
	if err != nil {
		return nil, nil, err
	}
	if y, err = c.Emit(fxgraph.AtenConstantPadNd, y, nnPadList(p.lo, hi, make([]int64, len(sp))), 0.0); err != nil {
		return nil, nil, err
	}
	ones := tensor.New(xm.DType, append([]int64{1, 1}, p.k...)...)
	for i := range ones.NumElements() {
		ones.SetFloat64(i, 1)
	}
	zero := make([]int64, len(sp))
	if y, err = c.Emit(fxgraph.AtenConvolution, y, c.Constant("window_ones", ones), nil, ints(p.s), ints(zero), ints(p.d), false, ints(zero), int64(1)); err != nil {
		return nil, nil, err
	}
	if y, err = c.Emit(fxgraph.AtenView, y, append([]any{d[0], d[1]}, ints(out)...)); err != nil {
		return nil, nil, err
	}
	return y, out, nil
}

// windowCounts returns, per output position (of shape out), how many taps
// of its window fall inside the input (inPad false) or inside the input
// and its pads (inPad true): the divisor of an average that excludes or
// includes the padding. Taps beyond the pads (ceil_mode) never count.
func windowCounts(sp, out []int64, p nnPoolAttrs, inPad bool, dt tensor.DType) *tensor.Tensor {
	per := make([][]float64, len(sp))
	for j, in := range sp {
		lo, hi := p.lo[j], p.lo[j]+in
		if inPad {
			lo, hi = 0, p.lo[j]+in+p.hi[j]
		}
		per[j] = make([]float64, out[j])
		for o := range out[j] {
			for k := range p.k[j] {
				if at := o*p.s[j] + k*p.d[j]; at >= lo && at < hi {
					per[j][o]++
				}
			}
		}
	}
	t := tensor.New(dt, out...)
	for i := range t.NumElements() {
		f, rem := 1.0, i
		for j := len(out) - 1; j >= 0; j-- {
			f *= per[j][rem%out[j]]
			rem /= out[j]
		}
		t.SetFloat64(i, f)
	}
	return t
}

// nnDilatedAveragePool is AveragePool with dilations: the window sums
// divided by the taps counted (count_include_pad: those in the input and
// its pads, else those in the input).
func nnDilatedAveragePool(c *Ctx, x *fxgraph.Node, p nnPoolAttrs, cip bool) (*fxgraph.Node, error) {
	sum, out, err := windowSum(c, x, p)
	if err != nil {
		return nil, err
	}
	d, _ := Meta(x).Shape.Static()
	counts := windowCounts(d[2:], out, p, cip, Meta(x).DType)
	return c.Emit(fxgraph.AtenDivTensor, sum, c.Constant("window_counts", counts))
}

// nnLpPool converts LpPool: (sum over each window of |x|^p)^(1/p), the
// padding contributing zeros, with dilations and ceil_mode (opset 18).
func nnLpPool(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xm := Meta(x)
	if !xm.DType.IsFloat() {
		return Unsupported("LpPool of %s", xm.DType)
	}
	p, err := nnReadPool(c, xm)
	if err != nil {
		return err
	}
	pw := float64(c.AttrInt("p", 2))
	if pw <= 0 {
		return fmt.Errorf("LpPool p %v, want a positive integer", pw)
	}
	a, err := c.Emit(fxgraph.AtenAbs, x)
	if err != nil {
		return err
	}
	if pw != 1 {
		if a, err = c.Emit(fxgraph.AtenPowTensorScalar, a, pw); err != nil {
			return err
		}
	}
	y, _, err := windowSum(c, a, p)
	if err != nil {
		return err
	}
	if pw != 1 {
		if y, err = c.Emit(fxgraph.AtenPowTensorScalar, y, 1/pw); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	return nil
}
