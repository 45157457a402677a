package lower_test

import (
	"context"
	"math"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/tensor"
)

// TestMaxMinPropagateNaN pins PyTorch's semantics (torch.maximum, amax and
// amin return NaN when an operand is NaN), which XLA CPU's maximum/minimum
// do not follow on their own.
func TestMaxMinPropagateNaN(t *testing.T) {
	c := openPlugin(t)
	ir := fxgraph.NewRegistry()
	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, 4))
	y := g.AddPlaceholder("y", fxgraph.Static(tensor.Float32, 4))
	maxN := g.AddCall(fxgraph.AtenMaximum, []any{x, y}, nil)
	minN := g.AddCall(fxgraph.AtenMinimum, []any{x, y}, nil)
	amax := g.AddCall(fxgraph.AtenAmax, []any{x, []any{int64(0)}, false}, nil)
	amin := g.AddCall(fxgraph.AtenAmin, []any{y, []any{int64(0)}, false}, nil)
	g.SetOutput(maxN, minN, amax, amin)
	if err := ir.PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	nan := float32(math.NaN())
	xs := tensor.FromFloat32s([]float32{1, nan, 3, -1})
	ys := tensor.FromFloat32s([]float32{2, 5, nan, -2})
	outs, err := conformance.Execute(context.Background(), c, prog, []*tensor.Tensor{xs, ys})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{
		{2, math.NaN(), math.NaN(), -1},
		{1, math.NaN(), math.NaN(), -2},
		{math.NaN()},
		{math.NaN()},
	}
	for i, w := range want {
		got := outs[i].Float64s()
		for j := range w {
			if math.IsNaN(w[j]) != math.IsNaN(got[j]) || (!math.IsNaN(w[j]) && w[j] != got[j]) {
				t.Errorf("output %d = %v, want %v", i, got, w)
				break
			}
		}
	}
}
