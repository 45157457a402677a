package lower_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/tensor"
)

func randTensor(r *rand.Rand, lo, hi float64, shape ...int64) *tensor.Tensor {
	t := tensor.New(tensor.Float32, shape...)
	for i := int64(0); i < t.NumElements(); i++ {
		t.SetFloat64(i, lo+(hi-lo)*r.Float64())
	}
	return t
}

// TestFoldBatchNormKeepsResults lowers conv -> batch norm -> relu with and
// without folding the batch norm into the convolution and requires the same
// outputs, and that the folded program has no batch norm left.
func TestFoldBatchNormKeepsResults(t *testing.T) {
	c := openPlugin(t)
	r := rand.New(rand.NewPCG(1, 2))
	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.TensorMeta{DType: tensor.Float32, Shape: fxgraph.Shape{fxgraph.S("batch"), fxgraph.D(3), fxgraph.D(8), fxgraph.D(8)}})
	w := g.AddConstant("w", randTensor(r, -1, 1, 4, 3, 3, 3))
	b := g.AddConstant("b", randTensor(r, -1, 1, 4))
	gamma := g.AddConstant("gamma", randTensor(r, 0.5, 1.5, 4))
	beta := g.AddConstant("beta", randTensor(r, -1, 1, 4))
	mean := g.AddConstant("mean", randTensor(r, -1, 1, 4))
	variance := g.AddConstant("var", randTensor(r, 0.5, 2, 4))
	ints := func(v ...int64) []any {
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = x
		}
		return out
	}
	conv := g.AddCall(fxgraph.AtenConvolution, []any{x, w, b, ints(1, 1), ints(1, 1), ints(1, 1), false, ints(0, 0), int64(1)}, nil)
	bn := g.AddCall(fxgraph.Aten_NativeBatchNormLegitNoTraining, []any{conv, gamma, beta, mean, variance, 0.1, 1e-5}, nil)
	item := g.AddCall(fxgraph.GetItem, []any{bn, int64(0)}, nil)
	relu := g.AddCall(fxgraph.AtenRelu, []any{item}, nil)
	g.SetOutput(relu)
	if err := fxgraph.NewRegistry().PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	before := g.String()
	dims := map[string]int64{"batch": 2}
	folded, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, dims)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := lower.New(lower.Options{KeepBatchNorm: true}, cpu.Platform()).Lower(g, dims)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(folded.Module, []byte("batch_norm")) || bytes.Contains(folded.Module, []byte("rsqrt")) {
		t.Errorf("folded program still normalizes:\n%s", folded.Module)
	}
	in := []*tensor.Tensor{randTensor(r, -2, 2, 2, 3, 8, 8)}
	ctx := context.Background()
	got, err := conformance.Execute(ctx, c, folded, in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := conformance.Execute(ctx, c, kept, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.Compare(got[0], want[0], 1e-5, 1e-5); err != nil {
		t.Fatalf("folded batch norm changed the result: %v", err)
	}
	if g.String() != before {
		t.Errorf("Lower modified the caller's graph:\n%s", g)
	}
}
