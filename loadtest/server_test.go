package loadtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// fakeServer emulates xserve's inference endpoints on 127.0.0.1:0: it
// decodes the request in whichever protocol it came, sleeps Delay, and
// answers with one output "probs" of shape [batch, 10] in the same protocol.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	// Set before the first request.
	delay     time.Duration
	failEvery int64 // every failEvery-th request gets a 503
	badShape  bool  // answer [batch, 9] data for a [batch, 10] shape

	count    atomic.Int64 // requests received
	failed   atomic.Int64 // 503s sent
	newConns atomic.Int64 // connections accepted

	mu     sync.Mutex
	inputs map[string][]float64 // the last request's inputs, decoded
	shapes map[string][]int64
	errs   []string // protocol errors seen (answered with 400)
}

func newFakeServer(t *testing.T, delay time.Duration) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, delay: delay}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.newConns.Add(1)
		}
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) URL() string { return f.srv.URL }

func (f *fakeServer) protocolErrors() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

func (f *fakeServer) lastInputs() (map[string][]float64, map[string][]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inputs, f.shapes
}

func (f *fakeServer) fail(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.errs = append(f.errs, msg)
	f.mu.Unlock()
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	n := f.count.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.fail(w, "read body: %v", err)
		return
	}
	switch r.Header.Get("Content-Encoding") {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			f.fail(w, "gzip: %v", err)
			return
		}
	case "zstd":
		zr, err := zstd.NewReader(nil)
		if err == nil {
			body, err = zr.DecodeAll(body, nil)
			zr.Close()
		}
		if err != nil {
			f.fail(w, "zstd: %v", err)
			return
		}
	}
	var proto Protocol
	switch {
	case r.URL.Path == "/v1/infer":
		proto = ProtocolV1JSON
	case strings.HasPrefix(r.URL.Path, "/v2/models/m/") && strings.HasSuffix(r.URL.Path, "/infer"):
		proto = ProtocolV2JSON
		if r.Header.Get(HeaderContentLength) != "" {
			proto = ProtocolV2Binary
		}
	default:
		f.fail(w, "unexpected path %s", r.URL.Path)
		return
	}
	inputs, shapes, err := decodeRequest(proto, body, r.Header.Get(HeaderContentLength))
	if err != nil {
		f.fail(w, "%s: %v", proto, err)
		return
	}
	f.mu.Lock()
	f.inputs, f.shapes = inputs, shapes
	f.mu.Unlock()

	time.Sleep(f.delay)
	if f.failEvery > 0 && n%f.failEvery == 0 {
		f.failed.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"overloaded"}`))
		return
	}
	batch := int64(1)
	for _, s := range shapes {
		if len(s) > 0 {
			batch = s[0]
		}
	}
	resp, headerLen := encodeResponse(proto, batch, f.badShape)
	if headerLen >= 0 {
		w.Header().Set(HeaderContentLength, strconv.Itoa(headerLen))
	}
	switch r.Header.Get("Accept-Encoding") {
	case "gzip":
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(resp)
		zw.Close()
		resp = b.Bytes()
		w.Header().Set("Content-Encoding", "gzip")
	case "zstd":
		zw, _ := zstd.NewWriter(nil)
		resp = zw.EncodeAll(resp, nil)
		zw.Close()
		w.Header().Set("Content-Encoding", "zstd")
	}
	w.Write(resp)
}

type jsonTensor struct {
	Name       string    `json:"name"`
	DType      string    `json:"dtype"`
	DataType   string    `json:"datatype"`
	Shape      []int64   `json:"shape"`
	Data       []float64 `json:"data"`
	Parameters struct {
		BinaryDataSize *int `json:"binary_data_size"`
	} `json:"parameters"`
}

// decodeRequest decodes a request as a server would, strictly.
func decodeRequest(proto Protocol, body []byte, headerLen string) (map[string][]float64, map[string][]int64, error) {
	inputs, shapes := map[string][]float64{}, map[string][]int64{}
	strict := func(b []byte, v any) error {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	switch proto {
	case ProtocolV1JSON:
		var req struct {
			Model  string                `json:"model"`
			Inputs map[string]jsonTensor `json:"inputs"`
		}
		if err := strict(body, &req); err != nil {
			return nil, nil, err
		}
		if req.Model != "m" {
			return nil, nil, fmt.Errorf("model %q", req.Model)
		}
		for name, t := range req.Inputs {
			if t.DType != "float32" {
				return nil, nil, fmt.Errorf("dtype %q", t.DType)
			}
			inputs[name], shapes[name] = t.Data, t.Shape
		}
	case ProtocolV2JSON:
		var req struct {
			Inputs []jsonTensor `json:"inputs"`
		}
		if err := strict(body, &req); err != nil {
			return nil, nil, err
		}
		for _, t := range req.Inputs {
			if t.DataType != "FP32" {
				return nil, nil, fmt.Errorf("datatype %q", t.DataType)
			}
			inputs[t.Name], shapes[t.Name] = t.Data, t.Shape
		}
	case ProtocolV2Binary:
		n, err := strconv.Atoi(headerLen)
		if err != nil || n > len(body) {
			return nil, nil, fmt.Errorf("header length %q for %d bytes", headerLen, len(body))
		}
		var req struct {
			Inputs     []jsonTensor `json:"inputs"`
			Parameters struct {
				BinaryDataOutput bool `json:"binary_data_output"`
			} `json:"parameters"`
		}
		if err := strict(body[:n], &req); err != nil {
			return nil, nil, err
		}
		if !req.Parameters.BinaryDataOutput {
			return nil, nil, fmt.Errorf("binary_data_output not asked for")
		}
		data := body[n:]
		for _, t := range req.Inputs {
			if t.DataType != "FP32" || t.Parameters.BinaryDataSize == nil {
				return nil, nil, fmt.Errorf("input %s: datatype %q, binary_data_size %v", t.Name, t.DataType, t.Parameters.BinaryDataSize)
			}
			size := *t.Parameters.BinaryDataSize
			if size > len(data) || size%4 != 0 {
				return nil, nil, fmt.Errorf("input %s: binary_data_size %d of %d bytes left", t.Name, size, len(data))
			}
			vals := make([]float64, size/4)
			for i := range vals {
				vals[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
			}
			data = data[size:]
			inputs[t.Name], shapes[t.Name] = vals, t.Shape
		}
		if len(data) != 0 {
			return nil, nil, fmt.Errorf("%d bytes left over", len(data))
		}
	}
	for name, v := range inputs {
		if want := numel(shapes[name]); int64(len(v)) != want {
			return nil, nil, fmt.Errorf("input %s: %d values for shape %v", name, len(v), shapes[name])
		}
	}
	return inputs, shapes, nil
}

func numel(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// encodeResponse answers with "probs" [batch, 10] (data for [batch, 9] when
// bad); headerLen is -1 except for the binary protocol.
func encodeResponse(proto Protocol, batch int64, bad bool) ([]byte, int) {
	cols := int64(10)
	if bad {
		cols = 9
	}
	vals := make([]float32, batch*cols)
	for i := range vals {
		vals[i] = 0.1
	}
	shape := []int64{batch, 10}
	switch proto {
	case ProtocolV1JSON:
		b, _ := json.Marshal(map[string]any{"model": "m", "outputs": map[string]any{
			"probs": map[string]any{"dtype": "float32", "shape": shape, "data": vals}}})
		return b, -1
	case ProtocolV2JSON:
		b, _ := json.Marshal(map[string]any{"model_name": "m", "outputs": []any{
			map[string]any{"name": "probs", "datatype": "FP32", "shape": shape, "data": vals}}})
		return b, -1
	}
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	h, _ := json.Marshal(map[string]any{"model_name": "m", "outputs": []any{
		map[string]any{"name": "probs", "datatype": "FP32", "shape": shape, "parameters": map[string]any{"binary_data_size": len(raw)}}}})
	return append(h, raw...), len(h)
}

// newTarget returns an HTTP target for f, closed at the end of the test.
func newTarget(t *testing.T, f *fakeServer, opts HTTPOptions) *HTTPTarget {
	t.Helper()
	opts.URL = f.URL()
	if opts.Model == "" {
		opts.Model = "m"
	}
	tg, err := NewHTTPTarget(context.Background(), opts)
	if err != nil {
		t.Fatalf("NewHTTPTarget: %v", err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}
