package onnx_test

import (
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// TestRNNConverters checks the structure of converted RNN/GRU/LSTM nodes
// (the ONNX conformance cases check their values) and their errors. The
// sequence may be symbolic: the lowering unrolls it per shape bucket.
func TestRNNConverters(t *testing.T) {
	f32 := tensor.Float32
	x := nnVI("x", f32, "T", "N", 3)
	w := func(g int) *onnx.ValueInfo { return nnVI("w", f32, 1, g*4, 3) }
	r := func(g int) *onnx.ValueInfo { return nnVI("r", f32, 1, g*4, 4) }
	acts := &onnx.Attribute{Name: "activations", Type: onnx.AttrStrings, Strings: [][]byte{[]byte("Relu")}}
	mixed := &onnx.Attribute{Name: "activations", Type: onnx.AttrStrings, Strings: [][]byte{[]byte("Sigmoid"), []byte("Relu")}}
	for _, c := range []struct {
		name    string
		node    *onnx.Node
		inputs  []*onnx.ValueInfo
		inits   []*onnx.Initializer
		outputs []string
		targets string
		metas   string
		err     string
	}{
		{name: "LSTM, symbolic sequence",
			node:   nnNode("LSTM", []string{"x", "w", "r"}, []string{"y", "yh", "yc"}, nnAI("hidden_size", 4)),
			inputs: []*onnx.ValueInfo{x, w(4), r(4)}, outputs: []string{"y", "yh", "yc"},
			targets: "xserve.rnn getitem getitem getitem", metas: "float32[T,1,N,4] float32[1,N,4] float32[1,N,4]"},
		{name: "GRU batch first, Y_h only",
			node:   nnNode("GRU", []string{"xb", "w", "r"}, []string{"", "yh"}, nnAI("hidden_size", 4), nnAI("layout", 1)),
			inputs: []*onnx.ValueInfo{nnVI("xb", f32, "N", 5, 3), w(3), r(3)}, outputs: []string{"yh"},
			targets: "permute.default xserve.rnn getitem permute.default", metas: "float32[N,1,4]"},
		{name: "RNN, hidden_size from R",
			node:   nnNode("RNN", []string{"x", "w", "r"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{x, w(1), r(1)}, outputs: []string{"y"},
			targets: "xserve.rnn getitem", metas: "float32[T,1,N,4]"},
		{name: "RNN, Relu",
			node:   nnNode("RNN", []string{"x", "w", "r"}, []string{"y"}, nnAI("hidden_size", 4), acts),
			inputs: []*onnx.ValueInfo{x, w(1), r(1)}, outputs: []string{"y"},
			targets: "xserve.rnn getitem", metas: "float32[T,1,N,4]"},
		{name: "other activations",
			node:   nnNode("GRU", []string{"x", "w", "r"}, []string{"y"}, nnAI("hidden_size", 4), mixed),
			inputs: []*onnx.ValueInfo{x, w(3), r(3)}, outputs: []string{"y"}, err: "activations"},
		{name: "sequence_lens, a constant shorter than the sequence",
			node:   nnNode("RNN", []string{"xs", "w", "r", "", "lens"}, []string{"y"}, nnAI("hidden_size", 4)),
			inputs: []*onnx.ValueInfo{nnVI("xs", f32, 5, 2, 3), w(1), r(1)}, inits: []*onnx.Initializer{{Name: "lens", Tensor: tensor.FromInt64s([]int64{5, 3})}},
			outputs: []string{"y"}, targets: "xserve.rnn getitem", metas: "float32[5,1,2,4]"},
		{name: "sequence_lens, a run-time value",
			node:   nnNode("LSTM", []string{"x", "w", "r", "", "lens"}, []string{"y"}, nnAI("hidden_size", 4)),
			inputs: []*onnx.ValueInfo{x, w(4), r(4), nnVI("lens", tensor.Int32, "N")}, outputs: []string{"y"},
			targets: "xserve.rnn getitem", metas: "float32[T,1,N,4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := nnImport(14, c.node, c.inputs, c.inits, c.outputs)
			if !checkImport(t, g, err, c.targets, c.err) {
				return
			}
			if got := nnOutputMetas(g); got != c.metas {
				t.Errorf("outputs %s, want %s", got, c.metas)
			}
			// Every bucket of the symbols lowers, to the same StableHLO on
			// every import.
			dims := map[string]int64{"T": 3, "N": 2}
			p1, err := lower.New(lower.Options{}).Lower(g, dims)
			if err != nil {
				t.Fatalf("lower: %v", err)
			}
			g2, err := nnImport(14, c.node, c.inputs, c.inits, c.outputs)
			if err != nil {
				t.Fatal(err)
			}
			if p2, err := lower.New(lower.Options{}).Lower(g2, dims); err != nil || string(p2.Module) != string(p1.Module) {
				t.Errorf("a second import lowers to other StableHLO (err %v)", err)
			}
		})
	}
}

// TestRNNSequenceLensMatchORT runs RNN, GRU and LSTM whose sequence_lens is
// a graph input (forward, reverse, bidirectional; initial states,
// peepholes, linear_before_reset, Relu) against ONNX Runtime
// (testdata/ort, gen_ort_cases.py).
func TestRNNSequenceLensMatchORT(t *testing.T) {
	runORTCases(t, []string{
		"lstm_seqlens_forward", "lstm_seqlens_bidirectional_states_peephole", "lstm_seqlens_reverse",
		"gru_seqlens_reverse", "gru_seqlens_bidirectional_lbr", "rnn_seqlens_bidirectional_relu", "rnn_seqlens_forward",
	})
}

// TestTopKRunTimeKMatchesORT runs TopK whose K is a graph input (outputs
// of data-dependent size, trimmed to K) against ONNX Runtime
// (testdata/ort, gen_ort_cases.py).
func TestTopKRunTimeKMatchesORT(t *testing.T) {
	runORTCases(t, []string{"topk_runtime_k", "topk_runtime_k_smallest_axis0"})
}
