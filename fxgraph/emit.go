package fxgraph

import (
	"fmt"
	"slices"
	"strings"
)

// ImportFoldElements is the largest value (in elements) that Emitter folds
// into a constant while a graph is imported. Larger values stay computations
// and fold, if at all, when a bucket is specialized (lower's
// Options.MaxFoldElements).
const ImportFoldElements = 1 << 16

// Emitter is how importers build a graph node by node: Emit adds a
// call_function node, computes its Meta at once (so that later conversions
// can read dtypes and shapes) and folds it into a constant when all its
// inputs are constants. Both importers use it, so an ONNX model and a .pt2
// of the same computation fold alike.
type Emitter struct {
	Graph *Graph
	IR    *Registry
	// MaxFoldElements bounds the values Emit folds; 0 means
	// ImportFoldElements and a negative value disables folding.
	MaxFoldElements int64
}

// Emit adds a call_function node of op with the requested name (made
// unique; "" derives it from the op) and returns the node standing for its
// result: the node itself, or the constant it folded into. An op outside
// the IR or a shape error leaves the graph unchanged.
func (e *Emitter) Emit(name string, op *Op, args []any, kwargs map[string]any) (*Node, error) {
	if !e.IR.Has(op) {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, op)
	}
	n := e.Graph.AddNamedCall(name, op, args, kwargs)
	if err := op.CheckArgs(n); err != nil {
		_ = e.Graph.Erase(n) // unused: it was just added
		return nil, err
	}
	m, err := op.Shape(n)
	if err != nil {
		_ = e.Graph.Erase(n) // unused: it was just added
		return nil, fmt.Errorf("shape of %s (%s): %w", n.Name, op.Name, err)
	}
	n.Meta = m
	return e.fold(n, op)
}

// fold replaces n by a constant when all its inputs are constant (or, for
// ShapeOnly ops, have static shapes), so that shape computations (Shape ->
// Gather -> Concat -> Reshape) resolve at import time whenever the shapes are
// static. An op that fails or declines to fold is left to the backend.
func (e *Emitter) fold(n *Node, info *Op) (*Node, error) {
	limit := e.MaxFoldElements
	if limit == 0 {
		limit = ImportFoldElements
	}
	g := e.Graph
	if limit < 0 || info.Eval == nil || n.Meta.Tuple || len(n.Meta.Vals) != 1 || !foldable(g, n, info, limit) {
		return n, nil
	}
	outs, err := info.Eval(n, g.ConstValue)
	if err != nil || len(outs) != 1 {
		return n, nil
	}
	t := outs[0]
	dims, _ := n.Val().Shape.Static()
	if t.DType != n.Val().DType || !slices.Equal(t.Shape, dims) {
		return nil, fmt.Errorf("fold %s (%s): got %s, meta says %s", n.Name, n.Target, t, n.Val())
	}
	k := g.AddConstant(foldedName(n), t)
	g.ReplaceAllUses(n, k)
	if err := g.Erase(n); err != nil {
		return nil, err
	}
	return k, nil
}

// foldedName names a folded constant: after its single non-scalar constant
// input and the op ("fc_weight_permute" for a transposed weight), else after
// the node.
func foldedName(n *Node) string {
	var src *Node
	for _, in := range n.InputNodes() {
		if in.Opcode == GetAttr && len(in.Val().Shape) > 0 {
			if src != nil {
				return n.Name + "_c"
			}
			src = in
		}
	}
	if src == nil {
		return n.Name + "_c"
	}
	op := n.Op.Name
	if parts := strings.Split(op, "."); len(parts) >= 2 {
		op = parts[1]
	}
	return src.Name + "_" + op
}
