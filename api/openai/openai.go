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
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/xserve/xserve/api/textgen"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tokenizer"
)

// Backend is what the API needs of the model server; *serving.Manager
// implements it.
type Backend interface {
	textgen.Backend
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
	MaxStops = textgen.MaxStops
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

// classify maps an error to its status, OpenAI type and code.
func classify(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, serving.ErrModelNotFound):
		return &apiError{http.StatusNotFound, "invalid_request_error", "model_not_found", err.Error()}
	case errors.Is(err, textgen.ErrInvalid), errors.Is(err, serving.ErrNotGenerative), errors.Is(err, generate.ErrInvalidRequest):
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

// fail answers a job's error in its protocol's format.
func (h *Handler) fail(c *fiber.Ctx, j *job, err error) error {
	if j.ext {
		return h.writeExtError(c, err)
	}
	return h.writeError(c, err)
}

// errorEvent is the streamed event that reports e.
func (j *job) errorEvent(e *apiError) any {
	if j.ext {
		return ExtError{Error: e.msg}
	}
	return ErrorBody{Error: ErrorDetail{Message: e.msg, Type: e.kind}}
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
func (h *Handler) Model(ctx context.Context, c *fiber.Ctx, name string) error {
	g, err := h.b.Generative(ctx, name, 0)
	if err != nil {
		return h.writeError(c, err)
	}
	g.Release()
	return c.JSON(Model{ID: name, Object: "model", Created: h.created, OwnedBy: "xserve"})
}

// job is one request being answered.
type job struct {
	*textgen.Job
	stream bool
	usage  bool // stream_options.include_usage
	chat   bool
	// ext answers in the KServe generate extension's format (kserve.go)
	// instead of OpenAI's.
	ext     bool
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
func serve[T any](ctx context.Context, h *Handler, c *fiber.Ctx, body []byte, what string, prepare func(context.Context, *T) (*job, error)) error {
	var r T
	if err := json.Unmarshal(body, &r); err != nil {
		return h.writeError(c, textgen.Invalid("the body is not a %s request: %v", what, err))
	}
	j, err := prepare(ctx, &r)
	if err != nil {
		return h.writeError(c, err)
	}
	return h.run(ctx, c, j)
}

// hold looks up the model and prepares the common fields of a job.
func (h *Handler) hold(ctx context.Context, model string, f *samplingFields, chat bool) (*job, error) {
	if model == "" {
		return nil, textgen.Invalid("model is required (one of GET /v1/models)")
	}
	tj, err := textgen.Hold(ctx, h.b, model, 0, &f.Params)
	if err != nil {
		return nil, err
	}
	j := &job{Job: tj, chat: chat, stream: f.Stream, created: time.Now().Unix(), id: newID(chat)}
	if f.StreamOptions != nil {
		j.usage = f.StreamOptions.IncludeUsage
	}
	return j, nil
}

func (h *Handler) completionJob(ctx context.Context, r *CompletionRequest) (*job, error) {
	switch {
	case r.Echo:
		return nil, textgen.Invalid("echo is not supported")
	case r.Suffix != nil && *r.Suffix != "":
		return nil, textgen.Invalid("suffix is not supported")
	case r.Logprobs != nil:
		return nil, textgen.Invalid("logprobs is not supported")
	case r.BestOf != nil && *r.BestOf != 1:
		return nil, textgen.Invalid("best_of must be 1")
	}
	j, err := h.hold(ctx, r.Model, &r.samplingFields, false)
	if err != nil {
		return nil, err
	}
	if err := j.completionPrompt(r.Prompt); err != nil {
		j.Release()
		return nil, err
	}
	j.DefaultMaxTokens(DefaultCompletionTokens)
	return j, nil
}

func (h *Handler) chatJob(ctx context.Context, r *ChatRequest) (*job, error) {
	switch {
	case r.Logprobs:
		return nil, textgen.Invalid("logprobs is not supported")
	case len(r.Tools) > 0 && string(r.Tools) != "null":
		return nil, textgen.Invalid("tools are not supported")
	case r.ResponseFormat != nil && r.ResponseFormat.Type != "" && r.ResponseFormat.Type != "text":
		return nil, textgen.Invalid("response_format %q is not supported", r.ResponseFormat.Type)
	case len(r.Messages) == 0:
		return nil, textgen.Invalid("messages must hold at least one message")
	}
	if r.MaxCompletionTokens != nil {
		r.MaxTokens = r.MaxCompletionTokens
	}
	j, err := h.hold(ctx, r.Model, &r.samplingFields, true)
	if err != nil {
		return nil, err
	}
	if err := j.chatPrompt(r.Messages); err != nil {
		j.Release()
		return nil, err
	}
	return j, nil
}

// completionPrompt reads a prompt: a string, a list of one string, a list
// of token ids or a list of one such list.
func (j *job) completionPrompt(raw json.RawMessage) error {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return j.PromptText(text, true)
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil && len(texts) > 0 {
		if len(texts) != 1 {
			return textgen.Invalid("prompt holds %d prompts; send one per request", len(texts))
		}
		return j.PromptText(texts[0], true)
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		j.PromptIDs(ids)
		return nil
	}
	var lists [][]int64
	if json.Unmarshal(raw, &lists) == nil && len(lists) == 1 {
		j.PromptIDs(lists[0])
		return nil
	}
	return textgen.Invalid("prompt must be a string or a list of token ids")
}

func (j *job) chatPrompt(msgs []ChatMessage) error {
	conv := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		text, err := m.text()
		if err != nil {
			return textgen.Invalid("messages[%d]: %v", i, err)
		}
		if m.Role == "" {
			return textgen.Invalid("messages[%d]: role is required", i)
		}
		conv[i] = tokenizer.Message{Role: m.Role, Content: text}
	}
	return j.PromptChat(conv)
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
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	s, err := j.Start(ctx)
	if err != nil {
		cancel()
		j.Release()
		return h.fail(c, j, err)
	}
	if !j.stream {
		defer j.Release()
		defer cancel()
		return h.whole(ctx, c, j, s)
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	conn := c.Context().Conn()
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer j.Release()
		defer cancel()
		h.stream(ctx, w, j, s, func() {
			if h.write > 0 {
				extendWriteDeadline(conn, h.write)
			}
		})
	})
	return nil
}

// extendWriteDeadline moves conn's write deadline d from now. The stream
// writer runs in a goroutine of its own (fasthttp's body stream), which can
// outlive the connection when the client goes away: fasthttp's per-IP
// connection wrapper then has no connection left and panics, so the call
// is guarded; the stream ends at its next write, which fails.
func extendWriteDeadline(conn net.Conn, d time.Duration) {
	defer func() { _ = recover() }()
	_ = conn.SetWriteDeadline(time.Now().Add(d))
}

// whole answers a sequence in one response.
func (h *Handler) whole(ctx context.Context, c *fiber.Ctx, j *job, s *textgen.Stream) error {
	defer s.Close()
	var text []byte
	for {
		p, err := s.Next(ctx)
		if err != nil {
			return h.fail(c, j, err)
		}
		text = append(text, p.Text...)
		if p.Done {
			return c.JSON(j.answer(string(text), p.Reason, usage(p)))
		}
	}
}

// stream writes the sequence's server-sent events; a client that goes
// away ends the sequence (its slot is freed at the next step).
func (h *Handler) stream(ctx context.Context, w *bufio.Writer, j *job, s *textgen.Stream, deadline func()) {
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
		p, err := s.Next(ctx)
		if err != nil {
			send(j.errorEvent(classify(err)))
			return
		}
		if !p.Done {
			if !send(j.chunk(nil, p.Text, nil, false)) {
				h.log.Debug("openai stream: the client went away", "id", j.id)
				return
			}
			continue
		}
		if !send(j.chunk(&p.Reason, p.Text, nil, false)) {
			return
		}
		if j.usage && !send(j.chunk(nil, "", usage(p), false)) {
			return
		}
		if j.ext {
			return // the generate extension has no end marker
		}
		deadline()
		fmt.Fprint(w, "data: [DONE]\n\n")
		w.Flush()
		return
	}
}

func usage(p textgen.Piece) *Usage {
	return &Usage{PromptTokens: p.PromptTokens, CompletionTokens: p.Generated, TotalTokens: p.PromptTokens + p.Generated}
}

// answer builds the whole answer of a job.
func (j *job) answer(text, reason string, u *Usage) any {
	if j.ext {
		return j.extAnswer(text, reason)
	}
	if j.chat {
		return ChatCompletion{ID: j.id, Object: "chat.completion", Created: j.created, Model: j.Model(), Usage: u,
			Choices: []ChatChoice{{Message: &AssistantMessage{Role: "assistant", Content: &text}, FinishReason: &reason}}}
	}
	return Completion{ID: j.id, Object: "text_completion", Created: j.created, Model: j.Model(), Usage: u,
		Choices: []CompletionChoice{{Text: text, FinishReason: &reason}}}
}

// chunk builds one streamed chunk: a delta, the end (reason set), the
// usage (choices empty) or, for chat, the first chunk with the role.
func (j *job) chunk(reason *string, delta string, u *Usage, first bool) any {
	if j.ext {
		return j.extAnswer(delta, deref(reason))
	}
	if j.chat {
		c := ChatCompletion{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.Model(), Usage: u, Choices: []ChatChoice{}}
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
	c := Completion{ID: j.id, Object: "text_completion", Created: j.created, Model: j.Model(), Usage: u, Choices: []CompletionChoice{}}
	if u == nil {
		c.Choices = []CompletionChoice{{Text: delta, FinishReason: reason}}
	}
	return c
}
