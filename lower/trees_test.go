package lower_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// treeCase is a random ensemble in the tables of fxgraph.TreeEnsembleTarget.
type treeCase struct {
	feature, trueChild, falseChild, roots []int64
	threshold                             []float32
	mode                                  []fxgraph.TreeMode
	missing                               []bool
	members                               [][]float32
	weights                               [][]float32 // [node][target]
	has                                   [][]bool
	targets                               int
}

// randomTrees builds ntrees random trees of depth up to maxDepth over
// features inputs, with every node mode and missing-value tracks.
func randomTrees(rng *rand.Rand, ntrees, maxDepth, features, targets int) *treeCase {
	tc := &treeCase{targets: targets}
	var grow func(depth int) int64
	grow = func(depth int) int64 {
		i := int64(len(tc.feature))
		tc.feature = append(tc.feature, int64(rng.IntN(features)))
		tc.threshold = append(tc.threshold, float32(math.Round(rng.NormFloat64()*4)/4))
		tc.trueChild, tc.falseChild = append(tc.trueChild, i), append(tc.falseChild, i)
		tc.missing = append(tc.missing, rng.IntN(3) == 0)
		tc.members = append(tc.members, nil)
		w, h := make([]float32, targets), make([]bool, targets)
		tc.weights, tc.has = append(tc.weights, w), append(tc.has, h)
		if depth == maxDepth || (depth > 0 && rng.IntN(4) == 0) {
			tc.mode = append(tc.mode, fxgraph.TreeLeaf)
			for k := range targets {
				if rng.IntN(3) > 0 {
					w[k], h[k] = float32(rng.NormFloat64()), true
				}
			}
			return i
		}
		m := fxgraph.TreeMode(rng.IntN(int(fxgraph.TreeMember) + 1))
		tc.mode = append(tc.mode, m)
		if m == fxgraph.TreeMember {
			tc.members[i] = []float32{-0.5, 0, 0.25}[:1+rng.IntN(3)]
		}
		t := grow(depth + 1)
		f := grow(depth + 1)
		tc.trueChild[i], tc.falseChild[i] = t, f
		return i
	}
	for range ntrees {
		tc.roots = append(tc.roots, grow(0))
	}
	return tc
}

// decide is one node's decision in float32, as ONNX Runtime makes it.
func (tc *treeCase) decide(i int64, v float32) bool {
	thr := tc.threshold[i]
	var d bool
	switch tc.mode[i] {
	case fxgraph.TreeLEQ:
		d = v <= thr
	case fxgraph.TreeLT:
		d = v < thr
	case fxgraph.TreeGTE:
		d = v >= thr
	case fxgraph.TreeGT:
		d = v > thr
	case fxgraph.TreeEQ:
		d = v == thr
	case fxgraph.TreeNEQ:
		d = v != thr
	case fxgraph.TreeMember:
		for _, m := range tc.members[i] {
			d = d || v == m
		}
	}
	return d || (tc.missing[i] && v != v)
}

// reference walks every tree in float32 and sums the leaves' weights in
// tree order from zero; has says which targets got a weight.
func (tc *treeCase) reference(x [][]float32) (scores [][]float32, has [][]bool) {
	for _, row := range x {
		s, h := make([]float32, tc.targets), make([]bool, tc.targets)
		for _, r := range tc.roots {
			i := r
			for tc.mode[i] != fxgraph.TreeLeaf {
				if tc.decide(i, row[tc.feature[i]]) {
					i = tc.trueChild[i]
				} else {
					i = tc.falseChild[i]
				}
			}
			for k := range tc.targets {
				s[k] += tc.weights[i][k]
				h[k] = h[k] || tc.has[i][k]
			}
		}
		scores, has = append(scores, s), append(has, h)
	}
	return scores, has
}

func (tc *treeCase) depth() int64 {
	var d func(i int64) int64
	d = func(i int64) int64 {
		if tc.mode[i] == fxgraph.TreeLeaf {
			return 0
		}
		return 1 + max(d(tc.trueChild[i]), d(tc.falseChild[i]))
	}
	var out int64
	for _, r := range tc.roots {
		out = max(out, d(r))
	}
	return out
}

// graph is the ensemble over an input placeholder of rows x features.
func (tc *treeCase) graph(rows, features int, layout string) *fxgraph.Graph {
	g := fxgraph.New()
	m := int64(len(tc.feature))
	ints := func(v []int64) *fxgraph.Node { return g.AddConstant("t", tensor.FromInt64s(v)) }
	thr := tensor.FromFloat32s(tc.threshold)
	w, h := tensor.New(tensor.Float32, m, int64(tc.targets)), tensor.New(tensor.Bool, m, int64(tc.targets))
	miss, modes := tensor.New(tensor.Bool, m), tensor.New(tensor.Int8, m)
	mem := tensor.New(tensor.Float32, m, 3)
	for i := range m {
		for k := range int64(tc.targets) {
			w.SetFloat64(i*int64(tc.targets)+k, float64(tc.weights[i][k]))
			if tc.has[i][k] {
				h.SetFloat64(i*int64(tc.targets)+k, 1)
			}
		}
		if tc.missing[i] {
			miss.SetFloat64(i, 1)
		}
		modes.SetFloat64(i, float64(tc.mode[i]))
		for k := range int64(3) {
			v := math.NaN()
			if int(k) < len(tc.members[i]) {
				v = float64(tc.members[i][k])
			}
			mem.SetFloat64(i*3+k, v)
		}
	}
	x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, int64(rows), int64(features)))
	n := g.AddCall(fxgraph.XserveTreeEnsemble, []any{x, ints(tc.feature), g.AddConstant("thr", thr), ints(tc.trueChild),
		ints(tc.falseChild), ints(tc.roots), g.AddConstant("w", w), g.AddConstant("h", h), g.AddConstant("miss", miss),
		g.AddConstant("modes", modes), g.AddConstant("mem", mem)},
		map[string]any{"depth": tc.depth(), "aggregate": "SUM", "layout": layout})
	g.SetOutput(g.AddCall(fxgraph.GetItem, []any{n, int64(0)}, nil), g.AddCall(fxgraph.GetItem, []any{n, int64(1)}, nil))
	return g
}

// TestTreeEnsembleExecute runs random ensembles (every node mode, NaN
// inputs on missing-value tracks, set membership, leaves giving some
// targets no weight) in both layouts on the PJRT CPU plugin and checks the
// scores are the bits of a float32 walk summing trees in order.
func TestTreeEnsembleExecute(t *testing.T) {
	client := nnOpenPlugin(t)
	const rows, features, targets = 9, 5, 3
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tc := randomTrees(rng, 6+int(seed)*5, 5, features, targets)
		x := make([][]float32, rows)
		flat := make([]float32, 0, rows*features)
		for r := range x {
			x[r] = make([]float32, features)
			for f := range x[r] {
				x[r][f] = float32(math.Round(rng.NormFloat64()*8) / 8)
				if rng.IntN(7) == 0 {
					x[r][f] = float32(math.NaN())
				}
			}
			flat = append(flat, x[r]...)
		}
		want, wantHas := tc.reference(x)
		for _, layout := range []string{fxgraph.TreeLayoutWalk, fxgraph.TreeLayoutCompare} {
			t.Run(fmt.Sprintf("seed%d/%s", seed, layout), func(t *testing.T) {
				prog, err := lower.New(lower.Options{}).Lower(tc.graph(rows, features, layout), nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{tensor.FromFloat32s(flat, rows, features)})
				if err != nil {
					t.Fatal(err)
				}
				for r := range rows {
					for k := range targets {
						i := int64(r*targets + k)
						if g := float32(got[0].Float64At(i)); math.Float32bits(g) != math.Float32bits(want[r][k]) {
							t.Errorf("row %d target %d: %v, want %v", r, k, g, want[r][k])
						}
						if g := got[1].Float64At(i) != 0; g != wantHas[r][k] {
							t.Errorf("row %d target %d: has %v, want %v", r, k, g, wantHas[r][k])
						}
					}
				}
			})
		}
	}
}

// TestTreeEnsembleText checks the program of a one-split tree: the sums
// are a chain of adds (no reduce, whose order XLA may change), and the
// compare layout compares every node once.
func TestTreeEnsembleText(t *testing.T) {
	tc := &treeCase{targets: 1, feature: []int64{1, 0, 0}, trueChild: []int64{1, 1, 2}, falseChild: []int64{2, 1, 2},
		roots: []int64{0, 0}, threshold: []float32{0.5, 0, 0}, mode: []fxgraph.TreeMode{fxgraph.TreeLEQ, fxgraph.TreeLeaf, fxgraph.TreeLeaf},
		missing: make([]bool, 3), members: make([][]float32, 3), weights: [][]float32{{0}, {1}, {2}}, has: [][]bool{{false}, {true}, {true}}}
	for _, layout := range []string{fxgraph.TreeLayoutWalk, fxgraph.TreeLayoutCompare} {
		prog, err := lower.New(lower.Options{}).Lower(tc.graph(4, 2, layout), nil)
		if err != nil {
			t.Fatal(err)
		}
		text := string(prog.Module)
		if n := strings.Count(text, `"stablehlo.add"(`); n < 2 {
			t.Errorf("%s: %d adds, want the two trees added in order\n%s", layout, n, text)
		}
		if strings.Contains(text, ": tensor<f32>, %") {
			t.Errorf("%s: a float reduce sums the trees\n%s", layout, text)
		}
		if layout == fxgraph.TreeLayoutCompare && !strings.Contains(text, "-> tensor<4x3xi1>") {
			t.Errorf("compare layout: no [rows, nodes] decisions\n%s", text)
		}
	}
}
