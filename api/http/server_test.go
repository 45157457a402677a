package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"

	"github.com/xserve/xserve/tensor"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantStatus fails unless r has the code and its JSON error contains want.
func wantStatus(t *testing.T, r response, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %s, want %d", r, code)
	}
	if want == "" {
		return
	}
	var e struct{ Error string }
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON {\"error\": ...}: %v", r.body, err)
	}
	if !strings.Contains(e.Error, want) {
		t.Fatalf("error %q, want it to contain %q", e.Error, want)
	}
}

func TestV1InferJSONEveryDType(t *testing.T) {
	ts := startServer(t, Options{})
	req := `{"model": "echo", "version": "3", "id": "r1", "inputs": {
		"b":   {"dtype": "bool", "shape": [2], "data": [true, false]},
		"f16": {"dtype": "float16", "shape": [1, 2], "data": [[0.5, -1]]},
		"bf":  {"dtype": "bfloat16", "shape": [2], "data": [2, 3]},
		"f32": {"dtype": "float32", "shape": [2, 2], "data": [[1.5, 2], [3, "NaN"]]},
		"f64": {"dtype": "float64", "shape": [], "data": 0.1},
		"i8":  {"dtype": "int8", "shape": [1], "data": [-5]},
		"i64": {"dtype": "int64", "shape": [2], "data": [9007199254740993, -1]},
		"u8":  {"dtype": "uint8", "shape": [1], "data": [200]}
	}}`
	r := ts.do(t, "POST", "/v1/infer", []byte(req), "Content-Type", "application/json")
	if r.code != 200 {
		t.Fatal(r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got struct {
		Model, Version, ID string
		Outputs            map[string]struct {
			DType string
			Shape []int64
			Data  json.RawMessage
		}
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
	if got.Model != "echo" || got.Version != "3" || got.ID != "r1" || ts.backend.lastVer != 3 {
		t.Errorf("model %q version %q id %q (backend saw version %d)", got.Model, got.Version, got.ID, ts.backend.lastVer)
	}
	want := map[string]string{
		"b": `bool [2] [true,false]`, "f16": `float16 [1 2] [0.5,-1]`, "bf": `bfloat16 [2] [2,3]`,
		"f32": `float32 [2 2] [1.5,2,3,"NaN"]`, "f64": `float64 [] [0.1]`, "i8": `int8 [1] [-5]`,
		"i64": `int64 [2] [9007199254740993,-1]`, "u8": `uint8 [1] [200]`,
	}
	for name, w := range want {
		o := got.Outputs[name]
		if s := fmt.Sprintf("%s %v %s", o.DType, o.Shape, o.Data); s != w {
			t.Errorf("output %s: %s, want %s", name, s, w)
		}
	}
	// Outputs come in the backend's order.
	if i, j := bytes.Index(r.body, []byte(`"b":`)), bytes.Index(r.body, []byte(`"u8":`)); i < 0 || j < i {
		t.Errorf("outputs out of order: %s", r.body)
	}
}

// binaryBody builds a body of the binary tensor extension.
func binaryBody(t *testing.T, header any, parts ...[]byte) ([]byte, string) {
	h := mustJSON(t, header)
	body := append([]byte{}, h...)
	for _, p := range parts {
		body = append(body, p...)
	}
	return body, strconv.Itoa(len(h))
}

// splitResponse splits a binary-extension response.
func splitResponse(t *testing.T, r response) (map[string]any, []byte) {
	t.Helper()
	n, err := strconv.Atoi(r.header.Get(HeaderInferenceLength))
	if err != nil || n > len(r.body) {
		t.Fatalf("%s = %q for a %d-byte body", HeaderInferenceLength, r.header.Get(HeaderInferenceLength), len(r.body))
	}
	var h map[string]any
	if err := json.Unmarshal(r.body[:n], &h); err != nil {
		t.Fatalf("header %q: %v", r.body[:n], err)
	}
	return h, r.body[n:]
}

func TestV1InferBinary(t *testing.T) {
	ts := startServer(t, Options{})
	a := tensor.FromFloat32s([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b := tensor.FromInt64s([]int64{7, -8})
	body, hl := binaryBody(t, map[string]any{
		"model": "echo",
		"inputs": map[string]any{ // encoding/json sorts keys: a before b, as the parts
			"a": map[string]any{"dtype": "float32", "shape": []int{2, 3}, "parameters": map[string]any{"binary_data_size": 24}},
			"b": map[string]any{"dtype": "int64", "shape": []int{2}, "parameters": map[string]any{"binary_data_size": 16}},
		},
		"outputs":    []any{"a", map[string]any{"name": "b", "binary_data": false}},
		"parameters": map[string]any{"binary_data_output": true},
	}, a.Data, b.Data)
	r := ts.do(t, "POST", "/v1/infer", body, HeaderInferenceLength, hl)
	if r.code != 200 {
		t.Fatal(r)
	}
	h, rest := splitResponse(t, r)
	outs := h["outputs"].(map[string]any)
	oa := outs["a"].(map[string]any)
	if oa["parameters"].(map[string]any)["binary_data_size"].(float64) != 24 || !bytes.Equal(rest, a.Data) {
		t.Errorf("output a: %v, binary % x", oa, rest)
	}
	if ob := outs["b"].(map[string]any); fmt.Sprint(ob["data"]) != "[7 -8]" {
		t.Errorf("output b (binary_data false): %v", ob)
	}
	if got := ts.backend.last.Outputs; fmt.Sprint(got) != "[a b]" {
		t.Errorf("backend got outputs %v", got)
	}
}

func TestOIPInferJSONAndBinary(t *testing.T) {
	ts := startServer(t, Options{})
	x := tensor.FromFloat32s([]float32{0.5, 1.5, -2, 4}, 2, 2)
	t.Run("json", func(t *testing.T) {
		req := `{"id": "42", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [0.5, 1.5, -2, 4]}],
			"outputs": [{"name": "x", "parameters": {"binary_data": false}}]}`
		r := ts.do(t, "POST", "/v2/models/echo/versions/2/infer", []byte(req))
		if r.code != 200 {
			t.Fatal(r)
		}
		want := `{"model_name":"echo","model_version":"2","id":"42","outputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[0.5,1.5,-2,4]}]}`
		if string(r.body) != want {
			t.Errorf("got  %s\nwant %s", r.body, want)
		}
	})
	t.Run("binary in and out, as tritonclient sends it", func(t *testing.T) {
		body, hl := binaryBody(t, map[string]any{
			"inputs": []any{map[string]any{"name": "x", "shape": []int{2, 2}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 16}}},
			// no outputs: tritonclient then asks for all outputs in binary
			"parameters": map[string]any{"binary_data_output": true},
		}, x.Data)
		r := ts.do(t, "POST", "/v2/models/echo/infer", body, HeaderInferenceLength, hl, "Content-Type", "application/octet-stream")
		if r.code != 200 {
			t.Fatal(r)
		}
		h, rest := splitResponse(t, r)
		o := h["outputs"].([]any)[0].(map[string]any)
		if o["datatype"] != "FP32" || fmt.Sprint(o["shape"]) != "[2 2]" || !bytes.Equal(rest, x.Data) {
			t.Errorf("output %v, binary % x", o, rest)
		}
		if _, ok := h["id"]; ok {
			t.Errorf("response has an id the request did not give: %v", h)
		}
	})
	t.Run("priority and timeout", func(t *testing.T) {
		req := `{"parameters": {"priority": 2, "timeout": 5000000}, "inputs": [{"name": "x", "shape": [1], "datatype": "INT32", "data": [1]}]}`
		if r := ts.do(t, "POST", "/v2/models/echo/infer", []byte(req)); r.code != 200 {
			t.Fatal(r)
		}
		if p := ts.backend.last.Priority; p != 1 {
			t.Errorf("OIP priority 2 became %d, want 1 (serving counts from 0)", p)
		}
	})
}

func TestBadRequests(t *testing.T) {
	ts := startServer(t, Options{MaxTensorElements: 1000})
	x := tensor.FromFloat32s([]float32{1, 2, 3, 4})
	truncated, hl := binaryBody(t, map[string]any{
		"inputs": []any{map[string]any{"name": "x", "shape": []int{4}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 16}}},
	}, x.Data[:10])
	extra, hlExtra := binaryBody(t, map[string]any{
		"inputs": []any{map[string]any{"name": "x", "shape": []int{4}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 16}}},
	}, x.Data, []byte{1, 2})
	tests := []struct {
		name    string
		path    string
		body    string
		headers []string
		code    int
		want    string
	}{
		{"invalid JSON", "/v1/infer", `{"model": "echo", "inputs": {`, nil, 400, "invalid JSON"},
		{"syntax error offset", "/v2/models/echo/infer", `{"inputs": [}`, nil, 400, "invalid JSON in the request at byte 13"},
		{"unknown field", "/v1/infer", `{"model": "echo", "input": {}}`, nil, 400, `unknown field "input"`},
		{"no model", "/v1/infer", `{"inputs": {}}`, nil, 400, `names no "model"`},
		{"unknown output field", "/v1/infer", `{"model": "echo", "outputs": [{"nam": "y"}], "inputs": {}}`, nil, 400, `invalid JSON in an output: unknown field "nam"`},
		{"bad v1 version", "/v1/infer", `{"model": "echo", "version": -2, "inputs": {}}`, nil, 400, `model version "-2" is not a positive integer`},
		{"inputs not an object", "/v1/infer", `{"model": "echo", "inputs": [1]}`, nil, 400, `"inputs" must be an object`},
		{"no inputs", "/v2/models/echo/infer", `{}`, nil, 400, `no "inputs"`},
		{"unknown dtype", "/v1/infer", `{"model": "echo", "inputs": {"x": {"dtype": "float33", "shape": [1], "data": [1]}}}`, nil, 400, `unknown dtype "float33"`},
		{"shape mismatch", "/v1/infer", `{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [2, 2], "data": [[1, 2], [3]]}}}`, nil, 400, "at [1]: 1 element"},
		{"no shape", "/v1/infer", `{"model": "echo", "inputs": {"x": {"dtype": "float32", "data": [1]}}}`, nil, 400, "no shape"},
		{"shape of strings", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": ["a"], "datatype": "FP32", "data": [1]}]}`, nil, 400, "want an integer"},
		{"no data", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}`, nil, 400, "has no data"},
		{"duplicate input", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}, {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`, nil, 400, "given twice"},
		{"tensor over the element limit", "/v1/infer", `{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [100, 100], "data": [1]}}}`, nil, 413, "limit of 1000"},
		{"truncated binary", "/v2/models/echo/infer", string(truncated), []string{HeaderInferenceLength, hl}, 400, "binary_data_size is 16 but only 10 bytes"},
		{"binary left over", "/v2/models/echo/infer", string(extra), []string{HeaderInferenceLength, hlExtra}, 400, "18 bytes of binary data follow"},
		{"binary without header", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]}`, nil, 400, "no Inference-Header-Content-Length"},
		{"header length past the body", "/v2/models/echo/infer", `{}`, []string{HeaderInferenceLength, "99"}, 400, "the body has only 2 bytes"},
		{"shared memory without a size", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"shared_memory_region": "r"}}]}`, nil, 400, "shared_memory_region without parameters.shared_memory_byte_size"},
		{"unknown region", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4}}]}`, nil, 400, `input "x": shm: invalid shared-memory request: shared-memory region "r" is not registered`},
		{"shared memory on v1", "/v1/infer", `{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [1], "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4}}}}`, nil, 400, "shared memory is not supported here"},
		{"classification", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": [{"name": "y", "parameters": {"classification": 3}}]}`, nil, 400, "classification extension is not supported"},
		{"bad version", "/v2/models/echo/versions/x/infer", `{}`, nil, 400, `model version "x" is not a positive integer`},
		{"unsupported encoding", "/v1/infer", `{}`, []string{"Content-Encoding", "br"}, 415, `unsupported content encoding "br"`},
		{"corrupt gzip", "/v1/infer", `not gzip`, []string{"Content-Encoding", "gzip"}, 400, "not gzip data"},
		{"escaped slash in model name", "/v2/models/..%2Fetc/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`, nil, 404, `"../etc"`},
		{"dot-dot path", "/v2/models/../etc/infer", `{}`, nil, 404, "no route"},
		{"unknown route", "/v3/infer", `{}`, nil, 404, `no route POST "/v3/infer"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.do(t, "POST", tc.path, []byte(tc.body), tc.headers...)
			wantStatus(t, r, tc.code, tc.want)
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	// The server keeps serving.
	r := ts.do(t, "POST", "/v2/models/echo/infer", []byte(`{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`))
	wantStatus(t, r, 200, "")
	r = ts.do(t, "GET", "/v1/infer", nil)
	wantStatus(t, r, 405, "method GET is not allowed")
}

func TestErrorMapping(t *testing.T) {
	ts := startServer(t, Options{})
	tests := []struct {
		model string
		code  int
		want  string
	}{
		{"missing", 404, "model not found"},
		{"loading", 503, "not ready"},
		{"closed", 503, "closed"},
		{"busy", 429, "overloaded"},
		{"nobucket", 400, "largest bucket is 8"},
		{"badinput", 400, "model expects float32"},
		{"slow", 504, "deadline exceeded"},
		{"broken", 500, "internal error; the server's log has the cause"}, // "device exploded" is for the log only
	}
	body := `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			r := ts.do(t, "POST", "/v2/models/"+tc.model+"/infer", []byte(body))
			wantStatus(t, r, tc.code, tc.want)
			if tc.code == 429 && r.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			v1 := fmt.Sprintf(`{"model": %q, "inputs": {"x": {"dtype": "float32", "shape": [1], "data": [1]}}}`, tc.model)
			wantStatus(t, ts.do(t, "POST", "/v1/infer", []byte(v1)), tc.code, tc.want)
		})
	}
}

// TestOverloadRetryAfter: a full batching queue answers 429 with
// Retry-After in whole seconds, the batcher's RetryAfter rounded up (at
// least 1), on every inference route.
func TestOverloadRetryAfter(t *testing.T) {
	ts := startServer(t, Options{})
	for model, want := range map[string]string{"busy": "3", "busyfast": "1"} {
		t.Run(model, func(t *testing.T) {
			for _, req := range []struct{ path, body string }{
				{"/v2/models/" + model + "/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`},
				{"/v1/infer", fmt.Sprintf(`{"model": %q, "inputs": {"x": {"dtype": "float32", "shape": [1], "data": [1]}}}`, model)},
			} {
				r := ts.do(t, "POST", req.path, []byte(req.body))
				wantStatus(t, r, 429, "queue full")
				if got := r.header.Get("Retry-After"); got != want {
					t.Errorf("%s: Retry-After %q, want %q", req.path, got, want)
				}
			}
		})
	}
}

func TestCompression(t *testing.T) {
	ts := startServer(t, Options{})
	n := 600
	vals := make([]string, n)
	for i := range vals {
		vals[i] = strconv.Itoa(i % 7)
	}
	plain := []byte(`{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [` + strconv.Itoa(n) + `], "data": [` + strings.Join(vals, ",") + `]}}}`)
	compress := map[string]func([]byte) []byte{
		"gzip": func(b []byte) []byte {
			var buf bytes.Buffer
			w := gzip.NewWriter(&buf)
			w.Write(b)
			w.Close()
			return buf.Bytes()
		},
		"zstd": func(b []byte) []byte {
			enc, _ := zstd.NewWriter(nil)
			defer enc.Close()
			return enc.EncodeAll(b, nil)
		},
		"deflate": func(b []byte) []byte {
			var buf bytes.Buffer
			w := zlib.NewWriter(&buf)
			w.Write(b)
			w.Close()
			return buf.Bytes()
		},
	}
	decompress := map[string]func([]byte) ([]byte, error){
		"gzip": func(b []byte) ([]byte, error) {
			r, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, err
			}
			return io.ReadAll(r)
		},
		"zstd": func(b []byte) ([]byte, error) {
			d, _ := zstd.NewReader(nil)
			defer d.Close()
			return d.DecodeAll(b, nil)
		},
		"deflate": func(b []byte) ([]byte, error) {
			r, err := zlib.NewReader(bytes.NewReader(b))
			if err != nil {
				return nil, err
			}
			return io.ReadAll(r)
		},
	}
	want := ts.do(t, "POST", "/v1/infer", plain)
	if want.code != 200 || want.header.Get("Content-Encoding") != "" {
		t.Fatalf("uncompressed: %s, Content-Encoding %q", want, want.header.Get("Content-Encoding"))
	}
	for _, enc := range []string{"gzip", "zstd", "deflate"} {
		t.Run(enc, func(t *testing.T) {
			body := compress[enc](plain)
			r := ts.do(t, "POST", "/v1/infer", body, "Content-Encoding", enc, "Accept-Encoding", enc)
			if r.code != 200 {
				t.Fatal(r)
			}
			if got := r.header.Get("Content-Encoding"); got != enc {
				t.Fatalf("response Content-Encoding %q, want %q", got, enc)
			}
			if !strings.Contains(r.header.Get("Vary"), "Accept-Encoding") {
				t.Errorf("no Vary: Accept-Encoding")
			}
			got, err := decompress[enc](r.body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.body) {
				t.Errorf("decompressed response differs from the uncompressed one")
			}
		})
	}
	t.Run("prefers zstd", func(t *testing.T) {
		r := ts.do(t, "POST", "/v1/infer", plain, "Accept-Encoding", "gzip, deflate, zstd")
		if got := r.header.Get("Content-Encoding"); got != "zstd" {
			t.Errorf("Content-Encoding %q, want zstd", got)
		}
	})
	t.Run("small bodies stay plain", func(t *testing.T) {
		r := ts.do(t, "GET", "/v2", nil, "Accept-Encoding", "gzip")
		if r.code != 200 || r.header.Get("Content-Encoding") != "" {
			t.Errorf("GET /v2: %s, Content-Encoding %q", r, r.header.Get("Content-Encoding"))
		}
	})
	t.Run("binary response compressed", func(t *testing.T) {
		x := tensor.New(tensor.Float32, 1024)
		body, hl := binaryBody(t, map[string]any{
			"inputs":     []any{map[string]any{"name": "x", "shape": []int{1024}, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": 4096}}},
			"parameters": map[string]any{"binary_data_output": true},
		}, x.Data)
		r := ts.do(t, "POST", "/v2/models/echo/infer", compress["gzip"](body), HeaderInferenceLength, hl, "Content-Encoding", "gzip", "Accept-Encoding", "gzip")
		if r.code != 200 || r.header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s, Content-Encoding %q", r, r.header.Get("Content-Encoding"))
		}
		r.body, _ = decompress["gzip"](r.body)
		_, rest := splitResponse(t, r)
		if !bytes.Equal(rest, x.Data) {
			t.Errorf("binary output differs")
		}
	})
}

func TestLimits(t *testing.T) {
	ts := startServer(t, Options{MaxBodyBytes: 1 << 20, MaxDecompressedBytes: 2 << 20})
	t.Run("gzip bomb", func(t *testing.T) {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zeros := make([]byte, 1<<20)
		for range 16 { // 16 MiB of zeros in ~16 KiB
			w.Write(zeros)
		}
		w.Close()
		if buf.Len() > 1<<20 {
			t.Fatalf("bomb is %d bytes", buf.Len())
		}
		r := ts.do(t, "POST", "/v1/infer", buf.Bytes(), "Content-Encoding", "gzip")
		wantStatus(t, r, 413, "decompresses (Content-Encoding gzip) to more than the limit of 2097152 bytes")
	})
	t.Run("zstd bomb", func(t *testing.T) {
		enc, _ := zstd.NewWriter(nil)
		bomb := enc.EncodeAll(make([]byte, 16<<20), nil)
		enc.Close()
		r := ts.do(t, "POST", "/v1/infer", bomb, "Content-Encoding", "zstd")
		wantStatus(t, r, 413, "more than the limit of 2097152 bytes")
	})
	t.Run("body over the limit", func(t *testing.T) {
		r := ts.do(t, "POST", "/v1/infer", make([]byte, 2<<20))
		wantStatus(t, r, 413, "larger than the limit of 1048576 bytes (MaxBodyBytes)")
	})
	small := []byte(`{"model": "echo", "inputs": {"x": {"dtype": "int8", "shape": [1], "data": [1]}}}`)
	t.Run("chunked body", func(t *testing.T) {
		// An io.Reader of unknown length makes net/http send it chunked.
		req, _ := http.NewRequest("POST", ts.url+"/v1/infer", io.MultiReader(bytes.NewReader(small)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || req.ContentLength != 0 {
			t.Errorf("chunked request: %d (ContentLength %d)", res.StatusCode, req.ContentLength)
		}
		req, _ = http.NewRequest("POST", ts.url+"/v1/infer", io.MultiReader(bytes.NewReader(make([]byte, 3<<20))))
		res, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantStatus(t, response{code: res.StatusCode, body: b}, 413, "larger than the limit of 1048576 bytes")
	})
	t.Run("unread bodies do not break keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		junk := strings.Repeat("x", 100<<10)
		fmt.Fprintf(conn, "GET /v2/health/live HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(junk), junk)
		fmt.Fprintf(conn, "POST /v1/infer HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(small), small)
		br := bufio.NewReader(conn)
		for i, want := range []int{200, 200} {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != want {
				t.Fatalf("response %d: %d %s", i, res.StatusCode, b)
			}
		}
	})
	r := ts.do(t, "POST", "/v1/infer", small)
	wantStatus(t, r, 200, "")
}

func TestMetadataHealthAndRepository(t *testing.T) {
	ts := startServer(t, Options{Version: "1.2.3"})
	wantStatus(t, ts.do(t, "GET", "/v2/health/live", nil), 200, "")
	wantStatus(t, ts.do(t, "GET", "/v2/health/ready", nil), 200, "")

	r := ts.do(t, "GET", "/v2", nil)
	if r.code != 200 || string(r.body) != `{"extensions":["binary_tensor_data","system_shared_memory","model_repository","model_configuration","statistics"],"name":"xserve","version":"1.2.3"}` {
		t.Errorf("GET /v2: %s", r)
	}
	r = ts.do(t, "GET", "/v2/models/echo", nil)
	want := `{"name":"echo","versions":["1"],"platform":"onnx","inputs":[{"name":"x","datatype":"FP32","shape":[-1,3]}],"outputs":[{"name":"y","datatype":"INT64","shape":[-1]}]}`
	if r.code != 200 || string(r.body) != want {
		t.Errorf("model metadata: %s\nwant %s", r, want)
	}
	wantStatus(t, ts.do(t, "GET", "/v2/models/echo/versions/1", nil), 200, "")
	wantStatus(t, ts.do(t, "GET", "/v2/models/missing", nil), 404, "model not found")
	wantStatus(t, ts.do(t, "GET", "/v2/models/echo/ready", nil), 200, "")
	wantStatus(t, ts.do(t, "GET", "/v2/models/echo/versions/1/ready", nil), 200, "")
	wantStatus(t, ts.do(t, "GET", "/v2/models/missing/ready", nil), 404, "model not found")
	wantStatus(t, ts.do(t, "GET", "/v2/models/loading/ready", nil), 503, "not ready")

	r = ts.do(t, "POST", "/v2/repository/index", nil)
	want = `[{"name":"echo","version":"1","state":"READY","reason":""},{"name":"loading","version":"1","state":"LOADING","reason":""},{"name":"broken","version":"2","state":"UNAVAILABLE","reason":"bad file"}]`
	if r.code != 200 || string(r.body) != want {
		t.Errorf("index: %s", r)
	}
	r = ts.do(t, "POST", "/v2/repository/index", []byte(`{"ready": true}`))
	if r.code != 200 || string(r.body) != `[{"name":"echo","version":"1","state":"READY","reason":""}]` {
		t.Errorf("index of ready models: %s", r)
	}
	wantStatus(t, ts.do(t, "POST", "/v2/repository/models/echo/load", []byte(`{}`)), 200, "")
	wantStatus(t, ts.do(t, "POST", "/v2/repository/models/echo/unload", []byte(`{"parameters": {"unload_dependents": false}}`)), 200, "")
	wantStatus(t, ts.do(t, "POST", "/v2/repository/models/missing/load", nil), 404, "model not found")
	wantStatus(t, ts.do(t, "POST", "/v2/repository/models/echo/load", []byte(`{"parameters": {"config": "{}"}}`)), 400, "not supported")
	if fmt.Sprint(ts.backend.loaded, ts.backend.unloaded) != "[echo] [echo]" {
		t.Errorf("backend loaded %v, unloaded %v", ts.backend.loaded, ts.backend.unloaded)
	}
}

func TestMetrics(t *testing.T) {
	ts := startServer(t, Options{})
	ts.do(t, "POST", "/v2/models/echo/infer", []byte(`{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`))
	ts.do(t, "POST", "/v2/models/missing/infer", []byte(`{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`))
	ts.do(t, "GET", "/nowhere", nil)
	r := ts.do(t, "GET", "/metrics", nil)
	if r.code != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%s (%s)", r, r.header.Get("Content-Type"))
	}
	for _, want := range []string{
		"xserve_fake_total 7\n",
		`xserve_http_requests_total{code="200",method="POST",route="/v2/models/:model/infer"} 1`,
		`xserve_http_requests_total{code="404",method="POST",route="/v2/models/:model/infer"} 1`,
		`xserve_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`xserve_http_request_duration_seconds_count{method="POST",route="/v2/models/:model/infer"} 2`,
		`xserve_http_request_duration_seconds_bucket{method="POST",route="/v2/models/:model/infer",le="+Inf"} 2`,
		"xserve_http_requests_in_flight 1\n",
		"# TYPE go_goroutines gauge\ngo_goroutines ",
		"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %q:\n%s", want, r.body)
		}
	}
}

func TestShutdownFinishesInFlight(t *testing.T) {
	b := &echoBackend{block: make(chan struct{}), started: make(chan struct{})}
	s, err := New(b, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	if s.Addr() == nil {
		// Serve may not have run yet; wait for it.
		deadline := time.Now().Add(5 * time.Second)
		for s.Addr() == nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	type result struct {
		code int
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		res, err := http.Post("http://"+ln.Addr().String()+"/v1/infer", "application/json",
			strings.NewReader(`{"model": "echo", "inputs": {"x": {"dtype": "int32", "shape": [1], "data": [5]}}}`))
		if err != nil {
			got <- result{err: err}
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		got <- result{code: res.StatusCode, body: string(body)}
	}()
	<-b.started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// New connections are refused while the request runs.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after Shutdown")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(b.block)
	r := <-got
	if r.err != nil || r.code != 200 || !strings.Contains(r.body, `"data":[5]`) {
		t.Fatalf("in-flight request: %+v", r)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

func TestShutdownDeadline(t *testing.T) {
	b := &echoBackend{block: make(chan struct{}), started: make(chan struct{})}
	defer close(b.block)
	ts := startServerWith(t, b, Options{})
	go func() {
		res, err := http.Post(ts.url+"/v1/infer", "application/json",
			strings.NewReader(`{"model": "echo", "inputs": {"x": {"dtype": "int32", "shape": [1], "data": [5]}}}`))
		if err == nil {
			res.Body.Close()
		}
	}()
	<-b.started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	if ts.ctx.Err() == nil {
		t.Error("backend context not cancelled after the deadline")
	}
}

// TestShutdownClosesConnectionsWithoutRequest: a connection a client
// opened ahead of need, on which no request has started, does not hold
// Shutdown until its ReadTimeout (fasthttp counts it active); Shutdown
// closes it after shutdownConnGrace, while a request in flight on another
// connection is still answered.
func TestShutdownClosesConnectionsWithoutRequest(t *testing.T) {
	b := &echoBackend{block: make(chan struct{}), started: make(chan struct{})}
	ts := startServerWith(t, b, Options{ReadTimeout: 30 * time.Second})
	addr := strings.TrimPrefix(ts.url, "http://")
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	got := make(chan int, 1)
	go func() {
		res, err := http.Post(ts.url+"/v1/infer", "application/json",
			strings.NewReader(`{"model": "echo", "inputs": {"x": {"dtype": "int32", "shape": [1], "data": [5]}}}`))
		if err != nil {
			got <- 0
			return
		}
		res.Body.Close()
		got <- res.StatusCode
	}()
	<-b.started
	start := time.Now()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- ts.Shutdown(ctx)
	}()
	// The server closes the connection without a request: the read ends
	// with EOF (or a reset), not with the client's own deadline.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = idle.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection without a request was not closed by Shutdown within 5s: read: %v", err)
	}
	if d := time.Since(start); d < shutdownConnGrace {
		t.Errorf("closed %v after Shutdown began, before the grace of %v", d, shutdownConnGrace)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(b.block)
	if code := <-got; code != 200 {
		t.Fatalf("the request in flight: status %d, want 200", code)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Shutdown took %v (ReadTimeout 30s)", d)
	}
}

// TestShutdownDrains: from the moment Shutdown starts, /v2/health/ready
// answers 503 on a connection the listener still accepts, and a request
// that arrives then (one a client sent just before) is answered, with
// "Connection: close"; once no request has started for drainQuiet the
// listener closes.
func TestShutdownDrains(t *testing.T) {
	ts := startServer(t, Options{})
	v1 := []byte(`{"model": "echo", "inputs": {"x": {"dtype": "int32", "shape": [1], "data": [5]}}}`)
	if r := ts.do(t, "POST", "/v1/infer", v1); r.code != 200 {
		t.Fatalf("before Shutdown: %v", r)
	}
	shut := make(chan error, 1)
	start := time.Now()
	go func() { shut <- ts.Shutdown(context.Background()) }()
	for time.Since(start) < drainQuiet/2 {
		if r := ts.do(t, "GET", "/v2/health/ready", nil); r.code != 503 || !strings.Contains(string(r.body), "shutting down") {
			t.Fatalf("draining: /v2/health/ready %v, want 503", r)
		}
		res, err := http.Post(ts.url+"/v1/infer", "application/json", bytes.NewReader(v1))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || !res.Close {
			t.Fatalf("draining: a request got %s (close %v), want 200 and Connection: close", res.Status, res.Close)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://")); err == nil {
		t.Error("the listener still accepts after Shutdown")
	}
}
