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

// foldOneBatchNorm folds bn into the convolution it follows, when the
// convolution feeds only bn, bn's output 0 is its only use, and the
// weights and statistics are constants of matching sizes.
func (g *Graph) foldOneBatchNorm(bn *Node) bool {
	conv, out, ok := bnFoldable(bn)
	if !ok {
		return false
	}
	p, ok := g.bnParams(conv, bn)
	if !ok {
		return false
	}
	nw, nb := p.fold()
	prev := g.SetInsertPoint(conv)
	defer g.SetInsertPoint(prev)
	wNode := g.AddConstant(conv.Name+"_bn_weight", nw)
	bNode := g.AddConstant(conv.Name+"_bn_bias", nb)
	args := append([]any(nil), conv.Args...)
	args[1], args[2] = wNode, bNode
	fused := g.AddNamedCall(conv.Name+"_bn", conv.Op, args, conv.Kwargs)
	fused.Meta = cloneMeta(out.Meta)
	g.ReplaceAllUses(out, fused)
	return true
}

// bnFoldable returns the convolution bn follows and bn's one user (its
// output 0), when the pattern is the one foldOneBatchNorm folds.
func bnFoldable(bn *Node) (conv, out *Node, ok bool) {
	conv, ok = bn.Arg(0).(*Node)
	if !ok || conv.Opcode != CallFunction || conv.Op != AtenConvolution || len(conv.users) != 1 {
		return nil, nil, false
	}
	users := bn.Users()
	if len(users) != 1 || users[0].Op != GetItem {
		return nil, nil, false
	}
	if i, _ := AsInt(users[0].Arg(1)); i != 0 {
		return nil, nil, false
	}
	if transposed, _ := AsInt(conv.Arg(6)); transposed != 0 {
		return nil, nil, false
	}
	return conv, users[0], true
}

// bnFold is what folding a batch norm into a convolution reads: the
// convolution's weight and bias (nil: none) and the norm's scale, shift
// (nil: 1 and 0), statistics and epsilon.
type bnFold struct {
	w, bias, gamma, beta, mean, variance *tensor.Tensor
	eps                                  float64
}

// bnParams reads the constants of conv and bn; false when one is not a
// constant or their sizes differ.
func (g *Graph) bnParams(conv, bn *Node) (bnFold, bool) {
	constArg := func(n *Node, i int) *tensor.Tensor {
		m, ok := n.Arg(i).(*Node)
		if !ok {
			return nil
		}
		return g.ConstValue(m)
	}
	p := bnFold{w: constArg(conv, 1)}
	w := p.w
	if w == nil || (w.DType != tensor.Float32 && w.DType != tensor.Float64) || w.Rank() < 1 {
		return p, false
	}
	if conv.Arg(2) != nil {
		if p.bias = constArg(conv, 2); p.bias == nil {
			return p, false
		}
	}
	p.gamma, p.beta, p.mean, p.variance = constArg(bn, 1), constArg(bn, 2), constArg(bn, 3), constArg(bn, 4)
	var err error
	p.eps, err = bn.ParamFloat("eps")
	if p.mean == nil || p.variance == nil || err != nil {
		return p, false
	}
	for _, t := range []*tensor.Tensor{p.gamma, p.beta, p.mean, p.variance, p.bias} {
		if t != nil && t.NumElements() != w.Shape[0] {
			return p, false
		}
	}
	if (bn.Arg(1) != nil && p.gamma == nil) || (bn.Arg(2) != nil && p.beta == nil) {
		return p, false
	}
	return p, true
}

// fold returns the folded convolution's weight and bias.
func (p bnFold) fold() (nw, nb *tensor.Tensor) {
	at := func(t *tensor.Tensor, i int64, def float64) float64 {
		if t == nil {
			return def
		}
		return t.Float64At(i)
	}
	w := p.w
	outC := w.Shape[0]
	nw = tensor.New(w.DType, w.Shape...)
	nb = tensor.New(w.DType, outC)
	per := w.NumElements() / max(outC, 1)
	for c := int64(0); c < outC; c++ {
		s := at(p.gamma, c, 1) / math.Sqrt(at(p.variance, c, 0)+p.eps)
		for j := int64(0); j < per; j++ {
			nw.SetFloat64(c*per+j, w.Float64At(c*per+j)*s)
		}
		nb.SetFloat64(c, (at(p.bias, c, 0)-at(p.mean, c, 0))*s+at(p.beta, c, 0))
	}
	return nw, nb
}
