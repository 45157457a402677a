package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
)

// Sentinel errors of the package. Errors the handlers produce wrap one of them
// (or one of package serving's) and carry the details.
var (
	// ErrBadRequest: the request is malformed: bad JSON, an unknown dtype, a
	// shape that does not match its data, binary data that does not add up.
	ErrBadRequest = errors.New("httpapi: bad request")
	// ErrTooLarge: the request body, its decompressed form, or a tensor's
	// declared shape exceeds a limit of Options.
	ErrTooLarge = errors.New("httpapi: request too large")
	// ErrUnsupportedEncoding: the request's Content-Encoding is not one of
	// gzip, zstd, deflate or identity.
	ErrUnsupportedEncoding = errors.New("httpapi: unsupported content encoding")
	// ErrNotFound: no such route.
	ErrNotFound = errors.New("httpapi: not found")
	// ErrServerClosed is returned by Serve and Listen after Shutdown.
	ErrServerClosed = errors.New("httpapi: server closed")
)

// badRequest returns an error wrapping ErrBadRequest.
func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// tooLarge returns an error wrapping ErrTooLarge.
func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTooLarge, fmt.Sprintf(format, args...))
}

// statusOf maps an error to its HTTP status code; see the package comment.
func statusOf(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrNotFound), errors.Is(err, serving.ErrModelNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrBadRequest), errors.Is(err, serving.ErrInvalidInput),
		errors.Is(err, serving.ErrNoBucket), errors.Is(err, modelrepo.ErrInvalidName),
		errors.Is(err, batching.ErrTooLarge), errors.Is(err, batching.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnsupportedEncoding):
		return http.StatusUnsupportedMediaType
	case errors.Is(err, serving.ErrOverloaded), errors.Is(err, batching.ErrQueueFull):
		return http.StatusTooManyRequests
	case errors.Is(err, serving.ErrNotReady), errors.Is(err, serving.ErrClosed),
		errors.Is(err, batching.ErrClosed), errors.Is(err, ErrServerClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, batching.ErrExpired):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// retryAfter is the Retry-After value (whole seconds, at least 1) for a 429:
// the batcher's estimate when the error carries one.
func retryAfter(err error) string {
	d := time.Second
	var qf *batching.QueueFullError
	if errors.As(err, &qf) && qf.RetryAfter > d {
		d = qf.RetryAfter
	}
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
