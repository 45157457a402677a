package payload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
)

// Sentinel errors of the package. Errors the decoders produce wrap one of
// them and carry the details: what was wrong and what was expected.
var (
	// ErrBadRequest: the request is malformed: bad JSON, an unknown dtype, a
	// shape that does not match its data, binary data that does not add up,
	// a corrupt compressed body.
	ErrBadRequest = errors.New("payload: bad request")
	// ErrTooLarge: the request body, its decompressed form, or a tensor's
	// declared shape exceeds a limit.
	ErrTooLarge = errors.New("payload: request too large")
	// ErrUnsupportedEncoding: the request's Content-Encoding is not one of
	// gzip, zstd, deflate or identity.
	ErrUnsupportedEncoding = errors.New("payload: unsupported content encoding")
)

// BadRequest returns an error wrapping ErrBadRequest with the formatted
// details.
func BadRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// TooLarge returns an error wrapping ErrTooLarge with the formatted details.
func TooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTooLarge, fmt.Sprintf(format, args...))
}

func badRequest(format string, args ...any) error { return BadRequest(format, args...) }

func tooLarge(format string, args ...any) error { return TooLarge(format, args...) }

// Status maps an error of a request to its status code, the HTTP status that
// api/http answers with and the code api/nats puts in its error header. It is
// the one table both transports share:
//
//	serving.ErrModelNotFound                          404
//	serving.ErrInvalidInput, serving.ErrNoBucket,
//	  modelrepo.ErrInvalidName, ErrBadRequest,
//	  batching.ErrTooLarge, batching.ErrInvalid,
//	  serving.ErrModelControl, serving.ErrSequence    400
//	ErrTooLarge                                       413
//	ErrUnsupportedEncoding                            415
//	serving.ErrOverloaded, batching.ErrQueueFull,
//	  ErrBudget                                       429
//	serving.ErrNotReady, serving.ErrClosed,
//	  batching.ErrClosed                              503
//	context.DeadlineExceeded, batching.ErrExpired     504
//	nil                                               200
//	anything else                                     500
//
// Transports check their own errors (no route, server closed) first.
func Status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, serving.ErrModelNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrBadRequest), errors.Is(err, serving.ErrInvalidInput),
		errors.Is(err, serving.ErrNoBucket), errors.Is(err, modelrepo.ErrInvalidName),
		errors.Is(err, batching.ErrTooLarge), errors.Is(err, batching.ErrInvalid),
		errors.Is(err, serving.ErrModelControl), errors.Is(err, serving.ErrSequence):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnsupportedEncoding):
		return http.StatusUnsupportedMediaType
	case errors.Is(err, serving.ErrOverloaded), errors.Is(err, batching.ErrQueueFull), errors.Is(err, ErrBudget):
		return http.StatusTooManyRequests
	case errors.Is(err, serving.ErrNotReady), errors.Is(err, serving.ErrClosed),
		errors.Is(err, batching.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, batching.ErrExpired):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// RetryAfter is how long a client should wait before retrying a request
// that failed with a 429: the batcher's estimate when err carries one, and
// at least a second.
func RetryAfter(err error) time.Duration {
	d := time.Second
	var qf *batching.QueueFullError
	if errors.As(err, &qf) && qf.RetryAfter > d {
		d = qf.RetryAfter
	}
	return d
}

// ErrorBody is the JSON body of an error answer: {"error": msg}.
func ErrorBody(msg string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return b
}
