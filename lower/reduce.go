package lower

// registerReductions registers the rules of reductions, cumulative ops and top-k.
func registerReductions(r *Registry) {}
