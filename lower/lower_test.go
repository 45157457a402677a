package lower_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/tensor"
)

const exampleModel = "../examples/models/tinycnn/1/model.onnx"

func openPlugin(t testing.TB) *pjrt.Client {
	t.Helper()
	return pjrttest.Open(t, "..", pjrt.OpenOptions{})
}

// TestWeightsAreParameters checks that the model's weights become program
// parameters (uploaded once, shared across buckets), not constants.
func TestWeightsAreParameters(t *testing.T) {
	g, err := onnx.ImportFile(exampleModel)
	if err != nil {
		t.Fatal(err)
	}
	l := lower.New(lower.Options{}, cpu.Platform())
	p1, err := l.Lower(g, map[string]int64{"batch": 1})
	if err != nil {
		t.Fatal(err)
	}
	p8, err := l.Lower(g, map[string]int64{"batch": 8})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p1.Inputs()); got != 1 {
		t.Errorf("%d input params, want 1", got)
	}
	// conv1.weight (216 elements), conv2.weight (1152) and fc.weight (160,
	// possibly pre-transposed at import) are parameters; the biases (8, 16 and
	// 10 elements) are small enough to inline as constants.
	var names []string
	for _, w := range p1.Weights() {
		names = append(names, w.Name)
		if w.Value == nil || w.Value.NumElements() <= 32 {
			t.Errorf("weight %s: value %v, want a tensor over the inline limit", w.Name, w.Value)
		}
	}
	if len(names) != 3 || names[0] != "conv1_weight" || names[1] != "conv2_weight" {
		t.Errorf("weights = %v, want conv1_weight, conv2_weight and the fc weight", names)
	}
	if len(p1.Weights()) != len(p8.Weights()) {
		t.Error("buckets disagree on the weight parameters")
	}
	for i, w := range p8.Weights() {
		if w.Name != p1.Weights()[i].Name || tensor.ShapeString(w.Shape) != tensor.ShapeString(p1.Weights()[i].Shape) {
			t.Errorf("bucket 8 weight %d = %s%v, bucket 1 has %s", i, w.Name, w.Shape, p1.Weights()[i].Name)
		}
	}
	if bytes.Contains(p1.Module, []byte("dense<[[[[")) {
		t.Error("a 4-D weight was emitted as a constant")
	}
	if !bytes.Contains(p8.Module, []byte("tensor<8x3x32x32xf32>")) {
		t.Error("bucket 8 program does not take an 8x3x32x32 input")
	}
}

// TestLoweringIsDeterministic lowers the same graph and bucket repeatedly
// (fresh lowerers too) and requires byte-identical StableHLO.
func TestLoweringIsDeterministic(t *testing.T) {
	g, err := onnx.ImportFile(exampleModel)
	if err != nil {
		t.Fatal(err)
	}
	dims := map[string]int64{"batch": 2}
	first, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, dims)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		p, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, dims)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.Module, first.Module) || p.Hash() != first.Hash() {
			t.Fatalf("run %d produced different StableHLO", i)
		}
	}
}

// TestCompileOnceExecuteMany compiles the example once and runs it many
// times with fresh inputs, checking every run against a single-shot run of
// the same input.
func TestCompileOnceExecuteMany(t *testing.T) {
	c := openPlugin(t)
	g, err := onnx.ImportFile(exampleModel)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, map[string]int64{"batch": 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exe, err := compileForTest(ctx, c, prog)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		in := tensor.New(tensor.Float32, 1, 3, 32, 32)
		for j := int64(0); j < in.NumElements(); j++ {
			in.SetFloat64(j, float64((j*7+int64(i)*13)%17)/17-0.5)
		}
		got, err := exe(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := conformance.Execute(ctx, c, prog, []*tensor.Tensor{in})
		if err != nil {
			t.Fatal(err)
		}
		if err := conformance.Compare(got[0], want[0], 0, 0); err != nil {
			t.Fatalf("run %d differs from a fresh compile: %v", i, err)
		}
	}
}
