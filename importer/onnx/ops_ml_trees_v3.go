package onnx

import (
	"fmt"
	"math"
	"sort"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// parseTreesV3 reads the nodes_* attributes of TreeEnsembleClassifier and
// TreeEnsembleRegressor and the leaves' weights (attributes prefix_ids,
// prefix_nodeids, prefix_treeids, prefix_weights). Trees are taken in the
// order their nodes are listed, each rooted at its first listed node, and
// a leaf's weights in the order they are listed, as ONNX Runtime does.
func parseTreesV3(c *Ctx, prefix string, targets int64, acc tensor.DType) (*treeSpec, error) {
	treeIDs, nodeIDs := c.AttrInts("nodes_treeids", nil), c.AttrInts("nodes_nodeids", nil)
	feats := c.AttrInts("nodes_featureids", nil)
	trueIDs, falseIDs := c.AttrInts("nodes_truenodeids", nil), c.AttrInts("nodes_falsenodeids", nil)
	missing := c.AttrInts("nodes_missing_value_tracks_true", nil)
	var modes [][]byte
	if a := c.Attr("nodes_modes"); a != nil {
		modes = a.Strings
	}
	values, err := floatsAttr(c, "nodes_values")
	if err != nil {
		return nil, err
	}
	n := len(treeIDs)
	for name, l := range map[string]int{"nodes_nodeids": len(nodeIDs), "nodes_featureids": len(feats), "nodes_modes": len(modes),
		"nodes_truenodeids": len(trueIDs), "nodes_falsenodeids": len(falseIDs), "nodes_values": len(values)} {
		if l != n {
			return nil, fmt.Errorf("%s has %d values, nodes_treeids %d", name, l, n)
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("no tree nodes")
	}
	if targets < 1 {
		return nil, fmt.Errorf("%d targets", targets)
	}
	t := newTreeSpec(n, targets, acc)
	t.missing = make([]bool, n)
	pos := make(map[[2]int64]int, n)
	for i := range n {
		key := [2]int64{treeIDs[i], nodeIDs[i]}
		if _, dup := pos[key]; dup {
			return nil, fmt.Errorf("node %d of tree %d is listed twice", nodeIDs[i], treeIDs[i])
		}
		pos[key] = i
	}
	prev := int64(math.MinInt64)
	for i := range n {
		if err := t.setNodeV3(i, string(modes[i]), feats[i], values[i], pos, treeIDs[i], trueIDs[i], falseIDs[i]); err != nil {
			return nil, err
		}
		t.missing[i] = i < len(missing) && missing[i] == 1
		if treeIDs[i] != prev {
			t.roots = append(t.roots, int64(i))
		}
		prev = treeIDs[i]
	}
	return t, t.weightsV3(c, prefix, pos)
}

// setNodeV3 fills node i from its attributes.
func (t *treeSpec) setNodeV3(i int, mode string, feat int64, value float64, pos map[[2]int64]int, tree, tid, fid int64) error {
	md, err := fxgraph.ParseTreeMode(mode)
	if err != nil || md == fxgraph.TreeMember {
		return fmt.Errorf("node %d: mode %q", i, mode)
	}
	if md == fxgraph.TreeLeaf {
		return nil
	}
	tc, ok1 := pos[[2]int64{tree, tid}]
	fc, ok2 := pos[[2]int64{tree, fid}]
	if !ok1 || !ok2 || tc == i || fc == i {
		return fmt.Errorf("node %d of tree %d: children %d and %d are not other nodes of the tree", i, tree, tid, fid)
	}
	t.mode[i], t.feature[i], t.threshold[i] = md, feat, t.round(value)
	t.trueChild[i], t.falseChild[i] = int64(tc), int64(fc)
	return nil
}

// weightsV3 adds the leaves' weights, sorted by (tree, node) and then in
// the order listed; weights of nodes that are not leaves are ignored (as
// ONNX Runtime does for old onnxmltools models).
func (t *treeSpec) weightsV3(c *Ctx, prefix string, pos map[[2]int64]int) error {
	ids, nodes, trees := c.AttrInts(prefix+"_ids", nil), c.AttrInts(prefix+"_nodeids", nil), c.AttrInts(prefix+"_treeids", nil)
	ws, err := floatsAttr(c, prefix+"_weights")
	if err != nil {
		return err
	}
	if len(nodes) != len(ids) || len(trees) != len(ids) || len(ws) != len(ids) {
		return fmt.Errorf("%s_ids, _nodeids, _treeids and _weights have %d, %d, %d and %d values", prefix, len(ids), len(nodes), len(trees), len(ws))
	}
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		i, j := order[a], order[b]
		return trees[i] < trees[j] || (trees[i] == trees[j] && nodes[i] < nodes[j])
	})
	for _, i := range order {
		m, ok := pos[[2]int64{trees[i], nodes[i]}]
		if !ok {
			return fmt.Errorf("weight %d is for node %d of tree %d, which is not listed", i, nodes[i], trees[i])
		}
		if t.mode[m] != fxgraph.TreeLeaf {
			continue
		}
		if err := t.addWeight(m, ids[i], ws[i]); err != nil {
			return fmt.Errorf("weight %d: %w", i, err)
		}
	}
	return nil
}

// treeStart reads what both tree converters start from: the input [N, F],
// F, and the post transform.
func treeStart(c *Ctx) (b *mlBuild, x *fxgraph.Node, features int64, pt string, err error) {
	b = &mlBuild{c: c}
	x, features = treeInput(b)
	if b.err != nil {
		return nil, nil, 0, "", b.err
	}
	pt, err = postTransformAttr(c)
	return b, x, features, pt, err
}

func treeRegressorConvert(c *Ctx, n *Node) error {
	b, x, features, pt, err := treeStart(c)
	if err != nil {
		return err
	}
	agg := c.AttrString("aggregate_function", "SUM")
	spec, err := parseTreesV3(c, "target", c.AttrInt("n_targets", 1), accDType(x))
	if err != nil {
		return err
	}
	base, err := floatsAttr(c, "base_values")
	if err != nil {
		return err
	}
	y := b.finishRegression(spec, x, features, agg, base, pt)
	if b.err != nil {
		return b.err
	}
	c.SetOutput(0, b.to(y, tensor.Float32))
	return b.err
}

// finishRegression runs the ensemble and finishes its scores as ONNX
// Runtime's regression aggregators do: averaging, base values, and the post
// transform (only PROBIT for a single target). The result is float32 for
// several targets and the accumulation dtype for one.
func (b *mlBuild) finishRegression(spec *treeSpec, x *fxgraph.Node, features int64, agg string, base []float64, pt string) *fxgraph.Node {
	switch agg {
	case "SUM", "MIN", "MAX":
		spec.aggregate = agg
	case "AVERAGE":
		spec.aggregate = "SUM"
	default:
		b.err = fmt.Errorf("aggregate_function %q, want AVERAGE, SUM, MIN or MAX", agg)
		return nil
	}
	s, _ := spec.emit(b, x, features)
	if agg == "AVERAGE" {
		s = b.div(s, b.scalar(spec.acc, float64(len(spec.roots))))
	}
	if spec.targets == 1 {
		origin := 0.0
		if len(base) == 1 {
			origin = base[0]
		}
		s = b.add(s, b.scalar(spec.acc, spec.round(origin)))
		if pt == "PROBIT" {
			return b.probit(b.to(s, tensor.Float32))
		}
		return s
	}
	if int64(len(base)) == spec.targets {
		s = b.add(s, b.c.Constant("base_values", spec.vector(base)))
	}
	return b.transform(pt, b.to(s, tensor.Float32))
}

// vector is a 1-D constant of v in the accumulation dtype.
func (t *treeSpec) vector(v []float64) *tensor.Tensor {
	out := tensor.New(t.acc, int64(len(v)))
	for i, e := range v {
		out.SetFloat64(int64(i), e)
	}
	return out
}

// classLabels returns the classifier's labels: int64s, or strings.
func classLabels(c *Ctx) (ints []int64, strs [][]byte) {
	if a := c.Attr("classlabels_strings"); a != nil && len(a.Strings) > 0 {
		return nil, a.Strings
	}
	return c.AttrInts("classlabels_int64s", nil), nil
}

func treeClassifierConvert(c *Ctx, n *Node) error {
	b, x, features, pt, err := treeStart(c)
	if err != nil {
		return err
	}
	ints, strs := classLabels(c)
	classes := int64(len(ints) + len(strs))
	if classes < 2 {
		return Unsupported("TreeEnsembleClassifier with %d class labels (want 2 or more)", classes)
	}
	spec, err := parseTreesV3(c, "class", classes, accDType(x))
	if err != nil {
		return err
	}
	base, err := floatsAttr(c, "base_values")
	if err != nil {
		return err
	}
	spec.aggregate = "SUM"
	s, has := spec.emit(b, x, features)
	var label, scores *fxgraph.Node
	if classes > 2 {
		label, scores = b.finishMulticlass(spec, s, has, base, pt)
	} else {
		label, scores = b.finishBinary(spec, c, s, has, base, pt)
	}
	if b.err != nil {
		return b.err
	}
	if binary, _ := treeBinaryCase(c); classes == 2 && !binary && strs == nil {
		// ONNX Runtime gives 1 or 0 here, not the labels.
		c.SetOutput(0, label)
	} else {
		c.SetOutput(0, b.labels(label, ints, strs))
	}
	c.SetOutput(1, scores)
	return b.err
}

// finishMulticlass adds the base values and picks the label as ONNX
// Runtime's classifier does for more than two classes: the first class
// with the largest score among those that have one. label is the class
// index.
func (b *mlBuild) finishMulticlass(spec *treeSpec, s, has *fxgraph.Node, base []float64, pt string) (label, scores *fxgraph.Node) {
	if len(base) > 0 {
		padded := make([]float64, spec.targets)
		given := tensor.New(tensor.Bool, spec.targets)
		for k := range min(int64(len(base)), spec.targets) {
			padded[k] = base[k]
			given.SetFloat64(k, 1)
		}
		s = b.add(s, b.c.Constant("base_values", spec.vector(padded)))
		has = b.or(has, b.c.Constant("base_given", given))
	}
	masked := b.where(has, s, b.scalar(spec.acc, math.Inf(-1)))
	label = b.emit(fxgraph.AtenArgmax, masked, int64(1))
	return label, b.transform(pt, b.to(s, tensor.Float32))
}

// finishBinary is ONNX Runtime's two-class finalization (the base values
// given, whether class 1 got a score, the binary case of weights for one
// class only, and all-positive weights); label is the class index.
func (b *mlBuild) finishBinary(spec *treeSpec, c *Ctx, s, has *fxgraph.Node, base []float64, pt string) (label, scores *fxgraph.Node) {
	acc := spec.acc
	col := func(v *fxgraph.Node, j int64) *fxgraph.Node { return b.squeeze1(b.column(v, j)) }
	s0, s1, h0, h1 := col(s, 0), col(s, 1), col(has, 0), col(has, 1)
	k := func(v float64) *fxgraph.Node { return b.scalar(acc, spec.round(v)) }
	p0, p1, two := s0, s1, h1
	wa := -1 // ONNX Runtime's write_additional_scores before the label is picked
	switch len(base) {
	case 2:
		q1 := b.add(k(base[1]), s0)
		p1 = b.where(h1, q1, b.add(s1, k(base[1])))
		p0 = b.where(h1, b.neg(q1), b.add(s0, k(base[0])))
		two = b.scalar(tensor.Bool, 1)
	case 1:
		p0 = b.add(s0, k(base[0]))
	case 0:
		wa = 3
	}
	pos := b.where(h1, p1, b.where(h0, p0, k(0)))
	binaryCase, allPositive := treeBinaryCase(c)
	one, zero := b.scalar(tensor.Int64, 1), b.scalar(tensor.Int64, 0)
	switch {
	case binaryCase && allPositive:
		label, wa = b.where(b.gt(pos, k(0.5)), one, zero), 0
	case binaryCase:
		label, wa = b.where(b.gt(pos, k(0)), one, zero), 2
	default:
		label = b.where(b.gt(pos, k(0)), one, zero)
	}
	f0, f1 := b.to(p0, tensor.Float32), b.to(p1, tensor.Float32)
	pair := func(a, c *fxgraph.Node) *fxgraph.Node {
		return b.cat(1, b.emit(fxgraph.AtenUnsqueeze, a, int64(1)), b.emit(fxgraph.AtenUnsqueeze, c, int64(1)))
	}
	both := b.transform(pt, pair(f0, f1))
	var single *fxgraph.Node
	f32 := func(v float64) *fxgraph.Node { return b.scalar(tensor.Float32, v) }
	zeros := b.mul(f0, f32(0))
	switch {
	case pt == "PROBIT":
		single = pair(b.probit(f0), zeros)
	case wa == 0:
		single = pair(b.sub(f32(1), f0), f0)
	case wa == 2 || wa == 3:
		if pt == "LOGISTIC" {
			single = pair(b.logistic(b.neg(f0)), b.logistic(f0))
		} else {
			single = pair(b.neg(f0), f0)
		}
	default:
		single = pair(f0, zeros)
	}
	twoCol := b.emit(fxgraph.AtenUnsqueeze, two, int64(1))
	return label, b.where(twoCol, both, single)
}

// treeBinaryCase reports ONNX Runtime's binary case (two classes, weights
// for one class only) and whether every class weight is non-negative.
func treeBinaryCase(c *Ctx) (binary, allPositive bool) {
	ids := map[int64]bool{}
	for _, id := range c.AttrInts("class_ids", nil) {
		ids[id] = true
	}
	ws, _ := floatsAttr(c, "class_weights")
	allPositive = true
	for _, w := range ws {
		if w < 0 {
			allPositive = false
		}
	}
	return len(ids) == 1, allPositive
}

// labels maps class indexes [N] to the classifier's labels: int64s, or
// strings (computed on the host).
func (b *mlBuild) labels(idx *fxgraph.Node, ints []int64, strs [][]byte) *fxgraph.Node {
	if b.err != nil {
		return nil
	}
	if strs != nil {
		return b.stringLabels(idx, strs)
	}
	table := b.c.Constant("classlabels", tensor.FromInt64s(ints))
	return b.emit(fxgraph.AtenIndexSelect, table, int64(0), idx)
}
