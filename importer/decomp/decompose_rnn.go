package decomp

import (
	"github.com/xserve/xserve/fxgraph"
)

// rnnDecompositions convert torch's recurrent layers (nn.LSTM, nn.GRU,
// nn.RNN as torch.export keeps them) into one fxgraph.XserveRNN per layer (see
// fxgraph.RNNArgs). The packed-sequence overloads (.data) take their
// batch sizes as a tensor whose values decide the shapes; torch.export
// 2.14 cannot export them (pack_padded_sequence fails on its data-dependent
// size), and they are refused with that said.
var rnnDecompositions = map[*fxgraph.Op]Func{
	fxgraph.AtenLstmInput:    decRNN("lstm", ""),
	fxgraph.AtenGruInput:     decRNN("gru", ""),
	fxgraph.AtenRnnTanhInput: decRNN("rnn", "tanh"),
	fxgraph.AtenRnnReluInput: decRNN("rnn", "relu"),
	fxgraph.AtenLstmData:     decPackedRNN,
	fxgraph.AtenGruData:      decPackedRNN,
	fxgraph.AtenRnnTanhData:  decPackedRNN,
	fxgraph.AtenRnnReluData:  decPackedRNN,
}

// rnnGateOrder maps torch's gate blocks to ONNX's (the IR op's): LSTM
// (i, f, g, o) -> (i, o, f, c), GRU (r, z, n) -> (z, r, h).
var rnnGateOrder = map[string][]int64{"lstm": {0, 3, 1, 2}, "gru": {1, 0, 2}, "rnn": {0}}

// decPackedRNN refuses a packed-sequence recurrent layer.
func decPackedRNN(c *Call) error {
	return c.errorf(ErrUnsupported, "%s: a packed sequence (its batch_sizes are run-time values that decide the shapes); export the layer on padded input with the lengths as a mask instead", c.Op.Name)
}

// rnnSpec is one torch recurrent call's settings.
type rnnSpec struct {
	mode, act         string
	layers, dirs, hid int64
	bias, batchFirst  bool
	params            []any
	h0, c0            *fxgraph.Node
	perLayerDirParams int
	linearBeforeReset bool
	direction         string
}

// decRNN converts lstm/gru/rnn_tanh/rnn_relu.input: per layer, the
// weights of each direction reordered and stacked into ONNX's layout, one
// xserve.rnn, its directions' outputs concatenated as the next layer's
// input; h_n (and c_n) stack the layers' final states.
func decRNN(mode, act string) Func {
	return func(c *Call) error {
		s, err := c.rnnSpec(mode, act)
		if err != nil {
			return err
		}
		x, err := c.tensor("input")
		if err != nil {
			return err
		}
		if s.batchFirst {
			if x, err = c.emit("", fxgraph.AtenPermute, []any{x, ints64([]int64{1, 0, 2})}, nil); err != nil {
				return err
			}
		}
		var hs, cs []any
		for l := range s.layers {
			y, h, cell, err := c.rnnLayer(s, x, l)
			if err != nil {
				return err
			}
			x, hs, cs = y, append(hs, h), append(cs, cell)
		}
		if s.batchFirst {
			if x, err = c.emit("", fxgraph.AtenPermute, []any{x, ints64([]int64{1, 0, 2})}, nil); err != nil {
				return err
			}
		}
		outs := []*fxgraph.Node{x}
		for _, states := range [][]any{hs, cs} {
			st, err := c.emit("", fxgraph.AtenCat, []any{states, int64(0)}, nil)
			if err != nil {
				return err
			}
			outs = append(outs, st)
		}
		for i := range c.Outs {
			if i < len(outs) {
				if err := c.bind(i, outs[i]); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// rnnSpec reads and checks the call's settings.
func (c *Call) rnnSpec(mode, act string) (*rnnSpec, error) {
	s := &rnnSpec{mode: mode, act: act, dirs: 1, direction: "forward"}
	var err error
	if s.layers, err = c.intArg("num_layers"); err != nil {
		return nil, err
	}
	if s.bias, err = c.boolArg("has_biases"); err != nil {
		return nil, err
	}
	if s.batchFirst, err = c.boolArg("batch_first"); err != nil {
		return nil, err
	}
	bidir, err := c.boolArg("bidirectional")
	if err != nil {
		return nil, err
	}
	if train, _ := c.boolArg("train"); train {
		if p, _ := c.floatArg("dropout"); p > 0 {
			return nil, c.errorf(ErrUnsupported, "%s in training mode with dropout %g (export the model in eval mode)", c.Op.Name, p)
		}
	}
	if bidir {
		s.dirs, s.direction = 2, "bidirectional"
	}
	s.linearBeforeReset = mode == "gru" // torch's GRU applies r to (W_hn h + b_hn)
	params, ok := c.arg("params").([]any)
	s.perLayerDirParams = 2
	if s.bias {
		s.perLayerDirParams = 4
	}
	if !ok || int64(len(params)) != s.layers*s.dirs*int64(s.perLayerDirParams) {
		return nil, c.errorf(ErrUnsupported, "%s with %d weights for %d layers x %d directions (LSTM proj_size is not supported)", c.Op.Name, len(params), s.layers, s.dirs)
	}
	s.params = params
	w, ok := params[1].(*fxgraph.Node) // w_hh [gates*hidden, hidden]
	if !ok || w.Val().Rank() != 2 || !w.Val().Shape[1].IsStatic() {
		return nil, c.errorf(ErrFormat, "%s: weight_hh is %s, want a static [gates*hidden, hidden] tensor", c.Op.Name, fxgraph.FormatArg(params[1]))
	}
	s.hid = w.Val().Shape[1].Size
	if mode == "lstm" {
		hx, ok := c.arg("hx").([]any)
		if !ok || len(hx) != 2 {
			return nil, c.errorf(ErrFormat, "%s: hx is %s, want [h0, c0]", c.Op.Name, fxgraph.FormatArg(c.arg("hx")))
		}
		s.h0, _ = hx[0].(*fxgraph.Node)
		s.c0, _ = hx[1].(*fxgraph.Node)
	} else {
		s.h0, _ = c.arg("hx").(*fxgraph.Node)
	}
	if s.h0 == nil || (mode == "lstm" && s.c0 == nil) {
		return nil, c.errorf(ErrFormat, "%s: the initial state is not a tensor", c.Op.Name)
	}
	return s, nil
}

// rnnLayer emits layer l: it returns the layer's output [seq, batch,
// dirs*hidden] and its final h and c [dirs, batch, hidden].
func (c *Call) rnnLayer(s *rnnSpec, x *fxgraph.Node, l int64) (y, h, cell *fxgraph.Node, err error) {
	stack := func(k int) (*fxgraph.Node, error) {
		var parts []any
		for d := range s.dirs {
			p, ok := s.params[int((l*s.dirs+d)*int64(s.perLayerDirParams))+k].(*fxgraph.Node)
			if !ok {
				return nil, c.errorf(ErrFormat, "%s: weight %d of layer %d is not a tensor", c.Op.Name, k, l)
			}
			var err error
			if p, err = c.reorderGates(p, s); err != nil {
				return nil, err
			}
			u, err := c.emit("", fxgraph.AtenUnsqueeze, []any{p, int64(0)}, nil)
			if err != nil {
				return nil, err
			}
			parts = append(parts, u)
		}
		if len(parts) == 1 {
			return parts[0].(*fxgraph.Node), nil
		}
		return c.emit("", fxgraph.AtenCat, []any{parts, int64(0)}, nil)
	}
	// w_ih, w_hh (and b_ih, b_hh) of every direction, stacked.
	var ws [4]*fxgraph.Node
	for k := range s.perLayerDirParams {
		if ws[k], err = stack(k); err != nil {
			return nil, nil, nil, err
		}
	}
	var b any
	if s.bias {
		if b, err = c.emit("", fxgraph.AtenCat, []any{[]any{ws[2], ws[3]}, int64(1)}, nil); err != nil {
			return nil, nil, nil, err
		}
	}
	state := func(v *fxgraph.Node) (any, error) {
		if v == nil {
			return nil, nil
		}
		return c.emit("", fxgraph.AtenSliceTensor, []any{v, int64(0), l * s.dirs, (l + 1) * s.dirs, int64(1)}, nil)
	}
	h0, err := state(s.h0)
	if err != nil {
		return nil, nil, nil, err
	}
	c0, err := state(s.c0)
	if err != nil {
		return nil, nil, nil, err
	}
	kw := map[string]any{"mode": s.mode, "hidden_size": s.hid, "direction": s.direction, "linear_before_reset": s.linearBeforeReset}
	if s.act != "" {
		kw["activation"] = s.act
	}
	rnn, err := c.emit("", fxgraph.XserveRNN, []any{x, ws[0], ws[1], b, h0, c0, nil}, kw)
	if err != nil {
		return nil, nil, nil, err
	}
	item := func(i int64) (*fxgraph.Node, error) { return c.emit("", fxgraph.GetItem, []any{rnn, i}, nil) }
	yd, err := item(0) // [seq, dirs, batch, hidden]
	if err != nil {
		return nil, nil, nil, err
	}
	if h, err = item(1); err != nil {
		return nil, nil, nil, err
	}
	if cell, err = item(2); err != nil {
		return nil, nil, nil, err
	}
	var dirs []any
	for d := range s.dirs {
		sel, err := c.emit("", fxgraph.AtenSelectInt, []any{yd, int64(1), d}, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		dirs = append(dirs, sel)
	}
	if len(dirs) == 1 {
		return dirs[0].(*fxgraph.Node), h, cell, nil
	}
	y, err = c.emit("", fxgraph.AtenCat, []any{dirs, int64(2)}, nil)
	return y, h, cell, err
}

// reorderGates returns p (a weight [gates*hidden, k] or bias
// [gates*hidden]) with its gate blocks in ONNX's order.
func (c *Call) reorderGates(p *fxgraph.Node, s *rnnSpec) (*fxgraph.Node, error) {
	order := rnnGateOrder[s.mode]
	if len(order) == 1 {
		return p, nil
	}
	var blocks []any
	for _, g := range order {
		blk, err := c.emit("", fxgraph.AtenSliceTensor, []any{p, int64(0), g * s.hid, (g + 1) * s.hid, int64(1)}, nil)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, blk)
	}
	return c.emit("", fxgraph.AtenCat, []any{blocks, int64(0)}, nil)
}
