package modelrepo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// TestParseTritonEnsemble reads the ensemble of testdata/pipelines as
// Triton users write it: its signature gets the batch dim of
// max_batch_size, its steps become the pipeline's, Triton's -1 versions
// the latest.
func TestParseTritonEnsemble(t *testing.T) {
	path := "../testdata/pipelines/ensemble/classify_ensemble/config.pbtxt"
	c, err := LoadTritonConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "classify_ensemble" || c.Platform != FormatEnsemble || c.Pipeline == nil {
		t.Fatalf("name %q platform %q pipeline %v", c.Name, c.Platform, c.Pipeline)
	}
	in := c.Inputs[0]
	if in.Name != "IMAGE" || in.DType != tensor.Uint8 || !in.Dims.Equal(fxgraph.Shape{fxgraph.S(BatchSymbol), fxgraph.D(32), fxgraph.D(32), fxgraph.D(3)}) {
		t.Errorf("input %+v", in)
	}
	steps := c.Pipeline.Steps
	if len(steps) != 2 || steps[0].Model != "preprocess" || steps[1].Model != "cnn" || steps[0].Version != 0 {
		t.Fatalf("steps %+v", steps)
	}
	if steps[0].InputMap["raw"] != "IMAGE" || steps[1].InputMap["input"] != "preprocessed" || steps[1].OutputMap["probs"] != "PROBS" {
		t.Errorf("maps %+v", steps)
	}
	if got := c.Buckets[BatchSymbol]; len(got) == 0 || got[len(got)-1] != 8 {
		t.Errorf("batch buckets %v, want up to max_batch_size 8", got)
	}
}

// TestParseTritonModel reads a plain model's config.pbtxt: dims, batching,
// version policy.
func TestParseTritonModel(t *testing.T) {
	src := `name: "cnn"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, -1, 32 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 500 }
version_policy { specific { versions: [ 3, 1 ] } }
instance_group [ { count: 2 kind: KIND_CPU } ]
`
	c, err := ParseTritonConfig("models/cnn/config.pbtxt", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := fxgraph.Shape{fxgraph.S(BatchSymbol), fxgraph.D(3), AnyDim, fxgraph.D(32)}
	if c.Platform != FormatONNX || !c.Inputs[0].Dims.Equal(want) {
		t.Errorf("platform %q dims %s, want onnx %s", c.Platform, c.Inputs[0].Dims, want)
	}
	if !c.Batching.Enabled || c.Batching.MaxBatchSize != 16 || c.Batching.MaxQueueDelay != 500*time.Microsecond {
		t.Errorf("batching %+v", c.Batching)
	}
	if got := c.Buckets[BatchSymbol]; len(got) != 3 || got[0] != 4 || got[2] != 16 {
		t.Errorf("buckets %v, want [4 8 16]", got)
	}
	if got := c.VersionPolicy.Specific; len(got) != 2 || got[0] != 1 {
		t.Errorf("versions %v", got)
	}
}

// TestParseTritonErrors: each problem of a config.pbtxt is an ErrConfig
// naming the file and the key (and the line when the text does not parse).
func TestParseTritonErrors(t *testing.T) {
	ens := func(steps string) string {
		return `platform: "ensemble"
input [ { name: "IMAGE" data_type: TYPE_UINT8 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { ` + steps + ` }`
	}
	step := func(model, in, out string) string {
		return `step [ { model_name: "` + model + `" model_version: -1 input_map { key: "x" value: "` + in + `" } output_map { key: "y" value: "` + out + `" } } ]`
	}
	cases := []struct {
		name, src string
		want      []string
	}{
		{"bad text", "name: \"m\"\nmax_batch_size: eight\n", []string{"config.pbtxt", "line 2", "invalid protobuf text"}},
		{"unknown field", "name: \"m\"\nmax_batch: 8\n", []string{"max_batch", "line 2", "unknown field"}},
		{"name differs", `name: "other"`, []string{"name:", `"other" does not match the model's directory name "m"`}},
		{"platform", `platform: "tensorrt_plan"`, []string{"platform:", `"tensorrt_plan" is not served`}},
		{"torchscript", `backend: "pytorch"`, []string{"backend:", "TorchScript"}},
		{"sequence batching", `sequence_batching { }`, []string{"sequence_batching:", "stateless"}},
		{"reshape", `input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]`, []string{"input[0].reshape"}},
		{"dynamic batching without batch", `dynamic_batching { }`, []string{"dynamic_batching:", "max_batch_size > 0"}},
		{"preferred size", "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 8 ] }", []string{"dynamic_batching.preferred_batch_size", "1..max_batch_size (4)"}},
		{"string input of a model", `input [ { name: "x" data_type: TYPE_STRING dims: [ 1 ] } ]`, []string{"input[0].data_type", "TYPE_STRING"}},
		{"bad dim", `input [ { name: "x" data_type: TYPE_FP32 dims: [ -2 ] } ]`, []string{"input[0].dims[0]", "-2"}},
		{"ensemble without steps", `platform: "ensemble"`, []string{"ensemble_scheduling:", "needs ensemble_scheduling"}},
		{"scheduling of a model", `ensemble_scheduling { ` + step("a", "x", "y") + ` }`, []string{"ensemble_scheduling:", "only for platform"}},
		{"unmade tensor", ens(step("a", "NOPE", "OUT")), []string{"ensemble_scheduling.step[0].input_map.x", `no step or pipeline input makes tensor "NOPE"`}},
		{"unmade output", ens(step("a", "IMAGE", "mid")), []string{"outputs[0].name", `no step makes tensor "OUT"`}},
		{"made twice", ens(step("a", "IMAGE", "OUT") + step("b", "IMAGE", "OUT")), []string{"ensemble_scheduling.step[1].output_map.y", `"OUT" is already made by ensemble_scheduling.step[0] (a)`}},
		{"cycle", ens(step("a", "IMAGE", "OUT") + step("b", "c", "d") + step("c", "d", "c")), []string{"the steps depend on each other in a cycle", "step[1] (b)", "step[2] (c)"}},
		{"bad model name", ens(step("../x", "IMAGE", "OUT")), []string{"ensemble_scheduling.step[0].model_name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseTritonConfig("models/m/config.pbtxt", []byte(c.src))
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v, want ErrConfig", err)
			}
			for _, w := range append([]string{"models/m/config.pbtxt"}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestScanTritonRepository: a repository of config.pbtxt files scans as
// one of config.yaml files; the ensemble's version links the versions of
// the models its steps run, a step naming a missing model breaks it, and
// a directory with both config files is refused.
func TestScanTritonRepository(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../testdata/pipelines/ensemble")); err != nil {
		t.Fatal(err)
	}
	repo, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := repo.Scan()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := snap.Model("classify_ensemble")
	if !ok || e.Err != nil || len(e.Versions) != 1 {
		t.Fatalf("classify_ensemble: %+v", e)
	}
	v := e.Versions[0]
	if v.Format != FormatEnsemble || len(v.Steps) != 2 || filepath.Base(filepath.Dir(filepath.Dir(v.Steps[1].Path))) != "cnn" {
		t.Fatalf("version %+v", v)
	}

	if err := os.RemoveAll(filepath.Join(root, "cnn")); err != nil {
		t.Fatal(err)
	}
	if snap, err = repo.Scan(); err != nil {
		t.Fatal(err)
	}
	e, _ = snap.Model("classify_ensemble")
	if verr := e.VersionErrors[1]; !errors.Is(verr, ErrNotFound) || !strings.Contains(verr.Error(), `no model "cnn"`) {
		t.Errorf("ensemble version 1: %v, want ErrNotFound naming cnn", verr)
	}
	if err := os.WriteFile(filepath.Join(root, "preprocess", ConfigFile), []byte("warmup: lazy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err = repo.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if pre, _ := snap.Model("preprocess"); !errors.Is(pre.Err, ErrLayout) || !strings.Contains(pre.Err.Error(), "both") {
		t.Errorf("preprocess with two configs: %v, want ErrLayout", pre.Err)
	}
}
