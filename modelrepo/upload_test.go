package modelrepo

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// listDir returns every path under dir, relative, sorted.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestWriteUpload(t *testing.T) {
	r := newTestRepo(t, map[string]string{"m/1/model.onnx": "old"})
	up := Upload{
		Files:  map[string][]byte{"1/model.pt2": []byte("new1"), "2/model.onnx": []byte("new2"), "2/model.onnx.data": []byte("w")},
		Config: []byte(`{"buckets": {"batch": [1, 2]}, "warmup": "lazy"}`),
	}
	if err := r.Write("m", up); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(r.Root(), "m")
	want := []string{"1", "1/model.pt2", "2", "2/model.onnx", "2/model.onnx.data", "config.yaml"}
	if got := listDir(t, dir); !slices.Equal(got, want) {
		t.Errorf("after upload: %v, want %v (version 1 replaced whole, no temporary left)", got, want)
	}
	snap := scan(t, r)
	m, ok := snap.Model("m")
	if !ok || len(m.Versions) != 2 || m.Config.Buckets["batch"][1] != 2 {
		t.Fatalf("scan after upload: %+v", m)
	}
	// A new model directory is created.
	if err := r.Write("fresh", Upload{Files: map[string][]byte{"3/model.onnx": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, filepath.Join(r.Root(), "fresh")); !slices.Equal(got, []string{"3", "3/model.onnx"}) {
		t.Errorf("fresh model: %v", got)
	}
}

func TestWriteUploadRefuses(t *testing.T) {
	r := newTestRepo(t, map[string]string{"m/1/model.onnx": "old"})
	tests := []struct {
		name string
		up   Upload
		want error
	}{
		{"../etc", Upload{Files: map[string][]byte{"1/model.onnx": nil}}, ErrInvalidName},
		{"m", Upload{Files: map[string][]byte{"../1/model.onnx": nil}}, ErrLayout},
		{"m", Upload{Files: map[string][]byte{"1/../../x/model.onnx": nil}}, ErrLayout},
		{"m", Upload{Files: map[string][]byte{"01/model.onnx": nil}}, ErrLayout},
		{"m", Upload{Files: map[string][]byte{"1/.hidden": nil}}, ErrLayout},
		{"m", Upload{Files: map[string][]byte{"1/weights.bin": nil}}, ErrLayout}, // no model file
		{"m", Upload{}, ErrLayout},
		{"m", Upload{Files: map[string][]byte{"2/model.onnx": []byte("x")}, Config: []byte(`{"bukets": {}}`)}, ErrConfig},
	}
	for _, tc := range tests {
		err := r.Write(tc.name, tc.up)
		if !errors.Is(err, tc.want) {
			t.Errorf("Write(%q, %v): %v, want %v", tc.name, tc.up.Files, err, tc.want)
		}
	}
	if got := listDir(t, r.Root()); !slices.Equal(got, []string{"m", "m/1", "m/1/model.onnx"}) {
		t.Errorf("refused uploads wrote %v", got)
	}
}
