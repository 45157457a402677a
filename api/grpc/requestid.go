package grpcapi

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xserve/xserve/internal/reqid"
	"github.com/xserve/xserve/internal/tracing"
)

// mdRequestID is the metadata key of the request id, both ways.
var mdRequestID = strings.ToLower(reqid.Header)

// requestIDKey holds the call's request id in its context.
type requestIDKey struct{}

// RequestID returns the id the server gave the call of ctx ("" outside a
// call).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// withRequestID gives the call its id (x-request-id or traceparent
// metadata, else a new one), returns it in the response header and puts it
// in ctx.
func withRequestID(ctx context.Context) (context.Context, string) {
	id := reqid.From(firstMD(ctx, mdRequestID), firstMD(ctx, "traceparent"))
	grpc.SetHeader(ctx, metadata.Pairs(mdRequestID, id))
	return context.WithValue(ctx, requestIDKey{}, id), id
}

// firstMD returns the first value of the call's incoming metadata key
// (lower case), "" when there is none, without copying the metadata.
func firstMD(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// logCall writes the access line of a finished call.
func (s *Server) logCall(ctx context.Context, method, id string, start time.Time, err error) {
	level := slog.LevelDebug
	if s.opts.AccessLog {
		level = slog.LevelInfo
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	s.log.Log(ctx, level, "grpc request", "method", method, "code", status.Code(err).String(),
		"duration", time.Since(start), "remote", remote, "request_id", id)
}

// startSpan starts the call's server span, continuing the client's
// traceparent metadata.
func (s *Server) startSpan(ctx context.Context, method, id string) (context.Context, trace.Span) {
	if tracing.Off(s.opts.Tracer) {
		return ctx, trace.SpanFromContext(context.Background())
	}
	carrier := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := firstMD(ctx, k); v != "" {
			carrier[k] = v
		}
	}
	ctx = tracing.Propagator.Extract(ctx, carrier)
	return s.opts.Tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("xserve.request_id", id)))
}

// idStream is a ServerStream whose context carries the request id.
type idStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s idStream) Context() context.Context { return s.ctx }

func (s *Server) observeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	ctx, id := withRequestID(ss.Context())
	ctx, span := s.startSpan(ctx, info.FullMethod, id)
	err := h(srv, idStream{ss, ctx})
	tracing.End(span, err)
	s.logCall(ctx, info.FullMethod, id, start, err)
	return err
}
