package lower

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerNN registers the rules of convolution, pooling, normalization, matmul and softmax.
func registerNN(r *Registry) {
	r.Register(fxgraph.AtenConvolution, nnConvolution)
	r.Register(fxgraph.AtenMm, nnMM)
	r.Register(fxgraph.AtenBmm, nnBMM)
	r.Register(fxgraph.AtenAddmm, nnAddmm)
	r.Register(fxgraph.AtenMatmul, nnMatmul)
	r.Register(fxgraph.AtenLinear, nnLinear)
	r.Register(fxgraph.AtenMaxPool1d, nnMaxPoolRule(1, false))
	r.Register(fxgraph.AtenMaxPool1dWithIndices, nnMaxPoolRule(1, true))
	r.Register(fxgraph.AtenMaxPool2dWithIndices, nnMaxPoolRule(2, true))
	r.Register(fxgraph.AtenMaxPool3dWithIndices, nnMaxPoolRule(3, true))
	r.Register(fxgraph.AtenAvgPool1d, nnAvgPoolRule(1))
	r.Register(fxgraph.AtenAvgPool2d, nnAvgPoolRule(2))
	r.Register(fxgraph.AtenAvgPool3d, nnAvgPoolRule(3))
	r.Register(fxgraph.Aten_AdaptiveAvgPool2d, nnAdaptiveAvgPoolRule(2))
	r.Register(fxgraph.Aten_NativeBatchNormLegitNoTraining, nnBatchNorm)
	r.Register(fxgraph.AtenNativeLayerNorm, nnLayerNorm)
	r.Register(fxgraph.AtenNativeGroupNorm, nnGroupNorm)
	r.Register(fxgraph.Aten_Softmax, nnSoftmaxRule(false))
	r.Register(fxgraph.Aten_LogSoftmax, nnSoftmaxRule(true))
	r.Register(fxgraph.XserveResize, nnResize)
	r.Register(fxgraph.AtenGridSampler2d, nnGridSampler)
	r.Register(fxgraph.XserveRoIAlign, nnRoiAlign)
	r.Register(fxgraph.XserveConvFused, nnConvFused)
	r.Register(fxgraph.XserveMatmulFused, nnMatmulFused)
}

// nnB is the chain the nn rules build with, plus the epilogue the next
// matrix product may apply (the platform's Dot; epiUsed says it did).
type nnB struct {
	chain
	epi     *Epilogue
	epiUsed bool
}

// nnFloatCompute is the dtype floating-point normalization, pooling and
// softmax math of dt runs in: float32 for half floats, dt otherwise.
func nnFloatCompute(dt tensor.DType) tensor.DType {
	if dt == tensor.Float16 || dt == tensor.BFloat16 {
		return tensor.Float32
	}
	return dt
}

// nnRange returns from, from+1, ..., to-1.
func nnRange(from, to int) []int64 {
	out := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func nnProd(v []int64) int64 {
	p := int64(1)
	for _, x := range v {
		p *= x
	}
	return p
}

// nnAllBut returns the axes of [0, rank) other than skip.
func nnAllBut(rank int, skip ...int64) []int64 {
	var out []int64
	for i := range int64(rank) {
		if !slices.Contains(skip, i) {
			out = append(out, i)
		}
	}
	return out
}

// nnChannelVec returns argument i (a per-channel vector) in dtype like's,
// or a constant def when it is None.
func nnChannelVec(b *nnB, in []*stablehlo.Value, i int, like *stablehlo.Value, c int64, def float64) *stablehlo.Value {
	if i < len(in) && in[i] != nil {
		dt, err := DTypeOf(like.Type().Elem)
		if err != nil {
			b.err = err
			return nil
		}
		return b.convert(in[i], dt)
	}
	return b.full(like, def, []int64{c})
}

// nnBatchNorm lowers _native_batch_norm_legit_no_training:
// (x - mean) * (weight / sqrt(var + eps)) + bias, with empty saved stats.
func nnBatchNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, xd := Out(n, 0)
	eps, err := n.ParamFloat("eps")
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	x := b.convert(in[0], nnFloatCompute(dt))
	if b.err != nil {
		return nil, b.err
	}
	c := xd[1]
	w := nnChannelVec(b, in, 1, x, c, 1)
	bias := nnChannelVec(b, in, 2, x, c, 0)
	mean := nnChannelVec(b, in, 3, x, c, 0)
	variance := nnChannelVec(b, in, 4, x, c, 1)
	inv := b.un((*stablehlo.Block).Sqrt, b.add(variance, b.full(x, eps, []int64{c})))
	scale := b.div(w, inv)
	bc := func(v *stablehlo.Value) *stablehlo.Value { return b.bcastIn(v, xd, []int64{1}) }
	y := b.sub(x, bc(mean))
	y = b.mul(y, bc(scale))
	y = b.add(y, bc(bias))
	y = b.convert(y, dt)
	empty := b.full(y, 0, []int64{0})
	return b.out(y, empty, empty)
}

// nnNormalize returns (x - mean) * rstd over the given axes of x, with mean
// and rstd (reduced over axes).
func nnNormalize(b *nnB, x *stablehlo.Value, dims []int64, axes []int64, eps float64) (y, mean, rstd *stablehlo.Value) {
	count := int64(1)
	for _, a := range axes {
		count *= dims[a]
	}
	keep := nnAllBut(len(dims), axes...)
	var kdims []int64
	for _, a := range keep {
		kdims = append(kdims, dims[a])
	}
	mean = b.reduce(x, ReduceSum, 0, axes)
	mean = b.div(mean, b.full(x, float64(count), kdims))
	xc := b.sub(x, b.bcastIn(mean, dims, keep))
	v := b.reduce(b.mul(xc, xc), ReduceSum, 0, axes)
	v = b.div(v, b.full(x, float64(count), kdims))
	v = b.add(v, b.full(x, eps, kdims))
	rstd = b.div(b.full(x, 1, kdims), b.un((*stablehlo.Block).Sqrt, v))
	y = b.mul(xc, b.bcastIn(rstd, dims, keep))
	return y, mean, rstd
}

// nnLayerNorm lowers native_layer_norm over the trailing normalized dims;
// mean and rstd keep the normalized dims as size 1.
func nnLayerNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, xd := Out(n, 0)
	_, statDims := Out(n, 1)
	ns, err := n.IntsArg(1, "normalized_shape", nil)
	if err != nil {
		return nil, err
	}
	eps, err := n.ParamFloat("eps")
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	// Where the platform computes y, the generic y below is unused (XLA
	// drops it), and so are mean and rstd unless the graph reads them.
	platY, err := nnPlatformLayerNorm(ctx, b, x, in, len(ns), cdt, eps)
	if err != nil {
		return nil, err
	}
	y, mean, rstd := nnNormalize(b, x, xd, nnRange(len(xd)-len(ns), len(xd)), eps)
	if len(in) > 2 && in[2] != nil {
		y = b.mul(y, b.bcast(b.convert(in[2], cdt), xd))
	}
	if len(in) > 3 && in[3] != nil {
		y = b.add(y, b.bcast(b.convert(in[3], cdt), xd))
	}
	if platY != nil {
		y = platY
	}
	mean = b.convert(b.reshape(mean, statDims), dt)
	rstd = b.convert(b.reshape(rstd, statDims), dt)
	return b.out(b.convert(y, dt), mean, rstd)
}

// nnPlatformLayerNorm is the platform's layer norm (Primitives.LayerNorm)
// of x over its last dim (normalized is how many trailing dims the op
// normalizes over) with the op's weight in[2] and bias in[3], or nil where
// it has none or the op is not of that form.
func nnPlatformLayerNorm(ctx *Context, b *nnB, x *stablehlo.Value, in []*stablehlo.Value, normalized int, cdt tensor.DType, eps float64) (*stablehlo.Value, error) {
	ln := ctx.Primitives().LayerNorm
	if ln == nil || normalized != 1 || len(in) < 4 || in[2] == nil || in[3] == nil || b.err != nil {
		return nil, nil
	}
	scale, shift := b.convert(in[2], cdt), b.convert(in[3], cdt)
	if b.err != nil {
		return nil, b.err
	}
	return ln(ctx, x, scale, shift, eps)
}

// nnGroupNorm lowers native_group_norm: x viewed as [N, G, C/G * HxW] is
// normalized over its last dim, then scaled and shifted per channel.
func nnGroupNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, xd := Out(n, 0)
	_, statDims := Out(n, 1)
	g, err := n.ParamInt("group")
	if err != nil {
		return nil, err
	}
	eps, err := n.ParamFloat("eps")
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	gd := []int64{xd[0], g, nnProd(xd[1:]) / g}
	y, mean, rstd := nnNormalize(b, b.reshape(x, gd), gd, []int64{2}, eps)
	y = b.reshape(y, xd)
	if in[1] != nil {
		y = b.mul(y, b.bcastIn(b.convert(in[1], cdt), xd, []int64{1}))
	}
	if in[2] != nil {
		y = b.add(y, b.bcastIn(b.convert(in[2], cdt), xd, []int64{1}))
	}
	mean = b.convert(b.reshape(mean, statDims), dt)
	rstd = b.convert(b.reshape(rstd, statDims), dt)
	return b.out(b.convert(y, dt), mean, rstd)
}

// nnSoftmaxRule lowers _softmax / _log_softmax along one dim, subtracting
// the max first; half floats compute in float32.
func nnSoftmaxRule(logSoftmax bool) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		dt, outDims := Out(n, 0)
		d, err := n.IntArg(1, "dim", -1)
		if err != nil {
			return nil, err
		}
		b := &nnB{chain: chain{ctx: ctx}}
		x := b.convert(in[0], nnFloatCompute(dt))
		dims := outDims
		if len(dims) == 0 {
			dims = []int64{1}
			x = b.reshape(x, dims)
			d = 0
		}
		axis, err := fxgraph.NormDim(d, len(dims))
		if err != nil {
			return nil, err
		}
		if sm := ctx.Primitives().Softmax; sm != nil && axis == len(dims)-1 && b.err == nil {
			y, err := sm(ctx, x, logSoftmax)
			if err != nil {
				return nil, err
			}
			if y != nil {
				return b.out(b.convert(b.reshape(y, outDims), dt))
			}
		}
		keep := nnAllBut(len(dims), int64(axis))
		m := b.bcastIn(b.reduce(x, ReduceMax, math.Inf(-1), []int64{int64(axis)}), dims, keep)
		z := b.sub(x, m)
		e := b.un((*stablehlo.Block).Exponential, z)
		s := b.bcastIn(b.reduce(e, ReduceSum, 0, []int64{int64(axis)}), dims, keep)
		var y *stablehlo.Value
		if logSoftmax {
			y = b.sub(z, b.un((*stablehlo.Block).Log, s))
		} else {
			y = b.div(e, s)
		}
		y = b.reshape(y, outDims)
		return b.out(b.convert(y, dt))
	}
}

// nnResizeAxis computes, for one axis of an xserve.resize, the input index
// and weight of each tap of each output position, following ONNX's
// reference implementation exactly (neighbours chosen in the edge-padded
// input, ties to the lower index, taps outside the input clamped to the
// edge or, with exclude_outside, dropped and the weights renormalized).
// inb[o] is false where tf_crop_and_resize extrapolates.
func nnResizeAxis(p fxgraph.ResizeParams, axis, rank int, in, out int64) (idx [][]int64, w [][]float64, inb []bool, err error) {
	r, err := newResizeAxis(p, axis, rank, in, out)
	if err != nil {
		return nil, nil, nil, err
	}
	idx = make([][]int64, out)
	w = make([][]float64, out)
	inb = make([]bool, out)
	for o := int64(0); o < out; o++ {
		xo, inside, err := r.source(float64(o))
		if err != nil {
			return nil, nil, nil, err
		}
		if !inside {
			idx[o], w[o] = make([]int64, r.taps), make([]float64, r.taps)
			continue
		}
		inb[o] = true
		if idx[o], w[o], err = r.tapsAt(xo); err != nil {
			return nil, nil, nil, err
		}
	}
	return idx, w, inb, nil
}

// resizeAxis is one axis of a resize: the output positions' sources in the
// input and the taps around them.
type resizeAxis struct {
	p          fxgraph.ResizeParams
	axis       int
	in, out    int64
	scale, owf float64 // the scale, and the output size it gives (as a float)
	roi0, roi1 float64 // tf_crop_and_resize's region
	taps, pad  int64
}

func newResizeAxis(p fxgraph.ResizeParams, axis, rank int, in, out int64) (*resizeAxis, error) {
	r := &resizeAxis{p: p, axis: axis, in: in, out: out, roi0: 0, roi1: 1, taps: 2}
	if p.Scales == nil || p.Sizes != nil && p.Sizes[axis] >= 0 && p.Scales[axis] <= 0 {
		if in == 0 {
			return nil, fmt.Errorf("resize: empty input axis %d", axis)
		}
		r.scale = float64(out) / float64(in)
		r.owf = r.scale * float64(in)
	} else {
		r.scale = p.Scales[axis]
		// The reference multiplies a float32 scale by the int input size in float32.
		r.owf = float64(float32(r.scale) * float32(in))
	}
	if r.scale <= 0 {
		return nil, fmt.Errorf("resize: scale %v on axis %d", r.scale, axis)
	}
	if p.ROI != nil {
		r.roi0, r.roi1 = p.ROI[axis], p.ROI[rank+axis]
	}
	r.taps = int64(len(nnResizeCoeffs(p, 0.5, r.scale)))
	r.pad = (r.taps + 1) / 2
	return r, nil
}

// source returns the input position output position x samples, by the
// coordinate transformation mode; inside is false where
// tf_crop_and_resize samples outside the input (the extrapolation value).
func (r *resizeAxis) source(x float64) (xo float64, inside bool, err error) {
	fin := float64(r.in)
	switch r.p.Coord {
	case "align_corners":
		if r.owf == 1 {
			return 0, true, nil
		}
		return x * (fin - 1) / (r.owf - 1), true, nil
	case "asymmetric":
		return x / r.scale, true, nil
	case "tf_half_pixel_for_nn":
		return (x + 0.5) / r.scale, true, nil
	case "tf_crop_and_resize":
		xo = x * (r.roi1 - r.roi0) * (fin - 1) / (r.owf - 1)
		if r.owf == 1 {
			xo = (r.roi1 - r.roi0) * (fin - 1) / 2
		}
		xo += r.roi0 * (fin - 1)
		return xo, xo >= 0 && xo <= fin-1, nil
	case "pytorch_half_pixel":
		if r.owf == 1 {
			return -0.5, true, nil
		}
		return (x+0.5)/r.scale - 0.5, true, nil
	case "half_pixel":
		return (x+0.5)/r.scale - 0.5, true, nil
	case "half_pixel_symmetric":
		adj := float64(r.out) / r.owf
		return fin/2*(1-adj) + (x+0.5)/r.scale - 0.5, true, nil
	}
	return 0, false, fmt.Errorf("%w: resize coordinate_transformation_mode %q", fxgraph.ErrUnsupported, r.p.Coord)
}

// tapsAt returns the input indices and weights of the taps around source
// position xo: the nearest taps among the edge-padded positions [0,
// in+2*pad), weighted by the mode's coefficients (renormalized without the
// ones outside the input when exclude_outside).
func (r *resizeAxis) tapsAt(xo float64) ([]int64, []float64, error) {
	ratio := 1.0
	if xo != math.Floor(xo) {
		ratio = xo - math.Floor(xo)
	}
	coeffs := nnResizeCoeffs(r.p, ratio, r.scale)
	sel, err := r.nearestTaps(xo + float64(r.pad))
	if err != nil {
		return nil, nil, err
	}
	ii := make([]int64, r.taps)
	ww := make([]float64, r.taps)
	sum := 0.0
	for t, c := range sel {
		orig := c - r.pad
		ww[t] = coeffs[t]
		if r.p.ExcludeOutside && (orig < 0 || orig >= r.in) {
			ww[t] = 0
		}
		sum += ww[t]
		ii[t] = min(max(orig, 0), r.in-1)
	}
	if r.p.ExcludeOutside {
		for t := range ww {
			ww[t] /= sum
		}
	}
	return ii, ww, nil
}

// nearestTaps returns the taps padded positions nearest to xp (ties to the
// lower one), in order.
func (r *resizeAxis) nearestTaps(xp float64) ([]int64, error) {
	limit := r.in + 2*r.pad
	var cands []int64
	base := int64(math.Floor(xp))
	for c := base - r.taps - 1; c <= base+r.taps+1; c++ {
		if c >= 0 && c < limit {
			cands = append(cands, c)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		di, dj := math.Abs(xp-float64(cands[i])), math.Abs(xp-float64(cands[j]))
		if di != dj {
			return di < dj
		}
		return cands[i] < cands[j]
	})
	if int64(len(cands)) < r.taps {
		return nil, fmt.Errorf("resize: axis %d: too few input positions", r.axis)
	}
	sel := append([]int64(nil), cands[:r.taps]...)
	slices.Sort(sel)
	return sel, nil
}

// nnResizeCoeffs are the weights of the taps around fractional position
// ratio (in (0, 1]): nearest, linear or cubic, antialiased when asked
// (linear and cubic only).
func nnResizeCoeffs(p fxgraph.ResizeParams, ratio, scale float64) []float64 {
	switch {
	case p.Antialias && p.Mode != "nearest":
		return nnAntialiasCoeffs(p.Mode, ratio, scale, p.CubicA)
	case p.Mode == "nearest":
		return nnNearestCoeffs(ratio, p.Nearest)
	case p.Mode == "cubic":
		return nnCubicCoeffs(ratio, p.CubicA)
	}
	return []float64{1 - ratio, ratio}
}

// nnAntialiasCoeffs are ONNX's antialiased linear or cubic weights at
// fractional position ratio for scale: the filter stretched by 1/scale
// when downsampling (scale < 1), as many taps as it then covers,
// normalized to sum to 1.
func nnAntialiasCoeffs(mode string, ratio, scale, a float64) []float64 {
	scale = min(scale, 1)
	var start, end int
	kernel := func(x float64) float64 { return math.Max(0, 1-math.Abs(x)) }
	if mode == "cubic" {
		start = int(math.Floor(-2/scale)) + 1
		end = 2 - start
		kernel = func(x float64) float64 {
			x = math.Abs(x)
			switch {
			case x <= 1:
				return ((a+2)*x-(a+3))*x*x + 1
			case x < 2:
				return ((a*x-5*a)*x+8*a)*x - 4*a
			}
			return 0
		}
	} else {
		start = int(math.Floor(-1/scale)) + 1
		end = start + 2 - 2*start
	}
	out := make([]float64, 0, end-start)
	sum := 0.0
	for i := start; i < end; i++ {
		v := kernel(scale * (float64(i) - ratio))
		out = append(out, v)
		sum += v
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func nnNearestCoeffs(ratio float64, mode string) []float64 {
	if ratio == math.Floor(ratio) {
		return []float64{0, 1}
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	switch mode {
	case "round_prefer_ceil":
		return []float64{b(ratio < 0.5), b(ratio >= 0.5)}
	case "floor":
		return []float64{1, 0}
	case "ceil":
		return []float64{0, 1}
	}
	return []float64{b(ratio <= 0.5), b(ratio > 0.5)}
}

func nnCubicCoeffs(r, a float64) []float64 {
	s := 1 - r
	return []float64{
		((a*(r+1)-5*a)*(r+1)+8*a)*(r+1) - 4*a,
		((a+2)*r-(a+3))*r*r + 1,
		((a+2)*s-(a+3))*s*s + 1,
		((a*(s+1)-5*a)*(s+1)+8*a)*(s+1) - 4*a,
	}
}

// nnGatherAxis takes x's elements at positions idx along axis.
func nnGatherAxis(b *nnB, x *stablehlo.Value, axis int, idx []int64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	ind := b.constOf(tensor.Int32, idx, int64(len(idx)), 1)
	sorted := slices.IsSorted(idx)
	rank := x.Type().Rank()
	sizes := append([]int64(nil), x.Type().Dims...)
	sizes[axis] = 1
	return b.gather(x, ind, stablehlo.GatherDims{OffsetDims: nnAllBut(rank, int64(axis)), CollapsedSliceDims: []int64{int64(axis)},
		StartIndexMap: []int64{int64(axis)}, IndexVectorDim: 1}, sizes, sorted)
}

// nnResize lowers xserve.resize axis by axis: nearest is one gather of the
// chosen taps (exact for every dtype); linear and cubic sum the gathered
// taps times their weights, computed on the host. Positions that
// tf_crop_and_resize extrapolates get extrapolation_value.
func nnResize(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	rank := len(xd)
	p, known, err := fxgraph.ResizeArgs(n, rank)
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, fmt.Errorf("resize: sizes/scales/roi are not constants after specialization")
	}
	b := &nnB{chain: chain{ctx: ctx}}
	x := in[0]
	if p.Mode != "nearest" {
		x = b.convert(x, nnFloatCompute(dt))
	}
	cur := append([]int64(nil), xd...)
	var mask *stablehlo.Value
	for a := 0; a < rank; a++ {
		idx, w, inb, err := nnResizeAxis(p, a, rank, xd[a], outDims[a])
		if err != nil {
			return nil, err
		}
		identity, allIn := nnResizeIdentity(idx, w, inb, xd[a] == outDims[a])
		cur[a] = outDims[a]
		switch {
		case identity:
		case p.Mode == "nearest":
			x = nnGatherAxis(b, x, a, nnResizePick(idx, w))
		default:
			x = nnResizeTaps(b, x, a, idx, w, cur)
		}
		if !allIn {
			mv := b.bcastIn(nnBoolConst(b, inb), outDims, []int64{int64(a)})
			if mask == nil {
				mask = mv
			} else {
				mask = b.and(mask, mv)
			}
		}
	}
	if mask != nil {
		x = b.bcast(x, outDims)
		x = b.sel(mask, x, b.full(x, p.Extrapolation, outDims))
	}
	x = b.reshape(x, outDims)
	return b.out(b.convert(x, dt))
}

// nnResizeIdentity reports whether an axis's taps leave it as it is
// (sameSize, every output taking its own position at weight 1), and
// whether every output position samples inside the input.
func nnResizeIdentity(idx [][]int64, w [][]float64, inb []bool, sameSize bool) (identity, allIn bool) {
	identity, allIn = sameSize, true
	for o := range idx {
		if !inb[o] {
			allIn, identity = false, false
			continue
		}
		for t := range idx[o] {
			if w[o][t] != 0 && (idx[o][t] != int64(o) || w[o][t] != 1) {
				identity = false
			}
		}
	}
	return identity, allIn
}

// nnResizePick returns, per output position, the input position its
// nearest tap (the one of non-zero weight) takes.
func nnResizePick(idx [][]int64, w [][]float64) []int64 {
	pick := make([]int64, len(idx))
	for o := range idx {
		for t := range idx[o] {
			if w[o][t] != 0 {
				pick[o] = idx[o][t]
			}
		}
	}
	return pick
}

// nnResizeTaps is the interpolation along axis a: the sum over taps of the
// gathered inputs times the taps' weights (dims cur after the axis is
// resized).
func nnResizeTaps(b *nnB, x *stablehlo.Value, a int, idx [][]int64, w [][]float64, cur []int64) *stablehlo.Value {
	var acc *stablehlo.Value
	taps := 0
	if len(idx) > 0 {
		taps = len(idx[0])
	}
	for t := 0; t < taps; t++ {
		ti := make([]int64, len(idx))
		tw := make([]float64, len(idx))
		zero := true
		for o := range idx {
			ti[o], tw[o] = idx[o][t], w[o][t]
			zero = zero && tw[o] == 0
		}
		if zero {
			continue
		}
		g := nnGatherAxis(b, x, a, ti)
		g = b.mul(g, b.bcastIn(b.consts(g, tw, []int64{int64(len(tw))}), cur, []int64{int64(a)}))
		if acc == nil {
			acc = g
		} else {
			acc = b.add(acc, g)
		}
	}
	if acc == nil {
		return b.full(x, 0, cur)
	}
	return acc
}

// nnBoolConst is a 1-D bool constant holding vals.
func nnBoolConst(b *nnB, vals []bool) *stablehlo.Value {
	ints := make([]int64, len(vals))
	for i, v := range vals {
		if v {
			ints[i] = 1
		}
	}
	return b.constOf(tensor.Bool, ints, int64(len(ints)))
}

// cmp compares x and y elementwise (float operands).
func (b *nnB) cmp(x, y *stablehlo.Value, dir stablehlo.Direction) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(x.Block().Compare(x, y, dir, stablehlo.CompareFloat))
}

func (b *nnB) sel(p, x, y *stablehlo.Value) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(p.Block().Select(p, x, y))
}

// nnGridSampler lowers grid_sampler_2d as PyTorch computes it: the grid's
// normalized (x, y) are unnormalized to input pixel coordinates, clipped
// or reflected per padding_mode, and every tap (1 nearest, 4 bilinear, 16
// bicubic) is gathered from the input with its batch index, zero outside
// the input.
func nnGridSampler(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	mode, err := n.ParamInt("interpolation_mode")
	if err != nil {
		return nil, err
	}
	padMode, err := n.ParamInt("padding_mode")
	if err != nil {
		return nil, err
	}
	align, err := n.ParamBool("align_corners")
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := nnFloatCompute(dt)
	g := &gridSampler{b: b, x: b.convert(in[0], cdt), grid: b.convert(in[1], cdt), padMode: padMode, align: align,
		N: xd[0], C: xd[1], H: xd[2], W: xd[3], Ho: outDims[2], Wo: outDims[3]}
	ix, iy := g.unnorm(g.coord(0), g.W), g.unnorm(g.coord(1), g.H)
	if mode != 2 {
		ix, iy = g.pad(ix, g.W), g.pad(iy, g.H)
	}
	// Batch index of every output position, for the gather.
	g.nIdx = b.iota(stablehlo.TensorOf(stablehlo.I32, g.N, g.Ho, g.Wo, 1), 0)
	switch mode {
	case 0:
		g.bilinear(ix, iy)
	case 1: // nearest, rounding half to even
		g.add(g.tap(b.un((*stablehlo.Block).RoundNearestEven, ix), b.un((*stablehlo.Block).RoundNearestEven, iy), g.k(1)))
	case 2:
		g.bicubic(ix, iy)
	}
	return b.out(b.convert(g.y, dt))
}

// gridSampler lowers one grid_sampler_2d: input x [N, C, H, W], grid [N,
// Ho, Wo, 2]; y accumulates the weighted taps.
type gridSampler struct {
	b                  *nnB
	x, grid, nIdx, y   *stablehlo.Value
	padMode            int64
	align              bool
	N, C, H, W, Ho, Wo int64
}

// k is the constant v over the output positions [N, Ho, Wo].
func (g *gridSampler) k(v float64) *stablehlo.Value {
	return g.b.full(g.grid, v, []int64{g.N, g.Ho, g.Wo})
}

// coord is grid[..., i].
func (g *gridSampler) coord(i int64) *stablehlo.Value {
	c := g.b.slice(g.grid, []int64{0, 0, 0, i}, []int64{g.N, g.Ho, g.Wo, i + 1}, nil)
	return g.b.reshape(c, []int64{g.N, g.Ho, g.Wo})
}

// unnorm maps a coordinate in [-1, 1] to an input position along an axis of
// size.
func (g *gridSampler) unnorm(c *stablehlo.Value, size int64) *stablehlo.Value {
	b, fs := g.b, float64(size)
	if g.align {
		// ((c + 1) / 2) * (size - 1)
		return b.mul(b.div(b.add(c, g.k(1)), g.k(2)), g.k(fs-1))
	}
	// ((c + 1) * size - 1) / 2
	return b.div(b.sub(b.mul(b.add(c, g.k(1)), g.k(fs)), g.k(1)), g.k(2))
}

func (g *gridSampler) clip(c *stablehlo.Value, size int64) *stablehlo.Value {
	if g.b.err != nil {
		return nil
	}
	return g.b.set(c.Block().Clamp(g.b.scalar(c, 0), c, g.b.scalar(c, float64(size-1))))
}

func (g *gridSampler) reflect(c *stablehlo.Value, twiceLow, twiceHigh float64) *stablehlo.Value {
	if twiceLow == twiceHigh {
		return g.k(0)
	}
	b := g.b
	lo, span := twiceLow/2, (twiceHigh-twiceLow)/2
	v := b.un((*stablehlo.Block).Abs, b.sub(c, g.k(lo)))
	extra := b.bin((*stablehlo.Block).Remainder, v, g.k(span))
	flips := b.un((*stablehlo.Block).Floor, b.div(v, g.k(span)))
	even := b.cmp(b.bin((*stablehlo.Block).Remainder, flips, g.k(2)), g.k(0), stablehlo.EQ)
	return b.sel(even, b.add(extra, g.k(lo)), b.add(b.sub(g.k(span), extra), g.k(lo)))
}

// pad applies padding_mode to a coordinate along an axis of the given size.
func (g *gridSampler) pad(c *stablehlo.Value, size int64) *stablehlo.Value {
	switch g.padMode {
	case 1:
		return g.clip(c, size)
	case 2:
		if g.align {
			c = g.reflect(c, 0, 2*float64(size-1))
		} else {
			c = g.reflect(c, -1, 2*float64(size)-1)
		}
		return g.clip(c, size)
	}
	return c
}

// tap gathers input[n, :, ty, tx] (zero outside) times weight w.
func (g *gridSampler) tap(tx, ty, w *stablehlo.Value) *stablehlo.Value {
	b := g.b
	valid := b.and(
		b.and(b.cmp(tx, g.k(0), stablehlo.GE), b.cmp(tx, g.k(float64(g.W-1)), stablehlo.LE)),
		b.and(b.cmp(ty, g.k(0), stablehlo.GE), b.cmp(ty, g.k(float64(g.H-1)), stablehlo.LE)))
	jy, jx := g.index(ty, g.H), g.index(tx, g.W)
	full := []int64{g.N, g.C, g.Ho, g.Wo}
	gt := b.gather(g.x, b.concat(3, g.nIdx, jy, jx), nnNCHWGather(), []int64{1, g.C, 1, 1}, false)
	gt = b.transpose(gt, []int64{0, 3, 1, 2})
	if b.err != nil {
		return nil
	}
	gt = b.sel(b.bcastIn(valid, full, []int64{0, 2, 3}), gt, b.full(gt, 0, full))
	return b.mul(gt, b.bcastIn(w, full, []int64{0, 2, 3}))
}

// index is a coordinate clipped into an axis of size, as gather indices
// [N, Ho, Wo, 1].
func (g *gridSampler) index(c *stablehlo.Value, size int64) *stablehlo.Value {
	c = g.clip(c, size)
	if g.b.err != nil {
		return nil
	}
	return g.b.reshape(g.b.set(c.Block().Convert(c, stablehlo.I32)), []int64{g.N, g.Ho, g.Wo, 1})
}

func (g *gridSampler) add(v *stablehlo.Value) {
	if g.y == nil {
		g.y = v
	} else {
		g.y = g.b.add(g.y, v)
	}
}

func (g *gridSampler) bilinear(ix, iy *stablehlo.Value) {
	b := g.b
	x0, y0 := b.un((*stablehlo.Block).Floor, ix), b.un((*stablehlo.Block).Floor, iy)
	x1, y1 := b.add(x0, g.k(1)), b.add(y0, g.k(1))
	dx1, dx0 := b.sub(x1, ix), b.sub(ix, x0)
	dy1, dy0 := b.sub(y1, iy), b.sub(iy, y0)
	g.add(g.tap(x0, y0, b.mul(dx1, dy1)))
	g.add(g.tap(x1, y0, b.mul(dx0, dy1)))
	g.add(g.tap(x0, y1, b.mul(dx1, dy0)))
	g.add(g.tap(x1, y1, b.mul(dx0, dy0)))
}

// bicubic interpolates with A = -0.75, padding applied per tap.
func (g *gridSampler) bicubic(ix, iy *stablehlo.Value) {
	b := g.b
	x0, y0 := b.un((*stablehlo.Block).Floor, ix), b.un((*stablehlo.Block).Floor, iy)
	wx, wy := g.cubicCoeffs(b.sub(ix, x0)), g.cubicCoeffs(b.sub(iy, y0))
	for i := 0; i < 4; i++ {
		cy := g.pad(b.add(y0, g.k(float64(i-1))), g.H)
		for j := 0; j < 4; j++ {
			cx := g.pad(b.add(x0, g.k(float64(j-1))), g.W)
			// PyTorch truncates the padded coordinate; it is integral or,
			// after clipping, non-negative, so floor is the same.
			g.add(g.tap(b.un((*stablehlo.Block).Floor, cx), b.un((*stablehlo.Block).Floor, cy), b.mul(wx[j], wy[i])))
		}
	}
}

// cubicCoeffs are the four cubic convolution weights of fraction t.
func (g *gridSampler) cubicCoeffs(t *stablehlo.Value) [4]*stablehlo.Value {
	const a = -0.75
	b := g.b
	conv1 := func(t *stablehlo.Value) *stablehlo.Value { // ((a+2)t - (a+3)) t t + 1
		v := b.sub(b.mul(g.k(a+2), t), g.k(a+3))
		return b.add(b.mul(b.mul(v, t), t), g.k(1))
	}
	conv2 := func(t *stablehlo.Value) *stablehlo.Value { // ((a t - 5a) t + 8a) t - 4a
		v := b.sub(b.mul(g.k(a), t), g.k(5*a))
		v = b.add(b.mul(v, t), g.k(8*a))
		return b.sub(b.mul(v, t), g.k(4*a))
	}
	u := b.sub(g.k(1), t)
	return [4]*stablehlo.Value{conv2(b.add(t, g.k(1))), conv1(t), conv1(u), conv2(b.add(u, g.k(1)))}
}

// nnRoiAlign lowers xserve.roi_align as ONNX's reference computes it: per
// roi, axis-wise sample coordinates (bin start plus (i+0.5)/sampling_ratio of
// a bin), the reference's clamping, bilinear weights of the four corners
// gathered from the roi's batch image, and the average of each bin's
// samples.
func nnRoiAlign(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	var sz [3]int64
	for i, name := range []string{"output_height", "output_width", "sampling_ratio"} {
		if sz[i], err = n.IntArg(3+i, name, 1); err != nil {
			return nil, err
		}
	}
	oh, ow, sr := sz[0], sz[1], sz[2]
	scale, err := n.ParamFloat("spatial_scale")
	if err != nil {
		return nil, err
	}
	halfPixel, err := n.ParamBool("half_pixel")
	if err != nil {
		return nil, err
	}
	b := &nnB{chain: chain{ctx: ctx}}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	rois := b.convert(in[1], cdt)
	C, H, W := xd[1], xd[2], xd[3]
	R := outDims[0]
	offset := 0.0
	if halfPixel {
		offset = 0.5
	}
	col := func(i int) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		c := b.slice(rois, []int64{0, int64(i)}, []int64{R, int64(i + 1)}, nil)
		c = b.reshape(c, []int64{R})
		return b.sub(b.mul(c, b.full(c, scale, []int64{R})), b.full(c, offset, []int64{R}))
	}
	// axis computes, along one axis (roi columns lo/hi, pooled size p,
	// input size size), the low and high corner indices, their weights and
	// the validity of each of the p*sr samples: [R, p*sr] each.
	axis := func(lo, hi int, p, size int64) (low, high, wl, wh, valid *stablehlo.Value) {
		start, end := col(lo), col(hi)
		length := b.sub(end, start)
		if !halfPixel {
			length = b.max(length, b.full(length, 1, []int64{R}))
		}
		bin := b.div(length, b.full(length, float64(p), []int64{R}))
		// Sample offsets in bins: ph + (i + 0.5) / sr.
		q := p * sr
		offs := make([]float64, q)
		for ph := int64(0); ph < p; ph++ {
			for i := int64(0); i < sr; i++ {
				offs[ph*sr+i] = float64(ph) + (float64(i)+0.5)/float64(sr)
			}
		}
		sd := []int64{R, q}
		pos := b.mul(b.bcastIn(b.consts(length, offs, []int64{q}), sd, []int64{1}), b.bcastIn(bin, sd, []int64{0}))
		pos = b.add(pos, b.bcastIn(start, sd, []int64{0}))
		k := func(v float64) *stablehlo.Value { return b.full(pos, v, sd) }
		valid = b.and(b.cmp(pos, k(-1), stablehlo.GE), b.cmp(pos, k(float64(size)), stablehlo.LE))
		pos = b.max(pos, k(0))
		low = b.un((*stablehlo.Block).Floor, pos)
		edge := b.cmp(low, k(float64(size-1)), stablehlo.GE)
		low = b.sel(edge, k(float64(size-1)), low)
		pos = b.sel(edge, low, pos)
		high = b.sel(edge, low, b.add(low, k(1)))
		wh = b.sub(pos, low)
		wl = b.sub(k(1), wh)
		return low, high, wl, wh, valid
	}
	yl, yh, wyl, wyh, vy := axis(1, 3, oh, H)
	xl, xh, wxl, wxh, vx := axis(0, 2, ow, W)
	P, Q := oh*sr, ow*sr
	grid := []int64{R, P, Q}
	bY := func(v *stablehlo.Value) *stablehlo.Value { return b.bcastIn(v, grid, []int64{0, 1}) }
	bX := func(v *stablehlo.Value) *stablehlo.Value { return b.bcastIn(v, grid, []int64{0, 2}) }
	valid := b.and(bY(vy), bX(vx))
	var batch *stablehlo.Value
	if b.err == nil {
		bi := b.set(in[2].Block().Convert(in[2], stablehlo.I32))
		batch = b.reshape(b.bcastIn(bi, grid, []int64{0}), []int64{R, P, Q, 1})
	}
	idx := func(v *stablehlo.Value, bc func(*stablehlo.Value) *stablehlo.Value) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		return b.reshape(bc(b.set(v.Block().Convert(v, stablehlo.I32))), []int64{R, P, Q, 1})
	}
	full := []int64{R, P, Q, C}
	var acc *stablehlo.Value
	for _, corner := range []struct{ y, x, wy, wx *stablehlo.Value }{{yl, xl, wyl, wxl}, {yl, xh, wyl, wxh}, {yh, xl, wyh, wxl}, {yh, xh, wyh, wxh}} {
		if b.err != nil {
			break
		}
		ind := b.concat(3, batch, idx(corner.y, bY), idx(corner.x, bX))
		if b.err != nil {
			break
		}
		g := b.gather(x, ind, nnNCHWGather(), []int64{1, C, 1, 1}, false)
		w := b.mul(bY(corner.wy), bX(corner.wx))
		g = b.mul(g, b.bcastIn(w, full, []int64{0, 1, 2}))
		if acc == nil {
			acc = g
		} else {
			acc = b.add(acc, g)
		}
	}
	acc = b.sel(b.bcastIn(valid, full, []int64{0, 1, 2}), acc, b.full(acc, 0, full))
	// [R, oh, sr, ow, sr, C] -> sum the samples of each bin.
	acc = b.reshape(acc, []int64{R, oh, sr, ow, sr, C})
	acc = b.reduce(acc, ReduceSum, 0, []int64{2, 4})
	acc = b.div(acc, b.full(acc, float64(sr*sr), []int64{R, oh, ow, C}))
	acc = b.transpose(acc, []int64{0, 3, 1, 2})
	return b.out(b.convert(acc, dt))
}

// nnNCHWGather gathers the [C] pixels input[n, :, y, x] of an NCHW input
// at [..., 3] indices (n, y, x).
func nnNCHWGather() stablehlo.GatherDims {
	return stablehlo.GatherDims{OffsetDims: []int64{3}, CollapsedSliceDims: []int64{0, 2, 3}, StartIndexMap: []int64{0, 2, 3}, IndexVectorDim: 3}
}
