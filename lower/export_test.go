package lower

import (
	"sync"

	"github.com/xserve/xserve/fxgraph"
)

// LoweredOps holds the op of every node the package's tests lowered (see
// TestMain in completeness_test.go).
var LoweredOps sync.Map // *fxgraph.Op -> struct{}

func init() {
	onLowered = func(op *fxgraph.Op) { LoweredOps.Store(op, struct{}{}) }
}
