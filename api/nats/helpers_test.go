package natsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// The tests run a real NATS server (nats-server, in the process, on a free
// loopback port, with JetStream), the real serving.Manager on the real XLA
// CPU PJRT plugin, the tinycnn example model, and compare its outputs with
// ONNX Runtime's (examples/samples/tinycnn/probs.onnxruntime.npy).
const (
	tinyCNN      = "../../examples/models/tinycnn/1/model.onnx"
	tinyCNNImage = "../../examples/samples/tinycnn/image.npy"
	tinyCNNProbs = "../../examples/samples/tinycnn/probs.onnxruntime.npy"
)

var (
	clientOnce   sync.Once
	sharedClient *pjrt.Client
	clientErr    error
)

// pjrtClient returns the real XLA CPU plugin's client, shared by the tests;
// a missing plugin fails the test (run `make pjrt`).
func pjrtClient(t testing.TB) *pjrt.Client {
	t.Helper()
	clientOnce.Do(func() {
		var path string
		path, clientErr = pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
		if clientErr != nil {
			clientErr = fmt.Errorf("%w\n\nthe api/nats tests need the real XLA CPU plugin: run `make pjrt` first", clientErr)
			return
		}
		sharedClient, clientErr = pjrt.Open(path)
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	return sharedClient
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedClient != nil {
		sharedClient.Close()
	}
	os.Exit(code)
}

// testLogger discards below warnings unless -v.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startNATS starts a NATS server with JetStream in the process, on a free
// loopback port.
// testAdmin is the embedded servers' operator in tests (adminJetStream).
var testAdmin = func() nkeys.KeyPair {
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(err)
	}
	return kp
}()

func startNATS(t testing.TB) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Logger: testLogger(t), admin: testAdmin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// startManager serves tinycnn (buckets batch 1, 2, 4) from a temporary
// repository.
func startManager(t testing.TB) *serving.Manager {
	t.Helper()
	dir := t.TempDir()
	model, err := os.ReadFile(tinyCNN)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tinycnn", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tinycnn", "1", "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tinycnn", "config.yaml"), []byte("buckets:\n  batch: [1, 2, 4]\nwarmup: lazy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := modelrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := pjrtClient(t)
	m, err := serving.NewManager(context.Background(), serving.Options{Client: c, Repository: repo, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	if !m.ModelReady("tinycnn", 0) {
		t.Fatalf("tinycnn not ready: %+v", m.Status())
	}
	return m
}

// connect opens a client connection to e.
func connect(t testing.TB, e *Embedded) *nats.Conn {
	t.Helper()
	nc, err := Connect(context.Background(), e.ClientURL(), ConnOptions{NkeyFile: e.ClientNkeyFile(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startServer serves backend on a connection of its own to e.
func startServer(t testing.TB, e *Embedded, backend Backend, opts Options) *Server {
	t.Helper()
	nc, err := e.Connect(context.Background(), ConnOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	opts.Conn = nc
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := New(context.Background(), backend, opts)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// sample holds the example images and ONNX Runtime's probabilities.
type sample struct {
	image, probs *tensor.Tensor
}

func loadSample(t testing.TB) sample {
	t.Helper()
	image, err := tensor.ReadNpyFile(tinyCNNImage)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := tensor.ReadNpyFile(tinyCNNProbs)
	if err != nil {
		t.Fatal(err)
	}
	return sample{image, probs}
}

// batch returns n images (the sample's rows, cycled from row first) and
// their expected probabilities.
func (s sample) batch(n, first int) (*tensor.Tensor, []float64) {
	rows := s.image.Shape[0]
	rowLen := int64(len(s.image.Data)) / rows
	img := tensor.New(tensor.Float32, append([]int64{int64(n)}, s.image.Shape[1:]...)...)
	var want []float64
	classes := s.probs.Shape[1]
	for i := range int64(n) {
		r := (int64(first) + i) % rows
		copy(img.Data[i*rowLen:], s.image.Data[r*rowLen:(r+1)*rowLen])
		for c := range classes {
			want = append(want, s.probs.Float64At(r*classes+c))
		}
	}
	return img, want
}

// checkProbs compares output values with ONNX Runtime's within 1e-5.
func checkProbs(t testing.TB, got []float64, shape []int64, want []float64) {
	t.Helper()
	if len(shape) != 2 || shape[1] != 10 || int(shape[0]*10) != len(want) || len(got) != len(want) {
		t.Fatalf("output shape %v with %d values, want [%d 10]", shape, len(got), len(want)/10)
	}
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > 1e-5 || math.IsNaN(d) {
			t.Fatalf("element %d: got %v, onnxruntime %v", i, got[i], want[i])
		}
	}
}

// jsonArray writes t's elements as JSON, nested as its shape when nested.
func jsonArray(t *tensor.Tensor, nested bool) string {
	var b strings.Builder
	i := int64(0)
	var rec func(dim int)
	rec = func(dim int) {
		b.WriteByte('[')
		for k := range t.Shape[dim] {
			if k > 0 {
				b.WriteByte(',')
			}
			if dim+1 < len(t.Shape) {
				rec(dim + 1)
				continue
			}
			b.WriteString(strconv.FormatFloat(t.Float64At(i), 'g', -1, 32))
			i++
		}
		b.WriteByte(']')
	}
	if nested {
		rec(0)
		return b.String()
	}
	b.WriteByte('[')
	for ; i < t.NumElements(); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatFloat(t.Float64At(i), 'g', -1, 32))
	}
	b.WriteByte(']')
	return b.String()
}

func shapeJSON(shape []int64) string {
	b, _ := json.Marshal(shape)
	return string(b)
}

// v1Body is a /v1/infer JSON body for img (no "model": the subject names it).
func v1Body(img *tensor.Tensor, nested bool) []byte {
	return []byte(fmt.Sprintf(`{"id": "j1", "inputs": {"image": {"dtype": "float32", "shape": %s, "data": %s}}}`, shapeJSON(img.Shape), jsonArray(img, nested)))
}

// v1Binary is a /v1/infer body with the binary tensor extension, asking for
// binary outputs; it returns the body and the JSON header's length.
func v1Binary(img *tensor.Tensor) ([]byte, string) {
	header := fmt.Sprintf(`{"inputs": {"image": {"dtype": "float32", "shape": %s, "parameters": {"binary_data_size": %d}}}, "parameters": {"binary_data_output": true}}`, shapeJSON(img.Shape), len(img.Data))
	return append([]byte(header), img.Data...), strconv.Itoa(len(header))
}

// request sends one request on subject with headers (name, value pairs).
func request(t testing.TB, nc *nats.Conn, subject string, body []byte, headers ...string) *nats.Msg {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Set(headers[i], headers[i+1])
	}
	r, err := nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		t.Fatalf("request on %s: %v", subject, err)
	}
	return r
}

// v1Outputs decodes a successful v1 reply's outputs: JSON data or binary.
func v1Outputs(t testing.TB, r *nats.Msg) (probs []float64, shape []int64) {
	t.Helper()
	if code := r.Header.Get(HeaderError); code != "" {
		t.Fatalf("error reply %s: %s", code, r.Data)
	}
	body := r.Data
	switch r.Header.Get(HeaderContentEncoding) {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	case "zstd":
		d, _ := zstd.NewReader(nil)
		defer d.Close()
		var err error
		if body, err = d.DecodeAll(body, nil); err != nil {
			t.Fatal(err)
		}
	}
	header, rest := body, []byte(nil)
	if hl := r.Header.Get(HeaderInferenceLength); hl != "" {
		n, err := strconv.Atoi(hl)
		if err != nil || n > len(body) {
			t.Fatalf("%s %q for %d bytes", HeaderInferenceLength, hl, len(body))
		}
		header, rest = body[:n], body[n:]
	}
	var resp struct {
		Model, Version, ID string
		Outputs            map[string]struct {
			DType      string
			Shape      []int64
			Data       []float64
			Parameters struct {
				BinaryDataSize int `json:"binary_data_size"`
			}
		}
	}
	if err := json.Unmarshal(header, &resp); err != nil {
		t.Fatalf("%v: %s", err, header)
	}
	out, ok := resp.Outputs["probs"]
	if !ok || resp.Model != "tinycnn" || resp.Version != "1" {
		t.Fatalf("reply %s", header)
	}
	if out.Parameters.BinaryDataSize > 0 {
		tt, err := tensor.FromBytes(tensor.Float32, out.Shape, rest)
		if err != nil {
			t.Fatal(err)
		}
		return tt.Float64s(), out.Shape
	}
	return out.Data, out.Shape
}

// errorOf returns the status code and message of an error reply, checking
// that the headers and the body agree.
func errorOf(t testing.TB, r *nats.Msg) (int, string) {
	t.Helper()
	raw := r.Header.Get(HeaderError)
	if raw == "" {
		t.Fatalf("want an error reply, got %s (headers %v)", trim(r.Data), r.Header)
	}
	code, err := strconv.Atoi(raw)
	if err != nil {
		t.Fatalf("%s %q", HeaderError, raw)
	}
	var body struct{ Error string }
	if err := json.Unmarshal(r.Data, &body); err != nil {
		t.Fatalf("error body %q: %v", r.Data, err)
	}
	if hm := r.Header.Get(HeaderErrorMessage); hm != body.Error && !strings.HasSuffix(hm, "...") {
		t.Errorf("%s %q != body %q", HeaderErrorMessage, hm, body.Error)
	}
	if r.Header.Get("Nats-Service-Error-Code") != raw {
		t.Errorf("micro error code header %q, want %q", r.Header.Get("Nats-Service-Error-Code"), raw)
	}
	return code, body.Error
}

func trim(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// httpServer serves backend over HTTP on a loopback port, to compare NATS
// error replies with HTTP's.
func httpServer(t testing.TB, backend httpapi.Backend) string {
	t.Helper()
	srv, err := httpapi.New(backend, httpapi.Options{Logger: testLogger(t), MaxTensorElements: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

// httpPost posts body to url with headers and returns the status and the
// error message (if any).
func httpPost(t testing.TB, url string, body []byte, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e struct{ Error string }
	json.Unmarshal(b, &e)
	return res.StatusCode, e.Error
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zstdBytes(b []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// gated wraps a backend so that Infer waits for the gate to open; started
// receives one value per call that reached the gate. It only delays the
// real backend.
type gated struct {
	Backend
	gate    chan struct{}
	started chan struct{}
}

func newGated(b Backend) *gated {
	return &gated{Backend: b, gate: make(chan struct{}), started: make(chan struct{}, 1024)}
}

func (g *gated) Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	g.started <- struct{}{}
	<-g.gate
	return g.Backend.Infer(ctx, model, version, req)
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
