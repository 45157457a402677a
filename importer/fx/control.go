package fx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
)

// graphArgument is an "as_graph" argument: a subgraph of a higher-order
// operator.
type graphArgument struct {
	Name  string `json:"name"`
	Graph graph  `json:"graph"`
}

// convertCond converts torch.ops.higher_order.cond(pred, true_fn,
// false_fn, operands) to the IR's cond (fxgraph.Cond), each branch a
// subgraph of its own whose placeholders take the operands.
func (b *builder) convertCond(n *node, name string, outs []string) error {
	target := n.Target
	if len(n.Inputs) != 4 {
		return b.nodeErr(name, target, ErrFormat, "%d arguments, want pred, true_fn, false_fn and operands", len(n.Inputs))
	}
	refs := argRefs(n.Inputs[0].Arg)
	if n.Inputs[0].Arg.Kind != "as_tensor" || len(refs) != 1 {
		return b.nodeErr(name, target, ErrUnsupported, "pred is a %s; only a tensor predicate is supported", n.Inputs[0].Arg.Kind)
	}
	pred, err := b.lookupTensor(refs[0])
	if err != nil {
		return b.nodeErr(name, target, ErrFormat, "%v", err)
	}
	var subs [2]*fxgraph.Node
	for i := range subs {
		a := n.Inputs[1+i].Arg
		var ga graphArgument
		if a.Kind != "as_graph" {
			return b.nodeErr(name, target, ErrFormat, "argument %d is a %s, want a graph", 1+i, a.Kind)
		}
		if err := a.decode(&ga); err != nil {
			return b.nodeErr(name, target, ErrFormat, "argument %d: %v", 1+i, err)
		}
		sg, err := b.subgraph(&ga.Graph)
		if err != nil {
			return fmt.Errorf("%w (branch %s of node %s)", err, ga.Name, name)
		}
		subs[i] = b.g.AddSubgraph(ga.Name, sg)
	}
	var operands []any
	for _, ref := range argRefs(n.Inputs[3].Arg) {
		v, err := b.lookupTensor(ref)
		if err != nil {
			return b.nodeErr(name, target, ErrFormat, "%v", err)
		}
		operands = append(operands, v)
	}
	c := &call{b: b, n: n, name: name, target: fxgraph.Cond, outs: outs}
	res, err := c.emit(name, fxgraph.Cond, []any{pred, subs[0], subs[1], operands}, nil)
	if err != nil {
		return err
	}
	return c.bindResult(res)
}

// subgraph converts gr, a subgraph of a higher-order operator, into a
// graph of its own: a placeholder per input, gr's outputs as its outputs.
func (b *builder) subgraph(gr *graph) (*fxgraph.Graph, error) {
	sb := &builder{a: b.a, model: b.model, entry: b.entry, ep: b.ep, gr: gr, ir: b.ir, g: fxgraph.New(), env: map[string]any{}, uses: map[string]int{},
		aliasClass: map[string]string{}, aliases: map[string][]string{}, lastUse: map[string]int{},
		symSize: map[symKey]*fxgraph.Node{}}
	for i := range gr.Nodes {
		for _, in := range gr.Nodes[i].Inputs {
			for _, name := range argRefs(in.Arg) {
				sb.uses[name]++
				sb.lastUse[name] = i
			}
		}
	}
	for _, o := range gr.Outputs {
		for _, name := range argRefs(o) {
			sb.uses[name]++
			sb.lastUse[name] = len(gr.Nodes)
		}
	}
	sb.reserveNames()
	for i, in := range gr.Inputs {
		refs := argRefs(in)
		if in.Kind != "as_tensor" || len(refs) != 1 {
			return nil, sb.errf("subgraph input %d is a %s; only tensors are supported", i, in.Kind)
		}
		meta, err := sb.inputMeta(refs[0])
		if err != nil {
			return nil, err
		}
		if err := sb.bindValue(refs[0], sb.g.AddPlaceholder(sanitize(refs[0]), meta)); err != nil {
			return nil, err
		}
	}
	for i := range gr.Nodes {
		sb.node = i
		if err := sb.convertNode(&gr.Nodes[i]); err != nil {
			return nil, err
		}
	}
	var outs []*fxgraph.Node
	for i, o := range gr.Outputs {
		refs := argRefs(o)
		if o.Kind != "as_tensor" || len(refs) != 1 {
			return nil, sb.errf("subgraph output %d is a %s; only tensors are supported", i, o.Kind)
		}
		n, err := sb.lookupTensor(refs[0])
		if err != nil {
			return nil, err
		}
		outs = append(outs, n)
	}
	sb.g.SetOutput(outs...)
	sb.g.EliminateDeadCode()
	return sb.g, nil
}
