package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// nbitsUnpack4 splits each uint8 of x [..., m] into its low and high
// nibbles, low first: [..., 2m].
func nbitsUnpack4(c *Ctx, x *fxgraph.Node) (*fxgraph.Node, error) {
	lo, err := c.Emit(fxgraph.AtenBitwiseAndScalar, x, int64(15))
	if err != nil {
		return nil, err
	}
	hi, err := c.Emit(fxgraph.AtenBitwiseRightShiftTensorScalar, x, int64(4))
	if err != nil {
		return nil, err
	}
	r := int64(Meta(x).Rank())
	if lo, err = c.Emit(fxgraph.AtenUnsqueeze, lo, r); err != nil {
		return nil, err
	}
	if hi, err = c.Emit(fxgraph.AtenUnsqueeze, hi, r); err != nil {
		return nil, err
	}
	both, err := c.Emit(fxgraph.AtenCat, []any{lo, hi}, r)
	if err != nil {
		return nil, err
	}
	d, ok := Meta(x).Shape.Static()
	if !ok {
		return nil, Unsupported("MatMulNBits with symbolic packed weight shape %s", Meta(x).Shape)
	}
	size := ints(d)
	size[len(size)-1] = d[len(d)-1] * 2
	return c.Emit(fxgraph.AtenReshape, both, size)
}

// msMatMulNBits converts com.microsoft MatMulNBits (A, B, scales,
// zero_points, g_idx, bias) with 4- or 8-bit weights: B [N, blocks,
// blob] holds column n's K values block by block (4-bit ones two a byte,
// low nibble first); each block's weights are (q - zero_point) * scale
// (zero point 2^(bits-1) by default, packed like B when uint8, per block
// when float). The dequantized [N, K] weight is folded at import when B,
// scales and zero points are constants; Y = A @ W^T + bias in float
// (ONNX Runtime's accuracy_level 0).
func msMatMulNBits(c *Ctx, n *Node) error {
	in, err := msInputs(c, 6)
	if err != nil {
		return err
	}
	a, b, scales, zps, gidx, bias := in[0], in[1], in[2], in[3], in[4], in[5]
	if a == nil || b == nil || scales == nil {
		return fmt.Errorf("MatMulNBits needs A, B and scales")
	}
	if gidx != nil {
		return Unsupported("MatMulNBits with g_idx")
	}
	if lvl := c.AttrInt("accuracy_level", 0); lvl == 4 {
		// ONNX Runtime's MLAS then quantizes A to int8 per block of K
		// (its own scale and rounding) and accumulates in int32: float
		// weights give other numbers, and greedy tokens drift from it.
		return Unsupported("MatMulNBits accuracy_level 4 (A quantized to int8 per block by ONNX Runtime's MLAS, " +
			"numbers xserve does not reproduce); build the model with accuracy_level 0 or 1 (ORT GenAI's model builder: " +
			"--extra_options accuracy_level=1)")
	}
	k, nOut, bits, block := c.AttrInt("K", 0), c.AttrInt("N", 0), c.AttrInt("bits", 4), c.AttrInt("block_size", 0)
	bd, ok := Meta(b).Shape.Static()
	if bits != 4 && bits != 8 {
		return Unsupported("MatMulNBits with %d-bit weights", bits)
	}
	if !ok || len(bd) != 3 || block < 16 || k <= 0 || bd[0] != nOut || bd[1] != (k+block-1)/block || bd[2] != block*bits/8 {
		return fmt.Errorf("MatMulNBits B of shape %s for K %d, N %d, bits %d, block_size %d", Meta(b).Shape, k, nOut, bits, block)
	}
	blocks := bd[1]
	q := b
	if bits == 4 {
		if q, err = nbitsUnpack4(c, b); err != nil { // [N, blocks, block]
			return err
		}
	}
	if q, err = nnCast(c, q, tensor.Float32); err != nil {
		return err
	}
	zp, err := nbitsZeroPoint(c, zps, bits, nOut, blocks)
	if err != nil {
		return err
	}
	w, err := nbitsDequantize(c, q, zp, scales, Meta(a).DType, nbitsDims{nOut: nOut, blocks: blocks, block: block, k: k})
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenMatmul, a, w)
	if err != nil {
		return err
	}
	if bias != nil {
		if y, err = c.Emit(fxgraph.AtenAddTensor, y, bias); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	return nil
}

// nbitsZeroPoint is MatMulNBits' zero point as float [N, blocks, 1]: the
// default 2^(bits-1), or zps packed like B (uint8) or one per block.
func nbitsZeroPoint(c *Ctx, zps *fxgraph.Node, bits, nOut, blocks int64) (*fxgraph.Node, error) {
	var err error
	var zp *fxgraph.Node
	switch {
	case zps == nil:
		zp = c.ScalarConst(tensor.Float32, float64(int64(1)<<(bits-1)))
	case Meta(zps).DType == tensor.Uint8:
		perRow := (blocks*bits + 7) / 8
		if zp, err = c.Emit(fxgraph.AtenReshape, zps, []any{nOut, perRow}); err != nil {
			return nil, err
		}
		if bits == 4 {
			if zp, err = nbitsUnpack4(c, zp); err != nil {
				return nil, err
			}
			if zp, err = c.Emit(fxgraph.AtenSliceTensor, zp, int64(1), int64(0), blocks, int64(1)); err != nil {
				return nil, err
			}
		}
		if zp, err = nnCast(c, zp, tensor.Float32); err != nil {
			return nil, err
		}
		if zp, err = c.Emit(fxgraph.AtenReshape, zp, []any{nOut, blocks, int64(1)}); err != nil {
			return nil, err
		}
	default:
		if zp, err = nnCast(c, zps, tensor.Float32); err != nil {
			return nil, err
		}
		if zp, err = c.Emit(fxgraph.AtenReshape, zp, []any{nOut, blocks, int64(1)}); err != nil {
			return nil, err
		}
	}
	return zp, nil
}

// nbitsDims are MatMulNBits' sizes: N outputs, K inputs in blocks of
// block.
type nbitsDims struct{ nOut, blocks, block, k int64 }

// nbitsDequantize turns the unpacked float weights q [N, blocks, block]
// into W^T [K, N] of dtype dt: (q - zp) * scales, the blocks' padding cut.
func nbitsDequantize(c *Ctx, q, zp, scales *fxgraph.Node, dt tensor.DType, d nbitsDims) (*fxgraph.Node, error) {
	sc, err := c.Emit(fxgraph.AtenReshape, scales, []any{d.nOut, d.blocks, int64(1)})
	if err != nil {
		return nil, err
	}
	if sc, err = nnCast(c, sc, tensor.Float32); err != nil {
		return nil, err
	}
	w, err := c.Emit(fxgraph.AtenSubTensor, q, zp)
	if err != nil {
		return nil, err
	}
	if w, err = c.Emit(fxgraph.AtenMulTensor, w, sc); err != nil {
		return nil, err
	}
	if w, err = c.Emit(fxgraph.AtenReshape, w, []any{d.nOut, d.blocks * d.block}); err != nil {
		return nil, err
	}
	if d.blocks*d.block != d.k {
		if w, err = c.Emit(fxgraph.AtenSliceTensor, w, int64(1), int64(0), d.k, int64(1)); err != nil {
			return nil, err
		}
	}
	if w, err = nnCast(c, w, dt); err != nil {
		return nil, err
	}
	if w, err = c.Emit(fxgraph.AtenPermute, w, []any{int64(1), int64(0)}); err != nil {
		return nil, err
	}
	return w, nil
}
