package onnx_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/tensor"
)

// TestQuantAndContribOps runs every single-operator case of
// testdata/quant (python/make_quant_fixtures.py: the QuantizeLinear
// family, integer matmul/conv, and ONNX Runtime's com.microsoft quantized,
// fused and transformer operators) on the PJRT plugin against ONNX
// Runtime 1.23.2's outputs: integers exactly, floats within 1e-5 + 1e-4|want|.
// For the CUDA-only NhwcConv and BiasAdd, ONNX Runtime ran the standard
// operators they stand for.
func TestQuantAndContribOps(t *testing.T) {
	runner := conformance.NewRunner(nnPlugin(t))
	runner.RTol, runner.ATol = 1e-4, 1e-5
	dir := filepath.Join("testdata", "quant")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (make quant-fixtures writes them)", err)
	}
	if len(entries) < 90 {
		t.Fatalf("%d cases in %s, want the fixture script's ~100", len(entries), dir)
	}
	for _, e := range entries {
		c := conformance.Case{Suite: "quant", Name: e.Name(), Dir: filepath.Join(dir, e.Name())}
		t.Run(e.Name(), func(t *testing.T) {
			t.Parallel() // the client, lowerer and importer are safe for concurrent use
			res := runner.Run(context.Background(), c)
			if res.Status != conformance.Passed {
				t.Errorf("%s: %s", res.Status, res.Detail)
			}
		})
	}
}

// TestQuantizedModels runs whole models that ONNX Runtime's tools wrote
// (testdata/quantmodels, python/make_quant_fixtures.py --models): the
// zoo's reduced resnet18 quantized by quantize_static (QDQ signed per
// channel, QDQ unsigned, QOperator), by quantize_dynamic, and the QDQ
// model as ONNX Runtime's own graph optimizer rewrites it; and a BERT-like
// encoder fused by transformers.optimizer (EmbedLayerNormalization,
// Attention, SkipLayerNormalization, BiasGelu) and quantized by
// quantize_dynamic (also as ONNX Runtime's optimizer rewrites that:
// DynamicQuantizeMatMul, MatMulIntegerToFloat, FusedMatMul, Gelu) and
// by MatMulNBitsQuantizer to 4 bits (com.microsoft MatMulNBits, and UINT4
// blocked DequantizeLinear in QDQ format).
// References are ONNX Runtime 1.23.2's outputs.
func TestQuantizedModels(t *testing.T) {
	client := nnPlugin(t)
	dir := filepath.Join("testdata", "quantmodels")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (make quant-fixtures writes them)", err)
	}
	if len(entries) != 11 {
		t.Fatalf("%d models in %s, want 11", len(entries), dir)
	}
	for _, e := range entries {
		c := conformance.Case{Suite: "quantmodels", Name: e.Name(), Dir: filepath.Join(dir, e.Name())}
		t.Run(e.Name(), func(t *testing.T) {
			t.Parallel()
			runner := conformance.NewRunner(client)
			runner.RTol, runner.ATol = 1e-4, 1e-4
			if strings.HasPrefix(e.Name(), "model_cnn_qdq_") && !strings.Contains(e.Name(), "ort_optimized") {
				// QDQ as written runs Conv in float: where a conv output
				// lies within float rounding of a quantization tie (one
				// element of 2048 in layer1 here: x/scale = -11.499995),
				// XLA's and MLAS's summation orders round it to adjacent
				// int8 steps, and the step propagates to the logits. The
				// integer paths (QOperator, ORT-optimized QDQ) are exact.
				runner.RTol, runner.ATol = 0, 0.1
			}
			res := runner.Run(context.Background(), c)
			if res.Status != conformance.Passed {
				t.Errorf("%s: %s", res.Status, res.Detail)
			}
		})
	}
}

// TestQuantContribErrors: malformed or unsupported quantized and
// com.microsoft nodes fail the import with an error naming the operator,
// the node and the problem.
func TestQuantContribErrors(t *testing.T) {
	f32, i8, u8 := tensor.Float32, tensor.Int8, tensor.Uint8
	cases := []struct {
		name   string
		node   *onnx.Node
		inputs []*onnx.ValueInfo
		want   []string
	}{
		{"blocked scale of the wrong block count",
			nnNode("QuantizeLinear", []string{"x", "s"}, []string{"y"}, nnAI("axis", 1), nnAI("block_size", 2)),
			[]*onnx.ValueInfo{nnVI("x", f32, 2, 6), nnVI("s", f32, 2, 2)},
			[]string{"QuantizeLinear", `"bad"`, "blocked parameter", "3 of size 2"}},
		{"2-bit output",
			nnNode("QuantizeLinear", []string{"x", "s"}, []string{"y"}, nnAI("output_dtype", 25)),
			[]*onnx.ValueInfo{nnVI("x", f32, 2, 6), nnVI("s", f32)},
			[]string{"unsupported", "QuantizeLinear output_dtype 25", `"bad"`}},
		{"per-axis scale at opset 10",
			nnNode("DequantizeLinear", []string{"x", "s"}, []string{"y"}),
			[]*onnx.ValueInfo{nnVI("x", i8, 2, 6), nnVI("s", f32, 6)},
			[]string{"DequantizeLinear", "opset 10", "no per-axis"}},
		{"QLinearConcat input count",
			msNode("QLinearConcat", []string{"ys", "yz", "x", "xs"}),
			[]*onnx.ValueInfo{nnVI("ys", f32), nnVI("yz", u8), nnVI("x", u8, 2), nnVI("xs", f32)},
			[]string{"QLinearConcat has 4 inputs", `"bad"`}},
		{"QLinearAdd per-axis scale",
			msNode("QLinearAdd", []string{"a", "as", "az", "b", "bs", "bz", "cs", "cz"}),
			[]*onnx.ValueInfo{nnVI("a", u8, 2, 3), nnVI("as", f32, 3), nnVI("az", u8), nnVI("b", u8, 2, 3), nnVI("bs", f32), nnVI("bz", u8), nnVI("cs", f32), nnVI("cz", u8)},
			[]string{"unsupported", "per-axis", "QLinearAdd"}},
		{"Attention without num_heads",
			msNode("Attention", []string{"x", "w"}),
			[]*onnx.ValueInfo{nnVI("x", f32, 1, 3, 8), nnVI("w", f32, 8, 24)},
			[]string{"Attention", "num_heads 0", `"bad"`}},
		{"FusedConv activation",
			msNode("FusedConv", []string{"x", "w"}, &onnx.Attribute{Name: "activation", Type: onnx.AttrString, S: []byte("Swish")}),
			[]*onnx.ValueInfo{nnVI("x", f32, 1, 3, 5, 5), nnVI("w", f32, 2, 3, 3, 3)},
			[]string{"unsupported", `fused activation "Swish"`, "FusedConv"}},
		{"packed QKV MultiHeadAttention",
			msNode("MultiHeadAttention", []string{"q"}, nnAI("num_heads", 2)),
			[]*onnx.ValueInfo{nnVI("q", f32, 1, 3, 2, 3, 4)},
			[]string{"unsupported", "packed QKV", "MultiHeadAttention"}},
		{"Attention of a 2-D input",
			msNode("Attention", []string{"x", "w"}, nnAI("num_heads", 2)),
			[]*onnx.ValueInfo{nnVI("x", f32, 3, 8), nnVI("w", f32, 8, 24)},
			[]string{"Attention input of shape [3,8]", `"bad"`}},
		{"GroupQueryAttention of a 2-D query",
			msNode("GroupQueryAttention", []string{"q", "k", "v", "", "", "sl", "t"}, nnAI("num_heads", 2), nnAI("kv_num_heads", 1)),
			[]*onnx.ValueInfo{nnVI("q", f32, 3, 8), nnVI("k", f32, 3, 4), nnVI("v", f32, 3, 4), nnVI("sl", tensor.Int32, 1), nnVI("t", tensor.Int32)},
			[]string{"unsupported", "GroupQueryAttention input 0 of shape [3,8]"}},
		{"EmbedLayerNormalization of 1-D ids",
			msNode("EmbedLayerNormalization", []string{"ids", "", "we", "pe", "", "g", "b"}),
			[]*onnx.ValueInfo{nnVI("ids", tensor.Int32, 5), nnVI("we", f32, 10, 4), nnVI("pe", f32, 8, 4), nnVI("g", f32, 4), nnVI("b", f32, 4)},
			[]string{"input_ids of shape [5]", `"bad"`}},
		{"MatMulNBits with int8 activations (ORT GenAI's CPU default)",
			msNode("MatMulNBits", []string{"a", "b", "s"}, nnAI("K", 32), nnAI("N", 4), nnAI("bits", 4), nnAI("block_size", 32),
				nnAI("accuracy_level", 4)),
			[]*onnx.ValueInfo{nnVI("a", f32, 1, 32), nnVI("b", u8, 4, 1, 16), nnVI("s", f32, 4)},
			[]string{"unsupported", "MatMulNBits accuracy_level 4", "int8", "accuracy_level=1", `"bad"`}},
		{"unknown com.microsoft operator",
			msNode("QOrderedAttention", []string{"x"}),
			[]*onnx.ValueInfo{nnVI("x", f32, 1, 3, 8)},
			[]string{"unsupported", "com.microsoft.QOrderedAttention", `"bad"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.node.Name = "bad"
			opset := int64(21)
			if tc.node.OpType == "DequantizeLinear" {
				opset = 10
			}
			m := &onnx.Model{
				IRVersion:    8,
				OpsetImports: []onnx.OpsetID{{Domain: "", Version: opset}, {Domain: "com.microsoft", Version: 1}},
				Graph: &onnx.Graph{Name: "g", Nodes: []*onnx.Node{tc.node}, Inputs: tc.inputs,
					Outputs: []*onnx.ValueInfo{{Name: tc.node.Outputs[0]}}},
			}
			_, err := onnx.NewImporter().Import(m)
			if err == nil {
				t.Fatal("import succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func msNode(op string, ins []string, attrs ...*onnx.Attribute) *onnx.Node {
	n := nnNode(op, ins, []string{"y"}, attrs...)
	n.Domain = "com.microsoft"
	return n
}
