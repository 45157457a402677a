// Package textgen is text generation on a generative model version,
// whatever the protocol: a prompt (text, token ids or a conversation) and
// sampling parameters named as the OpenAI API names them go in; the text
// comes out in pieces as the tokens are generated, cut at the first stop
// string (text that may begin one is held back until it cannot). The
// OpenAI-compatible API and the KServe generate extension (api/openai) and
// gRPC's ModelStreamInfer (api/grpc) answer from it.
package textgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tokenizer"
)

// Backend is what text generation needs of the model server;
// *serving.Manager implements it.
type Backend interface {
	// Generative holds a READY generative version of model (0: latest),
	// waiting within ctx for a model that loads on demand.
	Generative(ctx context.Context, model string, version int64) (*serving.Generative, error)
}

var _ Backend = (*serving.Manager)(nil)

// MaxStops is the most stop strings a request may give.
const MaxStops = 4

// ErrInvalid marks an error in the request (a client error).
var ErrInvalid = errors.New("invalid request")

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an error in the request, errors.Is ErrInvalid, whose
// message is the formatted text alone.
func Invalid(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Params are a request's sampling parameters and stop conditions, named
// (and in JSON spelt) as the OpenAI API names them, with the extensions
// other OpenAI-compatible servers (vLLM) take too. Nil means not given.
type Params struct {
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`

	TopK              *int     `json:"top_k"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	IgnoreEOS         bool     `json:"ignore_eos"`
	StopTokenIDs      []int64  `json:"stop_token_ids"`
}

// Job is a generation being prepared: its model version held, its
// parameters read. Give it a prompt, then Start it; Release gives the
// version back.
type Job struct {
	g      *serving.Generative
	prompt []int64
	req    generate.Request
	stops  []string
	// maxGiven says whether the request set max_tokens.
	maxGiven bool
}

// Hold looks up a READY generative version of model (0: the latest) that
// has a tokenizer and reads p into a job; ctx bounds the wait for a model
// that loads on demand.
func Hold(ctx context.Context, b Backend, model string, version int64, p *Params) (*Job, error) {
	g, err := b.Generative(ctx, model, version)
	if err != nil {
		return nil, err
	}
	if g.Tokenizer == nil {
		g.Release()
		return nil, Invalid("model %s has no tokenizer (tokenizer.json in its version directory), which text generation needs", model)
	}
	j := &Job{g: g}
	if err := j.params(p); err != nil {
		g.Release()
		return nil, err
	}
	return j, nil
}

// Model and Version name the job's model version.
func (j *Job) Model() string { return j.g.Model }

// Version is the job's model version.
func (j *Job) Version() int64 { return j.g.Version }

// Release gives the model version back; it is safe to call twice.
func (j *Job) Release() { j.g.Release() }

// DefaultMaxTokens sets max_tokens when the request gave none (0: until
// the cache slot is full).
func (j *Job) DefaultMaxTokens(n int) {
	if !j.maxGiven {
		j.req.MaxTokens = n
	}
}

// PromptText tokenizes text as the prompt (with the tokenizer's special
// tokens, such as BOS, when special).
func (j *Job) PromptText(text string, special bool) error {
	ids, err := j.g.Tokenizer.Encode(text, special)
	if err != nil {
		return Invalid("the prompt does not tokenize: %v", err)
	}
	j.prompt = ids
	return nil
}

// PromptIDs sets the prompt's token ids.
func (j *Job) PromptIDs(ids []int64) { j.prompt = ids }

// PromptChat renders a conversation with the model's chat template,
// ready for the assistant's answer, as the prompt.
func (j *Job) PromptChat(msgs []tokenizer.Message) error {
	if !j.g.Tokenizer.HasChatTemplate() {
		return Invalid("model %s has no chat template (tokenizer_config.json chat_template or chat_template.jinja)", j.g.Model)
	}
	text, err := j.g.Tokenizer.Chat(msgs, true)
	if err != nil {
		return Invalid("messages: %v", err)
	}
	return j.PromptText(text, false)
}

// params reads p into the generation request.
func (j *Job) params(p *Params) error {
	s, err := sampling(p)
	if err != nil {
		return err
	}
	for _, q := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", p.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty}} {
		if q.v != nil && *q.v != 0 {
			return Invalid("%s is not supported (use repetition_penalty)", q.name)
		}
	}
	if p.N != nil && *p.N != 1 {
		return Invalid("n must be 1")
	}
	if p.MaxTokens != nil {
		if *p.MaxTokens < 1 {
			return Invalid("max_tokens must be >= 1, got %d", *p.MaxTokens)
		}
		j.req.MaxTokens, j.maxGiven = *p.MaxTokens, true
	}
	if j.stops, err = ParseStop(p.Stop); err != nil {
		return err
	}
	j.req.Sampling = s
	j.req.IgnoreEOS = p.IgnoreEOS
	j.req.StopIDs = p.StopTokenIDs
	return nil
}

// sampling reads temperature, top_p, top_k, repetition_penalty and seed,
// with OpenAI's defaults (temperature 1, top_p 1).
func sampling(p *Params) (generate.Sampling, error) {
	s := generate.Sampling{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	if p.Temperature != nil {
		if *p.Temperature < 0 || *p.Temperature > 2 {
			return s, Invalid("temperature must be in [0, 2], got %v", *p.Temperature)
		}
		s.Temperature = *p.Temperature
	}
	if p.TopP != nil {
		if *p.TopP <= 0 || *p.TopP > 1 {
			return s, Invalid("top_p must be in (0, 1], got %v", *p.TopP)
		}
		s.TopP = *p.TopP
	}
	if p.TopK != nil {
		if *p.TopK < -1 {
			return s, Invalid("top_k must be -1, 0 or positive, got %d", *p.TopK)
		}
		s.TopK = max(*p.TopK, 0)
	}
	if p.RepetitionPenalty != nil {
		if *p.RepetitionPenalty <= 0 || math.IsInf(*p.RepetitionPenalty, 0) {
			return s, Invalid("repetition_penalty must be > 0, got %v", *p.RepetitionPenalty)
		}
		s.RepetitionPenalty = *p.RepetitionPenalty
	}
	if p.Seed != nil {
		s.Seed, s.HasSeed = uint64(*p.Seed), true
	}
	return s, nil
}

// ParseStop reads stop: a string or a list of at most MaxStops strings
// (empty ones dropped).
func ParseStop(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, Invalid("stop must be a string or a list of strings")
	}
	if len(list) > MaxStops {
		return nil, Invalid("stop holds %d strings, at most %d", len(list), MaxStops)
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// Start starts the job's sequence. The job stays held: Release it once the
// stream is done.
func (j *Job) Start(ctx context.Context) (*Stream, error) {
	j.req.Prompt = j.prompt
	out := &output{tok: j.g.Tokenizer, prompt: j.prompt, stops: j.stops}
	switch {
	case j.g.Loop.TextEncoder():
		// An encoder-decoder (T5, BART): the prompt is the encoder's input,
		// the decoder starts from generate.decoder_start_token_id.
		j.req.EncoderIDs, j.req.Prompt, out.prompt = j.prompt, nil, nil
	case j.g.Loop.EncoderDecoder():
		return nil, Invalid("model %s's encoder takes a features tensor (generate.encoder), not text: serving's generation API takes it", j.g.Model)
	}
	if len(j.stops) > 0 {
		j.req.StopWhen = out.stopWatch()
	}
	s, err := j.g.Loop.Generate(ctx, j.req)
	if err != nil {
		return nil, err
	}
	return &Stream{s: s, out: out}, nil
}

// Stream is a running generation's text.
type Stream struct {
	s   *generate.Stream
	out *output
}

// Piece is the text a stream released since its last piece.
type Piece struct {
	Text string
	// Done marks the last piece, which says why the sequence ended
	// (Reason: "stop" or "length") and how many tokens it counted.
	Done bool
	// Reason is "stop" (an eos or stop id or string) or "length"
	// (max_tokens or the cache slot full), in the last piece.
	Reason string
	// PromptTokens and Generated count the tokens, in the last piece.
	PromptTokens, Generated int
}

// Next returns the next non-empty piece of text, or the last piece (Done).
// A sequence that ends otherwise than by stop or length (a deadline, a
// cancellation, a failure) is an error.
func (s *Stream) Next(ctx context.Context) (Piece, error) {
	for {
		ev, err := s.s.Next(ctx)
		if err != nil {
			return Piece{}, err
		}
		if ev.Done {
			if err := endError(ev); err != nil {
				return Piece{}, err
			}
			if err := s.out.add(ev); err != nil {
				return Piece{}, err
			}
			return Piece{Text: s.out.take(true), Done: true, Reason: reason(ev.Reason), PromptTokens: ev.PromptTokens, Generated: ev.Generated}, nil
		}
		if err := s.out.add(ev); err != nil {
			return Piece{}, err
		}
		if text := s.out.take(false); text != "" {
			return Piece{Text: text}, nil
		}
	}
}

// Close ends the sequence, if it runs still (its slot is freed at the next
// step). It is safe to call twice.
func (s *Stream) Close() { s.s.Close() }

// endError is the error a sequence's end reports, nil for stop and
// length.
func endError(ev generate.Event) error {
	switch ev.Reason {
	case generate.FinishStop, generate.FinishLength:
		return nil
	case generate.FinishDeadline:
		return fmt.Errorf("the request's deadline passed after %d tokens: %w", ev.Generated, context.DeadlineExceeded)
	case generate.FinishCancelled:
		if ev.Err != nil {
			return ev.Err
		}
		return fmt.Errorf("%w: the request was cancelled", serving.ErrClosed)
	}
	if ev.Err != nil {
		return ev.Err
	}
	return errors.New("generation failed")
}

func reason(r generate.FinishReason) string {
	if r == generate.FinishLength {
		return "length"
	}
	return "stop"
}
