package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tensor"
)

// genModel copies a generative model make gen-models exported (with its
// config.yaml) into the repository as name.
func (r *testRepo) genModel(name, src string) string {
	r.t.Helper()
	from := filepath.Join("..", ".cache", "gen", "repo", src)
	if _, err := os.Stat(from); err != nil {
		r.t.Fatalf("%v\n\nthe generative test models are missing: run `make gen-models` (make test does)", err)
	}
	if err := os.CopyFS(filepath.Join(r.root, name), os.DirFS(from)); err != nil {
		r.t.Fatal(err)
	}
	return filepath.Join(r.root, name)
}

// TestGenerativeVersion: a version with a generate: section answers
// metadata and readiness like any other, lists as generative, generates
// with its tokenizer, and takes the tokenizer's eos when config.yaml
// names none.
func TestGenerativeVersion(t *testing.T) {
	r := newRepo(t)
	dir := r.genModel("tiny", "qwen2-onnx")
	// Without eos ids in config.yaml, the tokenizer's eos_token ends sequences.
	cfg := filepath.Join(dir, "config.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(data), "  eos_token_id: [0]\n", "", 1)), 0o644)
	r.add("plain", 1, "../examples/models/tinycnn/1/model.onnx")
	m, _ := start(t, r, nil)
	md, err := m.Metadata("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Inputs) != 7 || md.Inputs[0].Name != "input_ids" || md.Outputs[0].Name != "logits" {
		t.Errorf("metadata %+v", md)
	}
	if !m.ModelReady("tiny", 1) {
		t.Error("not ready")
	}
	if got := m.GenerativeModels(); !slices.Equal(got, []string{"tiny"}) {
		t.Errorf("generative models %v, want [tiny] (plain has no generate: section)", got)
	}
	if _, err := m.Generative(context.Background(), "plain", 0); !errors.Is(err, ErrNotGenerative) {
		t.Errorf("plain: %v, want ErrNotGenerative", err)
	}
	g, err := m.Generative(context.Background(), "tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if g.Tokenizer == nil {
		t.Fatal("no tokenizer")
	}
	eos := g.Tokenizer.EOSIDs
	ids, err := g.Tokenizer.Encode("Hello world", true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.Loop.Generate(context.Background(), generate.Request{Prompt: ids, MaxTokens: 8, StopIDs: nil})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !ev.Done && slices.Contains(eos, ev.Token) {
			t.Errorf("eos %d was emitted", ev.Token)
		}
		if ev.Done {
			if ev.Reason != generate.FinishStop && ev.Reason != generate.FinishLength {
				t.Errorf("ended %s: %v", ev.Reason, ev.Err)
			}
			break
		}
	}
	if !strings.Contains(metricsText(t, m), `xserve_generate_sequences{model="tiny",reason="length",version="1"}`) &&
		!strings.Contains(metricsText(t, m), `xserve_generate_slots_in_use{model="tiny",version="1"} 0`) {
		t.Error("no generation metrics")
	}
	checkTokenMetrics(t, m, g, ids)
}

// checkTokenMetrics: a sequence's cache entries show in the cache
// occupancy while it runs and leave with it; every token generated is in
// the time-to-first-token or the inter-token histogram.
func checkTokenMetrics(t *testing.T, m *Manager, g *Generative, prompt []int64) {
	t.Helper()
	const labels = `{model="tiny",version="1"}`
	s, err := g.Loop.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(context.Background()); err != nil || ev.Done {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	if occ := metric(t, m, "xserve_generate_cache_occupancy"+labels); occ <= 0 || occ > 1 {
		t.Errorf("cache occupancy %v while a sequence runs", occ)
	}
	s.Close()
	eventually(t, "the slot freed", func() bool { return g.Loop.SlotsInUse() == 0 })
	if occ := metric(t, m, "xserve_generate_cache_occupancy"+labels); occ != 0 {
		t.Errorf("cache occupancy %v with no sequence", occ)
	}
	first := metric(t, m, "xserve_generate_time_to_first_token_seconds_count"+labels)
	next := metric(t, m, "xserve_generate_inter_token_seconds_count"+labels)
	tokens := metric(t, m, "xserve_generate_tokens"+labels)
	if first != 2 || first+next != tokens {
		t.Errorf("%v first tokens (want 2: two sequences) and %v others, %v tokens generated", first, next, tokens)
	}
}

// TestGenerativeBadInput: a tokenizer whose ids do not fit the model's
// vocabulary and a generate: section naming inputs the model lacks are
// load errors naming the file and the key; the other models load.
func TestGenerativeBadInput(t *testing.T) {
	r := newRepo(t)
	dir := r.genModel("mismatch", "llama-pt2")
	// Llama-style BPE with 256 byte tokens: ids past the model's 384.
	tok, err := os.ReadFile(filepath.Join("..", ".cache", "gen", "tokenizers", "bpe_llama", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "1", "tokenizer.json"), tok, 0o644)
	os.Remove(filepath.Join(dir, "1", "tokenizer_config.json")) // its eos_token is not in that vocabulary either
	dir = r.genModel("badrole", "gpt2-onnx")
	f, _ := os.OpenFile(filepath.Join(dir, "config.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("  inputs:\n    positions: pos\n")
	f.Close()
	r.genModel("good", "phi3-pt2")
	m, _ := start(t, r, nil)
	wantUnavailable(t, m, map[string][]string{
		"mismatch": {filepath.Join(r.root, "mismatch", "1", "tokenizer.json"), "the tokenizer's ids reach", "logits have 384", "generate.tokenizer"},
		"badrole":  {filepath.Join(r.root, "badrole", "config.yaml"), `generate.inputs.positions: the model has no input "pos"`},
	})
	if !m.ModelReady("good", 1) {
		t.Error("good is not ready")
	}
}

// TestGenerativeLazy: under LoadLazy a generative model is listed before
// it loads, its first generation request loads it (and its tokens equal
// transformers' greedy generate); a config.yaml with both generate: and
// pipeline: is refused with an error naming the file and the key.
func TestGenerativeLazy(t *testing.T) {
	r := newRepo(t)
	r.genModel("tiny", "llama-pt2")
	genaiModel(t, r, "genai")
	both := r.genModel("both", "gpt2-onnx")
	f, _ := os.OpenFile(filepath.Join(both, "config.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("pipeline:\n  steps:\n    - model: tiny\n")
	f.Close()
	m, _ := start(t, r, func(o *Options) { o.LoadPolicy = LoadLazy })
	if st, reason := state(m, "tiny", 1); st != StateUnavailable || !strings.Contains(reason, "loads on its next request") {
		t.Fatalf("tiny before any request: %s %q, want not loaded", st, reason)
	}
	if got := m.GenerativeModels(); !slices.Equal(got, []string{"genai", "tiny"}) {
		t.Errorf("generative models %v before any load, want [genai tiny]", got)
	}
	st, reason := state(m, "both", 0) // a model-level error: no version
	for _, w := range []string{filepath.Join(both, "config.yaml"), "generate", "not both"} {
		if !strings.Contains(reason, w) {
			t.Errorf("both: %s %q does not say %q", st, reason, w)
		}
	}
	if st == StateReady {
		t.Error("a model with generate: and pipeline: is READY")
	}

	g, err := m.Generative(context.Background(), "tiny", 0)
	if err != nil {
		t.Fatalf("a generative model not loaded yet: %v", err)
	}
	defer g.Release()
	if !m.ModelReady("tiny", 1) {
		t.Error("tiny is not ready after its first request")
	}
	want := greedyRefs(t, "llama")
	const n = 24
	got := generateTokens(t, g, generate.Request{Prompt: want.prompt, MaxTokens: n, IgnoreEOS: true})
	if !slices.Equal(got, want.tokens[:n]) {
		t.Errorf("tokens %v, transformers' greedy generate %v", got, want.tokens[:n])
	}
}

// greedyRef is a prompt and the tokens transformers' greedy generate
// continued it with (make gen-models' refs.json).
type greedyRef struct {
	prompt, tokens []int64
}

// greedyRefs reads family's reference for the longest prompt of refs.json.
func greedyRefs(t *testing.T, family string) greedyRef {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", ".cache", "gen", "refs.json"))
	if err != nil {
		t.Fatalf("%v\n\nthe generative test models are missing: run `make gen-models` (make test does)", err)
	}
	var refs struct {
		Prompts [][]int64 `json:"prompts"`
		Models  map[string]struct {
			Tokens [][]int64 `json:"tokens"`
		} `json:"models"`
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	i := 0
	for j, p := range refs.Prompts {
		if len(p) > len(refs.Prompts[i]) {
			i = j
		}
	}
	return greedyRef{prompt: refs.Prompts[i], tokens: refs.Models[family].Tokens[i]}
}

// TestGenerativeGenAIDirectory: a model directory ONNX Runtime GenAI's
// model builder wrote (int4 MatMulNBits, GroupQueryAttention,
// genai_config.json, tokenizer), put as a version directory without
// config.yaml, serves as a generative model, and its greedy generations
// of 16 prompts run at once equal ONNX Runtime GenAI's own, token for
// token, each ending where ONNX Runtime GenAI's does (an eos id of
// genai_config.json, or the token count).
func TestGenerativeGenAIDirectory(t *testing.T) {
	src := filepath.Join("..", ".cache", "gen", "genai")
	data, err := os.ReadFile(filepath.Join(src, "refs.json"))
	if err != nil {
		t.Fatalf("%v\n\nthe ONNX Runtime GenAI model is missing: run `make genai-model` (make test does)", err)
	}
	var refs struct {
		NewTokens int       `json:"new_tokens"`
		EOS       []int64   `json:"eos_token_id"`
		Prompts   [][]int64 `json:"prompts"`
		Tokens    [][]int64 `json:"tokens"`
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	r := newRepo(t)
	genaiModel(t, r, "genai")
	m, _ := start(t, r, nil)
	if st, reason := state(m, "genai", 1); st != StateReady {
		t.Fatalf("genai: %s %s", st, reason)
	}
	g, err := m.Generative(context.Background(), "genai", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	if g.Tokenizer == nil {
		t.Error("the builder's tokenizer.json was not loaded")
	}
	got := make([][]int64, len(refs.Prompts))
	reasons := make([]generate.FinishReason, len(refs.Prompts))
	var wg sync.WaitGroup
	for i, p := range refs.Prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], reasons[i] = runGreedy(t, g, p, refs.NewTokens)
		}()
	}
	wg.Wait()
	for i, want := range refs.Tokens {
		wantReason := generate.FinishLength
		if n := len(want); n > 0 && slices.Contains(refs.EOS, want[n-1]) {
			want, wantReason = want[:n-1], generate.FinishStop // an eos id ends the sequence, unsent
		}
		if !slices.Equal(got[i], want) || reasons[i] != wantReason {
			t.Errorf("prompt %d (%d tokens): %v (%s)\nONNX Runtime GenAI: %v (%s)", i, len(refs.Prompts[i]), got[i], reasons[i], want, wantReason)
		}
	}
}

// genaiModel copies the ORT GenAI model directory make genai-model built
// into the repository as version 1 of name, without config.yaml.
func genaiModel(t *testing.T, r *testRepo, name string) {
	t.Helper()
	src := filepath.Join("..", ".cache", "gen", "genai", "llama-int4")
	if err := os.CopyFS(filepath.Join(r.root, name, "1"), os.DirFS(src)); err != nil {
		t.Fatalf("%v\n\nthe ONNX Runtime GenAI model is missing: run `make genai-model` (make test does)", err)
	}
}

// runGreedy generates at most n tokens greedily from prompt.
func runGreedy(t *testing.T, g *Generative, prompt []int64, n int) ([]int64, generate.FinishReason) {
	s, err := g.Loop.Generate(context.Background(), generate.Request{Prompt: prompt, MaxTokens: n})
	if err != nil {
		t.Error(err)
		return nil, ""
	}
	var out []int64
	for {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Error(err)
			return out, ""
		}
		if ev.Done {
			return out, ev.Reason
		}
		out = append(out, ev.Token)
	}
}

// TestGenerativeSeq2seq: an encoder-decoder version (make seq2seq-models'
// Whisper) loads its encoder beside the decoder step and generates from
// log-mel features what transformers' greedy generate does; one whose
// generate.encoder.file is missing, or whose encoder file is not an
// encoder (the decoder step itself), is a load error naming config.yaml and
// the key, and the good one serves on.
func TestGenerativeSeq2seq(t *testing.T) {
	r := newRepo(t)
	from := filepath.Join("..", ".cache", "seq2seq")
	data, err := os.ReadFile(filepath.Join(from, "refs.json"))
	if err != nil {
		t.Fatalf("%v\n\nthe encoder-decoder test models are missing: run `make seq2seq-models` (make test does)", err)
	}
	for _, name := range []string{"whisper", "nofile", "mismatch"} {
		src := "whisper"
		if name == "mismatch" {
			src = "t5"
		}
		if err := os.CopyFS(filepath.Join(r.root, name), os.DirFS(filepath.Join(from, "repo", src))); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(r.root, "nofile", "config.yaml")
	text, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(text), `"file": "encoder.pt2"`, `"file": "missing.pt2"`, 1)), 0o644)
	step, _ := os.ReadFile(filepath.Join(from, "repo", "t5", "1", "model.pt2"))
	os.WriteFile(filepath.Join(r.root, "mismatch", "1", "encoder.pt2"), step, 0o644)
	m, _ := start(t, r, nil)
	wantUnavailable(t, m, map[string][]string{
		"nofile":   {"generate.encoder.file", "missing.pt2"},
		"mismatch": {filepath.Join(r.root, "mismatch", "config.yaml"), "generate.encoder.file: encoder.pt2 takes input_ids, attention_mask, position_ids"},
	})
	var refs struct {
		NewTokens int `json:"new_tokens"`
		Models    map[string]struct {
			DecoderPrompt []int64 `json:"decoder_prompt"`
			Cases         []struct {
				Features [][]float32 `json:"features"`
				Tokens   []int64     `json:"tokens"`
			} `json:"cases"`
		} `json:"models"`
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	g, err := m.Generative(context.Background(), "whisper", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	ref := refs.Models["whisper"]
	c := ref.Cases[0]
	feats := tensor.FromFloat32s(slices.Concat(c.Features...), int64(len(c.Features)), int64(len(c.Features[0])))
	got := generateTokens(t, g, generate.Request{Prompt: ref.DecoderPrompt, EncoderFeatures: feats, MaxTokens: refs.NewTokens, IgnoreEOS: true})
	if !slices.Equal(got, c.Tokens) {
		t.Errorf("whisper: got %v\nwant %v (transformers)", got, c.Tokens)
	}
}

// generateTokens runs req on g to its end and returns its tokens.
func generateTokens(t *testing.T, g *Generative, req generate.Request) []int64 {
	t.Helper()
	s, err := g.Loop.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		ev, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Done {
			return got
		}
		got = append(got, ev.Token)
	}
}

// wantUnavailable checks that each model's version 1 is UNAVAILABLE with
// a reason saying each of its strings.
func wantUnavailable(t *testing.T, m *Manager, want map[string][]string) {
	t.Helper()
	for model, says := range want {
		st, reason := state(m, model, 1)
		if st != StateUnavailable {
			t.Errorf("%s is %s", model, st)
		}
		for _, w := range says {
			if !strings.Contains(reason, w) {
				t.Errorf("%s: %q does not say %q", model, reason, w)
			}
		}
	}
}

// TestGenerativeSeq2seqMemory: an encoder-decoder's encoder counts in the
// device memory budget like its decoder. Loaded, the model's footprint
// (xserve_model_memory_bytes) covers both model files and the device
// memory (xserve_device_memory_bytes) both weights; under LoadEager a
// budget that holds the decoder's file but not both refuses it, naming
// each file's size; under LoadLazy, two copies whose decoders alone would
// fit together evict each other.
func TestGenerativeSeq2seqMemory(t *testing.T) {
	from := filepath.Join("..", ".cache", "seq2seq", "repo", "whisper")
	size := func(name string) int64 {
		fi, err := os.Stat(filepath.Join(from, "1", name))
		if err != nil {
			t.Fatalf("%v\n\nthe encoder-decoder test models are missing: run `make seq2seq-models` (make test does)", err)
		}
		return fi.Size()
	}
	dec, enc := size("model.pt2"), size("encoder.pt2")
	r := newRepo(t)
	for _, name := range []string{"w1", "w2"} {
		if err := os.CopyFS(filepath.Join(r.root, name), os.DirFS(from)); err != nil {
			t.Fatal(err)
		}
	}
	cache := sharedCache(t)

	// One token each, so that both weights are on the device.
	generateOne := func(m *Manager, name string) *version {
		t.Helper()
		g, err := m.Generative(context.Background(), name, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release()
		generateTokens(t, g, generate.Request{Prompt: []int64{3}, EncoderFeatures: tensor.FromFloat32s(make([]float32, 16*64), 16, 64), MaxTokens: 1, IgnoreEOS: true})
		return g.v
	}
	probe, _ := lazyManager(t, r, 0, cache)
	v := generateOne(probe, "w1")
	weights := v.model.Weights().Bytes() + v.encoder.Weights().Bytes()
	if v.encoder.Weights().Bytes() == 0 {
		t.Fatal("the encoder's weights take no bytes on the device")
	}
	one := metric(t, probe, `xserve_model_memory_bytes{model="w1"}`)
	if want := max(weights, dec+enc); one != float64(want) {
		t.Errorf("xserve_model_memory_bytes = %v, want %d: max(weights %d, model files %d + %d)", one, want, weights, dec, enc)
	}
	if md, err := probe.Metadata("w1", 0); err != nil {
		t.Error(err)
	} else if md.MemoryBytes != int64(one) {
		t.Errorf("Metadata(w1).MemoryBytes = %d, want xserve_model_memory_bytes %v", md.MemoryBytes, one)
	}
	if got := metric(t, probe, `xserve_device_memory_bytes{device="0"}`); got != float64(weights) {
		t.Errorf("xserve_device_memory_bytes = %v, want the decoder's and encoder's weights, %d", got, weights)
	}

	eager, _ := start(t, r, func(o *Options) {
		o.MemoryBudget = MemoryBudget{Bytes: dec + enc - 1}
		o.CompileCacheDir = cache
	})
	wantUnavailable(t, eager, map[string][]string{
		"w1": {"does not fit on device 0", fmt.Sprintf("model files take %d bytes (model file %d bytes + generate.encoder.file encoder.pt2 %d bytes)", dec+enc, dec, enc)},
	})

	// Room for one whole model, or for both decoders without their encoders.
	budget := max(weights, dec+enc) * 3 / 2
	m, logs := lazyManager(t, r, budget, cache)
	for _, name := range []string{"w1", "w2", "w1"} {
		generateOne(m, name)
		if h := held(m); !slices.Equal(h, []string{name}) {
			t.Errorf("after a request to %s, held %v: the budget of %d bytes holds one model of %d bytes", name, h, budget, max(weights, dec+enc))
		}
		if used := metric(t, m, `xserve_model_memory_used_bytes{device="0"}`); used > float64(budget) {
			t.Errorf("after %s: %v bytes held, the budget is %d", name, used, budget)
		}
	}
	if l := logs.lines("evicting the least recently used model"); len(l) != 2 {
		t.Errorf("%d eviction log lines, want 2", len(l))
	}
}
