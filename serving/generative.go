package serving

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tokenizer"
)

// ErrNotGenerative: a generation request names a model without a
// generate: section.
var ErrNotGenerative = errors.New("serving: the model is not generative (its config.yaml has no generate: section)")

// Generative is a READY generative model version held for a generation
// request: its loop and its tokenizer (nil when the version directory has
// none). Release it when the request is done; the version is not freed
// before.
type Generative struct {
	// Model and Version name the version.
	Model   string
	Version int64
	// Loop runs the sequences (serving/generate).
	Loop *generate.Model
	// Tokenizer is the version's tokenizer, nil without one.
	Tokenizer *tokenizer.Tokenizer

	m        *Manager
	v        *version
	released bool
}

// Release gives the version back; it is safe to call twice.
func (g *Generative) Release() {
	if !g.released {
		g.released = true
		g.m.release(g.v)
	}
}

// Generative returns a READY generative version of model (0: the
// latest), held until Release. Under LoadLazy a model not loaded yet loads
// first (the call waits for it within ctx), as for Infer.
func (m *Manager) Generative(ctx context.Context, model string, version int64) (*Generative, error) {
	v, err := m.acquire(model, version)
	if err != nil && errors.Is(err, ErrNotReady) && m.opts.LoadPolicy == LoadLazy {
		v, err = m.acquireLazily(ctx, model, version, err)
	}
	if err != nil {
		return nil, err
	}
	if v.gen == nil {
		m.release(v)
		return nil, fmt.Errorf("%w: %s", ErrNotGenerative, model)
	}
	return &Generative{Model: v.name, Version: v.num, Loop: v.gen, Tokenizer: v.tok, m: m, v: v}, nil
}

// GenerativeModels lists the names of the models with a READY generative
// version, and under LoadLazy the generative models not loaded (a request
// loads them; isGenerative), sorted.
func (m *Manager) GenerativeModels() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for name, md := range m.models {
		if md.lazy != nil && md.lazy.generative && md.err == nil {
			names = append(names, name)
			continue
		}
		for _, v := range md.versions {
			if v.state == StateReady && v.gen != nil {
				names = append(names, name)
				break
			}
		}
	}
	sort.Strings(names)
	return names
}

// isGenerative says whether entry's config.yaml has a generate: section or
// one of its selected versions is an ONNX Runtime GenAI model directory.
func isGenerative(entry *modelrepo.ModelEntry) bool {
	if entry.Config.Generate != nil {
		return true
	}
	for _, ve := range entry.Selected() {
		if _, err := os.Stat(filepath.Join(filepath.Dir(ve.Path), modelrepo.GenAIConfigFile)); err == nil {
			return true
		}
	}
	return false
}

// withGenAIConfig reads the genai_config.json beside v's model file (an
// ONNX Runtime GenAI model directory, served as is): it is v's generate:
// section when config.yaml has none; with one, it still says how the
// model writes its cache.
func (v *version) withGenAIConfig() error {
	g, err := modelrepo.GenAIGenerate(filepath.Dir(v.entry.Path))
	if err != nil || g == nil {
		return err
	}
	c := *v.cfg
	if c.Generate != nil {
		gc := *c.Generate
		gc.CacheAtLength, gc.CacheHeadDim = g.CacheAtLength, g.CacheHeadDim
		g = &gc
	}
	c.Generate = g
	v.cfg = &c
	return nil
}

// loadGenerative finishes loading a version whose config has a generate:
// section: instead of probing, batching and warming up buckets for
// requests, it starts the generation loop over the graph (compiling the
// step programs at load with warmup eager) and loads the tokenizer of the
// version directory (generate.tokenizer, default tokenizer.json when
// present). A tokenizer whose ids do not fit the model's vocabulary is a
// load error.
func (v *version) loadGenerative(ctx context.Context, cfgFile string) error {
	for _, s := range v.plan.Symbols {
		if s.Pad == PadProbe {
			s.Pad, s.PadReason = PadExact, "generative model: tensor requests are served at their exact sizes"
		}
	}
	v.plan.findBatchAxes()
	gc := *v.cfg.Generate
	tok, err := v.loadTokenizer(&gc, cfgFile)
	if err != nil {
		return err
	}
	if tok != nil && len(gc.EOSTokenIDs) == 0 {
		gc.EOSTokenIDs = tok.EOSIDs
	}
	opts := generate.Options{
		Graph: v.model.Graph(), GraphAt: v.model.GraphAt, Config: &gc, ConfigFile: cfgFile, Lowerer: v.m.engine.Lowerer(),
		Device: &generate.EngineDevice{Engine: v.m.engine, Model: v.model},
		Warmup: v.cfg.Warmup == modelrepo.WarmupEager, Logger: v.log(), OnToken: v.observeToken(),
	}
	enc, err := v.loadEncoder(&gc, &opts)
	if err != nil {
		if tok != nil {
			tok.Close()
		}
		return err
	}
	gen, err := generate.New(ctx, opts)
	if err != nil {
		if tok != nil {
			tok.Close()
		}
		if enc != nil {
			enc.Close()
		}
		return err
	}
	v.encoder = enc
	if hi := tokMaxID(tok); gen.Vocab() > 0 && hi >= gen.Vocab() {
		gen.Close(ctx)
		tok.Close()
		return fmt.Errorf("%w: %s: %s: the tokenizer's ids reach %d, but the model's logits have %d entries (%s generate.tokenizer): the tokenizer is not this model's",
			generate.ErrConfig, cfgFile, tok.File(), hi, gen.Vocab(), filepath.Base(cfgFile))
	}
	v.gen, v.tok = gen, tok
	v.log().Info("generative model version loaded", "file", v.entry.Path, "slots", gc.Slots, "max_seq_len", gc.MaxSeqLen,
		"prefill_buckets", fmt.Sprint(gc.PrefillBuckets), "slot_buckets", fmt.Sprint(gc.SlotBuckets), "tokenizer", tok != nil)
	return nil
}

// loadEncoder loads an encoder-decoder's encoder (generate.encoder.file,
// beside the decoder's step) onto the decoder's device and gives it to
// opts; nil for a decoder-only model.
func (v *version) loadEncoder(gc *modelrepo.GenerateConfig, opts *generate.Options) (*engine.Model, error) {
	if gc.Encoder == nil {
		return nil, nil
	}
	enc, err := v.m.engine.Load(filepath.Join(filepath.Dir(v.entry.Path), gc.Encoder.File), engine.LoadOptions{Logger: v.log(), Device: v.devices()[0]})
	if err != nil {
		return nil, fmt.Errorf("generate.encoder.file: %w", err)
	}
	opts.Encoder, opts.EncoderAt = enc.Graph(), enc.GraphAt
	opts.EncoderDevice = &generate.EngineDevice{Engine: v.m.engine, Model: enc}
	return enc, nil
}

// observeToken returns the loop's token observer: time to first token and
// inter-token latency into the version's histograms.
func (v *version) observeToken() func(bool, time.Duration) {
	ttft := v.m.metrics.genTTFT.With(v.name, v.label)
	itl := v.m.metrics.genInterToken.With(v.name, v.label)
	return func(first bool, d time.Duration) {
		if first {
			ttft.Observe(d.Seconds())
		} else {
			itl.Observe(d.Seconds())
		}
	}
}

// tokMaxID is the tokenizer's largest id, -1 without a tokenizer.
func tokMaxID(tok *tokenizer.Tokenizer) int64 {
	if tok == nil {
		return -1
	}
	return tok.MaxID()
}

// generativePlanConfig is the config of a generative version's bucket
// plan, which serves its tensor requests (the step graph as it is, at the
// request's sizes) and its metadata: one bucket per symbol the config gives
// none (the smallest size the model takes), as the generation loop has
// buckets of its own.
func generativePlanConfig(g *fxgraph.Graph, cfg *modelrepo.Config) *modelrepo.Config {
	c := *cfg
	c.Buckets = maps.Clone(cfg.Buckets)
	if c.Buckets == nil {
		c.Buckets = map[string][]int64{}
	}
	for _, p := range g.Placeholders() {
		for _, d := range p.Val().Shape {
			if d.IsStatic() || c.Buckets[d.Sym] != nil {
				continue
			}
			size := max(g.SymbolRanges[d.Sym].Min, 1)
			c.Buckets[d.Sym] = []int64{size}
		}
	}
	return &c
}

// loadTokenizer loads the version's tokenizer, nil when it has none.
func (v *version) loadTokenizer(gc *modelrepo.GenerateConfig, cfgFile string) (*tokenizer.Tokenizer, error) {
	dir := filepath.Dir(v.entry.Path)
	file := gc.Tokenizer
	if file == "" {
		if _, err := os.Stat(filepath.Join(dir, modelrepo.DefaultTokenizerFile)); err != nil {
			return nil, nil
		}
	} else if !filepath.IsLocal(file) {
		return nil, fmt.Errorf("%w: %s: generate.tokenizer: %q must name a file in the version directory", generate.ErrConfig, cfgFile, file)
	}
	lib, err := tokenizer.FindLibrary(v.m.opts.TokenizersLibrary, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, modelrepo.DefaultTokenizerFile), err)
	}
	return tokenizer.Load(lib, dir, file)
}

// freeGenerative stops the loop and frees the tokenizer.
func (v *version) freeGenerative() {
	if v.gen != nil {
		if err := v.gen.Close(context.Background()); err != nil {
			v.log().Warn("close the generation loop", "error", err)
		}
		v.gen = nil
	}
	if v.encoder != nil {
		v.encoder.Close()
		v.encoder = nil
	}
	if v.tok != nil {
		v.tok.Close()
		v.tok = nil
	}
}

// updateGenerateMetrics sets the generation gauges of the READY versions.
func (m *Manager) updateGenerateMetrics() {
	vs := m.readyVersions(func(v *version) bool { return v.gen != nil })
	mt := m.metrics
	mt.genSlots.Reset()
	mt.genWaiting.Reset()
	mt.genTokens.Reset()
	mt.genSteps.Reset()
	mt.genEnded.Reset()
	mt.genCache.Reset()
	for _, v := range vs {
		st := v.gen.Stats()
		mt.genSlots.With(v.name, v.label).Set(float64(v.gen.SlotsInUse()))
		mt.genWaiting.With(v.name, v.label).Set(float64(v.gen.Waiting()))
		mt.genCache.With(v.name, v.label).Set(v.gen.CacheOccupancy())
		mt.genTokens.With(v.name, v.label).Set(float64(st.Tokens.Load()))
		mt.genSteps.With(v.name, v.label, "prefill").Set(float64(st.Prefills.Load()))
		mt.genSteps.With(v.name, v.label, "decode").Set(float64(st.DecodeSteps.Load()))
		for _, r := range generate.Reasons {
			mt.genEnded.With(v.name, v.label, string(r)).Set(float64(st.Ended(r)))
		}
	}
}
