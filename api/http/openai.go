package httpapi

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/xserve/xserve/api/openai"
)

// openaiRoutes serves the OpenAI-compatible API (package openai) when the
// backend has generative models (it implements openai.Backend): POST
// /v1/completions and /v1/chat/completions (stream: true as server-sent
// events) and GET /v1/models. Otherwise those routes answer 404.
func (s *Server) openaiRoutes(get, post func(string, fiber.Handler)) {
	b, ok := s.backend.(openai.Backend)
	if !ok {
		return
	}
	h := openai.New(b, openai.Options{Logger: s.log, Timeout: s.opts.GenerateTimeout, WriteTimeout: s.opts.WriteTimeout})
	withBody := func(serve func(context.Context, *fiber.Ctx, []byte) error) fiber.Handler {
		return func(c *fiber.Ctx) error {
			body, err := s.body(c)
			if err != nil {
				return err
			}
			// A request that arrived before Shutdown runs to its end.
			ctx := trace.ContextWithSpan(s.ctx, trace.SpanFromContext(c.UserContext()))
			return serve(ctx, c, body)
		}
	}
	post("/v1/completions", withBody(h.Completions))
	post("/v1/chat/completions", withBody(h.Chat))
	get("/v1/models", h.Models)
	get("/v1/models/:model", func(c *fiber.Ctx) error {
		name, err := modelParam(c)
		if err != nil {
			return err
		}
		return h.Model(c, name)
	})
}
