package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Headers of xserve's NATS protocol (docs/NATS.md) the NATS target uses.
const (
	natsHeaderProtocol   = "Xserve-Protocol"
	natsHeaderRequestID  = "X-Request-Id"
	natsHeaderTimeout    = "Xserve-Timeout"
	natsHeaderReplyTo    = "Xserve-Reply-To"
	natsHeaderError      = "Xserve-Error"
	natsHeaderErrMessage = "Xserve-Error-Message"
)

// ErrNoResponders: no xserve replica is subscribed to the NATS subject (or,
// durable, no stream takes it). Counted as the failure kind "no responders".
var ErrNoResponders = errors.New("loadtest: no responders")

// NATSOptions configures a NATSTarget. Zero values mean the defaults.
type NATSOptions struct {
	// URL is the NATS server, e.g. "nats://127.0.0.1:4222" (a
	// comma-separated list for a cluster). Required.
	URL string
	// Model is the model to infer with; requests go to
	// Prefix.infer.<Model>. Required.
	Model string
	// Version is the model version; empty for the server's choice.
	Version string
	// Protocol is the body format, as over HTTP: ProtocolV1JSON (the
	// default), ProtocolV2JSON or ProtocolV2Binary (both with the header
	// Xserve-Protocol: v2).
	Protocol Protocol
	// Compression compresses request bodies: "", "gzip" or "zstd".
	Compression string
	// AcceptEncoding asks for compressed replies: "", "gzip" or "zstd".
	AcceptEncoding string
	// Outputs names the outputs to ask for; nil asks for all.
	Outputs []string
	// Validate decodes every successful reply and checks its outputs, as
	// HTTPOptions.Validate does; ExpectOutputs also checks their shapes.
	Validate      bool
	ExpectOutputs map[string][]int64
	// Durable sends each request through xserve's JetStream work queue
	// (Prefix.durable.<Model>) and waits for its reply on an inbox; replies
	// that come again for an answered request are dropped and counted
	// (Duplicates). The target remembers every request id it sent for
	// that, so a run is bounded in memory by its number of requests.
	Durable bool
	// Prefix starts the subjects; default "xserve.v1".
	Prefix string
	// Conns is the number of NATS connections the requests are spread
	// over; default 1 (NATS multiplexes requests on one connection).
	Conns int
	// Timeout bounds each request; default 30s.
	Timeout time.Duration
	// MaxResponseBytes bounds a reply body once decompressed; default
	// 256 MiB.
	MaxResponseBytes int64
	// CredsFile, Token and NkeyFile (an NKey seed, such as the client seed
	// of xserve's embedded server) authenticate to the NATS server.
	CredsFile, Token, NkeyFile string
	// AllowRemote lets the target connect to a server that is not on the
	// loopback interface.
	AllowRemote bool
}

func (o *NATSOptions) setDefaults() {
	if o.Protocol == "" {
		o.Protocol = ProtocolV1JSON
	}
	if o.Prefix == "" {
		o.Prefix = "xserve.v1"
	}
	if o.Conns == 0 {
		o.Conns = 1
	}
	responseDefaults(&o.Timeout, &o.MaxResponseBytes, &o.Validate, o.ExpectOutputs)
}

func (o *NATSOptions) validate() error {
	if _, err := ParseProtocol(string(o.Protocol)); err != nil {
		return err
	}
	if o.URL == "" {
		return fmt.Errorf("%w: NATSOptions.URL is empty", ErrOptions)
	}
	if o.Model == "" || strings.ContainsAny(o.Model, " *>") {
		return fmt.Errorf("%w: NATSOptions.Model %q: want a model name", ErrOptions, o.Model)
	}
	for _, c := range []struct{ field, v string }{{"Compression", o.Compression}, {"AcceptEncoding", o.AcceptEncoding}} {
		if c.v != "" && c.v != "gzip" && c.v != "zstd" {
			return fmt.Errorf("%w: NATSOptions.%s %q: want \"\", \"gzip\" or \"zstd\"", ErrOptions, c.field, c.v)
		}
	}
	if o.Conns < 0 || o.Timeout < 0 || o.MaxResponseBytes < 0 {
		return fmt.Errorf("%w: NATSOptions Conns %d, Timeout %v and MaxResponseBytes %d must not be negative", ErrOptions, o.Conns, o.Timeout, o.MaxResponseBytes)
	}
	return nil
}

// NATSTarget sends inference requests to xserve replicas over NATS
// request-reply (or, with Durable, through the JetStream work queue). It is
// a Target and a Preparer, safe for concurrent use; Close it when done.
type NATSTarget struct {
	opts    NATSOptions
	subject string
	enc     *HTTPTarget // encodes the bodies (as HTTP sends them) and decodes replies
	conns   []*nats.Conn
	next    atomic.Uint64

	// Durable mode.
	js      []jetstream.JetStream
	inboxes []string
	subs    []*nats.Subscription

	mu         sync.Mutex // guards waiting and answered
	waiting    map[string]chan *nats.Msg
	answered   map[string]struct{}
	duplicates atomic.Int64

	closed sync.Once
}

// NewNATSTarget checks opts (including, unless AllowRemote, that the URL is
// on the loopback interface) and connects.
func NewNATSTarget(ctx context.Context, opts NATSOptions) (*NATSTarget, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	nopts := []nats.Option{nats.Name("xserve loadtest"), nats.Timeout(5 * time.Second), nats.MaxReconnects(-1)}
	if !opts.AllowRemote {
		for _, u := range strings.Split(opts.URL, ",") {
			if err := CheckLoopbackURL(ctx, strings.TrimSpace(u)); err != nil {
				return nil, err
			}
		}
		nopts = append(nopts, nats.SetCustomDialer(&net.Dialer{Timeout: 5 * time.Second, Control: loopbackOnly}))
	}
	if opts.CredsFile != "" {
		nopts = append(nopts, nats.UserCredentials(opts.CredsFile))
	}
	if opts.Token != "" {
		nopts = append(nopts, nats.Token(opts.Token))
	}
	if opts.NkeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(opts.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("loadtest: NKey seed file: %w", err)
		}
		nopts = append(nopts, o)
	}
	t := &NATSTarget{
		opts:    opts,
		subject: opts.Prefix + ".infer." + opts.Model,
		enc: &HTTPTarget{opts: HTTPOptions{
			Model: opts.Model, Version: opts.Version, Protocol: opts.Protocol,
			Compression: opts.Compression, Outputs: opts.Outputs, MaxResponseBytes: opts.MaxResponseBytes,
		}},
		waiting:  map[string]chan *nats.Msg{},
		answered: map[string]struct{}{},
	}
	if opts.Durable {
		t.subject = opts.Prefix + ".durable." + opts.Model
	}
	var err error
	if opts.Compression == "zstd" {
		if t.enc.zenc, err = zstd.NewWriter(nil); err != nil {
			return nil, fmt.Errorf("loadtest: zstd: %w", err)
		}
	}
	if opts.AcceptEncoding == "zstd" {
		if t.enc.zdec, err = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(uint64(opts.MaxResponseBytes))); err != nil {
			t.Close()
			return nil, fmt.Errorf("loadtest: zstd: %w", err)
		}
	}
	for range opts.Conns {
		nc, err := nats.Connect(opts.URL, nopts...)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadtest: connect to %s: %w", opts.URL, err)
		}
		t.conns = append(t.conns, nc)
		if !opts.Durable {
			continue
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadtest: JetStream: %w", err)
		}
		inbox := nc.NewInbox()
		sub, err := nc.Subscribe(inbox, t.onReply)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("loadtest: subscribe to the reply inbox: %w", err)
		}
		sub.SetPendingLimits(-1, -1)
		t.js, t.inboxes, t.subs = append(t.js, js), append(t.inboxes, inbox), append(t.subs, sub)
	}
	return t, nil
}

// String describes the target, e.g.
// "nats v1json xserve.v1.infer.tinycnn at nats://127.0.0.1:4222".
func (t *NATSTarget) String() string {
	s := fmt.Sprintf("nats %s %s at %s", t.opts.Protocol, t.subject, t.opts.URL)
	if t.opts.Durable {
		s += " (durable)"
	}
	if t.opts.Version != "" {
		s += ", version " + t.opts.Version
	}
	if t.opts.Compression != "" {
		s += ", request " + t.opts.Compression
	}
	if t.opts.AcceptEncoding != "" {
		s += ", response " + t.opts.AcceptEncoding
	}
	if t.opts.Validate {
		s += ", validated"
	}
	if d := t.duplicates.Load(); d > 0 {
		s += fmt.Sprintf(", %d duplicate replies dropped", d)
	}
	return s
}

// Duplicates counts durable replies dropped because their request had
// already been answered.
func (t *NATSTarget) Duplicates() int64 { return t.duplicates.Load() }

// Close closes the connections and releases the codecs. It is safe to call
// more than once; the target must not be used after it.
func (t *NATSTarget) Close() error {
	t.closed.Do(func() {
		for _, nc := range t.conns {
			nc.Close()
		}
		if t.enc.zenc != nil {
			t.enc.zenc.Close()
		}
		if t.enc.zdec != nil {
			t.enc.zdec.Close()
		}
	})
	return nil
}

// Prepare encodes req once, in the target's protocol and compression.
func (t *NATSTarget) Prepare(req *Request) error {
	p, err := t.enc.encode(req.Inputs)
	if err != nil {
		return err
	}
	req.Payload = p
	return nil
}

// natsFailure is a NATS failure with its own kind ("no responders").
type natsFailure struct {
	kind string
	err  error
}

func (e *natsFailure) Error() string { return e.err.Error() }
func (e *natsFailure) Unwrap() error { return e.err }
func (e *natsFailure) Kind() string  { return e.kind }

// Do sends req and waits for its reply. An error reply fails with a
// *StatusError (protocol "nats", its Xserve-Error code); with Validate set,
// so does a malformed reply (with ErrInvalidResponse).
func (t *NATSTarget) Do(ctx context.Context, req *Request) (*Result, error) {
	p, ok := req.Payload.(*httpPayload)
	if !ok {
		var err error
		if p, err = t.enc.encode(req.Inputs); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	id := nuid.Next()
	h := nats.Header{}
	h.Set("Content-Type", p.contentType)
	h.Set(natsHeaderRequestID, id)
	if t.opts.Protocol != ProtocolV1JSON {
		h.Set(natsHeaderProtocol, "v2")
	}
	if t.opts.Protocol == ProtocolV2Binary {
		h.Set(HeaderContentLength, strconv.Itoa(p.headerLen))
	}
	if t.opts.Compression != "" {
		h.Set("Content-Encoding", t.opts.Compression)
	}
	if t.opts.AcceptEncoding != "" {
		h.Set("Accept-Encoding", t.opts.AcceptEncoding)
	}
	if dl, ok := ctx.Deadline(); ok {
		h.Set(natsHeaderTimeout, time.Until(dl).Round(time.Millisecond).String())
	}
	msg := &nats.Msg{Subject: t.subject, Header: h, Data: p.body}
	i := int(t.next.Add(1) % uint64(len(t.conns)))
	var reply *nats.Msg
	var err error
	if t.opts.Durable {
		reply, err = t.doDurable(ctx, i, id, msg)
	} else {
		reply, err = t.conns[i].RequestMsgWithContext(ctx, msg)
		if errors.Is(err, nats.ErrNoResponders) {
			err = &natsFailure{"no responders", fmt.Errorf("%w: nobody subscribes to %s", ErrNoResponders, t.subject)}
		}
	}
	res := &Result{BytesSent: int64(len(p.body))}
	if err != nil {
		return res, err
	}
	res.BytesReceived = int64(len(reply.Data))
	if code := reply.Header.Get(natsHeaderError); code != "" {
		c, _ := strconv.Atoi(code)
		res.Status = c
		return res, &StatusError{Protocol: "nats", Code: c, Message: natsErrorMessage(reply)}
	}
	res.Status = 200
	if !t.opts.Validate {
		return res, nil
	}
	body, err := t.enc.decompress(reply.Header.Get("Content-Encoding"), reply.Data)
	if err != nil {
		return res, err
	}
	if int64(len(body)) > t.opts.MaxResponseBytes {
		return res, fmt.Errorf("%w: reply larger than %d bytes", ErrInvalidResponse, t.opts.MaxResponseBytes)
	}
	headerLen := -1
	if hl := reply.Header.Get(HeaderContentLength); hl != "" {
		if headerLen, err = strconv.Atoi(hl); err != nil || headerLen < 0 || headerLen > len(body) {
			return res, fmt.Errorf("%w: %s %q does not fit a %d-byte reply", ErrInvalidResponse, HeaderContentLength, hl, len(body))
		}
	}
	return res, validateResponse(body, headerLen, t.opts.ExpectOutputs)
}

// doDurable publishes msg to the stream and waits for its reply.
func (t *NATSTarget) doDurable(ctx context.Context, i int, id string, msg *nats.Msg) (*nats.Msg, error) {
	ch := make(chan *nats.Msg, 1)
	t.mu.Lock()
	t.waiting[id] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.waiting, id)
		t.mu.Unlock()
	}()
	msg.Header.Set(nats.MsgIdHdr, id)
	msg.Header.Set(natsHeaderReplyTo, t.inboxes[i])
	if _, err := t.js[i].PublishMsg(ctx, msg); err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			return nil, &natsFailure{"no responders", fmt.Errorf("%w: no stream takes %s (xserve --nats-durable?)", ErrNoResponders, t.subject)}
		}
		return nil, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// onReply routes a durable reply to its request; a reply for a request
// already answered is a duplicate.
func (t *NATSTarget) onReply(m *nats.Msg) {
	id := m.Header.Get(natsHeaderRequestID)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.answered[id]; dup {
		t.duplicates.Add(1)
		return
	}
	t.answered[id] = struct{}{}
	if ch, ok := t.waiting[id]; ok {
		ch <- m
	}
}

// natsErrorMessage is an error reply's message.
func natsErrorMessage(m *nats.Msg) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(m.Data, &e) == nil && e.Error != "" {
		return e.Error
	}
	return m.Header.Get(natsHeaderErrMessage)
}
