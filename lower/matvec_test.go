package lower_test

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/tensor"
)

// lowerMatmul lowers x @ w (w through op when not nil: aten.t or
// aten.permute [1, 0] of a [wd0, wd1] weight) with the CPU platform, the
// matrix-product kernel loaded or not, and returns the module's text.
func lowerMatmul(t *testing.T, xd, wd []int64, op *fxgraph.Op, kernels []string) string {
	t.Helper()
	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, xd...))
	w := g.AddPlaceholder("w", fxgraph.Static(tensor.Float32, wd...))
	other := w
	switch op {
	case fxgraph.AtenPermute:
		other = g.AddCall(op, []any{w, []any{int64(1), int64(0)}}, nil)
	case fxgraph.AtenT:
		other = g.AddCall(op, []any{w}, nil)
	}
	g.SetOutput(g.AddCall(fxgraph.AtenMatmul, []any{x, other}, nil))
	p, err := lower.New(lower.Options{Kernels: kernels}, cpu.Platform()).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(p.Module)
}

// TestMatmulOfTransposedWeight: matmul(x, W^T) with W a matrix (torch.onnx's
// tied LM head: MatMul(x, Transpose(embedding))) contracts W's second dim
// in place: the product reads W itself, the kernel called with
// trans_b, or XLA's dot contracting dim 1. The numbers of the kernel's
// trans_b form are TestMatmulKernelMatchesORT's (matmul_gemm_transb_bias);
// serving/generate's greedy tests run the LM head end to end.
func TestMatmulOfTransposedWeight(t *testing.T) {
	for _, c := range []struct {
		name    string
		op      *fxgraph.Op
		kernels []string
		want    string
	}{
		{"permute kernel", fxgraph.AtenPermute, []string{cpu.MatmulKernel}, "trans_b = 1"},
		{"t kernel", fxgraph.AtenT, []string{cpu.MatmulKernel}, "trans_b = 1"},
		{"permute xla", fxgraph.AtenPermute, []string{}, "rhs_contracting_dimensions = [1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			module := lowerMatmul(t, []int64{64, 128}, []int64{256, 128}, c.op, c.kernels)
			// the product reads w itself (the transpose left unused, which
			// XLA drops)
			if !strings.Contains(module, "(%x, %w)") {
				t.Errorf("the product does not read the weight in place:\n%s", module)
			}
			if !strings.Contains(module, c.want) {
				t.Errorf("no %q:\n%s", c.want, module)
			}
		})
	}
}

// TestMatvecStaysXLA: a product of few rows with a large weight (a decode
// step's linear layer) is XLA's dot, not the matrix-product kernel (which
// copies the weight into oneDNN's layout on every call); the same weight
// with 32 rows (a prefill) and a few rows of a small weight are the
// kernel's.
func TestMatvecStaysXLA(t *testing.T) {
	for _, c := range []struct {
		name   string
		xd, wd []int64
		kernel bool
	}{
		{"one row", []int64{1, 768}, []int64{768, 256}, false},
		{"16 rows", []int64{16, 1, 768}, []int64{768, 2048}, false},
		{"32 rows", []int64{32, 768}, []int64{768, 256}, true},
		{"small weight", []int64{4, 128}, []int64{128, 256}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			module := lowerMatmul(t, c.xd, c.wd, nil, []string{cpu.MatmulKernel})
			if got := strings.Contains(module, cpu.MatmulKernel); got != c.kernel {
				t.Errorf("kernel called %v, want %v:\n%s", got, c.kernel, module)
			}
		})
	}
}
