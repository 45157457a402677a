package lower_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// rdGraph builds a graph with placeholders of the given metas and one call
// of target; outputs are the call (or its tuple elements through getitem).
func rdGraph(target *fxgraph.Op, metas []fxgraph.TensorMeta, args func(in []*fxgraph.Node) []any, kwargs map[string]any, tupleLen int) *fxgraph.Graph {
	g := fxgraph.New()
	var in []*fxgraph.Node
	for i, m := range metas {
		in = append(in, g.AddPlaceholder(string(rune('a'+i)), m))
	}
	n := g.AddCall(target, args(in), kwargs)
	if tupleLen == 0 {
		g.SetOutput(n)
		return g
	}
	var outs []*fxgraph.Node
	for i := 0; i < tupleLen; i++ {
		outs = append(outs, g.AddCall(fxgraph.GetItem, []any{n, int64(i)}, nil))
	}
	g.SetOutput(outs...)
	return g
}

func rdMeta(dt tensor.DType, dims ...int64) fxgraph.TensorMeta {
	return fxgraph.Static(dt, dims...)
}

func TestReduceStableHLOText(t *testing.T) {
	cases := []struct {
		name  string
		g     *fxgraph.Graph
		wants []string
	}{
		{"sum keepdim", rdGraph(fxgraph.AtenSumDimIntList, []fxgraph.TensorMeta{rdMeta(tensor.Float32, 2, 3)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}, true} }, nil, 0),
			[]string{"stablehlo.reduce", "stablehlo.add", "dimensions = array<i64: 1>", "tensor<2x3xf32>", "stablehlo.reshape", "tensor<2x1xf32>"}},
		{"argmax", rdGraph(fxgraph.AtenArgmax, []fxgraph.TensorMeta{rdMeta(tensor.Float32, 2, 3)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1)} }, nil, 0),
			[]string{"stablehlo.iota", "iota_dimension = 1", "stablehlo.reduce", "stablehlo.compare", "stablehlo.select", "tensor<2xi64>"}},
		{"cumsum", rdGraph(fxgraph.AtenCumsum, []fxgraph.TensorMeta{rdMeta(tensor.Float32, 2, 5)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1)} }, nil, 0),
			[]string{"stablehlo.reduce_window", "window_dimensions = array<i64: 1, 5>", "[0, 0], [4, 0]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := lower.New(lower.Options{}, cpu.Platform()).Lower(c.g, nil)
			if err != nil {
				t.Fatal(err)
			}
			text := string(p.Module)
			for _, w := range c.wants {
				if !strings.Contains(text, w) {
					t.Errorf("module lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

func rdOpenPlugin(t *testing.T) *pjrt.Client {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: ".."})
	if err != nil {
		t.Fatalf("no PJRT plugin (run make pjrt): %v", err)
	}
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rdTensor makes a tensor of dt and dims holding vals.
func rdTensor(dt tensor.DType, dims []int64, vals []float64) *tensor.Tensor {
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return t
}

// rdRef reduces vals (row-major, dims) over the dims in red with f
// starting from init, in plain Go.
func rdRef(vals []float64, dims []int64, red map[int]bool, init float64, f func(acc, v float64) float64) []float64 {
	outN := int64(1)
	for i, d := range dims {
		if !red[i] {
			outN *= d
		}
	}
	out := make([]float64, outN)
	for i := range out {
		out[i] = init
	}
	coord := make([]int64, len(dims))
	for _, v := range vals {
		var o int64
		for i, d := range dims {
			if !red[i] {
				o = o*d + coord[i]
			}
		}
		out[o] = f(out[o], v)
		for i := len(dims) - 1; i >= 0; i-- {
			coord[i]++
			if coord[i] < dims[i] {
				break
			}
			coord[i] = 0
		}
	}
	return out
}

func rdSeq(n int, f func(i int) float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func TestReduceExecute(t *testing.T) {
	c := rdOpenPlugin(t)
	ctx := context.Background()
	x234 := rdSeq(24, func(i int) float64 { return math.Sin(float64(i)*1.7) * 3 })
	ints := rdSeq(24, func(i int) float64 { return float64((i*7)%11 - 5) })
	add := func(a, v float64) float64 { return a + v }
	mul := func(a, v float64) float64 { return a * v }

	// argmax reference along dim 1 of [2,3,4] with ties to the first index.
	argRef := func(vals []float64, greater bool) []float64 {
		out := make([]float64, 8)
		for a := 0; a < 2; a++ {
			for c := 0; c < 4; c++ {
				best := 0
				for b := 1; b < 3; b++ {
					v, w := vals[a*12+b*4+c], vals[a*12+best*4+c]
					if (greater && v > w) || (!greater && v < w) {
						best = b
					}
				}
				out[a*4+c] = float64(best)
			}
		}
		return out
	}
	maxRef := rdRef(ints, []int64{2, 3, 4}, map[int]bool{1: true}, math.Inf(-1), math.Max)

	// cumsum reference along the last dim.
	long := rdSeq(2*300, func(i int) float64 { return float64(i%13 - 6) })
	cumRef := func(vals []float64, rows, n int) []float64 {
		out := make([]float64, len(vals))
		for r := 0; r < rows; r++ {
			acc := 0.0
			for k := 0; k < n; k++ {
				acc += vals[r*n+k]
				out[r*n+k] = acc
			}
		}
		return out
	}

	// logsumexp of rows, one of them all -inf.
	lse := []float64{1, 2, 3, math.Inf(-1), math.Inf(-1), math.Inf(-1), 1000, 1000, 999}
	lseRef := make([]float64, 3)
	for r := 0; r < 3; r++ {
		m := math.Inf(-1)
		for k := 0; k < 3; k++ {
			m = math.Max(m, lse[r*3+k])
		}
		if math.IsInf(m, 0) {
			m = 0
		}
		s := 0.0
		for k := 0; k < 3; k++ {
			s += math.Exp(lse[r*3+k] - m)
		}
		lseRef[r] = math.Log(s) + m
	}

	// var (correction 1) and std over dim 2 of [2,3,4].
	varRef := make([]float64, 6)
	for r := 0; r < 6; r++ {
		mean := 0.0
		for k := 0; k < 4; k++ {
			mean += x234[r*4+k] / 4
		}
		s := 0.0
		for k := 0; k < 4; k++ {
			s += (x234[r*4+k] - mean) * (x234[r*4+k] - mean)
		}
		varRef[r] = s / 3
	}
	stdRef := rdSeq(6, func(i int) float64 { return math.Sqrt(varRef[i]) })

	// Vector norms over dims [0, 2].
	red02 := map[int]bool{0: true, 2: true}
	l1 := rdRef(x234, []int64{2, 3, 4}, red02, 0, func(a, v float64) float64 { return a + math.Abs(v) })
	l2 := rdRef(x234, []int64{2, 3, 4}, red02, 0, func(a, v float64) float64 { return a + v*v })
	l3 := rdRef(x234, []int64{2, 3, 4}, red02, 0, func(a, v float64) float64 { return a + math.Pow(math.Abs(v), 3) })
	linf := rdRef(x234, []int64{2, 3, 4}, red02, 0, func(a, v float64) float64 { return math.Max(a, math.Abs(v)) })
	for i := range l2 {
		l2[i] = math.Sqrt(l2[i])
		l3[i] = math.Cbrt(l3[i])
	}

	// NLL: input [2,3,2] (N, C, d), target [2,2], weight [3], ignore 1.
	nllIn := rdSeq(12, func(i int) float64 { return -float64(i%5) - 0.25*float64(i) })
	nllTgt := []float64{0, 2, 1, 2}
	nllW := []float64{0.5, 2, 3}
	nllNone := make([]float64, 4)
	var nllSum, nllTot float64
	for nIdx := 0; nIdx < 2; nIdx++ {
		for d := 0; d < 2; d++ {
			cls := int(nllTgt[nIdx*2+d])
			if cls == 1 {
				continue
			}
			l := -nllIn[nIdx*6+cls*2+d] * nllW[cls]
			nllNone[nIdx*2+d] = l
			nllSum += l
			nllTot += nllW[cls]
		}
	}

	cases := []struct {
		name     string
		target   *fxgraph.Op
		in       []*tensor.Tensor
		args     func(in []*fxgraph.Node) []any
		kwargs   map[string]any
		tupleLen int
		want     []*tensor.Tensor
	}{
		{"sum f32 dims 0,2 keepdim", fxgraph.AtenSumDimIntList, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(0), int64(-1)}, true} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{1, 3, 1}, rdRef(x234, []int64{2, 3, 4}, red02, 0, add))}},
		{"sum int32 promotes to int64", fxgraph.AtenSum, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 3, 4}, ints)},
			func(in []*fxgraph.Node) []any { return []any{in[0]} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int64, nil, rdRef(ints, []int64{24}, map[int]bool{0: true}, 0, add))}},
		{"mean f64 dim 1", fxgraph.AtenMeanDim, []*tensor.Tensor{rdTensor(tensor.Float64, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float64, []int64{2, 4}, rdSeq(8, func(i int) float64 {
				return rdRef(x234, []int64{2, 3, 4}, map[int]bool{1: true}, 0, add)[i] / 3
			}))}},
		{"prod int64 dim 2", fxgraph.AtenProdDimInt, []*tensor.Tensor{rdTensor(tensor.Int64, []int64{2, 3, 4}, ints)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(2)} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int64, []int64{2, 3}, rdRef(ints, []int64{2, 3, 4}, map[int]bool{2: true}, 1, mul))}},
		{"amax int32", fxgraph.AtenAmax, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 3, 4}, ints)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 4}, maxRef)}},
		{"amin all", fxgraph.AtenAmin, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0]} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, nil, rdRef(x234, []int64{24}, map[int]bool{0: true}, math.Inf(1), math.Min))}},
		{"max.dim ties", fxgraph.AtenMaxDim, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 3, 4}, ints)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 4}, maxRef), rdTensor(tensor.Int64, []int64{2, 4}, argRef(ints, true))}},
		// topk, worked by hand: NaN is the largest, ties go to the lower
		// index, and a real -Inf/+Inf is taken before an already-taken slot.
		{"topk largest NaN ties", fxgraph.AtenTopk, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{6}, []float64{3, 1, 3, math.NaN(), math.Inf(-1), 2})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(4)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{4}, []float64{math.NaN(), 3, 3, 2}), rdTensor(tensor.Int64, []int64{4}, []float64{3, 0, 2, 5})}},
		{"topk largest after -Inf", fxgraph.AtenTopk, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, []float64{5, math.Inf(-1), math.Inf(-1)})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(3)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, []float64{5, math.Inf(-1), math.Inf(-1)}), rdTensor(tensor.Int64, []int64{3}, []float64{0, 1, 2})}},
		{"topk smallest +Inf", fxgraph.AtenTopk, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, []float64{math.Inf(1), 1, math.Inf(1)})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(3), int64(0), false} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, []float64{1, math.Inf(1), math.Inf(1)}), rdTensor(tensor.Int64, []int64{3}, []float64{1, 0, 2})}},
		{"topk int32 dim 0", fxgraph.AtenTopk, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{3, 2}, []float64{2, -1, 7, -1, 7, 4})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(2), int64(0)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 2}, []float64{7, 4, 7, -1}), rdTensor(tensor.Int64, []int64{2, 2}, []float64{1, 2, 2, 0})}},
		// k above the old unrolled limit of 256: a sort of 1000 values
		// (v[i] = (i*37) mod 1000, a permutation) whose top 300 are 999..700.
		{"topk k=300 of 1000", fxgraph.AtenTopk, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{1000}, perm1000())},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(300)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{300}, top300()), rdTensor(tensor.Int64, []int64{300}, top300Idx())}},
		// sort, as torch sorts: NaN larger than every number, ties in order.
		{"sort ascending NaN ties", fxgraph.AtenSort, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{6}, []float64{3, math.NaN(), 1, 3, math.Inf(-1), 2})},
			func(in []*fxgraph.Node) []any { return []any{in[0]} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{6}, []float64{math.Inf(-1), 1, 2, 3, 3, math.NaN()}), rdTensor(tensor.Int64, []int64{6}, []float64{4, 2, 5, 0, 3, 1})}},
		{"sort descending dim 0", fxgraph.AtenSort, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{3, 2}, []float64{2, -1, 7, -1, 7, 4})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(0), true} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Int32, []int64{3, 2}, []float64{7, 4, 7, -1, 2, -1}), rdTensor(tensor.Int64, []int64{3, 2}, []float64{1, 2, 2, 0, 0, 1})}},
		{"sort.stable descending NaN first", fxgraph.AtenSortStable, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3}, []float64{1, math.NaN(), 5, 4, 4, -2})},
			func(in []*fxgraph.Node) []any { return []any{in[0]} }, map[string]any{"stable": true, "dim": int64(1), "descending": true}, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3}, []float64{math.NaN(), 5, 1, 4, 4, -2}), rdTensor(tensor.Int64, []int64{2, 3}, []float64{1, 2, 0, 0, 1, 2})}},
		{"topk k=0", fxgraph.AtenTopk, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3}, x234[:6])},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(0)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 0}, nil), rdTensor(tensor.Int64, []int64{2, 0}, nil)}},
		{"argmin f32 keepdim", fxgraph.AtenArgmin, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1), true} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int64, []int64{2, 1, 4}, argRef(x234, false))}},
		{"argmax flat", fxgraph.AtenArgmax, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3}, []float64{1, 7, 3, 7, 2, 0})},
			func(in []*fxgraph.Node) []any { return []any{in[0]} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int64, nil, []float64{1})}},
		{"argmax NaN wins", fxgraph.AtenArgmax, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{4}, []float64{1, 9, math.NaN(), 9})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(0)} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int64, nil, []float64{2})}},
		{"amax NaN propagates", fxgraph.AtenAmax, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3}, []float64{1, math.NaN(), 3, 4, 5, 6})},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{2}, []float64{math.NaN(), 6})}},
		{"amin f16 NaN", fxgraph.AtenAmin, []*tensor.Tensor{rdTensor(tensor.Float16, []int64{2, 3}, []float64{1, math.NaN(), 3, 4, 5, 6})},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float16, []int64{2}, []float64{math.NaN(), 4})}},
		{"mean f16", fxgraph.AtenMeanDim, []*tensor.Tensor{rdTensor(tensor.Float16, []int64{2, 3}, []float64{1, 2, 3.5, 4, 5, 6})},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}, true} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float16, []int64{2, 1}, []float64{6.5 / 3, 5})}},
		{"any/all", fxgraph.AtenAnyDim, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 3}, []float64{0, 0, 0, 0, 4, 0})},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1)} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Bool, []int64{2}, []float64{0, 1})}},
		{"all", fxgraph.AtenAll, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, []float64{1, -2, 0.5})},
			func(in []*fxgraph.Node) []any { return []any{in[0]} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Bool, nil, []float64{1})}},
		{"cumsum f32 short", fxgraph.AtenCumsum, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{4, 6}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(-1)} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{4, 6}, cumRef(x234, 4, 6))}},
		{"cumsum int32 long", fxgraph.AtenCumsum, []*tensor.Tensor{rdTensor(tensor.Int32, []int64{2, 300}, long)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1)} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Int64, []int64{2, 300}, cumRef(long, 2, 300))}},
		{"logsumexp", fxgraph.AtenLogsumexp, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{3, 3}, lse)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(1)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, lseRef)}},
		{"var", fxgraph.AtenVarCorrection, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(2)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3}, varRef)}},
		{"std keepdim", fxgraph.AtenStdCorrection, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], []any{int64(2)}} }, map[string]any{"keepdim": true, "correction": int64(1)}, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 1}, stdRef)}},
		{"norm 1", fxgraph.AtenLinalgVectorNorm, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], 1.0, []any{int64(0), int64(2)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, l1)}},
		{"norm 2", fxgraph.AtenLinalgVectorNorm, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], 2.0, []any{int64(0), int64(2)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, l2)}},
		{"norm 3", fxgraph.AtenLinalgVectorNorm, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], 3.0, []any{int64(0), int64(2)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, l3)}},
		{"norm inf", fxgraph.AtenLinalgVectorNorm, []*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 3, 4}, x234)},
			func(in []*fxgraph.Node) []any { return []any{in[0], math.Inf(1), []any{int64(0), int64(2)}} }, nil, 0,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{3}, linf)}},
		{"nll none", fxgraph.AtenNllLossForward, []*tensor.Tensor{
			rdTensor(tensor.Float32, []int64{2, 3, 2}, nllIn), rdTensor(tensor.Int64, []int64{2, 2}, nllTgt), rdTensor(tensor.Float32, []int64{3}, nllW)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], in[2], int64(0), int64(1)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, []int64{2, 2}, nllNone), rdTensor(tensor.Float32, nil, []float64{0})}},
		{"nll mean", fxgraph.AtenNllLossForward, []*tensor.Tensor{
			rdTensor(tensor.Float32, []int64{2, 3, 2}, nllIn), rdTensor(tensor.Int64, []int64{2, 2}, nllTgt), rdTensor(tensor.Float32, []int64{3}, nllW)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], in[2], int64(1), int64(1)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, nil, []float64{nllSum / nllTot}), rdTensor(tensor.Float32, nil, []float64{nllTot})}},
		{"nll sum", fxgraph.AtenNllLossForward, []*tensor.Tensor{
			rdTensor(tensor.Float32, []int64{2, 3, 2}, nllIn), rdTensor(tensor.Int64, []int64{2, 2}, nllTgt), rdTensor(tensor.Float32, []int64{3}, nllW)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], in[2], int64(2), int64(1)} }, nil, 2,
			[]*tensor.Tensor{rdTensor(tensor.Float32, nil, []float64{nllSum}), rdTensor(tensor.Float32, nil, []float64{nllTot})}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var metas []fxgraph.TensorMeta
			for _, x := range tc.in {
				metas = append(metas, rdMeta(x.DType, x.Shape...))
			}
			g := rdGraph(tc.target, metas, tc.args, tc.kwargs, tc.tupleLen)
			for _, narrow := range []bool{false, true} {
				prog, err := lower.New(lower.Options{NarrowInt64: narrow}, cpu.Platform()).Lower(g, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := conformance.Execute(ctx, c, prog, tc.in)
				if err != nil {
					t.Fatal(err)
				}
				for i, w := range tc.want {
					if narrow && w.DType == tensor.Int64 {
						w = w.Convert(tensor.Int32)
					}
					if err := conformance.Compare(got[i], w, 1e-5, 1e-5); err != nil {
						t.Errorf("narrow=%v output %d: %v (got %v, want %v)", narrow, i, err, got[i].Float64s(), w.Float64s())
					}
				}
			}
		})
	}
}

// perm1000 is (i*37) mod 1000 for i < 1000: every value 0..999 once.
func perm1000() []float64 {
	out := make([]float64, 1000)
	for i := range out {
		out[i] = float64(i * 37 % 1000)
	}
	return out
}

// top300 is 999, 998, ..., 700.
func top300() []float64 {
	out := make([]float64, 300)
	for i := range out {
		out[i] = float64(999 - i)
	}
	return out
}

// top300Idx is where perm1000 holds top300's values: i with i*37 = v
// (mod 1000), i = v*973 mod 1000 (973 = 37^-1 mod 1000).
func top300Idx() []float64 {
	out := make([]float64, 300)
	for i, v := range top300() {
		out[i] = float64(int(v) * 973 % 1000)
	}
	return out
}
