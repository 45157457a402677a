package lower

import (
	"sync"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// LoweredOps holds the op of every node the package's tests lowered (see
// TestMain in completeness_test.go).
var LoweredOps sync.Map // *fxgraph.Op -> struct{}

func init() {
	onLowered = func(op *fxgraph.Op) { LoweredOps.Store(op, struct{}{}) }
}

// MLASActivations emits ONNX Runtime's logistic and tanh of x, as the
// quantized recurrent rule computes them (rnn.go).
func MLASActivations(blk *stablehlo.Block, x *stablehlo.Value) (logistic, tanh *stablehlo.Value, err error) {
	b := &rnnB{blk: blk}
	logistic, _ = b.mlasLogistic(x)
	tanh, _ = b.mlasTanh(x)
	return logistic, tanh, b.err
}
