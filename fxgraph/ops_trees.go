package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// XserveTreeEnsemble is the op of a tree ensemble: ONNX-ML's
// TreeEnsembleClassifier, TreeEnsembleRegressor and TreeEnsemble (ai.onnx.ml
// 5) share it; importers add base values, averaging, post transforms and
// labels with other ops.
//
// Its args are x [N, F] and the ensemble's tables, every one a constant
// (weights of the program), indexed by node m in [0, M) across all trees:
//
//	1 feature [M] int: the input column node m tests (0 for leaves)
//	2 threshold [M]: its threshold (the accumulation dtype)
//	3 true_child [M] int, 4 false_child [M] int: where it goes; a leaf
//	  points at itself, so that a walk longer than its path stays on it
//	5 roots [T] int: the root node of each tree, in the model's tree order
//	6 weights [M, C]: what leaf m adds to each of the C targets
//	7 has_weight [M, C] bool: whether leaf m gives target c a weight
//	8 missing [M] bool or None: nodes whose NaN input goes to true_child
//	9 modes [M] int8 or None: each node's comparison (TreeMode) when
//	  they differ; None when every node compares by the kwarg mode
//	10 members [M, K] or None: the values of set-membership nodes
//	  (TreeMember), NaN padded
//
// and its kwargs depth (the longest root-to-leaf path, in edges), mode (the
// TreeMode of every node when modes is None), aggregate ("SUM", "MIN" or
// "MAX"; averaging is a SUM divided afterwards) and layout (TreeLayoutWalk
// or TreeLayoutCompare; see package lower). Its outputs are the aggregated
// scores [N, C] in the threshold's dtype, the trees added in the order of
// roots, and has_score [N, C]: whether any reached leaf gave target c a
// weight.
var XserveTreeEnsemble = &Op{Name: "xserve.tree_ensemble"}

// TreeMode is how a tree node compares its input with its threshold.
type TreeMode int8

// The comparisons of tree nodes, as ONNX-ML's nodes_modes name them
// (BRANCH_LEQ, ...); TreeLeaf marks a leaf.
const (
	TreeLEQ TreeMode = iota
	TreeLT
	TreeGTE
	TreeGT
	TreeEQ
	TreeNEQ
	TreeMember
	TreeLeaf
)

var treeModeNames = [...]string{"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER", "LEAF"}

// String returns the ONNX-ML name of the mode ("BRANCH_LEQ", ...).
func (m TreeMode) String() string {
	if m >= 0 && int(m) < len(treeModeNames) {
		return treeModeNames[m]
	}
	return fmt.Sprintf("TreeMode(%d)", int8(m))
}

// ParseTreeMode parses an ONNX-ML node mode name.
func ParseTreeMode(s string) (TreeMode, error) {
	for i, n := range treeModeNames {
		if n == s {
			return TreeMode(i), nil
		}
	}
	return 0, fmt.Errorf("fxgraph: unknown tree node mode %q (want BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, BRANCH_MEMBER or LEAF)", s)
}

// The layouts of the tree ensemble's lowering (kwarg layout).
const (
	// TreeLayoutWalk walks every tree one depth at a time, gathering each
	// current node's feature, threshold and children.
	TreeLayoutWalk = "walk"
	// TreeLayoutCompare compares every node with its input column at once,
	// then walks the trees reading those decisions.
	TreeLayoutCompare = "compare"
)

// TreeEnsembleArgs are the kwargs of a tree ensemble node.
type TreeEnsembleArgs struct {
	Depth     int64
	Mode      TreeMode
	Aggregate string
	Layout    string
}

// TreeEnsemble reads and checks the kwargs of a tree ensemble node.
func TreeEnsemble(n *Node) (TreeEnsembleArgs, error) {
	var a TreeEnsembleArgs
	var err error
	if a.Depth, err = n.IntArg(11, "depth", 0); err != nil {
		return a, err
	}
	mode, _ := n.ArgOr(11, "mode", "BRANCH_LEQ").(string)
	if a.Mode, err = ParseTreeMode(mode); err != nil {
		return a, fmt.Errorf("node %s: %w", n.Name, err)
	}
	a.Aggregate, _ = n.ArgOr(11, "aggregate", "SUM").(string)
	a.Layout, _ = n.ArgOr(11, "layout", TreeLayoutWalk).(string)
	switch {
	case a.Depth < 0 || a.Depth > 1<<16:
		return a, fmt.Errorf("fxgraph: node %s: tree depth %d", n.Name, a.Depth)
	case a.Aggregate != "SUM" && a.Aggregate != "MIN" && a.Aggregate != "MAX":
		return a, fmt.Errorf("fxgraph: node %s: aggregate %q, want SUM, MIN or MAX", n.Name, a.Aggregate)
	case a.Layout != TreeLayoutWalk && a.Layout != TreeLayoutCompare:
		return a, fmt.Errorf("fxgraph: node %s: layout %q, want %s or %s", n.Name, a.Layout, TreeLayoutWalk, TreeLayoutCompare)
	}
	return a, nil
}

func treeEnsembleShape(n *Node) (Meta, error) {
	if _, err := TreeEnsemble(n); err != nil {
		return Meta{}, err
	}
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	thr, err := n.InputMeta(2)
	if err != nil {
		return Meta{}, err
	}
	w, err := n.InputMeta(6)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() != 2 || !x.DType.IsFloat() {
		return Meta{}, fmt.Errorf("fxgraph: node %s: x is %s, want a float [N, F]", n.Name, x)
	}
	if !thr.DType.IsFloat() || w.DType != thr.DType || w.Rank() != 2 || thr.Rank() != 1 {
		return Meta{}, fmt.Errorf("fxgraph: node %s: threshold %s and weights %s, want [M] and [M, C] of one float dtype", n.Name, thr, w)
	}
	for _, i := range []int{1, 3, 4, 5} {
		m, err := n.InputMeta(i)
		if err != nil {
			return Meta{}, err
		}
		if !m.DType.IsInt() || m.Rank() != 1 {
			return Meta{}, fmt.Errorf("fxgraph: node %s: argument %d is %s, want a 1-D integer table", n.Name, i, m)
		}
	}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: thr.DType, Shape: Shape{x.Shape[0], w.Shape[1]}},
		{DType: tensor.Bool, Shape: Shape{x.Shape[0], w.Shape[1]}},
	}}, nil
}

func registerTrees(r *Registry) {
	r.define(XserveTreeEnsemble, treeEnsembleShape, nil)
}
