package lower

// registerShapeOps registers the rules of shape and indexing operators.
func registerShapeOps(r *Registry) {}
