// Package tracing exports OpenTelemetry traces of requests over OTLP/gRPC
// (off unless an endpoint is given) and records the phases of one
// inference as spans: decode, queue, batch, execute, encode.
//
// The queue, batch and execute spans are placed from the times the backend
// measured for the request (Times, from serving.InferResponse's QueueTime
// and ComputeTime): queue from the start of the call, execute at its end,
// batch from the end of the queue to the end; the api packages make decode
// and encode around their own work. A request's trace continues the client's
// W3C traceparent when it sends one.
package tracing

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Options configure the exporter. The zero value exports nothing.
type Options struct {
	// Endpoint is the OTLP/gRPC collector's host:port; "" turns tracing
	// off.
	Endpoint string
	// Insecure sends to the collector without TLS.
	Insecure bool
	// SampleRatio is the share of new traces recorded, in (0, 1]; 0 means
	// 1. A trace a client started follows the client's sampling decision.
	SampleRatio float64
	// ServiceName is the service.name resource attribute; "" means "xserve".
	ServiceName string
}

// Propagator reads and writes W3C traceparent/tracestate headers.
var Propagator = propagation.TraceContext{}

// Setup returns the tracer the servers record with and a shutdown that
// flushes what is buffered; with no Endpoint, a tracer that records nothing
// and a no-op shutdown.
func Setup(ctx context.Context, o Options) (trace.Tracer, func(context.Context) error, error) {
	if o.Endpoint == "" {
		return noop.NewTracerProvider().Tracer("xserve"), func(context.Context) error { return nil }, nil
	}
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return nil, nil, fmt.Errorf("tracing: sample ratio %v is not in (0, 1]", o.SampleRatio)
	}
	if o.SampleRatio == 0 {
		o.SampleRatio = 1
	}
	if o.ServiceName == "" {
		o.ServiceName = "xserve"
	}
	eo := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(o.Endpoint)}
	if o.Insecure {
		eo = append(eo, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, eo...)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", o.Endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", o.ServiceName)))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	)
	return tp.Tracer("github.com/xserve/xserve"), tp.Shutdown, nil
}

// End ends span, recording err as its status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Off reports whether t records nothing (tracing is not configured: the
// noop tracer Setup returns), so that the request path can skip making
// spans, attributes and contexts nobody reads.
func Off(t trace.Tracer) bool {
	_, ok := t.(noop.Tracer)
	return ok
}

// Phase runs fn inside a child span of ctx named name.
func Phase(ctx context.Context, t trace.Tracer, name string, fn func(context.Context) error) error {
	if Off(t) {
		return fn(ctx)
	}
	ctx, span := t.Start(ctx, name)
	err := fn(ctx)
	End(span, err)
	return err
}

// InferSpan is the span "infer" of one backend call, from StartInfer to
// End.
type InferSpan struct {
	t     trace.Tracer
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// StartInfer begins the span "infer" of one backend call for model and
// version; the call takes the context it returns.
func StartInfer(ctx context.Context, t trace.Tracer, model string, version int64) (context.Context, *InferSpan) {
	if Off(t) {
		return ctx, nil // End is a no-op on nil
	}
	start := time.Now()
	ctx, span := t.Start(ctx, "infer", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("xserve.model", model), attribute.Int64("xserve.version", version)))
	return ctx, &InferSpan{t: t, ctx: ctx, span: span, start: start}
}

// Times are what the backend measured of one call: the version and bucket
// it ran, its time queued (batching, waiting for a compile) and computing.
type Times struct {
	Version        int64
	Bucket         string
	Queue, Compute time.Duration
}

// End ends the span (nothing for a nil span: tracing is off), recording err, or else, as its children, the queue,
// batch and execute spans placed from the times: queue from the start of
// the call, execute at its end, batch from the end of the queue to the end.
func (s *InferSpan) End(tm Times, err error) {
	if s == nil {
		return
	}
	end := time.Now()
	t, span := s.t, s.span
	if err == nil && span.IsRecording() {
		span.SetAttributes(attribute.String("xserve.bucket", tm.Bucket), attribute.Int64("xserve.version", tm.Version))
		queued := s.start.Add(min(tm.Queue, end.Sub(s.start)))
		_, q := t.Start(s.ctx, "queue", trace.WithTimestamp(s.start))
		q.End(trace.WithTimestamp(queued))
		bctx, b := t.Start(s.ctx, "batch", trace.WithTimestamp(queued), trace.WithAttributes(attribute.String("xserve.bucket", tm.Bucket)))
		execStart := end.Add(-tm.Compute)
		if execStart.Before(queued) {
			execStart = queued
		}
		_, e := t.Start(bctx, "execute", trace.WithTimestamp(execStart))
		e.End(trace.WithTimestamp(end))
		b.End(trace.WithTimestamp(end))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}
