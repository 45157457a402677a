package natsapi

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xserve/xserve/serving"
)

// echoBackend answers every request with its inputs as outputs.
type echoBackend struct{}

func (echoBackend) Infer(_ context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	resp := &serving.InferResponse{ID: req.ID, ModelName: model, ModelVersion: max(version, 1)}
	names := make([]string, 0, len(req.Inputs))
	for n := range req.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		resp.Outputs = append(resp.Outputs, serving.NamedTensor{Name: n, Tensor: req.Inputs[n]})
	}
	return resp, nil
}

func (echoBackend) Metadata(model string, version int64) (*serving.Metadata, error) {
	return &serving.Metadata{Name: model, Version: 1, Versions: []int64{1}}, nil
}

func (echoBackend) Readiness() serving.Readiness { return serving.Readiness{Ready: true} }

func (echoBackend) Status() []serving.ModelStatus {
	return []serving.ModelStatus{{Name: "echo", Version: 1, State: serving.StateReady}}
}

// parseHeaderBlock reads "Name: value" lines as NATS carries headers.
func parseHeaderBlock(block string) nats.Header {
	h := nats.Header{}
	for _, line := range strings.Split(block, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h[k] = append(h[k], v)
	}
	return h
}

// FuzzRequest runs the server's request path (headers, decompression,
// decoding, encoding the reply) on headers, subject model and body the
// fuzzer picks: it never panics, and every error maps to a status code
// through a sentinel (a 4xx for anything the client controls).
func FuzzRequest(f *testing.F) {
	e := startNATS(f)
	s := startServer(f, e, echoBackend{}, Options{MaxTensorElements: 1 << 16, MaxDecompressedBytes: 1 << 20})
	v1 := `{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [2], "data": [1, 2]}}}`
	oip := `{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}`
	f.Add("", "", []byte(v1))
	f.Add("echo", "Xserve-Protocol: v2\nXserve-Model-Version: 1\nAccept-Encoding: gzip\nXserve-Timeout: 5s", []byte(oip))
	f.Add("echo", "Xserve-Protocol: oip\nInference-Header-Content-Length: 10", []byte(oip))
	f.Add("", "Content-Encoding: zstd\nX-Request-Id: 7", []byte(v1))
	f.Add("", "xserve-timeout: -1s\nXSERVE-MODEL-VERSION: x", []byte(v1))
	f.Fuzz(func(t *testing.T, model, headers string, body []byte) {
		j := &job{model: model, header: parseHeaderBlock(headers), data: body, received: time.Now(), stats: s.statsFor(model)}
		reply, err := s.answer(j)
		if err != nil {
			if code := statusOf(err); code == http.StatusInternalServerError {
				t.Fatalf("error %q maps to 500", err)
			}
			return
		}
		if reply == nil || reply.Header.Get(HeaderModel) == "" {
			t.Fatalf("reply %+v without %s", reply, HeaderModel)
		}
	})
}
