package fx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
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
	c := &call{b: b, n: n, name: name, target: fxgraph.Cond.Name, op: fxgraph.Cond, outs: outs}
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
	c := &call{b: b, n: n, name: name, target: fxgraph.WhileLoop.Name, op: fxgraph.WhileLoop, outs: outs}
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
	sb := b.newSub(gr, fxgraph.New())
	return sb.convertSub(gr, func(i int, ref string, meta fxgraph.TensorMeta) (*fxgraph.Node, error) {
		return sb.g.AddPlaceholder(sanitize(ref), meta), nil
	})
}

// newSub returns a builder that converts gr into g.
func (b *builder) newSub(gr *graph, g *fxgraph.Graph) *builder {
	sb := &builder{a: b.a, model: b.model, entry: b.entry, ep: b.ep, gr: gr, ir: b.ir, g: g, env: map[string]any{}, uses: map[string]int{},
		aliasClass: map[string]string{}, aliases: map[string][]string{}, lastUse: map[string]int{},
		symSize: map[symKey]*fxgraph.Node{}, views: map[string]viewStep{}}
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
	return sb
}

// convertSub converts gr's nodes into sb.g, input i bound to the node
// input returns for it, and sets gr's outputs as the graph's.
func (sb *builder) convertSub(gr *graph, input func(i int, ref string, meta fxgraph.TensorMeta) (*fxgraph.Node, error)) (*fxgraph.Graph, error) {
	outs, err := sb.convertBody(gr, input)
	if err != nil {
		return nil, err
	}
	sb.g.SetOutput(outs...)
	sb.g.EliminateDeadCode()
	return sb.g, nil
}

// convertBody converts gr's nodes into sb.g, input i bound to the node
// input returns for it, and returns the nodes of gr's outputs.
func (sb *builder) convertBody(gr *graph, input func(i int, ref string, meta fxgraph.TensorMeta) (*fxgraph.Node, error)) ([]*fxgraph.Node, error) {
	for i, in := range gr.Inputs {
		refs := argRefs(in)
		if in.Kind != "as_tensor" || len(refs) != 1 {
			return nil, sb.errf("subgraph input %d is a %s; only tensors are supported", i, in.Kind)
		}
		meta, err := sb.inputMeta(refs[0])
		if err != nil {
			return nil, err
		}
		v, err := input(i, refs[0], meta)
		if err != nil {
			return nil, err
		}
		if err := sb.bindValue(refs[0], v); err != nil {
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
	return outs, nil
}

// convertMap converts torch.ops.higher_order.map_impl(body, xs, args) (as
// torch._higher_order_ops.map: body applied to each slice of the xs along
// their first axis, with args as they are, the results stacked) to the
// IR's while_loop over (i, stacked outputs...): each step takes slice i of
// the xs (index_select), converts the body on it and writes its outputs at
// slice i of the carried buffers. The xs must have a static first axis.
func (b *builder) convertMap(n *node, name string, outs []string) error {
	m, err := b.mapArgs(n, name)
	if err != nil {
		return err
	}
	condG := fxgraph.New()
	ci, _, _ := m.places(condG)
	ce := fxgraph.Emitter{Graph: condG, IR: b.ir}
	lt, err := ce.Emit("", fxgraph.AtenLtScalar, []any{ci, m.steps}, nil)
	if err != nil {
		return b.nodeErr(name, n.Target, ErrUnsupported, "%v", err)
	}
	condG.SetOutput(lt)
	bodyG, err := b.mapBody(m)
	if err != nil {
		return fmt.Errorf("%w (subgraph %s of node %s)", err, m.ga.Name, name)
	}
	carried := []any{b.g.AddConstant("map_start", tensor.Scalar(tensor.Int64, 0))}
	for k := range m.metas {
		dims, _ := m.stacked(k).Shape.Static()
		z, err := b.emit(fmt.Sprintf("%s_out%d", name, k), fxgraph.AtenFull, []any{intsAny(dims), 0.0}, map[string]any{"dtype": m.metas[k].DType})
		if err != nil {
			return err
		}
		carried = append(carried, z)
	}
	c := &call{b: b, n: n, name: name, target: fxgraph.WhileLoop.Name, op: fxgraph.WhileLoop, outs: outs}
	w, err := c.emit(name, fxgraph.WhileLoop, []any{b.g.AddSubgraph(m.ga.Name+"_cond", condG), b.g.AddSubgraph(m.ga.Name, bodyG), carried, m.inputs()}, nil)
	if err != nil {
		return err
	}
	for k := range m.metas {
		if k >= len(outs) || outs[k] == "" || b.uses[outs[k]] == 0 {
			continue
		}
		v, err := c.emit(outs[k], fxgraph.GetItem, []any{w, int64(1 + k)}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(k, v); err != nil {
			return err
		}
	}
	return nil
}

// mapCall is a map_impl being converted.
type mapCall struct {
	ga       graphArgument
	xs, args []any
	steps    int64                // the xs' first axis
	metas    []fxgraph.TensorMeta // the body's outputs, per slice
}

func (m *mapCall) inputs() []any { return append(append([]any{}, m.xs...), m.args...) }

// stacked is the type of output k, stacked over the steps.
func (m *mapCall) stacked(k int) fxgraph.TensorMeta {
	t := m.metas[k]
	t.Shape = append(fxgraph.Shape{fxgraph.D(m.steps)}, t.Shape...)
	return t
}

// places adds the loop's placeholders to g: (i, outputs...) carried, then
// (xs..., args...).
func (m *mapCall) places(g *fxgraph.Graph) (i *fxgraph.Node, bufs, extra []*fxgraph.Node) {
	i = g.AddPlaceholder("i", fxgraph.TensorMeta{DType: tensor.Int64})
	for k := range m.metas {
		bufs = append(bufs, g.AddPlaceholder(fmt.Sprintf("out%d", k), m.stacked(k)))
	}
	for k, v := range m.inputs() {
		extra = append(extra, g.AddPlaceholder(fmt.Sprintf("in%d", k), v.(*fxgraph.Node).Val()))
	}
	return i, bufs, extra
}

// mapArgs reads and checks map_impl's arguments and finds the body's
// output types by converting it on its own.
func (b *builder) mapArgs(n *node, name string) (*mapCall, error) {
	target := n.Target
	m := &mapCall{}
	if len(n.Inputs) != 3 || n.Inputs[0].Arg.Kind != "as_graph" {
		return nil, b.nodeErr(name, target, ErrFormat, "%d arguments, want body_graph, xs and pos_args", len(n.Inputs))
	}
	if err := n.Inputs[0].Arg.decode(&m.ga); err != nil {
		return nil, b.nodeErr(name, target, ErrFormat, "body_graph: %v", err)
	}
	var err error
	if m.xs, err = b.tensorList(n, name, 1); err != nil {
		return nil, err
	}
	if m.args, err = b.tensorList(n, name, 2); err != nil {
		return nil, err
	}
	if len(m.xs) == 0 || len(m.ga.Graph.Inputs) != len(m.xs)+len(m.args) {
		return nil, b.nodeErr(name, target, ErrFormat, "%d xs and %d pos_args for a body of %d inputs", len(m.xs), len(m.args), len(m.ga.Graph.Inputs))
	}
	m.steps = -1
	for _, x := range m.xs {
		d := x.(*fxgraph.Node).Val().Shape
		if len(d) == 0 || !d[0].IsStatic() || d[0].Size == 0 || m.steps >= 0 && d[0].Size != m.steps {
			return nil, b.nodeErr(name, target, ErrUnsupported, "map over %s: the xs need one static, non-empty first axis", x.(*fxgraph.Node).Val())
		}
		m.steps = d[0].Size
	}
	probe, err := b.subgraph(&m.ga.Graph)
	if err != nil {
		return nil, fmt.Errorf("%w (subgraph %s of node %s)", err, m.ga.Name, name)
	}
	for _, o := range probe.Outputs() {
		t := o.Val()
		if !t.Shape.IsStatic() {
			return nil, b.nodeErr(name, target, ErrUnsupported, "map body output %s: static shapes only", t)
		}
		m.metas = append(m.metas, t)
	}
	return m, nil
}

// mapBody returns the while_loop body: slice i of the xs, the map body on
// it, its outputs written at slice i of the buffers, i+1.
func (b *builder) mapBody(m *mapCall) (*fxgraph.Graph, error) {
	bodyG := fxgraph.New()
	bi, bufs, extra := m.places(bodyG)
	sb := b.newSub(&m.ga.Graph, bodyG)
	at, err := sb.emit("", fxgraph.AtenView, []any{bi, []any{int64(1)}}, nil)
	if err != nil {
		return nil, err
	}
	body, err := sb.convertSub(&m.ga.Graph, func(k int, _ string, _ fxgraph.TensorMeta) (*fxgraph.Node, error) {
		if k >= len(m.xs) {
			return extra[k], nil
		}
		sl, err := sb.emit("", fxgraph.AtenIndexSelect, []any{extra[k], int64(0), at}, nil)
		if err != nil {
			return nil, err
		}
		return sb.emit("", fxgraph.AtenSqueezeDim, []any{sl, int64(0)}, nil)
	})
	if err != nil {
		return nil, err
	}
	next, err := sb.emit("", fxgraph.AtenAddTensor, []any{bi, bodyG.AddConstant("one", tensor.Scalar(tensor.Int64, 1))}, nil)
	if err != nil {
		return nil, err
	}
	newOuts := []*fxgraph.Node{next}
	pos := tensor.New(tensor.Int64, m.steps)
	for k := range m.steps {
		pos.SetInt64(k, k)
	}
	posN := bodyG.AddConstant("positions", pos)
	for k, o := range body.Outputs() {
		upd, err := writeStep(sb, posN, bi, o, bufs[k])
		if err != nil {
			return nil, err
		}
		newOuts = append(newOuts, upd)
	}
	bodyG.SetOutput(newOuts...)
	bodyG.EliminateDeadCode()
	return bodyG, nil
}

// writeStep returns buf with slice i replaced by o: where(positions == i)
// over buf, positions shaped [steps, 1, ...].
func writeStep(sb *builder, positions, i, o, buf *fxgraph.Node) (*fxgraph.Node, error) {
	shape := make([]any, buf.Val().Rank())
	shape[0] = positions.Val().Shape[0].Size
	for d := 1; d < len(shape); d++ {
		shape[d] = int64(1)
	}
	p, err := sb.emit("", fxgraph.AtenView, []any{positions, shape}, nil)
	if err != nil {
		return nil, err
	}
	if p, err = sb.emit("", fxgraph.AtenEqTensor, []any{p, i}, nil); err != nil {
		return nil, err
	}
	row, err := sb.emit("", fxgraph.AtenUnsqueeze, []any{o, int64(0)}, nil)
	if err != nil {
		return nil, err
	}
	return sb.emit("", fxgraph.AtenWhereSelf, []any{p, row, buf}, nil)
}

func intsAny(v []int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}
