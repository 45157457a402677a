package generate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
)

// The models and references of these tests are made by `make gen-models`
// (python/generate/make_models.py, which `make test` runs first) into
// .cache/gen: four families of small decoders exported by
// xserve.export_causal_lm as .pt2 and .onnx, and transformers' greedy
// generate for 16 prompts.

var (
	clientOnce sync.Once
	client     *pjrt.Client
	clientErr  error
)

func testClient(t testing.TB) *pjrt.Client {
	t.Helper()
	clientOnce.Do(func() {
		var path string
		if path, clientErr = pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."}); clientErr != nil {
			clientErr = fmt.Errorf("%w\n\nthe generate tests need the real XLA CPU plugin: run `make pjrt` first", clientErr)
			return
		}
		client, clientErr = pjrt.Open(path)
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	return client
}

func TestMain(m *testing.M) {
	code := m.Run()
	if client != nil {
		client.Close()
	}
	os.Exit(code)
}

// genDir is where make gen-models wrote the models.
func genDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs("../../.cache/gen")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "refs.json")); err != nil {
		t.Fatalf("%v\n\nthe generative models are missing: run `make gen-models` (make test does)", err)
	}
	return d
}

type refs struct {
	NewTokens int       `json:"new_tokens"`
	Prompts   [][]int64 `json:"prompts"`
	Models    map[string]struct {
		Tokens [][]int64 `json:"tokens"`
	} `json:"models"`
}

func loadRefs(t testing.TB) *refs {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(genDir(t), "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r refs
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// testConfig is the served configuration of the test models, without eos
// ids (the references generate a fixed number of tokens).
func testConfig() *modelrepo.GenerateConfig {
	return &modelrepo.GenerateConfig{MaxSeqLen: 256, Slots: 16, SlotBuckets: []int64{1, 2, 4, 8, 16}, PrefillBuckets: []int64{16, 32, 64},
		MaxDecodeStall: 20 * time.Millisecond, MaxQueue: 64}
}

// newModel loads a test model from the repository make gen-models wrote.
func newModel(t testing.TB, name string, cfg *modelrepo.GenerateConfig) *Model {
	t.Helper()
	dir := filepath.Join(genDir(t), "repo", name, "1")
	file := filepath.Join(dir, "model.pt2")
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(dir, "model.onnx")
	}
	e, err := engine.New(engine.Options{Client: testClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	em, err := e.Load(file, engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), Options{Graph: em.Graph(), GraphAt: em.GraphAt, Config: cfg, ConfigFile: filepath.Join(filepath.Dir(dir), "config.yaml"),
		Lowerer: e.Lowerer(), Device: &EngineDevice{Engine: e, Model: em}})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, m, em)
	return m
}

// closeAtEnd closes m when the test ends, checks that its slots are free,
// and closes the engine models its programs were compiled from.
func closeAtEnd(t testing.TB, m *Model, models ...*engine.Model) {
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if n := m.SlotsInUse(); n != 0 {
			t.Errorf("%d slots in use after Close", n)
		}
		for _, em := range models {
			em.Close()
		}
	})
}

// collect reads a stream to its end.
func collect(t testing.TB, s *Stream) ([]int64, Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var toks []int64
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Done {
			return toks, ev
		}
		toks = append(toks, ev.Token)
	}
}

// generateAll runs the prompts at once (continuous batching) and returns
// each one's tokens.
func generateAll(t testing.TB, m *Model, prompts [][]int64, n int) [][]int64 {
	t.Helper()
	streams := make([]*Stream, len(prompts))
	for i, p := range prompts {
		s, err := m.Generate(context.Background(), Request{Prompt: p, MaxTokens: n})
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	out := make([][]int64, len(prompts))
	for i, s := range streams {
		toks, end := collect(t, s)
		if end.Reason != FinishLength || end.Generated != n {
			t.Fatalf("prompt %d ended with %s after %d tokens (%v), want length after %d", i, end.Reason, end.Generated, end.Err, n)
		}
		out[i] = toks
	}
	return out
}

// TestGreedyMatchesTransformers: for each family, as .pt2 and as ONNX,
// greedy decoding of 16 prompts of mixed lengths, run concurrently,
// equals transformers' generate of each prompt alone, token for token (128
// new tokens).
func TestGreedyMatchesTransformers(t *testing.T) {
	r := loadRefs(t)
	for _, family := range []string{"llama", "qwen2", "phi3", "gpt2"} {
		for _, format := range []string{"pt2", "onnx"} {
			t.Run(family+"-"+format, func(t *testing.T) {
				m := newModel(t, family+"-"+format, testConfig())
				got := generateAll(t, m, r.Prompts, r.NewTokens)
				for i, want := range r.Models[family].Tokens {
					if !slices.Equal(got[i], want) {
						t.Errorf("prompt %d (%d tokens): differs from transformers at token %d\n got %v\nwant %v", i, len(r.Prompts[i]), firstDiff(got[i], want), got[i], want)
					}
				}
				if n := m.Stats().Prefills.Load(); n != int64(len(r.Prompts)) {
					t.Errorf("%d prefills, want %d", n, len(r.Prompts))
				}
			})
		}
	}
}

func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestConcurrentEqualsAlone: 16 sequences of mixed prompt lengths decoded
// together give each the tokens it gets alone.
func TestConcurrentEqualsAlone(t *testing.T) {
	r := loadRefs(t)
	m := newModel(t, "llama-pt2", testConfig())
	const n = 48
	together := generateAll(t, m, r.Prompts, n)
	for i, p := range r.Prompts {
		alone := generateAll(t, m, [][]int64{p}, n)[0]
		if !slices.Equal(alone, together[i]) {
			t.Errorf("prompt %d: alone %v, with 15 others %v", i, alone, together[i])
		}
	}
}
