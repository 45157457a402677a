package fxgraph

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/tensor"
)

// registerNN registers convolution, pooling, normalization, matmul and
// softmax operators.
//
// Besides Core ATen operators it registers "xserve.resize", the ONNX
// Resize/Upsample operator, whose arguments are documented at nnResizeShape.
func registerNN(r *Registry) {
	r.define(AtenConvolution, nnConvolutionShape, nil)
	r.define(AtenMm, nnMMShape, nil)
	r.define(AtenBmm, nnBMMShape, nil)
	r.define(AtenAddmm, nnAddmmShape, nil)
	r.define(AtenMatmul, nnMatmulShape, nil)
	r.define(AtenLinear, nnLinearShape, nil)
	r.define(AtenMaxPool1d, nnMaxPoolShape(1, false), nil)
	r.define(AtenMaxPool1dWithIndices, nnMaxPoolShape(1, true), nil)
	r.define(AtenMaxPool2dWithIndices, nnMaxPoolShape(2, true), nil)
	r.define(AtenMaxPool3dWithIndices, nnMaxPoolShape(3, true), nil)
	r.define(AtenAvgPool1d, nnAvgPoolShape(1), nil)
	r.define(AtenAvgPool2d, nnAvgPoolShape(2), nil)
	r.define(AtenAvgPool3d, nnAvgPoolShape(3), nil)
	r.define(Aten_AdaptiveAvgPool2d, nnAdaptiveAvgPoolShape(2), nil)
	r.define(Aten_NativeBatchNormLegitNoTraining, nnBatchNormShape, nil)
	r.define(AtenNativeLayerNorm, nnLayerNormShape, nil)
	r.define(AtenNativeGroupNorm, nnGroupNormShape, nil)
	r.define(Aten_Softmax, nnSoftmaxShape, nil)
	r.define(Aten_LogSoftmax, nnSoftmaxShape, nil)
	r.define(XserveResize, nnResizeShape, nil)
	r.define(AtenGridSampler2d, nnGridSamplerShape, nil)
	r.define(XserveRoIAlign, nnRoiAlignShape, nil)
	r.define(XserveConvFused, convFusedShape, nil)
	r.define(XserveMatmulFused, matmulFusedShape, nil)
}

// XserveRoIAlign is ONNX's RoiAlign in average mode (nnRoiAlignShape says
// more).
var XserveRoIAlign = &Op{Name: "xserve.roi_align", Args: []ArgSpec{
	{"input", 0, ArgTensor, nil, false}, {"rois", 1, ArgTensor, nil, false}, {"batch_indices", 2, ArgTensor, nil, false},
	{"output_height", 3, ArgInt, nil, false}, {"output_width", 4, ArgInt, nil, false}, {"sampling_ratio", 5, ArgInt, nil, false},
	{"spatial_scale", 6, ArgFloat, 1.0, true}, {"half_pixel", 7, ArgBool, true, true},
}}

// nnRoiAlignShape is the shape function of "xserve.roi_align", ONNX's
// RoiAlign in average mode:
//
//	xserve.roi_align(input [N,C,H,W], rois [R,4], batch_indices [R] (int),
//	                 output_height, output_width, sampling_ratio,
//	                 spatial_scale, half_pixel) -> [R,C,output_height,output_width]
//
// rois are (x1, y1, x2, y2) in input coordinates before spatial_scale;
// sampling_ratio (> 0: the data-dependent adaptive count is not supported)
// samples per bin and axis are bilinearly interpolated as ONNX's reference
// does and averaged. half_pixel shifts the roi by -0.5 pixel
// (coordinate_transformation_mode half_pixel); without it rois are at least
// one pixel wide (output_half_pixel, opset 10's behaviour).
func nnRoiAlignShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	rois, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	bi, err := n.InputMeta(2)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() != 4 || rois.Rank() != 2 || bi.Rank() != 1 || (rois.Shape[1].IsStatic() && rois.Shape[1].Size != 4) {
		return Meta{}, fmt.Errorf("roi_align: input %s, rois %s, batch_indices %s", x, rois, bi)
	}
	if !x.DType.IsFloat() || !bi.DType.IsInt() {
		return Meta{}, fmt.Errorf("roi_align: input %s must be float and batch_indices %s integer", x.DType, bi.DType)
	}
	var sizes [3]int64
	for i, name := range []string{"output_height", "output_width", "sampling_ratio"} {
		if sizes[i], err = n.IntArg(3+i, name, 1); err != nil {
			return Meta{}, err
		}
		if sizes[i] < 1 {
			return Meta{}, fmt.Errorf("%w: roi_align %s %d", ErrUnsupported, name, sizes[i])
		}
	}
	if _, err := n.ParamFloat("spatial_scale"); err != nil {
		return Meta{}, err
	}
	if _, err := n.ParamBool("half_pixel"); err != nil {
		return Meta{}, err
	}
	return One(x.DType, Shape{rois.Shape[0], x.Shape[1], D(sizes[0]), D(sizes[1])}), nil
}

// nnGridSamplerShape is grid_sampler_2d(input [N,C,H,W], grid [N,Ho,Wo,2],
// interpolation_mode, padding_mode, align_corners) -> [N,C,Ho,Wo].
func nnGridSamplerShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	g, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() != 4 || g.Rank() != 4 || (g.Shape[3].IsStatic() && g.Shape[3].Size != 2) {
		return Meta{}, fmt.Errorf("grid_sampler_2d: input %s and grid %s, want [N,C,H,W] and [N,Ho,Wo,2]", x, g)
	}
	if !x.DType.IsFloat() || g.DType != x.DType {
		return Meta{}, fmt.Errorf("grid_sampler_2d: input %s and grid %s must have the same floating dtype", x.DType, g.DType)
	}
	mode, err := n.ParamInt("interpolation_mode")
	if err != nil {
		return Meta{}, err
	}
	pad, err := n.ParamInt("padding_mode")
	if err != nil {
		return Meta{}, err
	}
	if mode < 0 || mode > 2 || pad < 0 || pad > 2 {
		return Meta{}, fmt.Errorf("grid_sampler_2d: interpolation_mode %d / padding_mode %d", mode, pad)
	}
	if _, err := n.ParamBool("align_corners"); err != nil {
		return Meta{}, err
	}
	nd := x.Shape[0]
	if !nd.IsStatic() && g.Shape[0].IsStatic() {
		nd = g.Shape[0]
	}
	return One(x.DType, Shape{nd, x.Shape[1], g.Shape[1], g.Shape[2]}), nil
}

// ConvParams are the normalized arguments of aten.convolution.default.
// Unlike PyTorch, the IR accepts any output_padding of a transposed
// convolution, negative included (it crops the high side): the ONNX
// importer expresses ConvTranspose's asymmetric pads that way.
type ConvParams struct {
	// Stride, Padding, Dilation and OutputPadding have one entry per spatial dim.
	Stride, Padding, Dilation, OutputPadding []int64
	Transposed                               bool
	Groups                                   int64
}

// nnSpatialList reads an int-list argument of a windowed op, expanding a
// single value to every spatial dim; empty means def.
func nnSpatialList(n *Node, i int, name string, spatial int, def int64) ([]int64, error) {
	v, err := n.IntsArg(i, name, nil)
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		v = []int64{def}
	}
	if len(v) == 1 && spatial > 1 {
		x := v[0]
		v = make([]int64, spatial)
		for j := range v {
			v[j] = x
		}
	}
	if len(v) != spatial {
		return nil, fmt.Errorf("%s has %d values, want %d (one per spatial dim)", name, len(v), spatial)
	}
	return v, nil
}

// ConvArgs returns the normalized arguments of an aten.convolution.default
// node for a convolution with the given number of spatial dims.
func ConvArgs(n *Node, spatial int) (ConvParams, error) {
	var p ConvParams
	var err error
	if p.Stride, err = nnSpatialList(n, 3, "stride", spatial, 1); err != nil {
		return p, err
	}
	if p.Padding, err = nnSpatialList(n, 4, "padding", spatial, 0); err != nil {
		return p, err
	}
	if p.Dilation, err = nnSpatialList(n, 5, "dilation", spatial, 1); err != nil {
		return p, err
	}
	if p.Transposed, err = n.BoolArg(6, "transposed", false); err != nil {
		return p, err
	}
	if p.OutputPadding, err = nnSpatialList(n, 7, "output_padding", spatial, 0); err != nil {
		return p, err
	}
	if p.Groups, err = n.IntArg(8, "groups", 1); err != nil {
		return p, err
	}
	for j := 0; j < spatial; j++ {
		if p.Stride[j] < 1 || p.Dilation[j] < 1 || p.Padding[j] < 0 {
			return p, fmt.Errorf("bad stride %v / dilation %v / padding %v", p.Stride, p.Dilation, p.Padding)
		}
	}
	if p.Groups < 1 {
		return p, fmt.Errorf("groups %d < 1", p.Groups)
	}
	return p, nil
}

func nnConvolutionShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	w, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if w.Rank() < 3 || x.Rank() != w.Rank() {
		return Meta{}, fmt.Errorf("convolution: input %s and weight %s: want batched input of the weight's rank (3 to 5)", x, w)
	}
	spatial := w.Rank() - 2
	p, err := ConvArgs(n, spatial)
	if err != nil {
		return Meta{}, fmt.Errorf("convolution: %w", err)
	}
	out := make(Shape, x.Rank())
	out[0] = x.Shape[0]
	if out[1], err = nnConvChannels(p, x, w); err != nil {
		return Meta{}, err
	}
	for j := 0; j < spatial; j++ {
		if out[2+j], err = nnConvSpatialOut(p, j, x.Shape[2+j], w.Shape[2+j]); err != nil {
			return Meta{}, err
		}
	}
	if _, ok := n.Arg(2).(*Node); ok {
		bm, err := n.InputMeta(2)
		if err != nil {
			return Meta{}, err
		}
		if bm.Rank() != 1 {
			return Meta{}, fmt.Errorf("convolution: bias %s is not 1-D", bm)
		}
	}
	return One(x.DType, out), nil
}

// nnConvChannels checks the input's channels against the weight w and
// returns the output's channels.
func nnConvChannels(p ConvParams, x, w TensorMeta) (Dim, error) {
	if !p.Transposed {
		if ci, cw := x.Shape[1], w.Shape[1]; ci.IsStatic() && cw.IsStatic() && ci.Size != cw.Size*p.Groups {
			return Unknown, fmt.Errorf("convolution: input has %d channels, weight %s with %d groups wants %d", ci.Size, w.Shape, p.Groups, cw.Size*p.Groups)
		}
		return w.Shape[0], nil
	}
	if ci, cw := x.Shape[1], w.Shape[0]; ci.IsStatic() && cw.IsStatic() && ci.Size != cw.Size {
		return Unknown, fmt.Errorf("convolution: transposed: input has %d channels, weight %s wants %d", ci.Size, w.Shape, cw.Size)
	}
	if w.Shape[1].IsStatic() {
		return D(w.Shape[1].Size * p.Groups), nil
	}
	return Unknown, nil
}

// nnConvSpatialOut is the output size of spatial dim j of a convolution
// (or transposed convolution) with parameters p, input size in and kernel
// size k.
func nnConvSpatialOut(p ConvParams, j int, in, k Dim) (Dim, error) {
	if !k.IsStatic() {
		return Unknown, nil
	}
	ek := p.Dilation[j]*(k.Size-1) + 1
	if !p.Transposed {
		d, err := nnWindowOut(in, ek, p.Stride[j], p.Padding[j], p.Padding[j], false)
		if err != nil {
			return Unknown, fmt.Errorf("convolution: spatial dim %d: %w", j, err)
		}
		return d, nil
	}
	if !in.IsStatic() {
		if p.Stride[j] == 1 && ek-1-2*p.Padding[j]+p.OutputPadding[j] == 0 {
			return in, nil
		}
		return Unknown, nil
	}
	o := (in.Size-1)*p.Stride[j] - 2*p.Padding[j] + ek + p.OutputPadding[j]
	if o < 0 {
		return Unknown, fmt.Errorf("convolution: transposed output size %d < 0 on spatial dim %d", o, j)
	}
	return D(o), nil
}

// nnWindowOut is the number of windows of effective size ek (dilation
// included) at stride s over in+lo+hi elements, rounded down (or up, torch's
// ceil_mode rule, with the last window starting inside input or left padding).
func nnWindowOut(in Dim, ek, s, lo, hi int64, ceil bool) (Dim, error) {
	if !in.IsStatic() {
		if ek == 1 && s == 1 && lo == 0 && hi == 0 {
			return in, nil
		}
		return Unknown, nil
	}
	o, err := PoolOutSize(in.Size, ek, s, lo, hi, ceil)
	if err != nil {
		return Dim{}, err
	}
	return D(o), nil
}

// PoolOutSize is PyTorch's pooling_output_shape generalized to asymmetric
// padding: the number of windows of effective size ek at stride s over
// lo+in+hi elements; with ceil a partial last window counts when it starts
// inside the input or the low padding.
func PoolOutSize(in, ek, s, lo, hi int64, ceil bool) (int64, error) {
	span := in + lo + hi - ek
	if span < 0 {
		return 0, fmt.Errorf("window of size %d does not fit input %d with padding %d+%d", ek, in, lo, hi)
	}
	o := span/s + 1
	if ceil {
		o = (span+s-1)/s + 1
		if (o-1)*s >= in+lo {
			o--
		}
	}
	return o, nil
}

func nnMMShape(n *Node) (Meta, error) {
	a, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	b, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if a.Rank() != 2 || b.Rank() != 2 {
		return Meta{}, fmt.Errorf("mm: want 2-D operands, got %s and %s", a, b)
	}
	if err := nnSameDim(a.Shape[1], b.Shape[0]); err != nil {
		return Meta{}, fmt.Errorf("mm: %s @ %s: %w", a, b, err)
	}
	return One(PromoteTypes(a.DType, b.DType), Shape{a.Shape[0], b.Shape[1]}), nil
}

func nnSameDim(a, b Dim) error {
	if a.IsStatic() && b.IsStatic() && a.Size != b.Size {
		return fmt.Errorf("contracting dims %d and %d differ", a.Size, b.Size)
	}
	return nil
}

func nnBMMShape(n *Node) (Meta, error) {
	a, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	b, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if a.Rank() != 3 || b.Rank() != 3 {
		return Meta{}, fmt.Errorf("bmm: want 3-D operands, got %s and %s", a, b)
	}
	if err := nnSameDim(a.Shape[2], b.Shape[1]); err != nil {
		return Meta{}, fmt.Errorf("bmm: %s @ %s: %w", a, b, err)
	}
	bd := a.Shape[0]
	if !bd.IsStatic() && b.Shape[0].IsStatic() {
		bd = b.Shape[0]
	}
	return One(PromoteTypes(a.DType, b.DType), Shape{bd, a.Shape[1], b.Shape[2]}), nil
}

func nnAddmmShape(n *Node) (Meta, error) {
	c, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	a, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	b, err := n.InputMeta(2)
	if err != nil {
		return Meta{}, err
	}
	if a.Rank() != 2 || b.Rank() != 2 || c.Rank() > 2 {
		return Meta{}, fmt.Errorf("addmm: want 2-D mat1/mat2 and self of rank <= 2, got %s, %s, %s", c, a, b)
	}
	if err := nnSameDim(a.Shape[1], b.Shape[0]); err != nil {
		return Meta{}, fmt.Errorf("addmm: %s @ %s: %w", a, b, err)
	}
	out := Shape{a.Shape[0], b.Shape[1]}
	bs, err := BroadcastShapes(c.Shape, out)
	if err != nil {
		return Meta{}, fmt.Errorf("addmm: self %s: %w", c, err)
	}
	if len(bs) != 2 {
		return Meta{}, fmt.Errorf("addmm: self %s does not broadcast to %s", c, out)
	}
	for i := range out {
		if out[i].IsStatic() && bs[i] != out[i] {
			return Meta{}, fmt.Errorf("addmm: self %s does not broadcast to %s", c, out)
		}
	}
	for _, k := range []string{"beta", "alpha"} {
		if _, err := n.ParamFloat(k); err != nil {
			return Meta{}, err
		}
	}
	return One(PromoteTypes(PromoteTypes(a.DType, b.DType), c.DType), out), nil
}

// MatmulShapes returns the broadcast batch shape and the output shape of
// numpy-style matmul of a and b (torch.matmul).
func MatmulShapes(a, b Shape) (batch, out Shape, err error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, nil, fmt.Errorf("matmul: operands must be at least 1-D, got %s and %s", a, b)
	}
	ka, kb := a[len(a)-1], b[0]
	if len(b) >= 2 {
		kb = b[len(b)-2]
	}
	if err := nnSameDim(ka, kb); err != nil {
		return nil, nil, fmt.Errorf("matmul: %s @ %s: %w", a, b, err)
	}
	var ab, bb Shape
	if len(a) >= 2 {
		ab = a[:len(a)-2]
	}
	if len(b) >= 2 {
		bb = b[:len(b)-2]
	}
	batch, err = BroadcastShapes(ab, bb)
	if err != nil {
		return nil, nil, fmt.Errorf("matmul: batch dims: %w", err)
	}
	out = batch.Clone()
	if len(a) >= 2 {
		out = append(out, a[len(a)-2])
	}
	if len(b) >= 2 {
		out = append(out, b[len(b)-1])
	}
	return batch, out, nil
}

func nnMatmulShape(n *Node) (Meta, error) {
	a, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	b, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	_, out, err := MatmulShapes(a.Shape, b.Shape)
	if err != nil {
		return Meta{}, err
	}
	return One(PromoteTypes(a.DType, b.DType), out), nil
}

func nnLinearShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	w, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() < 1 || w.Rank() < 1 || w.Rank() > 2 {
		return Meta{}, fmt.Errorf("linear: input %s, weight %s", x, w)
	}
	if err := nnSameDim(x.Shape[x.Rank()-1], w.Shape[w.Rank()-1]); err != nil {
		return Meta{}, fmt.Errorf("linear: %s, weight %s: %w", x, w, err)
	}
	out := x.Shape[:x.Rank()-1].Clone()
	if w.Rank() == 2 {
		out = append(out, w.Shape[0])
	}
	dt := PromoteTypes(x.DType, w.DType)
	if _, ok := n.Arg(2).(*Node); ok {
		bm, err := n.InputMeta(2)
		if err != nil {
			return Meta{}, err
		}
		if _, err := BroadcastShapes(bm.Shape, out); err != nil {
			return Meta{}, fmt.Errorf("linear: bias %s: %w", bm, err)
		}
	}
	return One(dt, out), nil
}

// PoolParams are the normalized arguments of a pooling operator. Unlike
// PyTorch, the IR accepts padding larger than half the kernel (ONNX does).
type PoolParams struct {
	Kernel, Stride, Padding, Dilation []int64
	CeilMode                          bool
	// Avg pooling only.
	CountIncludePad bool
	// DivisorOverride is 0 when not set.
	DivisorOverride int64
}

// PoolArgs returns the normalized arguments of a max_pool*/avg_pool* node
// with the given number of spatial dims.
func PoolArgs(n *Node, spatial int, avg bool) (PoolParams, error) {
	var p PoolParams
	var err error
	if p.Kernel, err = nnSpatialList(n, 1, "kernel_size", spatial, 0); err != nil {
		return p, err
	}
	if p.Stride, err = n.IntsArg(2, "stride", nil); err != nil {
		return p, err
	}
	if len(p.Stride) == 0 {
		p.Stride = append([]int64(nil), p.Kernel...)
	} else if p.Stride, err = nnSpatialList(n, 2, "stride", spatial, 1); err != nil {
		return p, err
	}
	if p.Padding, err = nnSpatialList(n, 3, "padding", spatial, 0); err != nil {
		return p, err
	}
	if avg {
		p.Dilation = []int64{1, 1, 1}[:spatial]
		if p.CeilMode, err = n.BoolArg(4, "ceil_mode", false); err != nil {
			return p, err
		}
		if p.CountIncludePad, err = n.BoolArg(5, "count_include_pad", true); err != nil {
			return p, err
		}
		if spatial > 1 {
			if p.DivisorOverride, err = n.IntArg(6, "divisor_override", 0); err != nil {
				return p, err
			}
		}
	} else {
		if p.Dilation, err = nnSpatialList(n, 4, "dilation", spatial, 1); err != nil {
			return p, err
		}
		if p.CeilMode, err = n.BoolArg(5, "ceil_mode", false); err != nil {
			return p, err
		}
	}
	for j := 0; j < spatial; j++ {
		if p.Kernel[j] < 1 || p.Stride[j] < 1 || p.Dilation[j] < 1 || p.Padding[j] < 0 {
			return p, fmt.Errorf("bad kernel %v / stride %v / dilation %v / padding %v", p.Kernel, p.Stride, p.Dilation, p.Padding)
		}
	}
	return p, nil
}

// PoolOutShape returns the output shape of pooling x with p over its last
// len(p.Kernel) dims.
func PoolOutShape(x Shape, p PoolParams) (Shape, error) {
	spatial := len(p.Kernel)
	out := x.Clone()
	for j := 0; j < spatial; j++ {
		a := len(x) - spatial + j
		ek := p.Dilation[j]*(p.Kernel[j]-1) + 1
		d, err := nnWindowOut(x[a], ek, p.Stride[j], p.Padding[j], p.Padding[j], p.CeilMode)
		if err != nil {
			return nil, fmt.Errorf("spatial dim %d: %w", j, err)
		}
		out[a] = d
	}
	return out, nil
}

func nnPoolInput(n *Node, spatial int) (TensorMeta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return x, err
	}
	if x.Rank() != spatial+1 && x.Rank() != spatial+2 {
		return x, fmt.Errorf("input %s: want rank %d or %d", x, spatial+1, spatial+2)
	}
	return x, nil
}

func nnMaxPoolShape(spatial int, indices bool) ShapeFunc {
	return func(n *Node) (Meta, error) {
		x, err := nnPoolInput(n, spatial)
		if err != nil {
			return Meta{}, fmt.Errorf("max_pool%dd: %w", spatial, err)
		}
		p, err := PoolArgs(n, spatial, false)
		if err != nil {
			return Meta{}, fmt.Errorf("max_pool%dd: %w", spatial, err)
		}
		out, err := PoolOutShape(x.Shape, p)
		if err != nil {
			return Meta{}, fmt.Errorf("max_pool%dd: %w", spatial, err)
		}
		if !indices {
			return One(x.DType, out), nil
		}
		return Meta{Vals: []TensorMeta{{DType: x.DType, Shape: out}, {DType: tensor.Int64, Shape: out.Clone()}}, Tuple: true}, nil
	}
}

func nnAvgPoolShape(spatial int) ShapeFunc {
	return func(n *Node) (Meta, error) {
		x, err := nnPoolInput(n, spatial)
		if err != nil {
			return Meta{}, fmt.Errorf("avg_pool%dd: %w", spatial, err)
		}
		p, err := PoolArgs(n, spatial, true)
		if err != nil {
			return Meta{}, fmt.Errorf("avg_pool%dd: %w", spatial, err)
		}
		out, err := PoolOutShape(x.Shape, p)
		if err != nil {
			return Meta{}, fmt.Errorf("avg_pool%dd: %w", spatial, err)
		}
		return One(x.DType, out), nil
	}
}

func nnAdaptiveAvgPoolShape(spatial int) ShapeFunc {
	return func(n *Node) (Meta, error) {
		x, err := nnPoolInput(n, spatial)
		if err != nil {
			return Meta{}, fmt.Errorf("adaptive_avg_pool%dd: %w", spatial, err)
		}
		os, err := nnSpatialList(n, 1, "output_size", spatial, 0)
		if err != nil {
			return Meta{}, fmt.Errorf("adaptive_avg_pool%dd: %w", spatial, err)
		}
		out := x.Shape.Clone()
		for j, o := range os {
			if o < 0 {
				return Meta{}, fmt.Errorf("adaptive_avg_pool%dd: output size %v", spatial, os)
			}
			out[x.Rank()-spatial+j] = D(o)
		}
		return One(x.DType, out), nil
	}
}

// nnChannelParam checks an optional per-channel argument (weight, bias,
// running stats) of a normalization.
func nnChannelParam(n *Node, i int, c Dim) error {
	if n.Arg(i) == nil {
		return nil
	}
	m, err := n.InputMeta(i)
	if err != nil {
		return err
	}
	if m.Rank() != 1 || (m.Shape[0].IsStatic() && c.IsStatic() && m.Shape[0].Size != c.Size) {
		return fmt.Errorf("argument %d is %s, want [%s]", i, m, c)
	}
	return nil
}

func nnBatchNormShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() < 2 {
		return Meta{}, fmt.Errorf("batch_norm: input %s has rank < 2", x)
	}
	for i := 1; i <= 4; i++ {
		if err := nnChannelParam(n, i, x.Shape[1]); err != nil {
			return Meta{}, fmt.Errorf("batch_norm: %w", err)
		}
	}
	if n.Arg(3) == nil || n.Arg(4) == nil {
		return Meta{}, fmt.Errorf("batch_norm: running_mean and running_var are required")
	}
	if _, err := n.ParamFloat("eps"); err != nil {
		return Meta{}, err
	}
	empty := TensorMeta{DType: x.DType, Shape: Shape{D(0)}}
	return Meta{Vals: []TensorMeta{x, empty, empty}, Tuple: true}, nil
}

func nnLayerNormShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	ns, err := n.IntsArg(1, "normalized_shape", nil)
	if err != nil {
		return Meta{}, err
	}
	k := len(ns)
	if k == 0 || k > x.Rank() {
		return Meta{}, fmt.Errorf("layer_norm: normalized_shape %v for input %s", ns, x)
	}
	for j, s := range ns {
		d := x.Shape[x.Rank()-k+j]
		if d.IsStatic() && d.Size != s {
			return Meta{}, fmt.Errorf("layer_norm: normalized_shape %v does not match input %s", ns, x)
		}
	}
	for i := 2; i <= 3; i++ {
		if n.Arg(i) == nil {
			continue
		}
		m, err := n.InputMeta(i)
		if err != nil {
			return Meta{}, err
		}
		if _, err := BroadcastShapes(m.Shape, StaticShape(ns...)); err != nil || m.Rank() > k {
			return Meta{}, fmt.Errorf("layer_norm: argument %d is %s, want %v", i, m, ns)
		}
	}
	if _, err := n.ParamFloat("eps"); err != nil {
		return Meta{}, err
	}
	stat := x.Shape.Clone()
	for j := x.Rank() - k; j < x.Rank(); j++ {
		stat[j] = D(1)
	}
	return Meta{Vals: []TensorMeta{x, {DType: x.DType, Shape: stat}, {DType: x.DType, Shape: stat.Clone()}}, Tuple: true}, nil
}

func nnGroupNormShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() < 2 {
		return Meta{}, fmt.Errorf("group_norm: input %s has rank < 2", x)
	}
	for i := 1; i <= 2; i++ {
		if err := nnChannelParam(n, i, x.Shape[1]); err != nil {
			return Meta{}, fmt.Errorf("group_norm: %w", err)
		}
	}
	g, err := n.ParamInt("group")
	if err != nil {
		return Meta{}, err
	}
	if g < 1 || (x.Shape[1].IsStatic() && x.Shape[1].Size%g != 0) {
		return Meta{}, fmt.Errorf("group_norm: %d groups for input %s", g, x)
	}
	if _, err := n.ParamFloat("eps"); err != nil {
		return Meta{}, err
	}
	stat := TensorMeta{DType: x.DType, Shape: Shape{x.Shape[0], D(g)}}
	return Meta{Vals: []TensorMeta{x, stat, {DType: x.DType, Shape: stat.Shape.Clone()}}, Tuple: true}, nil
}

func nnSoftmaxShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	d, err := n.IntArg(1, "dim", -1)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() > 0 {
		if _, err := NormDim(d, x.Rank()); err != nil {
			return Meta{}, fmt.Errorf("softmax: %w", err)
		}
	} else if d != 0 && d != -1 {
		return Meta{}, fmt.Errorf("softmax: dim %d for a scalar", d)
	}
	h2f, err := n.BoolArg(2, "half_to_float", false)
	if err != nil {
		return Meta{}, err
	}
	if !x.DType.IsFloat() {
		return Meta{}, fmt.Errorf("softmax: input %s is not floating point", x)
	}
	dt := x.DType
	if h2f && (dt == tensor.Float16 || dt == tensor.BFloat16) {
		dt = tensor.Float32
	}
	return One(dt, x.Shape), nil
}

// ResizeParams are the normalized arguments of an xserve.resize node.
type ResizeParams struct {
	// Sizes are the output sizes (-1: derive from Scales); nil when absent.
	Sizes []int64
	// Scales are the per-axis scale factors; nil when absent.
	Scales []float64
	// ROI holds starts then ends (normalized coordinates) of the crop for
	// tf_crop_and_resize; nil means the whole input.
	ROI []float64
	// Mode is "nearest", "linear" or "cubic".
	Mode string
	// Coord is the coordinate_transformation_mode.
	Coord string
	// Nearest is the nearest_mode.
	Nearest string
	// CubicA is cubic_coeff_a.
	CubicA float64
	// ExcludeOutside zeroes (and renormalizes) taps outside the input.
	ExcludeOutside bool
	// Extrapolation is the value of tf_crop_and_resize samples outside the input.
	Extrapolation float64
	// Antialias widens the linear or cubic filter by 1/scale when
	// downsampling (ONNX's antialias, opset 18).
	Antialias bool
}

// nnFloats reads a list-of-numbers argument: a list literal or a node
// holding a constant tensor. known is false for a node whose value is not a
// constant (yet).
func nnFloats(a any, what string) (vals []float64, known bool, err error) {
	if a == nil {
		return nil, true, nil
	}
	if m, ok := a.(*Node); ok {
		if m.graph == nil {
			return nil, false, nil
		}
		t := m.graph.ConstValue(m)
		if t == nil {
			return nil, false, nil
		}
		if t.Rank() > 1 || !(t.DType.IsFloat() || t.DType.IsInt()) {
			return nil, false, fmt.Errorf("%s is %s, want a 1-D numeric tensor", what, t)
		}
		return t.Float64s(), true, nil
	}
	list, ok := a.([]any)
	if !ok {
		return nil, false, fmt.Errorf("%s is %s, want a list of numbers", what, FormatArg(a))
	}
	out := make([]float64, len(list))
	for i, e := range list {
		v, ok := AsFloat(e)
		if !ok {
			return nil, false, fmt.Errorf("%s element %d is %s, want a number", what, i, FormatArg(e))
		}
		out[i] = v
	}
	return out, true, nil
}

// ResizeArgs returns the normalized arguments of an xserve.resize node
// whose input has the given rank. known is false while sizes, scales or roi
// is a node whose value is not a constant yet (it may fold during
// specialization).
func ResizeArgs(n *Node, rank int) (p ResizeParams, known bool, err error) {
	known = true
	if a := n.ArgOr(1, "sizes", nil); a != nil {
		var ok bool
		if p.Sizes, ok, err = n.ConstInts(1, "sizes"); err != nil {
			return p, false, err
		}
		if !ok {
			known = false
		} else if len(p.Sizes) != rank {
			return p, false, fmt.Errorf("resize: %d sizes for rank %d", len(p.Sizes), rank)
		}
	}
	var ok bool
	if p.Scales, ok, err = nnFloats(n.ArgOr(2, "scales", nil), "scales"); err != nil {
		return p, false, err
	}
	known = known && ok
	if p.Scales != nil && len(p.Scales) != rank {
		return p, false, fmt.Errorf("resize: %d scales for rank %d", len(p.Scales), rank)
	}
	if p.ROI, ok, err = nnFloats(n.ArgOr(3, "roi", nil), "roi"); err != nil {
		return p, false, err
	}
	known = known && ok
	if p.ROI != nil && len(p.ROI) != 2*rank {
		return p, false, fmt.Errorf("resize: roi has %d values for rank %d", len(p.ROI), rank)
	}
	if err := p.readAttrs(n); err != nil {
		return p, false, err
	}
	if err := p.checkModes(); err != nil {
		return p, false, err
	}
	if known && p.Sizes == nil && p.Scales == nil {
		return p, false, fmt.Errorf("resize: neither sizes nor scales given")
	}
	return p, known, nil
}

// readAttrs reads the resize's mode, coordinate transformation, nearest
// mode, cubic coefficient, exclude_outside, extrapolation value and
// antialias arguments, with ONNX's defaults.
func (p *ResizeParams) readAttrs(n *Node) error {
	var err error
	str := func(i int, name, def string) (string, error) {
		a := n.ArgOr(i, name, def)
		s, ok := a.(string)
		if !ok {
			return "", fmt.Errorf("resize: %s is %s, want a string", name, FormatArg(a))
		}
		return s, nil
	}
	if p.Mode, err = str(4, "mode", "nearest"); err != nil {
		return err
	}
	if p.Coord, err = str(5, "coordinate_transformation_mode", "half_pixel"); err != nil {
		return err
	}
	if p.Nearest, err = str(6, "nearest_mode", "round_prefer_floor"); err != nil {
		return err
	}
	if p.CubicA, err = n.FloatArg(7, "cubic_coeff_a", -0.75); err != nil {
		return err
	}
	if p.ExcludeOutside, err = n.BoolArg(8, "exclude_outside", false); err != nil {
		return err
	}
	if p.Extrapolation, err = n.FloatArg(9, "extrapolation_value", 0); err != nil {
		return err
	}
	if p.Antialias, err = n.BoolArg(10, "antialias", false); err != nil {
		return err
	}
	return nil
}

// checkModes checks the resize's mode, coordinate transformation and
// nearest mode against those ONNX defines.
func (p ResizeParams) checkModes() error {
	switch p.Mode {
	case "nearest", "linear", "cubic":
	default:
		return fmt.Errorf("%w: resize mode %q", ErrUnsupported, p.Mode)
	}
	switch p.Coord {
	case "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn", "half_pixel_symmetric":
	default:
		return fmt.Errorf("%w: resize coordinate_transformation_mode %q", ErrUnsupported, p.Coord)
	}
	switch p.Nearest {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil":
	default:
		return fmt.Errorf("%w: resize nearest_mode %q", ErrUnsupported, p.Nearest)
	}
	return nil
}

// ResizeOutSize returns the output size of axis i of a resize of an input
// of size in (ONNX: sizes when given, else floor(in * scale), times the roi
// extent for tf_crop_and_resize).
func (p ResizeParams) ResizeOutSize(i int, in int64) int64 {
	if p.Sizes != nil && p.Sizes[i] >= 0 {
		return p.Sizes[i]
	}
	if p.Scales == nil {
		return in
	}
	ext := 1.0
	if p.Coord == "tf_crop_and_resize" && p.ROI != nil {
		ext = p.ROI[len(p.ROI)/2+i] - p.ROI[i]
	}
	return int64(math.Floor(float64(in) * ext * p.Scales[i]))
}

// XserveResize is ONNX's Resize (nnResizeShape says more).
var XserveResize = &Op{Name: "xserve.resize"}

// nnResizeShape is the shape function of "xserve.resize", ONNX's Resize:
//
//	xserve.resize(input, sizes, scales, roi, mode, coordinate_transformation_mode,
//	              nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value,
//	              antialias)
//
// sizes, scales and roi are lists of numbers, or 1-D tensor nodes whose
// values are constant once shapes are specialized (a Shape computation);
// until then the output dims are Unknown. sizes lists the output size of
// every dim, or is None; an entry -1 takes its size from scales (or keeps
// the input's size when scales is None). scales (one float per dim, or
// None) are the scale factors of the coordinate transform, also when sizes
// are given (keep_aspect_ratio_policy); when None they are output/input.
// antialias (default False) widens linear and cubic filters by 1/scale
// when downsampling. roi is None or 2*rank floats (starts then ends) for
// tf_crop_and_resize. mode is "nearest", "linear" or "cubic";
// coordinate_transformation_mode (half_pixel, half_pixel_symmetric,
// pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn,
// tf_crop_and_resize), nearest_mode (round_prefer_floor, round_prefer_ceil,
// floor, ceil), cubic_coeff_a, exclude_outside and extrapolation_value are
// ONNX's attributes, with its defaults ("half_pixel", "round_prefer_floor",
// -0.75, False, 0.0). Without sizes an output dim is floor(input * scale),
// times the roi extent for tf_crop_and_resize. Interpolation is separable
// (per resized axis: bilinear, bicubic, trilinear...), as in ONNX's
// reference implementation, whose tap selection it follows exactly. The
// output has the input's dtype; linear and cubic need a float input.
func nnResizeShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	p, known, err := ResizeArgs(n, x.Rank())
	if err != nil {
		return Meta{}, err
	}
	if !known {
		out := make(Shape, x.Rank())
		for i := range out {
			out[i] = Unknown
		}
		return One(x.DType, out), nil
	}
	if p.Mode != "nearest" && !x.DType.IsFloat() {
		return Meta{}, fmt.Errorf("%w: resize mode %s of %s", ErrUnsupported, p.Mode, x.DType)
	}
	out := make(Shape, x.Rank())
	for i, d := range x.Shape {
		switch {
		case p.Sizes != nil && p.Sizes[i] >= 0:
			out[i] = D(p.Sizes[i])
		case d.IsStatic():
			out[i] = D(p.ResizeOutSize(i, d.Size))
		case p.Scales == nil || p.Scales[i] == 1 && (p.Coord != "tf_crop_and_resize" || p.ROI == nil || (p.ROI[i] == 0 && p.ROI[x.Rank()+i] == 1)):
			out[i] = d
		default:
			out[i] = Unknown
		}
		if out[i].IsStatic() && out[i].Size < 0 {
			return Meta{}, fmt.Errorf("resize: output size %d on dim %d", out[i].Size, i)
		}
	}
	return One(x.DType, out), nil
}

// The pooling and padding ops of 1 to 3 spatial dims, for code that picks
// one by rank.
var (
	maxPoolWithIndicesOps = [...]*Op{AtenMaxPool1dWithIndices, AtenMaxPool2dWithIndices, AtenMaxPool3dWithIndices}
	avgPoolOps            = [...]*Op{AtenAvgPool1d, AtenAvgPool2d, AtenAvgPool3d}
	reflectionPadOps      = [...]*Op{AtenReflectionPad1d, AtenReflectionPad2d, AtenReflectionPad3d}
	replicationPadOps     = [...]*Op{AtenReplicationPad1d, AtenReplicationPad2d, AtenReplicationPad3d}
)

// MaxPoolWithIndicesOp returns aten.max_pool<nd>d_with_indices (nd 1 to 3).
func MaxPoolWithIndicesOp(nd int) *Op { return maxPoolWithIndicesOps[nd-1] }

// AvgPoolOp returns aten.avg_pool<nd>d (nd 1 to 3).
func AvgPoolOp(nd int) *Op { return avgPoolOps[nd-1] }

// ReflectionPadOp returns aten.reflection_pad<nd>d (nd 1 to 3).
func ReflectionPadOp(nd int) *Op { return reflectionPadOps[nd-1] }

// ReplicationPadOp returns aten.replication_pad<nd>d (nd 1 to 3).
func ReplicationPadOp(nd int) *Op { return replicationPadOps[nd-1] }
