package onnx

import (
	"fmt"
	"maps"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerControlFlow registers the converters of If and Loop. go-xla's
// StableHLO builder has no while or case, so both are inlined at import (see
// convertIf and convertLoop); Scan and loops whose trip count or condition
// are run-time values are unsupported.
func registerControlFlow(cs converters) {
	cs.add("If", convertIf)
	cs.add("Loop", convertLoop)
}

// MaxLoopUnroll is the most iterations of a Loop the importer unrolls.
const MaxLoopUnroll = 1024

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

// inlineBranch converts the nodes of an If branch (a subgraph without
// inputs) into s's graph and returns the branch's outputs.
func (s *scope) inlineBranch(gr *Graph) ([]*fxgraph.Node, error) {
	if len(gr.Inputs) > 0 {
		return nil, fmt.Errorf("onnx: If branch %q has %d inputs, want none", gr.Name, len(gr.Inputs))
	}
	return s.inlineBody(gr, nil)
}

// inlineBody converts the nodes of subgraph gr into s's graph, with its
// inputs bound to the given nodes by name, and returns its outputs. The
// subgraph sees every value of s by name (ONNX subgraphs are lexically
// scoped); its own names stay inside it.
func (s *scope) inlineBody(gr *Graph, inputs map[string]*fxgraph.Node) ([]*fxgraph.Node, error) {
	if s.depth > 32 {
		return nil, fmt.Errorf("onnx: subgraph %q nested too deep", gr.Name)
	}
	inner := &scope{im: s.im, g: s.g, opsets: s.opsets, funcs: s.funcs, env: maps.Clone(s.env), depth: s.depth + 1, values: s.values, subConsts: s.subConsts}
	maps.Copy(inner.env, inputs)
	for _, in := range gr.Initializers {
		inner.env[in.Name] = s.modelConstant(in.Name, in.Tensor)
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

// convertLoop unrolls Loop(M, cond, v...) at import: the trip count M must
// be known at compile time (a constant, or a graph input whose value is
// given, see NeedsValueError) and the condition must stay known: the initial
// cond and every iteration's cond output must fold to constants. Each
// iteration inlines the body with its iteration number and condition as
// constants and the loop-carried values of the previous one; the scan
// outputs are stacked along a new first axis. At most MaxLoopUnroll
// iterations.
func convertLoop(c *Ctx, _ *Node) error {
	a := c.Attr("body")
	if a == nil || a.Type != AttrGraph || a.G == nil {
		return fmt.Errorf("Loop: attribute body (a graph) is required")
	}
	body := a.G
	nState := c.NumInputs() - 2
	if nState < 0 {
		return fmt.Errorf("Loop: %d inputs, want M, cond and the loop-carried values", c.NumInputs())
	}
	nScan := len(body.Outputs) - 1 - nState
	if len(body.Inputs) != 2+nState || nScan < 0 {
		return fmt.Errorf("Loop: body %q has %d inputs and %d outputs for %d loop-carried values", body.Name, len(body.Inputs), len(body.Outputs), nState)
	}
	trip := int64(-1) // none: run while the condition holds
	if c.HasInput(0) {
		ks, err := c.ConstInts(0)
		if err != nil {
			return err
		}
		if len(ks) != 1 {
			return fmt.Errorf("Loop: M has %d values, want 1", len(ks))
		}
		trip = ks[0]
	}
	keep := true
	if c.HasInput(1) {
		t, err := c.ConstValue(1)
		if err != nil {
			return err
		}
		keep = t.NumElements() == 1 && t.Data[0] != 0
	}
	state := make([]*fxgraph.Node, nState)
	for j := range state {
		v, err := c.Input(2 + j)
		if err != nil {
			return err
		}
		state[j] = v
	}
	scans := make([][]*fxgraph.Node, nScan)
	for i := int64(0); keep && (trip < 0 || i < trip); i++ {
		if i >= MaxLoopUnroll {
			return Unsupported("Loop of more than %d iterations (loops are unrolled at import)", MaxLoopUnroll)
		}
		bind := map[string]*fxgraph.Node{
			body.Inputs[0].Name: c.ScalarConst(tensor.Int64, float64(i)),
			body.Inputs[1].Name: c.ScalarConst(tensor.Bool, 1), // the loop runs: cond holds
		}
		for j, v := range state {
			bind[body.Inputs[2+j].Name] = v
		}
		outs, err := c.s.inlineBody(body, bind)
		if err != nil {
			return err
		}
		t := c.Graph().ConstValue(outs[0])
		if t == nil {
			return Unsupported("Loop whose condition is computed from run-time values (loops are unrolled at import)")
		}
		keep = t.NumElements() == 1 && t.Data[0] != 0
		copy(state, outs[1:1+nState])
		for k := range scans {
			u, err := c.Emit("aten.unsqueeze.default", outs[1+nState+k], int64(0))
			if err != nil {
				return err
			}
			scans[k] = append(scans[k], u)
		}
	}
	for j, v := range state {
		if c.HasOutput(j) {
			c.SetOutput(j, v)
		}
	}
	for k, parts := range scans {
		if !c.HasOutput(nState + k) {
			continue
		}
		if len(parts) == 0 {
			return Unsupported("Loop that runs no iteration and has scan outputs")
		}
		out, err := c.Emit("aten.cat.default", nodes(parts), int64(0))
		if err != nil {
			return err
		}
		c.SetOutput(nState+k, out)
	}
	return nil
}
