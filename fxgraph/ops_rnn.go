package fxgraph

import "fmt"

// XserveRNN is ONNX's RNN, GRU and LSTM as one op (RNNArgs says more).
var XserveRNN = &Op{Name: "xserve.rnn"}

// RNNArgs are the settings of "xserve.rnn", ONNX's RNN, GRU and LSTM
// (default activations, sequence-first layout) as one IR op. Its args are
// (x [seq, batch, input], w [dirs, gates*hidden, input], r [dirs,
// gates*hidden, hidden], b [dirs, 2*gates*hidden] or None, initial_h [dirs,
// batch, hidden] or None, initial_c [dirs, batch, hidden] or None, p [dirs,
// 3*hidden] or None) and its kwargs the fields below. Its outputs are y
// [seq, dirs, batch, hidden], y_h and y_c [dirs, batch, hidden] (y_c is
// zero but for LSTM). The lowering unrolls it over the sequence, which is
// static per shape bucket.
type RNNArgs struct {
	// Mode is "rnn", "gru" or "lstm".
	Mode string
	// Hidden is hidden_size.
	Hidden int64
	// Direction is "forward", "reverse" or "bidirectional".
	Direction string
	// LinearBeforeReset is GRU's linear_before_reset.
	LinearBeforeReset bool
	// Clip bounds the activations' inputs to [-Clip, Clip]; 0 for none.
	Clip float64
}

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

// RNN reads the settings of an "xserve.rnn" node.
func RNN(n *Node) (RNNArgs, error) {
	var a RNNArgs
	mode, _ := n.ArgOr(7, "mode", "rnn").(string)
	dir, _ := n.ArgOr(7, "direction", "forward").(string)
	a.Mode, a.Direction = mode, dir
	if mode != "rnn" && mode != "gru" && mode != "lstm" {
		return a, fmt.Errorf("fxgraph: node %s: mode %q, want rnn, gru or lstm", n.Name, mode)
	}
	if dir != "forward" && dir != "reverse" && dir != "bidirectional" {
		return a, fmt.Errorf("fxgraph: node %s: direction %q, want forward, reverse or bidirectional", n.Name, dir)
	}
	var err error
	if a.Hidden, err = n.IntArg(7, "hidden_size", 0); err != nil {
		return a, err
	}
	if a.Hidden < 1 {
		return a, fmt.Errorf("fxgraph: node %s: hidden_size %d, want >= 1", n.Name, a.Hidden)
	}
	if a.LinearBeforeReset, err = n.BoolArg(7, "linear_before_reset", false); err != nil {
		return a, err
	}
	if a.Clip, err = n.FloatArg(7, "clip", 0); err != nil {
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
		if m.DType != x.DType || !rnnCompatible(m.Shape, w.dims) {
			return Meta{}, fmt.Errorf("fxgraph: node %s: %s is %s, want %s%s", n.Name, w.name, m, x.DType, Shape(w.dims))
		}
	}
	state := Shape{D(dirs), x.Shape[1], D(a.Hidden)}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: x.DType, Shape: Shape{x.Shape[0], D(dirs), x.Shape[1], D(a.Hidden)}},
		{DType: x.DType, Shape: state},
		{DType: x.DType, Shape: state.Clone()},
	}}, nil
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
