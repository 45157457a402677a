package fxgraph

import "fmt"

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
	// The rebuilt graph may add guard outputs (GuardOutput), last.
	if rg.ModelOutputs() != g.ModelOutputs() || len(rg.Placeholders()) != len(g.Placeholders()) {
		return nil, fmt.Errorf("rebuild for %v: %d inputs and %d outputs, the model declares %d and %d",
			dims, len(rg.Placeholders()), rg.ModelOutputs(), len(g.Placeholders()), g.ModelOutputs())
	}
	return rg, nil
}
