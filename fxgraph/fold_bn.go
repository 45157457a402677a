package fxgraph

import (
	"math"

	"github.com/xserve/xserve/tensor"
)

// FoldBatchNorm rewrites every inference batch norm that directly follows a
// convolution with constant weights into that convolution:
//
//	y = batch_norm(conv(x, W, b), gamma, beta, mean, var, eps)
//	  = conv(x, W * s, (b - mean) * s + beta)   with s = gamma / sqrt(var + eps)
//
// The new weights are computed on the host in float64 and stored in the
// weights' dtype (float32 or float64 only). It applies when the conv is not
// transposed, its only user is the batch norm, the batch norm's only user is
// getitem 0, and every weight, bias and statistic is a constant. It returns
// the number of batch norms folded. The graph's Meta must be set.
func (g *Graph) FoldBatchNorm() int {
	folded := 0
	for _, bn := range g.Nodes() {
		if bn.graph != g || bn.Opcode != CallFunction || bn.Op != Aten_NativeBatchNormLegitNoTraining {
			continue
		}
		if g.foldOneBatchNorm(bn) {
			folded++
		}
	}
	if folded > 0 {
		g.EliminateDeadCode()
	}
	return folded
}

func (g *Graph) foldOneBatchNorm(bn *Node) bool {
	conv, ok := bn.Arg(0).(*Node)
	if !ok || conv.Opcode != CallFunction || conv.Op != AtenConvolution || len(conv.users) != 1 {
		return false
	}
	users := bn.Users()
	if len(users) != 1 || users[0].Op != GetItem {
		return false
	}
	if i, _ := AsInt(users[0].Arg(1)); i != 0 {
		return false
	}
	if transposed, _ := AsInt(conv.Arg(6)); transposed != 0 {
		return false
	}
	constArg := func(n *Node, i int) *tensor.Tensor {
		m, ok := n.Arg(i).(*Node)
		if !ok {
			return nil
		}
		return g.ConstValue(m)
	}
	w := constArg(conv, 1)
	if w == nil || (w.DType != tensor.Float32 && w.DType != tensor.Float64) || w.Rank() < 1 {
		return false
	}
	outC := w.Shape[0]
	var bias *tensor.Tensor
	if conv.Arg(2) != nil {
		if bias = constArg(conv, 2); bias == nil {
			return false
		}
	}
	gamma, beta, mean, variance := constArg(bn, 1), constArg(bn, 2), constArg(bn, 3), constArg(bn, 4)
	eps, err := bn.ParamFloat("eps")
	if mean == nil || variance == nil || err != nil {
		return false
	}
	for _, t := range []*tensor.Tensor{gamma, beta, mean, variance, bias} {
		if t != nil && t.NumElements() != outC {
			return false
		}
	}
	if (bn.Arg(1) != nil && gamma == nil) || (bn.Arg(2) != nil && beta == nil) {
		return false
	}
	at := func(t *tensor.Tensor, i int64, def float64) float64 {
		if t == nil {
			return def
		}
		return t.Float64At(i)
	}
	nw := tensor.New(w.DType, w.Shape...)
	nb := tensor.New(w.DType, outC)
	per := w.NumElements() / max(outC, 1)
	for c := int64(0); c < outC; c++ {
		s := at(gamma, c, 1) / math.Sqrt(at(variance, c, 0)+eps)
		for j := int64(0); j < per; j++ {
			nw.SetFloat64(c*per+j, w.Float64At(c*per+j)*s)
		}
		nb.SetFloat64(c, (at(bias, c, 0)-at(mean, c, 0))*s+at(beta, c, 0))
	}
	prev := g.SetInsertPoint(conv)
	defer g.SetInsertPoint(prev)
	wNode := g.AddConstant(conv.Name+"_bn_weight", nw)
	bNode := g.AddConstant(conv.Name+"_bn_bias", nb)
	args := append([]any(nil), conv.Args...)
	args[1], args[2] = wNode, bNode
	fused := g.AddNamedCall(conv.Name+"_bn", conv.Op, args, conv.Kwargs)
	fused.Meta = cloneMeta(users[0].Meta)
	g.ReplaceAllUses(users[0], fused)
	return true
}
