package lower_test

import (
	"context"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// compileForTest compiles prog once with device-resident weights and returns
// a function running it on one input.
func compileForTest(ctx context.Context, c *pjrt.Client, prog *lower.Program) (func(context.Context, *tensor.Tensor) ([]*tensor.Tensor, error), error) {
	exe, err := engine.Compile(ctx, c, prog, engine.NewWeights(c))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, in *tensor.Tensor) ([]*tensor.Tensor, error) {
		return exe.Run(ctx, []*tensor.Tensor{in})
	}, nil
}
