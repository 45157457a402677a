package openai

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tokenizer"
)

// Backend is what the API needs of the model server; *serving.Manager
// implements it.
type Backend interface {
	// Generative holds a READY generative version of model (0: latest).
	Generative(model string, version int64) (*serving.Generative, error)
	// GenerativeModels lists the models with a READY generative version.
	GenerativeModels() []string
}

var _ Backend = (*serving.Manager)(nil)

// Defaults and limits.
const (
	// DefaultTimeout is Options.Timeout when it is zero.
	DefaultTimeout = 10 * time.Minute
	// DefaultCompletionTokens is max_tokens of a completion that gives
	// none, as OpenAI's API.
	DefaultCompletionTokens = 16
	// MaxStops is the most stop strings a request may give.
	MaxStops = 4
)

// Options configure a Handler.
type Options struct {
	// Timeout bounds a request (its sequence ends with it); default 10m.
	Timeout time.Duration
	// Logger gets the handler's log lines; nil means slog.Default().
	Logger *slog.Logger
	// WriteTimeout, when set, bounds the write of each event of a streamed
	// answer (the connection's write deadline moves with each event).
	WriteTimeout time.Duration
}

// Handler answers the OpenAI-compatible API from a Backend. The HTTP
// server routes POST /v1/completions, POST /v1/chat/completions, GET
// /v1/models and GET /v1/models/{model} to it.
type Handler struct {
	b       Backend
	timeout time.Duration
	write   time.Duration
	log     *slog.Logger
	created int64
}

// New returns a Handler answering from b.
func New(b Backend, o Options) *Handler {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Handler{b: b, timeout: o.Timeout, write: o.WriteTimeout, log: o.Logger, created: time.Now().Unix()}
}

// apiError is an error with its status and OpenAI error type.
type apiError struct {
	status int
	kind   string
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, kind: "invalid_request_error", msg: fmt.Sprintf(format, args...)}
}

// classify maps an error to its status, OpenAI type and code.
func classify(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, serving.ErrModelNotFound):
		return &apiError{http.StatusNotFound, "invalid_request_error", "model_not_found", err.Error()}
	case errors.Is(err, serving.ErrNotGenerative), errors.Is(err, generate.ErrInvalidRequest):
		return &apiError{http.StatusBadRequest, "invalid_request_error", "", err.Error()}
	case errors.Is(err, generate.ErrOverloaded):
		return &apiError{http.StatusTooManyRequests, "rate_limit_error", "", err.Error()}
	case errors.Is(err, serving.ErrNotReady), errors.Is(err, serving.ErrClosed), errors.Is(err, generate.ErrClosed):
		return &apiError{http.StatusServiceUnavailable, "server_error", "", err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{http.StatusGatewayTimeout, "server_error", "timeout", err.Error()}
	}
	return &apiError{http.StatusInternalServerError, "server_error", "", err.Error()}
}

// writeError answers err in OpenAI's error format.
func (h *Handler) writeError(c *fiber.Ctx, err error) error {
	e := classify(err)
	if e.status >= 500 {
		h.log.Error("openai request failed", "path", c.Path(), "status", e.status, "error", err)
	}
	body := ErrorBody{Error: ErrorDetail{Message: e.msg, Type: e.kind}}
	if e.code != "" {
		body.Error.Code = &e.code
	}
	if e.status == http.StatusTooManyRequests {
		c.Set(fiber.HeaderRetryAfter, "1")
	}
	return c.Status(e.status).JSON(body)
}

// Models answers GET /v1/models.
func (h *Handler) Models(c *fiber.Ctx) error {
	list := ModelList{Object: "list", Data: []Model{}}
	for _, name := range h.b.GenerativeModels() {
		list.Data = append(list.Data, Model{ID: name, Object: "model", Created: h.created, OwnedBy: "xserve"})
	}
	return c.JSON(list)
}

// Model answers GET /v1/models/{model}.
func (h *Handler) Model(c *fiber.Ctx, name string) error {
	g, err := h.b.Generative(name, 0)
	if err != nil {
		return h.writeError(c, err)
	}
	g.Release()
	return c.JSON(Model{ID: name, Object: "model", Created: h.created, OwnedBy: "xserve"})
}

// job is one request being answered.
type job struct {
	g       *serving.Generative
	tok     *tokenizer.Tokenizer
	prompt  []int64
	req     generate.Request
	stops   []string
	stream  bool
	usage   bool // stream_options.include_usage
	chat    bool
	id      string
	created int64
}

// Completions answers POST /v1/completions with the request body.
func (h *Handler) Completions(ctx context.Context, c *fiber.Ctx, body []byte) error {
	return serve(ctx, h, c, body, "completion", h.completionJob)
}

// Chat answers POST /v1/chat/completions with the request body.
func (h *Handler) Chat(ctx context.Context, c *fiber.Ctx, body []byte) error {
	return serve(ctx, h, c, body, "chat completion", h.chatJob)
}

// serve decodes a request of type T, prepares its job and answers it.
func serve[T any](ctx context.Context, h *Handler, c *fiber.Ctx, body []byte, what string, prepare func(*T) (*job, error)) error {
	var r T
	if err := json.Unmarshal(body, &r); err != nil {
		return h.writeError(c, invalid("the body is not a %s request: %v", what, err))
	}
	j, err := prepare(&r)
	if err != nil {
		return h.writeError(c, err)
	}
	return h.run(ctx, c, j)
}

// hold looks up the model and prepares the common fields of a job.
func (h *Handler) hold(model string, f *samplingFields, chat bool) (*job, error) {
	if model == "" {
		return nil, invalid("model is required (one of GET /v1/models)")
	}
	g, err := h.b.Generative(model, 0)
	if err != nil {
		return nil, err
	}
	if g.Tokenizer == nil {
		g.Release()
		return nil, invalid("model %s has no tokenizer (tokenizer.json in its version directory), which the OpenAI API needs", model)
	}
	j := &job{g: g, tok: g.Tokenizer, chat: chat, stream: f.Stream, created: time.Now().Unix(), id: newID(chat)}
	if f.StreamOptions != nil {
		j.usage = f.StreamOptions.IncludeUsage
	}
	if err := j.sampling(f); err != nil {
		g.Release()
		return nil, err
	}
	return j, nil
}

func (h *Handler) completionJob(r *CompletionRequest) (*job, error) {
	switch {
	case r.Echo:
		return nil, invalid("echo is not supported")
	case r.Suffix != nil && *r.Suffix != "":
		return nil, invalid("suffix is not supported")
	case r.Logprobs != nil:
		return nil, invalid("logprobs is not supported")
	case r.BestOf != nil && *r.BestOf != 1:
		return nil, invalid("best_of must be 1")
	}
	j, err := h.hold(r.Model, &r.samplingFields, false)
	if err != nil {
		return nil, err
	}
	if j.prompt, err = j.completionPrompt(r.Prompt); err != nil {
		j.g.Release()
		return nil, err
	}
	if j.req.MaxTokens == 0 && r.MaxTokens == nil {
		j.req.MaxTokens = DefaultCompletionTokens
	}
	return j, nil
}

func (h *Handler) chatJob(r *ChatRequest) (*job, error) {
	switch {
	case r.Logprobs:
		return nil, invalid("logprobs is not supported")
	case len(r.Tools) > 0 && string(r.Tools) != "null":
		return nil, invalid("tools are not supported")
	case r.ResponseFormat != nil && r.ResponseFormat.Type != "" && r.ResponseFormat.Type != "text":
		return nil, invalid("response_format %q is not supported", r.ResponseFormat.Type)
	case len(r.Messages) == 0:
		return nil, invalid("messages must hold at least one message")
	}
	if r.MaxCompletionTokens != nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	j, err := h.hold(r.Model, &r.samplingFields, true)
	if err != nil {
		return nil, err
	}
	if j.prompt, err = j.chatPrompt(r.Messages); err != nil {
		j.g.Release()
		return nil, err
	}
	return j, nil
}

// sampling reads the sampling fields into the generation request.
func (j *job) sampling(f *samplingFields) error {
	s, err := samplingParams(f)
	if err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", f.PresencePenalty}, {"frequency_penalty", f.FrequencyPenalty}} {
		if p.v != nil && *p.v != 0 {
			return invalid("%s is not supported (use repetition_penalty)", p.name)
		}
	}
	if f.N != nil && *f.N != 1 {
		return invalid("n must be 1")
	}
	if f.MaxTokens != nil {
		if *f.MaxTokens < 1 {
			return invalid("max_tokens must be >= 1, got %d", *f.MaxTokens)
		}
		j.req.MaxTokens = *f.MaxTokens
	}
	if j.stops, err = parseStop(f.Stop); err != nil {
		return err
	}
	j.req.Sampling = s
	j.req.IgnoreEOS = f.IgnoreEOS
	j.req.StopIDs = f.StopTokenIDs
	return nil
}

// samplingParams reads temperature, top_p, top_k, repetition_penalty and
// seed, with OpenAI's defaults (temperature 1, top_p 1).
func samplingParams(f *samplingFields) (generate.Sampling, error) {
	s := generate.Sampling{Temperature: 1, TopP: 1, RepetitionPenalty: 1}
	if f.Temperature != nil {
		if *f.Temperature < 0 || *f.Temperature > 2 {
			return s, invalid("temperature must be in [0, 2], got %v", *f.Temperature)
		}
		s.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		if *f.TopP <= 0 || *f.TopP > 1 {
			return s, invalid("top_p must be in (0, 1], got %v", *f.TopP)
		}
		s.TopP = *f.TopP
	}
	if f.TopK != nil {
		if *f.TopK < -1 {
			return s, invalid("top_k must be -1, 0 or positive, got %d", *f.TopK)
		}
		s.TopK = max(*f.TopK, 0)
	}
	if f.RepetitionPenalty != nil {
		if *f.RepetitionPenalty <= 0 || math.IsInf(*f.RepetitionPenalty, 0) {
			return s, invalid("repetition_penalty must be > 0, got %v", *f.RepetitionPenalty)
		}
		s.RepetitionPenalty = *f.RepetitionPenalty
	}
	if f.Seed != nil {
		s.Seed, s.HasSeed = uint64(*f.Seed), true
	}
	return s, nil
}

func parseStop(raw json.RawMessage) ([]string, error) {
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
		return nil, invalid("stop must be a string or a list of strings")
	}
	if len(list) > MaxStops {
		return nil, invalid("stop holds %d strings, at most %d", len(list), MaxStops)
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// completionPrompt reads a prompt: a string, a list of one string, a list
// of token ids or a list of one such list.
func (j *job) completionPrompt(raw json.RawMessage) ([]int64, error) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return j.encode(text, true)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) > 0 {
		if len(texts) != 1 {
			return nil, invalid("prompt holds %d prompts; send one per request", len(texts))
		}
		return j.encode(texts[0], true)
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return ids, nil
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) == nil && len(lists) == 1 {
		return lists[0], nil
	}
	return nil, invalid("prompt must be a string or a list of token ids")
}

func (j *job) encode(text string, special bool) ([]int64, error) {
	ids, err := j.tok.Encode(text, special)
	if err != nil {
		return nil, invalid("the prompt does not tokenize: %v", err)
	}
	return ids, nil
}

func (j *job) chatPrompt(msgs []ChatMessage) ([]int64, error) {
	if !j.tok.HasChatTemplate() {
		return nil, invalid("model %s has no chat template (tokenizer_config.json chat_template or chat_template.jinja): use /v1/completions", j.g.Model)
	}
	conv := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		text, err := m.text()
		if err != nil {
			return nil, invalid("messages[%d]: %v", i, err)
		}
		if m.Role == "" {
			return nil, invalid("messages[%d]: role is required", i)
		}
		conv[i] = tokenizer.Message{Role: m.Role, Content: text}
	}
	text, err := j.tok.Chat(conv, true)
	if err != nil {
		return nil, invalid("messages: %v", err)
	}
	return j.encode(text, false)
}

func newID(chat bool) string {
	var b [12]byte
	rand.Read(b[:])
	if chat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

// run starts the sequence and answers it, streamed or whole.
func (h *Handler) run(ctx context.Context, c *fiber.Ctx, j *job) error {
	j.req.Prompt = j.prompt
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	out := &output{job: j}
	if len(j.stops) > 0 {
		j.req.StopWhen = out.stopWatch()
	}
	s, err := j.g.Loop.Generate(ctx, j.req)
	if err != nil {
		cancel()
		j.g.Release()
		return h.writeError(c, err)
	}
	if !j.stream {
		defer j.g.Release()
		defer cancel()
		return h.whole(ctx, c, s, out)
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	conn := c.Context().Conn()
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer j.g.Release()
		defer cancel()
		h.stream(ctx, w, s, out, func() {
			if h.write > 0 {
				conn.SetWriteDeadline(time.Now().Add(h.write))
			}
		})
	})
	return nil
}

// whole answers a sequence in one response.
func (h *Handler) whole(ctx context.Context, c *fiber.Ctx, s *generate.Stream, out *output) error {
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			s.Close()
			return h.writeError(c, err)
		}
		if ev.Done {
			if err := endError(ev); err != nil {
				return h.writeError(c, err)
			}
			out.add(ev)
			text := out.text + out.held
			return c.JSON(out.job.answer(text, finish(ev.Reason), usage(ev), false))
		}
		if err := out.add(ev); err != nil {
			s.Close()
			return h.writeError(c, err)
		}
	}
}

// stream writes the sequence's server-sent events; a client that goes
// away ends the sequence (its slot is freed at the next step).
func (h *Handler) stream(ctx context.Context, w *bufio.Writer, s *generate.Stream, out *output, deadline func()) {
	j := out.job
	send := func(v any) bool {
		deadline()
		data, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		return w.Flush() == nil
	}
	defer s.Close()
	if j.chat && !send(j.chunk(nil, "", nil, true)) {
		return
	}
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			send(ErrorBody{Error: ErrorDetail{Message: err.Error(), Type: "server_error"}})
			return
		}
		if ev.Done {
			if err := endError(ev); err != nil {
				e := classify(err)
				send(ErrorBody{Error: ErrorDetail{Message: e.msg, Type: e.kind}})
				return
			}
			out.add(ev)
			r := finish(ev.Reason)
			if !send(j.chunk(&r, out.take(true), nil, false)) {
				return
			}
			if j.usage && !send(j.chunk(nil, "", usage(ev), false)) {
				return
			}
			deadline()
			fmt.Fprint(w, "data: [DONE]\n\n")
			w.Flush()
			return
		}
		if err := out.add(ev); err != nil {
			send(ErrorBody{Error: ErrorDetail{Message: err.Error(), Type: "server_error"}})
			return
		}
		if delta := out.take(false); delta != "" && !send(j.chunk(nil, delta, nil, false)) {
			h.log.Debug("openai stream: the client went away", "id", j.id)
			return
		}
	}
}

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

func finish(r generate.FinishReason) string {
	if r == generate.FinishLength {
		return "length"
	}
	return "stop"
}

func usage(ev generate.Event) *Usage {
	return &Usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.Generated, TotalTokens: ev.PromptTokens + ev.Generated}
}

// answer builds the whole answer of a job.
func (j *job) answer(text, reason string, u *Usage, _ bool) any {
	if j.chat {
		return ChatCompletion{ID: j.id, Object: "chat.completion", Created: j.created, Model: j.g.Model, Usage: u,
			Choices: []ChatChoice{{Message: &AssistantMessage{Role: "assistant", Content: &text}, FinishReason: &reason}}}
	}
	return Completion{ID: j.id, Object: "text_completion", Created: j.created, Model: j.g.Model, Usage: u,
		Choices: []CompletionChoice{{Text: text, FinishReason: &reason}}}
}

// chunk builds one streamed chunk: a delta, the end (reason set), the
// usage (choices empty) or, for chat, the first chunk with the role.
func (j *job) chunk(reason *string, delta string, u *Usage, first bool) any {
	if j.chat {
		c := ChatCompletion{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.g.Model, Usage: u, Choices: []ChatChoice{}}
		if u == nil {
			d := &AssistantMessage{}
			if first {
				d.Role = "assistant"
				d.Content = new(string)
			} else if delta != "" || reason == nil {
				d.Content = &delta
			}
			c.Choices = []ChatChoice{{Delta: d, FinishReason: reason}}
		}
		return c
	}
	c := Completion{ID: j.id, Object: "text_completion", Created: j.created, Model: j.g.Model, Usage: u, Choices: []CompletionChoice{}}
	if u == nil {
		c.Choices = []CompletionChoice{{Text: delta, FinishReason: reason}}
	}
	return c
}

// output turns a sequence's tokens into its text: the text decoded so
// far, minus what a stop string may still claim (held back), cut at the
// first stop string.
type output struct {
	job     *job
	detok   *tokenizer.Detokenizer
	text    string // decoded and released
	held    string // decoded, held back while it may begin a stop string
	stopped bool   // a stop string was found: text ends before it
}

func (o *output) add(ev generate.Event) error {
	j := o.job
	if o.stopped {
		return nil
	}
	if o.detok == nil {
		o.detok = j.tok.NewDetokenizer(j.prompt)
	}
	var delta string
	var err error
	if ev.Done {
		delta, err = o.detok.Flush()
	} else {
		delta, err = o.detok.Add(ev.Token)
	}
	if err != nil {
		return err
	}
	o.held += delta
	o.cut(ev.Done)
	return nil
}

// cut moves the text no stop string can claim from held to text.
func (o *output) cut(final bool) {
	stops := o.job.stops
	for _, s := range stops {
		if i := strings.Index(o.held, s); i >= 0 {
			o.held, o.stopped = o.held[:i], true
		}
	}
	if o.stopped || final || len(stops) == 0 {
		o.text += o.held
		o.held = ""
		return
	}
	longest := 0
	for _, s := range stops {
		longest = max(longest, len(s))
	}
	keep := len(o.held) - (longest - 1)
	for keep > 0 && keep < len(o.held) && !utf8.RuneStart(o.held[keep]) {
		keep--
	}
	if keep > 0 {
		o.text += o.held[:keep]
		o.held = o.held[keep:]
	}
}

// take returns the text released since the last take (with final, all of
// it).
func (o *output) take(final bool) string {
	if final {
		o.text += o.held
		o.held = ""
	}
	s := o.text
	o.text = ""
	return s
}

// stopWatch returns the loop's stop condition for the job's stop
// strings: the generated text (decoded in the loop's own detokenizer)
// holds one.
func (o *output) stopWatch() func([]int64) bool {
	j := o.job
	var d *tokenizer.Detokenizer
	var text string
	longest := 0
	for _, s := range j.stops {
		longest = max(longest, len(s))
	}
	return func(gen []int64) bool {
		if d == nil {
			d = j.tok.NewDetokenizer(j.prompt)
		}
		delta, err := d.Add(gen[len(gen)-1])
		if err != nil {
			return false
		}
		text += delta
		for _, s := range j.stops {
			if strings.Contains(text, s) {
				return true
			}
		}
		if len(text) > 4*longest {
			text = text[len(text)-2*longest:]
		}
		return false
	}
}
