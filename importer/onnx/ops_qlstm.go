package onnx

import (
	"fmt"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// qDynMatMul is ONNX Runtime's quantized GEMM of the LSTM: float a [.., K]
// quantized to uint8 with DynamicQuantizeLinear's parameters, times the
// int8/uint8 weight w [K, N] (zero point wz, scale ws: single or per
// column), accumulated in int32 and scaled to float32.
func qDynMatMul(c *Ctx, a, w, ws, wz *fxgraph.Node) (*fxgraph.Node, error) {
	as, azf, err := dynamicQuantParams(c, a)
	if err != nil {
		return nil, err
	}
	aq, err := quantize(c, a, as, azf, tensor.Uint8)
	if err != nil {
		return nil, err
	}
	az, err := nnCast(c, azf, tensor.Uint8)
	if err != nil {
		return nil, err
	}
	ra := Meta(aq).Rank()
	ash, err := nnZeroShift(c, aq, az, ra-2, ra)
	if err != nil {
		return nil, err
	}
	wsh, err := nnZeroShift(c, w, wz, 1, 2)
	if err != nil {
		return nil, err
	}
	acc, err := c.Emit(fxgraph.AtenMatmul, ash, wsh)
	if err != nil {
		return nil, err
	}
	return qScaledAcc(c, acc, as, ws, nil)
}

// qDynMatMulRows is qDynMatMul with each row of a [B, K] quantized with
// its own parameters, as ONNX Runtime's LSTM does for the hidden state
// (one GEMM per batch entry).
func qDynMatMulRows(c *Ctx, a, w, ws, wz *fxgraph.Node) (*fxgraph.Node, error) {
	zero := c.ScalarConst(tensor.Float32, 0)
	mn, err := c.Emit(fxgraph.AtenAmin, a, []any{int64(1)}, true)
	if err != nil {
		return nil, err
	}
	if mn, err = c.Emit(fxgraph.AtenMinimum, mn, zero); err != nil {
		return nil, err
	}
	mx, err := c.Emit(fxgraph.AtenAmax, a, []any{int64(1)}, true)
	if err != nil {
		return nil, err
	}
	if mx, err = c.Emit(fxgraph.AtenMaximum, mx, zero); err != nil {
		return nil, err
	}
	as, azf, err := rangeQuantParams(c, mn, mx)
	if err != nil {
		return nil, err
	}
	aq, err := quantize(c, a, as, azf, tensor.Uint8)
	if err != nil {
		return nil, err
	}
	ai, err := nnCast(c, aq, tensor.Int32)
	if err != nil {
		return nil, err
	}
	azi, err := nnCast(c, azf, tensor.Int32)
	if err != nil {
		return nil, err
	}
	if ai, err = c.Emit(fxgraph.AtenSubTensor, ai, azi); err != nil {
		return nil, err
	}
	wsh, err := nnZeroShift(c, w, wz, 1, 2)
	if err != nil {
		return nil, err
	}
	acc, err := c.Emit(fxgraph.AtenMatmul, ai, wsh)
	if err != nil {
		return nil, err
	}
	wsf, err := qScaleAlong(c, ws, 2)
	if err != nil {
		return nil, err
	}
	scale, err := c.Emit(fxgraph.AtenMulTensor, as, wsf)
	if err != nil {
		return nil, err
	}
	accf, err := nnCast(c, acc, tensor.Float32)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenMulTensor, accf, scale)
}

// qDirParam returns input i's slice for direction d (a per-direction
// scale or zero point, [num_directions] or [num_directions, 4*hidden]).
func qDirParam(c *Ctx, i int, d int64) (*fxgraph.Node, error) {
	v, err := c.OptInput(i)
	if err != nil || v == nil {
		return v, err
	}
	return c.Emit(fxgraph.AtenSelectInt, v, int64(0), d)
}

// qDynamicQuantizeLSTM converts com.microsoft DynamicQuantizeLSTM (X, W,
// R, B, sequence_lens, initial_h, initial_c, P, W_scale, W_zero_point,
// R_scale, R_zero_point): an LSTM (default activations, gates i, o, f, c)
// whose input and recurrent products are ONNX Runtime's dynamically
// quantized GEMMs — X quantized once for the whole sequence, the hidden
// state at every step — unrolled over the static sequence length.
// Outputs Y, Y_h and Y_c.
func qDynamicQuantizeLSTM(c *Ctx, n *Node) error {
	if a := c.Attr("activations"); a != nil {
		def := []string{"Sigmoid", "Tanh", "Tanh"}
		for i, s := range a.Strings {
			if !strings.EqualFold(string(s), def[i%3]) {
				return Unsupported("DynamicQuantizeLSTM activations %q", a.Strings)
			}
		}
	}
	if c.Attr("clip") != nil || c.AttrInt("input_forget", 0) != 0 || c.AttrInt("layout", 0) != 0 {
		return Unsupported("DynamicQuantizeLSTM with clip, input_forget or layout")
	}
	if c.HasInput(4) {
		return Unsupported("DynamicQuantizeLSTM with sequence_lens")
	}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xd, ok := Meta(x).Shape.Static()
	if !ok || len(xd) != 3 {
		return Unsupported("DynamicQuantizeLSTM input %s (static [seq, batch, input] only)", Meta(x))
	}
	steps, batch := xd[0], xd[1]
	hidden := c.AttrInt("hidden_size", 0)
	dirs := []bool{false}
	switch d := c.AttrString("direction", "forward"); d {
	case "forward":
	case "reverse":
		dirs = []bool{true}
	case "bidirectional":
		dirs = []bool{false, true}
	default:
		return fmt.Errorf("DynamicQuantizeLSTM direction %q", d)
	}
	if hidden <= 0 {
		return fmt.Errorf("DynamicQuantizeLSTM hidden_size %d", hidden)
	}
	var ys, hs, cs []*fxgraph.Node
	for d, reverse := range dirs {
		y, h, cell, err := qLSTMDirection(c, x, int64(d), reverse, steps, batch, hidden)
		if err != nil {
			return fmt.Errorf("direction %d: %w", d, err)
		}
		ys, hs, cs = append(ys, y), append(hs, h), append(cs, cell)
	}
	cat := func(v []*fxgraph.Node, axis int64) (*fxgraph.Node, error) {
		if len(v) == 1 {
			return v[0], nil
		}
		return c.Emit(fxgraph.AtenCat, nodes(v), axis)
	}
	y, err := cat(ys, 1)
	if err != nil {
		return err
	}
	h, err := cat(hs, 0)
	if err != nil {
		return err
	}
	cell, err := cat(cs, 0)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	c.SetOutput(1, h)
	c.SetOutput(2, cell)
	return nil
}

// qLSTMDirection runs one direction; it returns Y [steps, 1, batch,
// hidden], Y_h and Y_c [1, batch, hidden].
func qLSTMDirection(c *Ctx, x *fxgraph.Node, d int64, reverse bool, steps, batch, hidden int64) (y, h, cell *fxgraph.Node, err error) {
	sel := func(i int) (*fxgraph.Node, error) {
		v, err := c.OptInput(i)
		if err != nil || v == nil {
			return v, err
		}
		return c.Emit(fxgraph.AtenSelectInt, v, int64(0), d)
	}
	w, err := sel(1)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := sel(2)
	if err != nil {
		return nil, nil, nil, err
	}
	var p [4]*fxgraph.Node
	for j, i := range []int{8, 9, 10, 11} {
		if p[j], err = qDirParam(c, i, d); err != nil {
			return nil, nil, nil, err
		}
	}
	if w == nil || r == nil || p[0] == nil || p[2] == nil {
		return nil, nil, nil, fmt.Errorf("DynamicQuantizeLSTM needs W, R, W_scale and R_scale")
	}
	// The input projection of every step at once: [steps, batch, 4*hidden].
	xp, err := qDynMatMul(c, x, w, p[0], p[1])
	if err != nil {
		return nil, nil, nil, err
	}
	if b, err := sel(3); err != nil {
		return nil, nil, nil, err
	} else if b != nil {
		wb, err := c.Emit(fxgraph.AtenSliceTensor, b, int64(0), int64(0), 4*hidden, int64(1))
		if err != nil {
			return nil, nil, nil, err
		}
		rb, err := c.Emit(fxgraph.AtenSliceTensor, b, int64(0), 4*hidden, 8*hidden, int64(1))
		if err != nil {
			return nil, nil, nil, err
		}
		if xp, err = c.Emit(fxgraph.AtenAddTensor, xp, wb); err != nil {
			return nil, nil, nil, err
		}
		if xp, err = c.Emit(fxgraph.AtenAddTensor, xp, rb); err != nil {
			return nil, nil, nil, err
		}
	}
	zeros := func() (*fxgraph.Node, error) {
		return c.EmitKw(fxgraph.AtenFull, []any{[]any{batch, hidden}, 0.0}, map[string]any{"dtype": tensor.Float32})
	}
	if h, err = sel(5); err == nil && h == nil {
		h, err = zeros()
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if cell, err = sel(6); err == nil && cell == nil {
		cell, err = zeros()
	}
	if err != nil {
		return nil, nil, nil, err
	}
	pp, err := sel(7)
	if err != nil {
		return nil, nil, nil, err
	}
	gate := func(g *fxgraph.Node, k int64) (*fxgraph.Node, error) {
		return c.Emit(fxgraph.AtenSliceTensor, g, int64(1), k*hidden, (k+1)*hidden, int64(1))
	}
	peep := func(v, cst *fxgraph.Node, k int64) (*fxgraph.Node, error) {
		if pp == nil {
			return v, nil
		}
		pk, err := c.Emit(fxgraph.AtenSliceTensor, pp, int64(0), k*hidden, (k+1)*hidden, int64(1))
		if err != nil {
			return nil, err
		}
		m, err := c.Emit(fxgraph.AtenMulTensor, pk, cst)
		if err != nil {
			return nil, err
		}
		return c.Emit(fxgraph.AtenAddTensor, v, m)
	}
	outs := make([]*fxgraph.Node, steps)
	for s := int64(0); s < steps; s++ {
		t := s
		if reverse {
			t = steps - 1 - s
		}
		xt, err := c.Emit(fxgraph.AtenSelectInt, xp, int64(0), t)
		if err != nil {
			return nil, nil, nil, err
		}
		hr, err := qDynMatMulRows(c, h, r, p[2], p[3])
		if err != nil {
			return nil, nil, nil, err
		}
		g, err := c.Emit(fxgraph.AtenAddTensor, xt, hr)
		if err != nil {
			return nil, nil, nil, err
		}
		var gi, go_, gf, gc *fxgraph.Node
		for k, dst := range []**fxgraph.Node{&gi, &go_, &gf, &gc} {
			if *dst, err = gate(g, int64(k)); err != nil {
				return nil, nil, nil, err
			}
		}
		if gi, err = peep(gi, cell, 0); err != nil {
			return nil, nil, nil, err
		}
		if gf, err = peep(gf, cell, 2); err != nil {
			return nil, nil, nil, err
		}
		it, err := c.Emit(fxgraph.AtenSigmoid, gi)
		if err != nil {
			return nil, nil, nil, err
		}
		ft, err := c.Emit(fxgraph.AtenSigmoid, gf)
		if err != nil {
			return nil, nil, nil, err
		}
		ct, err := c.Emit(fxgraph.AtenTanh, gc)
		if err != nil {
			return nil, nil, nil, err
		}
		a, err := c.Emit(fxgraph.AtenMulTensor, ft, cell)
		if err != nil {
			return nil, nil, nil, err
		}
		b, err := c.Emit(fxgraph.AtenMulTensor, it, ct)
		if err != nil {
			return nil, nil, nil, err
		}
		if cell, err = c.Emit(fxgraph.AtenAddTensor, a, b); err != nil {
			return nil, nil, nil, err
		}
		if go_, err = peep(go_, cell, 1); err != nil {
			return nil, nil, nil, err
		}
		ot, err := c.Emit(fxgraph.AtenSigmoid, go_)
		if err != nil {
			return nil, nil, nil, err
		}
		th, err := c.Emit(fxgraph.AtenTanh, cell)
		if err != nil {
			return nil, nil, nil, err
		}
		if h, err = c.Emit(fxgraph.AtenMulTensor, ot, th); err != nil {
			return nil, nil, nil, err
		}
		outs[t] = h
	}
	us := make([]*fxgraph.Node, len(outs))
	for i, o := range outs {
		if us[i], err = c.Emit(fxgraph.AtenUnsqueeze, o, int64(0)); err != nil {
			return nil, nil, nil, err
		}
	}
	if y, err = c.Emit(fxgraph.AtenCat, nodes(us), int64(0)); err != nil {
		return nil, nil, nil, err
	}
	if y, err = c.Emit(fxgraph.AtenUnsqueeze, y, int64(1)); err != nil {
		return nil, nil, nil, err
	}
	if h, err = c.Emit(fxgraph.AtenUnsqueeze, h, int64(0)); err != nil {
		return nil, nil, nil, err
	}
	if cell, err = c.Emit(fxgraph.AtenUnsqueeze, cell, int64(0)); err != nil {
		return nil, nil, nil, err
	}
	return y, h, cell, nil
}
