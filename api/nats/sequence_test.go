package natsapi

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// sileroSeq is silero-vad with its streams and ONNX Runtime's outputs
// (make seq-streams).
const sileroSeq = "../../.cache/seq/silero_vad_16k"

// TestSequenceHeaders: a stream of chunks sent with the sequence headers
// to silero-vad (no config.yaml) gets, chunk by chunk, ONNX Runtime's
// outputs for it run with its state carried; a chunk of a sequence never
// started, or a bad header value, is a 400 saying so.
func TestSequenceHeaders(t *testing.T) {
	model, err := os.ReadFile(sileroSeq + "/1/model.onnx")
	if err != nil {
		t.Fatalf("%v: run make seq-streams (make test does)", err)
	}
	chunks, err := tensor.ReadNpyFile(sileroSeq + "/chunks.npy")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := tensor.ReadNpyFile(sileroSeq + "/ref.npy")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "silero", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "silero", "1", "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	repo, err := modelrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := serving.NewManager(context.Background(), serving.Options{Client: pjrtClient(t), Repository: repo, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	e := startNATS(t)
	startServer(t, e, m, Options{})
	nc := connect(t, e)
	subject := inferSubject(DefaultPrefix, "silero")
	body := func(c int) []byte {
		x := chunks.Float64s()[c*512 : (c+1)*512]
		data, _ := json.Marshal(x)
		return []byte(`{"inputs": {"input": {"dtype": "float32", "shape": [1, 512], "data": ` + string(data) + `}, "sr": {"dtype": "int64", "shape": [], "data": 16000}}}`)
	}
	const steps = 5
	for c := range steps {
		r := request(t, nc, subject, body(c), HeaderSequenceID, "stream-1", HeaderSequenceStart, map[bool]string{true: "true", false: "false"}[c == 0],
			HeaderSequenceEnd, map[bool]string{true: "true", false: "false"}[c == steps-1])
		if code := r.Header.Get(HeaderError); code != "" {
			t.Fatalf("chunk %d: error reply %s: %s", c, code, r.Data)
		}
		var resp struct {
			Outputs map[string]struct{ Data []float64 }
		}
		if err := json.Unmarshal(r.Data, &resp); err != nil {
			t.Fatalf("%v: %s", err, r.Data)
		}
		out := resp.Outputs["output"].Data
		if want := ref.Float64s()[c]; len(out) != 1 || math.Abs(out[0]-want) > 1e-5 {
			t.Fatalf("chunk %d: output %v, want ONNX Runtime's %v", c, out, want)
		}
		if _, ok := resp.Outputs["stateN"]; ok {
			t.Fatalf("chunk %d: the reply carries the state", c)
		}
	}
	for _, tc := range []struct {
		headers []string
		want    string
	}{
		{[]string{HeaderSequenceID, "stream-1"}, `sequence "stream-1" of model silero is not active`},
		{[]string{HeaderSequenceID, "x", HeaderSequenceStart, "yes"}, `Xserve-Sequence-Start "yes": want true or false`},
	} {
		code, msg := errorOf(t, request(t, nc, subject, body(0), tc.headers...))
		if code != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("headers %v: %d %q, want 400 saying %q", tc.headers, code, msg, tc.want)
		}
	}
}
