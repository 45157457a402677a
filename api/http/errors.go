package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/xserve/xserve/api/auth"
	"github.com/xserve/xserve/api/payload"
)

// Sentinel errors of the package. Errors the handlers produce wrap one of
// them (or one of package serving's) and carry the details. The request
// decoding errors are package payload's, shared with api/nats.
var (
	// ErrBadRequest: the request is malformed: bad JSON, an unknown dtype, a
	// shape that does not match its data, binary data that does not add up.
	ErrBadRequest = payload.ErrBadRequest
	// ErrTooLarge: the request body, its decompressed form, or a tensor's
	// declared shape exceeds a limit of Options.
	ErrTooLarge = payload.ErrTooLarge
	// ErrUnsupportedEncoding: the request's Content-Encoding is not one of
	// gzip, zstd, deflate or identity.
	ErrUnsupportedEncoding = payload.ErrUnsupportedEncoding
	// ErrUnsupportedMediaType: the request's Content-Type is refused: a
	// form or multipart body, or anything but JSON on a repository or admin
	// route (see contenttype.go).
	ErrUnsupportedMediaType = errors.New("httpapi: unsupported media type")
	// ErrNotFound: no such route.
	ErrNotFound = errors.New("httpapi: not found")
	// ErrServerClosed is returned by Serve and Listen after Shutdown.
	ErrServerClosed = errors.New("httpapi: server closed")
)

// HeaderInferenceLength is the header of the binary tensor extension that
// gives the length of the JSON part of a body; the raw tensor bytes follow
// it.
const HeaderInferenceLength = payload.HeaderInferenceLength

// badRequest returns an error wrapping ErrBadRequest.
func badRequest(format string, args ...any) error {
	return payload.BadRequest(format, args...)
}

// tooLarge returns an error wrapping ErrTooLarge.
func tooLarge(format string, args ...any) error {
	return payload.TooLarge(format, args...)
}

// statusOf maps an error to its HTTP status code: the server's own errors,
// then the table api/nats shares (payload.Status); see the package comment.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrUnsupportedMediaType):
		return http.StatusUnsupportedMediaType
	case errors.Is(err, ErrServerClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrSlowBody):
		return http.StatusRequestTimeout
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, auth.ErrForbidden):
		return http.StatusForbidden
	}
	return payload.Status(err)
}

// retryAfter is the Retry-After value (whole seconds, at least 1) for a 429:
// the batcher's estimate when the error carries one.
func retryAfter(err error) string {
	return strconv.Itoa(int(math.Ceil(payload.RetryAfter(err).Seconds())))
}
