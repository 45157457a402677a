package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Tree ensembles of ai.onnx.ml: TreeEnsembleClassifier and
// TreeEnsembleRegressor (opsets 1 and 3) and TreeEnsemble (opset 5) become
// one fxgraph.XserveTreeEnsemble node over constant tables, followed by
// the finalization ONNX Runtime applies (base values, averaging, the
// binary-classifier rules and the post transform; see ORT's
// tree_ensemble_aggregator.h), written with pointwise IR ops.
//
// Comparisons and sums are done in float32 for float (and integer) inputs
// and in float64 for double inputs, as ONNX Runtime does; thresholds and
// weights given as doubles (the *_as_tensor attributes) are rounded to
// float32 for float inputs.

// TreeLayout is the layout the importer gives tree ensembles (see
// fxgraph.TreeLayoutWalk and docs/BENCHMARKS.md, which measures both).
const TreeLayout = fxgraph.TreeLayoutWalk

func registerMLTrees(cs converters) {
	cs.register("ai.onnx.ml", "TreeEnsembleRegressor", 1, treeRegressorConvert)
	cs.register("ai.onnx.ml", "TreeEnsembleClassifier", 1, treeClassifierConvert)
	cs.register("ai.onnx.ml", "TreeEnsemble", 5, treeEnsembleV5Convert)
}

// treeSpec is a parsed ensemble: M nodes across all trees, leaves pointing
// at themselves, and the dense weights of every leaf.
type treeSpec struct {
	feature, trueChild, falseChild []int64
	threshold                      []float64
	mode                           []fxgraph.TreeMode
	missing                        []bool
	members                        [][]float64
	roots                          []int64
	weights                        [][]float64 // [M][targets]
	has                            [][]bool
	targets                        int64
	acc                            tensor.DType
	// aggregate is the node's kwarg: SUM, MIN or MAX.
	aggregate string
}

func newTreeSpec(m int, targets int64, acc tensor.DType) *treeSpec {
	t := &treeSpec{targets: targets, acc: acc,
		feature: make([]int64, m), trueChild: make([]int64, m), falseChild: make([]int64, m),
		threshold: make([]float64, m), mode: make([]fxgraph.TreeMode, m), members: make([][]float64, m),
		weights: make([][]float64, m), has: make([][]bool, m)}
	for i := range m {
		t.weights[i] = make([]float64, targets)
		t.has[i] = make([]bool, targets)
		t.trueChild[i], t.falseChild[i] = int64(i), int64(i)
		t.mode[i] = fxgraph.TreeLeaf
	}
	return t
}

// round rounds v to the accumulation dtype.
func (t *treeSpec) round(v float64) float64 {
	if t.acc == tensor.Float32 {
		return float64(float32(v))
	}
	return v
}

// addWeight adds weight w for target k to leaf m.
func (t *treeSpec) addWeight(m int, k int64, w float64) error {
	if k < 0 || k >= t.targets {
		return fmt.Errorf("weight for target %d of %d", k, t.targets)
	}
	t.weights[m][k] = t.round(t.weights[m][k] + t.round(w))
	t.has[m][k] = true
	return nil
}

// depth returns the longest root-to-leaf path (in edges), failing on a
// cycle or on a child out of range.
func (t *treeSpec) depth() (int64, error) {
	const unknown, visiting = -1, -2
	memo := make([]int64, len(t.feature))
	for i := range memo {
		memo[i] = unknown
	}
	var visit func(i int64, level int) (int64, error)
	visit = func(i int64, level int) (int64, error) {
		if i < 0 || i >= int64(len(memo)) {
			return 0, fmt.Errorf("child node %d out of range [0, %d)", i, len(memo))
		}
		switch memo[i] {
		case visiting:
			return 0, fmt.Errorf("node %d is its own descendant", i)
		case unknown:
		default:
			return memo[i], nil
		}
		if t.mode[i] == fxgraph.TreeLeaf {
			memo[i] = 0
			return 0, nil
		}
		if level > 1<<14 {
			return 0, fmt.Errorf("tree deeper than %d", 1<<14)
		}
		memo[i] = visiting
		a, err := visit(t.trueChild[i], level+1)
		if err != nil {
			return 0, err
		}
		b, err := visit(t.falseChild[i], level+1)
		if err != nil {
			return 0, err
		}
		memo[i] = 1 + max(a, b)
		return memo[i], nil
	}
	var d int64
	for _, r := range t.roots {
		rd, err := visit(r, 0)
		if err != nil {
			return 0, err
		}
		d = max(d, rd)
	}
	return d, nil
}

// emit adds the ensemble's node over x [N, F] (converted to the
// accumulation dtype) and returns its scores and has_score.
func (t *treeSpec) emit(b *mlBuild, x *fxgraph.Node, features int64) (*fxgraph.Node, *fxgraph.Node) {
	depth, err := t.depth()
	if err != nil {
		b.err = err
		return nil, nil
	}
	m := int64(len(t.feature))
	for i, f := range t.feature {
		if t.mode[i] != fxgraph.TreeLeaf && (f < 0 || (features >= 0 && f >= features)) {
			b.err = fmt.Errorf("node %d reads feature %d of an input with %d", i, f, features)
			return nil, nil
		}
	}
	c := b.c
	i32 := func(name string, v []int64) *fxgraph.Node {
		out := tensor.New(tensor.Int32, int64(len(v)))
		for i, e := range v {
			out.SetInt64(int64(i), e)
		}
		return c.Constant(name, out)
	}
	thr := tensor.New(t.acc, m)
	w := tensor.New(t.acc, m, t.targets)
	has := tensor.New(tensor.Bool, m, t.targets)
	for i := range m {
		thr.SetFloat64(i, t.threshold[i])
		for k := range t.targets {
			w.SetFloat64(i*t.targets+k, t.weights[i][k])
			if t.has[i][k] {
				has.SetFloat64(i*t.targets+k, 1)
			}
		}
	}
	args := []any{b.to(x, t.acc), i32("tree_feature", t.feature), c.Constant("tree_threshold", thr),
		i32("tree_true", t.trueChild), i32("tree_false", t.falseChild), i32("tree_roots", t.roots),
		c.Constant("tree_weights", w), c.Constant("tree_has_weight", has), t.missingTable(c), nil, nil}
	agg := t.aggregate
	if agg == "" {
		agg = "SUM"
	}
	kw := map[string]any{"depth": depth, "aggregate": agg, "layout": TreeLayout}
	if mode, uniform := t.uniformMode(); uniform {
		kw["mode"] = mode.String()
	} else {
		modes := tensor.New(tensor.Int8, m)
		for i, md := range t.mode {
			modes.SetFloat64(int64(i), float64(md))
		}
		args[9] = c.Constant("tree_modes", modes)
	}
	args[10] = t.memberTable(c)
	return b.treeNode(args, kw)
}

// treeNode emits the tree ensemble node and takes its two values.
func (b *mlBuild) treeNode(args []any, kw map[string]any) (*fxgraph.Node, *fxgraph.Node) {
	n := b.emitKw(fxgraph.XserveTreeEnsemble, args, kw)
	if n == nil {
		return nil, nil
	}
	return b.emit(fxgraph.GetItem, n, int64(0)), b.emit(fxgraph.GetItem, n, int64(1))
}

func (t *treeSpec) uniformMode() (fxgraph.TreeMode, bool) {
	mode := fxgraph.TreeLeaf
	for _, md := range t.mode {
		switch {
		case md == fxgraph.TreeLeaf:
		case mode == fxgraph.TreeLeaf:
			mode = md
		case md != mode:
			return 0, false
		}
	}
	if mode == fxgraph.TreeLeaf {
		mode = fxgraph.TreeLEQ
	}
	for i, md := range t.mode {
		if md == fxgraph.TreeLeaf {
			t.mode[i] = mode // never decides: both children are the leaf
		}
	}
	return mode, true
}

func (t *treeSpec) missingTable(c *Ctx) any {
	some := false
	miss := tensor.New(tensor.Bool, int64(len(t.feature)))
	for i, v := range t.missing {
		if v && i < len(t.feature) {
			some = true
			miss.SetFloat64(int64(i), 1)
		}
	}
	if !some {
		return nil
	}
	return c.Constant("tree_missing", miss)
}

func (t *treeSpec) memberTable(c *Ctx) any {
	width := 0
	for _, s := range t.members {
		width = max(width, len(s))
	}
	if width == 0 {
		return nil
	}
	tab := tensor.New(t.acc, int64(len(t.members)), int64(width))
	for i, s := range t.members {
		for k := range width {
			v := math.NaN()
			if k < len(s) {
				v = s[k]
			}
			tab.SetFloat64(int64(i*width+k), v)
		}
	}
	return c.Constant("tree_members", tab)
}

// accDType is the dtype ONNX Runtime compares and sums in for input x.
func accDType(x *fxgraph.Node) tensor.DType {
	if Meta(x).DType == tensor.Float64 {
		return tensor.Float64
	}
	return tensor.Float32
}

// floatsAttr returns attribute name as float64s: the float list, or the
// double tensor name+"_as_tensor".
func floatsAttr(c *Ctx, name string) ([]float64, error) {
	if a := c.Attr(name + "_as_tensor"); a != nil && a.T != nil {
		if !a.T.DType.IsFloat() {
			return nil, fmt.Errorf("%s_as_tensor is %s, want a float tensor", name, a.T)
		}
		return a.T.Float64s(), nil
	}
	fs := c.AttrFloats(name, nil)
	out := make([]float64, len(fs))
	for i, f := range fs {
		out[i] = float64(f)
	}
	return out, nil
}

// treeInput returns input 0 as [N, F] and F (-1 when symbolic).
func treeInput(b *mlBuild) (*fxgraph.Node, int64) {
	x, err := b.c.Input(0)
	if err != nil {
		b.err = err
		return nil, 0
	}
	x = b.rows(x)
	if x == nil {
		return nil, 0
	}
	f := Meta(x).Shape[1]
	if !f.IsStatic() {
		return x, -1
	}
	return x, f.Size
}
