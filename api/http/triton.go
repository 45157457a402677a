package httpapi

import (
	"github.com/gofiber/fiber/v2"

	"github.com/xserve/xserve/api/triton"
)

// modelConfig answers GET /v2/models/{m}[/versions/{v}]/config with the
// model's configuration in Triton's JSON form.
func (s *Server) modelConfig(c *fiber.Ctx) error {
	model, version, err := modelVersionParams(c)
	if err != nil {
		return err
	}
	cfg, err := s.backend.Config(model, version)
	if err != nil {
		return err
	}
	return s.send(c, contentJSON, triton.JSON(triton.Config(cfg)))
}

// statistics answers GET /v2/models[/{m}[/versions/{v}]]/stats in Triton's
// statistics schema.
func (s *Server) statistics(c *fiber.Ctx) error {
	var model string
	var version int64
	if c.Params("model") != "" {
		var err error
		if model, version, err = modelVersionParams(c); err != nil {
			return err
		}
	}
	sts, err := s.backend.Statistics(model, version)
	if err != nil {
		return err
	}
	return s.send(c, contentJSON, triton.JSON(triton.Statistics(sts)))
}

// unsupportedRoutes answers the Triton extensions xserve does not implement
// the way Triton's clients expect: status queries answer what is true (no
// CUDA shared-memory regions, tracing off, the log settings), changes are
// refused with 400 and an error saying what to do instead.
func (s *Server) unsupportedRoutes(get, post func(string, fiber.Handler)) {
	const kind = "/v2/cudasharedmemory"
	status := func(c *fiber.Ctx) error { return s.send(c, contentJSON, []byte("[]")) }
	refuse := func(c *fiber.Ctx) error {
		return badRequest("xserve does not support CUDA shared memory (%s %s); use system shared memory (/v2/systemsharedmemory) or send tensors in the request body", c.Method(), quotePath(c.Path()))
	}
	get(kind+"/status", status)
	get(kind+"/region/:region/status", status)
	post(kind+"/register", refuse)
	post(kind+"/region/:region/register", refuse)
	post(kind+"/unregister", okEmpty) // no regions: nothing to do
	post(kind+"/region/:region/unregister", refuse)
	trace := func(c *fiber.Ctx) error {
		if c.Method() == fiber.MethodPost {
			return badRequest("xserve does not support changing Triton's trace settings")
		}
		return s.sendJSON(c, map[string]any{
			"trace_level": []string{"OFF"}, "trace_rate": "1000", "trace_count": "-1",
			"log_frequency": "0", "trace_file": "", "trace_mode": "triton",
		})
	}
	get("/v2/trace/setting", trace)
	post("/v2/trace/setting", trace)
	get("/v2/models/:model/trace/setting", trace)
	post("/v2/models/:model/trace/setting", trace)
	logging := func(c *fiber.Ctx) error {
		if c.Method() == fiber.MethodPost {
			return badRequest("xserve does not support changing its log settings at run time; restart it with --log-level and --log-format")
		}
		return s.sendJSON(c, map[string]any{
			"log_file": "", "log_info": true, "log_warning": true, "log_error": true,
			"log_verbose_level": 0, "log_format": "default",
		})
	}
	get("/v2/logging", logging)
	post("/v2/logging", logging)
}
