package zoo

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

func TestMaxAbsError(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	tests := []struct {
		name         string
		got, want    *tensor.Tensor
		err, maxRef  float64
		wantErrMatch string
	}{
		{name: "equal", got: tensor.FromFloat32s([]float32{1, -2}, 2), want: tensor.FromFloat32s([]float32{1, -2}, 2), maxRef: 2},
		{name: "diff", got: tensor.FromFloat32s([]float32{1, -2.5}, 2), want: tensor.FromFloat32s([]float32{1.25, -2}, 2), err: 0.5, maxRef: 2},
		{name: "nan matches nan", got: tensor.FromFloat32s([]float32{nan, 3}, 2), want: tensor.FromFloat32s([]float32{nan, 3}, 2), maxRef: 3},
		{name: "nan vs number", got: tensor.FromFloat32s([]float32{nan}, 1), want: tensor.FromFloat32s([]float32{0}, 1), err: math.Inf(1)},
		{name: "inf vs inf", got: tensor.FromFloat32s([]float32{inf}, 1), want: tensor.FromFloat32s([]float32{inf}, 1)},
		{name: "ints", got: tensor.FromInt64s([]int64{1, 7}, 2), want: tensor.FromInt64s([]int64{1, 5}, 2), err: 2, maxRef: 5},
		{name: "shape", got: tensor.FromFloat32s([]float32{1, 2}, 1, 2), want: tensor.FromFloat32s([]float32{1, 2}, 2), wantErrMatch: "shape [1,2], PyTorch [2]"},
		{name: "dtype", got: tensor.FromInt64s([]int64{1}, 1), want: tensor.FromFloat32s([]float32{1}, 1), wantErrMatch: "dtype int64, PyTorch float32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, ref, err := MaxAbsError(tc.got, tc.want)
			if tc.wantErrMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrMatch) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErrMatch)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e != tc.err || ref != tc.maxRef {
				t.Errorf("MaxAbsError = %v, %v; want %v, %v", e, ref, tc.err, tc.maxRef)
			}
		})
	}
}

func TestTolerance(t *testing.T) {
	for _, tc := range []struct{ maxRef, want float64 }{{0, 1e-4}, {0.5, 1e-4}, {1, 1e-4}, {250, 2.5e-2}} {
		if got := Tolerance(RelTolerance, tc.maxRef); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("Tolerance(1e-4, %v) = %v, want %v", tc.maxRef, got, tc.want)
		}
	}
}

func writeManifest(t *testing.T, dir, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const goodCases = `"cases": [{"batch": 1, "dims": {"batch": 1},
  "inputs": [{"name": "image", "file": "b1.in.image.npy"}],
  "outputs": [{"name": "logits", "file": "b1.out.logits.npy"}]}]`

func TestReadManifestErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"version", `{"manifest_version": 2, "model": "m", ` + goodCases + `}`, "manifest_version 2, want 1"},
		{"no cases", `{"manifest_version": 1, "model": "m", "cases": []}`, "no reference cases"},
		{"no model", `{"manifest_version": 1, ` + goodCases + `}`, "no model name"},
		{"escape", `{"manifest_version": 1, "model": "m", "cases": [{"batch": 1, "inputs": [{"name": "x", "file": "../../etc/passwd"}], "outputs": [{"name": "y", "file": "y.npy"}]}]}`, "must be a plain file name"},
		{"model file escape", `{"manifest_version": 1, "model": "m", "formats": {"onnx": {"file": "/tmp/x.onnx"}}, ` + goodCases + `}`, "format onnx: file"},
		{"json", `{`, "unexpected end of JSON input"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeManifest(t, dir, tc.body)
			_, err := ReadManifest(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "zoo: ") {
				t.Fatalf("ReadManifest: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestModelDirsEmpty(t *testing.T) {
	_, err := ModelDirs(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make zoo") {
		t.Fatalf("ModelDirs on an empty dir: %v, want an error saying how to export a zoo", err)
	}
}

// A format whose export failed, or that the manifest lacks, is a failure
// with the reason, never skipped.
func TestCheckModelExportFailures(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, dir, `{"manifest_version": 1, "model": "m", "variant": "small",
	  "formats": {"onnx": {"file": "model.onnx", "error": "UnsupportedOperatorError: aten::frobnicate"}}, `+goodCases+`}`)
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	var c Checker
	r := c.CheckModel(context.Background(), dir, m, "onnx")
	if r.Passed || r.Stage != StageExport || !strings.Contains(r.Err.Error(), "aten::frobnicate") {
		t.Errorf("onnx: %+v, want an export failure naming the exporter's error", r)
	}
	r = c.CheckModel(context.Background(), dir, m, "pt2")
	if r.Passed || r.Stage != StageExport || !strings.Contains(r.Err.Error(), "no pt2 export") {
		t.Errorf("pt2: %+v, want an export failure", r)
	}
}

// A model file the importer cannot read fails at import with its error.
func TestCheckModelImportFailure(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, dir, `{"manifest_version": 1, "model": "m", "formats": {"onnx": {"file": "model.onnx"}}, `+goodCases+`}`)
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), []byte("not a protobuf"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	var c Checker
	r := c.CheckModel(context.Background(), dir, m, "onnx")
	if r.Passed || r.Stage != StageImport || r.Err == nil {
		t.Errorf("got %+v, want an import failure", r)
	}
}

func TestWriteTableEscapes(t *testing.T) {
	var b strings.Builder
	err := WriteTable(&b, []Result{{Model: "m", Format: "onnx", Stage: StageImport, Import: time.Millisecond,
		Err: errors.New("bad | pipe\nsecond line")}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `FAIL (import): bad \| pipe |`) {
		t.Errorf("table does not escape the pipe or keeps the second line:\n%s", b.String())
	}
}
