package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/cors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/xserve/xserve/api/auth"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/shm"
	"github.com/xserve/xserve/internal/reqid"
	"github.com/xserve/xserve/internal/tracing"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Backend is what the server needs of the model server. *serving.Manager
// implements it; the methods have its contract: they are safe for
// concurrent use, errors wrap package serving's sentinels (which the server
// maps to status codes), and model names come straight from clients, so the
// backend validates them before they touch the file system.
type Backend interface {
	// Infer runs one request on model version (0 = the latest ready one).
	Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error)
	// Metadata describes model version (0 = latest).
	Metadata(model string, version int64) (*serving.Metadata, error)
	// Status lists every known model version.
	Status() []serving.ModelStatus
	// Readiness says whether the server takes requests, and why not
	// (serving.Manager computes it for every protocol).
	Readiness() serving.Readiness
	// ModelReady reports whether model version (0 = any) can take requests.
	ModelReady(model string, version int64) bool
	// Load (re)loads a model from the repository.
	Load(ctx context.Context, model string) error
	// Unload unloads a model after its in-flight requests finish.
	Unload(ctx context.Context, model string) error
	// WriteMetrics writes the serving metrics in the Prometheus text format.
	WriteMetrics(w io.Writer) error
	// Config is the configuration of model version (0 = latest), for
	// Triton's model configuration extension.
	Config(model string, version int64) (*serving.ModelConfig, error)
	// Statistics are the counters of the READY versions of model ("" =
	// every model) and version (0 = every version), for Triton's statistics
	// extension.
	Statistics(model string, version int64) ([]serving.Statistics, error)
}

// *serving.Manager is the production Backend.
var _ Backend = (*serving.Manager)(nil)

// Content types of responses.
const (
	contentJSON   = "application/json"
	contentBinary = "application/octet-stream"
	contentProm   = "text/plain; version=0.0.4; charset=utf-8"
)

// Server is the HTTP API server. Create it with New, run it with Listen or
// Serve, stop it with Shutdown.
type Server struct {
	backend Backend
	opts    Options
	log     *slog.Logger
	app     *fiber.App
	codecs  *payload.Codecs
	metrics *httpMetrics
	root    string // the backend's repository root, for payload.PublicMessage
	budget  *payload.Budget
	check   func(model string, version int64, name string, dt tensor.DType, shape []int64) error // nil when the backend has none
	shm     *shm.Registry                                                                        // Triton's system shared-memory regions
	ownShm  bool                                                                                 // shm is the server's own: Shutdown closes it

	// ctx is the parent of every backend call; cancelled when Shutdown gives
	// up waiting, so that stragglers stop.
	ctx    context.Context
	cancel context.CancelFunc

	closing atomic.Bool // set by Shutdown; read atomically
	fresh   freshConns  // connections no request has reached a handler on yet
	// lastStart is when the last request started (unix nanoseconds;
	// atomic): Shutdown's drain waits for it to be drainQuiet ago.
	lastStart atomic.Int64

	mu sync.Mutex   // guards ln
	ln net.Listener // set by Serve
}

// New returns a server answering from backend; opts' zero fields take their
// defaults.
func New(backend Backend, opts Options) (*Server, error) {
	if backend == nil {
		return nil, errors.New("httpapi: New: backend is nil")
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	cs, err := payload.NewCodecs(opts.MaxDecompressedBytes)
	if err != nil {
		return nil, err
	}
	s := &Server{backend: backend, opts: opts, log: opts.Logger, codecs: cs, metrics: newHTTPMetrics(), root: payload.RootOf(backend)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.budget = opts.Budget; s.budget == nil {
		if s.budget, err = payload.NewBudget(opts.MemoryBudget); err != nil {
			return nil, err
		}
	}
	if c, ok := backend.(inputChecker); ok {
		s.check = c.CheckInput
	}
	s.shm, s.ownShm = shm.OrNew(opts.SharedMemory)
	s.app = fiber.New(fiber.Config{
		Concurrency: opts.MaxConns,
		AppName:     "xserve",
		BodyLimit:   int(opts.MaxBodyBytes),
		// The headers' deadline; the body's is set once they are in
		// (HeaderReceived below).
		ReadTimeout:    opts.ReadHeaderTimeout,
		WriteTimeout:   opts.WriteTimeout,
		IdleTimeout:    opts.IdleTimeout,
		ReadBufferSize: 16 << 10, // the largest request header block
		// The handlers read the body themselves through MaxBodyBytes (see
		// readBody) and drain what they leave, so that a body over the
		// limit gets its 413 rather than a connection reset.
		StreamRequestBody:     true,
		DisableStartupMessage: true,
		// Multipart bodies are refused (415) by the handlers, not parsed.
		DisablePreParseMultipartForm: true,
		CaseSensitive:                true,
		ErrorHandler:                 s.fiberError,
	})
	srv := s.app.Server()
	srv.ConnState = s.fresh.track
	srv.HeaderReceived = s.bodyDeadline
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	a := s.app
	if len(s.opts.CORSOrigins) > 0 {
		a.Use(cors.New(cors.Config{
			AllowOrigins:  strings.Join(s.opts.CORSOrigins, ","),
			AllowMethods:  "GET,POST,OPTIONS",
			AllowHeaders:  "Authorization,Content-Type,Content-Encoding,Accept-Encoding," + HeaderInferenceLength + ",X-Request-ID,traceparent",
			ExposeHeaders: HeaderInferenceLength + ",X-Request-ID",
			MaxAge:        600,
		}))
	}
	post := func(path string, h fiber.Handler) { a.Post(path, s.handle(fiber.MethodPost, path, s.refuseForms(h))) }
	admin := func(path string, h fiber.Handler) { a.Post(path, s.handle(fiber.MethodPost, path, s.requireJSON(h))) }
	get := func(path string, h fiber.Handler) { a.Get(path, s.handle(fiber.MethodGet, path, h)) }

	post("/v1/infer", func(c *fiber.Ctx) error { return s.infer(c, false) })

	get("/v2/health/live", s.live)
	get("/v2/health/ready", s.ready)
	get("/v2", s.serverMetadata)
	get("/v2/models/stats", s.statistics)
	get("/v2/models/:model", s.modelMetadata)
	get("/v2/models/:model/versions/:version", s.modelMetadata)
	get("/v2/models/:model/ready", s.modelReady)
	get("/v2/models/:model/versions/:version/ready", s.modelReady)
	get("/v2/models/:model/config", s.modelConfig)
	get("/v2/models/:model/versions/:version/config", s.modelConfig)
	get("/v2/models/:model/stats", s.statistics)
	get("/v2/models/:model/versions/:version/stats", s.statistics)
	post("/v2/models/:model/infer", func(c *fiber.Ctx) error { return s.infer(c, true) })
	post("/v2/models/:model/versions/:version/infer", func(c *fiber.Ctx) error { return s.infer(c, true) })
	admin("/v2/repository/index", s.repositoryIndex)
	admin("/v2/repository/models/:model/load", s.load)
	admin("/v2/repository/models/:model/unload", s.unload)

	s.openaiRoutes(get, post)
	s.sharedMemoryRoutes(get, post)
	s.unsupportedRoutes(get, post)

	get("/metrics", s.writeMetrics)
}

// Listen listens on the TCP address addr and serves until Shutdown; see
// Serve.
func (s *Server) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("httpapi: listen: %w", err)
	}
	return s.Serve(ln)
}

// Serve serves HTTP on ln until Shutdown, then returns ErrServerClosed; any
// other error is an accept failure. Serve takes ownership of ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	if s.ln != nil {
		s.mu.Unlock()
		return errors.New("httpapi: Serve called twice")
	}
	s.ln = ln
	s.mu.Unlock()
	addr := ln.Addr().String()
	s.log.Info("listening on "+addr, "addr", addr, "tls", s.opts.TLS != nil, "auth", s.opts.Auth != nil)
	if s.opts.TLS != nil {
		ln = tls.NewListener(ln, s.opts.TLS)
	}
	if s.opts.MaxConnsPerIP > 0 {
		ln = newPerIPListener(ln, s.opts.MaxConnsPerIP)
	}
	err := s.app.Listener(ln)
	if s.closing.Load() {
		return ErrServerClosed
	}
	return err
}

// Addr returns the address the server listens on, nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown drains the server, then stops it. Draining, the listener stays
// open and every request is still served, each answer closing its
// connection, and /v2/health/ready answers 503 (not a refused
// connection): a request a client sent before Shutdown, still on its way
// or on a kept-alive connection, is answered, not reset. Once no request
// has started for drainQuiet (at most drainMax), Shutdown stops
// accepting connections, closes idle ones (and, after shutdownConnGrace,
// those no request has started on), and waits for the requests in flight
// to be answered. When ctx ends first it returns ctx's error and cancels
// the backend calls still running.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	ln := s.ln
	s.mu.Unlock()
	var err error
	if ln != nil {
		s.drain(ctx)
		done := make(chan struct{})
		go s.fresh.closeWhileShutdown(ctx, done)
		err = s.app.ShutdownWithContext(ctx)
		close(done)
		ln.Close() // in case Serve had not handed it to the server yet
	}
	s.cancel()
	if err == nil {
		s.codecs.Close()
	}
	if s.ownShm {
		err = errors.Join(err, s.shm.Close())
	}
	return err
}

// Drain bounds: Shutdown drains until no request has been in the server
// for drainQuiet, or for drainMax at most.
const (
	drainQuiet = 300 * time.Millisecond
	drainMax   = 5 * time.Second
)

// drain waits, the server still serving, until no request has started
// for drainQuiet (those in flight are waited for after), drainMax has
// passed or ctx ends.
func (s *Server) drain(ctx context.Context) {
	deadline := time.Now().Add(drainMax)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Since(time.Unix(0, s.lastStart.Load())) < drainQuiet {
		if time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// handle wraps a handler: it gives the request its id (X-Request-ID in and
// out), recovers panics, turns errors into JSON error responses, counts the
// request under its route pattern and logs it.
func (s *Server) handle(method, route string, h fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		s.lastStart.Store(start.UnixNano())
		if s.closing.Load() {
			// Draining: the client is to go elsewhere for its next request.
			c.Context().SetConnectionClose()
		}
		s.fresh.started(c.Context().Conn())
		c.Locals(startKey{}, start)
		s.metrics.inflight.Inc()
		lease := s.budget.Lease()
		c.Locals(leaseKey{}, lease)
		id := reqid.From(c.Get(reqid.Header), c.Get("traceparent"))
		c.Locals(requestIDKey{}, id)
		c.Set(reqid.Header, id)
		span := s.startSpan(c, method, route, id)
		err := s.authorize(c, route)
		if err == nil {
			err = s.call(h, c)
		}
		if err != nil {
			s.writeError(c, err)
		}
		lease.Release()
		s.drainBody(c)
		s.metrics.inflight.Dec()
		code := c.Response().StatusCode()
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("http.response.status_code", code))
		}
		tracing.End(span, err)
		d := time.Since(start)
		s.metrics.observe(route, method, code, d)
		level := slog.LevelDebug
		if s.opts.AccessLog {
			level = slog.LevelInfo
		}
		if s.log.Enabled(context.Background(), level) {
			s.log.Log(context.Background(), level, "request", "method", method, "path", c.Path(), "route", route,
				"status", code, "duration", d, "bytes_in", c.Request().Header.ContentLength(), "bytes_out", len(c.Response().Body()),
				"remote", c.IP(), "request_id", id)
		}
		return nil
	}
}

// startSpan starts the request's server span, continuing the client's
// trace (traceparent), and makes it the request's context; with tracing
// off it returns a span that records nothing and leaves the context alone.
func (s *Server) startSpan(c *fiber.Ctx, method, route, id string) trace.Span {
	if tracing.Off(s.opts.Tracer) {
		return trace.SpanFromContext(context.Background())
	}
	ctx := tracing.Propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": c.Get("traceparent"), "tracestate": c.Get("tracestate")})
	ctx, span := s.opts.Tracer.Start(ctx, method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("http.route", route), attribute.String("xserve.request_id", id)))
	c.SetUserContext(ctx)
	return span
}

// requestIDKey holds (in fiber's Locals) the request's id.
type requestIDKey struct{}

// startKey holds (in fiber's Locals) when the handler began: the body's
// pace is measured from then.
type startKey struct{}

// startOf returns when c's handler began.
func startOf(c *fiber.Ctx) time.Time {
	t, ok := c.Locals(startKey{}).(time.Time)
	if !ok {
		return time.Now()
	}
	return t
}

// requestID returns the id handle gave the request.
func requestID(c *fiber.Ctx) string {
	id, _ := c.Locals(requestIDKey{}).(string)
	return id
}

// authorize checks the request's bearer token against the scope route
// needs when Options.Auth is set.
func (s *Server) authorize(c *fiber.Ctx, route string) error {
	if s.opts.Auth == nil {
		return nil
	}
	need := auth.ScopeInfer
	switch {
	case strings.HasPrefix(route, "/v2/health/") || strings.HasSuffix(route, "/ready") || route == "/metrics":
		if s.opts.OpenHealth {
			return nil
		}
	case strings.HasPrefix(route, "/v2/repository/models/"):
		need = auth.ScopeAdmin
	}
	return s.opts.Auth.Require(c.Get(fiber.HeaderAuthorization), need)
}

// call runs h, turning a panic into an error.
func (s *Server) call(h fiber.Handler, c *fiber.Ctx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("httpapi: handler panicked", "method", c.Method(), "path", c.Path(), "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("httpapi: internal error: %v", p)
		}
	}()
	return h(c)
}

// writeError answers with err's status code and {"error": message}, the
// public message of err (payload.Public: no absolute paths, no package
// prefixes, no cause of a 500; the log has them), with what the client
// sent (the model name) as it sent it.
func (s *Server) writeError(c *fiber.Ctx, err error) {
	code := statusOf(err)
	// Client errors, overload and not-ready answers are routine: debug only.
	if code == http.StatusInternalServerError {
		s.log.Error("request failed", "method", c.Method(), "path", c.Path(), "status", code, "err", err, "request_id", requestID(c))
	} else {
		s.log.Debug("request rejected", "method", c.Method(), "path", c.Path(), "status", code, "err", err, "request_id", requestID(c))
	}
	if code == http.StatusTooManyRequests {
		c.Set(fiber.HeaderRetryAfter, retryAfter(err))
	}
	if code == http.StatusUnauthorized {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="xserve"`)
	}
	c.Response().Header.Del(HeaderInferenceLength)
	c.Response().Header.Del(fiber.HeaderContentEncoding)
	c.Status(code)
	c.Set(fiber.HeaderContentType, contentJSON)
	c.Send(payload.ErrorBody(payload.Public(err, code, s.root, clientNames(c)...)))
}

// modelKey holds (in fiber's Locals) the model name a /v1/infer body gave.
type modelKey struct{}

// clientNames are the names the client sent that an error may quote: the
// URL's model and the model a /v1/infer body named.
func clientNames(c *fiber.Ctx) []string {
	names := []string{}
	if m, err := url.PathUnescape(c.Params("model")); err == nil && m != "" {
		names = append(names, m)
	}
	if m, ok := c.Locals(modelKey{}).(string); ok && m != "" {
		names = append(names, m)
	}
	return names
}

// fiberError answers the errors that fiber and fasthttp raise outside the
// handlers: no route (404), wrong method (405), a body over MaxBodyBytes
// (413), headers too large (431), a read timeout (408).
func (s *Server) fiberError(c *fiber.Ctx, err error) error {
	code := http.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	var msg string
	switch code {
	case http.StatusNotFound:
		msg = fmt.Sprintf("no route %s %s (see docs/HTTP.md for the API)", c.Method(), quotePath(c.Path()))
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method %s is not allowed on %s", c.Method(), quotePath(c.Path()))
	case http.StatusRequestEntityTooLarge:
		msg = payload.Public(s.bodyTooLarge(), code, "")
	case http.StatusRequestTimeout:
		msg = fmt.Sprintf("the request came too slowly: its headers must arrive within %v (ReadHeaderTimeout), its body at %d bytes/s or faster after that long (MinReadRate), within %v (ReadTimeout)",
			s.opts.ReadHeaderTimeout, s.opts.MinReadRate, s.opts.ReadTimeout)
	default:
		msg = payload.Public(err, code, s.root)
	}
	if code >= 500 {
		s.log.Error("request failed", "status", code, "err", err)
	}
	s.metrics.observe("unmatched", strings.Clone(c.Method()), code, 0)
	c.Status(code)
	c.Set(fiber.HeaderContentType, contentJSON)
	return c.Send(payload.ErrorBody(msg))
}

func quotePath(p string) string {
	if len(p) > 128 {
		p = p[:128] + "..."
	}
	return strconv.Quote(p)
}

// send answers 200 with body, compressed when the client accepts it and the
// body is large enough.
func (s *Server) send(c *fiber.Ctx, contentType string, body []byte) error {
	c.Set(fiber.HeaderContentType, contentType)
	if s.opts.CompressMinBytes >= 0 && len(body) >= s.opts.CompressMinBytes {
		c.Vary(fiber.HeaderAcceptEncoding)
		if enc := payload.AcceptEncoding(c.Get(fiber.HeaderAcceptEncoding)); enc != "" {
			z, err := s.codecs.Encode(enc, body)
			if err != nil {
				return fmt.Errorf("httpapi: compress response: %w", err)
			}
			c.Set(fiber.HeaderContentEncoding, enc)
			body = z
		}
	}
	return c.Send(body)
}

func (s *Server) sendJSON(c *fiber.Ctx, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.send(c, contentJSON, b)
}

// modelParam returns the URL's model name, unescaped and copied out of the
// request buffer.
func modelParam(c *fiber.Ctx) (string, error) {
	raw := c.Params("model")
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("model name %s in the URL is not validly escaped", quotePath(raw))
	}
	return strings.Clone(name), nil
}

// versionParam returns the URL's version, 0 when the route has none.
func versionParam(c *fiber.Ctx) (int64, error) {
	return payload.ParseVersion(c.Params("version"))
}

// modelVersionParams returns the URL's model name and version.
func modelVersionParams(c *fiber.Ctx) (string, int64, error) {
	model, err := modelParam(c)
	if err != nil {
		return "", 0, err
	}
	version, err := versionParam(c)
	return model, version, err
}

// readBody reads the request body through the MaxBodyBytes limit into a
// fresh buffer (which may be kept after the handler returns), reserved
// from the memory budget before it is allocated.
func (s *Server) readBody(c *fiber.Ctx) ([]byte, error) {
	req := &c.Context().Request
	lease := leaseOf(c)
	r := s.bodyStream(c, startOf(c))
	if r == nil { // not streamed: fasthttp read it, within BodyLimit
		if err := lease.Reserve(int64(len(req.Body())), "the request body"); err != nil {
			return nil, err
		}
		buf := bodyBuffer(c, len(req.Body()))
		copy(buf, req.Body())
		return buf, nil
	}
	limit := s.opts.MaxBodyBytes
	n := int64(req.Header.ContentLength()) // -1: chunked
	if n > limit {
		return nil, s.bodyTooLarge()
	}
	if n >= 0 { // Content-Length: read exactly that
		if err := lease.Reserve(n, "the request body"); err != nil {
			return nil, err
		}
		buf := bodyBuffer(c, int(n))
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, s.bodyReadError(c, fmt.Sprintf("reading the request body (Content-Length %d)", n), err)
		}
		c.Locals(bodyDoneKey{}, true)
		return buf, nil
	}
	buf, err := payload.ReadAll(r, limit, lease, "the request body") // chunked
	switch {
	case errors.Is(err, payload.ErrOverLimit):
		return nil, s.bodyTooLarge()
	case errors.Is(err, payload.ErrBudget) || errors.Is(err, ErrTooLarge):
		return nil, err
	case err != nil:
		return nil, s.bodyReadError(c, "reading the request body", err)
	}
	c.Locals(bodyDoneKey{}, true)
	return buf, nil
}

// tensorAlign is the alignment the PJRT CPU plugin reads host tensors in
// place at; it copies a tensor that is not.
const tensorAlign = payload.TensorAlign

// bodyBuffer returns a buffer for an n-byte body. With the binary tensor
// extension (an Inference-Header-Content-Length within n, and no
// Content-Encoding) the first tensor's bytes, which follow the JSON header,
// land on a tensorAlign boundary, so that the executable reads them where
// they are.
func bodyBuffer(c *fiber.Ctx, n int) []byte {
	hl, err := strconv.Atoi(strings.TrimSpace(c.Get(HeaderInferenceLength)))
	if err != nil || hl < 0 || hl >= n || c.Get(fiber.HeaderContentEncoding) != "" {
		return make([]byte, n)
	}
	raw := make([]byte, n+tensorAlign-1)
	off := (tensorAlign - (int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))))+hl)%tensorAlign) % tensorAlign
	return raw[off : off+n : off+n]
}

// bodyReadError is the error of a body that could not be read: a body
// slower than MinReadRate (or ReadTimeout) closes the connection, unread
// (ErrSlowBody, 408); anything else is a bad request.
func (s *Server) bodyReadError(c *fiber.Ctx, what string, err error) error {
	if errors.Is(err, ErrSlowBody) {
		c.Locals(bodyDoneKey{}, true)
		c.Context().SetConnectionClose()
		return fmt.Errorf("%s: %w", what, err)
	}
	return badRequest("%s: %v", what, err)
}

// leaseKey holds (in fiber's Locals) the request's lease on the memory
// budget, released when the handler returns.
type leaseKey struct{}

// leaseOf returns the request's lease (nil, which reserves nothing, outside
// a handler).
func leaseOf(c *fiber.Ctx) *payload.Lease {
	l, _ := c.Locals(leaseKey{}).(*payload.Lease)
	return l
}

// inputChecker is implemented by a backend that can check an input's
// declared dtype and shape before its data is decoded
// (serving.Manager.CheckInput).
type inputChecker interface {
	CheckInput(model string, version int64, name string, dt tensor.DType, shape []int64) error
}

// drainLimit is the least drainBody discards before it gives up on a
// connection.
const drainLimit = 64 << 20

// bodyDoneKey marks (in fiber's Locals) a request whose body stream was read
// to its end: fasthttp's chunked stream must not be read past it, or it
// waits for the next request's bytes.
type bodyDoneKey struct{}

func (s *Server) bodyTooLarge() error {
	return tooLarge("the request body is larger than the limit of %d bytes (MaxBodyBytes)", s.opts.MaxBodyBytes)
}

// drainBody reads and discards what the handler left of the request body,
// up to drainLimit bytes, so that the client finishes sending and then reads
// the answer (a 413, typically) instead of a connection reset; past that the
// connection is closed after the response.
func (s *Server) drainBody(c *fiber.Ctx) {
	r := s.bodyStream(c, startOf(c))
	if r == nil || c.Locals(bodyDoneKey{}) != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, r, max(s.opts.MaxBodyBytes, drainLimit)); err != io.EOF {
		c.Context().SetConnectionClose()
	}
}

// body returns the request body with its Content-Encoding undone.
func (s *Server) body(c *fiber.Ctx) ([]byte, error) {
	raw, err := s.readBody(c)
	if err != nil {
		return nil, err
	}
	return s.codecs.DecodeWithin(c.Get(fiber.HeaderContentEncoding), raw, leaseOf(c))
}

// infer handles POST /v1/infer (v2 false) and the OIP infer routes.
func (s *Server) infer(c *fiber.Ctx, v2 bool) error {
	var model string
	var version int64
	if v2 {
		var err error
		if model, err = modelParam(c); err != nil {
			return err
		}
		if version, err = versionParam(c); err != nil {
			return err
		}
	}
	// A request that arrived before Shutdown runs to the end, even if
	// Shutdown has begun meanwhile; its spans continue the request's trace.
	ctx := s.ctx
	if !tracing.Off(s.opts.Tracer) {
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(c.UserContext()))
	}
	var d *payload.Request
	err := tracing.Phase(ctx, s.opts.Tracer, "decode", func(context.Context) error {
		body, err := s.body(c)
		if err != nil {
			return err
		}
		// body is the handler's own buffer: tensors may point into it.
		hdr := c.Get(HeaderInferenceLength)
		lim := payload.Limits{MaxElems: s.opts.MaxTensorElements, Check: s.check, Lease: leaseOf(c)}
		if v2 {
			lim.Shared = s.shm
			d, err = payload.DecodeOIPWithin(model, version, body, hdr, lim)
		} else {
			d, err = payload.DecodeV1Within(body, hdr, "", lim)
		}
		if d != nil {
			c.Locals(modelKey{}, d.Model)
		}
		return err
	})
	if err != nil {
		return err
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	inferCtx, span := tracing.StartInfer(ctx, s.opts.Tracer, d.Model, d.Version)
	resp, err := s.backend.Infer(inferCtx, d.Model, d.Version, d.Infer)
	span.End(payload.TraceTimes(resp), err)
	if err != nil {
		return err
	}
	var enc payload.Response
	err = tracing.Phase(ctx, s.opts.Tracer, "encode", func(context.Context) error {
		var err error
		if v2 {
			enc, err = payload.EncodeOIP(d, resp)
		} else {
			enc, err = payload.EncodeV1(d, resp)
		}
		return err
	})
	if err != nil {
		return err
	}
	if enc.HeaderLen >= 0 {
		c.Set(HeaderInferenceLength, strconv.Itoa(enc.HeaderLen))
		return s.send(c, contentBinary, enc.Body)
	}
	return s.send(c, contentJSON, enc.Body)
}

func (s *Server) live(c *fiber.Ctx) error {
	return okEmpty(c)
}

// ready answers GET /v2/health/ready: 200 when the backend's readiness
// says so, else 503 with its reason; 503 too from the moment Shutdown
// starts.
func (s *Server) ready(c *fiber.Ctx) error {
	if s.closing.Load() {
		return fmt.Errorf("%w: the server is shutting down", serving.ErrClosed)
	}
	if r := s.backend.Readiness(); !r.Ready {
		return fmt.Errorf("%w: %s", serving.ErrNotReady, r.Reason)
	}
	return okEmpty(c)
}

// serverMetadata answers GET /v2.
func (s *Server) serverMetadata(c *fiber.Ctx) error {
	return s.sendJSON(c, map[string]any{
		"name":       "xserve",
		"version":    s.opts.Version,
		"extensions": []string{"binary_tensor_data", "system_shared_memory", "model_repository", "model_configuration", "statistics"},
	})
}

func (s *Server) modelMetadata(c *fiber.Ctx) error {
	model, version, err := modelVersionParams(c)
	if err != nil {
		return err
	}
	m, err := s.backend.Metadata(model, version)
	if err != nil {
		return err
	}
	return s.sendJSON(c, modelMeta(m))
}

func (s *Server) modelReady(c *fiber.Ctx) error {
	model, version, err := modelVersionParams(c)
	if err != nil {
		return err
	}
	if s.backend.ModelReady(model, version) {
		return okEmpty(c)
	}
	// Tell an unknown (or invalid) name from a model that is not ready.
	if _, err := s.backend.Metadata(model, version); err != nil && statusOf(err) != http.StatusServiceUnavailable {
		return err
	}
	what := strconv.Quote(model)
	if version > 0 {
		what += " version " + strconv.FormatInt(version, 10)
	}
	return fmt.Errorf("%w: model %s is not ready", serving.ErrNotReady, what)
}

// repositoryIndex answers POST /v2/repository/index; the body may be empty
// or {"ready": true} to list only ready models.
func (s *Server) repositoryIndex(c *fiber.Ctx) error {
	body, err := s.body(c)
	if err != nil {
		return err
	}
	var req struct {
		Ready bool `json:"ready"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := payload.UnmarshalJSON(body, &req, "the request", false); err != nil {
			return err
		}
	}
	out := []oipIndexEntry{}
	for _, st := range s.backend.Status() {
		if req.Ready && st.State != serving.StateReady {
			continue
		}
		out = append(out, oipIndexEntry{Name: st.Name, Version: strconv.FormatInt(st.Version, 10), State: string(st.State), Reason: payload.PublicMessage(st.Reason, s.root, st.Name)})
	}
	return s.sendJSON(c, out)
}

// repositoryRequest reads the optional body of load and unload, refusing
// what xserve does not implement (config and file overrides).
func (s *Server) repositoryRequest(c *fiber.Ctx) error {
	body, err := s.body(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := payload.UnmarshalJSON(body, &req, "the request", false); err != nil {
		return err
	}
	for k := range req.Parameters {
		if k == "config" || strings.HasPrefix(k, "file:") {
			return badRequest("parameters.%s: overriding a model's config or files is not supported; change the model repository instead", k)
		}
	}
	return nil
}

func (s *Server) load(c *fiber.Ctx) error {
	model, err := modelParam(c)
	if err != nil {
		return err
	}
	up, err := s.loadRequest(c)
	if err != nil {
		return err
	}
	if up != nil {
		err = s.backend.(Uploader).Upload(s.ctx, model, *up)
	} else {
		err = s.backend.Load(s.ctx, model)
	}
	if err != nil {
		return err
	}
	return okEmpty(c)
}

func (s *Server) unload(c *fiber.Ctx) error {
	model, err := modelParam(c)
	if err != nil {
		return err
	}
	if err := s.repositoryRequest(c); err != nil {
		return err
	}
	if err := s.backend.Unload(s.ctx, model); err != nil {
		return err
	}
	return okEmpty(c)
}

// writeMetrics answers GET /metrics: the backend's metrics, then the HTTP
// server's, then the Go runtime's and the process's (go_*, process_*).
func (s *Server) writeMetrics(c *fiber.Ctx) error {
	var buf bytes.Buffer
	if err := s.backend.WriteMetrics(&buf); err != nil {
		return fmt.Errorf("httpapi: metrics: %w", err)
	}
	if buf.Len() > 0 && !bytes.HasSuffix(buf.Bytes(), []byte("\n")) {
		buf.WriteByte('\n')
	}
	if err := s.metrics.write(&buf); err != nil {
		return fmt.Errorf("httpapi: metrics: %w", err)
	}
	return s.send(c, contentProm, buf.Bytes())
}

// okEmpty answers 200 with an empty body, as the protocol's health and
// repository endpoints do.
func okEmpty(c *fiber.Ctx) error {
	c.Status(http.StatusOK)
	return nil
}
