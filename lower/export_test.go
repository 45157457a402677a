package lower

import "sync"

// LoweredTargets holds the target of every node the package's tests
// lowered (see TestMain in completeness_test.go).
var LoweredTargets sync.Map // string -> struct{}

func init() {
	onLowered = func(target string) { LoweredTargets.Store(target, struct{}{}) }
}
