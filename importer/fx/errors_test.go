package fx_test

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/fx"
)

// importBytes imports an archive held in memory.
func importBytes(data []byte) error {
	_, err := fx.Import(bytes.NewReader(data), int64(len(data)))
	return err
}

// readFixture returns the bytes of testdata/<name>/model.pt2.
func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// rewrite returns a copy of the zip data with every entry passed through
// edit (which may return nil to drop it), stored uncompressed.
func rewrite(t testing.TB, data []byte, edit func(name string, b []byte) []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b = edit(f.Name, b); b == nil {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// replaceIn returns an edit replacing old by new in the entries whose name
// ends with suffix.
func replaceIn(suffix, old, new string) func(string, []byte) []byte {
	return func(name string, b []byte) []byte {
		if strings.HasSuffix(name, suffix) {
			return []byte(strings.ReplaceAll(string(b), old, new))
		}
		return b
	}
}

// checkErr fails unless err wraps sentinel, reads "fx: ..." and contains
// every part.
func checkErr(t *testing.T, err, sentinel error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %v", err, sentinel)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "fx: ") {
		t.Errorf("error %q does not start with \"fx: \"", msg)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("error %q does not mention %q", msg, p)
		}
	}
}

func TestErrors(t *testing.T) {
	cnn := readFixture(t, "cnn")
	zipOf := func(files map[string]string) []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for name, content := range files {
			w, _ := zw.Create(name)
			w.Write([]byte(content))
		}
		zw.Close()
		return buf.Bytes()
	}
	pickled, err := os.ReadFile(filepath.Join("testdata", "pickled.pt"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		data     []byte
		sentinel error
		parts    []string
	}{
		{"empty", nil, fx.ErrFormat, []string{"not a zip archive"}},
		{"not a zip", []byte("hello, world"), fx.ErrFormat, []string{"not a zip archive"}},
		{"torch.save file", pickled, fx.ErrFormat, []string{"data.pkl", "pickled state dicts are not supported; re-export with torch.export.save"}},
		{"torch 2.7 export layout", zipOf(map[string]string{
			"serialized_exported_program.json": "{}", "serialized_state_dict.pt": "", "version": "1",
		}), fx.ErrFormat, []string{"pickled state dicts are not supported"}},
		{"no archive_format", zipOf(map[string]string{"a/models/model.json": "{}"}), fx.ErrFormat, []string{"no archive_format"}},
		{"other archive format", rewrite(t, cnn, replaceIn("/archive_format", "pt2", "zip")), fx.ErrFormat, []string{"archive_format", `"zip"`}},
		{"archive version", rewrite(t, cnn, replaceIn("/archive_version", "0", "7")), fx.ErrUnsupported, []string{"archive_version", `"7"`}},
		{"big endian", rewrite(t, cnn, replaceIn("/byteorder", "little", "big")), fx.ErrUnsupported, []string{"little-endian"}},
		{"unknown schema major", rewrite(t, cnn, replaceIn("models/model.json", `"schema_version": {"major": 8`, `"schema_version": {"major": 9`)),
			fx.ErrUnsupported, []string{"schema version 9.", "torch 2.14.1", "major version 8"}},
		{"no schema version", rewrite(t, cnn, replaceIn("models/model.json", `"schema_version"`, `"schema_versionX"`)),
			fx.ErrFormat, []string{"models/model.json", "no schema_version"}},
		{"unknown target", rewrite(t, cnn, replaceIn("models/model.json", "torch.ops.aten.relu.default", "torch.ops.aten.relux.default")),
			fx.ErrUnsupported, []string{"node relu", "aten.relux.default", "nearest known: aten.relu.default"}},
		{"custom op", rewrite(t, cnn, replaceIn("models/model.json", "torch.ops.aten.relu.default", "torch.ops.mylib.relu.default")),
			fx.ErrUnsupported, []string{"node relu", "torch.ops.mylib.relu.default"}},
		{"broken json", rewrite(t, cnn, replaceIn("models/model.json", `"nodes": [`, `"nodes": [[`)),
			fx.ErrFormat, []string{"models/model.json"}},
		{"unknown argument kind", rewrite(t, cnn, replaceIn("models/model.json", `{"as_bool": false}`, `{"as_graph": {}}`)),
			fx.ErrUnsupported, []string{"as_graph"}},
		{"undefined value", rewrite(t, cnn, replaceIn("models/model.json", `"arg": {"as_tensor": {"name": "convolution"}}`, `"arg": {"as_tensor": {"name": "nowhere"}}`)),
			fx.ErrFormat, []string{"nowhere"}},
		{"missing weight", rewrite(t, cnn, func(name string, b []byte) []byte {
			if strings.HasSuffix(name, "data/weights/weight_0") {
				return nil
			}
			return b
		}), fx.ErrFormat, []string{"data/weights/weight_0"}},
		{"weight out of range", rewrite(t, cnn, replaceIn("model_weights_config.json", `"storage_offset": {"as_int": 0}`, `"storage_offset": {"as_int": 1000000}`)),
			fx.ErrFormat, []string{"weights/weight_", "storage of"}},
		{"huge view", rewrite(t, cnn, replaceIn("model_weights_config.json", `"sizes": [{"as_int": 8}]`, `"sizes": [{"as_int": 800000000000}]`)),
			fx.ErrFormat, []string{"bytes"}},
		{"pickled weight", rewrite(t, cnn, replaceIn("model_weights_config.json", `"use_pickle": false`, `"use_pickle": true`)),
			fx.ErrUnsupported, []string{"pickled"}},
		{"weight dtype mismatch", rewrite(t, cnn, replaceIn("model_weights_config.json", `"dtype": 7`, `"dtype": 4`)),
			fx.ErrFormat, []string{"the graph says"}},
		{"complex-half weight", rewrite(t, cnn, replaceIn("model_weights_config.json", `"dtype": 7`, `"dtype": 9`)),
			fx.ErrUnsupported, []string{"COMPLEXHALF"}},
		{"wrong meta", rewrite(t, cnn, replaceIn("models/model.json", `"relu": {"dtype": 7`, `"relu": {"dtype": 6`)),
			fx.ErrFormat, []string{"node relu (aten.relu.default)", "float16"}},
		{"unsupported operator", rewrite(t, readFixture(t, "interp"), replaceIn("models/model.json",
			`"torch.ops.aten.upsample_nearest2d.vec"`, `"torch.ops.aten.special_bessel_j0.default"`)),
			fx.ErrUnsupported, []string{"node upsample_nearest2d calls aten.special_bessel_j0.default", "neither the IR nor"}},
		{"buffer mutation", readFixture(t, "mutation"), fx.ErrUnsupported, []string{"writes buffer calls"}},
		{"in-place buffer update", readFixture(t, "mutation_train"), fx.ErrUnsupported, []string{"node add_", "writes calls"}},
		{"in-place view with a sibling view read later", readFixture(t, "aten/view_sibling"), fx.ErrUnsupported,
			[]string{"node relu_", "writes slice_1, which shares memory with slice_2, read later", "run_decompositions"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, importBytes(tc.data), tc.sentinel, tc.parts...)
		})
	}
}

// TestImportFileErrors checks that ImportFile names the file.
func TestImportFileErrors(t *testing.T) {
	_, err := fx.ImportFile("testdata/nope.pt2")
	checkErr(t, err, os.ErrNotExist, "nope.pt2")
	_, err = fx.ImportFile(filepath.Join("testdata", "pickled.pt"))
	checkErr(t, err, fx.ErrFormat, "testdata/pickled.pt", "pickled state dicts")
	if strings.Contains(err.Error(), "fx: fx:") {
		t.Errorf("error %q repeats the prefix", err)
	}
	_, err = fx.ImportFile("testdata")
	checkErr(t, err, fx.ErrFormat, "not a regular file")
}

// TestCorruptArchives truncates every fixture at several offsets and flips
// bytes: the importer must return an error (or, for a flip in bytes it does
// not read, a graph), never panic.
func TestCorruptArchives(t *testing.T) {
	names := append([]string{"interp", "mutation", "mutation_train", "inplace_view_train"}, runnable...)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range names {
		data := readFixture(t, name)
		t.Run(name, func(t *testing.T) {
			for i := 1; i <= 16; i++ {
				cut := data[:len(data)*i/17]
				err := importBytes(cut)
				if err == nil || !errors.Is(err, fx.ErrFormat) {
					t.Fatalf("truncated to %d of %d bytes: %v, want ErrFormat", len(cut), len(data), err)
				}
				checkClean(t, err)
			}
			for i := 0; i < 40; i++ {
				b := bytes.Clone(data)
				for k := 0; k < 1+i%3; k++ {
					b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
				}
				if err := importBytes(b); err != nil {
					checkClean(t, err)
				}
			}
		})
	}
}

// checkClean fails on errors that are not the package's or that hide a
// recovered panic.
func checkClean(t testing.TB, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, "fx: ") || !(errors.Is(err, fx.ErrFormat) || errors.Is(err, fx.ErrUnsupported)) {
		t.Fatalf("error %q is not a package error", msg)
	}
	if strings.Contains(msg, "internal error") {
		t.Fatalf("panic: %s", msg)
	}
}
