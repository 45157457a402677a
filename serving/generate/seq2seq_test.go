package generate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// The encoder-decoder models and references of these tests are made by
// `make seq2seq-models` (python/generate/make_seq2seq.py, which `make test`
// runs first) into .cache/seq2seq: a small T5 and a small Whisper with
// seeded weights exported by xserve.export_seq2seq, and transformers'
// greedy generate of each input alone.

type seq2seqRefs struct {
	NewTokens int `json:"new_tokens"`
	Models    map[string]struct {
		DecoderPrompt []int64 `json:"decoder_prompt"`
		Cases         []struct {
			Text     string      `json:"text"`
			InputIDs []int64     `json:"input_ids"`
			Features [][]float32 `json:"features"`
			Tokens   []int64     `json:"tokens"`
			Decoded  string      `json:"decoded"`
		} `json:"cases"`
	} `json:"models"`
}

func seq2seqDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs("../../.cache/seq2seq")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "refs.json")); err != nil {
		t.Fatalf("%v\n\nthe encoder-decoder models are missing: run `make seq2seq-models` (make test does)", err)
	}
	return d
}

func loadSeq2seqRefs(t testing.TB) *seq2seqRefs {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(seq2seqDir(t), "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r seq2seqRefs
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// newSeq2seq loads an encoder-decoder the way its config.yaml says.
func newSeq2seq(t testing.TB, name string) *Model {
	t.Helper()
	dir := filepath.Join(seq2seqDir(t), "repo", name)
	cfgFile := filepath.Join(dir, "config.yaml")
	c, err := modelrepo.LoadConfig(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Client: testClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := e.Load(filepath.Join(dir, "1", "model.pt2"), engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := e.Load(filepath.Join(dir, "1", c.Generate.Encoder.File), engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), Options{Graph: dec.Graph(), GraphAt: dec.GraphAt, Config: c.Generate, ConfigFile: cfgFile,
		Encoder: enc.Graph(), EncoderAt: enc.GraphAt, EncoderDevice: &EngineDevice{Engine: e, Model: enc},
		Lowerer: e.Lowerer(), Device: &EngineDevice{Engine: e, Model: dec}})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, m, dec, enc)
	return m
}

// seq2seqRequests are the requests of a model's reference cases: T5's
// token ids, Whisper's features; no eos (the references generate a fixed
// number of tokens).
func seq2seqRequests(t testing.TB, r *seq2seqRefs, name string) []Request {
	t.Helper()
	ref := r.Models[name]
	var reqs []Request
	for _, c := range ref.Cases {
		req := Request{MaxTokens: r.NewTokens, IgnoreEOS: true}
		if name == "whisper" {
			req.Prompt = ref.DecoderPrompt
			rows, cols := int64(len(c.Features)), int64(len(c.Features[0]))
			req.EncoderFeatures = tensor.FromFloat32s(slices.Concat(c.Features...), rows, cols)
		} else {
			req.EncoderIDs = c.InputIDs
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// generateRequests runs the requests at once and returns each one's tokens.
func generateRequests(t testing.TB, m *Model, reqs []Request) [][]int64 {
	t.Helper()
	streams := make([]*Stream, len(reqs))
	for i, req := range reqs {
		s, err := m.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	out := make([][]int64, len(reqs))
	for i, s := range streams {
		toks, end := collect(t, s)
		if end.Reason != FinishLength || end.Generated != reqs[i].MaxTokens {
			t.Fatalf("request %d ended with %s after %d tokens (%v), want length after %d", i, end.Reason, end.Generated, end.Err, reqs[i].MaxTokens)
		}
		out[i] = toks
	}
	return out
}

// TestSeq2seqGreedyMatchesTransformers: T5 (token ids of texts encoded by
// its tokenizer) and Whisper (log-mel features), exported by
// xserve.export_seq2seq: greedy decoding of every case at once equals
// transformers' generate of each alone, token for token; and each case
// alone gives the same tokens as with the others (encoded together, mixed
// encoder lengths for T5).
func TestSeq2seqGreedyMatchesTransformers(t *testing.T) {
	r := loadSeq2seqRefs(t)
	for _, name := range []string{"t5", "whisper"} {
		t.Run(name, func(t *testing.T) {
			m := newSeq2seq(t, name)
			reqs := seq2seqRequests(t, r, name)
			together := generateRequests(t, m, reqs)
			for i, c := range r.Models[name].Cases {
				if !slices.Equal(together[i], c.Tokens) {
					t.Errorf("case %d: differs from transformers at token %d\n got %v\nwant %v", i, firstDiff(together[i], c.Tokens), together[i], c.Tokens)
				}
			}
			for i, req := range reqs[:3] {
				if alone := generateRequests(t, m, []Request{req})[0]; !slices.Equal(alone, together[i]) {
					t.Errorf("case %d: alone %v, with the others %v", i, alone, together[i])
				}
			}
			if n := m.Stats().Prefills.Load(); n != int64(len(reqs)+3) {
				t.Errorf("%d prefills, want %d", n, len(reqs)+3)
			}
			// The sequences that arrive together are encoded together.
			t.Logf("%d encodes for %d sequences sent together and 3 alone", m.Stats().Encodes.Load(), len(reqs))
			if n := m.Stats().Encodes.Load(); n >= int64(len(reqs)) {
				t.Errorf("%d encodes for %d sequences sent together and 3 alone, want fewer than %d", n, len(reqs), len(reqs))
			}
		})
	}
}

// TestSeq2seqBadRequests: an encoder-decoder refuses the wrong encoder
// input with ErrInvalidRequest; without a decoder prompt it starts from
// decoder_start_token_id; a caller that goes away frees its slot.
func TestSeq2seqBadRequests(t *testing.T) {
	r := loadSeq2seqRefs(t)
	t5 := newSeq2seq(t, "t5")
	whisper := newSeq2seq(t, "whisper")
	feats := seq2seqRequests(t, r, "whisper")[0].EncoderFeatures
	long := make([]int64, 65)
	for _, tt := range []struct {
		name string
		m    *Model
		req  Request
	}{
		{"t5 without encoder input", t5, Request{MaxTokens: 2}},
		{"t5 given features", t5, Request{EncoderFeatures: feats, MaxTokens: 2}},
		{"t5 encoder input too long", t5, Request{EncoderIDs: long, MaxTokens: 2}},
		{"t5 encoder id outside the vocabulary", t5, Request{EncoderIDs: []int64{5, 9999}, MaxTokens: 2}},
		{"whisper given ids", whisper, Request{EncoderIDs: []int64{5}, MaxTokens: 2}},
		{"whisper features of another shape", whisper, Request{EncoderFeatures: tensor.New(tensor.Float32, 16, 32), MaxTokens: 2}},
		{"whisper integer features", whisper, Request{EncoderFeatures: tensor.New(tensor.Int64, 16, 64), MaxTokens: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.m.Generate(context.Background(), tt.req); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("got %v, want ErrInvalidRequest", err)
			}
		})
	}
	// Without a prompt, the decoder starts from decoder_start_token_id.
	s, err := t5.Generate(context.Background(), Request{EncoderIDs: r.Models["t5"].Cases[0].InputIDs, MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if toks, _ := collect(t, s); !slices.Equal(toks, r.Models["t5"].Cases[0].Tokens[:4]) {
		t.Errorf("default decoder prompt: got %v, want %v", toks, r.Models["t5"].Cases[0].Tokens[:4])
	}
	// A caller that goes away mid-generation frees its slot.
	s, err = whisper.Generate(context.Background(), seq2seqRequests(t, r, "whisper")[1])
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Next(context.Background()); err != nil || ev.Done {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	s.Close()
	if _, end := collect(t, s); end.Reason != FinishCancelled {
		t.Errorf("closed stream ended %s, want cancelled", end.Reason)
	}
	eventually(t, "the slot freed", func() bool { return whisper.SlotsInUse() == 0 })
}
