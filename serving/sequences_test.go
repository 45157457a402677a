package serving

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// sileroDir holds silero-vad's 16 kHz model as a repository version with
// no config.yaml, 64 streams of 100 chunks and ONNX Runtime's outputs for
// each stream run alone with its state carried (make seq-streams).
const sileroDir = "../.cache/seq/silero_vad_16k"

// sileroStreams returns the streams' chunks [streams, chunks, 512], ONNX
// Runtime's outputs [streams, chunks, 1], and the first stream's outputs
// with the state reset at every chunk. A missing file fails the test.
func sileroStreams(t testing.TB) (chunks, ref, nostate *tensor.Tensor) {
	t.Helper()
	if _, err := os.Stat(sileroDir + "/ref.npy"); err != nil {
		t.Fatalf("%v: run `make seq-streams` (make test does)", err)
	}
	return readNpy(t, sileroDir+"/chunks.npy"), readNpy(t, sileroDir+"/ref.npy"), readNpy(t, sileroDir+"/ref_nostate.npy")
}

// chunk returns chunk c of stream s as a [1, 512] tensor.
func chunk(chunks *tensor.Tensor, s, c int) *tensor.Tensor {
	n := int(chunks.Shape[2])
	x := tensor.New(tensor.Float32, 1, int64(n))
	off := (s*int(chunks.Shape[1]) + c) * n * 4
	copy(x.Data, chunks.Data[off:off+n*4])
	return x
}

func sileroStep(id string, x *tensor.Tensor, start, end bool) *InferRequest {
	return &InferRequest{
		Inputs:   map[string]*tensor.Tensor{"input": x, "sr": tensor.Scalar(tensor.Int64, 16000)},
		Sequence: &SequenceStep{ID: id, Start: start, End: end},
	}
}

func sileroRepo(t testing.TB) *testRepo {
	r := newRepo(t)
	r.add("silero", 1, sileroDir+"/1/model.onnx")
	return r
}

// TestSequencesSileroMatchesORT serves silero-vad (no config.yaml: the
// state, state <- stateN along axis 1, is recognised from the model) and
// runs 64 streams of 100 chunks at once, each a sequence: every stream's
// outputs equal ONNX Runtime's for that stream run alone with its state
// carried, and differ from what a lost state would give; steps of
// different sequences ran together, and a lone sequence's state stays on
// the device.
func TestSequencesSileroMatchesORT(t *testing.T) {
	chunks, ref, nostate := sileroStreams(t)
	m, logs := start(t, sileroRepo(t), nil)
	v := versionOf(m, "silero", 1)
	if v == nil || !v.stateful() {
		t.Fatalf("silero is not served as a stateful model:\n%s", logs)
	}
	if got := v.seqs.states; len(got) != 1 || v.plan.Inputs[got[0].in].Name != "state" || v.plan.Outputs[got[0].out].Name != "stateN" || got[0].batchAxis != 1 {
		t.Fatalf("state = %+v, want state <- stateN along axis 1", got)
	}
	streams, n := int(chunks.Shape[0]), int(chunks.Shape[1])
	got := tensor.New(tensor.Float32, ref.Shape...)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint(s + 1)
			for c := range n {
				resp, err := m.Infer(context.Background(), "silero", 0, sileroStep(id, chunk(chunks, s, c), c == 0, c == n-1))
				if err != nil {
					errs <- fmt.Errorf("stream %d chunk %d: %w", s, c, err)
					return
				}
				if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "output" {
					errs <- fmt.Errorf("stream %d chunk %d: outputs %v, want output only (the state stays on the server)", s, c, resp.Outputs)
					return
				}
				copy(got.Data[(s*n+c)*4:], resp.Outputs[0].Tensor.Data)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	worst := maxAbsDiff(got.Float64s(), ref.Float64s())
	t.Logf("%d streams x %d chunks: max |xserve - ONNX Runtime| = %.3g", streams, n, worst)
	if worst > 1e-5 {
		t.Errorf("max difference from ONNX Runtime %g > 1e-5", worst)
	}
	// The check can fail: the first stream without its state carried
	// differs from the reference by far more than the tolerance.
	if d := maxAbsDiff(ref.Float64s()[:n], nostate.Float64s()); d < 1e-4 {
		t.Fatalf("state-less outputs differ from the reference by %g only: the streams do not test the state", d)
	}
	// Steps of different sequences ran together.
	st, err := m.Statistics("silero", 1)
	if err != nil {
		t.Fatal(err)
	}
	inf, exe := st[0].InferenceCount, st[0].ExecutionCount
	t.Logf("%d steps in %d executions (%.1f steps per execution)", inf, exe, float64(inf)/float64(exe))
	if inf != uint64(streams*n) || exe >= inf {
		t.Errorf("%d steps ran in %d executions: want %d steps, several per execution", inf, exe, streams*n)
	}
	// Each batch was one program: the states gathered and scattered inside
	// the model's (engine.Model.BuildRows), no join or split of their own.
	if progs := v.seqs.programs.Load(); progs != exe {
		t.Errorf("%d device programs for %d executions: want one program per execution (states gathered and scattered in the model's program)", progs, exe)
	}
	if active := len(v.seqs.seqs); active != 0 {
		t.Errorf("%d sequences still active after every stream ended", active)
	}
	checkStateStaysOnDevice(t, m, chunks)
}

func maxAbsDiff(a, b []float64) float64 {
	worst := 0.0
	for i := range a {
		if d := math.Abs(a[i] - b[i]); d > worst || math.IsNaN(d) {
			worst = d
		}
	}
	return worst
}

// TestSequencesErrors: requests outside a live sequence get clear errors
// (ErrSequence, a 400), and an idle sequence expires.
func TestSequencesErrors(t *testing.T) {
	chunks, _, _ := sileroStreams(t)
	r := sileroRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	m, _ := start(t, r, func(o *Options) { o.MaxSequenceIdle = 300 * time.Millisecond; o.MaxSequences = 2 })
	ctx := context.Background()
	x := chunk(chunks, 0, 0)
	stateIn := map[string]*tensor.Tensor{"input": x, "sr": tensor.Scalar(tensor.Int64, 16000), "state": tensor.New(tensor.Float32, 2, 1, 128)}
	cases := []struct {
		name string
		req  *InferRequest
		want error
		msg  string
	}{
		{"unknown", sileroStep("nope", x, false, false), ErrSequence, `sequence "nope" of model silero is not active: it was never started`},
		{"state sent", &InferRequest{Inputs: stateIn, Sequence: &SequenceStep{ID: "s", Start: true}}, ErrInvalidInput, `input "state" is the state of model silero's sequences`},
		{"stateless model", &InferRequest{Inputs: map[string]*tensor.Tensor{"image": tensor.New(tensor.Float32, 1, 3, 32, 32)}, Sequence: &SequenceStep{ID: "1", Start: true}}, ErrSequence, "model tinycnn keeps no state"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			model := "silero"
			if tc.name == "stateless model" {
				model = "tinycnn"
			}
			_, err := m.Infer(ctx, model, 0, tc.req)
			if !errors.Is(err, tc.want) || !containsText(err, tc.msg) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.msg)
			}
		})
	}
	// The stateless form (state sent, no sequence) still works.
	if _, err := m.Infer(ctx, "silero", 0, &InferRequest{Inputs: stateIn}); err != nil {
		t.Fatalf("stateless request: %v", err)
	}
	// An ended sequence is gone; max_sequences bounds the live ones.
	for _, id := range []string{"e", "f"} {
		if _, err := m.Infer(ctx, "silero", 0, sileroStep(id, x, true, false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Infer(ctx, "silero", 0, sileroStep("g", x, true, false)); !errors.Is(err, ErrOverloaded) || !containsText(err, "max_sequences") {
		t.Fatalf("third sequence: err = %v, want ErrOverloaded naming max_sequences", err)
	}
	if _, err := m.Infer(ctx, "silero", 0, sileroStep("e", x, false, true)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Infer(ctx, "silero", 0, sileroStep("e", x, false, false)); !errors.Is(err, ErrSequence) {
		t.Fatalf("after its end: err = %v, want ErrSequence", err)
	}
	// Idle past max_sequence_idle: the next chunk is refused, saying why.
	time.Sleep(500 * time.Millisecond)
	_, err := m.Infer(ctx, "silero", 0, sileroStep("f", x, false, false))
	if !errors.Is(err, ErrSequence) || !containsText(err, "expired: idle for more than 300ms (max_sequence_idle)") {
		t.Fatalf("idle sequence: err = %v, want ErrSequence saying it expired", err)
	}
	v := versionOf(m, "silero", 1)
	eventually(t, "the expired sequences freed", func() bool {
		v.seqs.mu.Lock()
		defer v.seqs.mu.Unlock()
		return len(v.seqs.seqs) == 0
	})
}

func containsText(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestSequencesConfig: config.yaml's sequence section names the state and
// sets the limits; a state it names that the model lacks, or limits for a
// model without state, fail the load naming the key.
func TestSequencesConfig(t *testing.T) {
	chunks, ref, _ := sileroStreams(t)
	r := sileroRepo(t)
	r.config("silero", "sequence:\n  state:\n    - input: state\n      output: stateN\n  max_sequences: 1\n")
	r.add("badstate", 1, sileroDir+"/1/model.onnx")
	r.config("badstate", "sequence:\n  state:\n    - input: hidden\n      output: stateN\n")
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "sequence:\n  max_sequence_idle: 5s\n")
	r.add("silero_init", 1, sileroDir+"/1/model.onnx")
	r.config("silero_init", "sequence:\n  state:\n    - input: state\n      output: stateN\n      initial: 0.25\n")
	m, _ := start(t, r, nil)
	ctx := context.Background()
	checkInitialState(t, m, chunks, ref)
	resp, err := m.Infer(ctx, "silero", 0, sileroStep("a", chunk(chunks, 0, 0), true, false))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Outputs[0].Tensor.Float64s()[0], ref.Float64s()[0]; math.Abs(got-want) > 1e-5 {
		t.Errorf("first chunk: %v, want ONNX Runtime's %v", got, want)
	}
	if _, err := m.Infer(ctx, "silero", 0, sileroStep("b", chunk(chunks, 1, 0), true, false)); !errors.Is(err, ErrOverloaded) || !containsText(err, "holds 1 sequences, its max_sequences") {
		t.Fatalf("second sequence with max_sequences 1: err = %v", err)
	}
	for model, want := range map[string]string{
		"badstate": `sequence.state: [0]: the model has no input "hidden" (inputs: input, state, sr)`,
		"tinycnn":  "sequence: the model has no state",
	} {
		st, reason := state(m, model, 1)
		if st != StateUnavailable || !strings.Contains(reason, want) {
			t.Errorf("%s: %s %q, want UNAVAILABLE saying %q", model, st, reason, want)
		}
	}
}

// checkStateStaysOnDevice: after the first step, a step of a lone
// sequence copies only its inputs to the device and its output back, never
// the state.
func checkStateStaysOnDevice(t *testing.T, m *Manager, chunks *tensor.Tensor) {
	t.Helper()
	ctx := context.Background()
	if _, err := m.Infer(ctx, "silero", 0, sileroStep("a", chunk(chunks, 0, 0), true, false)); err != nil {
		t.Fatal(err)
	}
	client := testClient(t)
	before := client.Transfers()
	const steps = 10
	for c := 1; c <= steps; c++ {
		if _, err := m.Infer(ctx, "silero", 0, sileroStep("a", chunk(chunks, 0, c), false, false)); err != nil {
			t.Fatal(err)
		}
	}
	after := client.Transfers()
	guards := 0
	if v := versionOf(m, "silero", 1); v != nil {
		for _, b := range v.buckets {
			if b.exe[0] != nil {
				guards = len(b.exe[0].Program.Guards)
			}
		}
	}
	// Per step: input and sr up; output (and any guard) down.
	if up, down := after.ToDevice-before.ToDevice, after.ToHost-before.ToHost; up != 2*steps || down != uint64((1+guards)*steps) {
		t.Errorf("%d steps copied %d tensors to the device and %d to the host, want %d and %d: the state must stay on the device",
			steps, up, down, 2*steps, (1+guards)*steps)
	}
}

// checkInitialState: silero_init's state starts at config.yaml's initial
// value 0.25: four sequences of the first stream, run at once (their steps
// batched, padding rows at the initial value too), each equal ONNX
// Runtime's outputs with the state starting at 0.25, which differ from
// those starting at zeros.
func checkInitialState(t *testing.T, m *Manager, chunks, zeros *tensor.Tensor) {
	t.Helper()
	ref := readNpy(t, sileroDir+"/ref_initial.npy").Float64s()
	const n, seqs = 30, 4
	if d := maxAbsDiff(ref[:n], zeros.Float64s()[:n]); d < 1e-4 {
		t.Fatalf("the initial value changes the outputs by %g only: the check cannot fail", d)
	}
	got := make([][]float64, seqs)
	var wg sync.WaitGroup
	for q := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range n {
				resp, err := m.Infer(context.Background(), "silero_init", 0, sileroStep(fmt.Sprint("init-", q), chunk(chunks, 0, c), c == 0, c == n-1))
				if err != nil {
					t.Error(err)
					return
				}
				got[q] = append(got[q], resp.Outputs[0].Tensor.Float64s()[0])
			}
		}()
	}
	wg.Wait()
	for q := range seqs {
		if len(got[q]) != n {
			t.Fatalf("sequence %d: %d outputs, want %d", q, len(got[q]), n)
		}
		if d := maxAbsDiff(got[q], ref[:n]); d > 1e-5 {
			t.Errorf("sequence %d with initial 0.25: max |xserve - ONNX Runtime| = %g", q, d)
		}
	}
}
