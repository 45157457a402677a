package httpapi

import (
	"fmt"
	"mime"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Content types are checked before a body is read:
//
//   - Form posts (application/x-www-form-urlencoded) from a browser, and
//     multipart bodies from anyone, are refused with 415 on every route:
//     xserve takes no forms, and a cross-site form post must not reach a
//     handler. A browser is told apart by the headers it always sends with
//     a POST and a script cannot remove: Origin, and Sec-Fetch-Site where
//     the browser sends Fetch Metadata. A form type without them comes
//     from a program, not a page: libcurl labels every POST it is given no
//     Content-Type for as a form, and Triton's C++ client (perf_analyzer)
//     registers shared memory that way; its body is read as JSON.
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
		if mt, ok := mediaType(c); ok && formRefusedFor(c, mt) {
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
		case formRefusedFor(c, mt):
			return formRefused(mt)
		case mt == fiber.MIMEApplicationForm: // from a program: read as JSON
		case mt != fiber.MIMEApplicationJSON && !strings.HasSuffix(mt, "+json"):
			return fmt.Errorf("%w: Content-Type is %q; the repository and admin API takes application/json", ErrUnsupportedMediaType, mt)
		}
		return h(c)
	}
}

// formRefusedFor reports whether a body of media type mt is refused as a
// form: multipart always, a url-encoded form when a browser sent it.
func formRefusedFor(c *fiber.Ctx, mt string) bool {
	switch {
	case strings.HasPrefix(mt, "multipart/"):
		return true
	case mt == fiber.MIMEApplicationForm:
		return fromBrowser(c)
	}
	return false
}

// fromBrowser reports whether the request carries the headers a browser
// adds to every POST (and a page's script cannot suppress).
func fromBrowser(c *fiber.Ctx) bool {
	return c.Get(fiber.HeaderOrigin) != "" || c.Get("Sec-Fetch-Site") != ""
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

func formRefused(mt string) error {
	return fmt.Errorf("%w: Content-Type %q: xserve takes no form or multipart bodies (a url-encoded form only from a program, one that sends no Origin or Sec-Fetch-Site header); send the request as application/json, or JSON with the binary tensor extension (Inference-Header-Content-Length)", ErrUnsupportedMediaType, mt)
}
