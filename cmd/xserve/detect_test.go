package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// detectDir holds torchvision's ssdlite320_mobilenet_v3_large (random
// weights from a fixed seed) with its postprocess, exported to ONNX with
// ONNX Runtime's outputs by `make detect-model` (python/detect).
const detectDir = "../../.cache/detect"

// TestRunDetectionMatchesORT runs a real detection model end to end with
// `xserve run`: per-class score filter (NonZero), top-k with a run-time k,
// the classes' boxes packed together (Concat of data-dependent sizes),
// torchvision's "no boxes" If, NonMaxSuppression of 27,000 boxes (greedy
// while_loop) and the gathers by its indices. Boxes, scores and labels,
// trimmed by their counts, must equal ONNX Runtime's. The executable is
// kept in a compile cache under .cache/detect: compiling takes ~40 s, so
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
		if got.DType != want.DType || tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
			t.Fatalf("%s: %s%s, ONNX Runtime %s%s", tc.name, got.DType, tensor.ShapeString(got.Shape), want.DType, tensor.ShapeString(want.Shape))
		}
		if want.NumElements() == 0 {
			t.Fatalf("%s: ONNX Runtime detected nothing; the test would prove little", tc.name)
		}
		for i := range want.NumElements() {
			if d := math.Abs(got.Float64At(i) - want.Float64At(i)); !(d <= tc.tol) {
				t.Fatalf("%s[%d] = %v, ONNX Runtime %v", tc.name, i, got.Float64At(i), want.Float64At(i))
			}
		}
	}
}
