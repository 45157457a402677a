package decomp

import (
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// AttentionOptions are the variants of scaled dot-product attention that
// Attention computes.
type AttentionOptions struct {
	// Mask is added to the scores (a float tensor), or keeps the scores
	// where true (a bool tensor, -inf elsewhere); it broadcasts against
	// the scores [..., L, S]. Nil for none.
	Mask *fxgraph.Node
	// Causal keeps key j for query i when j <= i (the lower triangle);
	// exclusive with Mask.
	Causal bool
	// Scale multiplies the scores; 0 means 1/sqrt(E), E the query's last
	// dim (which must then be static).
	Scale float64
	// Softcap, when > 0, soft-caps the scaled scores before the mask:
	// softcap * tanh(scores / softcap).
	Softcap float64
	// GQA repeats each of k's and v's heads (dim -3) over the query heads
	// that share it (grouped-query attention).
	GQA bool
}

// Attention is scaled dot-product attention, softmax(q k^T * scale + mask)
// v, for q [..., L, E], k [..., S, E] and v [..., S, Ev], computed as
// torch's math backend does: q and k each scaled by sqrt(scale), softmax
// over the last dim, and rows that a mask leaves without any finite score
// giving zeros (torch's _safe_softmax). It is the one decomposition of
// attention: aten.scaled_dot_product_attention's, and that of ONNX's
// Attention and the com.microsoft attention operators, which call it with
// their masks. The result is [..., L, Ev].
func Attention(e *fxgraph.Emitter, q, k, v *fxgraph.Node, o AttentionOptions) (*fxgraph.Node, error) {
	c := &Call{Op: fxgraph.AtenScaledDotProductAttention, Emitter: e}
	return c.attention(q, k, v, o)
}

// decSDPA decomposes aten.scaled_dot_product_attention (Attention).
func decSDPA(c *Call) error {
	q, err := c.tensor("query")
	if err != nil {
		return err
	}
	k, err := c.tensor("key")
	if err != nil {
		return err
	}
	v, err := c.tensor("value")
	if err != nil {
		return err
	}
	var o AttentionOptions
	if o.Mask, err = c.optTensor("attn_mask"); err != nil {
		return err
	}
	p, err := c.floatArg("dropout_p")
	if err != nil {
		return err
	}
	if p != 0 {
		return c.errorf(ErrUnsupported, "dropout_p=%v: attention dropout is random; export with dropout_p=0 for inference", p)
	}
	if o.Causal, err = c.boolArg("is_causal"); err != nil {
		return err
	}
	if o.GQA, err = c.boolArg("enable_gqa"); err != nil {
		return err
	}
	if c.arg("scale") != nil {
		if o.Scale, err = c.floatArg("scale"); err != nil {
			return err
		}
	}
	y, err := c.attention(q, k, v, o)
	if err != nil {
		return err
	}
	return c.bind(0, y)
}

func (c *Call) attention(q, k, v *fxgraph.Node, o AttentionOptions) (*fxgraph.Node, error) {
	if o.Causal && o.Mask != nil {
		return nil, c.errorf(ErrFormat, "both a mask and causal are set")
	}
	qm, km := q.Val(), k.Val()
	if qm.Rank() < 2 || km.Rank() < 2 || v.Val().Rank() < 2 {
		return nil, c.errorf(ErrUnsupported, "query %s, key %s, value %s: want rank >= 2", qm, km, v.Val())
	}
	scale := o.Scale
	if scale == 0 {
		e := qm.Shape[qm.Rank()-1]
		if !e.IsStatic() || e.Size <= 0 {
			return nil, c.errorf(ErrUnsupported, "query %s has a symbolic head dim and no scale", qm)
		}
		scale = 1 / math.Sqrt(float64(e.Size))
	}
	if o.GQA {
		var err error
		if k, err = c.repeatHeads(k, q); err != nil {
			return nil, err
		}
		if v, err = c.repeatHeads(v, q); err != nil {
			return nil, err
		}
	}
	scores, err := c.attentionScores(q, k, scale, o.Softcap)
	if err != nil {
		return nil, err
	}
	e := &expr{c: c}
	safe := o.Mask != nil
	switch {
	case o.Mask != nil && o.Mask.Val().DType == tensor.Bool:
		scores = e.op(fxgraph.AtenWhereScalarOther, o.Mask, scores, math.Inf(-1))
	case o.Mask != nil:
		scores = e.op(fxgraph.AtenAddTensor, scores, o.Mask)
	case o.Causal:
		tril, err := c.causalMask(q, k)
		if err != nil {
			return nil, err
		}
		scores = e.op(fxgraph.AtenWhereScalarOther, tril, scores, math.Inf(-1))
	}
	attn := e.op(fxgraph.Aten_Softmax, scores, int64(-1), false)
	if safe {
		// _safe_softmax: a row whose scores are all -inf gives zeros, not NaN.
		finite := e.op(fxgraph.AtenLogicalNot, e.op(fxgraph.AtenEqScalar, scores, math.Inf(-1)))
		attn = e.op(fxgraph.AtenWhereScalarOther, e.op(fxgraph.AtenAnyDim, finite, int64(-1), true), attn, 0.0)
	}
	y := e.op(fxgraph.AtenMatmul, attn, v)
	return y, e.err
}

// attentionScores is q k^T * scale, q and k each scaled by sqrt(scale),
// soft-capped when softcap > 0.
func (c *Call) attentionScores(q, k *fxgraph.Node, scale, softcap float64) (*fxgraph.Node, error) {
	e := &expr{c: c}
	sf := math.Sqrt(scale)
	qs := e.op(fxgraph.AtenMulScalar, q, sf)
	ks := e.op(fxgraph.AtenMulScalar, e.op(fxgraph.AtenTransposeInt, k, int64(-2), int64(-1)), sf)
	scores := e.op(fxgraph.AtenMatmul, qs, ks)
	if softcap > 0 {
		scores = e.op(fxgraph.AtenMulScalar, e.op(fxgraph.AtenTanh, e.op(fxgraph.AtenMulScalar, scores, 1/softcap)), softcap)
	}
	return scores, e.err
}

// causalMask is the [L, S] lower-triangular keep mask of q [..., L, E] and
// k [..., S, E].
func (c *Call) causalMask(q, k *fxgraph.Node) (*fxgraph.Node, error) {
	l, err := c.dim(q, q.Val().Rank()-2)
	if err != nil {
		return nil, c.errorf(errSentinel(err), "%s", trimSentinel(err))
	}
	s, err := c.dim(k, k.Val().Rank()-2)
	if err != nil {
		return nil, c.errorf(errSentinel(err), "%s", trimSentinel(err))
	}
	e := &expr{c: c}
	ones := e.opKw(fxgraph.AtenFull, map[string]any{"dtype": tensor.Bool}, []any{l, s}, true)
	tril := e.op(fxgraph.AtenTril, ones)
	return tril, e.err
}

// repeatHeads repeats each head of kv (dim -3) so that it has as many heads
// as q (grouped-query attention).
func (c *Call) repeatHeads(kv, q *fxgraph.Node) (*fxgraph.Node, error) {
	km, qm := kv.Val(), q.Val()
	if km.Rank() < 3 || qm.Rank() < 3 {
		return nil, c.errorf(ErrUnsupported, "enable_gqa with %s and %s", qm, km)
	}
	hk, hq := km.Shape[km.Rank()-3], qm.Shape[qm.Rank()-3]
	if !hk.IsStatic() || !hq.IsStatic() || hk.Size == 0 || hq.Size%hk.Size != 0 {
		return nil, c.errorf(ErrUnsupported, "enable_gqa with %s query heads and %s key/value heads", hq, hk)
	}
	if hq.Size == hk.Size {
		return kv, nil
	}
	r := hq.Size / hk.Size
	dims, err := c.dims(kv)
	if err != nil {
		return nil, err
	}
	at := int64(len(dims) - 2)
	u, err := c.emit("", fxgraph.AtenUnsqueeze, []any{kv, at}, nil)
	if err != nil {
		return nil, err
	}
	exp := append(append(append([]any{}, dims[:at]...), r), dims[at:]...)
	e, err := c.emit("", fxgraph.AtenExpand, []any{u, exp}, nil)
	if err != nil {
		return nil, err
	}
	shape := append([]any{}, dims...)
	shape[at-1] = hq.Size
	return c.emit("", fxgraph.AtenReshape, []any{e, shape}, nil)
}
