package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerTransformer registers the transformer operators of opset 23:
// Attention, RMSNormalization and RotaryEmbedding. ONNX defines each as a
// function of standard operators; the converters build the same
// computation from the IR's ops (as torch.export decomposes
// scaled_dot_product_attention), so they need no op of their own.
func registerTransformer(cs converters) {
	cs.register("", "Attention", 23, onnxAttention)
	cs.register("", "RMSNormalization", 23, onnxRMSNormalization)
	cs.register("", "RotaryEmbedding", 23, onnxRotaryEmbedding)
	cs.register("", "TensorScatter", 24, onnxTensorScatter)
}

// onnxRMSNormalization converts RMSNormalization(X, scale) as its ONNX
// function body computes it (msRMSNorm): X over sqrt(mean(X^2) + epsilon)
// across the dims from axis on, in float32 (stash_type 1, the only one
// defined), cast back to X's dtype, times scale.
func onnxRMSNormalization(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, err := c.Input(1)
	if err != nil {
		return err
	}
	if st := c.AttrInt("stash_type", 1); st != 1 {
		return Unsupported("RMSNormalization stash_type %d (only 1, float32)", st)
	}
	y, _, err := msRMSNorm(c, x, scale, c.AttrInt("axis", -1), float64(c.AttrFloat("epsilon", 1e-5)))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// onnxRotaryEmbedding converts RotaryEmbedding(X, cos_cache, sin_cache,
// position_ids): X [B, S, N*H] (num_heads N) or [B, N, S, H]; the caches
// [positions, rot/2] gathered at position_ids [B, S], or already [B, S,
// rot/2] without them; the first rotary_embedding_dim values of each head
// rotated in halves or interleaved pairs.
func onnxRotaryEmbedding(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	cosC, err := c.Input(1)
	if err != nil {
		return err
	}
	sinC, err := c.Input(2)
	if err != nil {
		return err
	}
	pos, err := c.OptInput(3)
	if err != nil {
		return err
	}
	cm := Meta(cosC)
	half := cm.Shape[cm.Rank()-1]
	if !half.IsStatic() || pos != nil && cm.Rank() != 2 || pos == nil && cm.Rank() != 3 {
		return fmt.Errorf("RotaryEmbedding cos_cache of shape %s: want [positions, rot/2] with position_ids, [B, S, rot/2] without", cm.Shape)
	}
	rot := c.AttrInt("rotary_embedding_dim", 0)
	if rot == 0 {
		rot = 2 * half.Size
	}
	xh, err := rotaryHeads(c, x, c.AttrInt("num_heads", 0))
	if err != nil {
		return err
	}
	if hd := Meta(xh).Shape[3]; !hd.IsStatic() || rot > hd.Size || rot != 2*half.Size {
		return fmt.Errorf("RotaryEmbedding rotary_embedding_dim %d, cos_cache %s, head size %s", rot, cm.Shape, hd)
	}
	if pos != nil {
		if pos, err = nnCast(c, pos, tensor.Int64); err != nil {
			return err
		}
	}
	out, err := msRotate(c, xh, pos, cosC, sinC, rot, half.Size, c.AttrInt("interleaved", 0) != 0)
	if err != nil {
		return err
	}
	if Meta(x).Rank() == 4 {
		out, err = c.Emit(fxgraph.AtenPermute, out, []any{int64(0), int64(2), int64(1), int64(3)})
	} else {
		var b, s any
		if b, s, err = msDims2(c, x); err == nil {
			out, err = c.Emit(fxgraph.AtenReshape, out, []any{b, s, Meta(x).Shape[2].Size})
		}
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// rotaryHeads returns x as [B, S, N, H]: a [B, N, S, H] input transposed,
// a [B, S, N*H] one split into heads heads.
func rotaryHeads(c *Ctx, x *fxgraph.Node, heads int64) (*fxgraph.Node, error) {
	xm := Meta(x)
	switch xm.Rank() {
	case 4:
		return c.Emit(fxgraph.AtenPermute, x, []any{int64(0), int64(2), int64(1), int64(3)})
	case 3:
		w := xm.Shape[2]
		if !w.IsStatic() || heads <= 0 || w.Size%heads != 0 {
			return nil, fmt.Errorf("RotaryEmbedding input of shape %s with num_heads %d: want [B, S, num_heads*head_size]", xm.Shape, heads)
		}
		b, s, err := msDims2(c, x)
		if err != nil {
			return nil, err
		}
		return c.Emit(fxgraph.AtenView, x, []any{b, s, heads, w.Size / heads})
	}
	return nil, fmt.Errorf("RotaryEmbedding input of shape %s, want rank 3 or 4", xm.Shape)
}

// attention holds one Attention node's operands, per head: q [B, Hq, S,
// D], k [B, Hkv, T, D], v [B, Hkv, T, Dv] (past keys and values already
// prepended).
type attention struct {
	c          *Ctx
	q, k, v    *fxgraph.Node
	past       int64 // past sequence length
	rank3      bool
	qHeads     int64
	kvHeads    int64
	dt         tensor.DType
	s, t       int64 // query and total key lengths
	headSize   int64
	present    [2]*fxgraph.Node
	bias       *fxgraph.Node // additive, broadcasting against [B, Hq, S, T]; nil for none
	scaleRoot  float64       // sqrt(scale): q and k are each scaled by it
	softcap    float64
	outputMode int64
}

// onnxAttention converts Attention (opset 23: Q, K, V, attn_mask,
// past_key, past_value; opset 24 adds nonpad_kv_seqlen) as the ONNX
// reference computes it: per-head Q and K each scaled by sqrt(scale)
// (default 1/sqrt(head size)), past keys and values prepended (outputs
// present_key and present_value), the attention mask (bool: keep; float:
// added; shorter than the keys: padded as masked), the causal mask
// (aligned to the upper left after the past) and the key padding lengths
// as one additive bias, key/value heads repeated for grouped-query
// attention, softcap, softmax (in softmax_precision) and the weighted sum
// of V; qk_matmul_output is the product before the bias (mode 0), with it
// (1), after softcap (2) or after softmax (3).
func onnxAttention(c *Ctx, n *Node) error {
	a, err := newAttention(c)
	if err != nil {
		return err
	}
	if err := a.buildBias(); err != nil {
		return err
	}
	y, qk, err := a.attend()
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	c.SetOutput(1, a.present[0])
	c.SetOutput(2, a.present[1])
	if c.HasOutput(3) {
		c.SetOutput(3, qk)
	}
	return nil
}

func newAttention(c *Ctx) (*attention, error) {
	in, err := c.someInputs(6, 3)
	if err != nil {
		return nil, err
	}
	a := &attention{c: c, dt: Meta(in[0]).DType, softcap: float64(c.AttrFloat("softcap", 0)), outputMode: c.AttrInt("qk_matmul_output_mode", 0)}
	a.rank3 = Meta(in[0]).Rank() == 3
	a.qHeads, a.kvHeads = c.AttrInt("q_num_heads", 0), c.AttrInt("kv_num_heads", 0)
	if a.q, err = a.heads(in[0], a.qHeads); err != nil {
		return nil, err
	}
	if a.k, err = a.heads(in[1], a.kvHeads); err != nil {
		return nil, err
	}
	if a.v, err = a.heads(in[2], a.kvHeads); err != nil {
		return nil, err
	}
	qd, qok := Meta(a.q).Shape.Static()
	kd, kok := Meta(a.k).Shape.Static()
	if !qok || !kok {
		return nil, Unsupported("Attention of symbolic shapes %s and %s", Meta(a.q).Shape, Meta(a.k).Shape)
	}
	a.qHeads, a.kvHeads, a.s, a.headSize = qd[1], kd[1], qd[2], qd[3]
	scale := float64(c.AttrFloat("scale", 0))
	if c.Attr("scale") == nil {
		scale = 1 / math.Sqrt(float64(a.headSize))
	}
	a.scaleRoot = math.Sqrt(scale)
	for i, past := range []*fxgraph.Node{in[4], in[5]} {
		cur := []*fxgraph.Node{a.k, a.v}[i]
		if past != nil {
			if i == 0 {
				pd, ok := Meta(past).Shape.Static()
				if !ok || len(pd) != 4 {
					return nil, Unsupported("Attention past_key of shape %s", Meta(past).Shape)
				}
				a.past = pd[2]
			}
			if cur, err = c.Emit(fxgraph.AtenCat, []any{past, cur}, int64(2)); err != nil {
				return nil, err
			}
		}
		a.present[i] = cur
	}
	a.k, a.v = a.present[0], a.present[1]
	a.t = kd[2] + a.past
	if a.qHeads != a.kvHeads {
		if a.kvHeads == 0 || a.qHeads%a.kvHeads != 0 {
			return nil, fmt.Errorf("Attention with %d query heads and %d key/value heads, want a multiple", a.qHeads, a.kvHeads)
		}
		if a.k, err = msRepeatHeads(c, a.k, a.qHeads/a.kvHeads); err != nil {
			return nil, err
		}
		if a.v, err = msRepeatHeads(c, a.v, a.qHeads/a.kvHeads); err != nil {
			return nil, err
		}
	}
	if a.bias, err = a.maskBias(in[3]); err != nil {
		return nil, err
	}
	return a, nil
}

// heads returns a 3-D [B, S, N*H] input as [B, N, S, H]; 4-D inputs are
// already per head.
func (a *attention) heads(x *fxgraph.Node, n int64) (*fxgraph.Node, error) {
	xm := Meta(x)
	if xm.Rank() == 4 {
		return x, nil
	}
	if xm.Rank() != 3 || !a.rank3 {
		return nil, fmt.Errorf("Attention input of shape %s: want Q, K and V all 3-D or all 4-D", xm.Shape)
	}
	w := xm.Shape[2]
	if n <= 0 || !w.IsStatic() || w.Size%n != 0 {
		return nil, fmt.Errorf("Attention 3-D input of shape %s with %d heads (q_num_heads and kv_num_heads are required for 3-D inputs)", xm.Shape, n)
	}
	return msHeads(a.c, x, n, w.Size/n)
}

// maskBias turns attn_mask into an additive bias: a bool mask keeps where
// true (-inf elsewhere), a float mask is added as is; a mask with fewer
// keys than T is padded with masked keys.
func (a *attention) maskBias(mask *fxgraph.Node) (*fxgraph.Node, error) {
	if mask == nil {
		return nil, nil
	}
	c := a.c
	mm := Meta(mask)
	last := mm.Shape[mm.Rank()-1]
	if !last.IsStatic() {
		return nil, Unsupported("Attention attn_mask of symbolic shape %s", mm.Shape)
	}
	var err error
	if mm.DType == tensor.Bool {
		if mask, err = c.Emit(fxgraph.AtenWhereScalarSelf, mask, 0.0, math.Inf(-1)); err != nil {
			return nil, err
		}
		if mask, err = nnCast(c, mask, a.dt); err != nil {
			return nil, err
		}
	}
	if pad := a.t - last.Size; pad > 0 {
		return c.Emit(fxgraph.AtenConstantPadNd, mask, []any{int64(0), pad}, math.Inf(-1))
	}
	return mask, nil
}

// buildBias adds the causal mask and the key padding lengths
// (nonpad_kv_seqlen) to the bias.
func (a *attention) buildBias() error {
	c := a.c
	if c.AttrInt("is_causal", 0) != 0 {
		t := tensor.New(a.dt, a.s, a.t)
		for i := range a.s {
			for j := range a.t {
				if j > i+a.past {
					t.SetFloat64(i*a.t+j, math.Inf(-1))
				}
			}
		}
		if err := a.addBias(c.Constant("causal_mask", t)); err != nil {
			return err
		}
	}
	lens, err := c.OptInput(6)
	if err != nil || lens == nil {
		return err
	}
	// key j of batch b is padding when j >= lens[b]: [B, 1, 1, T].
	ar := c.Constant("key_positions", arangeTensor(a.t))
	l, err := nnCast(c, lens, tensor.Int64)
	if err != nil {
		return err
	}
	if l, err = viewAlong(c, l, 4, 0); err != nil {
		return err
	}
	keep, err := c.Emit(fxgraph.AtenLtTensor, ar, l)
	if err != nil {
		return err
	}
	pad, err := c.Emit(fxgraph.AtenWhereScalarSelf, keep, 0.0, math.Inf(-1))
	if err != nil {
		return err
	}
	if pad, err = nnCast(c, pad, a.dt); err != nil {
		return err
	}
	return a.addBias(pad)
}

func (a *attention) addBias(b *fxgraph.Node) error {
	if a.bias == nil {
		a.bias = b
		return nil
	}
	var err error
	a.bias, err = a.c.Emit(fxgraph.AtenAddTensor, a.bias, b)
	return err
}

// arangeTensor is 0..n-1 in int64.
func arangeTensor(n int64) *tensor.Tensor {
	t := tensor.New(tensor.Int64, n)
	for i := range n {
		t.SetInt64(i, i)
	}
	return t
}

// attend computes the attention and the requested qk_matmul_output.
func (a *attention) attend() (y, qk *fxgraph.Node, err error) {
	c := a.c
	scaled := func(x *fxgraph.Node) (*fxgraph.Node, error) {
		return c.Emit(fxgraph.AtenMulTensor, x, c.ScalarConst(a.dt, a.scaleRoot))
	}
	qs, err := scaled(a.q)
	if err != nil {
		return nil, nil, err
	}
	ks, err := scaled(a.k)
	if err != nil {
		return nil, nil, err
	}
	kt, err := c.Emit(fxgraph.AtenTransposeInt, ks, int64(2), int64(3))
	if err != nil {
		return nil, nil, err
	}
	s, err := c.Emit(fxgraph.AtenMatmul, qs, kt)
	if err != nil {
		return nil, nil, err
	}
	qk = s
	if a.bias != nil {
		if s, err = c.Emit(fxgraph.AtenAddTensor, s, a.bias); err != nil {
			return nil, nil, err
		}
	}
	if a.outputMode == 1 {
		qk = s
	}
	if a.softcap > 0 {
		if s, err = c.Emit(fxgraph.AtenDivScalar, s, a.softcap); err == nil {
			if s, err = c.Emit(fxgraph.AtenTanh, s); err == nil {
				s, err = c.Emit(fxgraph.AtenMulScalar, s, a.softcap)
			}
		}
		if err != nil {
			return nil, nil, err
		}
		if a.outputMode == 2 {
			qk = s
		}
	}
	if code := c.AttrInt("softmax_precision", 0); code != 0 {
		dt, err := dtypeOf(int32(code))
		if err != nil || !dt.IsFloat() {
			return nil, nil, fmt.Errorf("Attention softmax_precision %d: want a float type", code)
		}
		if s, err = nnCast(c, s, dt); err != nil {
			return nil, nil, err
		}
	}
	p, err := c.Emit(fxgraph.Aten_Softmax, s, int64(-1), false)
	if err != nil {
		return nil, nil, err
	}
	if a.outputMode == 3 {
		qk = p
	}
	if qk, err = nnCast(c, qk, a.dt); err != nil {
		return nil, nil, err
	}
	if p, err = nnCast(c, p, Meta(a.v).DType); err != nil {
		return nil, nil, err
	}
	if y, err = c.Emit(fxgraph.AtenMatmul, p, a.v); err != nil {
		return nil, nil, err
	}
	if y, err = nnCast(c, y, a.dt); err != nil {
		return nil, nil, err
	}
	if a.rank3 {
		y, err = msMergeHeads(c, y)
	}
	return y, qk, err
}

// onnxTensorScatter converts TensorScatter(past_cache, update,
// write_indices) (opset 24), a key/value cache update: along axis (default
// -2), batch entry b of update lands at positions write_indices[b] (0
// without them) onward, wrapping around the cache in mode "circular".
func onnxTensorScatter(c *Ctx, n *Node) error {
	past, err := c.Input(0)
	if err != nil {
		return err
	}
	upd, err := c.Input(1)
	if err != nil {
		return err
	}
	wi, err := c.OptInput(2)
	if err != nil {
		return err
	}
	pm, um := Meta(past), Meta(upd)
	pd, pok := pm.Shape.Static()
	ud, uok := um.Shape.Static()
	if !pok || !uok || len(pd) != len(ud) {
		return Unsupported("TensorScatter of %s and %s (static shapes of one rank)", pm.Shape, um.Shape)
	}
	r := len(pd)
	axis, err := fxgraph.NormDim(c.AttrInt("axis", -2), r)
	if err != nil || axis == 0 {
		return fmt.Errorf("TensorScatter axis %d of rank %d: want a dim after the batch", c.AttrInt("axis", -2), r)
	}
	mode := c.AttrString("mode", "linear")
	if mode != "linear" && mode != "circular" {
		return fmt.Errorf("TensorScatter mode %q, want linear or circular", mode)
	}
	// idx[b, s] = write_indices[b] + s, shaped [B, 1.., S, 1..] along axis.
	steps := make([]int64, r)
	for i := range steps {
		steps[i] = 1
	}
	steps[axis] = ud[axis]
	ar := tensor.New(tensor.Int64, steps...)
	for i := range ud[axis] {
		ar.SetInt64(i, i)
	}
	idx := c.Constant("update_positions", ar)
	if wi != nil {
		w, err := nnCast(c, wi, tensor.Int64)
		if err != nil {
			return err
		}
		if w, err = viewAlong(c, w, r, 0); err != nil {
			return err
		}
		if idx, err = c.Emit(fxgraph.AtenAddTensor, idx, w); err != nil {
			return err
		}
	}
	if mode == "circular" {
		if idx, err = c.Emit(fxgraph.AtenRemainderScalar, idx, pd[axis]); err != nil {
			return err
		}
	}
	if idx, err = c.Emit(fxgraph.AtenExpand, idx, ints(ud)); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenScatterSrc, past, int64(axis), idx, upd)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}
