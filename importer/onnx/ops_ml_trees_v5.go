package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/tensor"

	"github.com/xserve/xserve/fxgraph"
)

// TreeEnsemble (ai.onnx.ml 5): interior nodes indexed 0..I-1 with their
// children given as node or leaf indexes (nodes_trueleafs /
// nodes_falseleafs), leaves I..I+L-1 with one weight each, set-membership
// nodes (BRANCH_MEMBER, mode 6) whose sets are runs of membership_values
// separated by NaN, trees rooted at tree_roots. The output has X's dtype.

var (
	v5Aggregates     = []string{"AVERAGE", "SUM", "MIN", "MAX"}
	v5PostTransforms = []string{"NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"}
)

// tensorAttr returns a tensor attribute's values as float64s.
func tensorAttr(c *Ctx, name string) []float64 {
	if a := c.Attr(name); a != nil && a.T != nil {
		return a.T.Float64s()
	}
	return nil
}

func treeEnsembleV5Convert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, features := treeInput(b)
	if b.err != nil {
		return b.err
	}
	dt := Meta(x).DType
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return Unsupported("TreeEnsemble of %s input (want float or double)", dt)
	}
	agg, pt := c.AttrInt("aggregate_function", 1), c.AttrInt("post_transform", 0)
	if agg < 0 || agg >= int64(len(v5Aggregates)) || pt < 0 || pt >= int64(len(v5PostTransforms)) {
		return fmt.Errorf("aggregate_function %d or post_transform %d out of range", agg, pt)
	}
	spec, err := parseTreesV5(c, dt)
	if err != nil {
		return err
	}
	y := b.finishRegression(spec, x, features, v5Aggregates[agg], nil, v5PostTransforms[pt])
	c.SetOutput(0, b.to(y, dt))
	return b.err
}

func parseTreesV5(c *Ctx, acc tensor.DType) (*treeSpec, error) {
	feats := c.AttrInts("nodes_featureids", nil)
	splits, modes := tensorAttr(c, "nodes_splits"), tensorAttr(c, "nodes_modes")
	tIDs, fIDs := c.AttrInts("nodes_truenodeids", nil), c.AttrInts("nodes_falsenodeids", nil)
	tLeaf, fLeaf := c.AttrInts("nodes_trueleafs", nil), c.AttrInts("nodes_falseleafs", nil)
	missing := c.AttrInts("nodes_missing_value_tracks_true", nil)
	leafTargets, leafWeights := c.AttrInts("leaf_targetids", nil), tensorAttr(c, "leaf_weights")
	interior, leaves := len(feats), len(leafTargets)
	for name, l := range map[string]int{"nodes_splits": len(splits), "nodes_modes": len(modes), "nodes_truenodeids": len(tIDs),
		"nodes_falsenodeids": len(fIDs), "nodes_trueleafs": len(tLeaf), "nodes_falseleafs": len(fLeaf)} {
		if l != interior {
			return nil, fmt.Errorf("%s has %d values, nodes_featureids %d", name, l, interior)
		}
	}
	if len(leafWeights) != leaves || leaves == 0 {
		return nil, fmt.Errorf("%d leaf_weights for %d leaf_targetids", len(leafWeights), leaves)
	}
	t := newTreeSpec(interior+leaves, c.AttrInt("n_targets", 1), acc)
	t.missing = make([]bool, interior+leaves)
	child := func(id, leaf int64) (int64, error) {
		lim := int64(interior)
		if leaf != 0 {
			id, lim = id+int64(interior), int64(interior+leaves)
		}
		if id < 0 || id >= lim {
			return 0, fmt.Errorf("child %d out of range", id)
		}
		return id, nil
	}
	sets := tensorAttr(c, "membership_values")
	for i := range interior {
		md := fxgraph.TreeMode(modes[i])
		if modes[i] < 0 || md > fxgraph.TreeMember {
			return nil, fmt.Errorf("node %d: mode %v", i, modes[i])
		}
		var err error
		if t.trueChild[i], err = child(tIDs[i], tLeaf[i]); err != nil {
			return nil, fmt.Errorf("node %d: true %w", i, err)
		}
		if t.falseChild[i], err = child(fIDs[i], fLeaf[i]); err != nil {
			return nil, fmt.Errorf("node %d: false %w", i, err)
		}
		t.mode[i], t.feature[i], t.threshold[i] = md, feats[i], t.round(splits[i])
		t.missing[i] = i < len(missing) && missing[i] == 1
		if md == fxgraph.TreeMember {
			if t.members[i], sets, err = nextSet(sets); err != nil {
				return nil, fmt.Errorf("node %d: %w", i, err)
			}
			for k := range t.members[i] {
				t.members[i][k] = t.round(t.members[i][k])
			}
		}
	}
	for j := range leaves {
		if err := t.addWeight(interior+j, leafTargets[j], leafWeights[j]); err != nil {
			return nil, fmt.Errorf("leaf %d: %w", j, err)
		}
	}
	for _, r := range c.AttrInts("tree_roots", nil) {
		if r < 0 || r >= int64(interior) {
			return nil, fmt.Errorf("tree root %d out of range [0, %d)", r, interior)
		}
		// A tree that is one leaf: both children the same leaf.
		if tLeaf[r] != 0 && fLeaf[r] != 0 && tIDs[r] == fIDs[r] {
			r = t.trueChild[r]
		}
		t.roots = append(t.roots, r)
	}
	if len(t.roots) == 0 {
		return nil, fmt.Errorf("no tree_roots")
	}
	return t, nil
}

// nextSet takes the next set of membership_values (up to a NaN).
func nextSet(vals []float64) (set, rest []float64, err error) {
	for i, v := range vals {
		if math.IsNaN(v) {
			return vals[:i:i], vals[i+1:], nil
		}
	}
	return nil, nil, fmt.Errorf("membership_values end before this node's set")
}
