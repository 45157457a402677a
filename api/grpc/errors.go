package grpcapi

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xserve/xserve/api/auth"
	"github.com/xserve/xserve/api/payload"
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

// toStatus turns a handler's error into a gRPC status error carrying the
// message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}
