package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/tensor"
)

// mlCases are the small classical-ML models of testdata/mlmodels (`make
// ml-fixtures`): scikit-learn via skl2onnx, LightGBM and XGBoost via
// onnxmltools, with ONNX Runtime's outputs.
func mlCases(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(repoRoot(t), "testdata", "mlmodels", "*"))
	if err != nil || len(dirs) < 9 {
		t.Fatalf("%d cases in testdata/mlmodels, want 9 (run make ml-fixtures)", len(dirs))
	}
	return dirs
}

// mlModelName is the served name of a case directory.
func mlModelName(dir string) string {
	return strings.NewReplacer(".", "_", "-", "_").Replace(filepath.Base(dir))
}

// mlRepo makes a repository of the cases, each symbol of each model served
// at exact sizes 1 and 7 (the references' rows), compiled on first use.
func mlRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	for _, dir := range mlCases(t) {
		model, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		g, err := onnx.ImportFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		syms := map[string]bool{}
		for _, p := range g.Placeholders() {
			for _, d := range p.Val().Shape {
				if !d.IsStatic() {
					syms[d.Sym] = true
				}
			}
		}
		var names []string
		for s := range syms {
			names = append(names, s)
		}
		sort.Strings(names)
		var cfg bytes.Buffer
		cfg.WriteString("warmup: lazy\npad:\n")
		for _, s := range names {
			fmt.Fprintf(&cfg, "  %s: false\n", s)
		}
		cfg.WriteString("buckets:\n")
		for _, s := range names {
			fmt.Fprintf(&cfg, "  %s: [1, 7]\n", s)
		}
		dst := filepath.Join(repo, mlModelName(dir))
		if err := os.MkdirAll(filepath.Join(dst, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "1", "model.onnx"), model, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "config.yaml"), cfg.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

// TestServeMLModels serves every small classical-ML model with a real
// `xserve serve` and calls it with the official Triton clients over HTTP
// (binary and JSON tensors) and gRPC (python/tests/test_ml_models.py):
// string inputs and outputs as BYTES, ZipMap's tensor form, each output
// compared with ONNX Runtime's. Then the string model over NATS with
// `xserve nats-infer`.
func TestServeMLModels(t *testing.T) {
	python := tritonVenv(t)
	p := startXserve(t, mlRepo(t), t.TempDir(), "--nats-listen", "127.0.0.1:0")
	runPytest(t, python, p, "python/tests/test_ml_models.py")
	t.Run("nats", func(t *testing.T) { mlOverNATS(t, p) })
	t.Run("grpc bytes_contents", func(t *testing.T) { mlBytesContents(t, p) })
	p.stop(t)
}

// onehotCase is the case directory of the one-hot pipeline (string inputs
// and labels).
func onehotCase(t *testing.T) string {
	t.Helper()
	for _, d := range mlCases(t) {
		if strings.HasPrefix(filepath.Base(d), "sklearn_onehot_columns") {
			return d
		}
	}
	t.Fatal("no sklearn_onehot_columns case in testdata/mlmodels")
	return ""
}

// mlBytesContents calls the one-hot pipeline over gRPC with its string
// inputs in the typed bytes_contents field (tritonclient sends raw
// contents) and reads the string labels from the length-prefixed raw
// output.
func mlBytesContents(t *testing.T, p *xserveProc) {
	dir := onehotCase(t)
	req := &pb.ModelInferRequest{ModelName: mlModelName(dir)}
	ins, _ := filepath.Glob(filepath.Join(dir, "in.*.npy"))
	for _, f := range ins {
		x, err := tensor.ReadNpyFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in := &pb.ModelInferRequest_InferInputTensor{Name: strings.TrimSuffix(strings.SplitN(filepath.Base(f), ".", 3)[2], ".npy"),
			Shape: x.Shape, Contents: &pb.InferTensorContents{}}
		if x.DType == tensor.String {
			in.Datatype, in.Contents.BytesContents = "BYTES", x.Strings
		} else {
			in.Datatype = "FP32"
			for _, v := range x.Float64s() {
				in.Contents.Fp32Contents = append(in.Contents.Fp32Contents, float32(v))
			}
		}
		req.Inputs = append(req.Inputs, in)
	}
	conn, err := grpc.NewClient(p.grpcAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := pb.NewGRPCInferenceServiceClient(conn).ModelInfer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(filepath.Join(dir, "ref.0.output_label.npy"))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Outputs {
		if o.Name != "output_label" {
			continue
		}
		if o.Datatype != "BYTES" {
			t.Fatalf("output_label is %s, want BYTES", o.Datatype)
		}
		raw := res.RawOutputContents[i]
		for k, w := range want.Strings {
			if len(raw) < 4 {
				t.Fatalf("raw output ends before label %d", k)
			}
			n := int(raw[0]) | int(raw[1])<<8 | int(raw[2])<<16 | int(raw[3])<<24
			if got := raw[4 : 4+n]; !bytes.Equal(got, w) {
				t.Errorf("label %d: %q, ONNX Runtime %q", k, got, w)
			}
			raw = raw[4+n:]
		}
		return
	}
	t.Fatalf("no output_label in %v", res.Outputs)
}

// mlOverNATS runs the one-hot pipeline (string inputs, a string label)
// with `xserve nats-infer` against the server's embedded NATS.
func mlOverNATS(t *testing.T, p *xserveProc) {
	m := embeddedURLE.FindStringSubmatch(p.log.String())
	seed := clientNkeyRE.FindStringSubmatch(p.log.String())
	if m == nil || seed == nil {
		t.Fatalf("no embedded NATS URL or client seed in the log:\n%s", p.log)
	}
	p.natsID(t)
	dir := onehotCase(t)
	out := t.TempDir()
	args := []string{"nats-infer", "--nats-url", m[1], "--nkey", seed[1], "--model", mlModelName(dir), "--output", out, "--timeout", "60s"}
	ins, _ := filepath.Glob(filepath.Join(dir, "in.*.npy"))
	for _, f := range ins {
		name := strings.TrimSuffix(strings.SplitN(filepath.Base(f), ".", 3)[2], ".npy")
		args = append(args, "--input", name+"="+f)
	}
	if _, stderr, err := xserve(t, args...); err != nil {
		t.Fatalf("nats-infer: %v\n%s", err, stderr)
	}
	got, err := tensor.ReadNpyFile(filepath.Join(out, "output_label.npy"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(filepath.Join(dir, "ref.0.output_label.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if got.DType != tensor.String || len(got.Strings) != len(want.Strings) {
		t.Fatalf("label %s, want %s", got, want)
	}
	for i := range want.Strings {
		if !bytes.Equal(got.Strings[i], want.Strings[i]) {
			t.Errorf("label %d: %q, ONNX Runtime %q", i, got.Strings[i], want.Strings[i])
		}
	}
}
