package fxgraph

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// Host stages. XLA has no strings, so the nodes of a graph that read or
// produce string tensors (or whose op is marked Host) run on the host,
// around the program: SplitHost cuts a graph into the host nodes that
// compute the program's inputs from the model's (pre), the device graph
// that is lowered and compiled, and the host nodes that compute the
// model's outputs from the program's results (post). Host nodes are
// evaluated one at a time by their ops' Eval functions; an op that moves
// elements (view, cat, index_select, where, ...) evaluates string tensors
// through int64 stand-ins numbering their elements. A graph whose host
// nodes would need device results that themselves need host results again
// (host, device, host, device) is refused. docs/ONNX-ML.md describes the
// cut.

// ErrHostNode is wrapped by the errors of host nodes at run time (text
// that is no number, ...): errors of the data, not of the graph.
var ErrHostNode = errors.New("fxgraph: host node")

// isHostNode reports whether call_function node n runs on the host.
func isHostNode(n *Node) bool {
	if n.Opcode != CallFunction {
		return false
	}
	if n.Op.Host {
		return true
	}
	if n.Op == GetItem {
		// an element of a host op's tuple (boxes and their scores) is
		// the host's too
		if src, err := n.InputNode(0); err == nil && isHostNode(src) {
			return true
		}
	}
	for _, v := range n.Meta.Vals {
		if v.DType == tensor.String {
			return true
		}
	}
	for _, in := range n.InputNodes() {
		for _, v := range in.Meta.Vals {
			if v.DType == tensor.String {
				return true
			}
		}
	}
	return false
}

// HostSplit is a graph cut into host and device parts (see SplitHost).
type HostSplit struct {
	// Model is the whole graph, whose placeholders and outputs are the
	// model's.
	Model *Graph
	// Device is the graph lowered to the program: its placeholders are
	// model inputs and values the pre nodes computed, its outputs model
	// outputs and values the post nodes read. It is nil when every node
	// runs on the host.
	Device *Graph
	// Pre and Post are the host nodes of Model run before and after the
	// program, in graph order.
	Pre, Post []*Node
	// DeviceIn[i] is the Model node whose value Device's placeholder i
	// takes; DeviceOut[i] the Model node Device's output i computes.
	DeviceIn, DeviceOut []*Node
}

// SplitHost cuts g into host and device parts. It returns nil when no node
// of g runs on the host: g is lowered as it is.
func SplitHost(g *Graph) (*HostSplit, error) {
	host := map[*Node]bool{}
	for _, n := range g.Nodes() {
		if isHostNode(n) {
			host[n] = true
		}
	}
	if len(host) == 0 {
		return nil, nil
	}
	if g.IsDeferred() || len(g.Bounded) > 0 || len(g.Guards) > 0 {
		return nil, fmt.Errorf("fxgraph: a graph with string values cannot also have data-dependent sizes or guarded branches")
	}
	s := &HostSplit{Model: g}
	if err := s.stages(host); err != nil {
		return nil, err
	}
	b := &deviceBuilder{s: s, host: host, m: map[*Node]*Node{}}
	if err := b.build(); err != nil {
		return nil, err
	}
	return s, nil
}

// stages sorts the host nodes into Pre (computed from the model's inputs
// only) and Post (reading device results), refusing a device node that
// reads a Post node.
func (s *HostSplit) stages(host map[*Node]bool) error {
	after := map[*Node]bool{} // n is a device node, or depends on one
	for _, n := range s.Model.Nodes() {
		if n.Opcode != CallFunction {
			continue
		}
		dev := !host[n]
		for _, in := range n.InputNodes() {
			if !after[in] {
				continue
			}
			if host[in] && dev {
				return fmt.Errorf("fxgraph: node %s (%s) computes on the device from %s, a string value computed from device results: "+
					"xserve runs string operators only before and after the XLA program", n.Name, n.Target, in.Name)
			}
			dev = true
		}
		after[n] = dev
		switch {
		case host[n] && dev:
			s.Post = append(s.Post, n)
		case host[n]:
			s.Pre = append(s.Pre, n)
		}
	}
	return nil
}

// deviceBuilder makes the device graph: a copy of the model graph's device
// nodes, values crossing from the host (and model inputs) becoming
// placeholders.
type deviceBuilder struct {
	s    *HostSplit
	host map[*Node]bool
	dg   *Graph
	m    map[*Node]*Node // model node -> device graph node
	err  error
}

func (b *deviceBuilder) build() error {
	g := b.s.Model
	var devNodes []*Node
	for _, n := range g.Nodes() {
		if n.Opcode == CallFunction && !b.host[n] {
			devNodes = append(devNodes, n)
		}
	}
	if len(devNodes) == 0 {
		return nil
	}
	b.dg = New()
	b.dg.SymbolRanges = g.SymbolRanges
	swap := func(x *Node) any { return b.lookup(x) }
	for _, n := range devNodes {
		cn := &Node{Opcode: n.Opcode, Op: n.Op, Name: n.Name, Target: n.Target, Meta: cloneMeta(n.Meta)}
		for _, a := range n.Args {
			cn.Args = append(cn.Args, mapNodes(a, swap))
		}
		if n.Kwargs != nil {
			cn.Kwargs = map[string]any{}
			for k, v := range n.Kwargs {
				cn.Kwargs[k] = mapNodes(v, swap)
			}
		}
		if b.err != nil {
			return b.err
		}
		b.m[n] = b.dg.insert(cn)
	}
	b.outputs()
	b.dg.EliminateDeadCode()
	b.s.Device = b.dg
	return b.dg.Validate()
}

// lookup returns the device graph's node for model node in, adding a
// constant, a subgraph or a placeholder on first use.
func (b *deviceBuilder) lookup(in *Node) *Node {
	if d, ok := b.m[in]; ok {
		return d
	}
	g, dg := b.s.Model, b.dg
	switch {
	case in.Opcode == GetAttr:
		if t, ok := g.Attrs[in.Target]; ok {
			b.m[in] = dg.AddConstant(in.Name, t)
		} else if sub, ok := g.Subgraphs[in.Target]; ok {
			b.m[in] = dg.AddSubgraph(in.Target, sub)
		}
	case in.Opcode == Placeholder || b.host[in]:
		if in.Meta.Tuple || in.Val().DType == tensor.String {
			b.err = fmt.Errorf("fxgraph: node %s takes %s, a string value, on the device", in.Name, in.Meta)
			return in
		}
		p := dg.AddPlaceholder(in.Name, freshDims(in.Val(), in.Name))
		p.Target = in.Target
		if in.Opcode != Placeholder {
			p.Target = in.Name
		}
		b.s.DeviceIn = append(b.s.DeviceIn, in)
		b.m[in] = p
	}
	return b.m[in]
}

// outputs sets the device graph's outputs: the model's outputs computed on
// the device, then the device values the post stage reads.
func (b *deviceBuilder) outputs() {
	var outs []*Node
	needed := map[*Node]bool{}
	add := func(n *Node) {
		if d, ok := b.m[n]; ok && n.Opcode == CallFunction && !b.host[n] && !needed[n] {
			needed[n] = true
			outs = append(outs, d)
			b.s.DeviceOut = append(b.s.DeviceOut, n)
			b.dg.OutputNames = append(b.dg.OutputNames, n.Name)
		}
	}
	for _, o := range b.s.Model.Outputs() {
		add(o)
	}
	for _, n := range b.s.Post {
		for _, in := range n.InputNodes() {
			add(in)
		}
	}
	b.dg.SetOutput(outs...)
}

// freshDims replaces the unknown dims of m (sizes host operators compute
// from data) by symbols named after the value.
func freshDims(m TensorMeta, name string) TensorMeta {
	out := TensorMeta{DType: m.DType, Shape: m.Shape.Clone()}
	for i, d := range out.Shape {
		if d == Unknown {
			out.Shape[i] = S(fmt.Sprintf("%s_dim%d", name, i))
		}
	}
	return out
}

// DeviceFunc runs the device graph: its inputs in placeholder order, its
// results in output order.
type DeviceFunc func(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error)

// Run computes the model's outputs from its inputs (in placeholder order):
// the pre nodes on the host, the device graph by device, the post nodes on
// the host.
func (s *HostSplit) Run(ctx context.Context, inputs []*tensor.Tensor, device DeviceFunc) ([]*tensor.Tensor, error) {
	g := s.Model
	ph := g.Placeholders()
	if len(inputs) != len(ph) {
		return nil, fmt.Errorf("fxgraph: %d inputs for %d placeholders", len(inputs), len(ph))
	}
	env := map[*Node][]*tensor.Tensor{}
	for i, p := range ph {
		env[p] = []*tensor.Tensor{inputs[i]}
	}
	if err := s.runHost(ctx, s.Pre, env); err != nil {
		return nil, err
	}
	if s.Device != nil {
		dev := make([]*tensor.Tensor, len(s.DeviceIn))
		for i, n := range s.DeviceIn {
			t, err := s.value(env, n)
			if err != nil {
				return nil, err
			}
			dev[i] = t
		}
		outs, err := device(ctx, dev)
		if err != nil {
			return nil, err
		}
		if len(outs) != len(s.DeviceOut) {
			return nil, fmt.Errorf("fxgraph: the device graph gave %d results, want %d", len(outs), len(s.DeviceOut))
		}
		for i, n := range s.DeviceOut {
			env[n] = []*tensor.Tensor{outs[i]}
		}
	}
	if err := s.runHost(ctx, s.Post, env); err != nil {
		return nil, err
	}
	var res []*tensor.Tensor
	for _, o := range g.Outputs() {
		t, err := s.value(env, o)
		if err != nil {
			return nil, err
		}
		res = append(res, t)
	}
	return res, nil
}

// value is node n's (single) value in env, or its constant.
func (s *HostSplit) value(env map[*Node][]*tensor.Tensor, n *Node) (*tensor.Tensor, error) {
	if vs, ok := env[n]; ok && len(vs) == 1 {
		return vs[0], nil
	}
	if t := s.Model.ConstValue(n); t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("fxgraph: no value for %s (%s) on the host", n.Name, n.Meta)
}

func (s *HostSplit) runHost(ctx context.Context, ns []*Node, env map[*Node][]*tensor.Tensor) error {
	for _, n := range ns {
		if err := ctx.Err(); err != nil {
			return err
		}
		if n.Op == GetItem {
			src, err := n.InputNode(0)
			if err != nil {
				return err
			}
			i, _ := AsInt(n.Arg(1))
			vs := env[src]
			if i < 0 || int(i) >= len(vs) {
				return fmt.Errorf("fxgraph: getitem %d of %s: no such value", i, src.Name)
			}
			env[n] = []*tensor.Tensor{vs[i]}
			continue
		}
		var ins []*tensor.Tensor
		for _, in := range n.InputNodes() {
			t, err := s.value(env, in)
			if err != nil {
				return err
			}
			ins = append(ins, t)
		}
		outs, err := EvalOnHost(n, ins)
		if err != nil {
			return fmt.Errorf("%w %s (%s): %w", ErrHostNode, n.Name, n.Target, err)
		}
		env[n] = outs
	}
	return nil
}

// EvalOnHost computes call_function node n on the host from the values of
// its input nodes (n.InputNodes() order). Ops marked Host evaluate
// themselves; other ops evaluate string inputs through int64 stand-ins
// (each element's number in a pool of all string inputs' elements) and
// turn their int64 results back into strings where n produces strings.
func EvalOnHost(n *Node, ins []*tensor.Tensor) ([]*tensor.Tensor, error) {
	op := n.Op
	if op == nil || op.Eval == nil {
		return nil, fmt.Errorf("%w: %s cannot be evaluated on the host", ErrUnsupported, n.Target)
	}
	scratch := New()
	var pool [][]byte
	m := map[*Node]*Node{}
	for i, in := range n.InputNodes() {
		t := ins[i]
		if t.DType == tensor.String && !op.Host {
			t, pool = standIn(t, pool)
		}
		m[in] = scratch.AddConstant(in.Name, t)
	}
	args, kw := remapArgs(n, m)
	cn := scratch.AddNamedCall(n.Name, op, args, kw)
	meta, err := op.Shape(cn)
	if err != nil {
		return nil, err
	}
	cn.Meta = meta
	outs, err := op.Eval(cn, scratch.ConstValue)
	if err != nil {
		return nil, err
	}
	for i, o := range outs {
		if i < len(n.Meta.Vals) && n.Meta.Vals[i].DType == tensor.String && o.DType != tensor.String {
			if outs[i], err = fromStandIn(o, pool); err != nil {
				return nil, err
			}
		}
	}
	return outs, nil
}

// remapArgs returns n's args and kwargs with their nodes replaced by m's.
func remapArgs(n *Node, m map[*Node]*Node) ([]any, map[string]any) {
	swap := func(x *Node) any { return m[x] }
	args := make([]any, len(n.Args))
	for i, a := range n.Args {
		args[i] = mapNodes(a, swap)
	}
	if n.Kwargs == nil {
		return args, nil
	}
	kw := map[string]any{}
	for k, v := range n.Kwargs {
		kw[k] = mapNodes(v, swap)
	}
	return args, kw
}

// standIn returns an int64 tensor numbering t's elements after those
// already in pool, and the pool with t's strings appended.
func standIn(t *tensor.Tensor, pool [][]byte) (*tensor.Tensor, [][]byte) {
	n := t.NumElements()
	out := tensor.New(tensor.Int64, t.Shape...)
	base := int64(len(pool))
	for i := range n {
		out.SetInt64(i, base+i)
	}
	return out, append(pool, t.Strings...)
}

// fromStandIn maps the element numbers of t back to their strings.
func fromStandIn(t *tensor.Tensor, pool [][]byte) (*tensor.Tensor, error) {
	out := tensor.New(tensor.String, t.Shape...)
	for i := range t.NumElements() {
		k := t.Int64At(i)
		if k < 0 || k >= int64(len(pool)) {
			return nil, fmt.Errorf("a string element from outside its inputs (%d of %d)", k, len(pool))
		}
		out.Strings[i] = pool[k]
	}
	return out, nil
}

// Describe lists the split for `xserve inspect`: which nodes run where.
func (s *HostSplit) Describe() string {
	var b strings.Builder
	names := func(ns []*Node) string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Name+" ("+n.Target+")")
		}
		return strings.Join(out, ", ")
	}
	fmt.Fprintf(&b, "host before the program: %s\n", names(s.Pre))
	if s.Device == nil {
		b.WriteString("no device program: every node runs on the host\n")
	} else {
		fmt.Fprintf(&b, "device program: %d inputs, %d outputs\n", len(s.DeviceIn), len(s.DeviceOut))
	}
	fmt.Fprintf(&b, "host after the program: %s\n", names(s.Post))
	return b.String()
}
