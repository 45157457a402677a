package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// detectDir holds torchvision's ssdlite320_mobilenet_v3_large and small
// Faster R-CNN, Mask R-CNN, RetinaNet, FCOS and SSD detectors (random weights
// from a fixed seed) with their postprocess, exported to ONNX with ONNX
// Runtime's outputs by `make detect-model` (python/detect).
const detectDir = "../../.cache/detect"

// TestRunDetectionMatchesORT runs a real detection model end to end with
// `xserve run`: per-class score filter (NonZero), top-k with a run-time k,
// the classes' boxes packed together (Concat of data-dependent sizes),
// torchvision's "no boxes" If, NonMaxSuppression of 27,000 boxes (greedy
// while_loop) and the gathers by its indices. Boxes, scores and labels,
// trimmed by their counts, must equal ONNX Runtime's. The executable is
// kept in a compile cache under .cache/detect: compiling takes 30-40 s, so
// only the first run pays it.
func TestRunDetectionMatchesORT(t *testing.T) {
	model := filepath.Join(detectDir, "ssdlite320.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Fatalf("%v: run `make detect-model` (make test does) first", err)
	}
	out := t.TempDir()
	_, stderr, err := xserve(t, "run", model, "--input", "image="+filepath.Join(detectDir, "ssdlite320.image.npy"),
		"--output", out, "--compile-cache", filepath.Join(detectDir, "compile-cache"))
	if err != nil {
		t.Fatalf("xserve run: %v\n%s", err, stderr)
	}
	t.Log(strings.TrimSpace(stderr))
	for _, tc := range []struct {
		name string
		tol  float64
	}{{"boxes", 1e-4}, {"scores", 1e-6}, {"labels", 0}} {
		got, err := tensor.ReadNpyFile(filepath.Join(out, tc.name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := tensor.ReadNpyFile(filepath.Join(detectDir, "ssdlite320."+tc.name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		compareDetections(t, tc.name, got, want, tc.tol)
	}
}

// detectors are the families of python/detect/export_detectors.py that
// TestRunDetectorsMatchORT and TestServeDetectorsMatchORT check.
var detectors = []string{"fasterrcnn", "maskrcnn", "retinanet", "fcos", "ssd"}

// detectorTolerances returns a detector's outputs and how far each may be
// from ONNX Runtime's: Mask R-CNN also gives each detection's mask pasted
// into the image (probabilities).
func detectorTolerances(family string) map[string]float64 {
	tols := map[string]float64{"boxes": 1e-3, "scores": 1e-5, "labels": 0}
	if family == "maskrcnn" {
		tols["masks"] = 1e-5
	}
	return tols
}

// TestRunDetectorsMatchORT runs torchvision's detectors (python/detect/
// export_detectors.py: Faster R-CNN, Mask R-CNN, RetinaNet and FCOS with their own
// transforms, anchors and postprocess on a small FPN backbone, and an SSD
// that resizes every image to its fixed input and scales its boxes back,
// exported by torch.onnx with a dynamic image height and width) with
// `xserve run` at an image size other than the export example's. The import waits for the
// size (the resize and padding follow it), then carries the proposals'
// data-dependent counts through TopK, NonZero -> Gather -> NonZero chains,
// reshapes to their run-time shapes, RoiAlign and NonMaxSuppression;
// Mask R-CNN's paste Loop resizes each mask to its box's run-time size
// and pads it into the image (values of run-time extent inside the loop
// body). Boxes, scores, labels and masks must equal ONNX Runtime's.
func TestRunDetectorsMatchORT(t *testing.T) {
	const size = "120x100"
	for _, family := range detectors {
		t.Run(family, func(t *testing.T) {
			model := filepath.Join(detectDir, family+".onnx")
			if _, err := os.Stat(model); err != nil {
				t.Fatalf("%v: run `make detect-model` (make test does) first", err)
			}
			out := t.TempDir()
			_, stderr, err := xserve(t, "run", model, "--input", "image="+filepath.Join(detectDir, family+".image."+size+".npy"),
				"--output", out, "--compile-cache", filepath.Join(detectDir, "compile-cache"))
			if err != nil {
				t.Fatalf("xserve run: %v\n%s", err, stderr)
			}
			for name, tol := range detectorTolerances(family) {
				got, err := tensor.ReadNpyFile(filepath.Join(out, name+".npy"))
				if err != nil {
					t.Fatal(err)
				}
				want, err := tensor.ReadNpyFile(filepath.Join(detectDir, family+"."+name+"."+size+".npy"))
				if err != nil {
					t.Fatal(err)
				}
				compareDetections(t, name, got, want, tol)
			}
		})
	}
}

// compareDetections fails t unless got has want's dtype and shape and its
// values within tol; want must hold detections.
func compareDetections(t *testing.T, name string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if got.DType != want.DType || tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		t.Fatalf("%s: %s%s, ONNX Runtime %s%s", name, got.DType, tensor.ShapeString(got.Shape), want.DType, tensor.ShapeString(want.Shape))
	}
	if want.NumElements() == 0 {
		t.Fatalf("%s: ONNX Runtime detected nothing; the test would prove little", name)
	}
	worst := 0.0
	for i := range want.NumElements() {
		d := math.Abs(got.Float64At(i) - want.Float64At(i))
		if !(d <= tol) {
			t.Fatalf("%s[%d] = %v, ONNX Runtime %v", name, i, got.Float64At(i), want.Float64At(i))
		}
		worst = max(worst, d)
	}
	t.Logf("%s%s: largest difference from ONNX Runtime %.3g", name, tensor.ShapeString(want.Shape), worst)
}

// detectReference returns ONNX Runtime's output name of the model.
func detectReference(t *testing.T, name string) *tensor.Tensor {
	t.Helper()
	want, err := tensor.ReadNpyFile(filepath.Join(detectDir, "ssdlite320."+name+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// TestServeDetectionMatchesORT serves the detection model (no config: its
// data-dependent outputs make serving run it at its exact input size,
// unbatched) and checks an OIP JSON answer against ONNX Runtime: the
// outputs come back trimmed to the detections. The executable comes from
// the compile cache TestRunDetectionMatchesORT filled (the same key).
func TestServeDetectionMatchesORT(t *testing.T) {
	model := filepath.Join(detectDir, "ssdlite320.onnx")
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatalf("%v: run `make detect-model` (make test does) first", err)
	}
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "ssd", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "ssd", "1", "model.onnx"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cache, err := filepath.Abs(filepath.Join(detectDir, "compile-cache"))
	if err != nil {
		t.Fatal(err)
	}
	p := startXserve(t, repo, cache)
	outs := inferImage(t, p.url, "ssd", filepath.Join(detectDir, "ssdlite320.image.npy"))
	tols := map[string]float64{"boxes": 1e-4, "scores": 1e-6, "labels": 0}
	if len(outs) != len(tols) {
		t.Fatalf("%d outputs, want boxes, scores and labels", len(outs))
	}
	for name, got := range outs {
		compareDetections(t, name, got, detectReference(t, name), tols[name])
	}
	p.stop(t)
}

// TestServeDetectorsMatchORT serves the detectors of TestRunDetectorsMatchORT
// with no config.yaml: their outputs' declared size (detections) follows
// the data, so serving runs every image size exactly and trims the outputs
// to the counts of the import at that size. An image of 120x100 (outside
// the default buckets' 1..64 on both symbols) must give ONNX Runtime's
// detections. The executables come from the compile cache
// TestRunDetectorsMatchORT filled.
func TestServeDetectorsMatchORT(t *testing.T) {
	const size = "120x100"
	repo := t.TempDir()
	for _, family := range detectors {
		data, err := os.ReadFile(filepath.Join(detectDir, family+".onnx"))
		if err != nil {
			t.Fatalf("%v: run `make detect-model` (make test does) first", err)
		}
		if err := os.MkdirAll(filepath.Join(repo, family, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, family, "1", "model.onnx"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := filepath.Abs(filepath.Join(detectDir, "compile-cache"))
	if err != nil {
		t.Fatal(err)
	}
	p := startXserve(t, repo, cache)
	for _, family := range detectors {
		t.Run(family, func(t *testing.T) {
			outs := inferImage(t, p.url, family, filepath.Join(detectDir, family+".image."+size+".npy"))
			tols := detectorTolerances(family)
			if len(outs) != len(tols) {
				t.Fatalf("%d outputs, want %d (%v)", len(outs), len(tols), tols)
			}
			for name, got := range outs {
				want, err := tensor.ReadNpyFile(filepath.Join(detectDir, family+"."+name+"."+size+".npy"))
				if err != nil {
					t.Fatal(err)
				}
				compareDetections(t, name, got, want, tols[name])
			}
		})
	}
	p.stop(t)
}

// inferImage posts the image in file to model as an OIP JSON request and
// returns the answer's outputs by name, as tensors of the reference's
// dtypes (float32 boxes and scores, int64 labels).
func inferImage(t *testing.T, url, model, file string) map[string]*tensor.Tensor {
	t.Helper()
	img, err := tensor.ReadNpyFile(file)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"inputs": [{"name": "image", "shape": %s, "datatype": "FP32", "data": %s}]}`, shapeJSON(img.Shape), jsonArray(img, false))
	r := call(t, http.MethodPost, url+"/v2/models/"+model+"/infer", []byte(body), "Content-Type", "application/json")
	if r.code != http.StatusOK {
		t.Fatalf("infer: %s", r)
	}
	var resp struct {
		Outputs []struct {
			Name     string
			Datatype string
			Shape    []int64
			Data     []float64
		}
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	outs := map[string]*tensor.Tensor{}
	for _, o := range resp.Outputs {
		dt := tensor.Float32
		if o.Datatype == "INT64" {
			dt = tensor.Int64
		}
		v := tensor.New(dt, o.Shape...)
		if int64(len(o.Data)) != v.NumElements() {
			t.Fatalf("%s: %d values for shape %v", o.Name, len(o.Data), o.Shape)
		}
		for i, x := range o.Data {
			v.SetFloat64(int64(i), x)
		}
		outs[o.Name] = v
	}
	return outs
}
