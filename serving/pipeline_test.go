package serving

import (
	"archive/zip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// pipelineFixtures is testdata/pipelines (python/pipelines/make_fixtures.py,
// make pipeline-fixtures).
const pipelineFixtures = "../testdata/pipelines"

// copyTree copies the directory src into dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s (run make pipeline-fixtures): %v", src, err)
	}
}

// ensembleRepo is a copy of the Triton repository of testdata/pipelines/
// ensemble: preprocess and cnn with their config.pbtxt, and the ensemble
// chaining them.
func ensembleRepo(t testing.TB) *testRepo {
	t.Helper()
	r := newRepo(t)
	copyTree(t, filepath.Join(pipelineFixtures, "ensemble"), r.root)
	return r
}

// TestTritonEnsemble serves a Triton repository as it is (config.pbtxt
// files, no config.yaml): the ensemble's two ONNX steps are stitched into
// one executable per bucket and answer as ONNX Runtime running the two
// models one after the other.
func TestTritonEnsemble(t *testing.T) {
	r := ensembleRepo(t)
	m, _ := start(t, r, nil)
	raw := readNpy(t, filepath.Join(r.root, "in.IMAGE.npy"))
	want := readNpy(t, filepath.Join(r.root, "ref.PROBS.npy"))

	for _, rowsIdx := range [][]int{{0, 1, 2, 3, 4}, {2}} {
		resp := infer(t, m, "classify_ensemble", 0, map[string]*tensor.Tensor{"IMAGE": rows(raw, rowsIdx...)})
		if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "PROBS" {
			t.Fatalf("outputs %v, want PROBS", resp.Outputs)
		}
		assertClose(t, "PROBS", resp.Outputs[0].Tensor, rows(want, rowsIdx...), 1e-5)
	}

	md, err := m.Metadata("classify_ensemble", 0)
	if err != nil {
		t.Fatal(err)
	}
	if md.Platform != "ensemble" || md.Pipeline == nil || len(md.Pipeline.Segments) != 1 || !md.Pipeline.Segments[0].Fused {
		t.Fatalf("metadata: platform %q, pipeline %+v: want one fused segment", md.Platform, md.Pipeline)
	}
	for _, s := range md.Pipeline.Steps {
		if !s.Fused || s.Segment != 0 {
			t.Errorf("step %s: fused %v segment %d, want fused in segment 0", s.Name, s.Fused, s.Segment)
		}
	}
	if got := metric(t, m, `xserve_pipeline_executions{model="classify_ensemble",version="1"}`); got != 1 {
		t.Errorf("xserve_pipeline_executions = %v, want 1", got)
	}
	for _, b := range []string{"batch=8", "batch=1"} {
		series := `xserve_compilations_total{bucket="` + b + `",model="classify_ensemble",version="1"}`
		if got := metric(t, m, series); got != 1 {
			t.Errorf("%s = %v, want one executable for the bucket", series, got)
		}
	}
	// The step models are served on their own too, as Triton serves them.
	pixels := infer(t, m, "preprocess", 0, map[string]*tensor.Tensor{"raw": rows(raw, 0)})
	probs := infer(t, m, "cnn", 0, map[string]*tensor.Tensor{"input": pixels.Outputs[0].Tensor})
	assertClose(t, "cnn(preprocess)", probs.Outputs[0].Tensor, rows(want, 0), 1e-5)
}

// TestPipelineErrors: a pipeline that cannot be built is UNAVAILABLE with
// a reason naming the file and the key, and the other models serve.
func TestPipelineErrors(t *testing.T) {
	cases := []struct {
		name, edit, want string
	}{
		{"unknown step input", `key: "raw"`, `config.pbtxt: ensemble_scheduling.step[0].input_map`},
		{"unknown model", `model_name: "cnn"`, `no model "cnx"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ensembleRepo(t)
			path := filepath.Join(r.root, "classify_ensemble", modelrepo.ConfigFileTriton)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			repl := map[string]string{`key: "raw"`: `key: "rawx"`, `model_name: "cnn"`: `model_name: "cnx"`}[c.edit]
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), c.edit, repl, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			m, _ := start(t, r, nil)
			_, err = m.Infer(context.Background(), "classify_ensemble", 0, &InferRequest{})
			if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrNotReady naming %q", err, c.want)
			}
			raw := readNpy(t, filepath.Join(r.root, "in.IMAGE.npy"))
			infer(t, m, "preprocess", 0, map[string]*tensor.Tensor{"raw": rows(raw, 0)})
		})
	}
}

// fusionRepo is the ensemble fixture plus the same two steps as config.yaml
// pipelines: "fused" (fuse: auto, one executable per bucket), "steps"
// (fuse: none: each step an execution of its own, as Triton runs an
// ensemble) and "separate" (fuse: auto, but the cnn step separate: true).
func fusionRepo(t testing.TB) *testRepo {
	t.Helper()
	r := ensembleRepo(t)
	for model, fuse := range map[string]string{"fused": "auto", "steps": "none", "separate": "auto"} {
		sep := ""
		if model == "separate" {
			sep = ", separate: true"
		}
		r.config(model, `inputs:
  - {name: IMAGE, dtype: uint8, dims: [batch, 32, 32, 3]}
outputs:
  - {name: PROBS, dtype: float32, dims: [batch, 10]}
buckets:
  batch: [1, 8]
warmup: eager
pipeline:
  fuse: `+fuse+`
  steps:
    - {model: preprocess, input_map: {raw: IMAGE}, output_map: {pixels: pre}}
    - {model: cnn, input_map: {input: pre}, output_map: {probs: PROBS}`+sep+`}
`)
	}
	return r
}

// TestPipelineFuseNone: the steps run one by one (fuse: none), or with
// the cnn step kept separate (separate: true), answer as the stitched
// program and as ONNX Runtime, in two executions; the metadata says the
// separate step runs whole in a segment of its own.
func TestPipelineFuseNone(t *testing.T) {
	r := fusionRepo(t)
	m, _ := start(t, r, nil)
	raw := readNpy(t, filepath.Join(r.root, "in.IMAGE.npy"))
	want := readNpy(t, filepath.Join(r.root, "ref.PROBS.npy"))
	for _, model := range []string{"fused", "steps", "separate"} {
		for _, idx := range [][]int{{0, 1, 2, 3, 4}, {3}} {
			resp := infer(t, m, model, 0, map[string]*tensor.Tensor{"IMAGE": rows(raw, idx...)})
			assertClose(t, model, resp.Outputs[0].Tensor, rows(want, idx...), 1e-5)
		}
	}
	for model, n := range map[string]float64{"fused": 1, "steps": 2, "separate": 2} {
		if got := metric(t, m, `xserve_pipeline_executions{model="`+model+`",version="1"}`); got != n {
			t.Errorf("%s: xserve_pipeline_executions = %v, want %v", model, got, n)
		}
	}
	md, err := m.Metadata("separate", 0)
	if err != nil {
		t.Fatal(err)
	}
	segs := md.Pipeline.Segments
	if len(segs) != 2 || !segs[1].Whole || segs[1].Fused || len(segs[1].Steps) != 1 || segs[1].Steps[0] != "cnn" {
		t.Errorf("separate: segments %+v, want [preprocess] then cnn whole", segs)
	}
	assertDeviceHandoff(t, m, raw, want)
	assertHostFallback(t, m, raw, want)
}

// assertHostFallback: an intermediate on the device whose shape is not the
// next segment's bucket input (5 real rows padded to 16, the bucket holds
// 8) goes to that segment through the host, cut to its real rows: the
// answer is still ONNX Runtime's, and xserve_pipeline_handoffs_total says
// path=host.
func assertHostFallback(t *testing.T, m *Manager, raw, want *tensor.Tensor) {
	t.Helper()
	ctx := context.Background()
	m.mu.Lock()
	v, err := m.lookupLocked("steps", 0)
	m.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	idx := []int{0, 1, 2, 3, 4}
	seg0, first := v.pipe.plan.Segments[0], v.pipe.segs[0]
	r, _, err := first.inferOnce(ctx, &InferRequest{Inputs: map[string]*tensor.Tensor{seg0.InputNames[0]: rows(raw, idx...)}})
	if err != nil {
		t.Fatal(err)
	}
	pre := r.Outputs[0].Tensor
	padded := tensor.New(pre.DType, append([]int64{16}, pre.Shape[1:]...)...)
	copy(padded.Data, pre.Data)
	buf, err := m.client.Upload(ctx, padded)
	if err != nil {
		t.Fatal(err)
	}
	dev := map[string]*onDevice{seg0.Outputs[0]: {buf: buf, real: pre.Shape, from: first, k: first.plan.outputIndex(r.Outputs[0].Name)}}
	defer closeDevice(dev)
	out, _, err := v.runSegment(ctx, 1, &InferRequest{}, map[string]*tensor.Tensor{}, dev)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "steps through the host", out.Outputs[0].Tensor, rows(want, idx...), 1e-5)
	if got := metric(t, m, `xserve_pipeline_handoffs_total{model="steps",path="host",version="1"}`); got != 1 {
		t.Errorf("steps: xserve_pipeline_handoffs_total{path=host} = %v, want 1", got)
	}
}

// assertDeviceHandoff: a request of the two-segment pipelines of
// fusionRepo ("steps", "separate") copies to the device only its input
// and to the host only its output, as the fused pipeline does: the
// intermediate stays on the device between the segments, the answers
// still ONNX Runtime's; the metadata and xserve_pipeline_handoffs_total
// say so.
func assertDeviceHandoff(t *testing.T, m *Manager, raw, want *tensor.Tensor) {
	t.Helper()
	for _, model := range []string{"fused", "steps", "separate"} {
		for _, idx := range [][]int{{0, 1, 2, 3, 4}, {3}} { // buckets batch=8 and batch=1
			before := m.client.Transfers()
			resp := infer(t, m, model, 0, map[string]*tensor.Tensor{"IMAGE": rows(raw, idx...)})
			got := m.client.Transfers()
			assertClose(t, model, resp.Outputs[0].Tensor, rows(want, idx...), 1e-5)
			up, down := got.ToDevice-before.ToDevice, got.ToHost-before.ToHost
			t.Logf("%s, %d rows (%s): %d copies to the device, %d to the host", model, len(idx), resp.Bucket, up, down)
			if up != 1 || down != 1 {
				t.Errorf("%s, %d rows: %d copies to the device and %d to the host, want 1 and 1 (IMAGE in, PROBS out)", model, len(idx), up, down)
			}
		}
	}
	for _, model := range []string{"steps", "separate"} {
		md, err := m.Metadata(model, 0)
		if err != nil {
			t.Fatal(err)
		}
		if segs := md.Pipeline.Segments; len(segs) != 2 || !slices.Equal(segs[1].DeviceInputs, []string{"pre"}) {
			t.Errorf("%s: segments %+v, want the second taking pre on the device", model, segs)
		}
		if got := metric(t, m, `xserve_pipeline_handoffs_total{model="`+model+`",path="device",version="1"}`); got < 2 {
			t.Errorf("%s: xserve_pipeline_handoffs_total{path=device} = %v, want ≥ 2", model, got)
		}
		if got := metric(t, m, `xserve_pipeline_handoffs_total{model="`+model+`",path="host",version="1"}`); got != 0 {
			t.Errorf("%s: xserve_pipeline_handoffs_total{path=host} = %v, want 0", model, got)
		}
	}
}

// BenchmarkPipelineFusion compares the two steps stitched into one
// executable per bucket ("fused") with the same steps run one execution
// each, the intermediate crossing the host ("steps"), at batch 1 and 8.
// Each op is one round: for each batch, 100 requests of each pipeline in
// turn (the order alternating from round to round), so that both see the
// same machine; it reports the median µs per request of each and the
// median of the rounds' steps/fused ratios, and the share of rounds the
// fused pipeline won (docs/BENCHMARKS.md):
//
//	go test -run '^$' -bench PipelineFusion -benchtime 20x ./serving
func BenchmarkPipelineFusion(b *testing.B) {
	r := fusionRepo(b)
	m, _ := start(b, r, nil)
	raw := readNpy(b, filepath.Join(r.root, "in.IMAGE.npy"))
	const perRound = 100
	inputs := map[int]map[string]*tensor.Tensor{}
	for _, n := range []int{1, 8} {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i % 5
		}
		inputs[n] = map[string]*tensor.Tensor{"IMAGE": rows(raw, idx...)}
	}
	timeIt := func(model string, n int) float64 {
		start := time.Now()
		for range perRound {
			if _, err := m.Infer(context.Background(), model, 0, &InferRequest{Inputs: inputs[n]}); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Microseconds()) / perRound
	}
	for _, n := range []int{1, 8} { // compile and warm both
		timeIt("fused", n)
		timeIt("steps", n)
	}
	us := map[string][]float64{}
	b.ResetTimer()
	for round := range b.N {
		for _, n := range []int{1, 8} {
			order := []string{"fused", "steps"}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			got := map[string]float64{}
			for _, model := range order {
				got[model] = timeIt(model, n)
				us[fmt.Sprintf("%s/batch=%d", model, n)] = append(us[fmt.Sprintf("%s/batch=%d", model, n)], got[model])
			}
			us[fmt.Sprintf("ratio/batch=%d", n)] = append(us[fmt.Sprintf("ratio/batch=%d", n)], got["steps"]/got["fused"])
		}
	}
	for _, n := range []int{1, 8} {
		b.ReportMetric(median(us[fmt.Sprintf("fused/batch=%d", n)]), fmt.Sprintf("us-fused@%d", n))
		b.ReportMetric(median(us[fmt.Sprintf("steps/batch=%d", n)]), fmt.Sprintf("us-steps@%d", n))
		ratios := us[fmt.Sprintf("ratio/batch=%d", n)]
		b.ReportMetric(median(ratios), fmt.Sprintf("x-steps/fused@%d", n))
		won := 0
		for _, x := range ratios {
			if x > 1 {
				won++
			}
		}
		b.ReportMetric(float64(won)/float64(len(ratios)), fmt.Sprintf("fused-won@%d", n))
	}
}

// classifierRef is testdata/pipelines/classifier/ref.json: what
// torchvision's preprocessing + the model + softmax + top-5 give.
type classifierRef struct {
	File   string    `json:"file"`
	Labels []string  `json:"labels"`
	Scores []float64 `json:"scores"`
}

// TestClassifierPipeline: JPEG and PNG bytes in, top-5 labels out, the
// whole pipeline (decode on the host, normalisation, the model, softmax,
// top-k on the device, labels on the host) in one segment, equal to
// torchvision's preprocessing + the model run by PyTorch.
func TestClassifierPipeline(t *testing.T) {
	r := newRepo(t)
	copyTree(t, filepath.Join(pipelineFixtures, "classifier"), r.root)
	m, _ := start(t, r, nil)
	data, err := os.ReadFile(filepath.Join(r.root, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []classifierRef
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	images := tensor.New(tensor.String, int64(len(refs)))
	for i, ref := range refs {
		if images.Strings[i], err = os.ReadFile(filepath.Join(r.root, ref.File)); err != nil {
			t.Fatal(err)
		}
	}
	resp := infer(t, m, "classify", 0, map[string]*tensor.Tensor{"IMAGE": images})
	out := map[string]*tensor.Tensor{}
	for _, o := range resp.Outputs {
		out[o.Name] = o.Tensor
	}
	labels, scores := out["LABELS"], out["SCORES"]
	if labels == nil || scores == nil || !slices.Equal(labels.Shape, []int64{int64(len(refs)), 5}) {
		t.Fatalf("outputs %v", resp.Outputs)
	}
	got := scores.Float64s()
	worst := 0.0
	for i, ref := range refs {
		for k := range 5 {
			if l := string(labels.Strings[i*5+k]); l != ref.Labels[k] {
				t.Errorf("%s: label %d is %q, torchvision's %q", ref.File, k, l, ref.Labels[k])
			}
			d := math.Abs(got[i*5+k] - ref.Scores[k])
			worst = max(worst, d)
			if d > 1e-3 {
				t.Errorf("%s: score %d is %.5f, torchvision's %.5f", ref.File, k, got[i*5+k], ref.Scores[k])
			}
		}
	}
	t.Logf("largest score difference from torchvision: %.2e", worst)
	md, err := m.Metadata("classify", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Pipeline.Segments) != 1 || !md.Pipeline.Segments[0].Fused {
		t.Errorf("segments %+v, want one fused", md.Pipeline.Segments)
	}
}

// rapidocrWheel is the pinned rapidocr-onnxruntime wheel make
// realmodels-small downloads (python/realmodels/packaged.py), and the
// models of the OCR chain inside it.
const rapidocrWheel = "../.cache/realmodels-small/packages/rapidocr_onnxruntime-1.4.4-py3-none-any.whl"

var rapidocrModels = map[string]string{
	"det": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
	"cls": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
	"rec": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
}

// ocrRepo is testdata/pipelines/ocr with rapidocr's three models taken out
// of the wheel as det, cls and rec.
func ocrRepo(t testing.TB) *testRepo {
	t.Helper()
	r := newRepo(t)
	copyTree(t, filepath.Join(pipelineFixtures, "ocr"), r.root)
	z, err := zip.OpenReader(rapidocrWheel)
	if err != nil {
		t.Fatalf("%v (make realmodels-small downloads it)", err)
	}
	defer z.Close()
	for model, name := range rapidocrModels {
		f, err := z.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		r.write(model, 1, data)
		// The step models are served on their own too; this test sends
		// them nothing, so their pad probes are skipped (the pipeline's
		// segments keep theirs).
		r.config(model, "pad: {"+ocrSymbols[model]+"}\n")
	}
	return r
}

// ocrSymbols are the served symbols of rapidocr's models, each padded.
var ocrSymbols = map[string]string{
	"det": "batch: true, p2o_DynamicDimension_1: true, p2o_DynamicDimension_2: true",
	"cls": "batch: true, x_dim2: true, x_dim3: true",
	"rec": "batch: true, p2o_DynamicDimension_1: true, x_dim2: true",
}

// ocrRef is testdata/pipelines/ocr/ref.json: the three models run one by
// one in ONNX Runtime with the same glue written in numpy and scipy.
type ocrRef struct {
	Boxes      [][]float64 `json:"boxes"`
	Text       []string    `json:"text"`
	TextScores []float64   `json:"text_scores"`
}

// TestOCRPipeline: rapidocr's det -> cls -> rec chain as one pipeline
// equals the three models run separately in ONNX Runtime with the same
// glue (boxes, crops, the angle flip, CTC).
func TestOCRPipeline(t *testing.T) {
	r := ocrRepo(t)
	m, _ := start(t, r, nil)
	data, err := os.ReadFile(filepath.Join(r.root, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref ocrRef
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(filepath.Join(r.root, "text.png"))
	if err != nil {
		t.Fatal(err)
	}
	img := tensor.New(tensor.String, 1)
	img.Strings[0] = png
	resp := infer(t, m, "ocr", 0, map[string]*tensor.Tensor{"IMAGE": img})
	out := map[string]*tensor.Tensor{}
	for _, o := range resp.Outputs {
		out[o.Name] = o.Tensor
	}
	boxes, text, scores := out["BOXES"], out["TEXT"], out["TEXT_SCORES"]
	if boxes == nil || text == nil || scores == nil {
		t.Fatalf("outputs %v", resp.Outputs)
	}
	var want []float64
	for _, b := range ref.Boxes {
		want = append(want, b...)
	}
	// A box's edges are the bounding box of the detector's map above
	// thresh, widened: a pixel of the map within XLA's and ONNX Runtime's
	// float32 differences of thresh can move an edge by one pixel (seen
	// once in several runs), so edges may differ by 1; the image index
	// and the box count may not.
	got := boxes.Float64s()
	if len(got) != len(want) {
		t.Fatalf("boxes %v, want %v", got, want)
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); d > 1 || (i%5 == 0 && d != 0) {
			t.Errorf("boxes %v, want %v (edges within a pixel)", got, want)
			break
		}
	}
	for i, w := range ref.Text {
		if i >= len(text.Strings) || string(text.Strings[i]) != w {
			t.Fatalf("text %q, want %q", text.Strings, ref.Text)
		}
		// the mean of the recognizer's best probabilities along the path:
		// our program's softmax against ONNX Runtime's, over ~40 steps
		d := math.Abs(scores.Float64s()[i] - ref.TextScores[i])
		t.Logf("text %d %q: score %.6f, ONNX Runtime's %.6f", i, w, scores.Float64s()[i], ref.TextScores[i])
		if d > 1e-3 {
			t.Errorf("text %d score %v, want %v", i, scores.Float64s()[i], ref.TextScores[i])
		}
	}
	md, err := m.Metadata("ocr", 0)
	if err != nil {
		t.Fatal(err)
	}
	// det and its glue, cls and the flip, rec and CTC: three executions
	// (the crops' count depends on the boxes found)
	if n := len(md.Pipeline.Segments); n != 3 {
		t.Errorf("%d segments, want 3: %+v", n, md.Pipeline.Segments)
	}
	for _, s := range md.Pipeline.Segments {
		t.Logf("segment: steps %v fused %v", s.Steps, s.Fused)
	}
}

// TestResizeCropBuiltins: the resize (bilinear, nearest) and center_crop
// built-ins, lowered into one program, equal torch's interpolate
// (align_corners=False) and torchvision's CenterCrop
// (testdata/pipelines/builtins, make_fixtures.py).
func TestResizeCropBuiltins(t *testing.T) {
	r := newRepo(t)
	dir := filepath.Join(pipelineFixtures, "builtins")
	r.config("resize", `inputs:
  - {name: X, dtype: float32, dims: [batch, 3, 30, 40]}
outputs:
  - {name: BILINEAR, dtype: float32, dims: [batch, 3, 21, 52]}
  - {name: NEAREST, dtype: float32, dims: [batch, 3, 21, 52]}
  - {name: CROP, dtype: float32, dims: [batch, 3, 15, 31]}
buckets:
  batch: [2]
pipeline:
  steps:
    - {builtin: resize, params: {size: [21, 52]}, input_map: {x: X}, output_map: {y: BILINEAR}}
    - {builtin: resize, params: {size: [21, 52], interpolation: nearest}, input_map: {x: X}, output_map: {y: NEAREST}}
    - {builtin: center_crop, params: {size: [15, 31]}, input_map: {x: BILINEAR}, output_map: {y: CROP}}
`)
	m, _ := start(t, r, nil)
	resp := infer(t, m, "resize", 0, map[string]*tensor.Tensor{"X": readNpy(t, filepath.Join(dir, "x.npy"))})
	got := map[string]*tensor.Tensor{}
	for _, o := range resp.Outputs {
		got[o.Name] = o.Tensor
	}
	for name, file := range map[string]string{"BILINEAR": "bilinear.npy", "NEAREST": "nearest.npy", "CROP": "crop.npy"} {
		if got[name] == nil {
			t.Fatalf("no output %s in %v", name, resp.Outputs)
		}
		assertClose(t, name, got[name], readNpy(t, filepath.Join(dir, file)), 1e-5)
	}
	md, err := m.Metadata("resize", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Pipeline.Segments) != 1 || !md.Pipeline.Segments[0].Fused {
		t.Errorf("segments %+v, want one fused", md.Pipeline.Segments)
	}
}

// TestPipelineLazyLoading: pipelines and their step models on a lazy
// Manager whose device memory budget holds about two of them: each
// request loads its pipeline (or model) on demand and evicts the least
// recently used, every answer equals ONNX Runtime's, the memory held stays
// within the budget, and a pipeline's memory counts its segments'.
func TestPipelineLazyLoading(t *testing.T) {
	r := fusionRepo(t)
	raw := readNpy(t, filepath.Join(r.root, "in.IMAGE.npy"))
	want := readNpy(t, filepath.Join(r.root, "ref.PROBS.npy"))
	cache := sharedCache(t)
	ask := func(m *Manager, model string) {
		t.Helper()
		resp, err := m.Infer(context.Background(), model, 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"IMAGE": rows(raw, 1, 4)}})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		assertClose(t, model, resp.Outputs[0].Tensor, rows(want, 1, 4), 1e-5)
	}
	probe, _ := lazyManager(t, r, 0, cache)
	ask(probe, "fused")
	one := metric(t, probe, `xserve_model_memory_bytes{model="fused"}`)
	if one <= 0 {
		t.Fatalf("xserve_model_memory_bytes of a loaded pipeline is %v", one)
	}
	budget := int64(2.5 * one)
	m, _ := lazyManager(t, r, budget, cache)
	for round := range 2 {
		for _, model := range []string{"fused", "steps", "separate", "classify_ensemble"} {
			ask(m, model)
			if used := metric(t, m, `xserve_model_memory_used_bytes{device="0"}`); used > float64(budget) {
				t.Fatalf("round %d, %s: %v bytes held, the budget is %d", round, model, used, budget)
			}
		}
	}
	if got := metric(t, m, `xserve_model_evictions_total{model="fused"}`); got < 1 {
		t.Errorf("fused evicted %v times, want at least once (4 pipelines, room for 2)", got)
	}
}
