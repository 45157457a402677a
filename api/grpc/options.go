package grpcapi

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/xserve/xserve/api/auth"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/shm"
)

// Defaults of Options, the same as the HTTP API's.
const (
	// DefaultMaxMessageBytes is Options.MaxMessageBytes when it is zero.
	DefaultMaxMessageBytes = 64 << 20
	// DefaultMaxTensorElements is Options.MaxTensorElements when it is zero.
	DefaultMaxTensorElements = 1 << 28
)

// Options configures a Server. The zero value of every field means its
// default; New fills them in and validates the result.
type Options struct {
	// MaxMessageBytes is the largest request message accepted, measured
	// after gzip decompression, and at most half the memory budget; a
	// larger one is refused with codes.ResourceExhausted before it is
	// read. Default 64 MiB.
	MaxMessageBytes int64
	// MemoryBudget bounds the bytes that requests in flight hold at once
	// (request messages from their declared size on, decoded tensors):
	// each is reserved before it is read or allocated, and a request that
	// does not fit now is refused with codes.Unavailable (RESOURCE_EXHAUSTED
	// if it could never fit). Default 200 MiB. Budget, when set, is used
	// instead, so that gRPC, HTTP and NATS share one.
	MemoryBudget int64
	Budget       *payload.Budget
	// SharedMemory is the registry of Triton's system shared-memory
	// extension, shared by every protocol of one process; its owner closes
	// it after the servers stop. Nil: the server makes its own and
	// unregisters its regions on Shutdown.
	SharedMemory *shm.Registry
	// MaxTensorElements is the most elements one request tensor may declare
	// in its shape. Default 1<<28.
	MaxTensorElements int64
	// MinReadRate is the slowest a request message larger than the
	// stream's window may arrive, in bytes per second on average after
	// ReadGrace (it holds its size of the budget meanwhile); a slower one
	// ends the call with DEADLINE_EXCEEDED. Default 4 KiB/s; -1 none.
	MinReadRate int64
	// ReadGrace is the time a message has before MinReadRate counts.
	// Default 10s.
	ReadGrace time.Duration
	// Version is the server version reported by ServerMetadata. Default
	// "dev".
	Version string
	// TLS, when set, serves gRPC over TLS with this configuration (client
	// certificates included, when it asks for them).
	TLS *tls.Config
	// Auth, when set, requires a bearer token (metadata "authorization":
	// "Bearer TOKEN") on every call (codes.Unauthenticated without a known
	// one) and the admin scope on RepositoryModelLoad and Unload
	// (codes.PermissionDenied).
	Auth *auth.Tokens
	// OpenHealth leaves ServerLive, ServerReady and ModelReady open without
	// a token when Auth is set.
	OpenHealth bool
	// AccessLog logs every call at level info (method, code, duration,
	// remote address, request id); otherwise that line is at level debug.
	AccessLog bool
	// Tracer records a span per call and the decode, infer (queue, batch,
	// execute) and encode spans of ModelInfer; nil records nothing.
	Tracer trace.Tracer
	// Interceptors run around every unary call, outermost first, inside
	// the server's request id, access log and auth check.
	Interceptors []grpc.UnaryServerInterceptor
	// StreamInterceptors run around every streaming call.
	StreamInterceptors []grpc.StreamServerInterceptor
	// Logger receives the server's structured logs; nil means
	// slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	o.MaxMessageBytes = cmp.Or(o.MaxMessageBytes, DefaultMaxMessageBytes)
	o.MaxTensorElements = cmp.Or(o.MaxTensorElements, DefaultMaxTensorElements)
	o.MemoryBudget = cmp.Or(o.MemoryBudget, payload.DefaultMemoryBudget)
	o.MinReadRate = cmp.Or(o.MinReadRate, 4<<10)
	o.ReadGrace = cmp.Or(o.ReadGrace, 10*time.Second)
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
		errs = append(errs, fmt.Errorf("grpcapi: Options.%s is %v, want %s", field, v, want))
	}
	if o.MaxMessageBytes < 0 || o.MaxMessageBytes > math.MaxInt32 {
		bad("MaxMessageBytes", o.MaxMessageBytes, "a size in bytes in [1, 2 GiB)")
	}
	if o.MaxTensorElements < 0 {
		bad("MaxTensorElements", o.MaxTensorElements, "a positive element count")
	}
	if o.MemoryBudget < 0 {
		bad("MemoryBudget", o.MemoryBudget, "a positive size in bytes")
	}
	if o.MinReadRate < -1 {
		bad("MinReadRate", o.MinReadRate, "a rate in bytes per second, or -1 for none")
	}
	if o.ReadGrace < 0 {
		bad("ReadGrace", o.ReadGrace, "a positive duration")
	}
	return errors.Join(errs...)
}
