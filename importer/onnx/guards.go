package onnx

import (
	"errors"
	"fmt"

	"github.com/xserve/xserve/fxgraph"
)

// Run-time guards: an If with a run-time condition converts both branches
// into stablehlo.if. When one branch cannot be built (an operator or a
// shape xserve does not support there, typically a branch for inputs of
// another size, such as silero-vad's 8 kHz decoder at 16 kHz sizes), the
// model can still serve every input that takes the other branch: the If
// becomes the other branch, inlined, and the graph gets a guard output that
// is true when the condition selects the missing branch. The host fails
// such a run with the branch's conversion error (lower.Program.CheckGuards),
// as ONNX Runtime fails a branch that cannot run; the stand-in's result is
// never returned.

// guardValue is a guard of the import: a bool scalar node and the error the
// host reports when it is true.
type guardValue struct {
	node    *fxgraph.Node
	message string
}

// guardNodes returns the guard nodes of the import (none in a subgraph).
func (s *scope) guardNodes() []*fxgraph.Node {
	if s.guards == nil {
		return nil
	}
	var out []*fxgraph.Node
	for _, g := range *s.guards {
		out = append(out, g.node)
	}
	return out
}

// appendGuards appends the guard nodes to outs, last, and declares them
// (fxgraph.GuardOutput).
func (s *scope) appendGuards(outs []*fxgraph.Node) []*fxgraph.Node {
	if s.guards == nil {
		return outs
	}
	for k, g := range *s.guards {
		s.g.Guards = append(s.g.Guards, fxgraph.GuardOutput{Output: len(outs), Message: g.message})
		outs = append(outs, g.node)
		s.g.OutputNames = append(s.g.OutputNames, fmt.Sprintf("guard_%d", k))
	}
	return outs
}

// guardedIf converts an If with a run-time condition one of whose branches
// failed to convert (errs[i] for branch i, then and else): the other branch,
// inlined, with a guard that fails the run when cond selects the failed
// one. It returns the conversion error instead when both branches failed,
// when the If is inside a subgraph (a guard must be a main-graph output), or
// when the error asks for something the caller can give (input values, or
// concrete sizes: NeedsValueError, shapeDependentError).
func guardedIf(c *Ctx, cond *fxgraph.Node, branches [2]*Graph, errs [2]error) error {
	bad := 0
	if errs[0] == nil {
		bad = 1
	}
	err := errs[bad]
	var nv *NeedsValueError
	var sd *shapeDependentError
	if errs[1-bad] != nil || c.s.guards == nil || errors.As(err, &nv) || errors.As(err, &sd) {
		return err
	}
	outs, gerr := c.s.inlineBranch(branches[1-bad])
	if gerr != nil {
		return gerr
	}
	taken, gerr := c.Emit(fxgraph.AtenView, cond, []any{})
	if gerr != nil {
		return gerr
	}
	if bad == 1 { // the else branch runs when cond is false
		if taken, gerr = c.Emit(fxgraph.AtenLogicalNot, taken); gerr != nil {
			return gerr
		}
	}
	which := [2]string{"then_branch", "else_branch"}[bad]
	*c.s.guards = append(*c.s.guards, guardValue{node: taken, message: fmt.Sprintf(
		"the input selects the %s %q of If node %q, which xserve could not build for these input sizes: %v",
		which, branches[bad].Name, c.node.Name, err)})
	return bindIfOutputs(c, outs)
}
