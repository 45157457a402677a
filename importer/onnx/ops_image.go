package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerImage registers the image-geometry operators of opsets 18 to 20
// that are slicing, padding and small matrix products: CenterCropPad and
// AffineGrid. (Col2Im, DeformConv and ImageDecoder are in their own files.)
func registerImage(cs converters) {
	cs.register("", "CenterCropPad", 18, imCenterCropPad)
	cs.register("", "AffineGrid", 20, imAffineGrid)
	cs.register("", "Col2Im", 18, imCol2Im)
}

// imCol2Im converts Col2Im(input, image_shape, block_shape) to aten.col2im
// (N-D): image_shape and block_shape must be known at import time, pads
// symmetric per dim.
func imCol2Im(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	img, err := c.ConstInts(1)
	if err != nil {
		return err
	}
	block, err := c.ConstInts(2)
	if err != nil {
		return err
	}
	k := len(img)
	if len(block) != k {
		return fmt.Errorf("Col2Im image_shape %v and block_shape %v differ in length", img, block)
	}
	dil, err := nnSpatialAttr(c, "dilations", k, 1)
	if err != nil {
		return err
	}
	str, err := nnSpatialAttr(c, "strides", k, 1)
	if err != nil {
		return err
	}
	pads := c.AttrInts("pads", make([]int64, 2*k))
	if len(pads) != 2*k {
		return fmt.Errorf("Col2Im pads %v for %d dims", pads, k)
	}
	for j := range k {
		if pads[j] != pads[k+j] {
			return Unsupported("Col2Im with asymmetric pads %v", pads)
		}
	}
	y, err := c.Emit(fxgraph.AtenCol2im, x, ints(img), ints(block), ints(dil), ints(pads[:k]), ints(str))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// imCenterCropPad converts CenterCropPad(input, shape): along each of axes
// (default all), the centered window of the wanted size, cropped where the
// input is larger (the extra row, if odd, taken from the end) and padded
// with zeros where it is smaller (the extra zero at the end). shape must be
// known at import time.
func imCenterCropPad(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	shape, err := c.ConstInts(1)
	if err != nil {
		return err
	}
	xm := Meta(x)
	r := xm.Rank()
	axes := c.AttrInts("axes", nil)
	if axes == nil {
		for i := range r {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) != len(shape) {
		return fmt.Errorf("CenterCropPad shape %v for %d axes", shape, len(axes))
	}
	pads := make([]any, 2*r) // constant_pad_nd's order: the last dim first
	for i := range pads {
		pads[i] = int64(0)
	}
	for i, a := range axes {
		ax, err := fxgraph.NormDim(a, r)
		if err != nil {
			return fmt.Errorf("axes: %w", err)
		}
		d := xm.Shape[ax]
		if !d.IsStatic() {
			return Unsupported("CenterCropPad along symbolic dim %s", d)
		}
		switch want := shape[i]; {
		case want < 0:
			return fmt.Errorf("CenterCropPad shape %v: negative size", shape)
		case want < d.Size:
			start := (d.Size - want) / 2
			if x, err = c.Emit(fxgraph.AtenSliceTensor, x, int64(ax), start, start+want, int64(1)); err != nil {
				return err
			}
		case want > d.Size:
			before := (want - d.Size) / 2
			pads[2*(r-1-ax)] = before
			pads[2*(r-1-ax)+1] = want - d.Size - before
		}
	}
	for _, p := range pads {
		if p.(int64) != 0 {
			if x, err = c.Emit(fxgraph.AtenConstantPadNd, x, pads, 0.0); err != nil {
				return err
			}
			break
		}
	}
	c.SetOutput(0, x)
	return nil
}

// imAffineGrid converts AffineGrid(theta, size): the sampling grid of
// GridSample for the affine maps theta ([N, 2, 3] or [N, 3, 4]) over an
// output of size [N, C, H, W] or [N, C, D, H, W] (known at import time):
// each output position's normalized coordinates (x, y[, z], 1), -1 to 1
// (pixel corners with align_corners, else pixel centres), times theta^T.
func imAffineGrid(c *Ctx, n *Node) error {
	theta, err := c.Input(0)
	if err != nil {
		return err
	}
	size, err := c.ConstInts(1)
	if err != nil {
		return err
	}
	if len(size) != 4 && len(size) != 5 {
		return fmt.Errorf("AffineGrid size %v, want [N, C, H, W] or [N, C, D, H, W]", size)
	}
	spatial := size[2:]
	k := int64(len(spatial))
	if tm := Meta(theta); tm.Rank() != 3 {
		return fmt.Errorf("AffineGrid theta of shape %s, want [N, %d, %d]", tm.Shape, k, k+1)
	}
	base := affineBaseGrid(spatial, c.AttrInt("align_corners", 0) != 0, Meta(theta).DType)
	b := c.Constant("affine_base_grid", base) // [P, k+1]
	bt, err := c.Emit(fxgraph.AtenPermute, b, []any{int64(1), int64(0)})
	if err != nil {
		return err
	}
	g, err := c.Emit(fxgraph.AtenMatmul, theta, bt) // [N, k, P]
	if err != nil {
		return err
	}
	if g, err = c.Emit(fxgraph.AtenPermute, g, []any{int64(0), int64(2), int64(1)}); err != nil {
		return err
	}
	out := []any{size[0]}
	for _, d := range spatial {
		out = append(out, d)
	}
	if g, err = c.Emit(fxgraph.AtenReshape, g, append(out, k)); err != nil {
		return err
	}
	c.SetOutput(0, g)
	return nil
}

// affineBaseGrid returns the homogeneous normalized coordinates of every
// position of spatial (row-major), one row (x, y[, z], 1) each: the last
// dim is x.
func affineBaseGrid(spatial []int64, alignCorners bool, dt tensor.DType) *tensor.Tensor {
	k := len(spatial)
	p := tensor.NumElements(spatial)
	t := tensor.New(dt, p, int64(k+1))
	coord := func(i, n int64) float64 {
		if alignCorners {
			if n == 1 {
				return -1
			}
			return -1 + 2*float64(i)/float64(n-1)
		}
		return -1 + (2*float64(i)+1)/float64(n)
	}
	idx := make([]int64, k)
	for row := range p {
		for d := range k { // column d is spatial dim k-1-d
			t.SetFloat64(row*int64(k+1)+int64(d), coord(idx[k-1-d], spatial[k-1-d]))
		}
		t.SetFloat64(row*int64(k+1)+int64(k), 1)
		for d := k - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < spatial[d] {
				break
			}
			idx[d] = 0
		}
	}
	return t
}
