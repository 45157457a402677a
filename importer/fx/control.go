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
		if subs[i], err = b.graphArg(n, name, 1+i); err != nil {
			return err
		}
	}
	operands, err := b.tensorList(n, name, 3)
	if err != nil {
		return err
	}
	c := &call{b: b, n: n, name: name, target: fxgraph.Cond, outs: outs}
	res, err := c.emit(name, fxgraph.Cond, []any{pred, subs[0], subs[1], operands}, nil)
	if err != nil {
		return err
	}
	return c.bindResult(res)
}

// convertWhileLoop converts torch.ops.higher_order.while_loop(cond_fn,
// body_fn, carried_inputs, additional_inputs) to the IR's while_loop
// (fxgraph.WhileLoop), which has the same arguments.
func (b *builder) convertWhileLoop(n *node, name string, outs []string) error {
	if len(n.Inputs) != 4 {
		return b.nodeErr(name, n.Target, ErrFormat, "%d arguments, want cond_fn, body_fn, carried_inputs and additional_inputs", len(n.Inputs))
	}
	args := make([]any, 4)
	for i := range args {
		var err error
		if i < 2 {
			args[i], err = b.graphArg(n, name, i)
		} else {
			args[i], err = b.tensorList(n, name, i)
		}
		if err != nil {
			return err
		}
	}
	c := &call{b: b, n: n, name: name, target: fxgraph.WhileLoop, outs: outs}
	res, err := c.emit(name, fxgraph.WhileLoop, args, nil)
	if err != nil {
		return err
	}
	return c.bindResult(res)
}

// graphArg converts argument i of n, an "as_graph" subgraph, and returns
// the get_attr node of the IR subgraph.
func (b *builder) graphArg(n *node, name string, i int) (*fxgraph.Node, error) {
	a := n.Inputs[i].Arg
	var ga graphArgument
	if a.Kind != "as_graph" {
		return nil, b.nodeErr(name, n.Target, ErrFormat, "argument %d is a %s, want a graph", i, a.Kind)
	}
	if err := a.decode(&ga); err != nil {
		return nil, b.nodeErr(name, n.Target, ErrFormat, "argument %d: %v", i, err)
	}
	sg, err := b.subgraph(&ga.Graph)
	if err != nil {
		return nil, fmt.Errorf("%w (subgraph %s of node %s)", err, ga.Name, name)
	}
	return b.g.AddSubgraph(ga.Name, sg), nil
}

// tensorList returns the nodes of argument i of n, a list of tensors.
func (b *builder) tensorList(n *node, name string, i int) ([]any, error) {
	var out []any
	for _, ref := range argRefs(n.Inputs[i].Arg) {
		v, err := b.lookupTensor(ref)
		if err != nil {
			return nil, b.nodeErr(name, n.Target, ErrFormat, "%v", err)
		}
		out = append(out, v)
	}
	return out, nil
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
