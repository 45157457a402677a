package onnx

import (
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// qDynamicQuantizeLSTM converts com.microsoft DynamicQuantizeLSTM (X, W,
// R, B, sequence_lens, initial_h, initial_c, P, W_scale, W_zero_point,
// R_scale, R_zero_point) to one quantized fxgraph.XserveRNN (see
// fxgraph.RNNArgs): an LSTM (default activations, gates i, o, f, c) whose
// input and recurrent products are ONNX Runtime's dynamically quantized
// GEMMs. W [dirs, input, 4*hidden] and R [dirs, hidden, 4*hidden] are
// transposed into the op's row layout; any sizes of X, and sequence_lens as
// a run-time value, are accepted. Outputs Y, Y_h and Y_c.
func qDynamicQuantizeLSTM(c *Ctx, n *Node) error {
	if a := c.Attr("activations"); a != nil {
		def := []string{"Sigmoid", "Tanh", "Tanh"}
		for i, s := range a.Strings {
			if !strings.EqualFold(string(s), def[i%3]) {
				return Unsupported("DynamicQuantizeLSTM activations %q", a.Strings)
			}
		}
	}
	if c.Attr("activation_alpha") != nil || c.Attr("activation_beta") != nil || c.AttrInt("input_forget", 0) != 0 || c.AttrInt("layout", 0) != 0 {
		return Unsupported("DynamicQuantizeLSTM with activation_alpha/beta, input_forget or layout")
	}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if Meta(x).Rank() != 3 {
		return Unsupported("DynamicQuantizeLSTM of a rank-%d input %s", Meta(x).Rank(), Meta(x))
	}
	args := make([]any, 12)
	args[0] = x
	for i, in := range []int{0, 1, 2, 3, 5, 6, 7} {
		if i == 0 || !c.HasInput(in) {
			continue
		}
		v, err := c.Input(in)
		if err != nil {
			return err
		}
		if in == 1 || in == 2 { // [dirs, k, 4*hidden] -> [dirs, 4*hidden, k]
			if v, err = c.Emit(fxgraph.AtenPermute, v, ints([]int64{0, 2, 1})); err != nil {
				return err
			}
		}
		args[i] = v
	}
	if c.HasInput(4) {
		if args[fxgraph.RNNSequenceLens], err = rnnSequenceLens(c, Meta(x)); err != nil {
			return err
		}
	}
	if err := qLSTMQuantArgs(c, args); err != nil {
		return err
	}
	hidden := c.AttrInt("hidden_size", 0)
	rnn, err := c.EmitKw(fxgraph.XserveRNN, args, map[string]any{
		"mode": "lstm", "hidden_size": hidden, "direction": c.AttrString("direction", "forward"),
		"clip": float64(c.AttrFloat("clip", 0)),
	})
	if err != nil {
		return err
	}
	_, err = setItems(c, rnn, 3)
	return err
}

// qLSTMQuantArgs sets the scales and zero points of W and R (inputs 8 to
// 11) as xserve.rnn's arguments 8 to 11: scales float32, a missing zero
// point zeros of the weights' dtype, one per direction.
func qLSTMQuantArgs(c *Ctx, args []any) error {
	for i, in := range []int{8, 9, 10, 11} {
		if !c.HasInput(in) {
			if in == 9 || in == 11 { // no zero point: 0 of the weights' dtype
				w, _ := args[1+i/2].(*fxgraph.Node)
				if w == nil {
					return Unsupported("DynamicQuantizeLSTM without W or R")
				}
				dirs := int64(1)
				if c.AttrString("direction", "forward") == "bidirectional" {
					dirs = 2
				}
				args[fxgraph.RNNWScale+i] = c.Constant("zero_point", tensor.New(Meta(w).DType, dirs))
				continue
			}
			return Unsupported("DynamicQuantizeLSTM without W_scale or R_scale")
		}
		v, err := c.Input(in)
		if err != nil {
			return err
		}
		if in == 8 || in == 10 {
			if v, err = nnCast(c, v, tensor.Float32); err != nil {
				return err
			}
		}
		args[fxgraph.RNNWScale+i] = v
	}
	return nil
}
