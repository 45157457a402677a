package pipeline

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

const ensembleDir = "../testdata/pipelines/ensemble"

// stepGraphs imports the ensemble fixture's models by name.
func stepGraphs(t *testing.T) map[string]*fxgraph.Graph {
	t.Helper()
	out := map[string]*fxgraph.Graph{}
	for _, m := range []string{"preprocess", "cnn"} {
		g, err := importer.Load(fmt.Sprintf("%s/%s/1/model.onnx", ensembleDir, m))
		if err != nil {
			t.Fatal(err)
		}
		out[m] = g
	}
	return out
}

// build parses a config.yaml and builds its pipeline over the fixture's
// models; labels.txt reads as three labels.
func build(t *testing.T, graphs map[string]*fxgraph.Graph, yaml string) (*Plan, error) {
	t.Helper()
	const file = "models/p/config.yaml"
	cfg, err := modelrepo.ParseConfig(file, []byte(yaml))
	if err != nil {
		return nil, err
	}
	o := Options{Config: cfg, ConfigFile: file, ReadFile: func(name string) ([]byte, error) {
		if name == "labels.txt" {
			return []byte("cat\ndog\nbird\nfish\nfrog\nhorse\nship\ntruck\ncar\nplane\n"), nil
		}
		return nil, fmt.Errorf("no file %s: %w", name, os.ErrNotExist)
	}}
	for _, s := range cfg.Pipeline.Steps {
		o.Graphs = append(o.Graphs, graphs[s.Model])
		o.Paths = append(o.Paths, "")
	}
	return Build(o)
}

const classifyYAML = `inputs:
  - {name: IMAGE, dtype: uint8, dims: [batch, 32, 32, 3]}
outputs:
  - {name: LABELS, dtype: string, dims: [batch, 3]}
  - {name: SCORES, dtype: float32, dims: [batch, 3]}
pipeline:
  fuse: %s
  steps:
    - {model: preprocess, input_map: {raw: IMAGE}, output_map: {pixels: pre}}
    - {model: cnn, input_map: {input: pre}, output_map: {probs: probs}}
    - builtin: topk
      params: {k: 3, labels: labels.txt}
      input_map: {x: probs}
      output_map: {values: SCORES, labels: LABELS}
`

// TestBuildStitches: two model steps and a top-k with labels are one
// segment, one graph whose device part computes the top-k and whose host
// part looks the labels up; with fuse: none each step is a segment.
func TestBuildStitches(t *testing.T) {
	graphs := stepGraphs(t)
	plan, err := build(t, graphs, fmt.Sprintf(classifyYAML, "auto"))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Segments) != 1 || !plan.Segments[0].Fused() || len(plan.Segments[0].Steps) != 3 {
		t.Fatalf("segments:\n%s", plan.Describe())
	}
	seg := plan.Segments[0]
	if strings.Join(seg.Inputs, ",") != "IMAGE" || strings.Join(seg.Outputs, ",") != "LABELS,SCORES" {
		t.Errorf("segment reads %v, makes %v", seg.Inputs, seg.Outputs)
	}
	host, err := fxgraph.SplitHost(seg.Graph)
	if err != nil || host == nil || host.Device == nil {
		t.Fatalf("split: %v %v: want a device program and host labels", host, err)
	}
	if got := plan.Steps[2].Placement; got != "device+host" {
		t.Errorf("topk placement %q", got)
	}
	if o := plan.Outputs[0]; o.Meta.DType != tensor.String || o.Meta.Shape[1] != fxgraph.D(3) {
		t.Errorf("LABELS %s", o.Meta)
	}
	// the inlined steps' symbols follow the pipeline's input
	if d := plan.Outputs[1].Meta.Shape[0]; d != fxgraph.S("batch") {
		t.Errorf("SCORES batch dim %s, want batch", d)
	}

	none, err := build(t, graphs, fmt.Sprintf(classifyYAML, "none"))
	if err != nil {
		t.Fatal(err)
	}
	if len(none.Segments) != 3 {
		t.Fatalf("fuse none: %d segments, want 3:\n%s", len(none.Segments), none.Describe())
	}
	for i, s := range none.Segments {
		if s.Fused() {
			t.Errorf("fuse none: segment %d fused", i)
		}
	}
}

// TestBuildErrors: a pipeline that cannot be built names the file, the
// key and what is wrong.
func TestBuildErrors(t *testing.T) {
	graphs := stepGraphs(t)
	base := fmt.Sprintf(classifyYAML, "auto")
	cases := []struct {
		name, old, new string
		want           []string
	}{
		{"unknown builtin", "builtin: topk", "builtin: top_k", []string{"pipeline.steps[2].builtin", `unknown built-in step "top_k"`, "topk"}},
		{"unknown param", "k: 3,", "kk: 3, k: 3,", []string{"pipeline.steps[2].params.kk", "unknown parameter"}},
		{"k missing", "k: 3, ", "", []string{"pipeline.steps[2].params.k", "required"}},
		{"labels file", "labels.txt", "nope.txt", []string{"pipeline.steps[2].params.labels", "no file nope.txt"}},
		{"model input", "{raw: IMAGE}", "{rawx: IMAGE}", []string{"pipeline.steps[0].input_map", `input "raw" is not mapped`}},
		{"model output", "{pixels: pre}", "{pixelz: pre}", []string{"pipeline.steps[0].output_map.pixelz", `has no output "pixelz"`, "pixels"}},
		{"builtin input", "input_map: {x: probs}", "input_map: {y: probs}", []string{"pipeline.steps[2].input_map.y", `built-in topk has no input "y"`}},
		{"builtin output", "values: SCORES", "valuez: SCORES", []string{"pipeline.steps[2].output_map.valuez", `has no output "valuez"`}},
		{"size between steps", "[batch, 32, 32, 3]", "[batch, 16, 16, 3]", []string{"pipeline.steps", "dim"}},
		{"dtype between steps", "dtype: uint8", "dtype: float32", []string{"pipeline.steps[0]", "uint8"}},
		{"output dtype", "dtype: float32, dims: [batch, 3]", "dtype: int64, dims: [batch, 3]", []string{"outputs[1].dtype", "int64"}},
		{"output rank", "dims: [batch, 3]}\n  - {name: SCORES", "dims: [batch]}\n  - {name: SCORES", []string{"outputs[0].dims", "rank 1"}},
		{"fuse", "fuse: auto", "fuse: always", []string{"pipeline.fuse", `"always"`}},
		{"both", "builtin: topk", "builtin: topk\n      model: cnn", []string{"pipeline.steps[2]", "not both"}},
		{"unmade", "{x: probs}", "{x: prob}", []string{"pipeline.steps[2].input_map.x", `tensor "prob"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(base, c.old, c.new, 1)
			if src == base {
				t.Fatalf("%q is not in the config", c.old)
			}
			_, err := build(t, graphs, src)
			if err == nil {
				t.Fatal("built")
			}
			t.Log(err)
			if !errors.Is(err, ErrConfig) && !errors.Is(err, modelrepo.ErrConfig) {
				t.Errorf("error %v wraps neither ErrConfig", err)
			}
			for _, w := range append([]string{"models/p/config.yaml"}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}
