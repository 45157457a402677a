package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// Inlining: a pipeline stitches the graphs of its steps into one graph,
// each step's placeholders replaced by the values that feed them, so that
// the whole pipeline lowers to one program (no host round trip between its
// steps). Inline copies a graph into another the way torch.fx's
// Graph.graph_copy does, then derives every copied node's Meta again from
// its new inputs: a step's shapes follow what feeds it.

// Inline copies sub's nodes into g, each placeholder of sub replaced by the
// node args gives for it (args[i] feeds sub's placeholder i), and returns the
// nodes of g that compute sub's outputs, in order. Copied nodes are named
// prefix + "_" + their name (made unique), constants and subgraphs keyed
// likewise; the shapes of the copies are derived again from their inputs,
// so sub's symbols give way to those of args. An arg must have its
// placeholder's dtype and rank, and its size where the placeholder's is
// static. sub itself is not changed. A graph whose sizes are decided at run
// time (deferred, with bounded outputs or guards) cannot be inlined.
func (g *Graph) Inline(sub *Graph, args []*Node, prefix string) ([]*Node, error) {
	if sub.IsDeferred() || len(sub.Bounded) > 0 || len(sub.Guards) > 0 {
		return nil, fmt.Errorf("fxgraph: inline %s: its output sizes are decided at run time (data-dependent sizes or guarded branches)", prefix)
	}
	ph := sub.Placeholders()
	if len(args) != len(ph) {
		return nil, fmt.Errorf("fxgraph: inline %s: %d values for %d inputs", prefix, len(args), len(ph))
	}
	m := make(map[*Node]*Node, sub.Len())
	for i, p := range ph {
		if err := checkInlineArg(p, args[i]); err != nil {
			return nil, fmt.Errorf("fxgraph: inline %s: %w", prefix, err)
		}
		m[p] = args[i]
	}
	g.addSymbolRanges(sub.SymbolRanges)
	for _, n := range sub.Nodes() {
		switch n.Opcode {
		case Placeholder, Output:
			continue
		case GetAttr:
			m[n] = g.inlineAttr(sub, n, prefix)
			continue
		}
		cn, err := g.inlineCall(n, prefix, m)
		if err != nil {
			return nil, fmt.Errorf("fxgraph: inline %s: node %s (%s): %w", prefix, n.Name, n.Target, err)
		}
		m[n] = cn
	}
	outs := sub.Outputs()
	res := make([]*Node, len(outs))
	for i, o := range outs {
		res[i] = m[o]
		if res[i] == nil {
			return nil, fmt.Errorf("fxgraph: inline %s: output %d (%s) is not computed", prefix, i, o.Name)
		}
	}
	return res, nil
}

// mapArgs returns n's args and kwargs with every node in them replaced by
// what swap gives for it.
func mapArgs(n *Node, swap func(*Node) any) ([]any, map[string]any) {
	args := make([]any, len(n.Args))
	for i, a := range n.Args {
		args[i] = mapNodes(a, swap)
	}
	var kw map[string]any
	if n.Kwargs != nil {
		kw = make(map[string]any, len(n.Kwargs))
		for k, v := range n.Kwargs {
			kw[k] = mapNodes(v, swap)
		}
	}
	return args, kw
}

// addSymbolRanges adds the ranges of symbols g does not bound yet.
func (g *Graph) addSymbolRanges(ranges map[string]SymbolRange) {
	for k, r := range ranges {
		if g.SymbolRanges == nil {
			g.SymbolRanges = map[string]SymbolRange{}
		}
		if _, ok := g.SymbolRanges[k]; !ok {
			g.SymbolRanges[k] = r
		}
	}
}

// inlineCall copies call node n into g, its inputs those m maps them to,
// and derives its Meta again.
func (g *Graph) inlineCall(n *Node, prefix string, m map[*Node]*Node) (*Node, error) {
	args, kw := mapArgs(n, func(x *Node) any { return m[x] })
	if n.Op == nil || n.Op.Shape == nil {
		return nil, fmt.Errorf("no shape rule")
	}
	cn := g.AddNamedCall(prefix+"_"+n.Name, n.Op, args, kw)
	meta, err := n.Op.Shape(cn)
	if err != nil {
		return nil, err
	}
	cn.Meta = meta
	return cn, nil
}

// inlineAttr copies get_attr node n of sub into g under a prefixed key.
func (g *Graph) inlineAttr(sub *Graph, n *Node, prefix string) *Node {
	if t, ok := sub.Attrs[n.Target]; ok {
		return g.AddConstant(prefix+"_"+n.Target, t)
	}
	if s, ok := sub.Subgraphs[n.Target]; ok {
		return g.AddSubgraph(prefix+"_"+n.Target, s.Clone())
	}
	return g.AddConstant(prefix+"_"+n.Target, tensor.New(tensor.Float32)) // unreachable in a valid graph
}

// checkInlineArg checks that value a may feed placeholder p.
func checkInlineArg(p, a *Node) error {
	want, got := p.Val(), a.Val()
	if a.Meta.Tuple || len(a.Meta.Vals) != 1 {
		return fmt.Errorf("input %q takes %s, a tuple", p.Target, a.Name)
	}
	if want.DType != got.DType {
		return fmt.Errorf("input %q is %s, but it is fed %s (%s)", p.Target, want, got, a.Name)
	}
	if len(want.Shape) != len(got.Shape) {
		return fmt.Errorf("input %q is %s (rank %d), but it is fed %s (%s, rank %d)", p.Target, want, want.Rank(), got, a.Name, got.Rank())
	}
	for d, w := range want.Shape {
		v := got.Shape[d]
		switch {
		case !w.IsStatic():
		case v.IsStatic() && v.Size != w.Size:
			return fmt.Errorf("input %q is %s, but it is fed %s (%s): dim %d differs", p.Target, want, got, a.Name, d)
		case !v.IsStatic():
			return fmt.Errorf("input %q is %s, but it is fed %s (%s): dim %d is %d there and %s here; give it that size where the pipeline's inputs are declared", p.Target, want, got, a.Name, d, w.Size, v)
		}
	}
	return nil
}
