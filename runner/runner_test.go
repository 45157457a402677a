package runner_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

func openClient(t *testing.T) *pjrt.Client {
	t.Helper()
	return pjrttest.Open(t, "..", pjrt.OpenOptions{})
}

func f32(shape []int64, vals []float64) *tensor.Tensor {
	t := tensor.New(tensor.Float32, shape...)
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return t
}

// TestRunNMSMatchesORT runs the one-NonMaxSuppression model
// (importer/onnx/testdata/gen_nms.py) through the whole path, inputs by name,
// with and without the compile cache, against ONNX Runtime's selected
// indices: the bounded output comes back trimmed to ORT's row count.
func TestRunNMSMatchesORT(t *testing.T) {
	c := openClient(t)
	raw, err := os.ReadFile("../importer/onnx/testdata/nms.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Boxes, Scores []float64
		Cases         []struct {
			MaxOut   int64   `json:"max_out"`
			IoU      float64 `json:"iou"`
			ScoreThr float64 `json:"score_thr"`
			Selected []float64
			Rows     int64
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	for _, tc := range []struct {
		name     string
		cacheDir string
		cached   bool // the executable comes from the cache
	}{
		{"no cache", "", false},
		{"empty cache", cache, false},
		{"filled cache", cache, true},
		{"corrupt entry: compiled again", cache, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "corrupt") {
				entries, _ := filepath.Glob(filepath.Join(cache, "*.pjrt"))
				for _, e := range entries {
					data, err := os.ReadFile(e)
					if err != nil {
						t.Fatal(err)
					}
					data[len(data)/2] ^= 0xff
					if err := os.WriteFile(e, data, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			r, err := runner.New(c, runner.Options{CacheDir: tc.cacheDir})
			if err != nil {
				t.Fatal(err)
			}
			m, err := r.Load("../importer/onnx/testdata/nms.onnx")
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var exe *runner.Compiled
			for i, rc := range ref.Cases {
				maxOut := tensor.New(tensor.Int64, 1)
				maxOut.SetInt64(0, rc.MaxOut)
				in, err := m.OrderInputs(map[string]*tensor.Tensor{
					"boxes": f32([]int64{2, 40, 4}, ref.Boxes), "scores": f32([]int64{2, 3, 40}, ref.Scores),
					"max_out": maxOut, "iou": f32([]int64{1}, []float64{rc.IoU}), "score_thr": f32([]int64{1}, []float64{rc.ScoreThr}),
				})
				if err != nil {
					t.Fatal(err)
				}
				var outs []*tensor.Tensor
				if i == 0 { // the one-shot path
					var tm runner.Timings
					var prog *lower.Program
					outs, prog, tm, err = m.Run(context.Background(), in)
					if err != nil {
						t.Fatal(err)
					}
					if tm.Cached != tc.cached {
						t.Errorf("from the cache %v, want %v", tm.Cached, tc.cached)
					}
					if names := runner.OutputNames(prog); !slices.Equal(names, []string{"selected"}) {
						t.Fatalf("outputs %v, want [selected]", names)
					}
				} else { // bind, lower and compile once, run again
					if exe == nil {
						dims, err := m.Bind(in)
						if err != nil {
							t.Fatal(err)
						}
						prog, err := m.Lower(dims)
						if err != nil {
							t.Fatal(err)
						}
						if exe, err = m.Compile(context.Background(), prog); err != nil {
							t.Fatal(err)
						}
						defer exe.Close()
						if exe.Cached != (tc.cacheDir != "") { // the first run stored it
							t.Errorf("second compile from the cache %v", exe.Cached)
						}
					}
					if outs, err = exe.Run(context.Background(), in); err != nil {
						t.Fatal(err)
					}
				}
				if len(outs) != 1 {
					t.Fatalf("%d outputs, want 1", len(outs))
				}
				want := tensor.New(tensor.Int64, rc.Rows, 3)
				for j, v := range rc.Selected {
					want.SetInt64(int64(j), int64(v))
				}
				if err := conformance.Compare(outs[0], want, 0, 0); err != nil {
					t.Errorf("max %d, iou %g, score > %g: %v", rc.MaxOut, rc.IoU, rc.ScoreThr, err)
				}
			}
		})
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "*.pjrt"))
	if len(entries) != 1 {
		t.Errorf("cache holds %d executables, want 1 (one bucket)", len(entries))
	}
}

// TestOrderInputsErrors: missing and unknown inputs are named.
func TestOrderInputsErrors(t *testing.T) {
	r, err := runner.New(openClient(t), runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Load("../importer/onnx/testdata/nms.onnx")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x := tensor.New(tensor.Float32, 1)
	all := map[string]*tensor.Tensor{"boxes": x, "scores": x, "max_out": x, "iou": x, "score_thr": x}
	for _, tc := range []struct {
		name string
		edit func(map[string]*tensor.Tensor)
		want string
	}{
		{"missing", func(m map[string]*tensor.Tensor) { delete(m, "iou") }, `no value for model input "iou"`},
		{"unknown", func(m map[string]*tensor.Tensor) { m["label"] = x }, `the model has no input "label"`},
	} {
		in := map[string]*tensor.Tensor{}
		for k, v := range all {
			in[k] = v
		}
		tc.edit(in)
		if _, err := m.OrderInputs(in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := runner.Import("model.tflite"); err == nil || !strings.Contains(err.Error(), "unknown model format") {
		t.Errorf("unknown format: %v", err)
	}
}
