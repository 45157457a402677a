package fx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
)

// Wrapping higher-order operators: torch.export keeps a region run under a
// context manager (torch.no_grad(), torch.autocast(enabled=False)) as a
// subgraph called through torch.ops.higher_order.wrap_with_set_grad_enabled
// or wrap_with_autocast. Gradient mode does not change what inference
// computes, and a disabled autocast changes nothing, so the subgraph's nodes
// are converted in place, into the calling graph, on the call's operands.
// Hugging Face's rotary embeddings (Llama, Mistral, Qwen2, ...) are
// exported this way.

// wrapTargets gives, per wrapping operator, the position of its subgraph
// argument; the operands follow it.
var wrapTargets = map[string]int{
	"torch.ops.higher_order.wrap_with_set_grad_enabled": 1, // (enabled, body, *args)
	"torch.ops.higher_order.wrap_with_autocast":         4, // (device_type, dtype, enabled, cache_enabled, body, *args)
}

// convertWrap inlines the subgraph of a wrapping operator (wrapTargets).
func (b *builder) convertWrap(n *node, name string, outs []string) error {
	target := n.Target
	at := wrapTargets[target]
	if len(n.Inputs) <= at || n.Inputs[at].Arg.Kind != "as_graph" {
		return b.nodeErr(name, target, ErrFormat, "%d arguments, want the subgraph at argument %d", len(n.Inputs), at)
	}
	if target == "torch.ops.higher_order.wrap_with_autocast" {
		var enabled bool
		if a := n.Inputs[2].Arg; a.Kind != "as_bool" || a.decode(&enabled) != nil || enabled {
			return b.nodeErr(name, target, ErrUnsupported, "an enabled autocast region (mixed precision chosen at run time by torch) is not supported; export with autocast disabled or cast the model")
		}
	}
	var ga graphArgument
	if err := n.Inputs[at].Arg.decode(&ga); err != nil {
		return b.nodeErr(name, target, ErrFormat, "subgraph: %v", err)
	}
	var operands []any
	for i := at + 1; i < len(n.Inputs); i++ {
		refs := argRefs(n.Inputs[i].Arg)
		if n.Inputs[i].Arg.Kind != "as_tensor" || len(refs) != 1 {
			return b.nodeErr(name, target, ErrUnsupported, "operand %d is a %s; only tensors are supported", i-at-1, n.Inputs[i].Arg.Kind)
		}
		v, err := b.lookupTensor(refs[0])
		if err != nil {
			return b.nodeErr(name, target, ErrFormat, "%v", err)
		}
		operands = append(operands, v)
	}
	if len(operands) != len(ga.Graph.Inputs) {
		return b.nodeErr(name, target, ErrFormat, "%d operands for a subgraph of %d inputs", len(operands), len(ga.Graph.Inputs))
	}
	if err := b.nestErr(); err != nil {
		return err
	}
	sb := b.newSub(&ga.Graph, b.g)
	res, err := sb.convertBody(&ga.Graph, func(i int, _ string, meta fxgraph.TensorMeta) (*fxgraph.Node, error) {
		v := operands[i].(*fxgraph.Node)
		if got := v.Val(); got.DType != meta.DType || got.Rank() != meta.Rank() {
			return nil, fmt.Errorf("fx: operand %d of %s is %s, its subgraph input wants %s", i, name, got, meta)
		}
		return v, nil
	})
	if err != nil {
		return fmt.Errorf("%w (subgraph %s of node %s, inlined)", err, ga.Name, name)
	}
	c := &call{b: b, n: n, name: name, target: target, outs: outs}
	for k, v := range res {
		if k >= len(outs) || outs[k] == "" {
			continue
		}
		if err := c.bind(k, v); err != nil {
			return err
		}
	}
	return nil
}
