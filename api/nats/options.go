package natsapi

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xserve/xserve/api/payload"
)

// Headers of the protocol (see the package comment and docs/NATS.md).
const (
	HeaderContentType     = "Content-Type"
	HeaderContentEncoding = "Content-Encoding"
	HeaderAcceptEncoding  = "Accept-Encoding"
	// HeaderInferenceLength gives the length of the JSON part of a body in
	// the binary tensor extension.
	HeaderInferenceLength = "Inference-Header-Content-Length"
	// HeaderProtocol selects the body format: "v1" (xserve's /v1/infer,
	// the default) or "v2" (the Open Inference Protocol).
	HeaderProtocol = "Xserve-Protocol"
	// HeaderModelVersion names the model version of a request, and the
	// version that ran in a reply.
	HeaderModelVersion = "Xserve-Model-Version"
	// HeaderModel names the model that ran, in a reply.
	HeaderModel = "Xserve-Model"
	// HeaderRequestID is the request id; a reply echoes it.
	HeaderRequestID = "X-Request-Id"
	// HeaderMsgID is JetStream's deduplication id; a request without
	// X-Request-Id uses it as its id.
	HeaderMsgID = nats.MsgIdHdr
	// HeaderTimeout is how long the client waits, as a Go duration; a
	// replica answers 504 instead of computing once it has passed.
	HeaderTimeout = "Xserve-Timeout"
	// HeaderReplyTo is the inbox a durable request's reply goes to.
	HeaderReplyTo = "Xserve-Reply-To"
	// HeaderError is the status code of an error reply (e.g. "400").
	HeaderError = "Xserve-Error"
	// HeaderErrorMessage is the error message of an error reply (also in
	// the body as {"error": ...}).
	HeaderErrorMessage = "Xserve-Error-Message"
	// HeaderRetryAfter is, on a 429, how many seconds to wait before
	// retrying.
	HeaderRetryAfter = "Xserve-Retry-After"
	// HeaderReplica is the service instance id of the replica that
	// answered.
	HeaderReplica = "Xserve-Replica"
	// HeaderDelivery is, on the reply to a durable request, how many times
	// JetStream delivered it (1 unless a replica failed).
	HeaderDelivery = "Xserve-Delivery"
	// HeaderSequenceID places a request of a stateful model in a sequence
	// (Triton's sequence_id); HeaderSequenceStart and HeaderSequenceEnd
	// ("true" or "false") are sequence_start and sequence_end. A body's
	// parameters may say the same instead.
	HeaderSequenceID    = "Xserve-Sequence-Id"
	HeaderSequenceStart = "Xserve-Sequence-Start"
	HeaderSequenceEnd   = "Xserve-Sequence-End"
)

// Defaults of Options.
const (
	DefaultPrefix               = "xserve.v1"
	DefaultQueueGroup           = "xserve"
	DefaultServiceName          = "xserve"
	DefaultQueueSize            = 1024
	DefaultMaxDecompressedBytes = 64 << 20
	DefaultMaxTensorElements    = 1 << 28
	DefaultCompressMinBytes     = 1024
	DefaultSyncInterval         = 2 * time.Second
	DefaultStream               = "XSERVE_REQUESTS"
	DefaultConsumer             = "xserve"
	DefaultAckWait              = 30 * time.Second
	DefaultMaxDeliver           = 5
	DefaultStreamMaxAge         = 10 * time.Minute
	DefaultPendingMsgs          = 1 << 16
)

// Options configure a Server. The zero value of every optional field means
// its default.
type Options struct {
	// Conn is the connection to serve on (required). The server owns it
	// from New on: nothing else may subscribe on it, and Shutdown drains and
	// closes it.
	Conn *nats.Conn
	// Prefix starts every subject; default "xserve.v1".
	Prefix string
	// ReplyPrefix, when set, is the prefix every reply subject must have:
	// requests naming any other are dropped (the embedded server's clients
	// get replies under "_INBOX."; see Server.validReply).
	ReplyPrefix string
	// QueueGroup is the queue group of the request subscriptions; replicas
	// in one group share the requests. Default "xserve".
	QueueGroup string
	// ServiceName is the nats.go/micro service name; default "xserve".
	ServiceName string
	// Version is the xserve version, reported by $SRV.INFO (micro needs a
	// semantic version; anything else is reported as 0.0.0 with the value in
	// the metadata). Default "0.0.0".
	Version string
	// Workers is the number of requests handled at once; default
	// 8 * GOMAXPROCS, at least 16 (inference calls mostly wait for batches).
	Workers int
	// QueueSize is the number of requests waiting for a worker; one more is
	// answered 429. Default 1024.
	QueueSize int
	// MaxDecompressedBytes bounds a request body after Content-Encoding is
	// undone (413 past it). Default 64 MiB. (The NATS server's max_payload
	// bounds the body on the wire.)
	MaxDecompressedBytes int64
	// Budget bounds the bytes that requests in flight hold (decompressed
	// bodies, tensors decoded from JSON), shared with the HTTP server when
	// the same one is given to both; a request that does not fit now is
	// answered 429. Default: a budget of payload.DefaultMemoryBudget for
	// this server alone.
	Budget *payload.Budget
	// MaxTensorElements is the most elements one request tensor may declare.
	// Default 1<<28.
	MaxTensorElements int64
	// CompressMinBytes is the smallest reply body compressed when the
	// request's Accept-Encoding allows it; -1 never compresses. Default
	// 1 KiB.
	CompressMinBytes int
	// PendingMsgs and PendingBytes bound each subscription's queue of
	// delivered requests not yet handed to the worker pool (nats.go's
	// pending limits; past them the client library drops and reports a slow
	// consumer). Defaults 65536 and the memory budget's size: a request's
	// body is reserved from the budget as soon as it leaves that queue
	// (before it is decoded), and refused with 429 when it does not fit.
	PendingMsgs, PendingBytes int
	// Queued, when set, reports the bytes the NATS server holds for Conn
	// that Conn has not read yet: requests on their way to the handlers
	// (Embedded.Queued knows it for an in-process connection). The server
	// holds them against Budget as they arrive, so that requests are
	// refused (429) while the queue in front of them is long, and the
	// requests in flight plus that queue stay within the budget.
	Queued func() int64
	// SyncInterval is how often the endpoints follow the models the backend
	// serves (a model loaded or unloaded); default 2s; -1 never on its own
	// (call Server.Sync; Health asks for one when a model has no endpoint).
	SyncInterval time.Duration

	// Durable also consumes the JetStream work-queue stream of durable
	// requests.
	Durable bool
	// Stream is the stream of durable requests; default "XSERVE_REQUESTS".
	// It is created, or updated to this configuration, by New.
	Stream string
	// Consumer is the durable pull consumer all replicas share; default
	// "xserve".
	Consumer string
	// AckWait is how long a delivered durable request may go without an
	// acknowledgement before JetStream redelivers it (to any replica); a
	// replica working on one for longer reports progress. Default 30s.
	AckWait time.Duration
	// MaxDeliver is how many times a durable request is delivered at most;
	// default 5.
	MaxDeliver int
	// DurableHeartbeat is how often the NATS server tells a waiting pull
	// that the consumer is alive; two missed heartbeats count as a lost
	// consumer, which is re-created (a deleted one is noticed at once).
	// Default 5s.
	DurableHeartbeat time.Duration
	// StreamReplicas is the stream's replication factor in a JetStream
	// cluster; default 1.
	StreamReplicas int
	// StreamMaxAge discards durable requests no replica took within it;
	// default 10m.
	StreamMaxAge time.Duration

	// OnDemand says that the backend loads models on their first request
	// and evicts the least recently used (serving.LoadLazy): the replica
	// subscribes to every model of the repository, announces the ones it
	// holds (PREFIX.warm.<model>), and forwards a request for a model it
	// does not hold to a replica that does, loading the model itself only
	// when none does (see route.go).
	OnDemand bool
	// ForwardTimeout bounds the wait for a forwarded request's answer
	// when the request has no deadline of its own; past it the replica
	// answers the request itself. Default 30s.
	ForwardTimeout time.Duration

	// Logger receives the server's structured logs; nil means
	// slog.Default().
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	o.Prefix = cmp.Or(o.Prefix, DefaultPrefix)
	o.QueueGroup = cmp.Or(o.QueueGroup, DefaultQueueGroup)
	o.ServiceName = cmp.Or(o.ServiceName, DefaultServiceName)
	o.Version = cmp.Or(o.Version, "0.0.0")
	o.Workers = cmp.Or(o.Workers, max(16, 8*runtime.GOMAXPROCS(0)))
	o.QueueSize = cmp.Or(o.QueueSize, DefaultQueueSize)
	o.MaxDecompressedBytes = cmp.Or(o.MaxDecompressedBytes, DefaultMaxDecompressedBytes)
	o.MaxTensorElements = cmp.Or(o.MaxTensorElements, DefaultMaxTensorElements)
	o.CompressMinBytes = cmp.Or(o.CompressMinBytes, DefaultCompressMinBytes)
	o.PendingMsgs = cmp.Or(o.PendingMsgs, DefaultPendingMsgs)
	if o.PendingBytes == 0 {
		o.PendingBytes = int(min(o.Budget.Limit(), 1<<30))
	}
	o.SyncInterval = cmp.Or(o.SyncInterval, DefaultSyncInterval)
	o.Stream = cmp.Or(o.Stream, DefaultStream)
	o.Consumer = cmp.Or(o.Consumer, DefaultConsumer)
	o.AckWait = cmp.Or(o.AckWait, DefaultAckWait)
	o.DurableHeartbeat = cmp.Or(o.DurableHeartbeat, 5*time.Second)
	o.MaxDeliver = cmp.Or(o.MaxDeliver, DefaultMaxDeliver)
	o.StreamReplicas = cmp.Or(o.StreamReplicas, 1)
	o.StreamMaxAge = cmp.Or(o.StreamMaxAge, DefaultStreamMaxAge)
	o.ForwardTimeout = cmp.Or(o.ForwardTimeout, DefaultForwardTimeout)
	o.Logger = cmp.Or(o.Logger, slog.Default())
}

// validate checks the values after setDefaults; each problem names the field
// and its value.
func (o *Options) validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("natsapi: Options.%s is %v, want %s", field, v, want))
	}
	if o.Conn == nil {
		errs = append(errs, errors.New("natsapi: Options.Conn is required"))
	}
	if !validSubject(o.Prefix) {
		bad("Prefix", fmt.Sprintf("%q", o.Prefix), `a subject of literal tokens, such as "xserve.v1"`)
	}
	if !validToken(o.QueueGroup) {
		bad("QueueGroup", fmt.Sprintf("%q", o.QueueGroup), "a name without spaces, '.', '*' or '>'")
	}
	if o.DurableHeartbeat < 100*time.Millisecond || o.DurableHeartbeat > 15*time.Second {
		bad("DurableHeartbeat", o.DurableHeartbeat, "between 100ms and 15s (half of a pull's 30s expiry)")
	}
	if !validToken(o.Stream) || !validToken(o.Consumer) {
		bad("Stream and Consumer", fmt.Sprintf("%q, %q", o.Stream, o.Consumer), "names without spaces, '.', '*' or '>'")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Workers", int64(o.Workers)}, {"QueueSize", int64(o.QueueSize)},
		{"MaxDecompressedBytes", o.MaxDecompressedBytes}, {"MaxTensorElements", o.MaxTensorElements},
		{"PendingMsgs", int64(o.PendingMsgs)}, {"PendingBytes", int64(o.PendingBytes)},
		{"MaxDeliver", int64(o.MaxDeliver)}, {"StreamReplicas", int64(o.StreamReplicas)},
	} {
		if f.v <= 0 {
			bad(f.name, f.v, "a positive number")
		}
	}
	if o.CompressMinBytes < -1 {
		bad("CompressMinBytes", o.CompressMinBytes, "a size in bytes, or -1 for never")
	}
	if o.SyncInterval < -1 {
		bad("SyncInterval", o.SyncInterval, "a positive duration, or -1 for never")
	}
	if o.AckWait < 100*time.Millisecond {
		bad("AckWait", o.AckWait, "at least 100ms")
	}
	if o.StreamMaxAge < 0 {
		bad("StreamMaxAge", o.StreamMaxAge, "a positive duration")
	}
	if o.ForwardTimeout < 0 {
		bad("ForwardTimeout", o.ForwardTimeout, "a positive duration")
	}
	return errors.Join(errs...)
}

// validToken reports whether s is one literal subject token.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>")
}

// validSubject reports whether s is a subject of literal tokens.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, t := range strings.Split(s, ".") {
		if !validToken(t) {
			return false
		}
	}
	return true
}
