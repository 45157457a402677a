package onnx

import (
	"slices"

	"github.com/xserve/xserve/fxgraph"
)

// Loops over data-dependent counts (docs/DATA-DEPENDENT.md).
//
// torch.onnx exports a Python loop over the detections of a detector as a
// Loop whose trip count is the detections' run-time count, whose body reads
// row i of bounded values (Gather(v, i)) and whose output grows by one row
// per iteration (Concat(acc, row) from an empty acc). A while_loop carries
// values of fixed shapes: the growing value becomes a buffer of bound rows
// written at row i (a bounded value counted by the iterations run), and the
// bounded values are captured padded, which is exact when the body reads
// only their rows below the trip count.

// growingStates returns, per loop-carried value of a Loop, the name of the
// body value that grows it ("" for a value carried as is), or nil when
// none grows. A value grows when it starts with no rows (a static first
// axis of 0) and the body's only use of it is Concat(v, row) along axis 0
// giving its next value.
func growingStates(c *Ctx, body *Graph, nState int) ([]string, error) {
	var grown []string
	for j := range nState {
		v, err := c.AnyInput(2 + j)
		if err != nil {
			return nil, err
		}
		if isStructured(v) {
			continue
		}
		m := Meta(v)
		if m.Rank() == 0 || !m.Shape[0].IsStatic() || m.Shape[0].Size != 0 {
			continue
		}
		row := growingRow(body, body.Inputs[2+j].Name, body.Outputs[1+j].Name)
		if row == "" {
			continue
		}
		if grown == nil {
			grown = make([]string, nState)
		}
		grown[j] = row
	}
	return grown, nil
}

// growingRow returns x when the body computes out as Concat(in, x) along
// axis 0 and uses in nowhere else, or "".
func growingRow(body *Graph, in, out string) string {
	row := ""
	for _, node := range body.Nodes {
		uses := 0
		for _, name := range node.Inputs {
			if name == in {
				uses++
			}
		}
		if subgraphsUse(node, in) {
			return ""
		}
		if uses == 0 {
			continue
		}
		if node.OpType != "Concat" || uses != 1 || len(node.Inputs) != 2 || node.Inputs[0] != in ||
			len(node.Outputs) != 1 || node.Outputs[0] != out || intAttr(node, "axis", -1) != 0 {
			return ""
		}
		row = node.Inputs[1]
	}
	for _, o := range body.Outputs {
		if o.Name == in {
			return ""
		}
	}
	return row
}

// intAttr returns node's int attribute name, or def when absent.
func intAttr(node *Node, name string, def int64) int64 {
	if a := node.Attr(name); a != nil && a.Type == AttrInt {
		return a.I
	}
	return def
}

// subgraphsUse reports whether a subgraph of node reads name.
func subgraphsUse(node *Node, name string) bool {
	for _, a := range node.Attributes {
		for _, sub := range append([]*Graph{a.G}, a.Graphs...) {
			if sub != nil && slices.Contains(freeNames(sub), name) {
				return true
			}
		}
	}
	return false
}

// rowCaptures returns the captured names of a Loop body that are bounded
// values along their first axis with at least the Loop's trip count of rows, which
// the body reads only as Gather(v, i) along axis 0 (i the iteration
// number): those can be captured padded, every read row being a valid one.
func rowCaptures(c *Ctx, body *Graph, captured []string) (map[string]bool, error) {
	var rows map[string]bool
	for _, name := range captured {
		b, ok := c.s.boundOf(c.s.env[name])
		if !ok || b.axis != 0 || !c.HasInput(0) {
			continue
		}
		trip, err := c.Input(0)
		if err != nil {
			return nil, err
		}
		if count := c.s.countBehind(trip, 0, 0); !countAtMost(count, b.count, 0) {
			continue
		}
		if !readsRowsOnly(body, name) {
			continue
		}
		if rows == nil {
			rows = map[string]bool{}
		}
		rows[name] = true
	}
	return rows, nil
}

// countAtMost reports whether count n is known to be at most count m: the
// same count, or a minimum of which one argument is.
func countAtMost(n, m *fxgraph.Node, depth int) bool {
	if n == nil || depth > 64 {
		return false
	}
	if sameCount(n, m, 0) {
		return true
	}
	if n.Op != fxgraph.AtenMinimum {
		return false
	}
	for _, a := range n.Args {
		if an, ok := a.(*fxgraph.Node); ok && countAtMost(an, m, depth+1) {
			return true
		}
	}
	return false
}

// readsRowsOnly reports whether body uses name only as Gather(name, i)
// along axis 0, with i the body's iteration number.
func readsRowsOnly(body *Graph, name string) bool {
	iter := body.Inputs[0].Name
	for _, node := range body.Nodes {
		for k, in := range node.Inputs {
			if in != name {
				continue
			}
			if node.OpType != "Gather" || k != 0 || len(node.Inputs) != 2 || node.Inputs[1] != iter || intAttr(node, "axis", 0) != 0 {
				return false
			}
		}
		if subgraphsUse(node, name) {
			return false
		}
	}
	for _, o := range body.Outputs {
		if o.Name == name {
			return false
		}
	}
	return true
}

// tripBound returns the static upper bound of a Loop's run-time trip
// count, which its scan outputs, grown values and padded captures need.
func tripBound(c *Ctx) (int64, error) {
	if !c.HasInput(0) {
		return 0, Unsupported("Loop with scan outputs or a grown value, a run-time condition and no trip count (the outputs need a static bound)")
	}
	m, err := c.Input(0)
	if err != nil {
		return 0, err
	}
	bound, ok := c.s.upperBound(m)
	if count := c.s.countBehind(m, 0, 0); !ok && count != nil {
		bound, ok = c.s.countBounds()[count]
	}
	if !ok {
		return 0, Unsupported("Loop with scan outputs or a grown value whose trip count has no static upper bound (a constant, a data-dependent count, or min(..., constant))")
	}
	if bound < 1 || bound > MaxLoopUnroll*64 {
		return 0, Unsupported("Loop with scan outputs or a grown value of at most %d iterations (1 to %d)", bound, MaxLoopUnroll*64)
	}
	return bound, nil
}

// writeRow returns buf [bound, ...] with slice i replaced by row [1, ...].
func writeRow(e fxgraph.Emitter, buf, row, i *fxgraph.Node, bound int64) (*fxgraph.Node, error) {
	dims, _ := Meta(row).Shape.Static()
	v, err := e.Emit("", fxgraph.AtenView, []any{row, ints(dims[1:])}, nil)
	if err != nil {
		return nil, err
	}
	return writeSlice(e, buf, v, i, bound)
}
