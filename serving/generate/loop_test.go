package generate

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/modelrepo"
)

// TestCancelFreesSlot: a sequence whose caller goes away (its stream
// closed, or its context cancelled) ends at the next step boundary and
// gives its slot back, while the others go on.
func TestCancelFreesSlot(t *testing.T) {
	r := loadRefs(t)
	m := newModel(t, "llama-pt2", testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	long := Request{Prompt: r.Prompts[0], MaxTokens: 200}
	a, err := m.Generate(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := m.Generate(context.Background(), Request{Prompt: r.Prompts[1], MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	var first []int64
	for _, s := range []*Stream{a, b, keep} {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev.Token)
	}
	if n := m.SlotsInUse(); n != 3 {
		t.Errorf("%d slots in use, want 3", n)
	}
	a.Close()
	cancel()
	for _, s := range []*Stream{a, b} {
		toks, end := collect(t, s)
		if end.Reason != FinishCancelled || end.Generated >= 200 {
			t.Errorf("ended %s after %d tokens, want cancelled before 200", end.Reason, end.Generated)
		}
		_ = toks
	}
	toks, end := collect(t, keep)
	toks = append(first[2:], toks...)
	if end.Reason != FinishLength || len(toks) != 100 {
		t.Errorf("the other sequence ended %s after %d tokens, want length after 100", end.Reason, len(toks))
	}
	if !slices.Equal(toks, loadRefs(t).Models["llama"].Tokens[1][:100]) {
		t.Error("the other sequence's tokens changed when its neighbours left")
	}
	eventually(t, "slots free", func() bool { return m.SlotsInUse() == 0 })
	if n := m.Stats().Ended(FinishCancelled); n != 2 {
		t.Errorf("%d sequences ended cancelled, want 2", n)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRequestLimits: max_tokens, stop ids, a deadline, a full slot, and
// prompts the model cannot take.
func TestRequestLimits(t *testing.T) {
	r := loadRefs(t)
	cfg := testConfig()
	cfg.MaxQueue = 2
	m := newModel(t, "qwen2-onnx", cfg)
	want := r.Models["qwen2"].Tokens[2]
	run := func(req Request, ctx context.Context) ([]int64, Event) {
		t.Helper()
		s, err := m.Generate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, s)
	}
	toks, end := run(Request{Prompt: r.Prompts[2], MaxTokens: 5}, context.Background())
	if end.Reason != FinishLength || !slices.Equal(toks, want[:5]) {
		t.Errorf("max_tokens 5: %v %s, want %v length", toks, end.Reason, want[:5])
	}
	stop := want[7]
	toks, end = run(Request{Prompt: r.Prompts[2], MaxTokens: 50, StopIDs: []int64{stop}}, context.Background())
	if i := slices.Index(want, stop); end.Reason != FinishStop || !slices.Equal(toks, want[:i]) {
		t.Errorf("stop id %d: %v %s, want %v stop", stop, toks, end.Reason, want[:i])
	}
	toks, end = run(Request{Prompt: r.Prompts[2], MaxTokens: 50, StopWhen: func(g []int64) bool { return len(g) == 3 }}, context.Background())
	if end.Reason != FinishStop || len(toks) != 3 {
		t.Errorf("stop condition: %d tokens %s, want 3 stop", len(toks), end.Reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, end = run(Request{Prompt: r.Prompts[2]}, ctx)
	if end.Reason != FinishDeadline {
		t.Errorf("deadline: ended %s", end.Reason)
	}
	// Without max_tokens a sequence ends when its slot is full.
	toks, end = run(Request{Prompt: r.Prompts[1]}, context.Background())
	if end.Reason != FinishLength || len(r.Prompts[1])+len(toks) != cfg.MaxSeqLen+1 {
		t.Errorf("full slot: %d prompt + %d tokens %s, want %d in all", len(r.Prompts[1]), len(toks), end.Reason, cfg.MaxSeqLen+1)
	}
	for _, bad := range []struct {
		req  Request
		want string
	}{
		{Request{}, "no tokens"},
		{Request{Prompt: make([]int64, 65)}, "more than the model takes (64: the largest of generate.prefill_buckets"},
		{Request{Prompt: []int64{1, int64(m.Vocab())}}, "outside the model's vocabulary"},
		{Request{Prompt: []int64{1}, Sampling: Sampling{Temperature: -1}}, "temperature"},
		{Request{Prompt: []int64{1}, Sampling: Sampling{Temperature: 1, TopP: 2}}, "top_p"},
	} {
		_, err := m.Generate(context.Background(), bad.req)
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want ErrInvalidRequest saying %q", bad.req.Sampling, err, bad.want)
		}
	}
}

// TestSamplingSeed: sampled sequences are reproducible for a seed (and
// batch composition), differ between seeds, and top_k 1 is greedy.
func TestSamplingSeed(t *testing.T) {
	r := loadRefs(t)
	m := newModel(t, "llama-pt2", testConfig())
	sample := func(s Sampling) []int64 {
		t.Helper()
		st, err := m.Generate(context.Background(), Request{Prompt: r.Prompts[3], MaxTokens: 24, Sampling: s})
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := collect(t, st)
		return toks
	}
	s := Sampling{Temperature: 1.5, TopK: 50, TopP: 0.95, RepetitionPenalty: 1.2, Seed: 7, HasSeed: true}
	a, b := sample(s), sample(s)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 twice: %v and %v", a, b)
	}
	s.Seed = 8
	if c := sample(s); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same tokens %v", a)
	}
	if g := sample(Sampling{Temperature: 1, TopK: 1}); !slices.Equal(g, r.Models["llama"].Tokens[3][:24]) {
		t.Errorf("top_k 1: %v, want greedy %v", g, r.Models["llama"].Tokens[3][:24])
	}
}

// TestOverloaded: requests past max_queue waiting for a slot are refused.
func TestOverloaded(t *testing.T) {
	r := loadRefs(t)
	cfg := testConfig()
	cfg.Slots, cfg.SlotBuckets, cfg.MaxQueue = 1, []int64{1}, 1
	m := newModel(t, "gpt2-pt2", cfg)
	var streams []*Stream
	var refused error
	for range 4 {
		s, err := m.Generate(context.Background(), Request{Prompt: r.Prompts[0], MaxTokens: 100})
		if err != nil {
			refused = err
			break
		}
		streams = append(streams, s)
	}
	if !errors.Is(refused, ErrOverloaded) {
		t.Errorf("no request was refused (%v)", refused)
	}
	for _, s := range streams {
		s.Close()
		collect(t, s)
	}
}

// TestLayoutErrors: a generate: section that does not fit the model is an
// error naming config.yaml and the key.
func TestLayoutErrors(t *testing.T) {
	g, err := importer.Load(filepath.Join(genDir(t), "repo", "llama-onnx", "1", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*modelrepo.GenerateConfig)
		want string
	}{
		{func(c *modelrepo.GenerateConfig) { c.Inputs.InputIDs = "tokens" }, `generate.inputs.input_ids: the model has no input "tokens"`},
		{func(c *modelrepo.GenerateConfig) { c.Logits = "scores" }, `generate.outputs.logits: the model has no output "scores"`},
		{func(c *modelrepo.GenerateConfig) { c.Inputs.Positions = "attention_mask" }, "input attention_mask is both positions and attention_mask"},
		{func(c *modelrepo.GenerateConfig) {
			c.Cache = []modelrepo.CachePair{{Input: "past_key_values.0.key", Output: "present.0.key"}}
		}, "input past_key_values.1.key has no role"},
		{func(c *modelrepo.GenerateConfig) {
			c.Cache = []modelrepo.CachePair{{Input: "past_key_values.0.key", Output: "present.9.key"}}
		}, `generate.cache[0].output: the model has no output "present.9.key"`},
	} {
		cfg := testConfig()
		c.edit(cfg)
		_, err := NewLayout(g, cfg, "models/llama/config.yaml")
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "models/llama/config.yaml") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an ErrConfig naming the file and saying %q", err, c.want)
		}
	}
}
