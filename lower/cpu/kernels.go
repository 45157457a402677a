package cpu

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// conv is the CPU's convolution: the kernel (with the epilogue) for
// float32 with 1 to 3 spatial dims, else a depthwise convolution as
// multiply-adds (Options.DepthwiseMulAdd), else a small-map convolution as a
// matrix product (Options.ConvAsDot), else the generic one (declined).
func conv(ctx *lower.Context, x, w, bias *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams, e *lower.Epilogue) (*stablehlo.Value, bool, error) {
	o := ctx.Options
	spatial := len(wd) - 2
	// oneDNN has no convolution of zero channels (XLA's own gives zeros).
	if x.Type().Elem == stablehlo.F32 && spatial >= 1 && spatial <= 3 && o.HasKernel(ConvKernel) && tensor.NumElements(wd) > 0 {
		y, err := convKernel(ctx, x, w, bias, outDims, p, e)
		return y, true, err
	}
	var y *stablehlo.Value
	var err error
	switch {
	case *o.DepthwiseMulAdd && lower.IsDepthwise(xd, wd, p.Groups):
		y, err = lower.DepthwiseConv(ctx, x, w, xd, wd, outDims, p)
	case *o.ConvAsDot && lower.ConvAsDotFits(xd, wd, outDims, p.Groups):
		y, err = lower.ConvAsDot(ctx, x, w, wd, outDims, p)
	default:
		return nil, false, nil
	}
	if err != nil || bias == nil {
		return y, false, err
	}
	b, err := y.Block().BroadcastInDim(bias, outDims, []int64{1})
	if err != nil {
		return nil, false, err
	}
	y, err = y.Block().Add(y, b)
	return y, false, err
}

// channelsLast is the minor-to-major layout that stores a logical
// [N, C, S...] tensor of rank dims as [N, S..., C], as the kernels read
// and write activations.
func channelsLast(rank int) []int64 {
	layout := []int64{1}
	for j := rank - 1; j >= 2; j-- {
		layout = append(layout, int64(j))
	}
	return append(layout, 0)
}

// dilations is the first n of d with 0 (none given) read as 1, as the
// kernels' dilation attribute wants them.
func dilations(d []int64, n int) []int64 {
	out := make([]int64, n)
	for j := range out {
		out[j] = max(d[j], 1)
	}
	return out
}

// epilogueAttrs returns the activation attributes of e (nil for none).
func epilogueAttrs(e *lower.Epilogue) (act int64, alpha float32, err error) {
	if e == nil {
		return 0, 0, nil
	}
	act, err = activationCode(e.Activation)
	return act, float32(e.Alpha), err
}

// convKernel computes a convolution with ConvKernel. The kernel reads the
// input and writes the result channels-last, which the operand and result
// layouts ask XLA for, so the logical program stays NCHW and XLA places any
// transposes itself. The weight operand is logically [kernel..., in/groups,
// out], row-major (XLA's own convolution layout, which
// Options.ConvWeightsHWIO uploads weights in): its transpose of w composes
// with the one that reads an HWIO-uploaded weight back as OIHW into no op
// at all, where the same weight passed as OIHW with an HWIO operand layout
// cost a copy per weight per call (XLA did not see that copy was a
// bitcast).
func convKernel(ctx *lower.Context, x, w, bias *stablehlo.Value, outDims []int64, p fxgraph.ConvParams, e *lower.Epilogue) (*stablehlo.Value, error) {
	rank := len(outDims)
	spatial := rank - 2
	cl := channelsLast(rank)
	toHWIO := make([]int64, 0, rank) // [kernel..., in/groups, out] from [out, in/groups, kernel...]
	weights := make([]int64, rank)   // row-major
	for j := range rank {
		weights[j] = int64(rank - 1 - j)
		if j >= 2 {
			toHWIO = append(toHWIO, int64(j))
		}
	}
	toHWIO = append(toHWIO, 1, 0)
	wHWIO, err := w.Block().Transpose(w, toHWIO...)
	if err != nil {
		return nil, err
	}
	act, alpha, err := epilogueAttrs(e)
	if err != nil {
		return nil, err
	}
	call := stablehlo.FFICall{
		Target:   ConvKernel,
		Operands: []*stablehlo.Value{x, wHWIO},
		Results:  []stablehlo.Type{stablehlo.TensorOf(x.Type().Elem, outDims...)},
		Attrs: []stablehlo.FFIAttr{
			{Name: "activation", Int: act},
			{Name: "alpha", Float: alpha, IsFloat: true},
			{Name: "dilation", Ints: dilations(p.Dilation, spatial), Array: true},
			{Name: "groups", Int: max(p.Groups, 1)},
			{Name: "pad_hi", Ints: p.Padding[:spatial], Array: true},
			{Name: "pad_lo", Ints: p.Padding[:spatial], Array: true},
			{Name: "stride", Ints: p.Stride[:spatial], Array: true},
		},
		OperandLayouts: [][]int64{cl, weights},
		ResultLayouts:  [][]int64{cl},
	}
	hasBias, residual := int64(0), int64(0)
	if bias != nil {
		call.Operands = append(call.Operands, bias)
		call.OperandLayouts = append(call.OperandLayouts, []int64{0})
		hasBias = 1
	}
	if e != nil && e.Residual != nil {
		call.Operands = append(call.Operands, e.Residual)
		call.OperandLayouts = append(call.OperandLayouts, cl)
		residual = 1
	}
	call.Attrs = append(call.Attrs, stablehlo.FFIAttr{Name: "has_bias", Int: hasBias}, stablehlo.FFIAttr{Name: "residual", Int: residual})
	out, err := x.Block().FFICall(kernelSite(call))
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// matmulMinMACs is the size below which a product stays XLA's own
// dot_general: a custom call costs a few microseconds, which a tiny
// product does not repay.
const matmulMinMACs = 1 << 14

// matmulShape describes a dot_general as the kernel's batched matrix product.
type matmulShape struct {
	batch, m, k, n int64
	transA, transB bool
	rank           int     // 2 without batch dims, else 3
	out            []int64 // the dot_general's result dims
}

// matmulForm reports whether the float32 dot_general d of x and y (one
// contracting dim each; batch dims, if any, leading and in order) is a
// matrix product the kernel takes without moving data: x is [batch...,
// free..., K] or [batch..., K, M], y is [batch..., K, N], [batch..., N, K]
// or [batch..., K], so that reshapes (free in XLA) make [B, M, K] and [B,
// K, N].
func matmulForm(x, y *stablehlo.Value, d stablehlo.DotDims) (matmulShape, bool) {
	xt, yt := x.Type(), y.Type()
	xc, xb, yc, yb := d.LhsContract, d.LhsBatch, d.RhsContract, d.RhsBatch
	if xt.Elem != stablehlo.F32 || yt.Elem != stablehlo.F32 || len(xc) != 1 || len(yc) != 1 || len(xb) != len(yb) {
		return matmulShape{}, false
	}
	xd, yd := xt.Dims, yt.Dims
	nb := len(xb)
	f := matmulShape{batch: 1, rank: 2}
	for i := range xb {
		if xb[i] != int64(i) || yb[i] != int64(i) || xd[i] != yd[i] {
			return matmulShape{}, false
		}
		f.batch *= xd[i]
		f.out = append(f.out, xd[i])
	}
	if nb > 0 {
		f.rank = 3
	}
	if !f.left(xd, nb, xc[0]-int64(nb)) || !f.right(yd, nb, yc[0]-int64(nb)) {
		return matmulShape{}, false
	}
	if f.batch*f.m*f.n*f.k < matmulMinMACs || f.m == 0 || f.n == 0 || f.k == 0 || f.fewRows() {
		return matmulShape{}, false
	}
	return f, true
}

// Matrix-vector products stay XLA's: below matvecMaxRows rows of a weight
// of at least matvecMinWeights elements (a decode step's linear layers, M
// the sequences decoding at once), oneDNN's matmul copies the weight into
// its blocked layout on every call, which costs more than the product
// reads; XLA's own dot streams the row-major weight once. Measured with
// `make bench-ops` (decode_linears, two layers of a 100M Llama): the kernel
// 1.9-3.8x XLA's time at 1 row, 1.6-2.1x at 4 and 16 (docs/BENCHMARKS.md).
const (
	matvecMaxRows    = 32
	matvecMinWeights = 1 << 16
)

// fewRows reports whether f is such a matrix-vector product.
func (f matmulShape) fewRows() bool {
	return f.m < matvecMaxRows && f.k*f.n >= matvecMinWeights
}

// left sets M, K and transA from x's dims xd (nb batch dims, contracting
// dim cx after them).
func (f *matmulShape) left(xd []int64, nb int, cx int64) bool {
	rx := int64(len(xd) - nb)
	switch {
	case rx >= 2 && cx == rx-1:
		f.m = 1
		for _, d := range xd[nb : len(xd)-1] {
			f.m *= d
		}
		f.out = append(f.out, xd[nb:len(xd)-1]...)
	case rx == 2 && cx == 0:
		f.m, f.transA = xd[nb+1], true
		f.out = append(f.out, f.m)
	default:
		return false
	}
	f.k = xd[int64(nb)+cx]
	return true
}

// right sets N and transB from y's dims yd.
func (f *matmulShape) right(yd []int64, nb int, cy int64) bool {
	ry := int64(len(yd) - nb)
	switch {
	case ry == 1 && cy == 0:
		f.n = 1
	case ry == 2 && cy == 0:
		f.n = yd[nb+1]
		f.out = append(f.out, f.n)
	case ry == 2 && cy == 1:
		f.n, f.transB = yd[nb], true
		f.out = append(f.out, f.n)
	default:
		return false
	}
	return true
}

// dot is the CPU's matrix product: the kernel where the product has its
// form (matmulForm), with the epilogue when it fits the product (a bias of
// N, a residual of the product's shape); else declined.
func dot(ctx *lower.Context, x, y *stablehlo.Value, d stablehlo.DotDims, e *lower.Epilogue) (*stablehlo.Value, bool, error) {
	if !ctx.Options.HasKernel(MatmulKernel) {
		return nil, false, nil
	}
	f, ok := matmulForm(x, y, d)
	if !ok {
		return nil, false, nil
	}
	if e != nil && e.Bias != nil && e.Bias.Type().Dims[0] != f.n {
		e = nil
	}
	if e != nil && e.Residual != nil && !slices.Equal(e.Residual.Type().Dims, f.out) {
		e = nil
	}
	v, err := matmulKernel(x, y, f, e)
	return v, e != nil, err
}

// matmulKernel computes the product f describes with MatmulKernel.
func matmulKernel(x, y *stablehlo.Value, f matmulShape, e *lower.Epilogue) (*stablehlo.Value, error) {
	shape := func(rows, cols int64, trans bool) []int64 {
		if trans {
			rows, cols = cols, rows
		}
		if f.rank == 2 {
			return []int64{rows, cols}
		}
		return []int64{f.batch, rows, cols}
	}
	a, err := reshape(x, shape(f.m, f.k, f.transA))
	if err != nil {
		return nil, err
	}
	w, err := reshape(y, shape(f.k, f.n, f.transB))
	if err != nil {
		return nil, err
	}
	act, alpha, err := epilogueAttrs(e)
	if err != nil {
		return nil, err
	}
	rowMajor := []int64{1, 0}
	if f.rank == 3 {
		rowMajor = []int64{2, 1, 0}
	}
	call := stablehlo.FFICall{
		Target:   MatmulKernel,
		Operands: []*stablehlo.Value{a, w},
		Results:  []stablehlo.Type{stablehlo.TensorOf(stablehlo.F32, shape(f.m, f.n, false)...)},
		Attrs: []stablehlo.FFIAttr{
			{Name: "activation", Int: act},
			{Name: "alpha", Float: alpha, IsFloat: true},
			{Name: "trans_a", Int: boolInt(f.transA)},
			{Name: "trans_b", Int: boolInt(f.transB)},
		},
		OperandLayouts: [][]int64{rowMajor, rowMajor},
		ResultLayouts:  [][]int64{rowMajor},
	}
	hasBias, residual := int64(0), int64(0)
	if e != nil && e.Bias != nil {
		call.Operands = append(call.Operands, e.Bias)
		call.OperandLayouts = append(call.OperandLayouts, []int64{0})
		hasBias = 1
	}
	if e != nil && e.Residual != nil {
		r, err := reshape(e.Residual, shape(f.m, f.n, false))
		if err != nil {
			return nil, err
		}
		call.Operands = append(call.Operands, r)
		call.OperandLayouts = append(call.OperandLayouts, rowMajor)
		residual = 1
	}
	call.Attrs = append(call.Attrs, stablehlo.FFIAttr{Name: "has_bias", Int: hasBias}, stablehlo.FFIAttr{Name: "residual", Int: residual})
	out, err := a.Block().FFICall(kernelSite(call))
	if err != nil {
		return nil, err
	}
	return reshape(out[0], f.out)
}

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// reshape gives x the dims (nothing when it has them).
func reshape(x *stablehlo.Value, dims []int64) (*stablehlo.Value, error) {
	if slices.Equal(x.Type().Dims, dims) {
		return x, nil
	}
	return x.Block().Reshape(x, dims...)
}

// maxPool is the CPU's max pooling: the kernel for float32 where every
// window overlaps the input (XLA's own reduce_window gives the lowest value
// for a window of padding only); else declined. Channels-last in and out
// like the convolution kernel, so that XLA keeps a CNN channels-last
// through it.
func maxPool(ctx *lower.Context, x *stablehlo.Value, outDims []int64, p fxgraph.PoolParams, lo, hi []int64) (*stablehlo.Value, error) {
	return poolKernel(ctx, PoolKernel, x, outDims, p, lo, hi, nil)
}

// avgPool is the CPU's average pooling: the kernel for float32 where every
// window overlaps the input and the divisor is one oneDNN has: the
// window's elements inside the input (count_include_pad off), or the
// window's size where no window reaches past the padding (ceil mode adds
// none); else declined.
func avgPool(ctx *lower.Context, x *stablehlo.Value, outDims []int64, p fxgraph.PoolParams, lo, hi []int64) (*stablehlo.Value, error) {
	if p.DivisorOverride != 0 {
		return nil, nil
	}
	for j := range p.Kernel {
		if p.CountIncludePad && (hi[j] != p.Padding[j] || lo[j] != p.Padding[j]) {
			return nil, nil
		}
	}
	return poolKernel(ctx, AvgPoolKernel, x, outDims, p, lo, hi,
		[]stablehlo.FFIAttr{{Name: "exclude_pad", Int: boolInt(!p.CountIncludePad)}})
}

// poolKernel calls the pooling kernel target (PoolKernel, AvgPoolKernel)
// with the window attributes and extra; nil where it is not loaded, x is
// not float32 of 1 to 3 spatial dims, or a window lies in the padding only.
func poolKernel(ctx *lower.Context, target string, x *stablehlo.Value, outDims []int64, p fxgraph.PoolParams, lo, hi []int64, extra []stablehlo.FFIAttr) (*stablehlo.Value, error) {
	if !ctx.Options.HasKernel(target) || x.Type().Elem != stablehlo.F32 || len(p.Kernel) < 1 || len(p.Kernel) > 3 {
		return nil, nil
	}
	dil := dilations(p.Dilation, len(p.Kernel))
	for j, k := range p.Kernel {
		ek := dil[j]*(k-1) + 1
		if lo[j] >= ek || hi[j] >= ek {
			return nil, nil
		}
	}
	cl := channelsLast(len(outDims))
	call := stablehlo.FFICall{
		Target:   target,
		Operands: []*stablehlo.Value{x},
		Results:  []stablehlo.Type{stablehlo.TensorOf(x.Type().Elem, outDims...)},
		Attrs: append([]stablehlo.FFIAttr{
			{Name: "dilation", Ints: dil, Array: true},
			{Name: "pad_hi", Ints: hi, Array: true},
			{Name: "pad_lo", Ints: lo, Array: true},
			{Name: "stride", Ints: p.Stride, Array: true},
			{Name: "window", Ints: p.Kernel, Array: true},
		}, extra...),
		OperandLayouts: [][]int64{cl},
		ResultLayouts:  [][]int64{cl},
	}
	out, err := x.Block().FFICall(kernelSite(call))
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// kernelSite adds the "site" attribute, a hash of everything that decides
// the kernel's primitive (target, operand and result types and layouts,
// attributes), under which the library caches the primitive made for this
// call site on its first call: later calls skip reading the attributes and
// building, hashing and comparing its key (about 0.2 µs of its 1.5;
// cpukernels/common.h, "Call sites"). They still check the operands'
// shapes against the primitive's; the cryptographic hash keeps calls with
// different attributes, even from another model loaded in the same
// process, from sharing a site.
func kernelSite(call stablehlo.FFICall) stablehlo.FFICall {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%v|%v|%v|%v|", call.Target, typesOf(call.Operands), call.Results, call.OperandLayouts, call.ResultLayouts)
	for _, a := range call.Attrs {
		fmt.Fprintf(h, "%s=%d,%v,%t,%v,%t;", a.Name, a.Int, a.Ints, a.Array, math.Float32bits(a.Float), a.IsFloat)
	}
	site := int64(binary.LittleEndian.Uint64(h.Sum(nil)))
	if site == 0 {
		site = 1
	}
	call.Attrs = append(slices.Clone(call.Attrs), stablehlo.FFIAttr{Name: "site", Int: site})
	return call
}

// typesOf returns the types of vs.
func typesOf(vs []*stablehlo.Value) []stablehlo.Type {
	ts := make([]stablehlo.Type, len(vs))
	for i, v := range vs {
		ts[i] = v.Type()
	}
	return ts
}

// rows reshapes x to [M, N], N its last dim and M the product of the
// others; ok is false for a scalar or an empty x.
func rows(x *stablehlo.Value) (*stablehlo.Value, bool, error) {
	d := x.Type().Dims
	if len(d) == 0 || tensor.NumElements(d) == 0 {
		return nil, false, nil
	}
	r, err := reshape(x, []int64{tensor.NumElements(d) / d[len(d)-1], d[len(d)-1]})
	return r, err == nil, err
}

// rowKernel calls target on x and the [N] operands extra (x reshaped to
// [M, N], row-major) with attrs, and gives the result x's dims; nil where
// the kernel is not loaded or x is not a float32 of elements.
func rowKernel(ctx *lower.Context, target string, x *stablehlo.Value, extra []*stablehlo.Value, attrs []stablehlo.FFIAttr) (*stablehlo.Value, error) {
	if !ctx.Options.HasKernel(target) || x.Type().Elem != stablehlo.F32 {
		return nil, nil
	}
	for _, e := range extra {
		if e.Type().Elem != stablehlo.F32 {
			return nil, nil
		}
	}
	r, ok, err := rows(x)
	if !ok {
		return nil, err
	}
	layouts := [][]int64{{1, 0}}
	for range extra {
		layouts = append(layouts, []int64{0})
	}
	call := stablehlo.FFICall{
		Target:         target,
		Operands:       append([]*stablehlo.Value{r}, extra...),
		Results:        []stablehlo.Type{r.Type()},
		Attrs:          attrs,
		OperandLayouts: layouts,
		ResultLayouts:  [][]int64{{1, 0}},
	}
	out, err := r.Block().FFICall(kernelSite(call))
	if err != nil {
		return nil, err
	}
	return reshape(out[0], x.Type().Dims)
}

// softmax is the CPU's softmax along the last dim: the kernel for float32
// (SoftmaxKernel); else declined.
func softmax(ctx *lower.Context, x *stablehlo.Value, log bool) (*stablehlo.Value, error) {
	return rowKernel(ctx, SoftmaxKernel, x, nil, []stablehlo.FFIAttr{{Name: "log", Int: boolInt(log)}})
}

// layerNorm is the CPU's layer normalization along the last dim: the
// kernel for float32 (LayerNormKernel); else declined.
func layerNorm(ctx *lower.Context, x, scale, shift *stablehlo.Value, eps float64) (*stablehlo.Value, error) {
	return rowKernel(ctx, LayerNormKernel, x, []*stablehlo.Value{scale, shift},
		[]stablehlo.FFIAttr{{Name: "eps", Float: float32(eps), IsFloat: true}})
}
