package httpapi

import (
	"fmt"
	"mime"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Content types are checked before a body is read:
//
//   - Form posts (application/x-www-form-urlencoded) and multipart bodies are
//     refused with 415 on every route: xserve takes no forms, and a
//     cross-site form post must not reach a handler.
//   - The repository and admin routes (index, load, unload) take
//     application/json (or a +json type). A request with no Content-Type is
//     taken only from a non-browser client, one that sends no Origin header
//     (tritonclient sends none): a browser's cross-site request always
//     carries an Origin.
//   - The infer routes take any other type: clients label the JSON and the
//     binary tensor extension in different ways.

// refuseForms wraps an infer handler with the form and multipart check.
func (s *Server) refuseForms(h fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if mt, ok := mediaType(c); ok && isForm(mt) {
			return formRefused(mt)
		}
		return h(c)
	}
}

// requireJSON wraps a repository or admin handler with the JSON check.
func (s *Server) requireJSON(h fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		mt, ok := mediaType(c)
		switch {
		case !ok && c.Get(fiber.HeaderOrigin) != "":
			return fmt.Errorf("%w: a repository or admin request from a browser (with an Origin header) must have Content-Type: application/json", ErrUnsupportedMediaType)
		case !ok:
			return h(c)
		case isForm(mt):
			return formRefused(mt)
		case mt != fiber.MIMEApplicationJSON && !strings.HasSuffix(mt, "+json"):
			return fmt.Errorf("%w: Content-Type is %q; the repository and admin API takes application/json", ErrUnsupportedMediaType, mt)
		}
		return h(c)
	}
}

// mediaType returns the request's media type, lower case without
// parameters; ok is false when the request has no Content-Type. An
// unparsable one is returned whole.
func mediaType(c *fiber.Ctx) (mt string, ok bool) {
	ct := strings.TrimSpace(c.Get(fiber.HeaderContentType))
	if ct == "" {
		return "", false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.ToLower(ct), true
	}
	return mt, true
}

func isForm(mt string) bool {
	return mt == fiber.MIMEApplicationForm || strings.HasPrefix(mt, "multipart/")
}

func formRefused(mt string) error {
	return fmt.Errorf("%w: Content-Type %q: xserve takes no form or multipart bodies; send the request as application/json, or JSON with the binary tensor extension (Inference-Header-Content-Length)", ErrUnsupportedMediaType, mt)
}
