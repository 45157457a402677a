package lower

// registerElementwise registers the rules of pointwise operators.
func registerElementwise(r *Registry) {}
