package fxgraph

// registerControlFlow registers the higher-order operators cond and
// while_loop.
func registerControlFlow(r *Registry) {}
