package lower_test

import (
	"context"
	"math"
	"testing"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// TestFusedOpsGeneric: the fused operators (fxgraph.Graph.FuseEpilogues)
// lowered by the generic rules, which every platform without fused kernels
// uses, compute what the product followed by its epilogue nodes computes:
// each graph runs on the PJRT plugin once fused and once as imported, and
// the convolution case against a direct float64 convolution too.
func TestFusedOpsGeneric(t *testing.T) {
	client := nnOpenPlugin(t)
	f32 := func(dims ...int64) fxgraph.TensorMeta { return fxgraph.Static(tensor.Float32, dims...) }
	for _, c := range []struct {
		name   string
		inputs []fxgraph.TensorMeta
		build  func(g *fxgraph.Graph, in []*fxgraph.Node) *fxgraph.Node
		op     *fxgraph.Op // the fused op the graph must get
	}{
		{"conv bias residual relu", []fxgraph.TensorMeta{f32(1, 3, 5, 5), f32(4, 3, 3, 3), f32(4), f32(1, 4, 5, 5)},
			func(g *fxgraph.Graph, in []*fxgraph.Node) *fxgraph.Node {
				y := g.AddCall(fxgraph.AtenConvolution, []any{in[0], in[1], in[2], nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), int64(1)}, nil)
				return g.AddCall(fxgraph.AtenRelu, []any{g.AddCall(fxgraph.AtenAddTensor, []any{y, in[3]}, nil)}, nil)
			}, fxgraph.XserveConvFused},
		{"conv x*sigmoid(x)", []fxgraph.TensorMeta{f32(2, 2, 4, 4), f32(3, 2, 3, 3)},
			func(g *fxgraph.Graph, in []*fxgraph.Node) *fxgraph.Node {
				y := g.AddCall(fxgraph.AtenConvolution, []any{in[0], in[1], nil, nnL(1, 1), nnL(0, 0), nnL(1, 1), false, nnL(0, 0), int64(1)}, nil)
				return g.AddCall(fxgraph.AtenMulTensor, []any{y, g.AddCall(fxgraph.AtenSigmoid, []any{y}, nil)}, nil)
			}, fxgraph.XserveConvFused},
		{"linear gelu tanh", []fxgraph.TensorMeta{f32(3, 8), f32(5, 8), f32(5)},
			func(g *fxgraph.Graph, in []*fxgraph.Node) *fxgraph.Node {
				y := g.AddCall(fxgraph.AtenLinear, []any{in[0], in[1], in[2]}, nil)
				return g.AddCall(fxgraph.AtenGelu, []any{y}, map[string]any{"approximate": "tanh"})
			}, fxgraph.XserveMatmulFused},
		{"matmul bias leaky relu", []fxgraph.TensorMeta{f32(2, 3, 8), f32(8, 6), f32(6)},
			func(g *fxgraph.Graph, in []*fxgraph.Node) *fxgraph.Node {
				y := g.AddCall(fxgraph.AtenMatmul, []any{in[0], in[1]}, nil)
				return g.AddCall(fxgraph.AtenLeakyRelu, []any{g.AddCall(fxgraph.AtenAddTensor, []any{y, in[2]}, nil), 0.125}, nil)
			}, fxgraph.XserveMatmulFused},
		{"addmm relu6", []fxgraph.TensorMeta{f32(6), f32(4, 8), f32(8, 6)},
			func(g *fxgraph.Graph, in []*fxgraph.Node) *fxgraph.Node {
				y := g.AddCall(fxgraph.AtenAddmm, []any{in[0], in[1], in[2]}, nil)
				return g.AddCall(fxgraph.AtenHardtanh, []any{y, 0.0, 6.0}, nil)
			}, fxgraph.XserveMatmulFused},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := fxgraph.New()
			var in []*fxgraph.Node
			var vals []*tensor.Tensor
			for i, m := range c.inputs {
				in = append(in, g.AddPlaceholder(string(rune('a'+i)), m))
				dims, _ := m.Shape.Static()
				vals = append(vals, nnTensor(tensor.Float32, dims, nnRand(int64(i+1), tensor.NumElements(dims))))
			}
			g.SetOutput(c.build(g, in))
			fxgraph.NewRegistry().PropagateShapes(g)
			l := lower.New(lower.Options{})
			plain, err := l.Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			sg, err := l.Specialize(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			if sg.FuseEpilogues() != 1 || sg.Outputs()[0].Op != c.op {
				t.Fatalf("not fused into one %s:\n%s", c.op, sg)
			}
			fused, err := l.LowerSpecialized(sg, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := runAll(t, client, plain, vals)
			got := runAll(t, client, fused, vals)
			for i := int64(0); i < want.NumElements(); i++ {
				if d := math.Abs(got.Float64At(i) - want.Float64At(i)); d > 1e-5*(1+math.Abs(want.Float64At(i))) {
					t.Fatalf("element %d: fused %v, unfused %v", i, got.Float64At(i), want.Float64At(i))
				}
			}
			if c.name == "conv bias residual relu" {
				ref, _ := nnRefConv2d(vals[0].Float64s(), []int64{1, 3, 5, 5}, vals[1].Float64s(), []int64{4, 3, 3, 3}, vals[2].Float64s(),
					[2]int64{1, 1}, [2]int64{1, 1}, [2]int64{1, 1}, [2]int64{}, 1, false)
				for i, r := range ref {
					r = math.Max(r+vals[3].Float64At(int64(i)), 0)
					if d := math.Abs(got.Float64At(int64(i)) - r); d > 1e-4*(1+math.Abs(r)) {
						t.Fatalf("element %d: fused %v, direct convolution %v", i, got.Float64At(int64(i)), r)
					}
				}
			}
		})
	}
}

// runAll compiles prog and runs it on inputs, returning its one output.
func runAll(t *testing.T, c *pjrt.Client, prog *lower.Program, inputs []*tensor.Tensor) *tensor.Tensor {
	t.Helper()
	ctx := context.Background()
	exe, err := engine.Compile(ctx, c, prog, engine.NewWeights(c))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exe.Run(ctx, inputs)
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}
