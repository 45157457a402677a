// Package cpu is the XLA CPU platform's part of lowering: the choices that
// pay on XLA CPU only, kept out of the generic rules of package lower. It
// sets the CPU's option defaults (half floats computed in float32,
// convolution weights uploaded HWIO, depthwise convolutions as
// multiply-adds, small-map convolutions as matrix products), fuses
// epilogues into convolutions and matrix products (fxgraph's
// FuseEpilogues) when the kernel library is loaded, and computes float32
// convolutions, matrix products, max and average pooling, softmax and layer
// norm with xserve's CPU kernels (cpukernels/, oneDNN behind XLA FFI custom
// calls) where they take them.
//
// The kernels' calling convention (targets, attributes, activation codes,
// layouts) is defined once, here (abi.go); cpukernels/kernel_abi.h is
// generated from it and a test keeps the two equal.
package cpu

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
)

// Platform returns the CPU platform, for lower.New.
func Platform() *lower.Platform {
	return &lower.Platform{Name: "cpu", Defaults: defaults, Specialized: specialized, Register: register,
		CustomCalls: []string{ConvKernel, MatmulKernel, PoolKernel, AvgPoolKernel, SoftmaxKernel, LayerNormKernel, QConvKernel}}
}

func defaults(o *lower.Options) {
	for _, b := range []**bool{&o.HalfInF32, &o.ConvWeightsHWIO, &o.DepthwiseMulAdd, &o.ConvAsDot} {
		if *b == nil {
			v := true
			*b = &v
		}
	}
}

// specialized fuses epilogues when the kernels that apply them are
// loaded.
func specialized(g *fxgraph.Graph, o lower.Options) {
	if o.HasKernel(ConvKernel) || o.HasKernel(MatmulKernel) {
		g.FuseEpilogues()
	}
}

func register(r *lower.Registry, o lower.Options) {
	r.SetPrimitives(lower.Primitives{Dot: dot, Conv: conv, MaxPool: maxPool, AvgPool: avgPool, Softmax: softmax, LayerNorm: layerNorm, QConv: qconv})
}
