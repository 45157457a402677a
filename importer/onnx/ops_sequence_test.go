package onnx_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/tensor"
)

// TestSequenceOpsMatchORT covers the sequence and optional operators and
// sequence/optional graph inputs and outputs (laid out as their tensors)
// against ONNX Runtime.
func TestSequenceOpsMatchORT(t *testing.T) {
	runORTCases(t, []string{
		"seq_construct_insert_at", "seq_empty_insert_concat_new_axis", "seq_split_scalar_length",
		"seq_split_nokeep_concat_erase", "seq_map_input_output", "seq_identity",
		"optional_tensor_has_get", "optional_input_absent", "optional_input_present",
	})
}

// TestSequenceImportErrors checks the clear errors where a sequence's
// structure is not known at import.
func TestSequenceImportErrors(t *testing.T) {
	seqIn := func(name string) *onnx.ValueInfo {
		return &onnx.ValueInfo{Name: name, Type: &onnx.TypeInfo{Kind: onnx.TypeSequence, ElemType: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: tensor.Float32, HasShape: true, Dims: []onnx.Dim{{Value: 2, Known: true}}}}}
	}
	model := func(nodes []*onnx.Node, inputs []*onnx.ValueInfo, out string) *onnx.Model {
		return &onnx.Model{IRVersion: 8, OpsetImports: []onnx.OpsetID{{Version: 17}}, Graph: &onnx.Graph{Name: "g", Nodes: nodes, Inputs: inputs, Outputs: []*onnx.ValueInfo{{Name: out}}}}
	}
	branch := func(name string) *onnx.Graph {
		return &onnx.Graph{Name: name, Nodes: []*onnx.Node{nnNode("SequenceConstruct", []string{"x"}, []string{name + "_s"})}, Outputs: []*onnx.ValueInfo{{Name: name + "_s"}}}
	}
	ifNode := nnNode("If", []string{"c"}, []string{"s"},
		&onnx.Attribute{Name: "then_branch", Type: onnx.AttrGraph, G: branch("then")}, &onnx.Attribute{Name: "else_branch", Type: onnx.AttrGraph, G: branch("else")})
	for _, c := range []struct {
		name    string
		m       *onnx.Model
		opts    onnx.ImportOptions
		wantErr string
		needs   bool
	}{
		{"sequence input without its length", model([]*onnx.Node{nnNode("SequenceLength", []string{"s"}, []string{"n"})}, []*onnx.ValueInfo{seqIn("s")}, "n"),
			onnx.ImportOptions{}, "must be given at compile time", false},
		{"split along a symbolic dim", model([]*onnx.Node{nnNode("SplitToSequence", []string{"x"}, []string{"s"})}, []*onnx.ValueInfo{nnVI("x", tensor.Float32, "n", 2)}, "s"),
			onnx.ImportOptions{}, "SplitToSequence along a dim of symbolic size", false},
		{"position from a graph input", model([]*onnx.Node{nnNode("SequenceAt", []string{"s", "p"}, []string{"y"})}, []*onnx.ValueInfo{seqIn("s"), nnVI("p", tensor.Int64)}, "y"),
			onnx.ImportOptions{Structured: map[string]*onnx.Value{"s": {Kind: onnx.TypeSequence, Elems: []*onnx.Value{onnx.TensorValue(tensor.New(tensor.Float32, 2))}}}}, "give their values at compile time", true},
		{"sequence fed to a tensor op", model([]*onnx.Node{nnNode("Relu", []string{"s"}, []string{"y"})}, []*onnx.ValueInfo{seqIn("s")}, "y"),
			onnx.ImportOptions{Structured: map[string]*onnx.Value{"s": {Kind: onnx.TypeSequence}}}, "is a sequence, the operator takes a tensor", false},
		{"If giving a sequence on a run-time condition", model([]*onnx.Node{ifNode}, []*onnx.ValueInfo{nnVI("c", tensor.Bool), nnVI("x", tensor.Float32, 2)}, "s"),
			onnx.ImportOptions{}, "computed from graph inputs c", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := onnx.NewImporter().ImportWithOptions(c.m, c.opts)
			if err == nil || !errors.Is(err, onnx.ErrUnsupported) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want an unsupported error containing %q", err, c.wantErr)
			}
			var needs *onnx.NeedsValueError
			if errors.As(err, &needs) != c.needs {
				t.Errorf("NeedsValueError %v, want %v", errors.As(err, &needs), c.needs)
			}
		})
	}
}

// TestDecodeValueErrors checks that malformed SequenceProto and
// OptionalProto data gives errors, not panics or wrong values.
func TestDecodeValueErrors(t *testing.T) {
	seqT := &onnx.TypeInfo{Kind: onnx.TypeSequence, ElemType: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: tensor.Float32}}
	optT := &onnx.TypeInfo{Kind: onnx.TypeOptional, ElemType: &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: tensor.Float32}}
	for _, c := range []struct {
		name    string
		data    []byte
		typ     *onnx.TypeInfo
		wantErr string
	}{
		{"truncated element", []byte{0x1a, 0x05, 0x00}, seqT, "truncated"},
		{"sparse element", []byte{0x22, 0x00}, seqT, "sparse tensors or maps"},
		{"sequence where tensors are declared", []byte{0x2a, 0x00}, seqT, "holds a sequence where its type says tensor"},
		{"map type", nil, &onnx.TypeInfo{Kind: onnx.TypeMap}, "value of type map"},
		{"optional holding a sequence, declared tensor", []byte{0x2a, 0x00}, optT, "holds a sequence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := onnx.DecodeValue(c.data, c.typ)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
	v, err := onnx.DecodeValue(nil, optT)
	if err != nil || v.Kind != onnx.TypeOptional || v.Elem != nil || len(v.Flatten()) != 0 {
		t.Errorf("empty OptionalProto: %+v, %v; want an optional holding none", v, err)
	}
}
