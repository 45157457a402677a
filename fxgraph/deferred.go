package fxgraph

// IsDeferred reports whether g is a deferred graph: one whose outputs are
// Deferred nodes, values the importer can only build once the input sizes
// are known (an If on a condition computed from shapes, whose branches
// differ in shape, say). A deferred graph carries only the model's
// signature; the importer that made it imports the model again at concrete
// sizes, where every shape computation folds (importer.Model.At).
func (g *Graph) IsDeferred() bool {
	for _, o := range g.Outputs() {
		if o.Op == Deferred {
			return true
		}
	}
	return false
}
