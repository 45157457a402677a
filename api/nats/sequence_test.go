package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	chunks, ref := sileroData(t)
	m := sileroManager(t)
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

// sileroData returns the streams' chunks [streams, chunks, 512] and ONNX
// Runtime's outputs [streams, chunks, 1] (make seq-streams).
func sileroData(t *testing.T) (chunks, ref *tensor.Tensor) {
	t.Helper()
	chunks, err := tensor.ReadNpyFile(sileroSeq + "/chunks.npy")
	if err != nil {
		t.Fatalf("%v: run make seq-streams (make test does)", err)
	}
	if ref, err = tensor.ReadNpyFile(sileroSeq + "/ref.npy"); err != nil {
		t.Fatal(err)
	}
	return chunks, ref
}

// sileroManager serves silero-vad (no config.yaml) from a new repository.
func sileroManager(t *testing.T) *serving.Manager {
	t.Helper()
	model, err := os.ReadFile(sileroSeq + "/1/model.onnx")
	if err != nil {
		t.Fatalf("%v: run make seq-streams (make test does)", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "silero", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "silero", "1", "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	return repoManager(t, dir)
}

// repoManager serves the model repository in dir, shut down at the end of
// the test.
func repoManager(t *testing.T, dir string) *serving.Manager {
	t.Helper()
	repo, err := modelrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := serving.NewManager(context.Background(), serving.Options{Client: pjrtClient(t), Repository: repo, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

// TestSequencesStickToTheirReplica: two replicas of silero-vad in one
// queue group; 16 streams of 20 chunks sent at once through Client, each a
// sequence: every step reaches the replica that holds its sequence (every
// output equals ONNX Runtime's for the stream run alone with its state
// carried), and the streams' first steps spread over both replicas. A
// later step sent to the other replica's subject is refused there (it does
// not hold the sequence), and once a replica is gone, the next step of a
// sequence it held fails with ErrSequenceLost instead of starting over.
func TestSequencesStickToTheirReplica(t *testing.T) {
	chunks, ref := sileroData(t)
	e := startNATS(t)
	servers := []*Server{startServer(t, e, sileroManager(t), Options{}), startServer(t, e, sileroManager(t), Options{})}
	homes := map[string]int{}
	for i, s := range servers {
		homes[sequenceSubject(DefaultPrefix, s.Home(), "silero")] = i
	}
	c, err := NewClient(connect(t, e), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const streams, steps = 16, 20
	n := int(chunks.Shape[1])
	input := func(s, k int) []serving.NamedTensor {
		x := tensor.New(tensor.Float32, 1, 512)
		copy(x.Data, chunks.Data[(s*n+k)*512*4:(s*n+k+1)*512*4])
		return []serving.NamedTensor{{Name: "input", Tensor: x}, {Name: "sr", Tensor: tensor.Scalar(tensor.Int64, 16000)}}
	}
	holder := make([]int, streams)
	errs := make(chan error, streams)
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runStream(c, s, steps, input, ref.Float64s()[s*n:], func(subject string) { holder[s] = homes[subject] })
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	count := [2]int{}
	for _, h := range holder {
		count[h]++
	}
	t.Logf("streams held by replica 0: %d, replica 1: %d", count[0], count[1])
	if count[0] == 0 || count[1] == 0 {
		t.Errorf("all %d streams were held by one replica (%v): the test did not exercise two", streams, count)
	}
	// A started sequence's step sent to the other replica: not active there.
	ctx := context.Background()
	start := &serving.SequenceStep{ID: "moved", Start: true}
	if _, err := c.Infer(ctx, "silero", input(0, 0), InferOptions{Sequence: start}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	home := c.sticky["silero\x00moved"]
	c.mu.Unlock()
	other := servers[1-homes[home]]
	body := []byte(`{"inputs": {"input": {"dtype": "float32", "shape": [1, 512], "data": [` + strings.Repeat("0,", 511) + `0]}, "sr": {"dtype": "int64", "shape": [], "data": 16000}}}`)
	code, text := errorOf(t, request(t, connect(t, e), sequenceSubject(DefaultPrefix, other.Home(), "silero"), body, HeaderSequenceID, "moved"))
	if code != 400 || !strings.Contains(text, "not active") {
		t.Errorf("a step on the other replica: %d %q, want 400 not active", code, text)
	}
	// The holding replica goes: the sequence is lost, and the client says so.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	servers[homes[home]].Shutdown(sctx)
	_, err = c.Infer(ctx, "silero", input(0, 1), InferOptions{Sequence: &serving.SequenceStep{ID: "moved"}})
	if !errors.Is(err, ErrSequenceLost) || !strings.Contains(err.Error(), "start it again") {
		t.Errorf("a step after its replica went: %v, want ErrSequenceLost", err)
	}
}

// runStream sends steps chunks of stream s as one sequence and checks each
// output against want; held is told the subject of the replica holding it.
func runStream(c *Client, s, steps int, input func(s, k int) []serving.NamedTensor, want []float64, held func(string)) error {
	id := fmt.Sprintf("stream-%d", s)
	key := "silero\x00" + id
	first := ""
	for k := range steps {
		step := &serving.SequenceStep{ID: id, Start: k == 0, End: k == steps-1}
		r, err := c.Infer(context.Background(), "silero", input(s, k), InferOptions{Sequence: step})
		if err != nil {
			return fmt.Errorf("stream %d chunk %d: %w", s, k, err)
		}
		got := r.Outputs[0].Tensor.Float64s()
		if len(got) != 1 || math.Abs(got[0]-want[k]) > 1e-5 {
			return fmt.Errorf("stream %d chunk %d: output %v, want ONNX Runtime's %v", s, k, got, want[k])
		}
		c.mu.Lock()
		at := c.sticky[key]
		c.mu.Unlock()
		switch {
		case k == 0:
			first = at
			held(at)
		case k < steps-1 && at != first:
			return fmt.Errorf("stream %d chunk %d: held at %q, then at %q", s, k, first, at)
		}
	}
	return nil
}
