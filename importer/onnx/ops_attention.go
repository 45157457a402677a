package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/decomp"
	"github.com/xserve/xserve/tensor"
)

// msDim returns dim i of x as an IR size argument (an int, or an
// aten.sym_size node when symbolic).
func msDim(c *Ctx, x *fxgraph.Node, i int) (any, error) {
	d := Meta(x).Shape[i]
	if d.IsStatic() {
		return d.Size, nil
	}
	return c.Emit(fxgraph.AtenSymSizeInt, x, int64(i))
}

// msDims2 returns dims 0 and 1 of x as IR size arguments.
func msDims2(c *Ctx, x *fxgraph.Node) (b, s any, err error) {
	if b, err = msDim(c, x, 0); err != nil {
		return nil, nil, err
	}
	s, err = msDim(c, x, 1)
	return b, s, err
}

// msArange is 0..n-1 in int64; for a symbolic n, the cumulative sum of
// n ones minus one.
func msArange(c *Ctx, n any) (*fxgraph.Node, error) {
	if _, ok := n.(int64); ok {
		return c.EmitKw(fxgraph.AtenArange, []any{n}, map[string]any{"dtype": tensor.Int64})
	}
	ones, err := c.EmitKw(fxgraph.AtenFull, []any{[]any{n}, 1.0}, map[string]any{"dtype": tensor.Int64})
	if err != nil {
		return nil, err
	}
	cs, err := c.EmitKw(fxgraph.AtenCumsum, []any{ones, int64(0)}, map[string]any{"dtype": tensor.Int64})
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenSubScalar, cs, int64(1))
}

// msHeads reshapes [B, S, N*H] to [B, N, S, H].
func msHeads(c *Ctx, x *fxgraph.Node, heads, headSize int64) (*fxgraph.Node, error) {
	b, err := msDim(c, x, 0)
	if err != nil {
		return nil, err
	}
	s, err := msDim(c, x, 1)
	if err != nil {
		return nil, err
	}
	y, err := c.Emit(fxgraph.AtenView, x, []any{b, s, heads, headSize})
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenPermute, y, []any{int64(0), int64(2), int64(1), int64(3)})
}

// msMergeHeads turns [B, N, S, H] into [B, S, N*H].
func msMergeHeads(c *Ctx, x *fxgraph.Node) (*fxgraph.Node, error) {
	m := Meta(x)
	y, err := c.Emit(fxgraph.AtenPermute, x, []any{int64(0), int64(2), int64(1), int64(3)})
	if err != nil {
		return nil, err
	}
	b, err := msDim(c, y, 0)
	if err != nil {
		return nil, err
	}
	s, err := msDim(c, y, 1)
	if err != nil {
		return nil, err
	}
	if !m.Shape[1].IsStatic() || !m.Shape[3].IsStatic() {
		return nil, Unsupported("attention with symbolic head count or size")
	}
	return c.Emit(fxgraph.AtenReshape, y, []any{b, s, m.Shape[1].Size * m.Shape[3].Size})
}

// msAttend is softmax(q k^T * scale + bias) v for q, k, v of [B, N, S|T,
// H]; bias (nil for none) broadcasts against [B, N, S, T]. The result is
// [B, S, N*Hv]. The attention itself is the shared decomposition of
// scaled dot-product attention (decomp.Attention).
func msAttend(c *Ctx, q, k, v, bias *fxgraph.Node, scale float64) (*fxgraph.Node, error) {
	return msAttendCapped(c, q, k, v, bias, scale, 0)
}

// msMaskBuilder collects the keep conditions of attention masks (bool,
// broadcasting against [B, N, S, T]) and additive biases.
type msMaskBuilder struct {
	c      *Ctx
	keep   *fxgraph.Node
	bias   *fxgraph.Node
	filter float64
}

func (m *msMaskBuilder) and(k *fxgraph.Node) error {
	if m.keep == nil {
		m.keep = k
		return nil
	}
	var err error
	m.keep, err = m.c.Emit(fxgraph.AtenLogicalAnd, m.keep, k)
	return err
}

// keyMask adds a key padding mask: [B, T] raw (non-zero keeps), [B, S, T]
// raw, [B] (keys before each end index are kept) or [2B] (ends, then
// starts).
func (m *msMaskBuilder) keyMask(mask, k *fxgraph.Node) error {
	c := m.c
	mm := Meta(mask)
	switch mm.Rank() {
	case 2, 3:
		keep, err := c.Emit(fxgraph.AtenNeScalar, mask, 0.0)
		if err != nil {
			return err
		}
		if mm.Rank() == 2 {
			keep, err = c.Emit(fxgraph.AtenUnsqueeze, keep, int64(1))
			if err == nil {
				keep, err = c.Emit(fxgraph.AtenUnsqueeze, keep, int64(1))
			}
		} else {
			keep, err = c.Emit(fxgraph.AtenUnsqueeze, keep, int64(1))
		}
		if err != nil {
			return err
		}
		return m.and(keep)
	case 1:
		t, err := msDim(c, k, 2)
		if err != nil {
			return err
		}
		j, err := msArange(c, t)
		if err != nil {
			return err
		}
		if j, err = c.Emit(fxgraph.AtenView, j, []any{int64(1), int64(1), int64(1), int64(-1)}); err != nil {
			return err
		}
		mi, err := nnCast(c, mask, tensor.Int64)
		if err != nil {
			return err
		}
		bd := Meta(k).Shape[0]
		twice := false
		if mm.Shape[0].IsStatic() && bd.IsStatic() && mm.Shape[0].Size == 2*bd.Size {
			twice = true
		}
		ends := mi
		if twice {
			if ends, err = c.Emit(fxgraph.AtenSliceTensor, mi, int64(0), int64(0), bd.Size, int64(1)); err != nil {
				return err
			}
		}
		if ends, err = c.Emit(fxgraph.AtenView, ends, []any{int64(-1), int64(1), int64(1), int64(1)}); err != nil {
			return err
		}
		keep, err := c.Emit(fxgraph.AtenLtTensor, j, ends)
		if err != nil {
			return err
		}
		if err := m.and(keep); err != nil {
			return err
		}
		if twice {
			starts, err := c.Emit(fxgraph.AtenSliceTensor, mi, int64(0), bd.Size, 2*bd.Size, int64(1))
			if err != nil {
				return err
			}
			if starts, err = c.Emit(fxgraph.AtenView, starts, []any{int64(-1), int64(1), int64(1), int64(1)}); err != nil {
				return err
			}
			ge, err := c.Emit(fxgraph.AtenGeTensor, j, starts)
			if err != nil {
				return err
			}
			return m.and(ge)
		}
		return nil
	}
	return Unsupported("attention mask of shape %s", mm.Shape)
}

// causal keeps key j for query i when j <= i + past, past = T - S.
func (m *msMaskBuilder) causal(q, k *fxgraph.Node) error {
	c := m.c
	s, err := msDim(c, q, 2)
	if err != nil {
		return err
	}
	t, err := msDim(c, k, 2)
	if err != nil {
		return err
	}
	i, err := msArange(c, s)
	if err != nil {
		return err
	}
	j, err := msArange(c, t)
	if err != nil {
		return err
	}
	sd, td := Meta(q).Shape[2], Meta(k).Shape[2]
	if !sd.IsStatic() || !td.IsStatic() {
		return Unsupported("causal attention with symbolic sequence lengths")
	}
	if i, err = c.Emit(fxgraph.AtenAddTensor, i, c.ScalarConst(tensor.Int64, float64(td.Size-sd.Size))); err != nil {
		return err
	}
	if i, err = c.Emit(fxgraph.AtenView, i, []any{int64(-1), int64(1)}); err != nil {
		return err
	}
	keep, err := c.Emit(fxgraph.AtenLeTensor, j, i)
	if err != nil {
		return err
	}
	return m.and(keep)
}

func (m *msMaskBuilder) addBias(b *fxgraph.Node) error {
	if m.bias == nil {
		m.bias = b
		return nil
	}
	var err error
	m.bias, err = m.c.Emit(fxgraph.AtenAddTensor, m.bias, b)
	return err
}

// result is the additive bias: mask_filter_value where not kept, plus the
// attention biases.
func (m *msMaskBuilder) result(dt tensor.DType) (*fxgraph.Node, error) {
	out := m.bias
	if m.keep != nil {
		b, err := m.c.Emit(fxgraph.AtenWhereSelf, m.keep, m.c.ScalarConst(dt, 0), m.c.ScalarConst(dt, m.filter))
		if err != nil {
			return nil, err
		}
		if out == nil {
			return b, nil
		}
		return m.c.Emit(fxgraph.AtenAddTensor, out, b)
	}
	return out, nil
}

// msMaskedAttend is the attention of Attention and MultiHeadAttention over
// per-head q, k, v: scaled by the scale attribute (else 1/sqrt(headSize)),
// with the key-padding mask, the causal mask (unidirectional) and the
// attention bias, each optional, added as one bias.
func msMaskedAttend(c *Ctx, q, k, v, mask, abias *fxgraph.Node, headSize int64) (*fxgraph.Node, error) {
	scale := c.AttrFloat("scale", 0)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(headSize))
	}
	mb := &msMaskBuilder{c: c, filter: c.AttrFloat("mask_filter_value", -10000)}
	if mask != nil {
		if err := mb.keyMask(mask, k); err != nil {
			return nil, err
		}
	}
	if c.AttrInt("unidirectional", 0) != 0 {
		if err := mb.causal(q, k); err != nil {
			return nil, err
		}
	}
	if abias != nil {
		if err := mb.addBias(abias); err != nil {
			return nil, err
		}
	}
	mbias, err := mb.result(Meta(q).DType)
	if err != nil {
		return nil, err
	}
	return msAttend(c, q, k, v, mbias, scale)
}

// msAttention converts com.microsoft Attention (input, weights, bias,
// mask_index, past, attention_bias): the packed QKV projection, then
// scaled dot-product attention over num_heads heads; outputs output and
// present (K and V stacked).
func msAttention(c *Ctx, n *Node) error {
	in, err := msInputs(c, 7)
	if err != nil {
		return err
	}
	x, w, bias := in[0], in[1], in[2]
	if x == nil || w == nil {
		return fmt.Errorf("Attention needs input and weights")
	}
	if Meta(x).Rank() != 3 {
		return fmt.Errorf("Attention input of shape %s, want [batch, sequence, hidden]", Meta(x).Shape)
	}
	if in[6] != nil {
		return Unsupported("Attention with past_sequence_length")
	}
	qkv, err := c.Emit(fxgraph.AtenMatmul, x, w)
	if err != nil {
		return err
	}
	if bias != nil {
		if qkv, err = c.Emit(fxgraph.AtenAddTensor, qkv, bias); err != nil {
			return err
		}
	}
	return msAttentionQKV(c, qkv, Meta(w), in[3], in[4], in[5])
}

// msQAttention converts com.microsoft QAttention (input, weight, bias,
// input_scale, weight_scale, mask_index, input_zero_point,
// weight_zero_point, past): Attention whose QKV projection is the int32
// product of the zero-shifted uint8 input and int8/uint8 weight, scaled by
// input_scale * weight_scale (single or per column), plus the float bias.
func msQAttention(c *Ctx, n *Node) error {
	in, err := msInputs(c, 9)
	if err != nil {
		return err
	}
	if in[0] == nil || in[1] == nil || in[2] == nil || in[3] == nil || in[4] == nil {
		return fmt.Errorf("QAttention needs input, weight, bias, input_scale and weight_scale")
	}
	if Meta(in[0]).Rank() != 3 {
		return fmt.Errorf("QAttention input of shape %s, want [batch, sequence, hidden]", Meta(in[0]).Shape)
	}
	acc, err := nnQuantMatMul(c, 0, 6, 1, 7)
	if err != nil {
		return err
	}
	qkv, err := qScaledAcc(c, acc, in[3], in[4], in[2])
	if err != nil {
		return err
	}
	return msAttentionQKV(c, qkv, Meta(in[1]), in[5], in[8], nil)
}

// msAttentionQKV is Attention from the projected qkv [B, S, Hq+Hk+Hv]
// (w is the weight's meta, for its width) with the optional mask_index,
// past and attention_bias; it sets output and present.
func msAttentionQKV(c *Ctx, qkv *fxgraph.Node, w fxgraph.TensorMeta, mask, past, abias *fxgraph.Node) error {
	if c.AttrInt("do_rotary", 0) != 0 {
		return Unsupported("Attention with do_rotary")
	}
	heads := c.AttrInt("num_heads", 0)
	wd, ok := w.Shape.Static()
	if !ok || len(wd) != 2 || heads <= 0 {
		return fmt.Errorf("Attention weights %s with num_heads %d", w, heads)
	}
	sizes := c.AttrInts("qkv_hidden_sizes", nil)
	if sizes == nil {
		sizes = []int64{wd[1] / 3, wd[1] / 3, wd[1] / 3}
	}
	if len(sizes) != 3 || sizes[0]+sizes[1]+sizes[2] != wd[1] || sizes[0]%heads != 0 || sizes[2]%heads != 0 {
		return fmt.Errorf("Attention qkv_hidden_sizes %v for weights %v and %d heads", sizes, wd, heads)
	}
	var err error
	var parts [3]*fxgraph.Node
	off := int64(0)
	for i, sz := range sizes {
		p, err := c.Emit(fxgraph.AtenSliceTensor, qkv, int64(2), off, off+sz, int64(1))
		if err != nil {
			return err
		}
		off += sz
		if parts[i], err = msHeads(c, p, heads, sz/heads); err != nil {
			return err
		}
	}
	q, k, v := parts[0], parts[1], parts[2]
	if past != nil {
		pk, err := c.Emit(fxgraph.AtenSelectInt, past, int64(0), int64(0))
		if err != nil {
			return err
		}
		pv, err := c.Emit(fxgraph.AtenSelectInt, past, int64(0), int64(1))
		if err != nil {
			return err
		}
		if k, err = c.Emit(fxgraph.AtenCat, []any{pk, k}, int64(2)); err != nil {
			return err
		}
		if v, err = c.Emit(fxgraph.AtenCat, []any{pv, v}, int64(2)); err != nil {
			return err
		}
	}
	y, err := msMaskedAttend(c, q, k, v, mask, abias, sizes[0]/heads)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	if c.HasOutput(1) {
		pr, err := c.Emit(fxgraph.AtenCat, []any{k, v}, int64(0))
		if err != nil {
			return err
		}
		b, err := msDim(c, k, 0)
		if err != nil {
			return err
		}
		kd := Meta(k).Shape
		if !kd[2].IsStatic() || !kd[3].IsStatic() {
			return Unsupported("Attention present output with symbolic sequence length")
		}
		if pr, err = c.Emit(fxgraph.AtenView, pr, []any{int64(2), b, heads, kd[2].Size, kd[3].Size}); err != nil {
			return err
		}
		c.SetOutput(1, pr)
	}
	return nil
}

// msMultiHeadAttention converts com.microsoft MultiHeadAttention (query,
// key, value, bias, key_padding_mask, attention_bias, past_key,
// past_value): 3-D query, key and value (or 4-D [B, N, L, H] key and
// value); outputs output, present_key and present_value.
func msMultiHeadAttention(c *Ctx, n *Node) error {
	in, err := msInputs(c, 10)
	if err != nil {
		return err
	}
	q, k, v, bias, mask, abias, pk, pv := in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]
	if in[8] != nil || in[9] != nil {
		return Unsupported("MultiHeadAttention with past_sequence_length or cache_indirection")
	}
	heads := c.AttrInt("num_heads", 0)
	if q == nil || k == nil || v == nil || heads <= 0 {
		return Unsupported("MultiHeadAttention without separate query, key and value (packed QKV/KV) or num_heads")
	}
	if Meta(q).Rank() != 3 {
		return Unsupported("MultiHeadAttention query of shape %s", Meta(q).Shape)
	}
	qd := Meta(q).Shape[2]
	if !qd.IsStatic() || qd.Size%heads != 0 {
		return fmt.Errorf("MultiHeadAttention query width %s for %d heads", qd, heads)
	}
	d := qd.Size
	if bias != nil {
		bd := Meta(bias).Shape
		if len(bd) != 1 || !bd[0].IsStatic() {
			return fmt.Errorf("MultiHeadAttention bias of shape %s", bd)
		}
		if q, err = msAddSlice(c, q, bias, 0, d); err != nil {
			return err
		}
		if Meta(k).Rank() == 3 {
			if k, err = msAddSlice(c, k, bias, d, 2*d); err != nil {
				return err
			}
			if v, err = msAddSlice(c, v, bias, 2*d, bd[0].Size); err != nil {
				return err
			}
		}
	}
	if q, err = msHeads(c, q, heads, d/heads); err != nil {
		return err
	}
	split := func(x *fxgraph.Node) (*fxgraph.Node, error) {
		switch Meta(x).Rank() {
		case 4:
			return x, nil
		case 3:
			w := Meta(x).Shape[2]
			if !w.IsStatic() || w.Size%heads != 0 {
				return nil, fmt.Errorf("MultiHeadAttention key/value width %s for %d heads", w, heads)
			}
			return msHeads(c, x, heads, w.Size/heads)
		}
		return nil, Unsupported("MultiHeadAttention key/value of shape %s", Meta(x).Shape)
	}
	if k, err = split(k); err != nil {
		return err
	}
	if v, err = split(v); err != nil {
		return err
	}
	if pk != nil && pv != nil {
		if k, err = c.Emit(fxgraph.AtenCat, []any{pk, k}, int64(2)); err != nil {
			return err
		}
		if v, err = c.Emit(fxgraph.AtenCat, []any{pv, v}, int64(2)); err != nil {
			return err
		}
	}
	y, err := msMaskedAttend(c, q, k, v, mask, abias, d/heads)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	c.SetOutput(1, k)
	c.SetOutput(2, v)
	return nil
}

// msAddSlice adds bias[lo:hi] to x.
func msAddSlice(c *Ctx, x, bias *fxgraph.Node, lo, hi int64) (*fxgraph.Node, error) {
	b, err := c.Emit(fxgraph.AtenSliceTensor, bias, int64(0), lo, hi, int64(1))
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenAddTensor, x, b)
}

// msRotate rotates the first rot values of each head of xh [B, S, N, H]
// by the angles of positions pos ([B or 1, S], int64) in the cos/sin
// caches ([positions, rot/2]; with pos nil, the caches are the angles
// already, [B, S, rot/2]): halves, or interleaved pairs.
func msRotate(c *Ctx, xh, pos, cosC, sinC *fxgraph.Node, rot, half int64, interleaved bool) (*fxgraph.Node, error) {
	hd := Meta(xh).Shape[3]
	var err error
	tab := func(t *fxgraph.Node) (*fxgraph.Node, error) {
		if pos != nil {
			if t, err = c.Call1("Gather", 13, []*fxgraph.Node{t, pos}, AInt("axis", 0)); err != nil {
				return nil, err
			}
		}
		return c.Emit(fxgraph.AtenUnsqueeze, t, int64(2)) // [B, S, 1, half]
	}
	cosT, err := tab(cosC)
	if err != nil {
		return nil, err
	}
	sinT, err := tab(sinC)
	if err != nil {
		return nil, err
	}
	sl := func(v *fxgraph.Node, axis int, lo, hi int64) (*fxgraph.Node, error) {
		return c.Emit(fxgraph.AtenSliceTensor, v, int64(axis), lo, hi, int64(1))
	}
	var x1, x2 *fxgraph.Node
	r, err := sl(xh, 3, 0, rot)
	if err != nil {
		return nil, err
	}
	if interleaved {
		b, s, err := msDims2(c, xh)
		if err != nil {
			return nil, err
		}
		pairs, err := c.Emit(fxgraph.AtenView, r, []any{b, s, Meta(xh).Shape[2].Size, half, int64(2)})
		if err != nil {
			return nil, err
		}
		if x1, err = c.Emit(fxgraph.AtenSelectInt, pairs, int64(4), int64(0)); err != nil {
			return nil, err
		}
		if x2, err = c.Emit(fxgraph.AtenSelectInt, pairs, int64(4), int64(1)); err != nil {
			return nil, err
		}
	} else {
		if x1, err = sl(r, 3, 0, half); err != nil {
			return nil, err
		}
		if x2, err = sl(r, 3, half, rot); err != nil {
			return nil, err
		}
	}
	mul := func(a, b *fxgraph.Node) (*fxgraph.Node, error) { return c.Emit(fxgraph.AtenMulTensor, a, b) }
	ac, err := mul(x1, cosT)
	if err != nil {
		return nil, err
	}
	bs, err := mul(x2, sinT)
	if err != nil {
		return nil, err
	}
	r1, err := c.Emit(fxgraph.AtenSubTensor, ac, bs)
	if err != nil {
		return nil, err
	}
	bc, err := mul(x2, cosT)
	if err != nil {
		return nil, err
	}
	as, err := mul(x1, sinT)
	if err != nil {
		return nil, err
	}
	r2, err := c.Emit(fxgraph.AtenAddTensor, bc, as)
	if err != nil {
		return nil, err
	}
	var out *fxgraph.Node
	if interleaved {
		u1, err := c.Emit(fxgraph.AtenUnsqueeze, r1, int64(4))
		if err != nil {
			return nil, err
		}
		u2, err := c.Emit(fxgraph.AtenUnsqueeze, r2, int64(4))
		if err != nil {
			return nil, err
		}
		st, err := c.Emit(fxgraph.AtenCat, []any{u1, u2}, int64(4))
		if err != nil {
			return nil, err
		}
		b, s, err := msDims2(c, xh)
		if err != nil {
			return nil, err
		}
		if out, err = c.Emit(fxgraph.AtenReshape, st, []any{b, s, Meta(xh).Shape[2].Size, rot}); err != nil {
			return nil, err
		}
	} else if out, err = c.Emit(fxgraph.AtenCat, []any{r1, r2}, int64(3)); err != nil {
		return nil, err
	}
	if rot < hd.Size {
		rest, err := sl(xh, 3, rot, hd.Size)
		if err != nil {
			return nil, err
		}
		if out, err = c.Emit(fxgraph.AtenCat, []any{out, rest}, int64(3)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// msRotaryEmbedding converts com.microsoft RotaryEmbedding (input,
// position_ids, cos_cache, sin_cache): input [B, S, N*H] or [B, N, S, H];
// position_ids [B, S] or a 1-element start offset; the first
// rotary_embedding_dim of each head rotated in halves or interleaved pairs.
func msRotaryEmbedding(c *Ctx, n *Node) error {
	in, err := msInputs(c, 4)
	if err != nil {
		return err
	}
	x, pos, cosC, sinC := in[0], in[1], in[2], in[3]
	if x == nil || pos == nil || cosC == nil || sinC == nil {
		return fmt.Errorf("RotaryEmbedding needs input, position_ids, cos_cache and sin_cache")
	}
	if c.AttrInt("is_packed_batching", 0) != 0 {
		return Unsupported("RotaryEmbedding with is_packed_batching")
	}
	cd, ok := Meta(cosC).Shape.Static()
	if !ok || len(cd) != 2 {
		return Unsupported("RotaryEmbedding cos_cache of shape %s", Meta(cosC).Shape)
	}
	half := cd[1]
	rot := c.AttrInt("rotary_embedding_dim", 0)
	if rot == 0 {
		rot = 2 * half
	}
	heads := c.AttrInt("num_heads", 0)
	if half <= 0 || rot <= 0 || heads < 0 {
		return fmt.Errorf("RotaryEmbedding cos_cache of shape %v with rotary_embedding_dim %d and num_heads %d", cd, rot, heads)
	}
	xh, err := ropeHeads(c, x, heads, rot)
	if err != nil {
		return err
	}
	hd := Meta(xh).Shape[3]
	if !hd.IsStatic() || rot > hd.Size || rot != 2*half {
		return fmt.Errorf("RotaryEmbedding rotary_embedding_dim %d, cos_cache %v, head size %s", rot, cd, hd)
	}
	if qSingle(Meta(pos)) {
		if pos, err = ropePositions(c, xh, pos); err != nil {
			return err
		}
	}
	interleaved := c.AttrInt("interleaved", 0) != 0
	out, err := msRotate(c, xh, pos, cosC, sinC, rot, half, interleaved)
	if err != nil {
		return err
	}
	if out, err = ropeUnheads(c, x, out); err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// ropeHeads views RotaryEmbedding's input x ([B, S, N*H], or [B, N, S, H])
// as [B, S, N, H]; heads 0 means the width over rot.
func ropeHeads(c *Ctx, x *fxgraph.Node, heads, rot int64) (*fxgraph.Node, error) {
	xm := Meta(x)
	switch xm.Rank() {
	case 3:
		w := xm.Shape[2]
		if !w.IsStatic() {
			return nil, Unsupported("RotaryEmbedding of symbolic width %s", w)
		}
		if heads == 0 {
			heads = w.Size / rot
		}
		if heads <= 0 || w.Size%heads != 0 {
			return nil, fmt.Errorf("RotaryEmbedding input width %d for %d heads", w.Size, heads)
		}
		b, s, err := msDims2(c, x)
		if err != nil {
			return nil, err
		}
		return c.Emit(fxgraph.AtenView, x, []any{b, s, heads, w.Size / heads})
	case 4:
		return c.Emit(fxgraph.AtenPermute, x, []any{int64(0), int64(2), int64(1), int64(3)})
	}
	return nil, Unsupported("RotaryEmbedding input of shape %s", xm.Shape)
}

// ropePositions turns a single position_ids (the first position) into the
// positions [1, S] of xh's sequence [B, S, N, H].
func ropePositions(c *Ctx, xh, pos *fxgraph.Node) (*fxgraph.Node, error) {
	s, err := msDim(c, xh, 1)
	if err != nil {
		return nil, err
	}
	ar, err := msArange(c, s)
	if err != nil {
		return nil, err
	}
	off, err := c.Emit(fxgraph.AtenView, pos, []any{})
	if err == nil {
		off, err = nnCast(c, off, tensor.Int64)
	}
	if err != nil {
		return nil, err
	}
	if pos, err = c.Emit(fxgraph.AtenAddTensor, ar, off); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenUnsqueeze, pos, int64(0))
}

// ropeUnheads gives the rotated heads out [B, S, N, H] the layout of
// RotaryEmbedding's input x.
func ropeUnheads(c *Ctx, x, out *fxgraph.Node) (*fxgraph.Node, error) {
	xm := Meta(x)
	if xm.Rank() == 4 {
		return c.Emit(fxgraph.AtenPermute, out, []any{int64(0), int64(2), int64(1), int64(3)})
	}
	b, s, err := msDims2(c, x)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenReshape, out, []any{b, s, xm.Shape[2].Size})
}

// msRepeatHeads repeats each of the kv heads of x [B, Hkv, T, D] groups
// times: [B, Hkv*groups, T, D].
func msRepeatHeads(c *Ctx, x *fxgraph.Node, groups int64) (*fxgraph.Node, error) {
	if groups == 1 {
		return x, nil
	}
	sz, err := nnSizeList(c, x)
	if err != nil {
		return nil, err
	}
	u, err := c.Emit(fxgraph.AtenUnsqueeze, x, int64(2))
	if err != nil {
		return nil, err
	}
	exp := []any{sz[0], sz[1], groups, sz[2], sz[3]}
	if u, err = c.Emit(fxgraph.AtenExpand, u, exp); err != nil {
		return nil, err
	}
	hk, ok := sz[1].(int64)
	if !ok {
		return nil, Unsupported("GroupQueryAttention with a symbolic kv head count")
	}
	return c.Emit(fxgraph.AtenReshape, u, []any{sz[0], hk * groups, sz[2], sz[3]})
}

// msGroupQueryAttention converts com.microsoft GroupQueryAttention (query,
// key, value, past_key, past_value, seqlens_k, total_sequence_length,
// cos_cache, sin_cache): causal attention of num_heads query heads over
// kv_num_heads key/value heads (separate, or packed in query when key and
// value are absent), the new keys and values appended to the past ones
// (each batch entry's past full, no padding). Query i of batch b sits at
// position seqlens_k[b] + 1 - S + i: it sees keys up to there and, with
// do_rotary, is rotated (as is its key) by that position's angles.
// Outputs output, present_key, present_value. position_ids,
// attention_bias, head_sink, local_window_size and smooth_softmax are
// unsupported.
func msGroupQueryAttention(c *Ctx, n *Node) error {
	in, err := msInputs(c, 9)
	if err != nil {
		return err
	}
	g, err := gqaCheck(c, in)
	if err != nil {
		return err
	}
	q, k, v, err := g.unpack(c, in[0], in[1], in[2])
	if err != nil {
		return err
	}
	if err = g.positions(c, q, in[5]); err != nil {
		return err
	}
	if q, err = g.split(c, q, g.heads, g.rotary); err != nil {
		return err
	}
	if k, err = g.split(c, k, g.kvHeads, g.rotary); err != nil {
		return err
	}
	if v, err = g.split(c, v, g.kvHeads, false); err != nil {
		return err
	}
	if pk, pv := in[3], in[4]; pk != nil && pv != nil {
		if k, err = msGQAPresent(c, pk, k, g.sl, g.s); err != nil {
			return err
		}
		if v, err = msGQAPresent(c, pv, v, g.sl, g.s); err != nil {
			return err
		}
	}
	c.SetOutput(1, k)
	c.SetOutput(2, v)
	kr, err := msRepeatHeads(c, k, g.heads/g.kvHeads)
	if err != nil {
		return err
	}
	vr, err := msRepeatHeads(c, v, g.heads/g.kvHeads)
	if err != nil {
		return err
	}
	bias, err := gqaCausalBias(c, kr, g.pos, Meta(q).DType)
	if err != nil {
		return err
	}
	scale := c.AttrFloat("scale", 0)
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(g.d))
	}
	y, err := msAttendCapped(c, q, kr, vr, bias, scale, c.AttrFloat("softcap", 0))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// gqa is what GroupQueryAttention's steps share: its head counts and
// size, the rotary caches, and the query positions.
type gqa struct {
	heads, kvHeads, d int64
	rotary            bool
	cos, sin          *fxgraph.Node // in[7], in[8] with do_rotary
	pos               *fxgraph.Node // [B, S] query positions
	sl                *fxgraph.Node // seqlens_k as int64 [B, 1]
	s                 int64         // the sequence length S
}

// gqaCheck checks GroupQueryAttention's inputs and attributes.
func gqaCheck(c *Ctx, in []*fxgraph.Node) (*gqa, error) {
	q, k, v, seqlens := in[0], in[1], in[2], in[5]
	g := &gqa{rotary: c.AttrInt("do_rotary", 0) != 0, cos: in[7], sin: in[8]}
	for i := 7; i < c.NumInputs(); i++ {
		if c.HasInput(i) && !(g.rotary && (i == 7 || i == 8)) {
			return nil, Unsupported("GroupQueryAttention input %d (position_ids, attention_bias or head_sink)", i)
		}
	}
	if (k == nil) != (v == nil) {
		return nil, fmt.Errorf("GroupQueryAttention needs both key and value, or neither (packed QKV)")
	}
	if c.AttrInt("local_window_size", -1) != -1 || c.AttrInt("smooth_softmax", 0) != 0 {
		return nil, Unsupported("GroupQueryAttention with local_window_size or smooth_softmax")
	}
	if seqlens == nil {
		return nil, fmt.Errorf("GroupQueryAttention needs seqlens_k")
	}
	for i, x := range []*fxgraph.Node{q, k, v} {
		if x != nil && Meta(x).Rank() != 3 {
			return nil, Unsupported("GroupQueryAttention input %d of shape %s (only [batch, sequence, hidden])", i, Meta(x).Shape)
		}
	}
	g.heads, g.kvHeads = c.AttrInt("num_heads", 0), c.AttrInt("kv_num_heads", 0)
	if qw := Meta(q).Shape[2]; g.heads <= 0 || g.kvHeads <= 0 || g.heads%g.kvHeads != 0 || !qw.IsStatic() {
		return nil, fmt.Errorf("GroupQueryAttention num_heads %d, kv_num_heads %d for query width %s", g.heads, g.kvHeads, qw)
	}
	if g.rotary && (g.cos == nil || g.sin == nil) {
		return nil, fmt.Errorf("GroupQueryAttention with do_rotary needs cos_cache and sin_cache")
	}
	return g, nil
}

// unpack returns query, key and value, sliced out of a packed QKV input
// when key is nil, and sets the head size.
func (g *gqa) unpack(c *Ctx, q, k, v *fxgraph.Node) (_, _, _ *fxgraph.Node, err error) {
	heads, kvHeads := g.heads, g.kvHeads
	qw := Meta(q).Shape[2]
	if k != nil {
		kw := Meta(k).Shape[2]
		if qw.Size%heads != 0 || !kw.IsStatic() || kw.Size != qw.Size/heads*kvHeads {
			return nil, nil, nil, fmt.Errorf("GroupQueryAttention num_heads %d, kv_num_heads %d for query width %s and key width %s", heads, kvHeads, qw, kw)
		}
		g.d = qw.Size / heads
		return q, k, v, nil
	}
	// packed QKV: [B, S, (num_heads + 2*kv_num_heads) * head_size]
	if qw.Size%(heads+2*kvHeads) != 0 {
		return nil, nil, nil, fmt.Errorf("GroupQueryAttention packed QKV width %d for %d + 2*%d heads", qw.Size, heads, kvHeads)
	}
	d := qw.Size / (heads + 2*kvHeads)
	g.d = d
	packed := q
	if q, err = c.Emit(fxgraph.AtenSliceTensor, packed, int64(2), int64(0), heads*d, int64(1)); err != nil {
		return nil, nil, nil, err
	}
	if k, err = c.Emit(fxgraph.AtenSliceTensor, packed, int64(2), heads*d, (heads+kvHeads)*d, int64(1)); err != nil {
		return nil, nil, nil, err
	}
	if v, err = c.Emit(fxgraph.AtenSliceTensor, packed, int64(2), (heads+kvHeads)*d, qw.Size, int64(1)); err != nil {
		return nil, nil, nil, err
	}
	return q, k, v, nil
}

// positions sets the query positions [B, S]: query i of batch b sits at
// position seqlens_k[b] + 1 - S + i.
func (g *gqa) positions(c *Ctx, q, seqlens *fxgraph.Node) error {
	sd := Meta(q).Shape[1]
	if !sd.IsStatic() {
		return Unsupported("GroupQueryAttention with a symbolic sequence length")
	}
	g.s = sd.Size
	qpos, err := msArange(c, sd.Size)
	if err != nil {
		return err
	}
	if qpos, err = c.Emit(fxgraph.AtenAddTensor, qpos, c.ScalarConst(tensor.Int64, float64(1-sd.Size))); err != nil {
		return err
	}
	sl, err := nnCast(c, seqlens, tensor.Int64)
	if err != nil {
		return err
	}
	if g.sl, err = c.Emit(fxgraph.AtenView, sl, []any{int64(-1), int64(1)}); err != nil {
		return err
	}
	g.pos, err = c.Emit(fxgraph.AtenAddTensor, g.sl, qpos)
	return err
}

// split views x [B, S, n*d] as heads [B, n, S, d], rotated first when
// rotate.
func (g *gqa) split(c *Ctx, x *fxgraph.Node, n int64, rotate bool) (*fxgraph.Node, error) {
	b, s, err := msDims2(c, x)
	if err != nil {
		return nil, err
	}
	y, err := c.Emit(fxgraph.AtenView, x, []any{b, s, n, g.d})
	if err != nil {
		return nil, err
	}
	if rotate {
		cd, ok := Meta(g.cos).Shape.Static()
		if !ok || len(cd) != 2 || 2*cd[1] > g.d {
			return nil, fmt.Errorf("GroupQueryAttention cos_cache of shape %s for head size %d", Meta(g.cos).Shape, g.d)
		}
		if y, err = msRotate(c, y, g.pos, g.cos, g.sin, 2*cd[1], cd[1], c.AttrInt("rotary_interleaved", 0) != 0); err != nil {
			return nil, err
		}
	}
	return c.Emit(fxgraph.AtenPermute, y, []any{int64(0), int64(2), int64(1), int64(3)})
}

// gqaCausalBias returns the attention bias of dtype dt: 0 where key j may
// be attended by query i of batch b (j <= pos[b, i]), -inf elsewhere;
// kr is the keys [B, H, T, D].
func gqaCausalBias(c *Ctx, kr, pos *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	t, err := msDim(c, kr, 2)
	if err != nil {
		return nil, err
	}
	j, err := msArange(c, t)
	if err != nil {
		return nil, err
	}
	last, err := c.Emit(fxgraph.AtenUnsqueeze, pos, int64(1))
	if err == nil {
		last, err = c.Emit(fxgraph.AtenUnsqueeze, last, int64(3)) // [B, 1, S, 1]
	}
	if err != nil {
		return nil, err
	}
	keep, err := c.Emit(fxgraph.AtenLeTensor, j, last)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenWhereSelf, keep, c.ScalarConst(dt, 0), c.ScalarConst(dt, math.Inf(-1)))
}

// msGQAPresent is GroupQueryAttention's present key (or value): the past
// [B, Hkv, P, D] with the step's x [B, Hkv, S, D] written, as ONNX Runtime
// writes it, at offset seqlens_k[b] + 1 - S of each batch entry: the
// entries before it are the past's, the S after it x's, the rest zero.
// A full past (offset P) gives past ++ x; a past
// whose valid entries are a prefix (a cache buffer longer than the
// sequence) gets x right after them, where the queries' causal mask (keys
// up to seqlens_k) looks. sl is seqlens_k as int64 [B, 1].
func msGQAPresent(c *Ctx, past, x, sl *fxgraph.Node, s int64) (*fxgraph.Node, error) {
	e := &emitChain{c: c}
	cat := e.op(fxgraph.AtenCat, []any{past, x}, int64(2))
	if e.err != nil {
		return nil, e.err
	}
	sz, err := nnSizeList(c, cat)
	if err != nil {
		return nil, err
	}
	j, err := msArange(c, sz[2])
	if err != nil {
		return nil, err
	}
	off := e.op(fxgraph.AtenAddTensor, sl, c.ScalarConst(tensor.Int64, float64(1-s)))
	rel := e.op(fxgraph.AtenSubTensor, j, off) // [B, T]: j - offset
	in := e.op(fxgraph.AtenLogicalAnd, e.op(fxgraph.AtenGeScalar, rel, int64(0)), e.op(fxgraph.AtenLtScalar, rel, s))
	idx := e.op(fxgraph.AtenClamp, rel, int64(0), s-1)
	idx = e.op(fxgraph.AtenUnsqueeze, e.op(fxgraph.AtenUnsqueeze, idx, int64(1)), int64(3))
	idx = e.op(fxgraph.AtenExpand, idx, sz)
	in = e.op(fxgraph.AtenUnsqueeze, e.op(fxgraph.AtenUnsqueeze, in, int64(1)), int64(3))
	before := e.op(fxgraph.AtenLtScalar, rel, int64(0))
	before = e.op(fxgraph.AtenUnsqueeze, e.op(fxgraph.AtenUnsqueeze, before, int64(1)), int64(3))
	kept := e.op(fxgraph.AtenWhereSelf, before, cat, c.ScalarConst(Meta(x).DType, 0))
	y := e.op(fxgraph.AtenWhereSelf, in, e.op(fxgraph.AtenGather, x, int64(2), idx), kept)
	return y, e.err
}

// msAttendCapped is msAttend with the scores soft-capped (softcap *
// tanh(scores / softcap)) before the bias when softcap > 0.
func msAttendCapped(c *Ctx, q, k, v, bias *fxgraph.Node, scale, softcap float64) (*fxgraph.Node, error) {
	o, err := decomp.Attention(c.Emitter(), q, k, v, decomp.AttentionOptions{Mask: bias, Scale: scale, Softcap: softcap})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	return msMergeHeads(c, o)
}
