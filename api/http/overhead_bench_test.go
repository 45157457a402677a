package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	grpcapi "github.com/xserve/xserve/api/grpc"
	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

const tinyModel = "../../testdata/tiny/addone.onnx" // y = x + 1, float32[batch,16]

// BenchmarkHTTPOverhead measures what the HTTP and gRPC paths add to a
// request of the tiniest model over a direct execute. Each iteration runs,
// one at a time and in an order rotated every iteration, (a) a direct Run
// of the compiled executable the server runs (upload, execute, download),
// (b) POST /v1/infer with JSON tensors, (c) a KServe v2 gRPC ModelInfer
// (raw_input_contents in, raw_output_contents out) and (d) POST
// /v2/models/addone/infer with binary tensors both ways, to one Manager.
//
// name-overhead-p50-us, the figure #34 names, is the median over
// iterations of the request's time in the server's handler minus that
// iteration's direct execute: a paired difference, so that load which
// comes and goes on a shared machine shifts both sides alike. The
// handler's time is the server's own access-line duration (HTTP: handler
// start to response built; gRPC: from the call's interceptor to its
// handler's return); name-e2e-overhead-p50-us is the same paired median of
// the client's round trip (the client, loopback and framing included), and
// name-e2e-p50-us the round trip itself.
//
//	go test -run '^$' -bench HTTPOverhead -benchtime 5000x ./api/http
func BenchmarkHTTPOverhead(b *testing.B) {
	ctx := context.Background()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
	if err != nil {
		b.Fatal(err)
	}
	client, err := pjrt.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()

	// (a) direct: the executable the server would run for bucket batch=1.
	g, err := importer.Load(tinyModel)
	if err != nil {
		b.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, map[string]int64{"batch": 1})
	if err != nil {
		b.Fatal(err)
	}
	w := engine.NewWeights(client)
	defer w.Close()
	exe, err := engine.Compile(ctx, client, prog, w)
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Close()
	x := tensor.New(tensor.Float32, 1, 16)
	for i := int64(0); i < 16; i++ {
		x.SetFloat64(i, float64(i))
	}

	// (b) HTTP: a real Manager and server on loopback.
	repo := b.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "addone", "1"), 0o755); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(tinyModel)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "addone", "1", "model.onnx"), data, 0o644)
	os.WriteFile(filepath.Join(repo, "addone", "config.yaml"), []byte("buckets:\n  batch: [1]\nwarmup: eager\nbatching:\n  enabled: false\n"), 0o644)
	r, err := modelrepo.Open(repo)
	if err != nil {
		b.Fatal(err)
	}
	mgr, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: r, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.Shutdown(ctx)
	// The servers' access lines (debug level) give each request's time in
	// the server's handler: from the handler's start to its response built
	// (HTTP), from the call's start to its handler's return (gRPC). Neither
	// counts the wire, the HTTP/2 framing or the client.
	handlerTimes := &accessTimes{by: map[string][]time.Duration{}}
	srv, err := httpapi.New(mgr, httpapi.Options{Logger: slog.New(handlerTimes)})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(ctx)
	body, _ := json.Marshal(map[string]any{"model": "addone", "inputs": map[string]any{
		"x": map[string]any{"dtype": "float32", "shape": []int{1, 16}, "data": x.Float64s()}}})
	url := fmt.Sprintf("http://%s/v1/infer", ln.Addr())
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	post := func() error {
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, out)
		}
		return nil
	}
	// (b') binary HTTP: the OIP route with the binary tensor extension
	// both ways (what tritonclient and perf_analyzer send).
	header := []byte(`{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":64}}],"parameters":{"binary_data_output":true}}`)
	binBody := append(append([]byte(nil), header...), payload.TensorBytes(x)...)
	binURL := fmt.Sprintf("http://%s/v2/models/addone/infer", ln.Addr())
	hdrLen := strconv.Itoa(len(header))
	postBinary := func() error {
		req, err := http.NewRequest("POST", binURL, bytes.NewReader(binBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set(httpapi.HeaderInferenceLength, hdrLen)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get(httpapi.HeaderInferenceLength) == "" {
			return fmt.Errorf("status %d: %s", resp.StatusCode, out)
		}
		return nil
	}
	gs, err := grpcapi.New(mgr, grpcapi.Options{Logger: slog.New(handlerTimes)})
	if err != nil {
		b.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gs.Serve(gln)
	defer gs.Shutdown(ctx)
	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	gc := pb.NewGRPCInferenceServiceClient(conn)
	greq := &pb.ModelInferRequest{ModelName: "addone",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{payload.TensorBytes(x)}}
	infer := func() error {
		_, err := gc.ModelInfer(ctx, greq)
		return err
	}
	for i := 0; i < 50; i++ { // warm up all paths
		if _, err := exe.Run(ctx, []*tensor.Tensor{x}); err != nil {
			b.Fatal(err)
		}
		if err := post(); err != nil {
			b.Fatal(err)
		}
		if err := infer(); err != nil {
			b.Fatal(err)
		}
		if err := postBinary(); err != nil {
			b.Fatal(err)
		}
	}
	// The four paths run in turn, the order rotated every iteration, so
	// that each follows each other equally often: a gRPC call's trailing
	// work (flow control, the client's reader) competes with whatever runs
	// next on a 2-core machine.
	paths := []func() error{
		func() error { _, err := exe.Run(ctx, []*tensor.Tensor{x}); return err },
		post, infer, postBinary,
	}
	took := make([][]time.Duration, len(paths))
	for k := range took {
		took[k] = make([]time.Duration, 0, b.N)
	}
	handlerTimes.reset()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range paths {
			k := (i + j) % len(paths)
			t0 := time.Now()
			if err := paths[k](); err != nil {
				b.Fatal(err)
			}
			took[k] = append(took[k], time.Since(t0))
		}
	}
	b.StopTimer()
	direct := took[0]
	for k, p := range []struct{ name, route string }{
		{"json", "/v1/infer"},
		{"grpc", "/inference.GRPCInferenceService/ModelInfer"},
		{"binary", "/v2/models/:model/infer"},
	} {
		e2e, _ := percentiles(took[k+1])
		b.ReportMetric(e2e, p.name+"-e2e-p50-us")
		handler := handlerTimes.get(p.route)
		b.ReportMetric(pairedMedian(handler, direct), p.name+"-overhead-p50-us")
		b.ReportMetric(pairedMedian(took[k+1], direct), p.name+"-e2e-overhead-p50-us")
	}
	dp50, dp99 := percentiles(direct)
	b.ReportMetric(dp50, "direct-p50-us")
	b.ReportMetric(dp99, "direct-p99-us")
}

// pairedMedian returns, in microseconds, the median over iterations i of
// a[i] - direct[i]: each request's time against the direct execute of the
// same iteration, so that load that comes and goes shifts both alike.
func pairedMedian(a, direct []time.Duration) float64 {
	n := min(len(a), len(direct))
	if n == 0 {
		return 0
	}
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = a[i] - direct[i]
	}
	p50, _ := percentiles(d)
	return p50
}

// percentiles returns p50 and p99 in microseconds.
func percentiles(d []time.Duration) (float64, float64) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))].Nanoseconds()) / 1e3 }
	return at(0.50), at(0.99)
}

// accessTimes is a slog.Handler that keeps the "duration" of the servers'
// access lines ("request" of api/http by its route, "grpc request" of
// api/grpc by its method) and drops everything else.
type accessTimes struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (a *accessTimes) Enabled(context.Context, slog.Level) bool { return true }
func (a *accessTimes) WithAttrs([]slog.Attr) slog.Handler       { return a }
func (a *accessTimes) WithGroup(string) slog.Handler            { return a }

func (a *accessTimes) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request" && r.Message != "grpc request" {
		return nil
	}
	var key string
	var d time.Duration
	r.Attrs(func(at slog.Attr) bool {
		switch {
		case at.Key == "route" || at.Key == "method" && r.Message == "grpc request":
			key = at.Value.String()
		case at.Key == "duration":
			d = at.Value.Duration()
		}
		return true
	})
	a.mu.Lock()
	a.by[key] = append(a.by[key], d)
	a.mu.Unlock()
	return nil
}

func (a *accessTimes) reset() {
	a.mu.Lock()
	clear(a.by)
	a.mu.Unlock()
}

func (a *accessTimes) get(key string) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Duration(nil), a.by[key]...)
}
