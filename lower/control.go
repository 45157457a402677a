package lower

// registerControlFlow registers the rules of cond and while_loop.
func registerControlFlow(r *Registry) {}
