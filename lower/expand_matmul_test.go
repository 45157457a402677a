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

// TestUnexpandMatmul builds the pattern torch.export writes for a linear
// layer on a 3-D input, bmm(x, view(expand(w^T, [B, K, N]), same)), and
// checks that Optimize turns it into a broadcasting matmul (no B-fold copy
// of the weight in the program) with unchanged results.
func TestUnexpandMatmul(t *testing.T) {
	c := openPlugin(t)
	r := rand.New(rand.NewPCG(3, 4))
	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.TensorMeta{DType: tensor.Float32, Shape: fxgraph.Shape{fxgraph.D(5), fxgraph.S("batch"), fxgraph.D(8)}})
	w := g.AddConstant("w", randTensor(r, -1, 1, 12, 8))
	wt := g.AddCall(fxgraph.AtenPermute, []any{w, []any{int64(1), int64(0)}}, nil)
	e := g.AddCall(fxgraph.AtenExpand, []any{wt, []any{int64(5), int64(8), int64(12)}}, nil)
	v := g.AddCall(fxgraph.AtenView, []any{e, []any{int64(5), int64(8), int64(12)}}, nil)
	bmm := g.AddCall(fxgraph.AtenBmm, []any{x, v}, nil)
	g.SetOutput(bmm)
	l := lower.New(lower.Options{}, cpu.Platform())
	if err := l.IR().PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	opt := l.Optimize(g)
	if opt == g {
		t.Fatal("Optimize found nothing to rewrite")
	}
	var targets []*fxgraph.Op
	for _, n := range opt.Nodes() {
		if n.Opcode == fxgraph.CallFunction {
			targets = append(targets, n.Op)
		}
	}
	if len(targets) != 2 || targets[1] != fxgraph.AtenMatmul {
		t.Errorf("optimized targets = %v, want permute then matmul", targets)
	}
	dims := map[string]int64{"batch": 3}
	fast, err := l.Lower(g, dims)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := l.IR().Specialize(g, dims, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := l.LowerSpecialized(sg, dims)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(fast.Module, []byte("tensor<5x8x12xf32>")) {
		t.Errorf("optimized program still materializes the expanded weight:\n%s", fast.Module)
	}
	in := []*tensor.Tensor{randTensor(r, -1, 1, 5, 3, 8)}
	ctx := context.Background()
	got, err := conformance.Execute(ctx, c, fast, in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := conformance.Execute(ctx, c, slow, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.Compare(got[0], want[0], 1e-5, 1e-6); err != nil {
		t.Fatal(err)
	}
}
