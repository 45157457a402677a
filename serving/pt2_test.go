package serving

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// A torch.export archive of a small CNN (conv+bn+relu+pool+linear) with a
// dynamic batch symbol s77 in range [1, 64], and PyTorch eager's output for
// in0_0.npy (importer/fx/testdata/make_fixtures.py).
const (
	pt2CNN    = "../importer/fx/testdata/cnn/model.pt2"
	pt2CNNIn  = "../importer/fx/testdata/cnn/in0_0.npy"
	pt2CNNOut = "../importer/fx/testdata/cnn/out0_0.npy"
)

func addPT2(t *testing.T, r *testRepo, model string) {
	t.Helper()
	data, err := os.ReadFile(pt2CNN)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(r.root, model, "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, modelrepo.ModelFilePT2), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPT2ServesLikeONNX loads a .pt2 model from the repository exactly like
// an .onnx one and matches PyTorch's output; buckets outside the export's
// range constraint are a config error naming the key and the range.
func TestPT2ServesLikeONNX(t *testing.T) {
	r := newRepo(t)
	addPT2(t, r, "cnn")
	r.config("cnn", "buckets:\n  s77: [1, 2, 4]\n")
	addPT2(t, r, "toolarge")
	r.config("toolarge", "buckets:\n  s77: [1, 64, 128]\n")
	m, _ := start(t, r, nil)

	in, err := tensor.ReadNpyFile(pt2CNNIn)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(pt2CNNOut)
	if err != nil {
		t.Fatal(err)
	}
	md, err := m.Metadata("cnn", 0)
	if err != nil {
		t.Fatal(err)
	}
	if md.Platform != "pt2" || len(md.Inputs) != 1 {
		t.Fatalf("metadata = %+v", md)
	}
	resp, err := m.Infer(context.Background(), "cnn", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{md.Inputs[0].Name: in}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Outputs[0].Tensor
	for i := int64(0); i < want.NumElements(); i++ {
		if d := got.Float64At(i) - want.Float64At(i); d > 1e-4 || d < -1e-4 {
			t.Fatalf("output %d = %v, PyTorch %v", i, got.Float64At(i), want.Float64At(i))
		}
	}
	var reason string
	for _, s := range m.Status() {
		if s.Name == "toolarge" {
			reason = s.Reason
		}
	}
	if !strings.Contains(reason, "buckets.s77") || !strings.Contains(reason, "size 128 is outside the range [1, 64]") {
		t.Errorf("toolarge status reason = %q, want a config error about buckets.s77 and the range", reason)
	}
}
