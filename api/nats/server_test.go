package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// TestInferPayloads sends tinycnn requests in every payload form the HTTP
// API takes, over NATS request-reply, and checks the outputs against ONNX
// Runtime's.
func TestInferPayloads(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{CompressMinBytes: 64})
	nc := connect(t, e)
	smp := loadSample(t)
	subject := s.Subject("tinycnn")
	if subject != "xserve.v1.infer.tinycnn" {
		t.Fatalf("subject %q", subject)
	}
	img1, want1 := smp.batch(1, 0)
	img2, want2 := smp.batch(2, 1)
	img3, want3 := smp.batch(3, 2)
	bin3, hl3 := v1Binary(img3)
	oip := fmt.Sprintf(`{"id": "o1", "inputs": [{"name": "image", "shape": %s, "datatype": "FP32", "data": %s}]}`, shapeJSON(img2.Shape), jsonArray(img2, false))

	t.Run("v1 JSON nested", func(t *testing.T) {
		r := request(t, nc, subject, v1Body(img2, true), HeaderRequestID, "req-7")
		got, shape := v1Outputs(t, r)
		checkProbs(t, got, shape, want2)
		if r.Header.Get(HeaderRequestID) != "req-7" || r.Header.Get(HeaderModel) != "tinycnn" || r.Header.Get(HeaderModelVersion) != "1" {
			t.Errorf("reply headers %v", r.Header)
		}
		if r.Header.Get(HeaderReplica) != s.ID() || s.ID() == "" {
			t.Errorf("%s %q, server id %q", HeaderReplica, r.Header.Get(HeaderReplica), s.ID())
		}
	})
	t.Run("v1 JSON flat, version header", func(t *testing.T) {
		r := request(t, nc, subject, v1Body(img1, false), HeaderModelVersion, "1", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		got, shape := v1Outputs(t, r)
		checkProbs(t, got, shape, want1)
		if id := r.Header.Get(HeaderRequestID); id != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s %q, want the traceparent's trace id", HeaderRequestID, id)
		}
	})
	t.Run("v1 binary", func(t *testing.T) {
		r := request(t, nc, subject, bin3, HeaderInferenceLength, hl3)
		if r.Header.Get(HeaderInferenceLength) == "" || r.Header.Get(HeaderContentType) != "application/octet-stream" {
			t.Fatalf("binary reply headers %v", r.Header)
		}
		got, shape := v1Outputs(t, r)
		checkProbs(t, got, shape, want3)
	})
	t.Run("any-model subject", func(t *testing.T) {
		body := []byte(strings.Replace(string(v1Body(img1, false)), `{"id"`, `{"model": "tinycnn", "id"`, 1))
		got, shape := v1Outputs(t, request(t, nc, s.Subject(""), body))
		checkProbs(t, got, shape, want1)
	})
	t.Run("OIP JSON", func(t *testing.T) {
		r := request(t, nc, subject, []byte(oip), HeaderProtocol, "v2")
		var resp struct {
			ModelName string `json:"model_name"`
			ID        string
			Outputs   []struct {
				Name  string
				Shape []int64
				Data  []float64
			}
		}
		if err := json.Unmarshal(r.Data, &resp); err != nil || len(resp.Outputs) != 1 {
			t.Fatalf("%v: %s", err, trim(r.Data))
		}
		if resp.ModelName != "tinycnn" || resp.ID != "o1" {
			t.Errorf("reply %s", trim(r.Data))
		}
		checkProbs(t, resp.Outputs[0].Data, resp.Outputs[0].Shape, want2)
	})
	for _, enc := range []string{"gzip", "zstd"} {
		t.Run("request "+enc+", reply "+enc, func(t *testing.T) {
			body := v1Body(img2, false)
			if enc == "gzip" {
				body = gzipBytes(body)
			} else {
				body = zstdBytes(body)
			}
			r := request(t, nc, subject, body, HeaderContentEncoding, enc, HeaderAcceptEncoding, enc)
			if r.Header.Get(HeaderContentEncoding) != enc {
				t.Errorf("reply Content-Encoding %q, want %q", r.Header.Get(HeaderContentEncoding), enc)
			}
			got, shape := v1Outputs(t, r)
			checkProbs(t, got, shape, want2)
		})
	}
	t.Run("Client", func(t *testing.T) {
		c, err := NewClient(nc, ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, opts := range []InferOptions{{}, {JSON: true}, {Compression: "zstd", AcceptEncoding: "gzip", ID: "c-1"}, {Version: 1}} {
			res, err := c.Infer(context.Background(), "tinycnn", []serving.NamedTensor{{Name: "image", Tensor: img3}}, opts)
			if err != nil {
				t.Fatalf("%+v: %v", opts, err)
			}
			if len(res.Outputs) != 1 || res.Outputs[0].Name != "probs" || res.Replica != s.ID() || res.ModelVersion != 1 {
				t.Fatalf("%+v: result %+v", opts, res)
			}
			if opts.ID != "" && res.ID != opts.ID {
				t.Errorf("id %q, want %q", res.ID, opts.ID)
			}
			checkProbs(t, res.Outputs[0].Tensor.Float64s(), res.Outputs[0].Tensor.Shape, want3)
		}
	})
}

// TestErrorReplies sends bad requests: each gets an error reply with the
// status code and message HTTP gives for the same body, and the replica
// answers a good request right after.
func TestErrorReplies(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{MaxTensorElements: 1 << 20})
	base := httpServer(t, mgr)
	nc := connect(t, e)
	smp := loadSample(t)
	img, want := smp.batch(1, 0)
	good := v1Body(img, false)
	small := tensor.New(tensor.Float32, 1, 3, 16, 16)
	bin, hl := v1Binary(img)
	named := func(model string, body []byte) []byte {
		return []byte(strings.Replace(string(body), `{"id"`, fmt.Sprintf(`{"model": %q, "id"`, model), 1))
	}
	tests := []struct {
		name    string
		subject string // "" = tinycnn's
		body    []byte
		headers []string
		code    int
		want    string
		// http is the URL path giving the same answer over HTTP ("" = none
		// to compare).
		http string
	}{
		{"invalid JSON", "", []byte(`{"inputs": {`), nil, 400, "invalid JSON", ""},
		{"invalid JSON, with model", "", []byte(`{"model": "tinycnn", "inputs": {`), nil, 400, "invalid JSON", "/v1/infer"},
		{"data does not fit the shape", "", named("tinycnn", []byte(`{"id": "x", "inputs": {"image": {"dtype": "float32", "shape": [1, 3, 32, 32], "data": [1, 2, 3]}}}`)), nil, 400, "shape [1 3 32 32] needs 3072 elements", "/v1/infer"},
		{"wrong image size", "", named("tinycnn", v1Body(small, false)), nil, 400, "image", "/v1/infer"},
		{"wrong dtype", "", named("tinycnn", []byte(`{"id": "x", "inputs": {"image": {"dtype": "int64", "shape": [1, 3, 32, 32], "data": [`+strings.Repeat("1,", 3071)+`1]}}}`)), nil, 400, "int64", "/v1/infer"},
		{"unknown input", "", named("tinycnn", []byte(`{"id": "x", "inputs": {"picture": {"dtype": "float32", "shape": [1], "data": [1]}}}`)), nil, 400, "picture", "/v1/infer"},
		{"tensor over the element limit", "", named("tinycnn", []byte(`{"id": "x", "inputs": {"image": {"dtype": "float32", "shape": [4096, 3, 32, 32], "data": [1]}}}`)), nil, 413, "limit of 1048576", "/v1/infer"},
		{"corrupt gzip", "", []byte("not gzip at all"), []string{HeaderContentEncoding, "gzip"}, 400, "not gzip data", "/v1/infer"},
		{"corrupt zstd", "", append([]byte{0x28, 0xb5, 0x2f, 0xfd}, []byte("garbage garbage garbage")...), []string{HeaderContentEncoding, "zstd"}, 400, "zstd", "/v1/infer"},
		{"truncated gzip", "", gzipBytes(good)[:40], []string{HeaderContentEncoding, "gzip"}, 400, "corrupt compressed body", ""},
		{"unsupported encoding", "", good, []string{HeaderContentEncoding, "br"}, 415, `unsupported content encoding "br"`, "/v1/infer"},
		{"truncated binary", "", bin[:len(bin)-10], []string{HeaderInferenceLength, hl}, 400, "binary_data_size is 12288 but only 12278 bytes", ""},
		{"unknown model", "xserve.v1.infer", named("nosuch", good), nil, 404, `no model "nosuch"`, "/v1/infer"},
		{"bad model name", "xserve.v1.infer", named("../etc", good), nil, 404, `"../etc"`, "/v1/infer"},
		{"model differs from the subject", "", named("other", good), nil, 400, `names model "other" but was sent to model "tinycnn"`, ""},
		{"no model on the any-model subject", "xserve.v1.infer", good, nil, 400, `names no "model"`, ""},
		{"bad version header", "", good, []string{HeaderModelVersion, "two"}, 400, `model version "two" is not a positive integer`, ""},
		{"unknown version", "", good, []string{HeaderModelVersion, "9"}, 404, "has no version 9", ""},
		{"bad timeout header", "", good, []string{HeaderTimeout, "soon"}, 400, "Xserve-Timeout", ""},
		{"unknown protocol", "", good, []string{HeaderProtocol, "v3"}, 400, `Xserve-Protocol "v3"`, ""},
		{"OIP on the any-model subject", "xserve.v1.infer", good, []string{HeaderProtocol, "v2"}, 400, "needs the model in the subject", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			subject := tc.subject
			if subject == "" {
				subject = s.Subject("tinycnn")
			}
			r := request(t, nc, subject, tc.body, append([]string{HeaderRequestID, "bad-1"}, tc.headers...)...)
			code, msg := errorOf(t, r)
			if code != tc.code || !strings.Contains(msg, tc.want) {
				t.Errorf("got %d %q, want %d containing %q", code, msg, tc.code, tc.want)
			}
			if r.Header.Get(HeaderRequestID) != "bad-1" {
				t.Errorf("error reply without the request id: %v", r.Header)
			}
			if tc.http != "" {
				hcode, hmsg := httpPost(t, base+tc.http, tc.body, tc.headers...)
				if hcode != code || hmsg != msg {
					t.Errorf("HTTP answers %d %q, NATS %d %q", hcode, hmsg, code, msg)
				}
			}
			// The replica keeps serving.
			got, shape := v1Outputs(t, request(t, nc, s.Subject("tinycnn"), good))
			checkProbs(t, got, shape, want)
		})
	}

	// A model no replica serves has no subscriber on its subject: the NATS
	// server answers at once.
	c, err := NewClient(nc, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Infer(context.Background(), "nosuch", []serving.NamedTensor{{Name: "image", Tensor: img}}, InferOptions{})
	if !errors.Is(err, ErrNoResponders) {
		t.Errorf("unknown model's subject: %v, want ErrNoResponders", err)
	}
	var re *ReplyError
	_, err = c.Infer(context.Background(), "tinycnn", []serving.NamedTensor{{Name: "image", Tensor: small}}, InferOptions{})
	if !errors.As(err, &re) || re.Code != 400 || re.Temporary() {
		t.Errorf("wrong shape via Client: %v", err)
	}
	st := s.Stats()["tinycnn"]
	if st.Errors == 0 || st.Requests <= st.Errors {
		t.Errorf("stats %+v", st)
	}
}
