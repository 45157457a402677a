package decomp

import (
	"sort"

	"github.com/xserve/xserve/fxgraph"
)

// Lookup returns the decomposition of op; the IR's own operator always
// wins, so callers use it only for an op outside the IR.
func Lookup(op *fxgraph.Op) (Func, bool) {
	d, ok := decompositions[op]
	return d, ok && op != nil
}

// Fallback returns the conversion of a call of IR operator op whose
// arguments the IR's operator does not take (a size computed from the
// input shape where the operator wants ints: x.repeat(batch, 1, 1),
// arange(x.size(1))). Callers try it after the IR operator refused the
// call.
func Fallback(op *fxgraph.Op) (Func, bool) {
	if op != nil && isArange(op.Name) {
		return decSymbolicArange, true
	}
	d, ok := fallbacks[op]
	return d, ok && op != nil
}

// Ops returns every operator with a decomposition, sorted by name.
func Ops() []*fxgraph.Op {
	out := make([]*fxgraph.Op, 0, len(decompositions))
	for op := range decompositions {
		out = append(out, op)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Emit emits a call of op with nOut outputs: the IR operator itself when
// the IR has it, else op's decomposition. It returns the output nodes.
func Emit(e *fxgraph.Emitter, name string, op *fxgraph.Op, args []any, kw map[string]any, nOut int) ([]*fxgraph.Node, error) {
	if e.IR.Has(op) {
		n, err := e.Emit(name, op, args, kw)
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{n}, nil
	}
	d, ok := Lookup(op)
	if !ok {
		return nil, fmtUnsupported(op)
	}
	c := NewCall(op, args, kw, e)
	c.Outs = make([]string, nOut)
	for i := range c.Outs {
		c.Outs[i] = name
	}
	if err := d(c); err != nil {
		return nil, err
	}
	return c.Results(), nil
}
