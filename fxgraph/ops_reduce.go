package fxgraph

// registerReductions registers reductions (sum, mean, amax, argmax, ...),
// cumulative ops and top-k.
func registerReductions(r *Registry) {}
