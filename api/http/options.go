package httpapi

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/shm"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/xserve/xserve/api/auth"
)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes is Options.MaxBodyBytes when it is zero.
	DefaultMaxBodyBytes = 64 << 20
	// DefaultMaxDecompressedBytes is Options.MaxDecompressedBytes when it is
	// zero.
	DefaultMaxDecompressedBytes = 64 << 20
	// DefaultMaxTensorElements is Options.MaxTensorElements when it is zero.
	DefaultMaxTensorElements = 1 << 28
	// DefaultReadTimeout is Options.ReadTimeout when it is zero.
	DefaultReadTimeout = 60 * time.Second
	// DefaultReadHeaderTimeout is Options.ReadHeaderTimeout when it is zero.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultMinReadRate is Options.MinReadRate when it is zero.
	DefaultMinReadRate = 4 << 10
	// DefaultWriteTimeout is Options.WriteTimeout when it is zero.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout is Options.IdleTimeout when it is zero.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxConns is Options.MaxConns when it is zero.
	DefaultMaxConns = 4096
	// DefaultCompressMinBytes is Options.CompressMinBytes when it is zero.
	DefaultCompressMinBytes = 1024
)

// Options configures a Server. The zero value of every field means its
// default; New fills them in and validates the result.
type Options struct {
	// MaxBodyBytes is the largest request body accepted as sent on the wire
	// (compressed or not); a larger one is answered 413 while it is being
	// read. Default 64 MiB.
	MaxBodyBytes int64
	// MaxDecompressedBytes is the largest request body accepted after
	// Content-Encoding is undone; decompression stops there and the request
	// is answered 413. Default 64 MiB.
	MaxDecompressedBytes int64
	// MaxTensorElements is the most elements one request tensor may declare
	// in its shape; checked before anything is allocated for it. Default
	// 1<<28.
	MaxTensorElements int64
	// ReadTimeout bounds reading one request's body, from the end of its
	// headers. Default 60s.
	ReadTimeout time.Duration
	// ReadHeaderTimeout bounds reading one request's headers, from their
	// first byte (or, for a connection's first request, from its accept),
	// whatever IdleTimeout is: a client sending a header byte now and then
	// holds its connection no longer. Default 10s.
	ReadHeaderTimeout time.Duration
	// MinReadRate is the slowest a request body may arrive, in bytes per
	// second on average after a grace of ReadHeaderTimeout; a slower one is
	// answered 408 and its connection closed. Default 4 KiB/s; -1 none.
	MinReadRate int64
	// WriteTimeout bounds writing one response. Default 60s.
	WriteTimeout time.Duration
	// GenerateTimeout bounds a request of the OpenAI-compatible API (the
	// sequence ends with it); 0 means openai.DefaultTimeout. A streamed
	// answer's WriteTimeout applies to each of its events.
	GenerateTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection waits for its next
	// request. Default 30s.
	IdleTimeout time.Duration
	// MaxConns bounds the connections served at once; past it a new
	// connection is answered 503 and closed. Default 4096 (keep it well
	// under the process's file descriptor limit).
	MaxConns int
	// MaxConnsPerIP bounds the connections from one IPv4 address; past it
	// a new one is answered 429 and closed, so that one client cannot take
	// every connection. Default MaxConns/2; -1 no limit (behind a proxy,
	// every connection comes from its address).
	MaxConnsPerIP int
	// MemoryBudget bounds the bytes that requests in flight hold at once
	// (bodies, their decompressed form, tensors decoded from JSON): each is
	// reserved before it is allocated, and a request that does not fit now
	// is answered 429 (413 if it could never fit). Default 200 MiB. Budget,
	// when set, is used instead, so that HTTP and NATS share one.
	MemoryBudget int64
	Budget       *payload.Budget
	// SharedMemory is the registry of Triton's system shared-memory
	// extension, shared by every protocol of one process; its owner closes
	// it after the servers stop. Nil: the server makes its own and
	// unregisters its regions on Shutdown.
	SharedMemory *shm.Registry
	// CompressMinBytes is the smallest response body that is compressed when
	// the client's Accept-Encoding allows it; -1 never compresses. Default
	// 1 KiB.
	CompressMinBytes int
	// Version is the server version reported by GET /v2. Default "dev".
	Version string
	// Logger receives the server's structured logs; nil means
	// slog.Default().
	Logger *slog.Logger
	// TLS, when set, serves HTTPS with this configuration (client
	// certificates included, when it asks for them).
	TLS *tls.Config
	// Auth, when set, requires a bearer token on every route (401 without a
	// known one) and the admin scope on repository load and unload (403).
	Auth *auth.Tokens
	// OpenHealth leaves /v2/health/*, the models' readiness
	// (/v2/models/{m}[/versions/{v}]/ready) and /metrics open without a
	// token when Auth is set, as gRPC's ServerLive, ServerReady and
	// ModelReady are.
	OpenHealth bool
	// AccessLog logs every request at level info (method, path, route,
	// status, duration, sizes, remote address, request id); otherwise that
	// line is at level debug.
	AccessLog bool
	// Tracer records a span per request and the decode, infer (queue,
	// batch, execute) and encode spans of inference; nil records nothing
	// (see internal/tracing).
	Tracer trace.Tracer
	// CORSOrigins lists the origins browsers may call the API from
	// ("https://app.example.com"; "*" for any); none means no CORS headers.
	CORSOrigins []string
}

// setDefaults fills the fields left at their zero value.
func (o *Options) setDefaults() {
	o.MaxBodyBytes = cmp.Or(o.MaxBodyBytes, DefaultMaxBodyBytes)
	o.MaxDecompressedBytes = cmp.Or(o.MaxDecompressedBytes, DefaultMaxDecompressedBytes)
	o.MaxTensorElements = cmp.Or(o.MaxTensorElements, DefaultMaxTensorElements)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, DefaultReadTimeout)
	o.ReadHeaderTimeout = cmp.Or(o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	o.MinReadRate = cmp.Or(o.MinReadRate, DefaultMinReadRate)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, DefaultIdleTimeout)
	o.MaxConns = cmp.Or(o.MaxConns, DefaultMaxConns)
	o.MaxConnsPerIP = cmp.Or(o.MaxConnsPerIP, max(o.MaxConns/2, 1))
	o.MemoryBudget = cmp.Or(o.MemoryBudget, payload.DefaultMemoryBudget)
	o.CompressMinBytes = cmp.Or(o.CompressMinBytes, DefaultCompressMinBytes)
	o.Version = cmp.Or(o.Version, "dev")
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
}

// validate checks the values after setDefaults; each problem names the field
// and its value.
func (o *Options) validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("httpapi: Options.%s is %v, want %s", field, v, want))
	}
	if o.MaxBodyBytes < 0 || o.MaxBodyBytes > math.MaxInt32 {
		bad("MaxBodyBytes", o.MaxBodyBytes, "a size in bytes in [1, 2 GiB)")
	}
	if o.MaxDecompressedBytes < 0 {
		bad("MaxDecompressedBytes", o.MaxDecompressedBytes, "a positive size in bytes")
	}
	if o.MaxTensorElements < 0 {
		bad("MaxTensorElements", o.MaxTensorElements, "a positive element count")
	}
	if o.ReadTimeout < 0 {
		bad("ReadTimeout", o.ReadTimeout, "a positive duration")
	}
	if o.ReadHeaderTimeout < 0 {
		bad("ReadHeaderTimeout", o.ReadHeaderTimeout, "a positive duration")
	}
	if o.MinReadRate < -1 {
		bad("MinReadRate", o.MinReadRate, "a rate in bytes per second, or -1 for none")
	}
	if o.MaxConnsPerIP < -1 {
		bad("MaxConnsPerIP", o.MaxConnsPerIP, "a positive number of connections, or -1 for no limit")
	}
	if o.WriteTimeout < 0 {
		bad("WriteTimeout", o.WriteTimeout, "a positive duration")
	}
	if o.IdleTimeout < 0 {
		bad("IdleTimeout", o.IdleTimeout, "a positive duration")
	}
	if o.MaxConns < 0 {
		bad("MaxConns", o.MaxConns, "a positive number of connections")
	}
	if o.MemoryBudget < 0 {
		bad("MemoryBudget", o.MemoryBudget, "a positive size in bytes")
	}
	if o.CompressMinBytes < -1 {
		bad("CompressMinBytes", o.CompressMinBytes, "a size in bytes, or -1 for never")
	}
	return errors.Join(errs...)
}
