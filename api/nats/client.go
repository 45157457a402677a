package natsapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/serving"
)

// Errors of Client calls that got no reply.
var (
	// ErrNoResponders: no replica is subscribed to the request subject
	// (the NATS server says so at once).
	ErrNoResponders = errors.New("natsapi: no xserve replica serves the subject")
	// ErrTimeout: no reply came in time. For a plain request, the replica
	// may have failed: retrying is safe (inference has no side effects).
	ErrTimeout = errors.New("natsapi: no reply in time")
)

// ReplyError is an error reply from a replica.
type ReplyError struct {
	// Code is the status code (Xserve-Error), as HTTP would answer.
	Code int
	// Message says what was wrong.
	Message string
	// RetryAfter is the replica's advice on a 429.
	RetryAfter time.Duration
	// Replica is the service instance id of the replica that answered.
	Replica string
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("natsapi: error reply %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Temporary reports whether retrying may succeed: overloaded (429), not
// ready or shutting down (503), out of time (504).
func (e *ReplyError) Temporary() bool {
	return e.Code == http.StatusTooManyRequests || e.Code == http.StatusServiceUnavailable || e.Code == http.StatusGatewayTimeout
}

// ClientOptions configure a Client. The zero value of every field means its
// default.
type ClientOptions struct {
	// Prefix starts the subjects; default "xserve.v1".
	Prefix string
	// Durable sends requests through the JetStream stream of durable
	// requests instead of request-reply.
	Durable bool
	// Timeout bounds a call whose context has no deadline; default 30s.
	Timeout time.Duration
	// DedupWindow is how long a durable request's id is remembered, to drop
	// replies to it that come again; default 10m.
	DedupWindow time.Duration
	// MaxDecompressedBytes bounds a compressed reply once decompressed;
	// default 1 GiB.
	MaxDecompressedBytes int64
	// StreamWait is how long a durable publish that nothing answers (no
	// responders) is tried again, within the call's deadline: in a NATS
	// cluster the stream has no leader for the seconds of an election
	// after a node is lost or cut off. Default 10s; negative: no wait.
	StreamWait time.Duration
}

// streamRetryWait is the pause between two publishes of a durable request
// while its stream does not answer.
const streamRetryWait = 250 * time.Millisecond

// Client sends inference requests to xserve replicas over NATS, plain or
// durable. It is safe for concurrent use.
type Client struct {
	nc     *nats.Conn
	opts   ClientOptions
	codecs *payload.Codecs

	// Durable mode.
	js    jetstream.JetStream
	inbox string
	sub   *nats.Subscription

	// idKey keys the HMAC that makes a durable request's Nats-Msg-Id from
	// its request id (msgID).
	idKey [32]byte

	mu sync.Mutex // guards waiting, answered, published, lastPrune, sticky
	// sticky maps a sequence (model and id) to the subject of the replica
	// holding its state (sticky.go).
	sticky    map[string]string
	waiting   map[string]chan *nats.Msg
	answered  map[string]time.Time
	published map[string]publication // unanswered ids the stream took
	lastPrune time.Time

	duplicates atomic.Int64
	late       atomic.Int64
}

// NewClient returns a client sending on nc (which it does not close).
func NewClient(nc *nats.Conn, opts ClientOptions) (*Client, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.DedupWindow == 0 {
		opts.DedupWindow = 10 * time.Minute
	}
	if opts.MaxDecompressedBytes == 0 {
		opts.MaxDecompressedBytes = 1 << 30
	}
	if opts.StreamWait == 0 {
		opts.StreamWait = 10 * time.Second
	}
	if !validSubject(opts.Prefix) {
		return nil, fmt.Errorf("natsapi: ClientOptions.Prefix %q is not a subject of literal tokens", opts.Prefix)
	}
	cs, err := payload.NewCodecs(opts.MaxDecompressedBytes)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, opts: opts, codecs: cs}
	rand.Read(c.idKey[:])
	if opts.Durable {
		if c.js, err = jetstream.New(nc); err != nil {
			cs.Close()
			return nil, fmt.Errorf("natsapi: JetStream: %w", err)
		}
		c.waiting = map[string]chan *nats.Msg{}
		c.answered = map[string]time.Time{}
		c.published = map[string]publication{}
		c.inbox = nc.NewInbox()
		if c.sub, err = nc.Subscribe(c.inbox, c.onReply); err != nil {
			cs.Close()
			return nil, fmt.Errorf("natsapi: subscribe to the reply inbox: %w", err)
		}
		c.sub.SetPendingLimits(-1, -1)
	}
	return c, nil
}

// Close unsubscribes the durable reply inbox and releases the codecs.
func (c *Client) Close() error {
	var err error
	if c.sub != nil {
		err = c.sub.Unsubscribe()
	}
	c.codecs.Close()
	return err
}

// Duplicates counts durable replies dropped because their request had
// already been answered (a redelivery raced a slow first attempt).
func (c *Client) Duplicates() int64 { return c.duplicates.Load() }

// Late counts durable replies that came after their call gave up.
func (c *Client) Late() int64 { return c.late.Load() }

// Call sends msg, a request for model ("": the body names it) with the
// protocol's headers and body, and returns the reply. The subject is set
// from the model; X-Request-Id is set when missing, and Xserve-Timeout from
// ctx's deadline (or ClientOptions.Timeout). An error reply is returned as a
// *ReplyError together with the reply; no reply is ErrNoResponders or
// ErrTimeout.
func (c *Client) Call(ctx context.Context, model string, msg *nats.Msg) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	id := requestID(msg.Header)
	if id == "" {
		id = nuid.Next()
	}
	msg.Header.Set(HeaderRequestID, id)
	if headerValue(msg.Header, HeaderTimeout) == "" {
		if dl, ok := ctx.Deadline(); ok {
			msg.Header.Set(HeaderTimeout, time.Until(dl).Round(time.Millisecond).String())
		}
	}
	var reply *nats.Msg
	var err error
	if c.opts.Durable {
		reply, err = c.callDurable(ctx, model, id, msg)
	} else {
		subject, sticky := c.route(model, msg)
		reply, err = c.request(ctx, model, id, subject, sticky, msg)
		c.remember(model, msg, reply, err)
	}
	if err != nil {
		return nil, err
	}
	if rerr := replyError(reply); rerr != nil {
		return reply, rerr
	}
	return reply, nil
}

// callDurable publishes msg to the stream and waits for its reply.
func (c *Client) callDurable(ctx context.Context, model, id string, msg *nats.Msg) (*nats.Msg, error) {
	ch := make(chan *nats.Msg, 1)
	c.mu.Lock()
	if _, busy := c.waiting[id]; busy {
		c.mu.Unlock()
		return nil, fmt.Errorf("natsapi: request id %q is already in flight on this client", id)
	}
	c.waiting[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.waiting[id] == ch {
			delete(c.waiting, id)
		}
		c.mu.Unlock()
	}()
	msg.Subject = durableSubject(c.opts.Prefix, model)
	msg.Header.Set(HeaderMsgID, c.msgID(id))
	msg.Header.Set(HeaderReplyTo, c.inbox)
	// The reply can come before the stream's ack, or without it (the ack
	// lost with a NATS node after the request was stored): a reply ends
	// the call whatever the publish says.
	published := make(chan error, 1)
	go func() {
		retries := int(max(c.opts.StreamWait, 0) / streamRetryWait)
		_, err := c.js.PublishMsg(ctx, msg, jetstream.WithRetryWait(streamRetryWait), jetstream.WithRetryAttempts(retries))
		published <- err
	}()
	for {
		select {
		case r := <-ch:
			return r, nil
		case err := <-published:
			published = nil
			if err != nil {
				select {
				case r := <-ch:
					return r, nil
				default:
				}
				return nil, c.publishError(err, id, msg.Subject)
			}
			c.notePublished(id)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: durable request %s on %s (it stays in the stream until a replica answers; a retry with the same id publishes it again, and only one answer is returned): %w", ErrTimeout, id, msg.Subject, ctx.Err())
		}
	}
}

// publishError says why a durable request could not be published.
func (c *Client) publishError(err error, id, subject string) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("%w: no stream takes %s after %v (is an xserve replica running with --nats-durable? has the stream a leader?)", ErrNoResponders, subject, max(c.opts.StreamWait, 0))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: publishing request %s to %s: %w", ErrTimeout, id, subject, err)
	}
	return fmt.Errorf("natsapi: publish durable request %s to %s: %w", id, subject, err)
}

// publication counts the times the stream took one request id.
type publication struct {
	n    int
	last time.Time
}

// msgID is the Nats-Msg-Id of a durable request: an HMAC of its id under
// the client's own random key, so that JetStream drops a second publish
// whose first it may have stored without its ack reaching us, and nobody
// else can know it before the request is sent (a request id may be
// predictable: a client's sequence, an order number), publish a request
// with it first and have the client's request dropped as a duplicate. A
// retry of a request the stream took and nobody answered in time gets a new
// one (the HMAC of the id and the count of its publications), so that it is
// stored and delivered again: its reply may have been lost on the way (the
// answering replica's NATS node cut off from ours after the stream recorded
// the request's ack, or a reply sent across a NATS server restart before
// the client's inbox was subscribed again). The client drops the second
// reply if both come.
func (c *Client) msgID(id string) string {
	c.mu.Lock()
	n := c.published[id].n
	c.mu.Unlock()
	m := hmac.New(sha256.New, c.idKey[:])
	m.Write([]byte(id))
	if n > 0 {
		fmt.Fprintf(m, "\x00%d", n+1)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// notePublished records that the stream took a publish of id.
func (c *Client) notePublished(id string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, done := c.answered[id]; done { // the reply came first
		return
	}
	c.published[id] = publication{c.published[id].n + 1, now}
	if len(c.published) > 1<<16 {
		for k, p := range c.published {
			if now.Sub(p.last) > c.opts.DedupWindow {
				delete(c.published, k)
			}
		}
	}
}

// onReply routes a durable reply to its waiting call, counting the ones
// that come again.
func (c *Client) onReply(m *nats.Msg) {
	id := headerValue(m.Header, HeaderRequestID)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.published, id)
	if ch, ok := c.waiting[id]; ok {
		delete(c.waiting, id)
		c.answered[id] = now
		ch <- m
		return
	}
	if _, ok := c.answered[id]; ok {
		c.duplicates.Add(1)
		return
	}
	c.late.Add(1)
	c.answered[id] = now
	if len(c.answered) > 1<<16 && now.Sub(c.lastPrune) > time.Minute {
		c.lastPrune = now
		for k, t := range c.answered {
			if now.Sub(t) > c.opts.DedupWindow {
				delete(c.answered, k)
			}
		}
	}
}

// replyError returns the *ReplyError of an error reply, nil otherwise.
func replyError(m *nats.Msg) error {
	raw := headerValue(m.Header, HeaderError)
	if raw == "" {
		return nil
	}
	e := &ReplyError{Message: headerValue(m.Header, HeaderErrorMessage), Replica: headerValue(m.Header, HeaderReplica)}
	e.Code, _ = strconv.Atoi(raw)
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(m.Data, &body) == nil && body.Error != "" {
		e.Message = body.Error
	}
	if s, err := strconv.Atoi(headerValue(m.Header, HeaderRetryAfter)); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// InferOptions tune Client.Infer.
type InferOptions struct {
	// Version is the model version; 0 for the latest.
	Version int64
	// ID is the request id; default a fresh unique one.
	ID string
	// JSON sends the inputs as JSON data and asks for JSON outputs, rather
	// than the binary tensor extension.
	JSON bool
	// Compression compresses the request body: "", "gzip" or "zstd".
	Compression string
	// AcceptEncoding asks for a compressed reply: "", "gzip" or "zstd".
	AcceptEncoding string
	// Sequence places the request in a sequence of a stateful model; its
	// later steps go to the replica holding its state.
	Sequence *serving.SequenceStep
}

// Result is a successful Infer.
type Result struct {
	*serving.InferResponse
	// Replica is the service instance id of the replica that answered.
	Replica string
	// Delivery is, for a durable request, how many times JetStream had
	// delivered it when it was answered.
	Delivery int
}

// Infer runs inputs through model and returns the outputs.
func (c *Client) Infer(ctx context.Context, model string, inputs []serving.NamedTensor, opts InferOptions) (*Result, error) {
	body, hl, err := payload.EncodeV1Request("", opts.Version, opts.ID, inputs, !opts.JSON)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	h.Set(HeaderContentType, "application/json")
	if hl >= 0 {
		h.Set(HeaderContentType, "application/octet-stream")
		h.Set(HeaderInferenceLength, strconv.Itoa(hl))
	}
	if opts.ID != "" {
		h.Set(HeaderRequestID, opts.ID)
	}
	if opts.Version > 0 {
		h.Set(HeaderModelVersion, strconv.FormatInt(opts.Version, 10))
	}
	switch opts.Compression {
	case "":
	case payload.EncodingGzip, payload.EncodingZstd:
		if body, err = c.codecs.Encode(opts.Compression, body); err != nil {
			return nil, err
		}
		h.Set(HeaderContentEncoding, opts.Compression)
	default:
		return nil, fmt.Errorf("natsapi: InferOptions.Compression %q: want gzip or zstd", opts.Compression)
	}
	if opts.AcceptEncoding != "" {
		h.Set(HeaderAcceptEncoding, opts.AcceptEncoding)
	}
	sequenceHeadersOf(h, opts.Sequence)
	reply, err := c.Call(ctx, model, &nats.Msg{Header: h, Data: body})
	if err != nil {
		return nil, err
	}
	data, err := c.codecs.Decode(headerValue(reply.Header, HeaderContentEncoding), reply.Data)
	if err != nil {
		return nil, fmt.Errorf("natsapi: reply: %w", err)
	}
	resp, err := payload.DecodeV1Response(data, headerValue(reply.Header, HeaderInferenceLength), 1<<40)
	if err != nil {
		return nil, err
	}
	res := &Result{InferResponse: resp, Replica: headerValue(reply.Header, HeaderReplica)}
	res.Delivery, _ = strconv.Atoi(headerValue(reply.Header, HeaderDelivery))
	return res, nil
}
