package onnx

import (
	"errors"
	"fmt"
	"strings"

	"github.com/xserve/xserve/fxgraph"
)

// shapeDependentError marks a conversion that failed only because a value
// computed from symbolic input sizes (Shape -> Gather -> Equal, say) is not
// known at import time: an If on such a condition whose branches differ in
// shape, a size or pads operand, an op refusing a symbolic dim. For
// concrete input sizes every such value folds to a constant, so the import
// is deferred to then (see deferredGraph).
type shapeDependentError struct{ err error }

func (e *shapeDependentError) Error() string { return e.err.Error() }
func (e *shapeDependentError) Unwrap() error { return e.err }

// markShapeDependent wraps err (a converter's ErrUnsupported) as a
// shapeDependentError when the node's failure can depend on input sizes:
// an operand needed as a constant that only shapes feed, any operand that is
// computed from shapes alone, or an operand of symbolic shape that the
// converter names as the reason ("symbolic").
func (c *Ctx) markShapeDependent(err error) error {
	var nv *NeedsValueError
	if errors.As(err, &nv) && len(nv.Inputs) == 0 {
		return &shapeDependentError{err}
	}
	var sd *shapeDependentError
	if errors.As(err, &sd) {
		return err // from a subgraph: already marked
	}
	for i := range c.node.Inputs {
		if !c.HasInput(i) {
			continue
		}
		n, ierr := c.Input(i)
		if ierr != nil || c.s.g.ConstValue(n) != nil {
			continue
		}
		if n.Opcode != fxgraph.Placeholder && len(c.valueInputsBehind(n)) == 0 {
			return &shapeDependentError{err}
		}
	}
	if strings.Contains(err.Error(), "symbolic") {
		return &shapeDependentError{err}
	}
	return err
}

// deferredGraph returns the graph of a model whose import needs concrete
// input sizes: its placeholders are the model's inputs, its outputs
// fxgraph.Deferred nodes typed from the model's declared outputs;
// ImportAt imports the model again with the inputs' symbolic dims set to
// given sizes. cause is the symbolic import's error, returned instead when
// the outputs' types are not declared.
func (im *Importer) deferredGraph(m *Model, o ImportOptions, cause error) (*fxgraph.Graph, error) {
	g := fxgraph.New()
	inits := map[string]bool{}
	for _, in := range m.Graph.Initializers {
		inits[in.Name] = true
	}
	syms := map[string]bool{}
	for i, vi := range m.Graph.Inputs {
		if inits[vi.Name] {
			continue
		}
		meta, err := inputMeta(vi)
		if err != nil {
			return nil, fmt.Errorf("onnx: graph input %d (%q): %w", i, vi.Name, err)
		}
		for _, s := range meta.Shape.Symbols() {
			syms[s] = true
		}
		n := g.AddPlaceholder(sanitize(vi.Name), meta)
		n.Target = vi.Name
	}
	if len(syms) == 0 {
		return nil, cause // static inputs: nothing to wait for
	}
	var outs []*fxgraph.Node
	for _, vi := range m.Graph.Outputs {
		t := vi.Type
		if t == nil || t.Kind != TypeTensor || !t.HasShape {
			return nil, cause
		}
		shape := make(fxgraph.Shape, len(t.Dims))
		for i, d := range t.Dims {
			switch {
			case d.Known:
				shape[i] = fxgraph.D(d.Value)
			case d.Param != "" && syms[sanitize(d.Param)]:
				shape[i] = fxgraph.S(sanitize(d.Param))
			default:
				shape[i] = fxgraph.Unknown
			}
		}
		n := g.AddNamedCall(sanitize(vi.Name), fxgraph.Deferred, nil, nil)
		n.Meta = fxgraph.One(t.Elem, shape)
		outs = append(outs, n)
		g.OutputNames = append(g.OutputNames, vi.Name)
	}
	g.SetOutput(outs...)
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: deferred graph: %w", err)
	}
	return g, nil
}

// ImportAt imports m, with what o says of its inputs, for the sizes dims
// gives its inputs' symbolic dims: the graph of a deferred model
// (fxgraph.Graph.IsDeferred) at those sizes, every shape computation in it
// static.
func (im *Importer) ImportAt(m *Model, o ImportOptions, dims map[string]int64) (*fxgraph.Graph, error) {
	g, err := im.importModel(m, o, dims)
	if err != nil {
		return nil, fmt.Errorf("onnx: import for input sizes %v: %w", dims, err)
	}
	return g, nil
}

// staticInputMeta sets meta's symbolic dims from dims.
func staticInputMeta(meta fxgraph.TensorMeta, dims map[string]int64, input string) (fxgraph.TensorMeta, error) {
	meta.Shape = meta.Shape.Clone()
	for i, d := range meta.Shape {
		if d.IsStatic() {
			continue
		}
		v, ok := dims[d.Sym]
		if !ok {
			return meta, fmt.Errorf("onnx: input %s dim %d (%s) has no size", input, i, d.Sym)
		}
		meta.Shape[i] = fxgraph.D(v)
	}
	return meta, nil
}
