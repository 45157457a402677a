package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// echoBackend is a Backend double for protocol tests only: Infer answers each
// input as an output of the same name (sorted by name), so a test sees
// exactly what the server decoded. Model names pick canned errors.
type echoBackend struct {
	mu       sync.Mutex
	last     *serving.InferRequest
	lastVer  int64
	loaded   []string
	unloaded []string
	// block, when set, makes Infer wait for it to close (after closing
	// started, when set).
	block   chan struct{}
	started chan struct{}
}

// errFor maps a model name to the error a real Manager would give.
func errFor(model string) error {
	switch model {
	case "missing":
		return fmt.Errorf("%w: model %q is not in the repository", serving.ErrModelNotFound, model)
	case "loading":
		return fmt.Errorf("%w: model %q is loading", serving.ErrNotReady, model)
	case "busy", "busyfast":
		// As serving.Manager answers a full batching queue: ErrOverloaded
		// wrapping the batcher's *QueueFullError and its RetryAfter.
		retry := 2500 * time.Millisecond
		if model == "busyfast" {
			retry = 40 * time.Millisecond
		}
		qf := &batching.QueueFullError{Key: model + "/1", Queued: 1024, RetryAfter: retry}
		return fmt.Errorf("%w: model %s version 1: %w", serving.ErrOverloaded, model, qf)
	case "closed":
		return fmt.Errorf("%w", serving.ErrClosed)
	case "nobucket":
		return fmt.Errorf("%w: input \"x\" dim 0 (batch) is 100, the largest bucket is 8", serving.ErrNoBucket)
	case "badinput":
		return fmt.Errorf("%w: input \"x\" has dtype int64, model expects float32", serving.ErrInvalidInput)
	case "broken":
		return errors.New("serving: device exploded")
	case "slow":
		return context.DeadlineExceeded
	}
	if strings.Contains(model, "/") || strings.Contains(model, "..") {
		return fmt.Errorf("%w: model name %q must not contain a path separator or \"..\"", serving.ErrModelNotFound, model)
	}
	return nil
}

func (b *echoBackend) Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	if b.started != nil {
		close(b.started)
	}
	if b.block != nil {
		<-b.block
	}
	if err := errFor(model); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.last, b.lastVer = req, version
	b.mu.Unlock()
	names := make([]string, 0, len(req.Inputs))
	for n := range req.Inputs {
		names = append(names, n)
	}
	slices.Sort(names)
	resp := &serving.InferResponse{ID: req.ID, ModelName: model, ModelVersion: max(version, 1)}
	for _, n := range names {
		if req.Outputs != nil && !slices.Contains(req.Outputs, n) {
			continue
		}
		resp.Outputs = append(resp.Outputs, serving.NamedTensor{Name: n, Tensor: req.Inputs[n].Clone()})
	}
	return resp, nil
}

func (b *echoBackend) Metadata(model string, version int64) (*serving.Metadata, error) {
	if err := errFor(model); err != nil {
		return nil, err
	}
	return &serving.Metadata{
		Name: model, Version: 1, Versions: []int64{1}, Platform: "onnx",
		Inputs:  []serving.TensorSpec{{Name: "x", DType: tensor.Float32, Shape: []int64{-1, 3}, Dims: []string{"batch", "3"}}},
		Outputs: []serving.TensorSpec{{Name: "y", DType: tensor.Int64, Shape: []int64{-1}, Dims: []string{"batch"}}},
		Buckets: map[string][]int64{"batch": {1, 2, 4}},
	}, nil
}

func (b *echoBackend) Status() []serving.ModelStatus {
	return []serving.ModelStatus{
		{Name: "echo", Version: 1, State: serving.StateReady},
		{Name: "loading", Version: 1, State: serving.StateLoading},
		{Name: "broken", Version: 2, State: serving.StateUnavailable, Reason: "onnx: bad file"},
	}
}

func (b *echoBackend) Readiness() serving.Readiness { return serving.Readiness{Ready: true} }

func (b *echoBackend) ModelReady(model string, version int64) bool { return errFor(model) == nil }

func (b *echoBackend) Load(ctx context.Context, model string) error {
	if err := errFor(model); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loaded = append(b.loaded, model)
	return nil
}

func (b *echoBackend) Unload(ctx context.Context, model string) error {
	if err := errFor(model); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unloaded = append(b.unloaded, model)
	return nil
}

func (b *echoBackend) WriteMetrics(w io.Writer) error {
	_, err := io.WriteString(w, "# TYPE xserve_fake_total counter\nxserve_fake_total 7\n")
	return err
}

func (b *echoBackend) Config(model string, version int64) (*serving.ModelConfig, error) {
	md, err := b.Metadata(model, version)
	if err != nil {
		return nil, err
	}
	return &serving.ModelConfig{Metadata: *md}, nil
}

func (b *echoBackend) Statistics(model string, version int64) ([]serving.Statistics, error) {
	if err := errFor(model); model != "" && err != nil {
		return nil, err
	}
	return nil, nil
}

// testServer runs a Server on a loopback port for the test's duration.
type testServer struct {
	*Server
	url     string
	backend *echoBackend
	done    chan error
}

func startServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	return startServerWith(t, &echoBackend{}, opts)
}

func startServerWith(t *testing.T, b *echoBackend, opts Options) *testServer {
	t.Helper()
	ts := serveBackend(t, b, opts)
	ts.backend = b
	return ts
}

// serveBackend runs a Server answering from any backend.
func serveBackend(t *testing.T, b Backend, opts Options) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, url: "http://" + ln.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-ts.done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ts
}

// response is a finished HTTP exchange.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) String() string {
	b := r.body
	if len(b) > 300 {
		b = b[:300]
	}
	return fmt.Sprintf("%d %q", r.code, b)
}

// do sends a request with the given headers (pairs) and reads the whole
// response, without transparent decompression.
func (ts *testServer) do(t *testing.T, method, path string, body []byte, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, ts.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, header: res.Header, body: b}
}
