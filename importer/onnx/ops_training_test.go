package onnx_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/tensor"
)

// TestTrainingOptimizersMatchTorch runs one step of Adagrad, Momentum
// (standard and Nesterov) and Adam, on one and two tensors and at several
// step counts, against the matching torch.optim optimizer, and Gradient of
// a graph with broadcasting and reuse against torch.autograd
// (testdata/gen_torch_optim_cases.py).
func TestTrainingOptimizersMatchTorch(t *testing.T) {
	runORTCases(t, []string{
		"optim_adagrad_t0", "optim_adagrad_t5_two", "optim_momentum_t3_two",
		"optim_nesterov_t2", "optim_adam_t1", "optim_adam_t7_two", "optim_gradient_broadcast",
	})
}

// TestGradientErrors checks the clear error for an operator Gradient does
// not differentiate, and that operators off the path from the xs do not
// matter.
func TestGradientErrors(t *testing.T) {
	grad := &onnx.Node{OpType: "Gradient", Domain: "ai.onnx.preview.training", Inputs: []string{"a"}, Outputs: []string{"da"},
		Attributes: []*onnx.Attribute{{Name: "xs", Type: onnx.AttrStrings, Strings: [][]byte{[]byte("a")}}, {Name: "y", Type: onnx.AttrString, S: []byte("y")}}}
	for _, c := range []struct {
		name    string
		nodes   []*onnx.Node
		wantErr string
	}{
		{"through Relu", []*onnx.Node{nnNode("Relu", []string{"a"}, []string{"r"}), nnNode("Add", []string{"r", "b"}, []string{"y"})}, "Gradient through operator Relu"},
		{"Relu off the path", []*onnx.Node{nnNode("Relu", []string{"b"}, []string{"r"}), nnNode("Mul", []string{"a", "r"}, []string{"y"})}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &onnx.Model{IRVersion: 8, OpsetImports: []onnx.OpsetID{{Version: 13}, {Domain: "ai.onnx.preview.training", Version: 1}},
				Graph: &onnx.Graph{Name: "g", Nodes: append(c.nodes, grad), Inputs: []*onnx.ValueInfo{nnVI("a", tensor.Float32, 3), nnVI("b", tensor.Float32, 3)},
					Outputs: []*onnx.ValueInfo{{Name: "da"}}}}
			_, err := onnx.NewImporter().Import(m)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !errors.Is(err, onnx.ErrUnsupported) || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("error %v, want %q", err, c.wantErr)
			}
		})
	}
}
