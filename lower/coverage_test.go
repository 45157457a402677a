package lower_test

import (
	"context"
	"math"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/tensor"
)

// TestOpsRun lowers one node of each op the other tests of this package do
// not reach and runs it on the PJRT plugin against values computed in Go.
// Constant folding is off, so ops that usually fold (arange, sym_size,
// numel) go through their lowering rules too.
func TestOpsRun(t *testing.T) {
	client := ewOpenPlugin(t)
	xs := []float64{-1.5, -0.5, 0.25, 1, 2, 3} // x: float32 [2,3]
	ys := []float64{0.5, -2, 1.5, 1, -1, 0.75} // y: float32 [2,3]
	is := []float64{-7, 7, 2, 5, 0, -3}        // i: int32 [2,3]
	js := []float64{2, -2, 3, 1, 4, 2}         // j: int32 [2,3]
	ks := []float64{1, 2, 3, 0, 1, 2}          // k: int32 [2,3], shift amounts

	g := fxgraph.New()
	in := func(name string, dt tensor.DType, dims ...int64) *fxgraph.Node {
		return g.AddPlaceholder(name, fxgraph.Static(dt, dims...))
	}
	x, y := in("x", tensor.Float32, 2, 3), in("y", tensor.Float32, 2, 3)
	i, j, k := in("i", tensor.Int32, 2, 3), in("j", tensor.Int32, 2, 3), in("k", tensor.Int32, 2, 3)
	img := in("img", tensor.Float32, 1, 1, 3, 3) // 1..9
	seq := in("seq", tensor.Float32, 1, 1, 4)    // 1..4
	vol := in("vol", tensor.Float32, 1, 1, 2, 2, 2)
	call := func(target *fxgraph.Op, args ...any) *fxgraph.Node { return g.AddCall(target, args, nil) }
	callKw := func(target *fxgraph.Op, kw map[string]any, args ...any) *fxgraph.Node {
		return g.AddCall(target, args, kw)
	}
	item := func(n *fxgraph.Node, idx int64) *fxgraph.Node { return call(fxgraph.GetItem, n, idx) }
	neg := call(fxgraph.AtenLtScalar, x, 0.0)      // x < 0
	pos := call(fxgraph.AtenGtScalar, i, int64(0)) // i > 0

	type check struct {
		node  *fxgraph.Node
		shape []int64
		want  []float64
	}
	var checks []check
	each := func(vs []float64, f func(float64) float64) []float64 {
		out := make([]float64, len(vs))
		for n, v := range vs {
			out[n] = f(v)
		}
		return out
	}
	each2 := func(a, b []float64, f func(a, b float64) float64) []float64 {
		out := make([]float64, len(a))
		for n := range a {
			out[n] = f(a[n], b[n])
		}
		return out
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	f32 := func(v float64) float64 { return float64(float32(v)) }
	add := func(n *fxgraph.Node, shape []int64, want []float64) {
		checks = append(checks, check{n, shape, want})
	}
	s23 := []int64{2, 3}
	abs1 := call(fxgraph.AtenAddScalar, call(fxgraph.AtenAbs, x), 1.0) // |x|+1
	a1 := each(xs, func(v float64) float64 { return math.Abs(v) + 1 })

	// Float elementwise.
	for _, c := range []struct {
		target *fxgraph.Op
		arg    *fxgraph.Node
		vals   []float64
		f      func(float64) float64
	}{
		{fxgraph.AtenCeil, x, xs, math.Ceil},
		{fxgraph.AtenFloor, x, xs, math.Floor},
		{fxgraph.AtenCos, x, xs, math.Cos},
		{fxgraph.AtenSin, x, xs, math.Sin},
		{fxgraph.AtenTan, x, xs, math.Tan},
		{fxgraph.AtenTanh, x, xs, math.Tanh},
		{fxgraph.AtenErf, x, xs, math.Erf},
		{fxgraph.AtenExp, x, xs, math.Exp},
		{fxgraph.AtenExp2, x, xs, math.Exp2},
		{fxgraph.AtenSigmoid, x, xs, func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }},
		{fxgraph.AtenLog, abs1, a1, math.Log},
		{fxgraph.AtenLog10, abs1, a1, math.Log10},
		{fxgraph.AtenLog1p, abs1, a1, math.Log1p},
		{fxgraph.AtenSqrt, abs1, a1, math.Sqrt},
	} {
		add(call(c.target, c.arg), s23, each(c.vals, c.f))
	}
	add(call(fxgraph.AtenAtan2, x, y), s23, each2(xs, ys, math.Atan2))
	add(call(fxgraph.AtenMulTensor, x, y), s23, each2(xs, ys, func(a, b float64) float64 { return a * b }))
	add(call(fxgraph.AtenSubTensor, x, y), s23, each2(xs, ys, func(a, b float64) float64 { return a - b }))
	add(call(fxgraph.AtenSubScalar, x, 1.0), s23, each(xs, func(v float64) float64 { return v - 1 }))
	add(call(fxgraph.AtenRsubScalar, x, 1.0), s23, each(xs, func(v float64) float64 { return 1 - v }))
	add(call(fxgraph.AtenRsubTensor, x, y), s23, each2(xs, ys, func(a, b float64) float64 { return b - a }))
	add(call(fxgraph.AtenDivScalar, x, 2.0), s23, each(xs, func(v float64) float64 { return v / 2 }))
	add(callKw(fxgraph.AtenDivScalarMode, map[string]any{"rounding_mode": "floor"}, x, 2.0), s23, each(xs, func(v float64) float64 { return math.Floor(v / 2) }))
	add(call(fxgraph.AtenPowTensorScalar, x, 2.0), s23, each(xs, func(v float64) float64 { return v * v }))
	add(call(fxgraph.AtenPowTensorTensor, abs1, y), s23, each2(a1, ys, math.Pow))
	add(call(fxgraph.AtenFmodScalar, x, 0.75), s23, each(xs, func(v float64) float64 { return math.Mod(v, 0.75) }))
	add(call(fxgraph.AtenClampTensor, x, call(fxgraph.AtenNeg, call(fxgraph.AtenAbs, y)), call(fxgraph.AtenAbs, y)), s23,
		each2(xs, ys, func(a, b float64) float64 { return math.Min(math.Max(a, -math.Abs(b)), math.Abs(b)) }))
	add(call(fxgraph.AtenWhereSelf, neg, x, y), s23, each2(xs, ys, func(a, b float64) float64 {
		if a < 0 {
			return a
		}
		return b
	}))
	add(call(fxgraph.AtenWhereScalar, neg, 1.0, 2.0), s23, each(xs, func(v float64) float64 { return 2 - b2f(v < 0) }))
	add(call(fxgraph.AtenWhereScalarSelf, neg, 5.0, y), s23, each2(xs, ys, func(a, b float64) float64 {
		if a < 0 {
			return 5
		}
		return b
	}))
	inf := call(fxgraph.AtenDivScalar, x, 0.0)
	add(call(fxgraph.AtenIsfinite, x), s23, each(xs, func(float64) float64 { return 1 }))
	add(call(fxgraph.AtenIsinf, inf), s23, each(xs, func(float64) float64 { return 1 }))
	add(call(fxgraph.AtenIsnan, call(fxgraph.AtenSubTensor, inf, inf)), s23, each(xs, func(float64) float64 { return 1 }))

	// Comparisons.
	cmp := func(target *fxgraph.Op, a *fxgraph.Node, av []float64, b any, bv []float64, f func(a, b float64) bool) {
		add(call(target, a, b), s23, each2(av, bv, func(p, q float64) float64 { return b2f(f(p, q)) }))
	}
	ones := each(xs, func(float64) float64 { return 1 })
	cmp(fxgraph.AtenEqScalar, x, xs, 1.0, ones, func(a, b float64) bool { return a == b })
	cmp(fxgraph.AtenNeScalar, x, xs, 1.0, ones, func(a, b float64) bool { return a != b })
	cmp(fxgraph.AtenGeScalar, x, xs, 1.0, ones, func(a, b float64) bool { return a >= b })
	cmp(fxgraph.AtenGtScalar, x, xs, 1.0, ones, func(a, b float64) bool { return a > b })
	cmp(fxgraph.AtenLeScalar, x, xs, 1.0, ones, func(a, b float64) bool { return a <= b })
	cmp(fxgraph.AtenEqTensor, i, is, j, js, func(a, b float64) bool { return a == b })
	cmp(fxgraph.AtenNeTensor, i, is, j, js, func(a, b float64) bool { return a != b })
	cmp(fxgraph.AtenGtTensor, i, is, j, js, func(a, b float64) bool { return a > b })
	cmp(fxgraph.AtenLeTensor, i, is, j, js, func(a, b float64) bool { return a <= b })
	cmp(fxgraph.AtenLtTensor, i, is, j, js, func(a, b float64) bool { return a < b })

	// Integer and logical ops.
	ii := func(f func(a, b int32) int32) func(a, b float64) float64 {
		return func(a, b float64) float64 { return float64(f(int32(a), int32(b))) }
	}
	add(call(fxgraph.AtenBitwiseAndTensor, i, j), s23, each2(is, js, ii(func(a, b int32) int32 { return a & b })))
	add(call(fxgraph.AtenBitwiseOrTensor, i, j), s23, each2(is, js, ii(func(a, b int32) int32 { return a | b })))
	add(call(fxgraph.AtenBitwiseOrScalar, i, int64(3)), s23, each(is, func(v float64) float64 { return float64(int32(v) | 3) }))
	add(call(fxgraph.AtenBitwiseXorScalar, i, int64(3)), s23, each(is, func(v float64) float64 { return float64(int32(v) ^ 3) }))
	add(call(fxgraph.AtenBitwiseNot, i), s23, each(is, func(v float64) float64 { return float64(^int32(v)) }))
	add(call(fxgraph.AtenBitwiseLeftShiftTensor, i, k), s23, each2(is, ks, ii(func(a, b int32) int32 { return a << b })))
	add(call(fxgraph.AtenBitwiseLeftShiftTensorScalar, i, int64(2)), s23, each(is, func(v float64) float64 { return float64(int32(v) << 2) }))
	add(call(fxgraph.AtenBitwiseRightShiftTensor, i, k), s23, each2(is, ks, ii(func(a, b int32) int32 { return a >> b })))
	add(call(fxgraph.AtenBitwiseRightShiftTensorScalar, i, int64(1)), s23, each(is, func(v float64) float64 { return float64(int32(v) >> 1) }))
	lx := each(xs, func(v float64) float64 { return b2f(v < 0) })
	li := each(is, func(v float64) float64 { return b2f(v > 0) })
	add(call(fxgraph.AtenLogicalAnd, neg, pos), s23, each2(lx, li, func(a, b float64) float64 { return a * b }))
	add(call(fxgraph.AtenLogicalXor, neg, pos), s23, each2(lx, li, func(a, b float64) float64 { return b2f(a != b) }))
	add(call(fxgraph.AtenLogicalNot, neg), s23, each(lx, func(v float64) float64 { return 1 - v }))

	// Reductions.
	add(call(fxgraph.AtenAllDim, pos, int64(1)), []int64{2}, []float64{0, 0})
	add(call(fxgraph.AtenAllDims, neg, []any{int64(0), int64(1)}), nil, []float64{0})
	add(call(fxgraph.AtenAny, pos), nil, []float64{1})
	add(call(fxgraph.AtenAnyDims, neg, []any{int64(1)}), []int64{2}, []float64{1, 0})
	add(call(fxgraph.AtenMax, x), nil, []float64{3})
	add(call(fxgraph.AtenMin, x), nil, []float64{-1.5})
	mind := call(fxgraph.AtenMinDim, x, int64(1))
	add(item(mind, 0), []int64{2}, []float64{-1.5, 1})
	add(item(mind, 1), []int64{2}, []float64{0, 0})
	add(call(fxgraph.AtenMean, x), nil, []float64{f32(4.25 / 6)})
	add(call(fxgraph.AtenProd, x), nil, []float64{-1.5 * -0.5 * 0.25 * 1 * 2 * 3})
	add(call(fxgraph.AtenCumprod, x, int64(1)), s23, []float64{-1.5, 0.75, 0.1875, 1, 2, 6})

	// Shape ops.
	add(call(fxgraph.Aten_UnsafeView, x, []any{int64(3), int64(2)}), []int64{3, 2}, xs)
	add(call(fxgraph.AtenReshape, x, []any{int64(6)}), []int64{6}, xs)
	add(call(fxgraph.AtenAlias, x), s23, xs)
	add(call(fxgraph.AtenClone, x), s23, xs)
	add(call(fxgraph.AtenLiftFreshCopy, x), s23, xs)
	x213 := call(fxgraph.AtenView, x, []any{int64(2), int64(1), int64(3)})
	add(call(fxgraph.AtenSqueeze, x213), s23, xs)
	add(call(fxgraph.AtenSqueezeDim, x213, int64(1)), s23, xs)
	add(call(fxgraph.AtenSqueezeDims, x213, []any{int64(1)}), s23, xs)
	add(call(fxgraph.AtenT, x), []int64{3, 2}, []float64{-1.5, 1, -0.5, 2, 0.25, 3})
	add(call(fxgraph.AtenTransposeInt, x, int64(0), int64(1)), []int64{3, 2}, []float64{-1.5, 1, -0.5, 2, 0.25, 3})
	sp := call(fxgraph.AtenSplitTensor, x, int64(2), int64(1))
	add(item(sp, 1), []int64{2, 1}, []float64{0.25, 3})
	add(callKw(fxgraph.AtenArange, map[string]any{"dtype": tensor.Int64}, int64(4)), []int64{4}, []float64{0, 1, 2, 3})
	add(callKw(fxgraph.AtenArangeStart, map[string]any{"dtype": tensor.Float32}, int64(2), int64(5)), []int64{3}, []float64{2, 3, 4})
	add(call(fxgraph.AtenSymSizeInt, x, int64(1)), nil, []float64{3})
	add(call(fxgraph.AtenNumel, x), nil, []float64{6})
	idx := call(fxgraph.Aten_ToCopy, call(fxgraph.AtenRemainderScalar, call(fxgraph.AtenAbs, j), int64(3)))
	g.SetArgs(idx, idx.Args, map[string]any{"dtype": tensor.Int64})
	// scatter along dim 1 at |j| % 3 = [[2 2 0] [1 1 2]]
	add(call(fxgraph.AtenScatterValue, x, int64(1), idx, 9.0), s23, []float64{9, -0.5, 9, 1, 9, 9})

	// Pooling and padding.
	add(call(fxgraph.AtenAvgPool1d, seq, []any{int64(2)}), []int64{1, 1, 2}, []float64{1.5, 3.5})
	add(call(fxgraph.AtenMaxPool1d, seq, []any{int64(2)}), []int64{1, 1, 2}, []float64{2, 4})
	mp1 := call(fxgraph.AtenMaxPool1dWithIndices, seq, []any{int64(2)})
	add(item(mp1, 0), []int64{1, 1, 2}, []float64{2, 4})
	add(item(mp1, 1), []int64{1, 1, 2}, []float64{1, 3})
	add(call(fxgraph.AtenAvgPool3d, vol, []any{int64(2), int64(2), int64(2)}), []int64{1, 1, 1, 1, 1}, []float64{4.5})
	mp3 := call(fxgraph.AtenMaxPool3dWithIndices, vol, []any{int64(2), int64(2), int64(2)})
	add(item(mp3, 0), []int64{1, 1, 1, 1, 1}, []float64{8})
	add(item(mp3, 1), []int64{1, 1, 1, 1, 1}, []float64{7})
	pad2 := []any{int64(1), int64(1), int64(1), int64(1)}
	add(call(fxgraph.AtenReflectionPad2d, img, pad2), []int64{1, 1, 5, 5}, pad2d(3, func(r, c int) int { return reflect(r, 3)*3 + reflect(c, 3) + 1 }))
	add(call(fxgraph.AtenReplicationPad2d, img, pad2), []int64{1, 1, 5, 5}, pad2d(3, func(r, c int) int { return clampI(r, 3)*3 + clampI(c, 3) + 1 }))
	pad3 := []any{int64(1), int64(1), int64(1), int64(1), int64(1), int64(1)}
	add(call(fxgraph.AtenReflectionPad3d, vol, pad3), []int64{1, 1, 4, 4, 4}, pad3d(func(d, r, c int) int { return reflect(d, 2)*4 + reflect(r, 2)*2 + reflect(c, 2) + 1 }))
	add(call(fxgraph.AtenReplicationPad3d, vol, pad3), []int64{1, 1, 4, 4, 4}, pad3d(func(d, r, c int) int { return clampI(d, 2)*4 + clampI(r, 2)*2 + clampI(c, 2) + 1 }))
	// nll_loss2d_forward on log-probs [1,2,1,3] with targets [1,0,1]: mean of -lp.
	lp := call(fxgraph.AtenView, x, []any{int64(1), int64(2), int64(1), int64(3)})
	tgt := call(fxgraph.AtenView, call(fxgraph.Aten_ToCopy, call(fxgraph.AtenGtScalar, i, int64(0))), []any{int64(2), int64(1), int64(3)})
	g.SetArgs(tgt.Args[0].(*fxgraph.Node), tgt.Args[0].(*fxgraph.Node).Args, map[string]any{"dtype": tensor.Int64})
	nll := call(fxgraph.AtenNllLoss2dForward, lp, call(fxgraph.AtenSliceTensor, tgt, int64(0), int64(0), int64(1)), nil, int64(1), int64(-100))
	// targets (i > 0) of the first row: [0 1 1]; lp[n=0, c, 0, w] = x[c][w].
	add(item(nll, 0), nil, []float64{f32(-(xs[0] + xs[4] + xs[5]) / 3)})
	add(item(nll, 1), nil, []float64{3})

	var outs []*fxgraph.Node
	for _, c := range checks {
		outs = append(outs, c.node)
	}
	g.SetOutput(outs...)
	prog, err := lower.New(lower.Options{MaxFoldElements: -1}, cpu.Platform()).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	ft := func(vs []float64, dims ...int64) *tensor.Tensor {
		out := tensor.New(tensor.Float32, dims...)
		for n, v := range vs {
			out.SetFloat64(int64(n), v)
		}
		return out
	}
	it := func(vs []float64) *tensor.Tensor {
		out := tensor.New(tensor.Int32, 2, 3)
		for n, v := range vs {
			out.SetInt64(int64(n), int64(v))
		}
		return out
	}
	seqT := ft([]float64{1, 2, 3, 4}, 1, 1, 4)
	imgT := ft([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 1, 3, 3)
	volT := ft([]float64{1, 2, 3, 4, 5, 6, 7, 8}, 1, 1, 2, 2, 2)
	got, err := conformance.Execute(context.Background(), client, prog,
		[]*tensor.Tensor{ft(xs, 2, 3), ft(ys, 2, 3), it(is), it(js), it(ks), imgT, seqT, volT})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(checks) {
		t.Fatalf("%d outputs, want %d", len(got), len(checks))
	}
	for o, c := range checks {
		res := got[o]
		if tensor.ShapeString(res.Shape) != tensor.ShapeString(c.shape) {
			t.Errorf("%s (%s): shape %v, want %v", c.node.Name, c.node.Target, res.Shape, c.shape)
			continue
		}
		for e, w := range c.want {
			v := res.Float64At(int64(e))
			if !res.DType.IsFloat() {
				v = float64(res.Int64At(int64(e)))
			}
			if !(math.Abs(v-w) <= 1e-6+2e-6*math.Abs(w) || (math.IsNaN(v) && math.IsNaN(w))) {
				t.Errorf("%s (%s) element %d = %v, want %v", c.node.Name, c.node.Target, e, v, w)
			}
		}
	}
}

// reflect maps padded index p (one of padding 1 before) into [0, n) by
// reflection without repeating the edge; clampI by replicating the edge.
func reflect(p, n int) int {
	q := p - 1
	if q < 0 {
		q = -q
	}
	if q >= n {
		q = 2*(n-1) - q
	}
	return q
}

func clampI(p, n int) int { return min(max(p-1, 0), n-1) }

// pad2d returns the (n+2)x(n+2) padded image whose element (r, c) is the
// value at index src(r, c)-1 of 1..n*n.
func pad2d(n int, src func(r, c int) int) []float64 {
	var out []float64
	for r := 0; r < n+2; r++ {
		for c := 0; c < n+2; c++ {
			out = append(out, float64(src(r, c)))
		}
	}
	return out
}

func pad3d(src func(d, r, c int) int) []float64 {
	var out []float64
	for d := 0; d < 4; d++ {
		for r := 0; r < 4; r++ {
			for c := 0; c < 4; c++ {
				out = append(out, float64(src(d, r, c)))
			}
		}
	}
	return out
}
