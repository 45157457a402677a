package lower

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// mulRule is aten.mul.Tensor. A dequantization (a float product with an
// integer converted to float: DequantizeLinear, or the scaling after
// MatMulInteger) is rounded on its own, behind an optimization barrier:
// ONNX Runtime computes it in a kernel of its own, whereas XLA CPU would
// contract it with a following addition into a fused multiply-add, whose
// last bit then moves the next dynamic quantization by a step.
func mulRule(ctx *Context, n *fxgraph.Node, a, b *stablehlo.Value, ct tensor.DType) (*stablehlo.Value, error) {
	if ct == tensor.Bool {
		return a.Block().And(a, b)
	}
	m, err := a.Block().Multiply(a, b)
	if err != nil || !ct.IsFloat() || !isDequantization(n) {
		return m, err
	}
	kept, err := m.Block().OptimizationBarrier(m)
	if err != nil {
		return nil, err
	}
	return kept[0], nil
}

// isDequantization reports whether an operand of the product n is an
// integer tensor converted to float.
func isDequantization(n *fxgraph.Node) bool {
	for _, a := range n.Args {
		c, ok := a.(*fxgraph.Node)
		if !ok || c.Op != fxgraph.Aten_ToCopy || !c.Val().DType.IsFloat() || len(c.Args) == 0 {
			continue
		}
		if src, ok := c.Args[0].(*fxgraph.Node); ok && src.Val().DType.IsInt() {
			return true
		}
	}
	return false
}
