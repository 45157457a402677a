package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// DeferredTarget is the op of a deferred graph's outputs (see
// Graph.Rebuild): it stands for a value the importer can only build once
// the input sizes are known, and has no lowering. Its meta comes from its
// kwargs: "dtype" and "shape", a list whose elements are an int64 (a static
// size; -1 for a size unknown until rebuilt) or a string (an input symbol).
const DeferredTarget = "xserve.deferred.default"

func registerDeferred(r *Registry) {
	r.Register(DeferredTarget, OpInfo{Shape: deferredShape})
}

func deferredShape(n *Node) (Meta, error) {
	dt, ok := n.Kwargs["dtype"].(tensor.DType)
	if !ok {
		return Meta{}, fmt.Errorf("%s (%s): no dtype", n.Name, n.Target)
	}
	dims, ok := n.Kwargs["shape"].([]any)
	if !ok {
		return Meta{}, fmt.Errorf("%s (%s): no shape list", n.Name, n.Target)
	}
	shape := make(Shape, len(dims))
	for i, d := range dims {
		switch v := d.(type) {
		case string:
			shape[i] = S(v)
		case int64:
			if v < 0 {
				shape[i] = Unknown
			} else {
				shape[i] = D(v)
			}
		default:
			return Meta{}, fmt.Errorf("%s (%s): shape element %s", n.Name, n.Target, FormatArg(d))
		}
	}
	return One(dt, shape), nil
}

// Rebuilt returns the graph to specialize for dims (symbol -> size): g
// itself, or, for a deferred graph (Rebuild set), the graph Rebuild makes
// for those sizes, every shape computation in it static.
func (g *Graph) Rebuilt(dims map[string]int64) (*Graph, error) {
	if g.Rebuild == nil {
		return g, nil
	}
	rg, err := g.Rebuild(dims)
	if err != nil {
		return nil, fmt.Errorf("rebuild for %v: %w", dims, err)
	}
	if len(rg.Outputs()) != len(g.Outputs()) || len(rg.Placeholders()) != len(g.Placeholders()) {
		return nil, fmt.Errorf("rebuild for %v: %d inputs and %d outputs, the model declares %d and %d",
			dims, len(rg.Placeholders()), len(rg.Outputs()), len(g.Placeholders()), len(g.Outputs()))
	}
	return rg, nil
}
