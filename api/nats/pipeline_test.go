package natsapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// ensembleFixture is the Triton repository of a two-step ensemble
// (preprocess → cnn, config.pbtxt files only) with ONNX Runtime's outputs
// for in.IMAGE.npy (make pipeline-fixtures).
const ensembleFixture = "../../testdata/pipelines/ensemble"

// TestPipelineOverNATS: a Triton ensemble served as a pipeline answers
// over NATS as ONNX Runtime running its two models one after the other,
// in binary and JSON bodies.
func TestPipelineOverNATS(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(ensembleFixture)); err != nil {
		t.Fatal(err)
	}
	m := repoManager(t, dir)
	raw, err := tensor.ReadNpyFile(filepath.Join(dir, "in.IMAGE.npy"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(filepath.Join(dir, "ref.PROBS.npy"))
	if err != nil {
		t.Fatal(err)
	}
	e := startNATS(t)
	startServer(t, e, m, Options{})
	c, err := NewClient(connect(t, e), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, json := range []bool{false, true} {
		r, err := c.Infer(context.Background(), "classify_ensemble", []serving.NamedTensor{{Name: "IMAGE", Tensor: raw}}, InferOptions{JSON: json})
		if err != nil {
			t.Fatalf("json %v: %v", json, err)
		}
		if len(r.Outputs) != 1 || r.Outputs[0].Name != "PROBS" {
			t.Fatalf("json %v: outputs %v, want PROBS", json, r.Outputs)
		}
		checkProbs(t, r.Outputs[0].Tensor.Float64s(), r.Outputs[0].Tensor.Shape, want.Float64s())
	}
}
