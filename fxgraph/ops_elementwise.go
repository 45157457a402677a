package fxgraph

// registerElementwise registers pointwise arithmetic, comparison, logic,
// activation and cast operators.
func registerElementwise(r *Registry) {}
