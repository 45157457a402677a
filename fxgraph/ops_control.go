package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// subgraphFoldElements bounds what shape propagation folds inside a
// subgraph: enough for the shape computations that specializing a bucket
// resolves there.
const subgraphFoldElements = 1 << 14

// registerControlFlow registers the higher-order operators cond and
// while_loop.
func registerControlFlow(r *Registry) {
	r.define(Cond, r.condShape, nil)
	r.define(WhileLoop, r.whileShape, nil)
}

func (r *Registry) whileShape(n *Node) (Meta, error) {
	carried, err := n.ListNodes(2)
	if err != nil {
		return Meta{}, err
	}
	extra, err := n.ListNodes(3)
	if err != nil {
		return Meta{}, err
	}
	ops := append(append([]*Node(nil), carried...), extra...)
	condG, err := n.Subgraph(0)
	if err != nil {
		return Meta{}, err
	}
	bodyG, err := n.Subgraph(1)
	if err != nil {
		return Meta{}, err
	}
	c, err := r.SpecializeSubgraph(condG, ops)
	if err != nil {
		return Meta{}, fmt.Errorf("while_loop: cond_graph: %w", err)
	}
	if len(c) != 1 || c[0].DType != tensor.Bool || (c[0].Shape.IsStatic() && tensorElems(c[0]) != 1) {
		return Meta{}, fmt.Errorf("while_loop: cond_graph returns %v, want one bool tensor of one element", c)
	}
	b, err := r.SpecializeSubgraph(bodyG, ops)
	if err != nil {
		return Meta{}, fmt.Errorf("while_loop: body_graph: %w", err)
	}
	if len(b) != len(carried) {
		return Meta{}, fmt.Errorf("while_loop: body_graph returns %d values for %d carried values", len(b), len(carried))
	}
	out := Meta{Tuple: true}
	for i, cv := range carried {
		m := cv.Val()
		if b[i].DType != m.DType || !b[i].Shape.Equal(m.Shape) {
			return Meta{}, fmt.Errorf("while_loop: carried value %d is %s, the body returns %s (they must agree)", i, m, b[i])
		}
		out.Vals = append(out.Vals, TensorMeta{DType: m.DType, Shape: m.Shape.Clone()})
	}
	return out, nil
}

func tensorElems(m TensorMeta) int64 {
	dims, _ := m.Shape.Static()
	return tensor.NumElements(dims)
}

// Subgraph returns the subgraph that argument i of n (a get_attr node)
// reads.
func (n *Node) Subgraph(i int) (*Graph, error) {
	a, ok := n.Arg(i).(*Node)
	if !ok || a.Opcode != GetAttr || a.graph == nil {
		return nil, fmt.Errorf("node %s (%s): argument %d is %s, want a subgraph", n.Name, n.Target, i, FormatArg(n.Arg(i)))
	}
	sub := a.graph.Subgraphs[a.Target]
	if sub == nil {
		return nil, fmt.Errorf("node %s (%s): argument %d (%s) is not a subgraph", n.Name, n.Target, i, a.Name)
	}
	return sub, nil
}

// ListNodes returns the nodes of list argument i of n.
func (n *Node) ListNodes(i int) ([]*Node, error) {
	items, ok := n.Arg(i).([]any)
	if !ok && n.Arg(i) != nil {
		return nil, fmt.Errorf("node %s (%s): argument %d is %s, want a list of tensors", n.Name, n.Target, i, FormatArg(n.Arg(i)))
	}
	out := make([]*Node, len(items))
	for j, it := range items {
		m, ok := it.(*Node)
		if !ok {
			return nil, fmt.Errorf("node %s (%s): argument %d element %d is %s, want a tensor", n.Name, n.Target, i, j, FormatArg(it))
		}
		out[j] = m
	}
	return out, nil
}

func (r *Registry) condShape(n *Node) (Meta, error) {
	pred, err := n.InputNode(0)
	if err != nil {
		return Meta{}, err
	}
	pm := pred.Val()
	if pm.DType != tensor.Bool {
		return Meta{}, fmt.Errorf("cond: pred is %s, want a bool tensor of one element", pm)
	}
	if dims, ok := pm.Shape.Static(); ok && tensor.NumElements(dims) != 1 {
		return Meta{}, fmt.Errorf("cond: pred is %s, want a bool tensor of one element", pm)
	}
	ops, err := n.ListNodes(3)
	if err != nil {
		return Meta{}, err
	}
	var outs [2][]TensorMeta
	for b := range 2 {
		sub, err := n.Subgraph(1 + b)
		if err != nil {
			return Meta{}, err
		}
		if outs[b], err = r.SpecializeSubgraph(sub, ops); err != nil {
			return Meta{}, fmt.Errorf("cond: branch %d: %w", b, err)
		}
	}
	if len(outs[0]) != len(outs[1]) {
		return Meta{}, fmt.Errorf("cond: the true branch returns %d values, the false branch %d", len(outs[0]), len(outs[1]))
	}
	for i := range outs[0] {
		a, b := outs[0][i], outs[1][i]
		if a.DType != b.DType || !a.Shape.Equal(b.Shape) {
			return Meta{}, fmt.Errorf("cond: output %d is %s in the true branch and %s in the false branch (they must agree)", i, a, b)
		}
	}
	return Meta{Vals: outs[0], Tuple: true}, nil
}

// SpecializeSubgraph gives the placeholders of sub the metas of operands
// (in order), propagates shapes through sub and folds what became constant
// there, and returns the metas of sub's outputs. The lowering of a
// higher-order op finds sub specialized to its operands' shapes.
func (r *Registry) SpecializeSubgraph(sub *Graph, operands []*Node) ([]TensorMeta, error) {
	ph := sub.Placeholders()
	if len(ph) != len(operands) {
		return nil, fmt.Errorf("subgraph takes %d inputs, given %d operands", len(ph), len(operands))
	}
	for i, p := range ph {
		m := operands[i].Val()
		p.Meta = Meta{Vals: []TensorMeta{{DType: m.DType, Shape: m.Shape.Clone()}}}
	}
	for round := 0; ; round++ {
		if err := r.PropagateShapes(sub); err != nil {
			return nil, err
		}
		folded, err := r.FoldConstants(sub, subgraphFoldElements)
		if err != nil {
			return nil, err
		}
		if folded == 0 || round >= 64 {
			break
		}
	}
	outs := sub.Outputs()
	metas := make([]TensorMeta, len(outs))
	for i, o := range outs {
		metas[i] = o.Val()
	}
	return metas, nil
}
