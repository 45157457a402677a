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
	"testing"
	"time"

	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

const tinyModel = "../../testdata/tiny/addone.onnx" // y = x + 1, float32[batch,16]

// BenchmarkHTTPOverhead measures what the HTTP path adds to a request: for
// the tiniest model it times, in the same run and sequentially (one request
// in flight), (a) a direct Run of the compiled executable (upload, execute,
// download) and (b) a full POST /v1/infer over loopback to a real server
// (JSON decode, validation, bucket lookup, execute, JSON encode). It reports
// p50 and p99 of each in microseconds and the p50 overhead (b - a).
//
//	go test -run '^$' -bench HTTPOverhead -benchtime 2000x ./api/http
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
	w := serving.NewWeights(client)
	defer w.Close()
	exe, err := serving.Compile(ctx, client, prog, w)
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
	srv, err := httpapi.New(mgr, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	for i := 0; i < 50; i++ { // warm up both paths
		if _, err := exe.Run(ctx, []*tensor.Tensor{x}); err != nil {
			b.Fatal(err)
		}
		if err := post(); err != nil {
			b.Fatal(err)
		}
	}
	direct := make([]time.Duration, 0, b.N)
	viaHTTP := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := exe.Run(ctx, []*tensor.Tensor{x}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := post(); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, t1.Sub(t0))
		viaHTTP = append(viaHTTP, time.Since(t1))
	}
	b.StopTimer()
	dp50, dp99 := percentiles(direct)
	hp50, hp99 := percentiles(viaHTTP)
	b.ReportMetric(dp50, "direct-p50-us")
	b.ReportMetric(dp99, "direct-p99-us")
	b.ReportMetric(hp50, "http-p50-us")
	b.ReportMetric(hp99, "http-p99-us")
	b.ReportMetric(hp50-dp50, "overhead-p50-us")
}

// percentiles returns p50 and p99 in microseconds.
func percentiles(d []time.Duration) (float64, float64) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))].Nanoseconds()) / 1e3 }
	return at(0.50), at(0.99)
}
