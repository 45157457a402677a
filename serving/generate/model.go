package generate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// Options configure a Model.
type Options struct {
	// Graph is the model's one-step graph.
	Graph *fxgraph.Graph
	// GraphAt returns the graph at the symbol sizes of a step
	// (engine.Model.GraphAt: a deferred import is imported at them); nil
	// means Graph, which must then not be deferred.
	GraphAt func(dims map[string]int64) (*fxgraph.Graph, error)
	// Config is config.yaml's generate: section, defaults filled.
	Config *modelrepo.GenerateConfig
	// ConfigFile names config.yaml in errors.
	ConfigFile string
	// Encoder is an encoder-decoder's encoder graph (generate.encoder),
	// whose programs EncoderDevice compiles; EncoderAt is its GraphAt.
	// Graph is then the decoder's step.
	Encoder       *fxgraph.Graph
	EncoderAt     func(dims map[string]int64) (*fxgraph.Graph, error)
	EncoderDevice Device
	// Lowerer lowers the step programs.
	Lowerer *lower.Lowerer
	// Device compiles and runs them.
	Device Device
	// Warmup compiles every step program in New rather than on first use.
	Warmup bool
	// Logger gets the model's log lines; nil discards them.
	Logger *slog.Logger
	// OnToken, when set, is called on the loop's goroutine for each token
	// generated (it must be quick): for a sequence's first token with the
	// time since its request arrived (time to first token), for the others
	// with the time since its previous token (inter-token latency).
	OnToken func(first bool, since time.Duration)
}

// Request is one sequence to generate.
type Request struct {
	// Prompt is the prompt's token ids (at least one); for an
	// encoder-decoder, the decoder's prompt, by default
	// generate.decoder_start_token_id.
	Prompt []int64
	// EncoderIDs are a text encoder-decoder's input token ids (T5, BART).
	EncoderIDs []int64
	// EncoderFeatures is a fixed-size encoder's input without its batch
	// axis (Whisper's log-mel features [mels, frames]), float.
	EncoderFeatures *tensor.Tensor
	// MaxTokens bounds the generated tokens; 0 means until the cache slot
	// is full.
	MaxTokens int
	// Sampling chooses the tokens (zero value: greedy).
	Sampling Sampling
	// StopIDs end the sequence (besides the model's eos ids) when
	// generated; the stop token itself is not emitted.
	StopIDs []int64
	// IgnoreEOS keeps generating after the model's eos ids.
	IgnoreEOS bool
	// StopWhen, when set, is asked after each token with the tokens
	// generated so far and ends the sequence (FinishStop) when it returns
	// true: stop strings, which need the tokenizer.
	StopWhen func(generated []int64) bool
}

// Model is a generative model version: its step programs, its cache on the
// device and the loop that runs its sequences. Generate is safe for
// concurrent use.
type Model struct {
	cfg     *modelrepo.GenerateConfig
	file    string
	layout  *Layout
	builder *stepBuilder
	device  Device
	encDev  Device // the encoder's (encoder-decoders)
	// The dtypes of an encoder-decoder's encoder mask (decoder step), token
	// ids and mask, or features (encoder).
	encMaskType, encIDType, encIDMaskType, featType tensor.DType
	log                                             *slog.Logger
	vocab                                           int64 // -1 when the model's logits do not say
	dtypes                                          [3]tensor.DType
	eos                                             []int64

	mu      sync.Mutex // guards pending and closed
	pending []*sequence
	closed  bool
	wake    chan struct{} // signalled on a new request or Close

	inUse   atomic.Int64 // slots holding a sequence
	cached  atomic.Int64 // cache entries the sequences in slots hold
	onToken func(first bool, since time.Duration)
	stopped chan struct{}
	stats   Stats

	// Owned by the loop goroutine.
	steps map[stepSpec]Step
	cache []Buffer
	slots []*sequence
}

// Stats are a model's counters.
type Stats struct {
	Prefills, DecodeSteps, Tokens atomic.Int64
	// Encodes counts an encoder-decoder's encode programs run, each for
	// the sequences of one encoder bucket admitted together.
	Encodes atomic.Int64
	ended   [len(Reasons)]atomic.Int64
}

// Reasons lists the finish reasons, in the order of Stats.Ended.
var Reasons = [...]FinishReason{FinishStop, FinishLength, FinishCancelled, FinishDeadline, FinishError}

// Ended returns the number of sequences that ended for reason.
func (s *Stats) Ended(reason FinishReason) int64 {
	for i, r := range Reasons {
		if r == reason {
			return s.ended[i].Load()
		}
	}
	return 0
}

func (s *Stats) countEnd(reason FinishReason) {
	for i, r := range Reasons {
		if r == reason {
			s.ended[i].Add(1)
		}
	}
}

// New prepares a generative model: it finds the graph's roles (NewLayout),
// allocates the cache on the device, compiles the step programs (all of
// them with Options.Warmup, else each on first use) and starts the loop.
func New(ctx context.Context, o Options) (*Model, error) {
	lay, err := NewLayout(o.Graph, o.Config, o.ConfigFile)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := o.Config
	m := &Model{
		cfg: cfg, file: o.ConfigFile, layout: lay, device: o.Device, log: log, vocab: -1, onToken: o.OnToken,
		eos:     cfg.EOSTokenIDs,
		builder: &stepBuilder{lowerer: o.Lowerer, graph: o.Graph, graphAt: o.GraphAt, layout: lay, slots: int64(cfg.Slots), maxLen: int64(cfg.MaxSeqLen)},
		wake:    make(chan struct{}, 1), stopped: make(chan struct{}),
		steps: map[stepSpec]Step{}, slots: make([]*sequence, cfg.Slots),
	}
	ph := o.Graph.Placeholders()
	if err := m.withEncoder(o); err != nil {
		return nil, err
	}
	m.dtypes = [3]tensor.DType{ph[lay.InputIDs].Val().DType, tensor.Int64, ph[lay.Mask].Val().DType}
	if lay.Positions >= 0 {
		m.dtypes[1] = ph[lay.Positions].Val().DType
	}
	if v := o.Graph.Outputs()[lay.Logits].Val().Shape[2]; v.IsStatic() {
		m.vocab = v.Size
	}
	if err := m.allocCache(ctx); err != nil {
		return nil, err
	}
	if o.Warmup {
		for _, spec := range m.specs() {
			if _, err := m.step(ctx, spec); err != nil {
				m.free()
				return nil, err
			}
		}
	}
	go m.loop()
	return m, nil
}

// specs lists every step program of the model.
func (m *Model) specs() []stepSpec {
	var out []stepSpec
	for _, l := range m.cfg.PrefillBuckets {
		out = append(out, stepSpec{kind: prefill, batch: 1, tokens: l})
	}
	for _, b := range m.cfg.SlotBuckets {
		out = append(out, stepSpec{kind: decode, batch: b, tokens: 1})
	}
	return append(out, m.encodeSpecs()...)
}

// step returns the compiled program of spec, compiling it the first time.
func (m *Model) step(ctx context.Context, spec stepSpec) (Step, error) {
	if s, ok := m.steps[spec]; ok {
		return s, nil
	}
	prog, err := m.builder.program(spec)
	if err != nil {
		return nil, err
	}
	dev := m.device
	if spec.kind == encode {
		dev = m.encDev
	}
	s, err := dev.Compile(ctx, prog)
	if err != nil {
		return nil, fmt.Errorf("generate: %s: %w", spec, err)
	}
	m.log.Debug("step program compiled", "step", spec.String())
	m.steps[spec] = s
	return s, nil
}

// allocCache puts a zero cache on the device: the self-attention cache,
// then an encoder-decoder's cross-attention cache.
func (m *Model) allocCache(ctx context.Context) error {
	m.cache = make([]Buffer, 0, len(m.layout.Cache)+len(m.layout.Cross))
	alloc := func(c CacheTensor, length int64) error {
		b, err := m.device.Zeros(ctx, c.DType, []int64{int64(m.cfg.Slots), c.Heads, length, c.Dim})
		if err != nil {
			m.closeCache()
			return fmt.Errorf("generate: allocate cache %s: %w", c.Name, err)
		}
		m.cache = append(m.cache, b)
		return nil
	}
	for _, c := range m.layout.Cache {
		if err := alloc(c, int64(m.cfg.MaxSeqLen)); err != nil {
			return err
		}
	}
	for _, c := range m.layout.Cross {
		if err := alloc(c, m.builder.encLen); err != nil {
			return err
		}
	}
	return nil
}

func (m *Model) closeCache() {
	for _, b := range m.cache {
		if b != nil {
			b.Close()
		}
	}
	m.cache = nil
}

// free releases the cache and the step programs.
func (m *Model) free() {
	m.closeCache()
	for k, s := range m.steps {
		s.Close()
		delete(m.steps, k)
	}
}

// MaxPromptTokens is the longest prompt the model takes.
func (m *Model) MaxPromptTokens() int {
	return int(min(slices.Max(m.cfg.PrefillBuckets), int64(m.cfg.MaxSeqLen-1)))
}

// Vocab is the size of the model's vocabulary, -1 when its graph does not
// say.
func (m *Model) Vocab() int64 { return m.vocab }

// SlotsInUse is the number of cache slots holding a sequence.
func (m *Model) SlotsInUse() int { return int(m.inUse.Load()) }

// CacheOccupancy returns the fraction of the cache's entries (slots x
// max_seq_len) that the sequences in slots hold now.
func (m *Model) CacheOccupancy() float64 {
	return float64(m.cached.Load()) / float64(m.cfg.Slots*m.cfg.MaxSeqLen)
}

// Slots is the number of cache slots.
func (m *Model) Slots() int { return m.cfg.Slots }

// Waiting is the number of requests waiting for a slot.
func (m *Model) Waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

// Stats returns the model's counters.
func (m *Model) Stats() *Stats { return &m.stats }

// Generate starts a sequence and returns its stream of events. The
// sequence ends when ctx ends (FinishCancelled, or FinishDeadline at its
// deadline) or the stream is closed. Invalid requests are ErrInvalidRequest;
// a full queue is ErrOverloaded.
func (m *Model) Generate(ctx context.Context, req Request) (*Stream, error) {
	if err := m.validate(&req); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	seq := &sequence{req: req, ctx: sctx, stream: newStream(cancel), tokens: slices.Clone(req.Prompt), sampler: newSampler(req.Sampling), last: time.Now()}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		cancel()
		return nil, ErrClosed
	case len(m.pending) >= m.cfg.MaxQueue:
		cancel()
		return nil, fmt.Errorf("%w (max_queue %d)", ErrOverloaded, m.cfg.MaxQueue)
	}
	m.pending = append(m.pending, seq)
	m.signal()
	return seq.stream, nil
}

func (m *Model) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// validate checks a request against the model.
func (m *Model) validate(req *Request) error {
	if err := m.validateEncoder(req); err != nil {
		return err
	}
	n := len(req.Prompt)
	switch {
	case n == 0:
		return fmt.Errorf("%w: the prompt has no tokens", ErrInvalidRequest)
	case n > m.MaxPromptTokens():
		return fmt.Errorf("%w: the prompt has %d tokens, more than the model takes (%d: the largest of generate.prefill_buckets %v, below generate.max_seq_len %d in %s)",
			ErrInvalidRequest, n, m.MaxPromptTokens(), m.cfg.PrefillBuckets, m.cfg.MaxSeqLen, m.file)
	case req.MaxTokens < 0:
		return fmt.Errorf("%w: max_tokens must be >= 0, got %d", ErrInvalidRequest, req.MaxTokens)
	}
	for i, t := range req.Prompt {
		if t < 0 || (m.vocab > 0 && t >= m.vocab) {
			return fmt.Errorf("%w: prompt token %d is %d, outside the model's vocabulary [0, %d)", ErrInvalidRequest, i, t, m.vocab)
		}
	}
	return req.Sampling.validate()
}

// Close ends every sequence (FinishCancelled), stops the loop and frees
// the cache and step programs. It waits for the loop until ctx ends.
func (m *Model) Close(ctx context.Context) error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		m.signal()
	}
	m.mu.Unlock()
	select {
	case <-m.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("generate: close: %w", ctx.Err())
	}
}

// errCacheLost marks a step failure after which the cache is gone.
var errCacheLost = errors.New("generate: the cache was lost with a failed step")
