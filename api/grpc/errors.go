package grpcapi

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xserve/xserve/api/auth"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/textgen"
	"github.com/xserve/xserve/serving/generate"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("grpcapi: server closed")

// codeOf maps an error to its gRPC code through the HTTP status that
// payload.Status gives it (see the package comment).
func codeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, auth.ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, auth.ErrForbidden):
		return codes.PermissionDenied
	case errors.Is(err, textgen.ErrInvalid), errors.Is(err, generate.ErrInvalidRequest):
		return codes.InvalidArgument // a generation request's parameters or prompt
	case errors.Is(err, generate.ErrOverloaded):
		return codes.ResourceExhausted
	}
	switch payload.Status(err) {
	case http.StatusOK:
		return codes.OK
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return codes.InvalidArgument
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// toStatus turns a handler's error into the status a client gets: its code
// and its public message (payload.Public: no absolute paths, no package
// prefixes, no cause of an INTERNAL), with the names the client sent
// (keep) as sent. A status the server made itself is kept, but for the
// message of an INTERNAL one.
func (s *Server) toStatus(err error, keep ...string) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.Internal {
			return status.Error(codes.Internal, payload.InternalMessage)
		}
		return err
	}
	code := codeOf(err)
	httpCode := http.StatusBadRequest // any client-facing code: Public scrubs it
	if code == codes.Internal {
		httpCode = http.StatusInternalServerError
	}
	return status.Error(code, payload.Public(err, httpCode, s.root, keep...))
}

// clientNames are the model names a request message carries, which an
// error may quote: returned as the client sent them.
func clientNames(req any) []string {
	switch r := req.(type) {
	case interface{ GetModelName() string }:
		return []string{r.GetModelName()}
	case interface{ GetName() string }:
		return []string{r.GetName()}
	}
	return nil
}
