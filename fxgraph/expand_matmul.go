package fxgraph

// UnexpandMatmul rewrites bmm(a, expand(w, [B, K, N])) into matmul(a, w)
// when the expand only adds or stretches leading dims of w (w is [K, N] or
// [1, K, N]). torch.export lowers a linear layer applied to a 3-D input this
// way (e.g. nn.MultiheadAttention's in-projection); lowered as written, the
// weight is first materialized B times over. aten.matmul broadcasts w
// instead, which XLA computes as one dot_general without the copy. It
// returns the number of rewrites; the graph's Meta must be set.
func (g *Graph) UnexpandMatmul() int {
	n := 0
	for _, bmm := range g.Nodes() {
		if bmm.graph != g || bmm.Opcode != CallFunction || bmm.Op != AtenBmm {
			continue
		}
		if g.unexpandOne(bmm) {
			n++
		}
	}
	if n > 0 {
		g.EliminateDeadCode()
	}
	return n
}

// skipNoopViews follows view/reshape nodes whose output shape equals their
// input's (torch.export writes view(expand(w), same shape) before bmm).
func skipNoopViews(n *Node) *Node {
	for n.Opcode == CallFunction && (n.Op == AtenView || n.Op == Aten_UnsafeView || n.Op == AtenReshape) {
		in, ok := n.Arg(0).(*Node)
		if !ok || len(in.Meta.Vals) != 1 || len(n.Meta.Vals) != 1 || !in.Val().Shape.Equal(n.Val().Shape) {
			return n
		}
		n = in
	}
	return n
}

// expandedWeight returns w when n is expand(w, ...) (possibly behind no-op
// views) that only adds or stretches size-1 leading dims of a tensor whose
// last two dims it keeps.
func expandedWeight(n *Node) *Node {
	n = skipNoopViews(n)
	if n.Opcode != CallFunction || n.Op != AtenExpand {
		return nil
	}
	w, ok := n.Arg(0).(*Node)
	if !ok || len(w.Meta.Vals) != 1 || len(n.Meta.Vals) != 1 {
		return nil
	}
	ws, es := w.Val().Shape, n.Val().Shape
	if len(ws) < 2 || len(es) != 3 || len(ws) > 3 {
		return nil
	}
	if ws[len(ws)-1] != es[2] || ws[len(ws)-2] != es[1] {
		return nil
	}
	if len(ws) == 3 && ws[0] != D(1) {
		return nil
	}
	return w
}

func (g *Graph) unexpandOne(bmm *Node) bool {
	a, ok := bmm.Arg(0).(*Node)
	if !ok {
		return false
	}
	e, ok := bmm.Arg(1).(*Node)
	if !ok {
		return false
	}
	w := expandedWeight(e)
	if w == nil {
		return false
	}
	prev := g.SetInsertPoint(bmm)
	defer g.SetInsertPoint(prev)
	mm := g.AddNamedCall(bmm.Name+"_matmul", AtenMatmul, []any{a, w}, nil)
	mm.Meta = cloneMeta(bmm.Meta)
	g.ReplaceAllUses(bmm, mm)
	return true
}
