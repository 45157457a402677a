package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
)

const tinyCNN = "../../examples/models/tinycnn/1/model.onnx" // image float32[batch,3,32,32]

// TestOverloadThroughRealManager sends requests over HTTP to a real server
// and Manager (the real XLA CPU plugin) whose tinycnn model batches with
// max_queue_size 1: while the first request's batch holds an executor (it
// compiles its bucket on first use), a second request waits in the queue for
// company (max_queue_delay 10s), and a third finds the queue full and gets
// 429 with a Retry-After in whole seconds at once. The queued requests still
// succeed. Should the compile finish before the third request arrives, the
// test tries again with the next of twelve buckets, which compiles afresh.
//
// The CPU kernels are off here: with them tinycnn's convolutions are custom
// calls and a bucket compiles in about 0.1 s, a window a loaded CI machine
// can miss on every bucket; XLA's own convolutions take seconds to compile.
func TestOverloadThroughRealManager(t *testing.T) {
	t.Setenv(pjrt.EnvCPUKernels, "off")
	cfg := "buckets:\n  batch: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\nwarmup: lazy\nbatching:\n  max_queue_size: 1\n  max_queue_delay: 10s\n"
	base, m := serveTinyCNN(t, cfg, httpapi.Options{})
	url := base + "/v1/infer"

	type answer struct {
		code       int
		retryAfter string
		body       string
		err        error
	}
	post := func(rows int) answer {
		body := fmt.Sprintf(`{"model": "tinycnn", "inputs": {"image": {"dtype": "float32", "shape": [%d, 3, 32, 32], "data": [%s]}}}`,
			rows, strings.TrimSuffix(strings.Repeat("0.5,", rows*3*32*32), ","))
		res, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return answer{err: err}
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return answer{code: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: string(b), err: err}
	}
	postAsync := func(rows int) <-chan answer {
		ch := make(chan answer, 1)
		go func() { ch <- post(rows) }()
		return ch
	}
	stats := func() (batches uint64, queued int) {
		st, ok, err := m.BatchStats("tinycnn", 0)
		if err != nil || !ok {
			t.Fatalf("BatchStats: %v, %v", ok, err)
		}
		return st.Total.Batches, st.Total.Queued
	}
	ok200 := func(what string, ch <-chan answer) {
		t.Helper()
		select {
		case a := <-ch:
			if a.err != nil || a.code != http.StatusOK {
				t.Errorf("%s: %d %s %v", what, a.code, a.body, a.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer in 30s", what)
		}
	}
	waitUntil := func(cond func() bool, or <-chan answer) bool {
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if len(or) > 0 || time.Now().After(deadline) {
				return false
			}
			time.Sleep(time.Millisecond)
		}
		return true
	}

	// Rows 1 to 12 each need their own bucket: each attempt's first request
	// compiles a bucket nobody has used yet, up to twelve chances.
	for attempt, rows := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12} {
		before, _ := stats()
		first := postAsync(rows)
		if !waitUntil(func() bool { b, _ := stats(); return b > before }, first) {
			t.Fatalf("attempt %d: the first request was not dispatched", attempt)
		}
		second := postAsync(1)
		if !waitUntil(func() bool { _, q := stats(); return q == 1 }, first) {
			ok200("first request", first)
			ok200("second request", second)
			continue // the compile was quicker than we
		}
		third := post(1)
		if third.code == http.StatusOK {
			ok200("first request", first)
			ok200("second request", second)
			continue
		}
		if third.code != http.StatusTooManyRequests {
			t.Fatalf("third request on a full queue: %d %s %v, want 429", third.code, third.body, third.err)
		}
		if n, err := strconv.Atoi(third.retryAfter); err != nil || n < 1 {
			t.Errorf("Retry-After %q, want a whole number of seconds >= 1", third.retryAfter)
		}
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(third.body), &e); err != nil || !strings.Contains(e.Error, "overloaded") || !strings.Contains(e.Error, "queue full") {
			t.Errorf("429 body %q, want the overload error", third.body)
		}
		ok200("first request", first)
		ok200("second request", second)
		t.Logf("attempt %d (first request of %d rows) found the queue full; Retry-After %s", attempt, rows, third.retryAfter)
		return
	}
	t.Fatal("every bucket compiled before a request could find the queue full")
}

// serveTinyCNN serves tinycnn with config.yaml cfg from a real Manager (the
// real XLA CPU plugin) over HTTP on a loopback port, both shut down when
// the test ends; it returns the server's base URL.
func serveTinyCNN(t *testing.T, cfg string, opts httpapi.Options) (string, *serving.Manager) {
	t.Helper()
	ctx := context.Background()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
	if err != nil {
		t.Fatalf("%v\n\nthis test needs the real XLA CPU plugin: run `make pjrt` first", err)
	}
	client, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "tinycnn", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tinyCNN)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tinycnn", "1", "model.onnx"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tinycnn", "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := modelrepo.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: repo, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = quiet
	s, err := httpapi.New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("server Shutdown: %v", err)
		}
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("Manager Shutdown: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), m
}
