package fxgraph

// DeferredTarget is the op of a deferred graph's outputs: it stands for a
// value the importer can only build once the input sizes are known (an If
// on a condition computed from shapes, whose branches differ in shape,
// say). A deferred graph carries only the model's signature; the importer
// that made it imports the model again for concrete sizes, where every
// shape computation folds (importer.Model.At). No registry knows the op and
// nothing lowers it.
const DeferredTarget = "xserve.deferred.default"

// Deferred reports whether g is a deferred graph: one of its outputs is a
// DeferredTarget node.
func (g *Graph) Deferred() bool {
	for _, o := range g.Outputs() {
		if o.Target == DeferredTarget {
			return true
		}
	}
	return false
}
