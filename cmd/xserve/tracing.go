package main

import (
	"flag"

	"github.com/xserve/xserve/internal/tracing"
)

// tracingFlags are serve's OpenTelemetry flags.
func tracingFlags(fs *flag.FlagSet) *tracing.Options {
	o := &tracing.Options{}
	fs.StringVar(&o.Endpoint, "otlp-endpoint", "", `OTLP/gRPC collector (host:port) to export request traces to; "" (default) exports none`)
	fs.BoolVar(&o.Insecure, "otlp-insecure", false, "send traces to --otlp-endpoint without TLS")
	fs.Float64Var(&o.SampleRatio, "trace-sample-ratio", 1, "share of new traces recorded, in (0, 1]; a client's traceparent decides for its own")
	return o
}
