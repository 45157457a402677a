package generate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xserve/xserve/tensor"
)

// sequence is one request in the loop.
type sequence struct {
	req     Request
	ctx     context.Context
	stream  *Stream
	sampler *sampler
	tokens  []int64 // prompt, then the generated tokens
	slot    int
	cached  int   // tokens whose entries are in the cache slot
	encLen  int64 // an encoder-decoder's valid encoder entries in its slot
	ended   bool  // its Done event was sent
	// last is when its request arrived, then when its last token was
	// generated (Options.OnToken).
	last time.Time
}

func (s *sequence) generated() []int64 { return s.tokens[len(s.req.Prompt):] }

// loop runs the model's sequences until Close: it admits waiting requests
// into free slots (prefill) and runs one decode step over the slots in use,
// in turns, so that sequences join and leave the decode batch at step
// boundaries. While sequences are decoding, it prefills new ones for at
// most max_decode_stall between two steps (and at least one, when a slot
// is free).
func (m *Model) loop() {
	defer close(m.stopped)
	ctx := context.Background()
	for {
		if m.inUse.Load() == 0 {
			<-m.wake
		}
		m.mu.Lock()
		closed := m.closed
		m.mu.Unlock()
		if closed {
			m.shutdown()
			return
		}
		m.dropFinished()
		m.admit(ctx)
		if m.inUse.Load() > 0 {
			m.decode(ctx)
		}
	}
}

// shutdown ends every sequence and frees the device state.
func (m *Model) shutdown() {
	m.mu.Lock()
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, s := range pending {
		m.end(s, FinishCancelled, ErrClosed)
	}
	for _, s := range m.slots {
		if s != nil {
			m.end(s, FinishCancelled, ErrClosed)
		}
	}
	m.free()
}

// dropFinished ends the sequences whose caller went away or whose deadline
// passed, waiting or in a slot.
func (m *Model) dropFinished() {
	m.mu.Lock()
	var gone []*sequence
	m.pending = slices.DeleteFunc(m.pending, func(s *sequence) bool {
		if s.ctx.Err() != nil {
			gone = append(gone, s)
			return true
		}
		return false
	})
	m.mu.Unlock()
	for _, s := range gone {
		m.end(s, ctxReason(s.ctx), nil)
	}
	for _, s := range m.slots {
		if s != nil && s.ctx.Err() != nil {
			m.end(s, ctxReason(s.ctx), nil)
		}
	}
}

func ctxReason(ctx context.Context) FinishReason {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return FinishDeadline
	}
	return FinishCancelled
}

// admit prefills waiting requests into free slots, within the stall bound
// when sequences are decoding. A decoder-only model admits one request at
// a time; an encoder-decoder admits every waiting request a free slot
// holds at once, so that their encoders run together (encodeAll), then
// prefills each.
func (m *Model) admit(ctx context.Context) {
	decoding := m.inUse.Load() > 0
	start := time.Now()
	for {
		seqs := m.take()
		if len(seqs) == 0 {
			return
		}
		if m.builder.encLayout != nil {
			seqs = m.encodeAll(ctx, seqs)
		}
		for _, s := range seqs {
			if err := m.prefill(ctx, s); err != nil {
				m.fail(s, err)
			}
		}
		if decoding && time.Since(start) >= m.cfg.MaxDecodeStall {
			return
		}
	}
}

// take moves waiting requests into free slots: one for a decoder-only
// model, as many as there are free slots for an encoder-decoder. Requests
// whose callers went away end instead.
func (m *Model) take() []*sequence {
	var out []*sequence
	for {
		slot := slices.Index(m.slots, nil)
		if slot < 0 || (len(out) > 0 && m.builder.encLayout == nil) {
			return out
		}
		m.mu.Lock()
		if len(m.pending) == 0 {
			m.mu.Unlock()
			return out
		}
		s := m.pending[0]
		m.pending = m.pending[1:]
		m.mu.Unlock()
		if s.ctx.Err() != nil {
			m.end(s, ctxReason(s.ctx), nil)
			continue
		}
		s.slot = slot
		m.slots[slot] = s
		m.inUse.Add(1)
		out = append(out, s)
	}
}

// prefill runs the prompt of s (in its slot, its encoder already run)
// and emits its first token.
func (m *Model) prefill(ctx context.Context, s *sequence) error {
	n := int64(len(s.req.Prompt))
	l := m.cfg.PrefillBuckets[slices.IndexFunc(m.cfg.PrefillBuckets, func(b int64) bool { return b >= n })]
	step, err := m.step(ctx, stepSpec{kind: prefill, batch: 1, tokens: l})
	if err != nil {
		return err
	}
	ids := tensor.New(m.dtypes[0], 1, l)
	pos := tensor.New(m.dtypes[1], 1, l)
	mask := tensor.New(m.dtypes[2], 1, prefillPast+l)
	for i := range l {
		tok := m.cfg.PadTokenID
		if i < n || m.layout.AtLength {
			// At length, the mask's count places the entries: the padding
			// counts (the prompt's tokens never see it, causally; the
			// decode overwrites its entries).
			mask.SetFloat64(prefillPast+i, 1)
		}
		if i < n {
			tok = s.req.Prompt[i]
		}
		ids.SetInt64(i, tok)
		pos.SetInt64(i, i)
	}
	slot := tensor.FromInt64s([]int64{int64(s.slot)}, 1)
	last := tensor.FromInt64s([]int64{n - 1}, 1)
	outs, err := m.run(ctx, step, m.withEncoderMask([]*tensor.Tensor{ids, pos, mask, slot, last}, []*sequence{s}))
	if err != nil {
		return err
	}
	m.stats.Prefills.Add(1)
	m.cached.Add(n - int64(s.cached))
	s.cached = int(n)
	m.emit(s, outs[0], 0)
	return nil
}

// decode runs one decode step over the slots in use.
func (m *Model) decode(ctx context.Context) {
	hi := int64(0)
	for i, s := range m.slots {
		if s != nil {
			hi = int64(i) + 1
		}
	}
	buckets := m.cfg.SlotBuckets
	b := buckets[slices.IndexFunc(buckets, func(x int64) bool { return x >= hi })]
	step, err := m.step(ctx, stepSpec{kind: decode, batch: b, tokens: 1})
	if err != nil {
		m.failAll(err)
		return
	}
	maxLen := int64(m.cfg.MaxSeqLen)
	ids := tensor.New(m.dtypes[0], b, 1)
	pos := tensor.New(m.dtypes[1], b, 1)
	mask := tensor.New(m.dtypes[2], b, maxLen+1)
	write := tensor.New(tensor.Int64, b)
	for r := range b {
		s := m.slots[r]
		if s == nil {
			ids.SetInt64(r, m.cfg.PadTokenID)
			mask.SetFloat64(r*(maxLen+1)+maxLen, 1)
			continue
		}
		c := int64(s.cached)
		ids.SetInt64(r, s.tokens[len(s.tokens)-1])
		pos.SetInt64(r, c)
		write.SetInt64(r, c)
		row := r * (maxLen + 1)
		for j := range c {
			mask.SetFloat64(row+j, 1)
		}
		mask.SetFloat64(row+maxLen, 1)
	}
	outs, err := m.run(ctx, step, m.withEncoderMask([]*tensor.Tensor{ids, pos, mask, write}, m.slots[:b]))
	if err != nil {
		m.failAll(err)
		return
	}
	m.stats.DecodeSteps.Add(1)
	for r := range b {
		if s := m.slots[r]; s != nil {
			s.cached++
			m.cached.Add(1)
			m.emit(s, outs[0], r)
		}
	}
}

// withEncoderMask appends an encoder-decoder's encoder mask of rows to a
// step's host inputs.
func (m *Model) withEncoderMask(hosts []*tensor.Tensor, rows []*sequence) []*tensor.Tensor {
	if mask := m.encoderMask(rows); mask != nil {
		hosts = append(hosts, mask)
	}
	return hosts
}

// run runs a step on the cache; when it fails the cache is gone, and a
// new one is allocated.
func (m *Model) run(ctx context.Context, step Step, hosts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	outs, cache, err := step.Run(ctx, hosts, m.cache)
	if err != nil {
		m.cache = nil
		if aerr := m.allocCache(ctx); aerr != nil {
			m.log.Error("cannot allocate a new cache after a failed step", "error", aerr)
		}
		return nil, fmt.Errorf("%w: %w", errCacheLost, err)
	}
	m.cache = cache
	return outs, nil
}

// emit samples the next token of s from row r of logits, sends it and ends
// s when it is done.
func (m *Model) emit(s *sequence, logits *tensor.Tensor, r int64) {
	v := logits.Shape[len(logits.Shape)-1]
	row := make([]float32, v)
	for i := range v {
		row[i] = float32(logits.Float64At(r*v + i))
	}
	tok := s.sampler.next(row, s.tokens)
	m.stats.Tokens.Add(1)
	if m.onToken != nil {
		now := time.Now()
		m.onToken(len(s.tokens) == len(s.req.Prompt), now.Sub(s.last))
		s.last = now
	}
	if (!s.req.IgnoreEOS && slices.Contains(m.eos, tok)) || slices.Contains(s.req.StopIDs, tok) {
		m.end(s, FinishStop, nil)
		return
	}
	s.tokens = append(s.tokens, tok)
	s.stream.push(Event{Token: tok})
	gen := s.generated()
	switch {
	case s.req.StopWhen != nil && s.req.StopWhen(gen):
		m.end(s, FinishStop, nil)
	case s.req.MaxTokens > 0 && len(gen) >= s.req.MaxTokens:
		m.end(s, FinishLength, nil)
	case s.cached >= m.cfg.MaxSeqLen:
		// The next step would write past the end of the slot.
		m.end(s, FinishLength, nil)
	}
}

// end sends the Done event of s and frees its slot.
func (m *Model) end(s *sequence, reason FinishReason, err error) {
	if s.slot >= 0 && s.slot < len(m.slots) && m.slots[s.slot] == s {
		m.slots[s.slot] = nil
		m.inUse.Add(-1)
		m.cached.Add(-int64(s.cached))
	}
	if !s.ended {
		s.ended = true
		m.stats.countEnd(reason)
	}
	s.stream.push(Event{Done: true, Reason: reason, Err: err, PromptTokens: len(s.req.Prompt), Generated: len(s.generated())})
	s.stream.cancel()
}

// fail ends s with err; when the cache was lost, every sequence in a slot
// ends with it.
func (m *Model) fail(s *sequence, err error) {
	m.log.Error("generation step failed", "error", err)
	if errors.Is(err, errCacheLost) {
		m.failAll(err)
	}
	m.end(s, FinishError, err)
}

// failAll ends every sequence in a slot with err.
func (m *Model) failAll(err error) {
	for _, s := range m.slots {
		if s != nil {
			m.end(s, FinishError, err)
		}
	}
}
