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
// events) and GET /v1/models; and the KServe generate extension, POST
// /v2/models/{m}[/versions/{v}]/generate and generate_stream (server-sent
// events). Otherwise those routes answer 404.
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
	generate := func(stream bool) func(context.Context, *fiber.Ctx, []byte) error {
		return func(ctx context.Context, c *fiber.Ctx, body []byte) error {
			model, version, err := modelVersionParams(c)
			if err != nil {
				return err
			}
			return h.Generate(ctx, c, model, version, body, stream)
		}
	}
	for _, base := range []string{"/v2/models/:model", "/v2/models/:model/versions/:version"} {
		post(base+"/generate", withBody(generate(false)))
		post(base+"/generate_stream", withBody(generate(true)))
	}
	post("/v1/completions", withBody(h.Completions))
	post("/v1/chat/completions", withBody(h.Chat))
	get("/v1/models", h.Models)
	get("/v1/models/:model", func(c *fiber.Ctx) error {
		name, err := modelParam(c)
		if err != nil {
			return err
		}
		return h.Model(s.ctx, c, name)
	})
}
