package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/xserve/xserve/fxgraph"
)

// RowState is a value a model carries from one execution to the next (a
// recurrent state): its input and its output, by index into the model's
// inputs and outputs, and the axis along which the rows of different
// sequences stack.
type RowState struct {
	Input, Output, Axis int
}

// BuildRows builds, for the symbol sizes in dims, the model with its state
// rows gathered and scattered inside the program: each state input is fed
// by rows separate inputs (one row each along the state's axis),
// concatenated in the program, and each state output is sliced there into
// rows separate outputs. One execution thus runs the steps of rows
// sequences whose states are separate device buffers, with no program
// joining them before nor splitting them after; the row inputs may be
// donated.
//
// The executable's inputs are the model's other inputs in order, then
// state 0's rows, state 1's rows, ...; its outputs are the model's other
// outputs in order, then the states' rows in the same order.
func (m *Model) BuildRows(ctx context.Context, dims map[string]int64, states []RowState, rows int) (*Executable, Build, error) {
	var b Build
	g, err := m.GraphAt(dims)
	if err != nil {
		return nil, b, err
	}
	fg, err := rowGraph(g, states, rows, m.e.lowerer.IR())
	if err != nil {
		return nil, b, fmt.Errorf("engine: rows program: %w", err)
	}
	prog, err := m.e.lowerer.Lower(fg, dims)
	m.e.lowerings.Add(1)
	b.Lowered = true
	if err != nil {
		return nil, b, fmt.Errorf("engine: rows program: %w", err)
	}
	x, err := m.compile(ctx, prog, &b)
	return x, b, err
}

// rowGraph returns a copy of g whose state inputs are each the
// concatenation of rows new inputs and whose state outputs are each sliced
// into rows outputs (see BuildRows for the order).
func rowGraph(g *fxgraph.Graph, states []RowState, rows int, ir *fxgraph.Registry) (*fxgraph.Graph, error) {
	if len(g.Bounded) > 0 || len(g.Guards) > 0 {
		return nil, errors.New("the model's output sizes are decided at run time")
	}
	fg := g.Clone()
	ph, outs := fg.Placeholders(), fg.Outputs()
	e := &fxgraph.Emitter{Graph: fg, IR: ir, MaxFoldElements: -1}
	isStateOut := map[int]bool{}
	for _, st := range states {
		if st.Input < 0 || st.Input >= len(ph) || st.Output < 0 || st.Output >= len(outs) {
			return nil, fmt.Errorf("state %+v: the model has %d inputs and %d outputs", st, len(ph), len(outs))
		}
		isStateOut[st.Output] = true
	}
	var newOuts []*fxgraph.Node
	var names []string
	for k, o := range outs {
		if !isStateOut[k] {
			newOuts, names = append(newOuts, o), append(names, g.OutputName(k))
		}
	}
	for _, st := range states {
		if err := gatherRows(fg, e, ph[st.Input], st.Axis, rows); err != nil {
			return nil, err
		}
	}
	for _, st := range states {
		parts, err := scatterRows(e, outs[st.Output], st.Axis, rows)
		if err != nil {
			return nil, err
		}
		for r, p := range parts {
			newOuts, names = append(newOuts, p), append(names, fmt.Sprintf("%s_row%d", g.OutputName(st.Output), r))
		}
	}
	fg.SetOutput(newOuts...)
	fg.OutputNames = names
	return fg, fg.Validate()
}

// gatherRows replaces placeholder p by the concatenation along axis of rows
// new placeholders of one row each, added after the graph's inputs.
func gatherRows(g *fxgraph.Graph, e *fxgraph.Emitter, p *fxgraph.Node, axis, rows int) error {
	meta := p.Val()
	if axis < 0 || axis >= meta.Rank() {
		return fmt.Errorf("input %s: no axis %d", p.Target, axis)
	}
	row := fxgraph.TensorMeta{DType: meta.DType, Shape: append(fxgraph.Shape(nil), meta.Shape...)}
	row.Shape[axis] = fxgraph.StaticShape(1)[0]
	parts := make([]any, rows)
	for r := range parts {
		parts[r] = g.AddPlaceholder(fmt.Sprintf("%s_row%d", p.Target, r), row)
	}
	var first *fxgraph.Node
	for _, n := range g.Nodes() {
		if n.Opcode == fxgraph.CallFunction || n.Opcode == fxgraph.Output {
			first = n
			break
		}
	}
	prev := g.SetInsertPoint(first)
	defer g.SetInsertPoint(prev)
	cat, err := e.Emit(p.Target+"_rows", fxgraph.AtenCat, []any{parts, int64(axis)}, nil)
	if err != nil {
		return fmt.Errorf("input %s: %w", p.Target, err)
	}
	g.ReplaceAllUses(p, cat)
	return g.Erase(p)
}

// scatterRows slices out along axis into rows values of one row each.
func scatterRows(e *fxgraph.Emitter, out *fxgraph.Node, axis, rows int) ([]*fxgraph.Node, error) {
	parts := make([]*fxgraph.Node, rows)
	for r := range parts {
		s, err := e.Emit(out.Name+"_row", fxgraph.AtenSliceTensor, []any{out, int64(axis), int64(r), int64(r + 1), int64(1)}, nil)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", out.Name, err)
		}
		parts[r] = s
	}
	return parts, nil
}
