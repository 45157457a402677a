package serving

import (
	"context"
	"errors"
	"fmt"
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

// TestPT2DerivedInputDim serves, with no config.yaml, one decode step of a
// toy Llama exported by torch.export (testdata/make_decode_step.py) whose
// attention_mask is [batch, past + 1]: the signature and metadata show the
// expression, a request binds past from the cache inputs and checks the
// mask against it, and the outputs match PyTorch eager at past 7 and at
// past 70 (above the 1..64 of the old default buckets).
func TestPT2DerivedInputDim(t *testing.T) {
	const dir = "testdata/decode_step"
	r := newRepo(t)
	data, err := os.ReadFile(filepath.Join(dir, "model.pt2"))
	if err != nil {
		t.Fatalf("%v (python serving/testdata/make_decode_step.py)", err)
	}
	mdir := filepath.Join(r.root, "step", "1")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mdir, modelrepo.ModelFilePT2), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, _ := start(t, r, nil)
	md, err := m.Metadata("step", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(md.Inputs[1].Dims, ","); got != "batch,s20 + 1" || md.Inputs[1].Shape[1] != -1 {
		t.Errorf("attention_mask dims %s (shape %v), want batch,s20 + 1", got, md.Inputs[1].Shape)
	}
	names := []string{"input_ids", "attention_mask", "past_key", "past_value"}
	load := func(f string) *tensor.Tensor {
		t.Helper()
		v, err := tensor.ReadNpyFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for req := range 2 {
		in := map[string]*tensor.Tensor{}
		for k, n := range names {
			in[n] = load(fmt.Sprintf("in.%d.%d.%s.npy", req, k, n))
		}
		resp, err := m.Infer(context.Background(), "step", 0, &InferRequest{Inputs: in})
		if err != nil {
			t.Fatalf("request %d: %v", req, err)
		}
		for k, o := range resp.Outputs {
			want := load(fmt.Sprintf("ref.%d.%d.npy", req, k))
			if tensor.ShapeString(o.Tensor.Shape) != tensor.ShapeString(want.Shape) {
				t.Fatalf("request %d output %d: shape %v, PyTorch %v", req, k, o.Tensor.Shape, want.Shape)
			}
			for i := int64(0); i < want.NumElements(); i++ {
				if d := o.Tensor.Float64At(i) - want.Float64At(i); d > 1e-4 || d < -1e-4 {
					t.Fatalf("request %d output %d element %d = %v, PyTorch %v", req, k, i, o.Tensor.Float64At(i), want.Float64At(i))
				}
			}
		}
	}
	// A mask one position too long is refused, naming the expression.
	in := map[string]*tensor.Tensor{}
	for k, n := range names {
		in[n] = load(fmt.Sprintf("in.0.%d.%s.npy", k, n))
	}
	in["attention_mask"] = tensor.New(tensor.Int64, 3, 9)
	_, err = m.Infer(context.Background(), "step", 0, &InferRequest{Inputs: in})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), `input "attention_mask" dim 1 (s20 + 1) is 9, but s20 + 1 is 8 (s20 is 7 from input "past_key" dim 2)`) {
		t.Errorf("mask of 9 with past 7: %v", err)
	}
}
