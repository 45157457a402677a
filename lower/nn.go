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
	y, mean, rstd := nnNormalize(b, x, xd, nnRange(len(xd)-len(ns), len(xd)), eps)
	if len(in) > 2 && in[2] != nil {
		y = b.mul(y, b.bcast(b.convert(in[2], cdt), xd))
	}
	if len(in) > 3 && in[3] != nil {
		y = b.add(y, b.bcast(b.convert(in[3], cdt), xd))
	}
	mean = b.convert(b.reshape(mean, statDims), dt)
	rstd = b.convert(b.reshape(rstd, statDims), dt)
	return b.out(b.convert(y, dt), mean, rstd)
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
	var scale, owf float64
	if p.Sizes != nil && p.Sizes[axis] >= 0 || p.Scales == nil {
		if in == 0 {
			return nil, nil, nil, fmt.Errorf("resize: empty input axis %d", axis)
		}
		scale = float64(out) / float64(in)
		owf = scale * float64(in)
	} else {
		scale = p.Scales[axis]
		// The reference multiplies a float32 scale by the int input size in float32.
		owf = float64(float32(scale) * float32(in))
	}
	if scale <= 0 {
		return nil, nil, nil, fmt.Errorf("resize: scale %v on axis %d", scale, axis)
	}
	roi0, roi1 := 0.0, 1.0
	if p.ROI != nil {
		roi0, roi1 = p.ROI[axis], p.ROI[rank+axis]
	}
	taps := 2
	if p.Mode == "cubic" {
		taps = 4
	}
	pad := int64((taps + 1) / 2)
	idx = make([][]int64, out)
	w = make([][]float64, out)
	inb = make([]bool, out)
	fin := float64(in)
	for o := int64(0); o < out; o++ {
		x := float64(o)
		var xo float64
		switch p.Coord {
		case "align_corners":
			if owf == 1 {
				xo = 0
			} else {
				xo = x * (fin - 1) / (owf - 1)
			}
		case "asymmetric":
			xo = x / scale
		case "tf_half_pixel_for_nn":
			xo = (x + 0.5) / scale
		case "tf_crop_and_resize":
			if owf == 1 {
				xo = (roi1 - roi0) * (fin - 1) / 2
			} else {
				xo = x * (roi1 - roi0) * (fin - 1) / (owf - 1)
			}
			xo += roi0 * (fin - 1)
			if xo < 0 || xo > fin-1 {
				idx[o] = make([]int64, taps)
				w[o] = make([]float64, taps)
				continue
			}
		case "pytorch_half_pixel":
			if owf == 1 {
				xo = -0.5
			} else {
				xo = (x+0.5)/scale - 0.5
			}
		case "half_pixel":
			xo = (x+0.5)/scale - 0.5
		case "half_pixel_symmetric":
			adj := float64(out) / owf
			center := fin / 2
			xo = center*(1-adj) + (x+0.5)/scale - 0.5
		default:
			return nil, nil, nil, fmt.Errorf("%w: resize coordinate_transformation_mode %q", fxgraph.ErrUnsupported, p.Coord)
		}
		inb[o] = true
		ratio := 1.0
		if xo != math.Floor(xo) {
			ratio = xo - math.Floor(xo)
		}
		var coeffs []float64
		switch p.Mode {
		case "nearest":
			coeffs = nnNearestCoeffs(ratio, p.Nearest)
		case "linear":
			coeffs = []float64{1 - ratio, ratio}
		case "cubic":
			coeffs = nnCubicCoeffs(ratio, p.CubicA)
		}
		// The taps nearest to xo among the edge-padded positions [0, in+2*pad).
		xp := xo + float64(pad)
		limit := in + 2*pad
		cands := []int64{}
		base := int64(math.Floor(xp))
		for c := base - int64(taps) - 1; c <= base+int64(taps)+1; c++ {
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
		if len(cands) < taps {
			return nil, nil, nil, fmt.Errorf("resize: axis %d: too few input positions", axis)
		}
		sel := append([]int64(nil), cands[:taps]...)
		sort.Slice(sel, func(i, j int) bool { return sel[i] < sel[j] })
		ii := make([]int64, taps)
		ww := make([]float64, taps)
		sum := 0.0
		for t, c := range sel {
			orig := c - pad
			ww[t] = coeffs[t]
			if p.ExcludeOutside && (orig < 0 || orig >= in) {
				ww[t] = 0
			}
			sum += ww[t]
			ii[t] = min(max(orig, 0), in-1)
		}
		if p.ExcludeOutside {
			for t := range ww {
				ww[t] /= sum
			}
		}
		idx[o], w[o] = ii, ww
	}
	return idx, w, inb, nil
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
		identity := xd[a] == outDims[a]
		allIn := true
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
		cur[a] = outDims[a]
		if !identity {
			if p.Mode == "nearest" {
				pick := make([]int64, len(idx))
				for o := range idx {
					for t := range idx[o] {
						if w[o][t] != 0 {
							pick[o] = idx[o][t]
						}
					}
				}
				x = nnGatherAxis(b, x, a, pick)
			} else {
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
						if tw[o] != 0 {
							zero = false
						}
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
					acc = b.full(x, 0, cur)
				}
				x = acc
			}
		}
		if !allIn {
			vals := make([]int64, len(inb))
			for i, in := range inb {
				if in {
					vals[i] = 1
				}
			}
			mv := b.constOf(tensor.Bool, vals, int64(len(vals)))
			mv = b.bcastIn(mv, outDims, []int64{int64(a)})
			if mask == nil {
				mask = mv
			} else {
				mask = b.and(mask, mv)
			}
		}
	}
	if mask != nil {
		x = b.bcast(x, outDims)
		if b.err == nil {
			x = b.set(mask.Block().Select(mask, x, b.full(x, p.Extrapolation, outDims)))
		}
	}
	x = b.reshape(x, outDims)
	return b.out(b.convert(x, dt))
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
	x := b.convert(in[0], cdt)
	grid := b.convert(in[1], cdt)
	N, C, H, W := xd[0], xd[1], xd[2], xd[3]
	Ho, Wo := outDims[2], outDims[3]
	pd := []int64{N, Ho, Wo}
	k := func(v float64) *stablehlo.Value { return b.full(grid, v, pd) }
	coord := func(i int) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		c := b.slice(grid, []int64{0, 0, 0, int64(i)}, []int64{N, Ho, Wo, int64(i + 1)}, nil)
		return b.reshape(c, pd)
	}
	unnorm := func(c *stablehlo.Value, size int64) *stablehlo.Value {
		fs := float64(size)
		if align {
			// ((c + 1) / 2) * (size - 1)
			return b.mul(b.div(b.add(c, k(1)), k(2)), k(fs-1))
		}
		// ((c + 1) * size - 1) / 2
		return b.div(b.sub(b.mul(b.add(c, k(1)), k(fs)), k(1)), k(2))
	}
	clip := func(c *stablehlo.Value, size int64) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		return b.set(c.Block().Clamp(b.scalar(c, 0), c, b.scalar(c, float64(size-1))))
	}
	reflect := func(c *stablehlo.Value, twiceLow, twiceHigh float64) *stablehlo.Value {
		if twiceLow == twiceHigh {
			return k(0)
		}
		lo, span := twiceLow/2, (twiceHigh-twiceLow)/2
		v := b.un((*stablehlo.Block).Abs, b.sub(c, k(lo)))
		extra := b.bin((*stablehlo.Block).Remainder, v, k(span))
		flips := b.un((*stablehlo.Block).Floor, b.div(v, k(span)))
		even := b.cmp(b.bin((*stablehlo.Block).Remainder, flips, k(2)), k(0), stablehlo.EQ)
		return b.sel(even, b.add(extra, k(lo)), b.add(b.sub(k(span), extra), k(lo)))
	}
	// pad applies padding_mode to a coordinate along an axis of the given size.
	pad := func(c *stablehlo.Value, size int64) *stablehlo.Value {
		switch padMode {
		case 1:
			return clip(c, size)
		case 2:
			if align {
				c = reflect(c, 0, 2*float64(size-1))
			} else {
				c = reflect(c, -1, 2*float64(size)-1)
			}
			return clip(c, size)
		}
		return c
	}
	ix, iy := unnorm(coord(0), W), unnorm(coord(1), H)
	if mode != 2 {
		ix, iy = pad(ix, W), pad(iy, H)
	}
	// Batch index of every output position, for the gather.
	nIdx := b.iota(stablehlo.TensorOf(stablehlo.I32, N, Ho, Wo, 1), 0)
	full := []int64{N, C, Ho, Wo}
	// tap gathers input[n, :, ty, tx] (zero outside) times weight w.
	tap := func(tx, ty, w *stablehlo.Value) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		valid := b.bin((*stablehlo.Block).And,
			b.and(b.cmp(tx, k(0), stablehlo.GE), b.cmp(tx, k(float64(W-1)), stablehlo.LE)),
			b.and(b.cmp(ty, k(0), stablehlo.GE), b.cmp(ty, k(float64(H-1)), stablehlo.LE)))
		toIdx := func(c *stablehlo.Value, size int64) *stablehlo.Value {
			c = clip(c, size)
			if b.err != nil {
				return nil
			}
			return b.reshape(b.set(c.Block().Convert(c, stablehlo.I32)), []int64{N, Ho, Wo, 1})
		}
		jy, jx := toIdx(ty, H), toIdx(tx, W)
		if b.err != nil {
			return nil
		}
		idx := b.concat(3, nIdx, jy, jx)
		if b.err != nil {
			return nil
		}
		g := b.gather(x, idx, nnNCHWGather(), []int64{1, C, 1, 1}, false)
		g = b.transpose(g, []int64{0, 3, 1, 2})
		g = b.sel(b.bcastIn(valid, full, []int64{0, 2, 3}), g, b.full(g, 0, full))
		return b.mul(g, b.bcastIn(w, full, []int64{0, 2, 3}))
	}
	var y *stablehlo.Value
	add := func(v *stablehlo.Value) {
		if y == nil {
			y = v
		} else {
			y = b.add(y, v)
		}
	}
	switch mode {
	case 0: // bilinear
		x0, y0 := b.un((*stablehlo.Block).Floor, ix), b.un((*stablehlo.Block).Floor, iy)
		x1, y1 := b.add(x0, k(1)), b.add(y0, k(1))
		dx1, dx0 := b.sub(x1, ix), b.sub(ix, x0)
		dy1, dy0 := b.sub(y1, iy), b.sub(iy, y0)
		add(tap(x0, y0, b.mul(dx1, dy1)))
		add(tap(x1, y0, b.mul(dx0, dy1)))
		add(tap(x0, y1, b.mul(dx1, dy0)))
		add(tap(x1, y1, b.mul(dx0, dy0)))
	case 1: // nearest, rounding half to even
		add(tap(b.un((*stablehlo.Block).RoundNearestEven, ix), b.un((*stablehlo.Block).RoundNearestEven, iy), k(1)))
	case 2: // bicubic, A = -0.75, padding applied per tap
		const a = -0.75
		x0, y0 := b.un((*stablehlo.Block).Floor, ix), b.un((*stablehlo.Block).Floor, iy)
		tx, ty := b.sub(ix, x0), b.sub(iy, y0)
		conv1 := func(t *stablehlo.Value) *stablehlo.Value { // ((a+2)t - (a+3)) t t + 1
			v := b.sub(b.mul(k(a+2), t), k(a+3))
			return b.add(b.mul(b.mul(v, t), t), k(1))
		}
		conv2 := func(t *stablehlo.Value) *stablehlo.Value { // ((a t - 5a) t + 8a) t - 4a
			v := b.sub(b.mul(k(a), t), k(5*a))
			v = b.add(b.mul(v, t), k(8*a))
			return b.sub(b.mul(v, t), k(4*a))
		}
		coeffs := func(t *stablehlo.Value) [4]*stablehlo.Value {
			u := b.sub(k(1), t)
			return [4]*stablehlo.Value{conv2(b.add(t, k(1))), conv1(t), conv1(u), conv2(b.add(u, k(1)))}
		}
		wx, wy := coeffs(tx), coeffs(ty)
		for i := 0; i < 4; i++ {
			cy := pad(b.add(y0, k(float64(i-1))), H)
			for j := 0; j < 4; j++ {
				cx := pad(b.add(x0, k(float64(j-1))), W)
				// PyTorch truncates the padded coordinate; it is integral or,
				// after clipping, non-negative, so floor is the same.
				add(tap(b.un((*stablehlo.Block).Floor, cx), b.un((*stablehlo.Block).Floor, cy), b.mul(wx[j], wy[i])))
			}
		}
	}
	return b.out(b.convert(y, dt))
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
