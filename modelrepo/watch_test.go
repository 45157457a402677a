package modelrepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"
)

// brief renders changes as "kind model version" for comparisons.
func brief(cs []Change) []string {
	out := []string{}
	for _, c := range cs {
		s := fmt.Sprintf("%v %s %d", c.Kind, c.Model, c.Version)
		if c.Kind == ModelError && c.Err == nil {
			s += " cleared"
		}
		out = append(out, s)
	}
	return out
}

func TestDiff(t *testing.T) {
	base := map[string]string{
		"a/1/model.onnx":  "a1",
		"b/1/model.onnx":  "b1",
		"b/2/model.onnx":  "b2",
		"c/config.yaml":   "warmup: lazy\n",
		"c/1/model.pt2":   "c1",
		"d/1/":            "",
		"d/2/model.onnx":  "d2",
		"e/config.yaml":   "version_policy:\n  specific: [1]\n",
		"e/1/model.onnx":  "e1",
		"e/stuff/readme":  "x",
		"zz/1/model.onnx": "z",
	}
	then := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		mutate func(t *testing.T, root string)
		want   []string
	}{
		{"no change", func(t *testing.T, root string) {}, []string{}},
		{"version added", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "b/3/model.onnx"), "b3")
		}, []string{"version added b 3"}},
		{"version removed", func(t *testing.T, root string) {
			removeAll(t, filepath.Join(root, "b/1"))
		}, []string{"version removed b 1"}},
		{"mtime changed", func(t *testing.T, root string) {
			chtimes(t, filepath.Join(root, "b/2/model.onnx"), then)
		}, []string{"version changed b 2"}},
		{"size changed, same mtime", func(t *testing.T, root string) {
			p := filepath.Join(root, "a/1/model.onnx")
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, p, "a much larger model")
			chtimes(t, p, fi.ModTime())
		}, []string{"version changed a 1"}},
		{"format changed", func(t *testing.T, root string) {
			removeAll(t, filepath.Join(root, "a/1/model.onnx"))
			writeFile(t, filepath.Join(root, "a/1/model.pt2"), "a1")
		}, []string{"version changed a 1"}},
		{"config changed", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "c/config.yaml"), "warmup: eager\n")
		}, []string{"config changed c 0"}},
		{"config added", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "a/config.yaml"), "batching:\n  max_queue_size: 8\n")
		}, []string{"config changed a 0"}},
		{"equivalent config is no change", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "c/config.yaml"), "# same thing\nwarmup: lazy\nname: c\n")
		}, []string{}},
		{"config broken", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "c/config.yaml"), "warmup: sometimes\n")
		}, []string{"config changed c 0", "model error c 0"}},
		{"model error cleared", func(t *testing.T, root string) {
			removeAll(t, filepath.Join(root, "e/stuff"))
		}, []string{"model error e 0 cleared"}},
		{"model removed", func(t *testing.T, root string) {
			removeAll(t, filepath.Join(root, "b"))
		}, []string{"model removed b 0"}},
		{"model added", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "bb/1/model.onnx"), "x")
			writeFile(t, filepath.Join(root, "bb/2/model.onnx"), "x")
		}, []string{"model added bb 0"}},
		{"model added with errors", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "n/1/model.onnx"), "x")
			mkdir(t, filepath.Join(root, "n/2"))
			mkdir(t, filepath.Join(root, "n/two"))
		}, []string{"model added n 0", "model error n 0", "model error n 2"}},
		{"version broken", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "b/2/model.pt2"), "x")
		}, []string{"version removed b 2", "model error b 2"}},
		{"version fixed", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "d/1/model.onnx"), "x")
		}, []string{"version added d 1", "model error d 1 cleared"}},
		{"specific version appears", func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "e/config.yaml"), "version_policy:\n  specific: [1, 2]\n")
		}, []string{"config changed e 0", "model error e 2"}},
		{"several, in order", func(t *testing.T, root string) {
			removeAll(t, filepath.Join(root, "zz"))
			removeAll(t, filepath.Join(root, "b/1"))
			writeFile(t, filepath.Join(root, "b/3/model.onnx"), "b3")
			chtimes(t, filepath.Join(root, "b/2/model.onnx"), then)
			writeFile(t, filepath.Join(root, "c/config.yaml"), "warmup: eager\n")
			removeAll(t, filepath.Join(root, "a"))
			writeFile(t, filepath.Join(root, "aa/1/model.onnx"), "x")
		}, []string{
			"model removed a 0",
			"model added aa 0",
			"version removed b 1",
			"version changed b 2",
			"version added b 3",
			"config changed c 0",
			"model removed zz 0",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRepo(t, base)
			old := scan(t, r)
			tt.mutate(t, r.Root())
			cur := scan(t, r)
			changes := Diff(old, cur)
			if got := brief(changes); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff =\n%q\nwant\n%q", got, tt.want)
			}
			for _, c := range changes {
				if c.Entry == nil || c.Entry.Name != c.Model {
					t.Errorf("%v: Entry = %+v", c, c.Entry)
				}
				if c.Kind == ModelError && c.Err != nil && c.Err.Error() == "" {
					t.Errorf("%v: empty error", c)
				}
			}
			if again := Diff(cur, cur); len(again) != 0 {
				t.Errorf("Diff(s, s) = %v, want none", brief(again))
			}
		})
	}
}

func TestDiffNil(t *testing.T) {
	r := newTestRepo(t, map[string]string{"a/1/model.onnx": "x", "b/1/": ""})
	s := scan(t, r)
	if got, want := brief(Diff(nil, s)), []string{"model added a 0", "model added b 0", "model error b 1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Diff(nil, s) = %q, want %q", got, want)
	}
	if got, want := brief(Diff(s, nil)), []string{"model removed a 0", "model removed b 0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Diff(s, nil) = %q, want %q", got, want)
	}
	if got := Diff(nil, nil); len(got) != 0 {
		t.Errorf("Diff(nil, nil) = %v", got)
	}
}

// recorder collects the changes a Watch reports; safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) add(c Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *recorder) has(kind ChangeKind, model string, version int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.changes {
		if c.Kind == kind && c.Model == model && c.Version == version {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// addVersion creates root/model/<v>/model.onnx atomically: written in a
// hidden directory (ignored by Scan), then renamed into place, as an operator
// should.
func addVersion(t *testing.T, root, model string, v int64) {
	t.Helper()
	tmp := filepath.Join(root, model, ".tmp-"+strconv.FormatInt(v, 10))
	writeFile(t, filepath.Join(tmp, ModelFileONNX), "model")
	if err := os.Rename(tmp, filepath.Join(root, model, strconv.FormatInt(v, 10))); err != nil {
		t.Fatal(err)
	}
}

func TestWatch(t *testing.T) {
	r := newTestRepo(t, map[string]string{"m/1/model.onnx": "x"})
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Watch(ctx, 2*time.Millisecond, rec.add)
	}()

	// Watch takes its baseline when it starts, which may be after a version
	// is added here; add versions until one is reported.
	seen := int64(0)
	for v := int64(2); v < 50 && seen == 0; v++ {
		addVersion(t, r.Root(), "m", v)
		if waitFor(200*time.Millisecond, func() bool { return rec.has(VersionAdded, "m", v) }) {
			seen = v
		}
	}
	if seen == 0 {
		t.Fatalf("no VersionAdded reported; got %q", brief(rec.changes))
	}

	// Remove version 1 atomically too: out of sight first, then deleted.
	hidden := filepath.Join(r.Root(), "m", ".old-1")
	if err := os.Rename(filepath.Join(r.Root(), "m", "1"), hidden); err != nil {
		t.Fatal(err)
	}
	removeAll(t, hidden)
	if !waitFor(10*time.Second, func() bool { return rec.has(VersionRemoved, "m", 1) }) {
		t.Fatalf("no VersionRemoved for m 1; got %q", brief(rec.changes))
	}

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context was cancelled")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, c := range rec.changes {
		if c.Kind != VersionAdded && c.Kind != VersionRemoved {
			t.Errorf("unexpected change %v", c)
		}
	}
}

func TestWatchFrom(t *testing.T) {
	r := newTestRepo(t, map[string]string{"m/1/model.onnx": "x"})
	base := scan(t, r)
	writeFile(t, filepath.Join(r.Root(), "n/1/model.onnx"), "x")

	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.WatchFrom(ctx, base, time.Millisecond, rec.add)
	}()
	// A change made before WatchFrom started is reported against base.
	if !waitFor(10*time.Second, func() bool { return rec.has(ModelAdded, "n", 0) }) {
		t.Fatalf("no ModelAdded for n; got %q", brief(rec.changes))
	}

	// The root vanishing is reported as a repository error; the models stay.
	root := r.Root()
	moved := root + ".moved"
	if err := os.Rename(root, moved); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return rec.has(ModelError, "", 0) }) {
		t.Fatalf("no ModelError for the repository; got %q", brief(rec.changes))
	}
	if rec.has(ModelRemoved, "m", 0) {
		t.Errorf("a vanished root removed the models: %q", brief(rec.changes))
	}
	// When it comes back, changes are against the last good scan.
	if err := os.Rename(moved, root); err != nil {
		t.Fatal(err)
	}
	removeAll(t, filepath.Join(root, "m"))
	if !waitFor(10*time.Second, func() bool { return rec.has(ModelRemoved, "m", 0) }) {
		t.Fatalf("no ModelRemoved for m; got %q", brief(rec.changes))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WatchFrom did not return after its context was cancelled")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	errs := 0
	for _, c := range rec.changes {
		if c.Kind == ModelError && c.Model == "" {
			errs++
		}
	}
	if errs != 1 {
		t.Errorf("the repository error was reported %d times, want once: %q", errs, brief(rec.changes))
	}
}

func TestWatchCancelled(t *testing.T) {
	r := newTestRepo(t, map[string]string{"m/1/model.onnx": "x"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Watch(ctx, time.Millisecond, func(Change) { calls++ })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch with a cancelled context did not return")
	}
	if calls != 0 {
		t.Errorf("fn called %d times after cancel", calls)
	}
}

func TestChangeString(t *testing.T) {
	tests := []struct {
		c    Change
		want string
	}{
		{Change{Kind: VersionAdded, Model: "resnet", Version: 2}, "version added: resnet 2"},
		{Change{Kind: ModelRemoved, Model: "resnet"}, "model removed: resnet"},
		{Change{Kind: ModelError, Model: "m", Err: ErrLayout}, "model error: m: modelrepo: bad repository layout"},
		{Change{Kind: ModelError, Model: "m", Version: 3}, "model error: m 3: cleared"},
		{Change{Kind: ChangeKind(99)}, "ChangeKind(99): "},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func removeAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func chtimes(t *testing.T, path string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(path, when, when); err != nil {
		t.Fatal(err)
	}
}
