package realmodels

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// mlDir holds the small classical-ML models (scikit-learn via skl2onnx,
// LightGBM and XGBoost via onnxmltools) with ONNX Runtime's outputs, made by
// `make ml-fixtures` (python/realmodels/ml.py --small).
const mlDir = "../../testdata/mlmodels"

// mlCase is what a case.json says about comparing a case's outputs.
type mlCase struct {
	Exact      []string `json:"exact"`
	ATol, RTol float64
}

func readMLCase(t *testing.T, dir string) mlCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "case.json"))
	if err != nil {
		t.Fatalf("%v (run make ml-fixtures)", err)
	}
	var c mlCase
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// refName is the output name of a ref.<k>.<name>.npy file.
func refName(file string) string {
	return strings.TrimSuffix(strings.SplitN(filepath.Base(file), ".", 3)[2], ".npy")
}

// compareML checks got against ONNX Runtime's want: strings and integers
// equal, outputs the case lists as exact the same bits, other floats
// within atol + rtol * max|want|.
func compareML(got, want *tensor.Tensor, exact bool, c mlCase) string {
	if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) {
		return "got " + got.String() + ", want " + want.String()
	}
	if want.DType == tensor.String {
		for i := range want.Strings {
			if !bytes.Equal(got.Strings[i], want.Strings[i]) {
				return fmt.Sprintf("string %q at %d, want %q", got.Strings[i], i, want.Strings[i])
			}
		}
		return ""
	}
	if !want.DType.IsFloat() || exact {
		if !bytes.Equal(got.Data, want.Data) {
			return "not the same bits as ONNX Runtime's"
		}
		return ""
	}
	worst, maxRef := 0.0, 0.0
	for i := range want.NumElements() {
		w, g := want.Float64At(i), got.Float64At(i)
		worst = max(worst, math.Abs(w-g))
		maxRef = max(maxRef, math.Abs(w))
	}
	if tol := c.ATol + c.RTol*maxRef; !(worst <= tol) {
		return "max abs error above the tolerance"
	}
	return ""
}

// TestMLModelsMatchONNXRuntime runs every small classical-ML model the way
// `xserve run` does (import, host stages for string values, lower, compile
// on the PJRT CPU plugin, run) and compares each output with ONNX
// Runtime's: labels and strings exactly, tree sums without a post
// transform bit for bit, probabilities within 1e-5.
func TestMLModelsMatchONNXRuntime(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(mlDir, "*", "model.onnx"))
	if err != nil || len(dirs) < 9 {
		t.Fatalf("%d models in %s, want 9 (run make ml-fixtures)", len(dirs), mlDir)
	}
	r := newRunner(t)
	for _, model := range dirs {
		dir := filepath.Dir(model)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c := readMLCase(t, dir)
			m, inputs := loadCase(t, r, dir, "make ml-fixtures")
			got, _, _, err := m.Run(context.Background(), inputs)
			if err != nil {
				t.Fatal(err)
			}
			refs := numbered(t, dir, "ref")
			if len(got) != len(refs) {
				t.Fatalf("%d outputs, ONNX Runtime gave %d", len(got), len(refs))
			}
			for i, f := range refs {
				want, err := tensor.ReadNpyFile(f)
				if err != nil {
					t.Fatal(err)
				}
				name := refName(f)
				if why := compareML(got[i], want, slices.Contains(c.Exact, name), c); why != "" {
					t.Errorf("output %s: %s", name, why)
				}
			}
		})
	}
}

// TestStringModelRunsInHostStages checks the cut of the one-hot pipeline:
// its string inputs are looked up on the host, the numbers run in the
// program, the class index becomes a string label on the host again.
func TestStringModelRunsInHostStages(t *testing.T) {
	m, _ := loadCase(t, newRunner(t), filepath.Join(mlDir, "sklearn_onehot_columns.onnx-skl2onnx"), "make ml-fixtures")
	h := m.Host()
	if h == nil || h.Device == nil {
		t.Fatal("no host stages or no device graph")
	}
	targets := func(ns []*fxgraph.Node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.Target)
		}
		return out
	}
	if pre := targets(h.Pre); !slices.Equal(pre, []string{"xserve.string_lookup", "xserve.string_lookup"}) {
		t.Errorf("pre stage %v, want the two encoders' lookups", pre)
	}
	if post := targets(h.Post); !slices.Equal(post, []string{"xserve.string_take"}) {
		t.Errorf("post stage %v, want the label lookup", post)
	}
	for _, p := range h.Device.Placeholders() {
		if p.Val().DType == tensor.String {
			t.Errorf("device input %s is a string", p.Name)
		}
	}
}
