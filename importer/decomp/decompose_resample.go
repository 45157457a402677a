package decomp

import (
	"fmt"
	"math"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Resampling along spatial dims (upsample_*, adaptive pools) is separable:
// each spatial dim of static size in becomes out output positions, each a
// weighted sum (or max) of a few input positions ("taps") chosen at import
// time. A dim's taps become index_select nodes with constant indices and,
// for weighted sums, products with constant weights, so any torch
// interpolation mode or adaptive window is one small tap function.

// taps lists, for each output position along one dim, the input positions
// it reads and their weights (nil weights: a plain gather or a max).
type taps struct {
	idx [][]int64
	w   [][]float64
}

// tapFunc computes a dim's taps from its input and output sizes and the
// scale torch was given for it (0 when none).
type tapFunc func(in, out int64, scale float64) taps

// resample applies per-dim taps to the trailing spatial dims of x (dims
// rank-len(outs) ... rank-1); reduce is "sum" (weighted) or "max".
func (c *Call) resample(x *fxgraph.Node, outs []int64, scales []float64, f tapFunc, reduce string) (*fxgraph.Node, error) {
	rank := x.Val().Rank()
	nd := len(outs)
	if rank < nd+1 {
		return nil, c.errorf(ErrUnsupported, "input %s has fewer than %d spatial dims and a channel dim", x.Val(), nd)
	}
	for i := 0; i < nd; i++ {
		d := rank - nd + i
		size := x.Val().Shape[d]
		if !size.IsStatic() {
			return nil, c.errorf(ErrUnsupported, "input %s: spatial dim %d is symbolic (resampling needs static spatial sizes)", x.Val(), d)
		}
		if outs[i] < 0 || size.Size == 0 && outs[i] > 0 {
			return nil, c.errorf(ErrFormat, "resampling dim %d of %s to %d", d, x.Val(), outs[i])
		}
		if size.Size == outs[i] && (scales == nil || scales[i] == 0 || scales[i] == 1) && reduce != "max" {
			t := f(size.Size, outs[i], 0)
			if isIdentityTaps(t) {
				continue
			}
		}
		s := 0.0
		if scales != nil {
			s = scales[i]
		}
		t := f(size.Size, outs[i], s)
		var err error
		if x, err = c.applyTaps(x, d, t, reduce); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// isIdentityTaps reports whether every output position reads only its own
// input position with weight 1.
func isIdentityTaps(t taps) bool {
	for o, ix := range t.idx {
		if len(ix) != 1 || ix[0] != int64(o) || (t.w != nil && t.w[o][0] != 1) {
			return false
		}
	}
	return true
}

// applyTaps gathers each tap along dim d and combines the taps.
func (c *Call) applyTaps(x *fxgraph.Node, d int, t taps, reduce string) (*fxgraph.Node, error) {
	out := int64(len(t.idx))
	k := 0
	for _, ix := range t.idx {
		if len(ix) == 0 {
			return nil, c.errorf(ErrFormat, "resampling dim %d of %s: output position without an input tap", d, x.Val())
		}
		k = max(k, len(ix))
	}
	if out == 0 {
		k = 1 // an empty output: one index_select by no positions
	}
	rank := x.Val().Rank()
	var acc *fxgraph.Node
	for j := 0; j < k; j++ {
		ix := make([]int64, out)
		var w *tensor.Tensor
		if t.w != nil {
			shape := make([]int64, rank-d)
			for i := range shape {
				shape[i] = 1
			}
			shape[0] = out
			w = tensor.New(tensor.Float32, shape...)
		}
		for o, taps := range t.idx {
			// A shorter window repeats its last tap (weight 0), which
			// leaves a max and a weighted sum unchanged.
			jj := min(j, len(taps)-1)
			ix[o] = taps[jj]
			if w != nil && jj == j {
				w.SetFloat64(int64(o), t.w[o][j])
			}
		}
		g, err := c.emit("", fxgraph.AtenIndexSelect, []any{x, int64(d), c.constant("resample_index", tensor.FromInt64s(ix))}, nil)
		if err != nil {
			return nil, err
		}
		if w != nil {
			wc := c.constant("resample_weight", w.Convert(x.Val().DType))
			if g, err = c.emit("", fxgraph.AtenMulTensor, []any{g, wc}, nil); err != nil {
				return nil, err
			}
		}
		switch {
		case acc == nil:
			acc = g
		case reduce == "max":
			acc, err = c.emit("", fxgraph.AtenMaximum, []any{acc, g}, nil)
		default:
			acc, err = c.emit("", fxgraph.AtenAddTensor, []any{acc, g}, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// areaScale is torch's area_pixel_compute_scale: the input distance of one
// output step.
func areaScale(in, out int64, alignCorners bool, scale float64) float32 {
	if alignCorners {
		if out > 1 {
			return float32(in-1) / float32(out-1)
		}
		return 0
	}
	if scale > 0 {
		return float32(1 / scale)
	}
	return float32(in) / float32(out)
}

// nearestTaps is mode "nearest" (exact=false, torch's legacy rounding down)
// and "nearest-exact" (rounding half up).
func nearestTaps(exact bool) tapFunc {
	return func(in, out int64, scale float64) taps {
		s := areaScale(in, out, false, scale)
		t := taps{idx: make([][]int64, out)}
		for o := int64(0); o < out; o++ {
			var src int64
			if exact {
				src = int64(math.Floor(float64((float32(o) + 0.5) * s)))
			} else {
				src = int64(math.Floor(float64(float32(o) * s)))
			}
			t.idx[o] = []int64{min(src, in-1)}
		}
		return t
	}
}

// linearTaps is mode "linear" (bilinear, trilinear): two taps per output.
func linearTaps(alignCorners bool) tapFunc {
	return func(in, out int64, scale float64) taps {
		s := areaScale(in, out, alignCorners, scale)
		t := taps{idx: make([][]int64, out), w: make([][]float64, out)}
		for o := int64(0); o < out; o++ {
			var src float32
			if alignCorners {
				src = s * float32(o)
			} else {
				src = max(s*(float32(o)+0.5)-0.5, 0)
			}
			i0 := min(int64(src), in-1)
			i1 := min(i0+1, in-1)
			l := src - float32(i0)
			t.idx[o] = []int64{i0, i1}
			t.w[o] = []float64{float64(1 - l), float64(l)}
		}
		return t
	}
}

// cubicTaps is mode "bicubic" (torch's A = -0.75, borders clamped): four
// taps per output.
func cubicTaps(alignCorners bool) tapFunc {
	const a = -0.75
	near := func(x float32) float32 { return ((a+2)*x-(a+3))*x*x + 1 }
	far := func(x float32) float32 { return ((a*x-5*a)*x+8*a)*x - 4*a }
	return func(in, out int64, scale float64) taps {
		s := areaScale(in, out, alignCorners, scale)
		t := taps{idx: make([][]int64, out), w: make([][]float64, out)}
		for o := int64(0); o < out; o++ {
			var src float32
			if alignCorners {
				src = s * float32(o)
			} else {
				src = s*(float32(o)+0.5) - 0.5
			}
			fl := float32(math.Floor(float64(src)))
			f := src - fl
			i := int64(fl)
			t.idx[o] = []int64{clampIdx(i-1, in), clampIdx(i, in), clampIdx(i+1, in), clampIdx(i+2, in)}
			t.w[o] = []float64{float64(far(f + 1)), float64(near(f)), float64(near(1 - f)), float64(far(2 - f))}
		}
		return t
	}
}

func clampIdx(i, n int64) int64 { return max(0, min(i, n-1)) }

// adaptiveWindow is torch's adaptive pooling window of output o:
// [floor(o*in/out), ceil((o+1)*in/out)).
func adaptiveWindow(o, in, out int64) (int64, int64) {
	return o * in / out, ((o+1)*in + out - 1) / out
}

// adaptiveTaps is adaptive pooling: every input position of the window,
// each weighted 1/len for an average (avg true) or unweighted for a max.
func adaptiveTaps(avg bool) tapFunc {
	return func(in, out int64, _ float64) taps {
		t := taps{idx: make([][]int64, out)}
		if avg {
			t.w = make([][]float64, out)
		}
		for o := int64(0); o < out; o++ {
			lo, hi := adaptiveWindow(o, in, out)
			for i := lo; i < hi; i++ {
				t.idx[o] = append(t.idx[o], i)
				if avg {
					t.w[o] = append(t.w[o], 1/float64(hi-lo))
				}
			}
		}
		return t
	}
}

// upsample describes one upsample_* operator family.
type upsample struct {
	nd    int
	taps  func(alignCorners bool) tapFunc
	align bool // the schema has align_corners
}

// decUpsample converts upsample_{nearest,linear,bilinear,bicubic,
// trilinear}Nd and _upsample_nearest_exactNd, both the .vec overloads
// (output_size or scale_factors) and the .default ones (output_size and
// per-dim scales).
func decUpsample(u upsample) Func {
	return func(c *Call) error {
		x, err := c.tensor(c.Op.Args[0].Name)
		if err != nil {
			return err
		}
		align := false
		if u.align {
			if align, err = c.boolArg("align_corners"); err != nil {
				return err
			}
		}
		outs, scales, err := c.upsampleSizes(x, u.nd)
		if err != nil {
			return err
		}
		if align {
			scales = nil // align_corners ignores the given scales
		}
		y, err := c.resample(x, outs, scales, u.taps(align), "sum")
		if err != nil {
			return err
		}
		if y == x {
			return c.alias(x)
		}
		return c.bind(0, y)
	}
}

// upsampleSizes reads the output sizes and scales of an upsample call.
func (c *Call) upsampleSizes(x *fxgraph.Node, nd int) ([]int64, []float64, error) {
	rank := x.Val().Rank()
	if rank != nd+2 {
		return nil, nil, c.errorf(ErrUnsupported, "upsample of %s: want a batched %d-D input", x.Val(), nd)
	}
	var scales []float64
	if strings.HasSuffix(c.Op.Name, ".vec") {
		if sf, ok := c.arg("scale_factors").([]any); ok && c.arg("output_size") == nil {
			outs := make([]int64, nd)
			scales = make([]float64, nd)
			for i := range nd {
				f, ok := fxgraph.AsFloat(sf[min(i, len(sf)-1)])
				size := x.Val().Shape[rank-nd+i]
				if !ok || !size.IsStatic() {
					return nil, nil, c.errorf(ErrUnsupported, "upsample of %s by %s: want number scales and static spatial sizes", x.Val(), fxgraph.FormatArg(sf))
				}
				scales[i] = f
				outs[i] = int64(math.Floor(float64(size.Size) * f))
			}
			return outs, scales, nil
		}
	} else {
		names := map[int][]string{1: {"scales"}, 2: {"scales_h", "scales_w"}, 3: {"scales_d", "scales_h", "scales_w"}}[nd]
		scales = make([]float64, nd)
		for i, n := range names {
			if v, ok := fxgraph.AsFloat(c.arg(n)); ok {
				scales[i] = v
			}
		}
	}
	outs, err := c.ints("output_size", nd)
	if err != nil {
		return nil, nil, err
	}
	return outs, scales, nil
}

// decAdaptivePool converts adaptive_{avg,max}_poolNd (any N, for static
// spatial sizes). The max pools return (values, indices); only the values
// are supported.
func decAdaptivePool(nd int, avg bool) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		outs, err := c.ints("output_size", nd)
		if err != nil {
			return err
		}
		rank := x.Val().Rank()
		for i, o := range outs {
			if o < 0 && rank >= nd {
				// None in output_size keeps that input size.
				if s := x.Val().Shape[rank-nd+i]; s.IsStatic() {
					outs[i] = s.Size
				}
			}
		}
		if rank != nd+1 && rank != nd+2 {
			return c.errorf(ErrUnsupported, "adaptive pool of %s: want a %d-D input with a channel dim", x.Val(), nd)
		}
		reduce := "sum"
		if !avg {
			reduce = "max"
			if len(c.Outs) > 1 && c.Outs[1] != "" && c.used(1) {
				return c.errorf(ErrUnsupported, "the indices output of adaptive max pooling is not supported")
			}
		}
		if y, ok, err := c.evenAdaptivePool(x, outs, avg); ok || err != nil {
			if err != nil {
				return err
			}
			return c.bind(0, y)
		}
		y, err := c.resample(x, outs, nil, adaptiveTaps(avg), reduce)
		if err != nil {
			return err
		}
		if y == x {
			y, err = c.emit("", fxgraph.AtenAlias, []any{x}, nil)
			if err != nil {
				return err
			}
		}
		return c.bind(0, y)
	}
}

// evenAdaptivePool pools with the IR's avg_pool or max_pool (kernel =
// stride = in/out) when every static spatial size divides evenly.
func (c *Call) evenAdaptivePool(x *fxgraph.Node, outs []int64, avg bool) (*fxgraph.Node, bool, error) {
	nd := len(outs)
	rank := x.Val().Rank()
	kernel := make([]int64, nd)
	for i, o := range outs {
		s := x.Val().Shape[rank-nd+i]
		if !s.IsStatic() || o <= 0 || s.Size%o != 0 {
			return nil, false, nil
		}
		kernel[i] = s.Size / o
	}
	zero := ints64(make([]int64, nd))
	if avg {
		n, err := c.emit("", fxgraph.AvgPoolOp(nd), []any{x, ints64(kernel), ints64(kernel), zero, false, true, nil}, nil)
		return n, true, err
	}
	one := make([]int64, nd)
	for i := range one {
		one[i] = 1
	}
	if nd == 1 {
		n, err := c.emit("", fxgraph.AtenMaxPool1d, []any{x, ints64(kernel), ints64(kernel), zero, ints64(one), false}, nil)
		return n, true, err
	}
	t, err := c.emit("", fxgraph.MaxPoolWithIndicesOp(nd), []any{x, ints64(kernel), ints64(kernel), zero, ints64(one), false}, nil)
	if err != nil {
		return nil, true, err
	}
	n, err := c.emit("", fxgraph.GetItem, []any{t, int64(0)}, nil)
	return n, true, err
}

// upsampleDecompositions are the decompositions of every upsample overload.
func upsampleDecompositions() map[*fxgraph.Op]Func {
	nearest := func(bool) tapFunc { return nearestTaps(false) }
	exact := func(bool) tapFunc { return nearestTaps(true) }
	m := map[*fxgraph.Op]Func{}
	for nd := 1; nd <= 3; nd++ {
		for _, ov := range []string{"vec", "default"} {
			m[atenOp(fmt.Sprintf("aten.upsample_nearest%dd.%s", nd, ov))] = decUpsample(upsample{nd, nearest, false})
			m[atenOp(fmt.Sprintf("aten._upsample_nearest_exact%dd.%s", nd, ov))] = decUpsample(upsample{nd, exact, false})
		}
	}
	for _, ov := range []string{"vec", "default"} {
		m[atenOp("aten.upsample_linear1d."+ov)] = decUpsample(upsample{1, linearTaps, true})
		m[atenOp("aten.upsample_bilinear2d."+ov)] = decUpsample(upsample{2, linearTaps, true})
		m[atenOp("aten.upsample_trilinear3d."+ov)] = decUpsample(upsample{3, linearTaps, true})
		m[atenOp("aten.upsample_bicubic2d."+ov)] = decUpsample(upsample{2, cubicTaps, true})
	}
	return m
}
