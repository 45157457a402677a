package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// XserveRNN is the recurrent layers as one op (RNNArgs says more).
var XserveRNN = &Op{Name: "xserve.rnn"}

// RNNArgs are the settings of "xserve.rnn": ONNX's RNN, GRU and LSTM,
// ONNX Runtime's DynamicQuantizeLSTM and torch's lstm, gru, rnn_tanh and
// rnn_relu (one layer, sequence-first layout) as one IR op. Its args are
//
//	(x [seq, batch, input], w [dirs, gates*hidden, input],
//	 r [dirs, gates*hidden, hidden], b [dirs, 2*gates*hidden] or None,
//	 initial_h [dirs, batch, hidden] or None, initial_c [dirs, batch, hidden]
//	 or None, p [dirs, 3*hidden] or None, sequence_lens [batch] or None,
//	 w_scale, w_zero_point, r_scale, r_zero_point or None)
//
// and its kwargs the fields below. Gates are in ONNX's order (LSTM i, o, f,
// c; GRU z, r, h). sequence_lens (int32 or int64, a run-time value) gives
// each batch entry's length: steps at or past it give zero outputs and
// leave y_h and y_c at the entry's last step, and the reverse direction
// reads each entry's steps backwards from its own last one (as ONNX
// specifies). With the four quantization args, w and r are int8 or uint8
// and every product is ONNX Runtime's dynamically quantized GEMM: the
// float operand quantized to uint8 with DynamicQuantizeLinear's
// parameters over the whole operand (all steps of x at once; the whole
// [batch, hidden] state at each step, as ONNX Runtime computes with one
// intra-op thread), w and r shifted by their zero points (scalars or one
// per gate row), accumulated in int32 and scaled back. The outputs are y
// [seq, dirs, batch, hidden], y_h and y_c [dirs, batch, hidden] (y_c is zero
// but for LSTM).
type RNNArgs struct {
	// Mode is "rnn", "gru" or "lstm".
	Mode string
	// Activation is RNN's: "tanh" (the default) or "relu".
	Activation string
	// Hidden is hidden_size.
	Hidden int64
	// Direction is "forward", "reverse" or "bidirectional".
	Direction string
	// LinearBeforeReset is GRU's linear_before_reset.
	LinearBeforeReset bool
	// Clip bounds the activations' inputs to [-Clip, Clip]; 0 for none.
	Clip float64
}

// The argument positions of "xserve.rnn" beyond x.
const (
	RNNSequenceLens = 7
	RNNWScale       = 8
	RNNWZeroPoint   = 9
	RNNRScale       = 10
	RNNRZeroPoint   = 11
	// rnnKwarg is past the positional args: the settings are kwargs only.
	rnnKwarg = 12
)

// Gates returns the number of gates of the mode: 1, 3 or 4.
func (a RNNArgs) Gates() int64 {
	switch a.Mode {
	case "gru":
		return 3
	case "lstm":
		return 4
	}
	return 1
}

// Dirs returns 2 for a bidirectional RNN, else 1.
func (a RNNArgs) Dirs() int64 {
	if a.Direction == "bidirectional" {
		return 2
	}
	return 1
}

// RNNQuantized reports whether an "xserve.rnn" node has int8/uint8
// weights with quantization parameters.
func RNNQuantized(n *Node) bool { return n.Arg(RNNWScale) != nil }

// RNN reads the settings of an "xserve.rnn" node.
func RNN(n *Node) (RNNArgs, error) {
	var a RNNArgs
	mode, _ := n.ArgOr(rnnKwarg, "mode", "rnn").(string)
	dir, _ := n.ArgOr(rnnKwarg, "direction", "forward").(string)
	act, _ := n.ArgOr(rnnKwarg, "activation", "tanh").(string)
	a.Mode, a.Direction, a.Activation = mode, dir, act
	if mode != "rnn" && mode != "gru" && mode != "lstm" {
		return a, fmt.Errorf("fxgraph: node %s: mode %q, want rnn, gru or lstm", n.Name, mode)
	}
	if dir != "forward" && dir != "reverse" && dir != "bidirectional" {
		return a, fmt.Errorf("fxgraph: node %s: direction %q, want forward, reverse or bidirectional", n.Name, dir)
	}
	if act != "tanh" && (act != "relu" || mode != "rnn") {
		return a, fmt.Errorf("fxgraph: node %s: activation %q, want tanh (or relu for rnn)", n.Name, act)
	}
	var err error
	if a.Hidden, err = n.IntArg(rnnKwarg, "hidden_size", 0); err != nil {
		return a, err
	}
	if a.Hidden < 1 {
		return a, fmt.Errorf("fxgraph: node %s: hidden_size %d, want >= 1", n.Name, a.Hidden)
	}
	if a.LinearBeforeReset, err = n.BoolArg(rnnKwarg, "linear_before_reset", false); err != nil {
		return a, err
	}
	if a.Clip, err = n.FloatArg(rnnKwarg, "clip", 0); err != nil {
		return a, err
	}
	if a.Clip < 0 {
		return a, fmt.Errorf("fxgraph: node %s: clip %v, want >= 0", n.Name, a.Clip)
	}
	return a, nil
}

// rnnShape checks the operands of an "xserve.rnn" node against its
// settings and gives its three outputs.
func rnnShape(n *Node) (Meta, error) {
	a, err := RNN(n)
	if err != nil {
		return Meta{}, err
	}
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() != 3 || !x.DType.IsFloat() {
		return Meta{}, fmt.Errorf("fxgraph: node %s: x is %s, want a float [seq, batch, input]", n.Name, x)
	}
	dirs, gh := a.Dirs(), a.Gates()*a.Hidden
	quant := RNNQuantized(n)
	want := []struct {
		i    int
		name string
		dims []Dim
	}{
		{1, "w", []Dim{D(dirs), D(gh), x.Shape[2]}},
		{2, "r", []Dim{D(dirs), D(gh), D(a.Hidden)}},
		{3, "b", []Dim{D(dirs), D(2 * gh)}},
		{4, "initial_h", []Dim{D(dirs), x.Shape[1], D(a.Hidden)}},
		{5, "initial_c", []Dim{D(dirs), x.Shape[1], D(a.Hidden)}},
		{6, "p", []Dim{D(dirs), D(3 * a.Hidden)}},
	}
	for _, w := range want {
		if n.Arg(w.i) == nil {
			continue
		}
		m, err := n.InputMeta(w.i)
		if err != nil {
			return Meta{}, err
		}
		okType := m.DType == x.DType
		if quant && (w.i == 1 || w.i == 2) {
			okType = m.DType == tensor.Int8 || m.DType == tensor.Uint8
		}
		if !okType || !rnnCompatible(m.Shape, w.dims) {
			return Meta{}, fmt.Errorf("fxgraph: node %s: %s is %s, want %s%s", n.Name, w.name, m, x.DType, Shape(w.dims))
		}
	}
	if err := rnnCheckExtras(n, x, dirs, gh, quant); err != nil {
		return Meta{}, err
	}
	state := Shape{D(dirs), x.Shape[1], D(a.Hidden)}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: x.DType, Shape: Shape{x.Shape[0], D(dirs), x.Shape[1], D(a.Hidden)}},
		{DType: x.DType, Shape: state},
		{DType: x.DType, Shape: state.Clone()},
	}}, nil
}

// rnnCheckExtras checks sequence_lens and the quantization parameters.
func rnnCheckExtras(n *Node, x TensorMeta, dirs, gh int64, quant bool) error {
	if n.Arg(RNNSequenceLens) != nil {
		m, err := n.InputMeta(RNNSequenceLens)
		if err != nil {
			return err
		}
		if (m.DType != tensor.Int32 && m.DType != tensor.Int64) || !rnnCompatible(m.Shape, []Dim{x.Shape[1]}) {
			return fmt.Errorf("fxgraph: node %s: sequence_lens is %s, want int32 or int64 [%s]", n.Name, m, x.Shape[1])
		}
	}
	if !quant {
		return nil
	}
	for _, i := range []int{RNNWScale, RNNWZeroPoint, RNNRScale, RNNRZeroPoint} {
		m, err := n.InputMeta(i)
		if err != nil {
			return fmt.Errorf("fxgraph: node %s: quantized weights need all four scales and zero points: %w", n.Name, err)
		}
		okType := m.DType == tensor.Float32
		if i == RNNWZeroPoint || i == RNNRZeroPoint {
			wi := 1 // the weights of this zero point
			if i == RNNRZeroPoint {
				wi = 2
			}
			w, _ := n.InputMeta(wi)
			okType = m.DType == w.DType
		}
		if !okType || !(rnnCompatible(m.Shape, []Dim{D(dirs)}) || rnnCompatible(m.Shape, []Dim{D(dirs), D(gh)})) {
			return fmt.Errorf("fxgraph: node %s: quantization argument %d is %s, want [%d] or [%d,%d] (float32 scales, zero points of the weights' dtype)", n.Name, i, m, dirs, dirs, gh)
		}
	}
	return nil
}

// rnnCompatible reports whether shape s can be want once symbols are bound:
// same rank, and equal wherever both dims are static.
func rnnCompatible(s Shape, want []Dim) bool {
	if len(s) != len(want) {
		return false
	}
	for i, d := range s {
		if d.IsStatic() && want[i].IsStatic() && d.Size != want[i].Size {
			return false
		}
	}
	return true
}

func registerRNN(r *Registry) {
	r.define(XserveRNN, rnnShape, nil)
}
