package modelrepo

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// newTestRepo creates the files named by the keys of files (paths relative to
// a fresh root, contents as values; a key ending in "/" makes an empty
// directory) and opens the repository.
func newTestRepo(t *testing.T, files map[string]string) *Repository {
	t.Helper()
	root := filepath.Join(t.TempDir(), "models")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, data := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, full, data)
	}
	r, err := Open(root)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

func scan(t *testing.T, r *Repository) *Snapshot {
	t.Helper()
	s, err := r.Scan()
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return s
}

func versionNumbers(vs []VersionEntry) []int64 {
	out := []int64{}
	for _, v := range vs {
		out = append(out, v.Version)
	}
	return out
}

func modelNames(s *Snapshot) []string {
	var out []string
	for _, m := range s.Models {
		out = append(out, m.Name)
	}
	return out
}

func TestScan(t *testing.T) {
	r := newTestRepo(t, map[string]string{
		"alpha/config.yaml":       "version_policy:\n  latest: 2\nbuckets:\n  batch: [1, 8]\n",
		"alpha/1/model.onnx":      "onnx-1",
		"alpha/2/model.onnx":      "onnx-2",
		"alpha/5/model.onnx":      "onnx-5",
		"alpha/5/weights.bin":     "external data",
		"alpha/README.md":         "notes",
		"beta/1/model.pt2":        "pt2",
		"broken/config.yaml":      "batching:\n  max_queue_delay: -1ms\n",
		"broken/1/model.onnx":     "x",
		"stray/1/model.onnx":      "x",
		"stray/latest/model.onnx": "x",
		"stray/01/model.onnx":     "x",
		"both/1/model.onnx":       "x",
		"both/1/model.pt2":        "x",
		"both/2/model.onnx":       "x",
		"empty/1/":                "",
		"empty/2/model.onnx":      "x",
		"nomodels/":               "",
		"flat/model.onnx":         "x",
		"mismatch/config.yaml":    "platform: pt2\n",
		"mismatch/1/model.onnx":   "x",
		"mismatch/2/model.pt2":    "x",
		"pinned/config.yaml":      "version_policy:\n  specific: [1, 3]\n",
		"pinned/1/model.onnx":     "x",
		"pinned/2/model.onnx":     "x",
		"bad name!/1/model.onnx":  "x",
		".hidden/1/model.onnx":    "x",
		"alpha/.tmp/model.onnx":   "x",
		"README.md":               "the repository",
	})
	s := scan(t, r)

	wantNames := []string{"alpha", "bad name!", "beta", "both", "broken", "empty", "flat", "mismatch", "nomodels", "pinned", "stray"}
	if got := modelNames(s); !reflect.DeepEqual(got, wantNames) {
		t.Fatalf("models = %q, want %q", got, wantNames)
	}
	if s.Root != r.Root() {
		t.Errorf("Snapshot.Root = %q, want %q", s.Root, r.Root())
	}

	tests := []struct {
		model        string
		versions     []int64
		selected     []int64
		err          error           // errors.Is target for Err; nil: no error
		errText      string          // substring of Err
		versionErrs  map[int64]error // errors.Is target per version
		configIsNil  bool
		formatsByVer map[int64]string
	}{
		{model: "alpha", versions: []int64{1, 2, 5}, selected: []int64{2, 5}, formatsByVer: map[int64]string{1: FormatONNX, 5: FormatONNX}},
		{model: "beta", versions: []int64{1}, selected: []int64{1}, formatsByVer: map[int64]string{1: FormatPT2}},
		{model: "bad name!", versions: []int64{}, selected: []int64{}, err: ErrInvalidName, errText: "bad name!", configIsNil: true},
		{model: "broken", versions: []int64{1}, selected: []int64{}, err: ErrConfig, errText: "batching.max_queue_delay: must be >= 0", configIsNil: true},
		{model: "stray", versions: []int64{1}, selected: []int64{}, err: ErrLayout, errText: `directory "latest" is not a version number`},
		{model: "both", versions: []int64{2}, selected: []int64{2}, versionErrs: map[int64]error{1: ErrLayout}},
		{model: "empty", versions: []int64{2}, selected: []int64{2}, versionErrs: map[int64]error{1: ErrLayout}},
		{model: "nomodels", versions: []int64{}, selected: []int64{}},
		{model: "flat", versions: []int64{}, selected: []int64{}, err: ErrLayout, errText: "belongs in a version directory"},
		{model: "mismatch", versions: []int64{2}, selected: []int64{2}, versionErrs: map[int64]error{1: ErrLayout}},
		{model: "pinned", versions: []int64{1, 2}, selected: []int64{1}, versionErrs: map[int64]error{3: ErrNotFound}},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			m, ok := s.Model(tt.model)
			if !ok {
				t.Fatalf("model %q missing", tt.model)
			}
			if m.Dir != filepath.Join(r.Root(), tt.model) {
				t.Errorf("Dir = %q", m.Dir)
			}
			if got := versionNumbers(m.Versions); !reflect.DeepEqual(got, tt.versions) {
				t.Errorf("Versions = %v, want %v", got, tt.versions)
			}
			if got := versionNumbers(m.Selected()); !reflect.DeepEqual(got, tt.selected) {
				t.Errorf("Selected = %v, want %v", got, tt.selected)
			}
			switch {
			case tt.err == nil && m.Err != nil:
				t.Errorf("Err = %v, want none", m.Err)
			case tt.err != nil && (!errors.Is(m.Err, tt.err) || !strings.Contains(m.Err.Error(), tt.errText)):
				t.Errorf("Err = %v, want %v containing %q", m.Err, tt.err, tt.errText)
			}
			if m.Err != nil && !strings.HasPrefix(m.Err.Error(), "modelrepo: ") {
				t.Errorf("Err does not start with the package name: %v", m.Err)
			}
			if (m.Config == nil) != tt.configIsNil {
				t.Errorf("Config = %+v, want nil: %v", m.Config, tt.configIsNil)
			}
			if m.Config != nil && m.Config.Name != tt.model {
				t.Errorf("Config.Name = %q", m.Config.Name)
			}
			if len(m.VersionErrors) != len(tt.versionErrs) {
				t.Errorf("VersionErrors = %v, want %v", m.VersionErrors, tt.versionErrs)
			}
			for v, target := range tt.versionErrs {
				if err := m.VersionErrors[v]; !errors.Is(err, target) {
					t.Errorf("VersionErrors[%d] = %v, want %v", v, err, target)
				}
			}
			for v, format := range tt.formatsByVer {
				e, ok := m.Version(v)
				if !ok {
					t.Fatalf("version %d missing", v)
				}
				file := ModelFileONNX
				if format == FormatPT2 {
					file = ModelFilePT2
				}
				want := filepath.Join(m.Dir, strconv.FormatInt(v, 10), file)
				fi, err := os.Stat(want)
				if err != nil {
					t.Fatal(err)
				}
				if e.Format != format || e.Path != want || e.Size != fi.Size() || !e.ModTime.Equal(fi.ModTime()) {
					t.Errorf("version %d = %+v, want format %s, path %s, size %d", v, e, format, want, fi.Size())
				}
			}
		})
	}

	// Messages that say what to fix.
	both, _ := s.Model("both")
	if msg := both.VersionErrors[1].Error(); !strings.Contains(msg, "both model.onnx and model.pt2") {
		t.Errorf("both: %s", msg)
	}
	empty, _ := s.Model("empty")
	if msg := empty.VersionErrors[1].Error(); !strings.Contains(msg, "no model file (want model.onnx or model.pt2)") {
		t.Errorf("empty: %s", msg)
	}
	stray, _ := s.Model("stray")
	if msg := stray.Err.Error(); !strings.Contains(msg, `"01" is not a version number`) {
		t.Errorf("stray: leading zeros accepted: %s", msg)
	}
	alpha, _ := s.Model("alpha")
	if alpha.Config.Batching.MaxBatchSize != 8 {
		t.Errorf("alpha config = %+v", alpha.Config)
	}
	beta, _ := s.Model("beta")
	if !reflect.DeepEqual(beta.Config, DefaultConfig("beta")) {
		t.Errorf("beta has no config.yaml; Config = %+v, want the defaults", beta.Config)
	}
}

func TestSelected(t *testing.T) {
	entry := func(policy VersionPolicy, versions ...int64) ModelEntry {
		c := DefaultConfig("m")
		c.VersionPolicy = policy
		m := ModelEntry{Name: "m", Config: c}
		for _, v := range versions {
			m.Versions = append(m.Versions, VersionEntry{Version: v})
		}
		return m
	}
	tests := []struct {
		name string
		m    ModelEntry
		want []int64
	}{
		{"latest 2 of 1 2 5", entry(VersionPolicy{Latest: 2}, 1, 2, 5), []int64{2, 5}},
		{"latest 1 (default)", entry(VersionPolicy{Latest: 1}, 1, 2, 5), []int64{5}},
		{"latest more than there are", entry(VersionPolicy{Latest: 4}, 3), []int64{3}},
		{"specific", entry(VersionPolicy{Specific: []int64{1, 5}}, 1, 2, 5), []int64{1, 5}},
		{"specific partly missing", entry(VersionPolicy{Specific: []int64{2, 9}}, 1, 2, 5), []int64{2}},
		{"all", entry(VersionPolicy{All: true}, 1, 2, 5), []int64{1, 2, 5}},
		{"no versions", entry(VersionPolicy{Latest: 1}), []int64{}},
		{"model in error", func() ModelEntry {
			m := entry(VersionPolicy{All: true}, 1, 2)
			m.Err = ErrLayout
			return m
		}(), []int64{}},
		{"no config", ModelEntry{Name: "m", Versions: []VersionEntry{{Version: 1}}}, []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionNumbers(tt.m.Selected()); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Selected = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScanSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "evil", "1", "model.onnx"), "x")
	writeFile(t, filepath.Join(outside, "model.onnx"), "x")
	writeFile(t, filepath.Join(outside, "config.yaml"), "")
	r := newTestRepo(t, map[string]string{
		"real/1/model.onnx":    "x",
		"linkver/1/":           "",
		"linkcfg/1/model.onnx": "x",
	})
	root := r.Root()
	links := map[string]string{
		"escape":               filepath.Join(outside, "evil"),           // model dir outside
		"alias":                "real",                                   // model dir inside: fine
		"linkver/1/model.onnx": filepath.Join(outside, "model.onnx"),     // model file outside
		"linkver/2":            filepath.Join(outside, "evil", "1"),      // version dir outside
		"linkver/3":            filepath.Join("..", "real", "1"),         // version dir inside: fine
		"linkcfg/config.yaml":  filepath.Join(outside, "config.yaml"),    // config outside
		"dangling":             filepath.Join(outside, "does-not-exist"), // broken link
	}
	for from, to := range links {
		if err := os.Symlink(to, filepath.Join(root, filepath.FromSlash(from))); err != nil {
			t.Skipf("symlinks unsupported: %v", err)
		}
	}
	s := scan(t, r)

	escape, ok := s.Model("escape")
	if !ok || !errors.Is(escape.Err, ErrOutsideRoot) || len(escape.Versions) != 0 {
		t.Errorf("escape = %+v, want ErrOutsideRoot and no versions", escape)
	}
	if strings.Contains(escape.Err.Error(), outside) {
		t.Errorf("the error reveals the link's target: %v", escape.Err)
	}
	alias, ok := s.Model("alias")
	if !ok || alias.Err != nil || !reflect.DeepEqual(versionNumbers(alias.Versions), []int64{1}) {
		t.Errorf("alias = %+v, want version 1 without errors", alias)
	}
	lv, _ := s.Model("linkver")
	if !errors.Is(lv.VersionErrors[1], ErrOutsideRoot) || !errors.Is(lv.VersionErrors[2], ErrOutsideRoot) {
		t.Errorf("linkver VersionErrors = %v, want ErrOutsideRoot for 1 and 2", lv.VersionErrors)
	}
	if got := versionNumbers(lv.Versions); !reflect.DeepEqual(got, []int64{3}) {
		t.Errorf("linkver Versions = %v, want [3]", got)
	}
	lc, _ := s.Model("linkcfg")
	if !errors.Is(lc.Err, ErrOutsideRoot) || lc.Config != nil {
		t.Errorf("linkcfg = %+v, want ErrOutsideRoot for its config", lc)
	}
	dangling, ok := s.Model("dangling")
	if !ok || !errors.Is(dangling.Err, ErrLayout) || !strings.Contains(dangling.Err.Error(), "broken symbolic link") || strings.Contains(dangling.Err.Error(), outside) {
		t.Errorf("dangling = %+v, want a broken link error that does not say where it points", dangling)
	}
	real, _ := s.Model("real")
	if real.Err != nil || len(real.Versions) != 1 {
		t.Errorf("real = %+v", real)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeFile(t, file, "x")
	tests := []struct {
		root string
		want error
	}{
		{"", ErrNotFound},
		{filepath.Join(dir, "missing"), ErrNotFound},
		{file, ErrLayout},
	}
	for _, tt := range tests {
		if _, err := Open(tt.root); !errors.Is(err, tt.want) {
			t.Errorf("Open(%q) = %v, want %v", tt.root, err, tt.want)
		}
	}
	r, err := Open(dir + string(filepath.Separator) + ".")
	if err != nil {
		t.Fatal(err)
	}
	if r.Root() != dir {
		t.Errorf("Root = %q, want %q", r.Root(), dir)
	}
}

func TestScanRootRemoved(t *testing.T) {
	r := newTestRepo(t, map[string]string{"m/1/model.onnx": "x"})
	if err := os.RemoveAll(r.Root()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scan(); err == nil || !strings.HasPrefix(err.Error(), "modelrepo: ") {
		t.Errorf("Scan of a removed root = %v, want an error", err)
	}
}

func TestResolve(t *testing.T) {
	outside := t.TempDir()
	r := newTestRepo(t, map[string]string{
		"resnet/1/model.onnx":  "x",
		"v1.2_x-y/1/model.pt2": "x",
		"afile":                "x",
	})
	if err := os.Symlink(outside, filepath.Join(r.Root(), "escape")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want error // nil: resolves
		msg  string
	}{
		{"resnet", nil, ""},
		{"v1.2_x-y", nil, ""},
		{"../etc", ErrInvalidName, "path separator"},
		{"..", ErrInvalidName, `must not contain ".."`},
		{"a..b", ErrInvalidName, `must not contain ".."`},
		{"/etc/passwd", ErrInvalidName, "path separator"},
		{"resnet/1", ErrInvalidName, "path separator"},
		{`..\windows`, ErrInvalidName, "path separator"},
		{"", ErrInvalidName, "is empty"},
		{".", ErrInvalidName, "must start with a letter or digit"},
		{".hidden", ErrInvalidName, "must start with a letter or digit"},
		{"-flag", ErrInvalidName, "must start with a letter or digit"},
		{"res net", ErrInvalidName, "must start with a letter or digit"},
		{"nul\x00byte", ErrInvalidName, "must start with a letter or digit"},
		{strings.Repeat("a", 129), ErrInvalidName, "longer than 128"},
		{"missing", ErrNotFound, `model "missing" is not in the repository`},
		{"afile", ErrNotFound, "not in the repository"},
		{"escape", ErrOutsideRoot, "outside the repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := r.Resolve(tt.name)
			if tt.want == nil {
				if err != nil || dir != filepath.Join(r.Root(), tt.name) {
					t.Errorf("Resolve = %q, %v; want %q", dir, err, filepath.Join(r.Root(), tt.name))
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) || dir != "" {
				t.Errorf("Resolve = %q, %v; want %v containing %q", dir, err, tt.want, tt.msg)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "modelrepo: ") {
				t.Errorf("message does not start with the package name: %v", err)
			}
			if err != nil && strings.Contains(err.Error(), outside) {
				t.Errorf("message reveals a path outside the repository: %v", err)
			}
		})
	}
	if _, err := r.Resolve(strings.Repeat("x/", 1000)); err == nil || len(err.Error()) > 200 {
		t.Errorf("a long bad name gives %d bytes of error: %.80v", len(err.Error()), err)
	}
}
