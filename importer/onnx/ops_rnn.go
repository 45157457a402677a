package onnx

import (
	"strings"

	"github.com/xserve/xserve/fxgraph"
)

// registerRNN registers the converters of RNN, GRU and LSTM: one
// fxgraph.XserveRNN node each (see fxgraph.RNNArgs).
func registerRNN(cs converters) {
	cs.add("RNN", rnnConverter("rnn", []string{"Tanh"}))
	cs.add("GRU", rnnConverter("gru", []string{"Sigmoid", "Tanh"}))
	cs.add("LSTM", rnnConverter("lstm", []string{"Sigmoid", "Tanh", "Tanh"}))
}

// rnnConverter converts an ONNX recurrent operator with the default
// activations. Inputs: X, W, R, B, sequence_lens, initial_h, and for LSTM
// initial_c and P. Layout 1 (batch first, opset 14) is transposed to and
// from the sequence-first form. sequence_lens may be a run-time value (see
// fxgraph.RNNArgs); RNN's Relu activation is supported, other activations,
// activation_alpha/beta and LSTM's input_forget are not.
func rnnConverter(mode string, acts []string) Converter {
	return func(c *Ctx, _ *Node) error {
		op := strings.ToUpper(mode)
		for _, name := range []string{"activation_alpha", "activation_beta"} {
			if c.Attr(name) != nil {
				return Unsupported("%s with %s", op, name)
			}
		}
		dir := c.AttrString("direction", "forward")
		activation, err := rnnActivation(c, op, acts)
		if err != nil {
			return err
		}
		if mode == "lstm" && c.AttrInt("input_forget", 0) != 0 {
			return Unsupported("LSTM with input_forget")
		}
		hidden := c.AttrInt("hidden_size", 0)
		layout := c.AttrInt("layout", 0)
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		if layout != 0 {
			if x, err = c.Emit(fxgraph.AtenPermute, x, ints([]int64{1, 0, 2})); err != nil {
				return err
			}
		}
		xm := Meta(x)
		if xm.Rank() != 3 {
			return Unsupported("%s of a rank-%d input", op, xm.Rank())
		}
		args, err := rnnArgs(c, x, layout)
		if err != nil {
			return err
		}
		if hidden == 0 { // optional: R is [dirs, gates*hidden, hidden]
			if r, ok := args[2].(*fxgraph.Node); ok && Meta(r).Rank() == 3 && Meta(r).Shape[2].IsStatic() {
				hidden = Meta(r).Shape[2].Size
			}
		}
		rnn, err := c.EmitKw(fxgraph.XserveRNN, args, map[string]any{
			"mode": mode, "hidden_size": hidden, "direction": dir, "activation": activation,
			"linear_before_reset": c.AttrInt("linear_before_reset", 0) != 0,
			"clip":                float64(c.AttrFloat("clip", 0)),
		})
		if err != nil {
			return err
		}
		for i := range 3 {
			if !c.HasOutput(i) {
				continue
			}
			out, err := c.Emit(fxgraph.GetItem, rnn, int64(i))
			if err != nil {
				return err
			}
			if layout != 0 {
				perm := []int64{1, 0, 2} // y_h, y_c: [batch, dirs, hidden]
				if i == 0 {
					perm = []int64{2, 0, 1, 3} // y: [batch, seq, dirs, hidden]
				}
				if out, err = c.Emit(fxgraph.AtenPermute, out, ints(perm)); err != nil {
					return err
				}
			}
			c.SetOutput(i, out)
		}
		return nil
	}
}

// rnnArgs returns the xserve.rnn arguments of an ONNX RNN, GRU or LSTM:
// x (sequence first), then ONNX inputs W, R, B, initial_h, initial_c, P
// and sequence_lens, in order, so that the graph (and the StableHLO) is the
// same on every import.
func rnnArgs(c *Ctx, x *fxgraph.Node, layout int64) ([]any, error) {
	args := make([]any, 8)
	args[0] = x
	onnxIn := []int{0, 1, 2, 3, 5, 6, 7}
	for i := 1; i < len(onnxIn); i++ {
		in := onnxIn[i]
		if !c.HasInput(in) {
			continue
		}
		v, err := c.Input(in)
		if err != nil {
			return nil, err
		}
		if layout != 0 && (in == 5 || in == 6) { // [batch, dirs, hidden]
			if v, err = c.Emit(fxgraph.AtenPermute, v, ints([]int64{1, 0, 2})); err != nil {
				return nil, err
			}
		}
		args[i] = v
	}
	if c.HasInput(4) {
		lens, err := rnnSequenceLens(c, Meta(x))
		if err != nil {
			return nil, err
		}
		args[fxgraph.RNNSequenceLens] = lens
	}
	return args, nil
}

// rnnActivation checks the activations attribute against the defaults
// (RNN may also use Relu, the same in both directions) and returns RNN's
// activation.
func rnnActivation(c *Ctx, op string, acts []string) (string, error) {
	a := c.Attr("activations")
	if a == nil {
		return "tanh", nil
	}
	if op == "RNN" && len(a.Strings) > 0 && strings.EqualFold(string(a.Strings[0]), "Relu") {
		for _, s := range a.Strings {
			if !strings.EqualFold(string(s), "Relu") {
				return "", Unsupported("RNN with activations %q (Tanh or Relu in every direction)", a.Strings)
			}
		}
		return "relu", nil
	}
	for i, s := range a.Strings {
		if !strings.EqualFold(string(s), acts[i%len(acts)]) {
			return "", Unsupported("%s with activations %q (only the defaults %v are supported)", op, a.Strings, acts)
		}
	}
	return "tanh", nil
}

// rnnSequenceLens returns input 4, sequence_lens, as the xserve.rnn
// argument: nil when it is a constant equal to the sequence length for
// every entry (no masking needed), else the value (int32 or int64 [batch]).
func rnnSequenceLens(c *Ctx, xm fxgraph.TensorMeta) (any, error) {
	if lens, err := c.ConstInts(4); err == nil {
		full := xm.Shape[0].IsStatic()
		for _, l := range lens {
			full = full && l == xm.Shape[0].Size
		}
		if full {
			return nil, nil
		}
	}
	v, err := c.Input(4)
	if err != nil {
		return nil, err
	}
	return v, nil
}
