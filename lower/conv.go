package lower

import (
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// nnConvolution lowers aten.convolution.default. A transposed convolution
// is the convolution of the input dilated by the stride with the spatially
// flipped kernel, whose in/out feature dims are swapped within each group,
// padded by dilation*(k-1)-padding on both sides plus output_padding on the
// high side (negative paddings crop the result).
func nnConvolution(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	return nnConvRule(ctx, n, in, nil)
}

// nnConvFused lowers xserve.conv_fused: the convolution with its epilogue
// (the platform's convolution may apply it; else it follows the product).
func nnConvFused(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, _ := Out(n, 0)
	epi, err := nnLowerEpilogue(ctx, n, ctx.ComputeDType(dt))
	if err != nil {
		return nil, err
	}
	return nnConvRule(ctx, n, in, epi)
}

// nnConvRule lowers a convolution node, plus epi (nil for none).
func nnConvRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value, epi *Epilogue) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, wd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	spatial := len(wd) - 2
	p, err := fxgraph.ConvArgs(n, spatial)
	if err != nil {
		return nil, err
	}
	cdt := ctx.ComputeDType(dt)
	b := &nnB{chain: chain{ctx: ctx}}
	x, w := b.convert(in[0], cdt), b.convert(in[1], cdt)
	if conv := ctx.Primitives().Conv; conv != nil && !p.Transposed && b.err == nil {
		if _, xd, err := InMeta(n, 0); err == nil {
			var bias *stablehlo.Value
			if in[2] != nil {
				bias = b.convert(in[2], cdt)
			}
			y, done, err := conv(ctx, x, w, bias, xd, wd, outDims, p, epi)
			if err != nil {
				return nil, err
			}
			if y != nil {
				if !done {
					y = nnApplyEpilogue(b, y, epi, outDims)
				}
				return b.out(b.convert(y, dt))
			}
		}
	}
	y := nnConvProduct(b, x, w, wd, outDims, p)
	if in[2] != nil {
		bias := b.convert(in[2], cdt)
		y = b.add(y, b.bcastIn(bias, outDims, []int64{1}))
	}
	y = nnApplyEpilogue(b, y, epi, outDims)
	return b.out(b.convert(y, dt))
}

// nnConvProduct is the convolution of x and w (weight dims wd) without
// bias: a stablehlo.convolution.
func nnConvProduct(b *nnB, x, w *stablehlo.Value, wd, outDims []int64, p fxgraph.ConvParams) *stablehlo.Value {
	spatial := len(wd) - 2
	prec := b.ctx.Precision()
	if !p.Transposed {
		pads := make([][2]int64, spatial)
		for j := range pads {
			pads[j] = [2]int64{p.Padding[j], p.Padding[j]}
		}
		return b.conv(x, w, stablehlo.ConvDims{KernelInput: 1, KernelOutput: 0, Strides: p.Stride, RhsDilation: p.Dilation,
			Padding: pads, FeatureGroups: p.Groups}, prec)
	}
	g := p.Groups
	if b.err == nil {
		w = b.set(w.Block().Reverse(w, nnRange(2, 2+spatial)...))
	}
	kin, kout := int64(0), int64(1)
	if g > 1 {
		cin, coutg := wd[0], wd[1]
		w = b.reshape(w, append([]int64{g, cin / g, coutg}, wd[2:]...))
		perm := append([]int64{0, 2, 1}, nnRange(3, 3+spatial)...)
		w = b.transpose(w, perm)
		w = b.reshape(w, append([]int64{g * coutg, cin / g}, wd[2:]...))
		kin, kout = 1, 0
	}
	pads := make([][2]int64, spatial)
	crop := false
	starts, limits := make([]int64, len(outDims)), slices.Clone(outDims)
	for j := 0; j < spatial; j++ {
		ek := p.Dilation[j] * (wd[2+j] - 1)
		lo := ek - p.Padding[j]
		hi := ek - p.Padding[j] + p.OutputPadding[j]
		pads[j] = [2]int64{max(lo, 0), max(hi, 0)}
		if lo < 0 {
			crop = true
			starts[2+j] = -lo
			limits[2+j] += -lo
		}
		if hi < 0 {
			crop = true
		}
	}
	y := b.conv(x, w, stablehlo.ConvDims{KernelInput: kin, KernelOutput: kout, LhsDilation: p.Stride, RhsDilation: p.Dilation,
		Padding: pads, FeatureGroups: g}, prec)
	if crop {
		y = b.slice(y, starts, limits, nil)
	}
	return y
}

// IsDepthwise reports whether a convolution of x [N, C, spatial...] with
// weight w [out, in/groups, kernel...] (dims xd and wd) is depthwise with
// one output channel per input channel.
func IsDepthwise(xd, wd []int64, groups int64) bool {
	return len(xd) == len(wd) && groups > 1 && xd[1] == groups && wd[0] == groups && wd[1] == 1
}

// DepthwiseConv computes a depthwise convolution (IsDepthwise, not
// transposed) as the sum over kernel taps k of slice(pad(x), k*dilation,
// stride) * w[:, 0, k], the per-channel weight broadcast along the channel
// axis: what Options.DepthwiseMulAdd asks of a platform whose convolution
// expands groups (XLA CPU). Padding is symmetric, as ConvParams has it.
func DepthwiseConv(ctx *Context, x, w *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams) (*stablehlo.Value, error) {
	b := &nnB{chain: chain{ctx: ctx}}
	y := nnDepthwise(b, x, w, xd, wd, outDims, p)
	return y, b.err
}

// ConvAsDotFits reports whether a convolution of x [N, C, spatial...] with
// weight w [out, in/groups, kernel...] giving outDims is worth computing as
// a matrix product (ConvAsDot): one group, one to three spatial dims,
// static sizes, a kernel window with more taps than the input has positions
// (XLA CPU swaps the operands of such a convolution into a form it runs in
// plain loops; elsewhere its own convolution measured faster than the
// matrix product) and a patch matrix of at most nnConvAsDotMaxPatches
// elements.
func ConvAsDotFits(xd, wd, outDims []int64, groups int64) bool {
	return nnConvAsDotFits(xd, wd, outDims, groups)
}

// ConvAsDot computes a convolution (one group, not transposed) as one
// matrix product over the input's patches (im2col); see ConvAsDotFits.
func ConvAsDot(ctx *Context, x, w *stablehlo.Value, wd, outDims []int64, p fxgraph.ConvParams) (*stablehlo.Value, error) {
	b := &nnB{chain: chain{ctx: ctx}}
	y := nnConvAsDot(b, x, w, wd, outDims, p)
	return y, b.err
}

// conv is a convolution of PyTorch's layouts: input and output [batch,
// feature, spatial...], the kernel's dims given by d.KernelInput and
// d.KernelOutput then spatial; d's other fields say the window.
func (b *nnB) conv(x, w *stablehlo.Value, d stablehlo.ConvDims, prec stablehlo.Precision) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	sp := nnRange(2, x.Type().Rank())
	d.InputBatch, d.InputFeature, d.InputSpatial = 0, 1, sp
	d.KernelSpatial = sp
	d.OutputBatch, d.OutputFeature, d.OutputSpatial = 0, 1, sp
	d.BatchGroups = 1
	return b.set(x.Block().Convolution(x, w, d, prec, stablehlo.Invalid))
}

// nnDepthwise computes a depthwise convolution (see nnIsDepthwise) as
// sum over kernel taps k of slice(pad(x), k*dilation, stride) * w[:, 0, k],
// the per-channel weight broadcast along the channel axis. Padding is
// symmetric, as ConvParams has it.
func nnDepthwise(b *nnB, x, w *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams) *stablehlo.Value {
	rank := len(xd)
	spatial := rank - 2
	lo, zero := make([]int64, rank), make([]int64, rank)
	for j := range spatial {
		lo[2+j] = p.Padding[j]
	}
	if b.err == nil {
		x = b.set(x.Block().Pad(x, b.scalar(x, 0), lo, lo, zero))
	}
	strides := make([]int64, rank)
	strides[0], strides[1] = 1, 1
	for j := range spatial {
		strides[2+j] = p.Stride[j]
	}
	var acc *stablehlo.Value
	tap := make([]int64, spatial) // the kernel position, odometer order
	for {
		xs, xl := make([]int64, rank), make([]int64, rank)
		ws, wl := make([]int64, rank), make([]int64, rank)
		xl[0], xl[1] = xd[0], xd[1]
		wl[0], wl[1] = wd[0], 1
		for j := range spatial {
			xs[2+j] = tap[j] * p.Dilation[j]
			xl[2+j] = xs[2+j] + (outDims[2+j]-1)*p.Stride[j] + 1
			ws[2+j], wl[2+j] = tap[j], tap[j]+1
		}
		wt := b.reshape(b.slice(w, ws, wl, nil), []int64{wd[0]})
		term := b.mul(b.slice(x, xs, xl, strides), b.bcastIn(wt, outDims, []int64{1}))
		if acc == nil {
			acc = term
		} else {
			acc = b.add(acc, term)
		}
		if !nextIndex(tap, wd[2:]) {
			return acc
		}
	}
}

// nnConvAsDotMaxPatches bounds the patch matrix of a convolution computed as
// a matrix product (Options.ConvAsDot), in elements: above it (large images
// in large batch buckets) the memory the patches take costs more than XLA's
// own convolution loses.
const nnConvAsDotMaxPatches = 1 << 23

// nnConvAsDotFits reports whether a convolution of x [N, C, spatial...] with
// weight w [out, in/groups, kernel...] giving outDims is computed as a
// matrix product: one group, one to three spatial dims, static sizes, a
// kernel window with more taps than the input has positions (XLA CPU swaps
// the operands of such a convolution into a form it runs in plain loops;
// elsewhere its own convolution measured faster than the matrix product)
// and a patch matrix of at most nnConvAsDotMaxPatches elements.
func nnConvAsDotFits(xd, wd, outDims []int64, groups int64) bool {
	spatial := len(wd) - 2
	if groups != 1 || spatial < 1 || spatial > 3 || len(xd) != len(wd) || len(outDims) != len(wd) {
		return false
	}
	for _, d := range append(append(append([]int64{}, xd...), wd...), outDims...) {
		if d <= 0 {
			return false
		}
	}
	if nnProd(wd[2:]) <= nnProd(xd[2:]) {
		return false
	}
	rows := outDims[0]
	for _, d := range outDims[2:] {
		rows *= d
	}
	return rows*nnProd(wd[1:]) <= nnConvAsDotMaxPatches
}

// nnConvAsDot computes a convolution with one group as one matrix product
// (im2col): the input, channels last and padded, is cut into one strided
// slice per kernel tap, the slices are concatenated along the channels into
// patches [N, out spatial..., taps*C] (tap-major), and multiplied by the
// kernel taken as [taps*C, O], which with Options.ConvWeightsHWIO is its
// parameter's own layout. XLA CPU runs the product in its matrix
// multiplication kernels; its algebraic simplifier swaps the operands of a
// convolution whose window has more taps than its input has positions (3x3
// kernels on the 2x2 maps at the end of a ResNet on small images), and its
// fast convolution kernels do not take the swapped form, which then runs in
// plain loops.
func nnConvAsDot(b *nnB, x, w *stablehlo.Value, wd, outDims []int64, p fxgraph.ConvParams) *stablehlo.Value {
	spatial := len(wd) - 2
	rank := spatial + 2
	toLast := append(append([]int64{0}, nnRange(2, rank)...), 1) // NC... -> N...C
	xl := b.transpose(x, toLast)
	lo, hi := make([]int64, rank), make([]int64, rank)
	padded := false
	for j := 0; j < spatial; j++ {
		lo[1+j], hi[1+j] = p.Padding[j], p.Padding[j]
		padded = padded || p.Padding[j] != 0
	}
	if padded && b.err == nil {
		xl = b.set(xl.Block().Pad(xl, b.scalar(xl, 0), lo, hi, nil))
	}
	c := wd[1]
	taps := []*stablehlo.Value{}
	tap := make([]int64, spatial)
	for {
		starts, limits, strides := make([]int64, rank), make([]int64, rank), make([]int64, rank)
		limits[0], strides[0] = outDims[0], 1
		limits[rank-1], strides[rank-1] = c, 1
		for j := 0; j < spatial; j++ {
			starts[1+j] = tap[j] * p.Dilation[j]
			limits[1+j] = starts[1+j] + (outDims[2+j]-1)*p.Stride[j] + 1
			strides[1+j] = p.Stride[j]
		}
		taps = append(taps, b.slice(xl, starts, limits, strides))
		if !nextIndex(tap, wd[2:]) {
			break
		}
	}
	patches := taps[0]
	if len(taps) > 1 && b.err == nil {
		patches = b.concat(rank-1, taps...)
	}
	kernel := b.transpose(w, append(nnRange(2, rank), 1, 0)) // [kernel..., in, out]
	kernel = b.reshape(kernel, []int64{nnProd(wd[1:]), wd[0]})
	y := b.dot(patches, []int64{int64(rank - 1)}, nil, kernel, []int64{0}, nil)
	return b.transpose(y, append([]int64{0, int64(rank - 1)}, nnRange(1, rank-1)...))
}
