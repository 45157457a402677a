package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerMicrosoft registers ONNX Runtime's fused and transformer contrib
// operators (domain com.microsoft), the ones its graph optimizers and
// transformers.optimizer write. Each is composed of standard operators'
// converters (Ctx.Call) and IR ops.
func registerMicrosoft(cs converters) {
	cs.register(msDomain, "FusedConv", 1, msFusedConv)
	cs.register(msDomain, "FusedGemm", 1, msFusedGemm)
	cs.register(msDomain, "FusedMatMul", 1, msFusedMatMul)
	cs.register(msDomain, "Gelu", 1, msGelu("Gelu"))
	cs.register(msDomain, "FastGelu", 1, msGelu("FastGelu"))
	cs.register(msDomain, "BiasGelu", 1, msGelu("BiasGelu"))
	cs.register(msDomain, "QuickGelu", 1, msQuickGelu)
	cs.register(msDomain, "BiasAdd", 1, msBiasAdd)
	cs.register(msDomain, "SkipLayerNormalization", 1, msSkipLayerNorm(false))
	cs.register(msDomain, "SkipSimplifiedLayerNormalization", 1, msSkipLayerNorm(true))
	cs.register(msDomain, "SimplifiedLayerNormalization", 1, msSimplifiedLayerNorm)
	cs.register("", "SimplifiedLayerNormalization", 1, msSimplifiedLayerNorm)
	// ONNX Runtime runs LayerNormalization in models of opset < 17 (its
	// optimizers write it there) with opset 17's semantics.
	cs.register("", "LayerNormalization", 1, nnLayerNormalization)
	cs.register(msDomain, "EmbedLayerNormalization", 1, msEmbedLayerNorm)
	cs.register(msDomain, "Attention", 1, msAttention)
	cs.register(msDomain, "QAttention", 1, msQAttention)
	cs.register(msDomain, "QEmbedLayerNormalization", 1, msQEmbedLayerNorm)
	cs.register(msDomain, "MultiHeadAttention", 1, msMultiHeadAttention)
	cs.register(msDomain, "GroupQueryAttention", 1, msGroupQueryAttention)
	cs.register(msDomain, "RotaryEmbedding", 1, msRotaryEmbedding)
	cs.register(msDomain, "NhwcConv", 1, msNhwcConv)
}

// msActivation applies a FusedConv/FusedGemm activation by name, with its
// parameters.
func msActivation(c *Ctx, y *fxgraph.Node, act string, params []float32) (*fxgraph.Node, error) {
	p := func(i int, def float32) float32 {
		if i < len(params) {
			return params[i]
		}
		return def
	}
	switch act {
	case "", "Identity":
		return y, nil
	case "Relu", "Tanh", "Sigmoid":
		return c.Call1(act, 13, []*fxgraph.Node{y})
	case "LeakyRelu":
		return c.Call1(act, 13, []*fxgraph.Node{y}, AFloat("alpha", p(0, 0.01)))
	case "HardSigmoid":
		return c.Call1(act, 6, []*fxgraph.Node{y}, AFloat("alpha", p(0, 0.2)), AFloat("beta", p(1, 0.5)))
	case "Clip":
		lo := c.ScalarConst(Meta(y).DType, float64(p(0, -math.MaxFloat32)))
		hi := c.ScalarConst(Meta(y).DType, float64(p(1, math.MaxFloat32)))
		return c.Call1(act, 13, []*fxgraph.Node{y, lo, hi})
	case "Elu":
		return c.Call1(act, 6, []*fxgraph.Node{y}, AFloat("alpha", p(0, 1)))
	}
	return nil, Unsupported("fused activation %q", act)
}

// msInputs returns inputs 0..n-1, nil where an optional one is absent.
func msInputs(c *Ctx, n int) ([]*fxgraph.Node, error) {
	out := make([]*fxgraph.Node, n)
	for i := range out {
		v, err := c.OptInput(i)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// convAttrs are the names of Conv's attributes.
func convAttrs() []string {
	return []string{"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}
}

// msFusedConv converts FusedConv (X, W, B, Z): activation(Conv(X, W, B) + Z).
func msFusedConv(c *Ctx, n *Node) error {
	in, err := msInputs(c, 4)
	if err != nil {
		return err
	}
	y, err := c.Call1("Conv", 11, in[:3], c.passAttrs(convAttrs()...)...)
	if err != nil {
		return err
	}
	if in[3] != nil {
		if y, err = c.Emit(fxgraph.AtenAddTensor, y, in[3]); err != nil {
			return err
		}
	}
	if y, err = msActivation(c, y, c.AttrString("activation", ""), c.AttrFloats("activation_params", nil)); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// msNhwcConv converts NhwcConv: Conv with channels-last X, W ([M, kH,
// kW, C/group], as transformers.optimizer's NhwcConv fusion writes it) and
// result.
func msNhwcConv(c *Ctx, n *Node) error {
	in, err := msInputs(c, 3)
	if err != nil {
		return err
	}
	if in[0] == nil || in[1] == nil {
		return fmt.Errorf("NhwcConv needs X and W")
	}
	x, err := qChannelsFirst(c, in[0], false)
	if err != nil {
		return err
	}
	w, err := qChannelsFirst(c, in[1], false)
	if err != nil {
		return err
	}
	y, err := c.Call1("Conv", 11, []*fxgraph.Node{x, w, in[2]}, c.passAttrs(convAttrs()...)...)
	if err != nil {
		return err
	}
	if y, err = qChannelsFirst(c, y, true); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// msFusedGemm converts FusedGemm: Gemm, then the activation with
// activation_alpha/beta.
func msFusedGemm(c *Ctx, n *Node) error {
	in, err := msInputs(c, 3)
	if err != nil {
		return err
	}
	y, err := c.Call1("Gemm", 13, in, c.passAttrs("alpha", "beta", "transA", "transB")...)
	if err != nil {
		return err
	}
	act := c.AttrString("activation", "")
	var params []float32
	if act == "LeakyRelu" || act == "Elu" {
		params = []float32{float32(c.AttrFloat("activation_alpha", 0.01))}
		if act == "Elu" {
			params[0] = float32(c.AttrFloat("activation_alpha", 1))
		}
	}
	if act == "HardSigmoid" {
		params = []float32{float32(c.AttrFloat("activation_alpha", 0.2)), float32(c.AttrFloat("activation_beta", 0.5))}
	}
	if act == "Clip" {
		return Unsupported("FusedGemm with Clip")
	}
	if y, err = msActivation(c, y, act, params); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// msFusedMatMul converts FusedMatMul: alpha * op(A) @ op(B), where op
// transposes the last two dims (transA/transB) and moves the first dim
// behind the batch dims (transBatchA/transBatchB).
func msFusedMatMul(c *Ctx, n *Node) error {
	a, err := c.Input(0)
	if err != nil {
		return err
	}
	b, err := c.Input(1)
	if err != nil {
		return err
	}
	if a, err = msMatOperand(c, a, c.AttrInt("transA", 0) != 0, c.AttrInt("transBatchA", 0) != 0); err != nil {
		return err
	}
	if b, err = msMatOperand(c, b, c.AttrInt("transB", 0) != 0, c.AttrInt("transBatchB", 0) != 0); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenMatmul, a, b)
	if err != nil {
		return err
	}
	if alpha := c.AttrFloat("alpha", 1); alpha != 1 {
		if y, err = c.Emit(fxgraph.AtenMulTensor, y, c.ScalarConst(Meta(y).DType, alpha)); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	return nil
}

func msMatOperand(c *Ctx, x *fxgraph.Node, trans, transBatch bool) (*fxgraph.Node, error) {
	r := Meta(x).Rank()
	if !trans && !transBatch {
		return x, nil
	}
	if r < 2 {
		return nil, Unsupported("FusedMatMul transposing a rank-%d operand", r)
	}
	perm := make([]int64, r)
	for i := range perm {
		perm[i] = int64(i)
	}
	if transBatch && r > 2 {
		for i := 0; i < r-2; i++ {
			perm[i] = int64(i + 1)
		}
		perm[r-2] = 0
	}
	if trans {
		perm[r-2], perm[r-1] = perm[r-1], perm[r-2]
	}
	return c.Emit(fxgraph.AtenPermute, x, ints(perm))
}

// msGelu converts Gelu (erf), FastGelu (tanh approximation, optional bias)
// and BiasGelu (erf of A + B).
func msGelu(op string) Converter {
	return func(c *Ctx, n *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		if op != "Gelu" && c.HasInput(1) {
			b, err := c.Input(1)
			if err != nil {
				return err
			}
			if x, err = c.Emit(fxgraph.AtenAddTensor, x, b); err != nil {
				return err
			}
		}
		approx := "none"
		if op == "FastGelu" {
			approx = "tanh"
		}
		y, err := c.EmitKw(fxgraph.AtenGelu, []any{x}, map[string]any{"approximate": approx})
		if err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// msQuickGelu converts QuickGelu: x * sigmoid(alpha * x).
func msQuickGelu(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	dt := Meta(x).DType
	s, err := c.Emit(fxgraph.AtenMulTensor, x, c.ScalarConst(dt, c.AttrFloat("alpha", float64(float32(1.702)))))
	if err != nil {
		return err
	}
	if s, err = c.Emit(fxgraph.AtenSigmoid, s); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenMulTensor, x, s)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// msBiasAdd converts BiasAdd: X + bias + skip.
func msBiasAdd(c *Ctx, n *Node) error {
	in, err := msInputs(c, 3)
	if err != nil {
		return err
	}
	if in[1] == nil || in[2] == nil {
		return fmt.Errorf("BiasAdd needs bias and skip")
	}
	y, err := c.Emit(fxgraph.AtenAddTensor, in[0], in[1])
	if err != nil {
		return err
	}
	if y, err = c.Emit(fxgraph.AtenAddTensor, y, in[2]); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// msRMSNorm normalizes x over its last axes from axis on by the root mean
// square, in float32, times scale; it returns the result in x's type and
// the float32 inverse RMS (kept dims).
func msRMSNorm(c *Ctx, x, scale *fxgraph.Node, axis int64, eps float64) (y, inv *fxgraph.Node, err error) {
	r := Meta(x).Rank()
	ax, err := fxgraph.NormDim(axis, max(r, 1))
	if err != nil {
		return nil, nil, err
	}
	var dims []any
	for i := ax; i < r; i++ {
		dims = append(dims, int64(i))
	}
	xf, err := nnCast(c, x, tensor.Float32)
	if err != nil {
		return nil, nil, err
	}
	sq, err := c.Emit(fxgraph.AtenMulTensor, xf, xf)
	if err != nil {
		return nil, nil, err
	}
	ms, err := c.Emit(fxgraph.AtenMeanDim, sq, dims, true)
	if err != nil {
		return nil, nil, err
	}
	if ms, err = c.Emit(fxgraph.AtenAddTensor, ms, c.ScalarConst(tensor.Float32, eps)); err != nil {
		return nil, nil, err
	}
	if inv, err = c.Emit(fxgraph.AtenRsqrt, ms); err != nil {
		return nil, nil, err
	}
	if y, err = c.Emit(fxgraph.AtenMulTensor, xf, inv); err != nil {
		return nil, nil, err
	}
	if y, err = nnCast(c, y, Meta(x).DType); err != nil {
		return nil, nil, err
	}
	if y, err = c.Emit(fxgraph.AtenMulTensor, y, scale); err != nil {
		return nil, nil, err
	}
	return y, inv, nil
}

// msSimplifiedLayerNorm converts SimplifiedLayerNormalization (RMSNorm):
// Y and the optional inv_std_var.
func msSimplifiedLayerNorm(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, err := c.Input(1)
	if err != nil {
		return err
	}
	y, inv, err := msRMSNorm(c, x, scale, c.AttrInt("axis", -1), c.AttrFloat("epsilon", float64(float32(1e-5))))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	c.SetOutput(1, inv)
	return nil
}

// msSkipLayerNorm converts SkipLayerNormalization (input, skip, gamma,
// beta, bias) and SkipSimplifiedLayerNormalization (input, skip, gamma,
// bias): the (RMS) layer norm of input + skip + bias over the last axis;
// outputs output, mean, inv_std_var and input_skip_bias_sum.
func msSkipLayerNorm(simplified bool) Converter {
	return func(c *Ctx, n *Node) error {
		in, err := msInputs(c, 5)
		if err != nil {
			return err
		}
		x, skip, gamma := in[0], in[1], in[2]
		if x == nil || skip == nil || gamma == nil {
			return fmt.Errorf("%s needs input, skip and gamma", n.OpType)
		}
		beta, bias := in[3], in[4]
		if simplified {
			beta, bias = nil, in[3]
		}
		s, err := c.Emit(fxgraph.AtenAddTensor, x, skip)
		if err != nil {
			return err
		}
		if bias != nil {
			if s, err = c.Emit(fxgraph.AtenAddTensor, s, bias); err != nil {
				return err
			}
		}
		eps := c.AttrFloat("epsilon", float64(float32(1e-12)))
		if simplified {
			y, inv, err := msRMSNorm(c, s, gamma, -1, eps)
			if err != nil {
				return err
			}
			c.SetOutput(0, y)
			c.SetOutput(2, inv)
			c.SetOutput(3, s)
			if c.HasOutput(1) {
				return Unsupported("%s output mean", n.OpType)
			}
			return nil
		}
		outs, err := c.Call("LayerNormalization", 17, []*fxgraph.Node{s, gamma, beta}, 3, AInt("axis", -1), AFloat("epsilon", float32(eps)))
		if err != nil {
			return err
		}
		c.SetOutput(0, outs[0])
		c.SetOutput(1, outs[1])
		c.SetOutput(2, outs[2])
		c.SetOutput(3, s)
		return nil
	}
}

// msEmbedLayerNorm converts EmbedLayerNormalization (input_ids,
// segment_ids, word_embedding, position_embedding, segment_embedding,
// gamma, beta, mask, position_ids): the layer norm of the summed
// embeddings; outputs output, mask_index (the mask's row sums, int32) and
// embedding_sum.
func msEmbedLayerNorm(c *Ctx, n *Node) error {
	in, err := msInputs(c, 9)
	if err != nil {
		return err
	}
	ids, seg, word, pos, segEmb, gamma, beta, mask, posIDs := in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8]
	if ids == nil || word == nil || pos == nil || gamma == nil || beta == nil {
		return fmt.Errorf("EmbedLayerNormalization needs input_ids, word_embedding, position_embedding, gamma and beta")
	}
	if Meta(ids).Rank() != 2 {
		return fmt.Errorf("EmbedLayerNormalization input_ids of shape %s, want [batch, sequence]", Meta(ids).Shape)
	}
	gather := func(table, idx *fxgraph.Node) (*fxgraph.Node, error) {
		return c.Call1("Gather", 13, []*fxgraph.Node{table, idx}, AInt("axis", 0))
	}
	sum, err := gather(word, ids)
	if err != nil {
		return err
	}
	if posIDs == nil {
		sl := Meta(ids).Shape[1]
		var seqLen any = sl.Size
		if !sl.IsStatic() {
			if seqLen, err = c.Emit(fxgraph.AtenSymSizeInt, ids, int64(1)); err != nil {
				return err
			}
		}
		if posIDs, err = msArange(c, seqLen); err != nil {
			return err
		}
		if posIDs, err = c.Emit(fxgraph.AtenUnsqueeze, posIDs, int64(0)); err != nil {
			return err
		}
	}
	pe, err := gather(pos, posIDs)
	if err != nil {
		return err
	}
	if sum, err = c.Emit(fxgraph.AtenAddTensor, sum, pe); err != nil {
		return err
	}
	if seg != nil && segEmb != nil {
		se, err := gather(segEmb, seg)
		if err != nil {
			return err
		}
		if sum, err = c.Emit(fxgraph.AtenAddTensor, sum, se); err != nil {
			return err
		}
	}
	eps := c.AttrFloat("epsilon", float64(float32(1e-12)))
	y, err := c.Call1("LayerNormalization", 17, []*fxgraph.Node{sum, gamma, beta}, AInt("axis", -1), AFloat("epsilon", float32(eps)))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	c.SetOutput(2, sum)
	if c.HasOutput(1) {
		var mi *fxgraph.Node
		if mask != nil {
			mi, err = nnCast(c, mask, tensor.Int32)
			if err == nil {
				mi, err = c.Emit(fxgraph.AtenSumDimIntList, mi, []any{int64(1)}, false)
			}
		} else {
			b := Meta(ids).Shape[0]
			var bs any = b.Size
			if !b.IsStatic() {
				if bs, err = c.Emit(fxgraph.AtenSymSizeInt, ids, int64(0)); err != nil {
					return err
				}
			}
			mi, err = c.EmitKw(fxgraph.AtenFull, []any{[]any{bs}, 0.0}, map[string]any{"dtype": tensor.Int32})
		}
		if err != nil {
			return err
		}
		if mi, err = nnCast(c, mi, tensor.Int32); err != nil {
			return err
		}
		c.SetOutput(1, mi)
	}
	return nil
}

// msQEmbedLayerNorm converts com.microsoft QEmbedLayerNormalization
// (input_ids, segment_ids, then the quantized word, position and segment
// embeddings, gamma and beta, mask, then their five scales and five zero
// points): EmbedLayerNormalization of the dequantized tables; outputs
// output and mask_index.
func msQEmbedLayerNorm(c *Ctx, n *Node) error {
	in, err := msInputs(c, 18)
	if err != nil {
		return err
	}
	args := make([]*fxgraph.Node, 8)
	copy(args, in[:8])
	for i := 2; i <= 6; i++ {
		if in[i] == nil {
			continue
		}
		if in[i+6] == nil {
			return fmt.Errorf("QEmbedLayerNormalization input %d has no scale (input %d)", i, i+6)
		}
		if args[i], err = dequantize(c, in[i], in[i+6], in[i+11], tensor.Float32); err != nil {
			return err
		}
	}
	outs, err := c.callIn(msDomain, "EmbedLayerNormalization", 1, args, 2, c.passAttrs("epsilon")...)
	if err != nil {
		return err
	}
	c.SetOutput(0, outs[0])
	if c.HasOutput(1) {
		c.SetOutput(1, outs[1])
	}
	return nil
}
