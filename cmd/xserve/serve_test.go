package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/xserve/xserve/tensor"
)

// The integration tests below run the real xserve binary, with the real PJRT
// CPU plugin, on a copy of examples/models/tinycnn, and talk to it over real
// HTTP. Reference outputs come from ONNX Runtime
// (sample/probs.onnxruntime.npy).

var (
	buildOnce sync.Once
	binDir    string
	binErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// xserveBinary builds cmd/xserve once per test run.
func xserveBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "xserve-bin")
		if binErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("no go tool in PATH: %w", err)
			return
		}
		out, err := exec.Command(goTool, "build", "-o", filepath.Join(binDir, "xserve"), ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "xserve")
}

// repoRoot is the checkout's root, where the PJRT plugin and .venv are found.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// tinycnnRepo makes a model repository holding tinycnn with batch buckets
// [1, 2, 4, 8], compiled lazily (on the first request of each bucket).
func tinycnnRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	model, err := os.ReadFile(example + "/1/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tinycnn", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tinycnn", "1", "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	config := "buckets:\n  batch: [1, 2, 4, 8]\nwarmup: lazy\n"
	if err := os.WriteFile(filepath.Join(dir, "tinycnn", "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// logBuffer collects a process's output and finds its listen address.
type logBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
	sent bool
}

var listenRE = regexp.MustCompile(`msg="listening on [^"]*" addr=(\S+)`)

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if !l.sent {
		if m := listenRE.FindSubmatch(l.buf.Bytes()); m != nil {
			l.sent = true
			l.addr <- string(m[1])
		}
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// xserveProc is a running `xserve serve`.
type xserveProc struct {
	cmd     *exec.Cmd
	url     string
	addr    string
	log     *logBuffer
	exited  chan struct{}
	waitErr error
	// ready is the time from starting the process to /v2/health/ready.
	ready time.Duration
	start time.Time
}

// startXserve starts the binary on a port the kernel picks (127.0.0.1:0),
// reads the address from its "listening on" log line, and waits for
// /v2/health/ready.
func startXserve(t *testing.T, repo, cache string, extra ...string) *xserveProc {
	t.Helper()
	p := launchXserve(t, repo, cache, extra...)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := http.Get(p.url + "/v2/health/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("xserve not ready within 3 minutes (last: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.ready = time.Since(p.start)
	return p
}

// launchXserve starts the binary as startXserve does, but returns once it
// listens, ready or not.
func launchXserve(t *testing.T, repo, cache string, extra ...string) *xserveProc {
	t.Helper()
	args := append([]string{"serve", "--model-repo", repo, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--compile-cache", cache, "--poll-interval", "0"}, extra...)
	p := &xserveProc{log: &logBuffer{addr: make(chan string, 1)}, exited: make(chan struct{})}
	p.cmd = exec.Command(xserveBinary(t), args...)
	p.cmd.Dir = repoRoot(t)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("xserve output:\n%s", p.log)
		}
	})
	select {
	case p.addr = <-p.log.addr:
	case <-p.exited:
		t.Fatalf("xserve exited before listening: %v\n%s", p.waitErr, p.log)
	case <-time.After(3 * time.Minute):
		t.Fatalf("xserve did not listen within 3 minutes:\n%s", p.log)
	}
	p.url = "http://" + p.addr
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *xserveProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitExit(t)
}

func (p *xserveProc) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("xserve did not exit within a minute of SIGTERM")
	}
	if p.waitErr != nil {
		t.Fatalf("xserve exited with %v, want status 0\n%s", p.waitErr, p.log)
	}
}

// reply is one HTTP exchange's answer.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

func (r reply) String() string {
	b := r.body
	if len(b) > 400 {
		b = b[:400]
	}
	return fmt.Sprintf("%d %s", r.code, b)
}

// errorMessage is the "error" of a JSON error body.
func (r reply) errorMessage() string {
	var e struct{ Error string }
	json.Unmarshal(r.body, &e)
	return e.Error
}

// call sends one request (headers as name, value pairs) on a fresh
// connection and reads the raw answer.
func call(t *testing.T, method, url string, body []byte, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	tr := &http.Transport{DisableCompression: true, DisableKeepAlives: true}
	res, err := (&http.Client{Transport: tr, Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{res.StatusCode, res.Header, b}
}

// sample holds the example input and ONNX Runtime's output for it.
type sample struct {
	image, probs *tensor.Tensor
}

func loadSample(t *testing.T) sample {
	t.Helper()
	image, err := tensor.ReadNpyFile(sampleDir + "/image.npy")
	if err != nil {
		t.Fatal(err)
	}
	probs, err := tensor.ReadNpyFile(sampleDir + "/probs.onnxruntime.npy")
	if err != nil {
		t.Fatal(err)
	}
	return sample{image, probs}
}

// batch returns n images (the sample's rows, cycled) and their expected
// probabilities.
func (s sample) batch(n int) (*tensor.Tensor, []float64) {
	rows := s.image.Shape[0]
	rowLen := int64(len(s.image.Data)) / rows
	img := tensor.New(tensor.Float32, append([]int64{int64(n)}, s.image.Shape[1:]...)...)
	var want []float64
	classes := s.probs.Shape[1]
	for i := range int64(n) {
		r := i % rows
		copy(img.Data[i*rowLen:], s.image.Data[r*rowLen:(r+1)*rowLen])
		for c := range classes {
			want = append(want, s.probs.Float64At(r*classes+c))
		}
	}
	return img, want
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

func v1Request(model string, img *tensor.Tensor, dtype string, nested bool) []byte {
	return []byte(fmt.Sprintf(`{"model": %q, "id": "t1", "inputs": {"image": {"dtype": %q, "shape": %s, "data": %s}}}`,
		model, dtype, shapeJSON(img.Shape), jsonArray(img, nested)))
}

func shapeJSON(shape []int64) string {
	b, _ := json.Marshal(shape)
	return string(b)
}

// oipBinaryRequest is an OIP request with the image as binary data; the
// output comes back as binary data too.
func oipBinaryRequest(img *tensor.Tensor, declared int) ([]byte, string) {
	header := fmt.Sprintf(`{"inputs": [{"name": "image", "shape": %s, "datatype": "FP32", "parameters": {"binary_data_size": %d}}], "outputs": [{"name": "probs", "parameters": {"binary_data": true}}]}`,
		shapeJSON(img.Shape), declared)
	return append([]byte(header), img.Data...), strconv.Itoa(len(header))
}

// checkProbs compares output values with ONNX Runtime's within 1e-5.
func checkProbs(t *testing.T, got []float64, shape []int64, want []float64) {
	t.Helper()
	if len(shape) != 2 || shape[1] != 10 || int(shape[0]*10) != len(want) {
		t.Fatalf("output shape %v, want [%d 10]", shape, len(want)/10)
	}
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > 1e-5 || math.IsNaN(d) {
			t.Fatalf("element %d: got %v, onnxruntime %v", i, got[i], want[i])
		}
	}
}

// checkV1 checks a /v1/infer JSON answer.
func checkV1(t *testing.T, r reply, want []float64) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("got %s", r)
	}
	var resp struct {
		Model, Version, ID string
		Outputs            map[string]struct {
			DType string
			Shape []int64
			Data  []float64
		}
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	if resp.Model != "tinycnn" || resp.Version != "1" || resp.ID != "t1" {
		t.Errorf("model %q version %q id %q", resp.Model, resp.Version, resp.ID)
	}
	out := resp.Outputs["probs"]
	if out.DType != "float32" {
		t.Errorf("dtype %q", out.DType)
	}
	checkProbs(t, out.Data, out.Shape, want)
}

// checkOIPBinary checks a binary-extension answer.
func checkOIPBinary(t *testing.T, r reply, want []float64) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("got %s", r)
	}
	n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
	if err != nil || n > len(r.body) {
		t.Fatalf("Inference-Header-Content-Length %q for %d bytes", r.header.Get("Inference-Header-Content-Length"), len(r.body))
	}
	var resp struct {
		ModelName string `json:"model_name"`
		Outputs   []struct {
			Name       string
			Datatype   string
			Shape      []int64
			Parameters struct {
				BinaryDataSize int `json:"binary_data_size"`
			}
		}
	}
	if err := json.Unmarshal(r.body[:n], &resp); err != nil {
		t.Fatal(err)
	}
	o := resp.Outputs[0]
	raw := r.body[n:]
	if o.Name != "probs" || o.Datatype != "FP32" || o.Parameters.BinaryDataSize != len(raw) {
		t.Fatalf("output %+v with %d binary bytes", o, len(raw))
	}
	got, err := tensor.FromBytes(tensor.Float32, o.Shape, raw)
	if err != nil {
		t.Fatal(err)
	}
	checkProbs(t, got.Float64s(), o.Shape, want)
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

// firstAnswers sends the first requests of a fresh server, one per bucket 1,
// 2 and 4 (each compiles, or reads the compile cache), and checks them.
func firstAnswers(t *testing.T, p *xserveProc, s sample) {
	t.Helper()
	for _, n := range []int{1, 2, 4} {
		img, want := s.batch(n)
		checkV1(t, call(t, "POST", p.url+"/v1/infer", v1Request("tinycnn", img, "float32", n == 2)), want)
	}
}

// TestServeEndToEnd runs `xserve serve` on a temporary repository and sends
// it real HTTP requests: both protocols, JSON and binary, compression, bad
// requests (each followed by a good one), metrics, SIGTERM during a request,
// and a restart on the warm compile cache.
func TestServeEndToEnd(t *testing.T) {
	s := loadSample(t)
	repo, cache := tinycnnRepo(t), t.TempDir()
	limits := []string{"--max-body-bytes", "4MiB", "--max-decompressed-bytes", "32MiB", "--compress-min-bytes", "256"}
	p := startXserve(t, repo, cache, limits...)
	firstAnswers(t, p, s)
	cold, coldReady := time.Since(p.start), p.ready
	for _, want := range []string{"loaded PJRT plugin", "model version loaded", "compiled bucket", "listening on 127.0.0.1:"} {
		if !strings.Contains(p.log.String(), want) {
			t.Errorf("startup log lacks %q", want)
		}
	}

	img2, want2 := s.batch(2)
	good := func(t *testing.T) {
		t.Helper()
		checkV1(t, call(t, "POST", p.url+"/v1/infer", v1Request("tinycnn", img2, "float32", false)), want2)
	}

	t.Run("metadata lists the symbols", func(t *testing.T) {
		r := call(t, "GET", p.url+"/v2/models/tinycnn", nil)
		var md struct {
			Outputs []struct{ Shape []int64 }
			Symbols []struct {
				Name, Role, Pad string
				PadReason       string `json:"pad_reason"`
				Buckets         []int64
			}
		}
		if err := json.Unmarshal(r.body, &md); err != nil || r.code != http.StatusOK {
			t.Fatalf("%s: %v", r, err)
		}
		if len(md.Symbols) != 1 || md.Symbols[0].Name != "batch" || md.Symbols[0].Role != "batch" || md.Symbols[0].Pad != "pad" ||
			!strings.HasPrefix(md.Symbols[0].PadReason, "probe:") || len(md.Symbols[0].Buckets) == 0 {
			t.Errorf("symbols %+v", md.Symbols)
		}
	})

	t.Run("v2 JSON", func(t *testing.T) {
		body := fmt.Sprintf(`{"id": "a", "inputs": [{"name": "image", "shape": %s, "datatype": "FP32", "data": %s}], "outputs": [{"name": "probs", "parameters": {"binary_data": false}}]}`,
			shapeJSON(img2.Shape), jsonArray(img2, false))
		r := call(t, "POST", p.url+"/v2/models/tinycnn/infer", []byte(body), "Content-Type", "application/json")
		if r.code != 200 {
			t.Fatal(r)
		}
		var resp struct {
			ModelName    string `json:"model_name"`
			ModelVersion string `json:"model_version"`
			ID           string
			Outputs      []struct {
				Name, Datatype string
				Shape          []int64
				Data           []float64
			}
		}
		if err := json.Unmarshal(r.body, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.ModelName != "tinycnn" || resp.ModelVersion != "1" || resp.ID != "a" || resp.Outputs[0].Datatype != "FP32" {
			t.Errorf("response %+v", resp)
		}
		checkProbs(t, resp.Outputs[0].Data, resp.Outputs[0].Shape, want2)
	})
	t.Run("v2 binary", func(t *testing.T) {
		body, hl := oipBinaryRequest(img2, len(img2.Data))
		checkOIPBinary(t, call(t, "POST", p.url+"/v2/models/tinycnn/versions/1/infer", body, "Inference-Header-Content-Length", hl), want2)
	})
	t.Run("bad requests", func(t *testing.T) {
		img3 := tensor.New(tensor.Float32, 3, 32, 32)
		big := tensor.New(tensor.Float32, 100, 3, 32, 32)
		bigBody, bigHL := oipBinaryRequest(big, len(big.Data))
		good2, good2HL := oipBinaryRequest(img2, len(img2.Data))
		truncated, truncHL := oipBinaryRequest(img2, len(img2.Data))
		truncated = truncated[:len(truncated)-100]
		var bomb bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
		zeros := make([]byte, 1<<20)
		for range 64 { // 64 MiB of zeros, past --max-decompressed-bytes 32MiB
			zw.Write(zeros)
		}
		zw.Close()
		tests := []struct {
			name    string
			path    string
			body    []byte
			headers []string
			codes   []int
			want    string
		}{
			{"unknown model", "/v1/infer", v1Request("nope", img2, "float32", false), nil, []int{404}, `"nope"`},
			{"unknown model v2", "/v2/models/nope/infer", bigBody, []string{"Inference-Header-Content-Length", bigHL}, []int{404}, `"nope"`},
			{"wrong dtype", "/v1/infer", v1Request("tinycnn", img2, "float64", false), nil, []int{400}, "float32"},
			{"wrong rank", "/v1/infer", v1Request("tinycnn", img3, "float32", true), nil, []int{400}, "image"},
			{"batch outside the buckets", "/v2/models/tinycnn/infer", bigBody, []string{"Inference-Header-Content-Length", bigHL}, []int{400}, "bucket"},
			{"truncated binary", "/v2/models/tinycnn/infer", truncated, []string{"Inference-Header-Content-Length", truncHL}, []int{400}, "truncated"},
			{"invalid JSON", "/v1/infer", []byte(`{"model": "tinycnn", "inputs": {"image": {"dtype": "float32", "shape": [1, 3, 32, 32], "data": [1, 2,`), nil, []int{400}, "invalid JSON"},
			{"gzip bomb", "/v1/infer", bomb.Bytes(), []string{"Content-Encoding", "gzip"}, []int{413}, "more than the limit of 33554432 bytes"},
			{"body over the limit", "/v1/infer", make([]byte, 5<<20), nil, []int{413}, "larger than the limit of 4194304 bytes"},
			{"cross-site form-encoded unload", "/v2/repository/models/tinycnn/unload", []byte("a=b"), []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, []int{415}, "no form or multipart bodies"},
			{"unload without explicit model control", "/v2/repository/models/tinycnn/unload", []byte("{}"), []string{"Content-Type", "application/json"}, []int{400}, "model control mode is none"},
			{"../ in the model name", "/v1/infer", v1Request("../etc", img2, "float32", false), nil, []int{400, 404}, `"../etc"`},
			{"../ in the URL's model name", "/v2/models/..%2F..%2Fetc/infer", good2, []string{"Inference-Header-Content-Length", good2HL}, []int{400, 404}, "../../etc"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := call(t, "POST", p.url+tc.path, tc.body, tc.headers...)
				okCode := false
				for _, c := range tc.codes {
					okCode = okCode || r.code == c
				}
				if !okCode || !strings.Contains(r.errorMessage(), tc.want) {
					t.Errorf("got %s, want status %v and an error containing %q", r, tc.codes, tc.want)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("error Content-Type %q", ct)
				}
				t.Logf("%d %s", r.code, r.errorMessage())
				good(t) // the server keeps serving
			})
		}
	})
	t.Run("metrics", func(t *testing.T) {
		r := call(t, "GET", p.url+"/metrics", nil)
		if r.code != 200 {
			t.Fatal(r)
		}
		compiles := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(r.body))
		bucketRE := regexp.MustCompile(`^xserve_compilations_total\{.*bucket="([^"]+)".*\} (\S+)$`)
		for sc.Scan() {
			if m := bucketRE.FindStringSubmatch(sc.Text()); m != nil {
				compiles[m[1]] = m[2]
			}
		}
		for _, b := range []string{"batch=1", "batch=2", "batch=4"} {
			if compiles[b] != "1" {
				t.Errorf("xserve_compilations_total for %s is %q, want exactly 1 (all: %v)", b, compiles[b], compiles)
			}
		}
		if c, ok := compiles["batch=8"]; ok && c != "0" {
			t.Errorf("bucket batch=8 got no request but compiled %s times", c)
		}
		for _, want := range []string{
			`xserve_http_requests_total{code="200",method="POST",route="/v1/infer"}`,
			`xserve_http_requests_total{code="400",method="POST",route="/v1/infer"}`,
			`xserve_http_requests_total{code="200",method="POST",route="/v2/models/:model/infer"}`,
			`xserve_http_requests_total{code="413",method="POST",route="/v1/infer"}`,
			"xserve_requests_total{",
		} {
			if !bytes.Contains(r.body, []byte(want)) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
	t.Run("gzip and zstd", func(t *testing.T) {
		// Batch 8, so that the answer is big enough to be compressed.
		img8, want8 := s.batch(8)
		plain := v1Request("tinycnn", img8, "float32", false)
		for enc, compress := range map[string]func([]byte) []byte{"gzip": gzipBytes, "zstd": zstdBytes} {
			r := call(t, "POST", p.url+"/v1/infer", compress(plain), "Content-Encoding", enc, "Accept-Encoding", enc)
			if got := r.header.Get("Content-Encoding"); got != enc {
				t.Fatalf("%s: response Content-Encoding %q (%s)", enc, got, r)
			}
			var err error
			if enc == "gzip" {
				var zr *gzip.Reader
				if zr, err = gzip.NewReader(bytes.NewReader(r.body)); err == nil {
					r.body, err = io.ReadAll(zr)
				}
			} else {
				var zr *zstd.Decoder
				if zr, err = zstd.NewReader(nil); err == nil {
					r.body, err = zr.DecodeAll(r.body, nil)
					zr.Close()
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", enc, err)
			}
			checkV1(t, r, want8)
			body, hl := oipBinaryRequest(img8, len(img8.Data))
			r = call(t, "POST", p.url+"/v2/models/tinycnn/infer", compress(body), "Content-Encoding", enc, "Inference-Header-Content-Length", hl)
			checkOIPBinary(t, r, want8)
		}
		r := call(t, "GET", p.url+"/metrics", nil)
		if want := `bucket="batch=8",model="tinycnn",version="1"} 1`; !strings.Contains(string(r.body), want) {
			t.Errorf("after four batch-8 requests the metrics lack %s", want)
		}
	})
	t.Run("SIGTERM finishes the request in flight", func(t *testing.T) {
		// Send the headers and half the body, signal, then the rest: the
		// server must answer it and only then exit 0.
		body := v1Request("tinycnn", img2, "float32", false)
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", p.addr, len(body))
		conn.Write(body[:len(body)/2])
		// Signal only once the server took the connection off its accept
		// queue and is in the handler (the /metrics request counts itself):
		// closing a listener resets the connections still queued on it.
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(string(call(t, "GET", p.url+"/metrics", nil).body), "xserve_http_requests_in_flight 2\n") {
			if time.Now().After(deadline) {
				t.Fatal("the half-sent request never reached a handler")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		for !strings.Contains(p.log.String(), "shutting down") {
			if time.Now().After(deadline) {
				t.Fatal("no shutdown log after SIGTERM")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// The listener closes while our request is still unfinished.
		for {
			c, err := net.DialTimeout("tcp", p.addr, time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatal("xserve still accepts connections after SIGTERM")
			}
			time.Sleep(5 * time.Millisecond)
		}
		select {
		case <-p.exited:
			t.Fatalf("xserve exited with a request in flight: %v", p.waitErr)
		default:
		}
		if _, err := conn.Write(body[len(body)/2:]); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		checkV1(t, reply{res.StatusCode, res.Header, b}, want2)
		p.waitExit(t)
		if !strings.Contains(p.log.String(), "msg=stopped") {
			t.Errorf("no clean stop in the log")
		}
	})
	if t.Failed() {
		return
	}

	// Restart on the same compile cache.
	warm := startXserve(t, repo, cache, limits...)
	firstAnswers(t, warm, s)
	warmTotal, warmReady := time.Since(warm.start), warm.ready
	t.Logf("cold start (empty compile cache): ready in %v, first answers on buckets 1, 2, 4 after %v", coldReady.Round(time.Millisecond), cold.Round(time.Millisecond))
	t.Logf("warm start (same --compile-cache): ready in %v, first answers on buckets 1, 2, 4 after %v", warmReady.Round(time.Millisecond), warmTotal.Round(time.Millisecond))
	r := call(t, "GET", warm.url+"/metrics", nil)
	compiled, hits := 0.0, 0.0
	for _, line := range strings.Split(string(r.body), "\n") {
		if strings.HasPrefix(line, "xserve_compile_cache_total") || strings.HasPrefix(line, "xserve_compile_seconds_sum") {
			t.Logf("warm %s", line)
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(fields[1], 64)
		switch {
		case strings.HasPrefix(line, "xserve_compilations_total{"):
			compiled += v
		case strings.HasPrefix(line, `xserve_compile_cache_total{kind="executable",result="hit"}`):
			hits += v
		}
	}
	if compiled != 0 || hits != 3 {
		t.Errorf("after a restart on the same compile cache: %v compilations and %v executable cache hits, want 0 and 3", compiled, hits)
	}
	warm.stop(t)
}

// TestTritonClient runs python/tests/test_tritonclient.py, which uses the
// official tritonclient[http] package, against the real server.
func TestTritonClient(t *testing.T) {
	python := filepath.Join(repoRoot(t), ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("no %s: run make venv (it installs python/requirements.txt)", python)
	}
	if out, err := exec.Command(python, "-c", "import tritonclient.http, pytest, numpy").CombinedOutput(); err != nil {
		t.Fatalf("the venv lacks tritonclient[http] or pytest: run make venv\n%s", out)
	}
	p := startXserve(t, tinycnnRepo(t), t.TempDir())
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests/test_tritonclient.py")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "XSERVE_URL="+p.addr, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	p.stop(t)
}

func TestServeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "--model-repo DIR is required"},
		{[]string{"serve", "--model-repo", t.TempDir(), "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"--model-repo", t.TempDir(), "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"serve", "--model-repo", t.TempDir(), "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"serve", "--model-repo", "x", "--max-body-bytes", "lots"}, "want a positive size"},
		{[]string{"--model-repo", filepath.Join(t.TempDir(), "none")}, "modelrepo:"},
		{[]string{"serve", "--model-repo", t.TempDir(), "--tls-cert", "c.pem"}, "the TLS certificate and key go together"},
		{[]string{"serve", "--model-repo", t.TempDir(), "--tls-cert", "c.pem", "--tls-key", "k.pem"}, "TLS certificate c.pem and key k.pem"},
		{[]string{"serve", "--model-repo", t.TempDir(), "--auth-tokens-file", "/nonexistent/tokens"}, "auth: tokens file"},
		{[]string{"serve", "--model-repo", t.TempDir(), "--shutdown-timeout", "0s"}, "--shutdown-timeout must be positive, got 0s"},
		{[]string{"serve", "--model-repo", t.TempDir(), "--shutdown-delay", "-1s"}, "--shutdown-delay must be 0 or more, got -1s"},
		{[]string{"serve", "--model-repo", t.TempDir(), "--split-batches", "sometimes"}, `--split-batches: split batches "sometimes": want auto, off or always`},
		{[]string{"serve", "--model-repo", t.TempDir(), "--strict-readiness=maybe"}, `invalid boolean value "maybe" for -strict-readiness`},
	}
	for _, tc := range tests {
		_, _, err := xserve(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("xserve %s: err = %v, want it to contain %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	var n int64
	for in, want := range map[string]int64{"1048576": 1 << 20, "64MiB": 64 << 20, "2GiB": 2 << 30, "512K": 512 << 10, "10B": 10} {
		if err := (byteSize{&n}).Set(in); err != nil || n != want {
			t.Errorf("byteSize %q = %d, %v; want %d", in, n, err, want)
		}
	}
}
