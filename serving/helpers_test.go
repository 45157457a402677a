package serving

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/tensor"
)

// Files the tests serve. tinycnn: image float32[batch,3,32,32] -> probs
// float32[batch,10], with ONNX Runtime's output for a batch of 2. pair (made
// by testdata/make_pair.py): x, y float32[batch,seq] -> sum = x + 0.5*y
// float32[batch,seq], total = sum of x over seq float32[batch].
const (
	tinyCNN      = "../examples/models/tinycnn/1/model.onnx"
	tinyCNNImage = "../examples/samples/tinycnn/image.npy"
	tinyCNNProbs = "../examples/samples/tinycnn/probs.onnxruntime.npy"
	pairModel    = "testdata/pair.onnx"
)

// plugin is the real XLA CPU plugin's client the tests share.
var plugin = pjrttest.Shared{RepoRoot: ".."}

// testClient returns the client of the real XLA CPU plugin the tests
// share. A missing plugin fails the test: run `make pjrt`.
func testClient(t testing.TB) *pjrt.Client {
	t.Helper()
	return plugin.Client(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCacheDir != "" {
		os.RemoveAll(sharedCacheDir)
	}
	if err := plugin.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "closing the shared client:", err)
		code = 1
	}
	os.Exit(code)
}

var (
	cacheOnce      sync.Once
	sharedCacheDir string
)

// sharedCache is a compile cache the tests of one run share (removed by
// TestMain), for tests that load the same models again and again.
func sharedCache(t testing.TB) string {
	t.Helper()
	cacheOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xserve-serving-cache-")
		if err != nil {
			t.Fatal(err)
		}
		sharedCacheDir = dir
	})
	return sharedCacheDir
}

// logBuffer collects a Manager's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines containing every one of parts.
func (l *logBuffer) lines(parts ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(sc.Text(), p)
		}
		if ok {
			out = append(out, sc.Text())
		}
	}
	return out
}

// testRepo is a model repository in a temporary directory.
type testRepo struct {
	t    testing.TB
	root string
}

func newRepo(t testing.TB) *testRepo {
	return &testRepo{t: t, root: t.TempDir()}
}

// add copies the model file src into <model>/<version>/model.onnx.
func (r *testRepo) add(model string, version int, src string) {
	r.t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(model, version, data)
}

// write writes data as <model>/<version>/model.onnx.
func (r *testRepo) write(model string, version int, data []byte) {
	r.t.Helper()
	r.writeFile(model, version, modelrepo.ModelFileONNX, data)
}

// writeFile writes data as <model>/<version>/<file>.
func (r *testRepo) writeFile(model string, version int, file string, data []byte) {
	r.t.Helper()
	dir := filepath.Join(r.root, model, strconv.Itoa(version))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	// Written beside the repository and renamed into place, so the poller
	// never reads a half-written file (a second, spurious reload failure).
	tmp, err := os.CreateTemp(filepath.Dir(r.root), "model-*")
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := tmp.Write(data); err != nil {
		r.t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, file)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *testRepo) config(model, yaml string) {
	r.t.Helper()
	if err := os.MkdirAll(filepath.Join(r.root, model), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.root, model, modelrepo.ConfigFile), []byte(yaml), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// remove takes a version directory out of the repository in one step (a
// rename out of it, then the delete), as a deploy tool should: a poll
// during a plain recursive delete can see the directory without its model
// file, which is a broken version, not a removed one.
func (r *testRepo) remove(model string, version int) {
	r.t.Helper()
	gone := filepath.Join(r.t.TempDir(), "removed")
	if err := os.Rename(filepath.Join(r.root, model, strconv.Itoa(version)), gone); err != nil {
		r.t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		r.t.Fatal(err)
	}
}

// start opens a Manager on the repository; it is shut down when the test
// ends. edit may change the options.
func start(t testing.TB, r *testRepo, edit func(*Options)) (*Manager, *logBuffer) {
	t.Helper()
	repo, err := modelrepo.Open(r.root)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	opts := Options{
		Client:     testClient(t),
		Repository: repo,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&opts)
	}
	m, err := NewManager(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if t.Failed() {
			t.Logf("manager log:\n%s", logs)
		}
	})
	return m, logs
}

func readNpy(t testing.TB, path string) *tensor.Tensor {
	t.Helper()
	x, err := tensor.ReadNpyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// rows stacks the given rows (along dim 0) of x.
func rows(x *tensor.Tensor, idx ...int) *tensor.Tensor {
	rowBytes := len(x.Data) / int(x.Shape[0])
	shape := append([]int64{int64(len(idx))}, x.Shape[1:]...)
	out := tensor.New(x.DType, shape...)
	for i, r := range idx {
		copy(out.Data[i*rowBytes:], x.Data[r*rowBytes:(r+1)*rowBytes])
	}
	return out
}

// assertClose checks shapes and that every element is within tol.
func assertClose(t testing.TB, what string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if got.DType != want.DType || tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		t.Fatalf("%s: got %s, want %s", what, got, want)
	}
	g, w := got.Float64s(), want.Float64s()
	worst, at := 0.0, 0
	for i := range w {
		if d := math.Abs(g[i] - w[i]); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if worst > tol || math.IsNaN(worst) {
		t.Errorf("%s: element %d is %v, want %v (difference %g > %g)", what, at, g[at], w[at], worst, tol)
	}
}

// metricsText returns the Manager's metrics exposition.
func metricsText(t testing.TB, m *Manager) string {
	t.Helper()
	var b strings.Builder
	if err := m.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// metric returns the value of one series, e.g.
// `xserve_compilations_total{bucket="batch=1",model="tinycnn",version="1"}`,
// or 0 when the series is absent.
func metric(t testing.TB, m *Manager, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, m), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// eventually polls cond until it holds or 20s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// infer runs a request that must succeed.
func infer(t testing.TB, m *Manager, model string, version int64, inputs map[string]*tensor.Tensor) *InferResponse {
	t.Helper()
	resp, err := m.Infer(context.Background(), model, version, &InferRequest{Inputs: inputs})
	if err != nil {
		t.Fatalf("Infer %s: %v", model, err)
	}
	return resp
}

// state returns the status of one model version ("" when unknown).
func state(m *Manager, model string, version int64) (ModelState, string) {
	for _, s := range m.Status() {
		if s.Name == model && s.Version == version {
			return s.State, s.Reason
		}
	}
	return "", ""
}

// versionOf returns the Manager's current instance of a version.
func versionOf(m *Manager, model string, num int64) *version {
	m.mu.Lock()
	defer m.mu.Unlock()
	if md := m.models[model]; md != nil {
		return md.versions[num]
	}
	return nil
}
