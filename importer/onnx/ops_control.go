package onnx

import (
	"fmt"
	"maps"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerControlFlow registers the converter of If. Loop, Scan and a
// general If need StableHLO while/case, which go-xla's builder lacks.
func registerControlFlow(cs converters) {
	cs.add("If", convertIf)
}

// convertIf converts If by inlining its branches, which XLA's static
// programs allow in two cases:
//   - a condition known at import (a constant, or computed from constants
//     and shapes): only the branch it selects is inlined;
//   - a condition known only at run time, with branches whose outputs agree
//     in dtype and shape: both branches are inlined and each output is
//     where(cond, then, else). Branches are side-effect free, so computing
//     both is correct; it costs the work of both.
//
// Branches with outputs of different shapes under a run-time condition are
// unsupported, with an error naming the output.
func convertIf(c *Ctx, _ *Node) error {
	cond, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(cond)
	if dims, ok := m.Shape.Static(); m.DType != tensor.Bool || !ok || tensor.NumElements(dims) != 1 {
		return fmt.Errorf("If: cond is %s, want a bool tensor with one element", m)
	}
	var branches [2]*Graph
	for i, name := range []string{"then_branch", "else_branch"} {
		a := c.Attr(name)
		if a == nil || a.Type != AttrGraph || a.G == nil {
			return fmt.Errorf("If: attribute %s (a graph) is required", name)
		}
		branches[i] = a.G
	}
	if t := c.Graph().ConstValue(cond); t != nil {
		taken := branches[1]
		if t.Data[0] != 0 {
			taken = branches[0]
		}
		outs, err := c.s.inlineBranch(taken)
		if err != nil {
			return err
		}
		return bindIfOutputs(c, outs)
	}
	thenOuts, err := c.s.inlineBranch(branches[0])
	if err != nil {
		return err
	}
	elseOuts, err := c.s.inlineBranch(branches[1])
	if err != nil {
		return err
	}
	if len(thenOuts) != len(elseOuts) {
		return fmt.Errorf("If: then_branch has %d outputs, else_branch %d", len(thenOuts), len(elseOuts))
	}
	scalar, err := c.Emit("aten.view.default", cond, ints(nil))
	if err != nil {
		return err
	}
	outs := make([]*fxgraph.Node, len(thenOuts))
	for i := range thenOuts {
		tm, em := Meta(thenOuts[i]), Meta(elseOuts[i])
		if tm.DType != em.DType || !tm.Shape.Equal(em.Shape) {
			return Unsupported("If with a run-time condition whose branches give output %d as %s and %s (both branches are computed and selected, so they must agree)", i, tm, em)
		}
		if outs[i], err = c.Emit("aten.where.self", scalar, thenOuts[i], elseOuts[i]); err != nil {
			return err
		}
	}
	return bindIfOutputs(c, outs)
}

func bindIfOutputs(c *Ctx, outs []*fxgraph.Node) error {
	if n := len(c.node.Outputs); n > len(outs) {
		return fmt.Errorf("If: %d outputs, the branches give %d", n, len(outs))
	}
	for i, o := range outs {
		if c.HasOutput(i) {
			c.SetOutput(i, o)
		}
	}
	return nil
}

// inlineBranch converts the nodes of an If branch into s's graph and
// returns the branch's outputs. The branch sees every value of s by name
// (ONNX subgraphs are lexically scoped); its own names stay inside it.
func (s *scope) inlineBranch(gr *Graph) ([]*fxgraph.Node, error) {
	if s.depth > 32 {
		return nil, fmt.Errorf("onnx: subgraph %q nested too deep", gr.Name)
	}
	if len(gr.Inputs) > 0 {
		return nil, fmt.Errorf("onnx: If branch %q has %d inputs, want none", gr.Name, len(gr.Inputs))
	}
	inner := &scope{im: s.im, g: s.g, opsets: s.opsets, funcs: s.funcs, env: maps.Clone(s.env), depth: s.depth + 1, values: s.values}
	for _, in := range gr.Initializers {
		inner.env[in.Name] = s.g.AddConstant(sanitize(in.Name), in.Tensor)
	}
	for i, node := range gr.Nodes {
		if err := inner.convertNode(node); err != nil {
			return nil, fmt.Errorf("%w (subgraph %q, node %d)", err, gr.Name, i)
		}
	}
	outs := make([]*fxgraph.Node, len(gr.Outputs))
	for i, vi := range gr.Outputs {
		n, ok := inner.env[vi.Name]
		if !ok {
			return nil, fmt.Errorf("onnx: subgraph %q: output %q is not produced by any node", gr.Name, vi.Name)
		}
		outs[i] = n
	}
	return outs, nil
}
