package openai

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/xserve/xserve/api/textgen"
)

// The generate extension of KServe's and Triton's HTTP protocol, which
// shares this package's text path (tokenizer, stop strings, sampling):
//
//	POST /v2/models/{m}[/versions/{v}]/generate         {"text_input": "...", "parameters": {...}}
//	  -> {"model_name": m, "model_version": v, "text_output": "...", "finish_reason": "stop"|"length"}
//	POST /v2/models/{m}[/versions/{v}]/generate_stream  (the same body)
//	  -> server-sent events, one such object per piece of text (the last has finish_reason)
//
// parameters take the sampling fields of the OpenAI API by the same names
// (max_tokens, temperature, top_p, top_k, seed, stop, repetition_penalty,
// ignore_eos, stop_token_ids); unknown ones are ignored, as Triton does.
// The default temperature is 1 (set temperature 0 for greedy decoding) and
// max_tokens, when not given, is DefaultCompletionTokens. Errors are
// {"error": "..."} with the status of the OpenAI API's; in a stream, an
// event {"error": "..."} ends it.

// GenerateRequest is the body of the generate extension's requests.
type GenerateRequest = textgen.GenerateRequest

// GenerateResponse is the answer of generate and each event of
// generate_stream.
type GenerateResponse = textgen.GenerateResponse

// ExtError is the error body (and error event) of the generate extension.
type ExtError struct {
	Error string `json:"error"`
}

// Generate answers POST /v2/models/{model}[/versions/{version}]/generate
// (stream false) and .../generate_stream (stream true).
func (h *Handler) Generate(ctx context.Context, c *fiber.Ctx, model string, version int64, body []byte, stream bool) error {
	var r GenerateRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return h.writeExtError(c, textgen.Invalid("the body is not a generate request: %v", err))
	}
	if r.TextInput == nil {
		return h.writeExtError(c, textgen.Invalid("text_input is required"))
	}
	if model == "" {
		return h.writeExtError(c, textgen.Invalid("the URL names no model"))
	}
	tj, err := textgen.Hold(ctx, h.b, model, version, &r.Parameters)
	if err != nil {
		return h.writeExtError(c, err)
	}
	j := &job{Job: tj, stream: stream, ext: true, id: r.ID}
	if err := j.PromptText(*r.TextInput, true); err != nil {
		j.Release()
		return h.writeExtError(c, err)
	}
	j.DefaultMaxTokens(DefaultCompletionTokens)
	return h.run(ctx, c, j)
}

// extAnswer is the generate extension's answer carrying text.
func (j *job) extAnswer(text, reason string) GenerateResponse {
	return GenerateResponse{ID: j.id, ModelName: j.Model(), ModelVersion: strconv.FormatInt(j.Version(), 10), TextOutput: text, FinishReason: reason}
}

// writeExtError answers err in the generate extension's error format.
func (h *Handler) writeExtError(c *fiber.Ctx, err error) error {
	e := classify(err)
	if e.status >= 500 {
		h.log.Error("generate request failed", "path", c.Path(), "status", e.status, "error", err)
	}
	if e.status == fiber.StatusTooManyRequests {
		c.Set(fiber.HeaderRetryAfter, "1")
	}
	return c.Status(e.status).JSON(ExtError{Error: e.msg})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
