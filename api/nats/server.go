package natsapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/internal/metrics"
	"github.com/xserve/xserve/internal/reqid"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Backend is what the server needs of the model server. *serving.Manager
// implements it; the methods have its contract: they are safe for
// concurrent use, errors wrap package serving's sentinels (mapped to status
// codes by payload.Status), and model names come straight from clients, so
// the backend validates them.
type Backend interface {
	// Infer runs one request on model version (0 = the latest ready one).
	Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error)
	// Metadata describes model version (0 = latest).
	Metadata(model string, version int64) (*serving.Metadata, error)
	// Status lists every known model version.
	Status() []serving.ModelStatus
	// Readiness says whether the server takes requests, and why not: the
	// health subject answers it (as HTTP's /v2/health/ready does).
	Readiness() serving.Readiness
}

// *serving.Manager is the production Backend.
var _ Backend = (*serving.Manager)(nil)

// Sentinel errors of the package.
var (
	// ErrServerClosed: the server is shutting down; a request that arrives
	// then is answered 503.
	ErrServerClosed = errors.New("natsapi: server closed")
	// ErrOverloaded: the worker pool's queue is full; answered 429.
	ErrOverloaded = errors.New("natsapi: overloaded")
	// ErrReplyTooLarge: the reply would exceed the NATS server's
	// max_payload; answered 413.
	ErrReplyTooLarge = errors.New("natsapi: reply too large")
	// ErrBadHeader: a request header has a value the protocol does not
	// allow; answered 400.
	ErrBadHeader = errors.New("natsapi: bad header")
)

// statusOf maps an error to its status code: the package's own errors, then
// the table HTTP shares (payload.Status).
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrServerClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrReplyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBadHeader):
		return http.StatusBadRequest
	}
	return payload.Status(err)
}

// Server answers inference requests over NATS. Create it with New (it serves
// at once), stop it with Shutdown.
//
// Lock order: svcMu, then mu, then statsMu.
type Server struct {
	root    string // the backend's repository root, for payload.PublicMessage
	budget  *payload.Budget
	check   func(model string, version int64, name string, dt tensor.DType, shape []int64) error // nil when the backend has none
	backend Backend
	opts    Options
	log     *slog.Logger
	nc      *nats.Conn
	codecs  *payload.Codecs

	// ctx is the parent of every backend call; cancelled when Shutdown gives
	// up waiting, so that stragglers stop.
	ctx    context.Context
	cancel context.CancelFunc

	jobs    chan *job
	workers sync.WaitGroup
	// decoding holds a token per request being decoded: at most
	// GOMAXPROCS at once. Decoding is CPU-bound; past that many it only
	// slows the connection's reader, which must keep up with what its
	// server sends (a burst of large requests had the embedded server drop
	// xserve's connection as a slow consumer).
	decoding chan struct{}
	// gens runs the text generations (generate.go), genSub takes their
	// requests; nil when the backend does not generate text.
	gens      sync.WaitGroup
	genSub    *nats.Subscription
	genCancel context.CancelFunc // ends the running generations (Shutdown)
	genCtx    context.Context
	queued    atomic.Int64 // requests in jobs (atomic)
	// transit holds against the budget what the NATS server has queued
	// for the connection (Options.Queued); transitRefresh is set while a
	// refresh is scheduled.
	transit        *payload.Hold
	transitRefresh atomic.Bool
	transitChecked atomic.Int64 // when holdTransit last asked (unix nanoseconds)
	transitOff     atomic.Bool  // the subscriptions are gone (Shutdown): hold nothing

	mu      sync.RWMutex // guards stopped; held (read) while sending on jobs
	stopped bool         // jobs is closed

	svcMu       sync.Mutex // guards svc and fingerprint
	svc         micro.Service
	fingerprint string
	// live holds the subjects of the endpoints on the NATS server (set by
	// Sync once they are flushed); Health reads it.
	live atomic.Pointer[map[string]bool]
	// syncNow asks syncLoop for a Sync at once (Health, a model without
	// its endpoint).
	syncNow chan struct{}
	replica atomic.Value // string: the current service instance id
	home    string       // the replica's token in its sequences' subjects (sticky.go)

	metricsOnce sync.Once         // creates metrics
	metrics     *metrics.Registry // WriteMetrics' registry, with the collector of the counts

	statsMu sync.Mutex // guards stats and served
	stats   map[string]*modelStats
	// served holds the models with an endpoint: durable requests for other
	// names are counted under "*", so that clients cannot grow stats.
	served map[string]bool

	// baseSubs is the connection's subscription count that is not the
	// server's (JetStream's request mux); Shutdown waits for the count to
	// fall back to it.
	baseSubs int

	durable *durable // nil without Options.Durable

	closing atomic.Bool // Shutdown began (atomic)
	// lastArrival is when the last request reached a handler (unix
	// nanoseconds; atomic): Shutdown keeps the subscriptions until it is
	// drainQuiet ago.
	lastArrival atomic.Int64
	syncStop    chan struct{}
	syncDone    chan struct{}
	shutdown    sync.Once
	stopErr     error
}

// job is one request waiting for, or run by, a worker.
type job struct {
	model    string // from the subject; "" when the body names it
	reply    string // where the answer goes
	header   nats.Header
	data     []byte
	received time.Time
	stats    *modelStats
	// sent is when the client sent a durable request (its JetStream
	// timestamp); the zero time for plain requests.
	sent time.Time
	msg  jetstream.Msg // a durable request; nil for plain ones
	done func()        // called when the job is finished; may be nil
	// named is the model the body named, once decoded: an error quotes it
	// as sent.
	named string
	// lease holds the request's share of the memory budget, from its body
	// on; released when it is answered.
	lease *payload.Lease
	// warm: the request came on PREFIX.warm.<model> (forwarded by a
	// replica that does not hold the model): never forwarded again.
	warm bool
	// sequence: the request is a step of a sequence (its reply names the
	// replica's subject for the sequence, sticky.go).
	sequence bool
}

// modelStats counts one model's requests on this replica; the fields are
// accessed atomically.
type modelStats struct {
	model       string
	requests    atomic.Int64 // answered, plain and durable
	errors      atomic.Int64 // answered with an error
	overloaded  atomic.Int64 // refused with 429 by the worker pool
	durable     atomic.Int64 // durable requests answered
	redelivered atomic.Int64 // durable requests answered on a redelivery
	forwarded   atomic.Int64 // answered by a replica holding the model (Options.OnDemand)
	inflight    atomic.Int64
	nanos       atomic.Int64 // total time from receipt to reply
}

// EndpointData is the "data" of each endpoint in $SRV.STATS: this replica's
// own counts for the endpoint's model ("*" for the any-model subject),
// cumulative since the server started.
type EndpointData struct {
	Model string `json:"model"`
	// Replica is the service instance id.
	Replica string `json:"replica"`
	// Requests counts the requests answered (plain and durable, successes
	// and errors); Errors those answered with an error; Overloaded those
	// refused with 429 because the worker queue was full.
	Requests   int64 `json:"requests"`
	Errors     int64 `json:"errors"`
	Overloaded int64 `json:"overloaded"`
	// Durable counts the durable requests answered, Redelivered those of
	// them that had been delivered before (to a replica that failed).
	Durable     int64 `json:"durable"`
	Redelivered int64 `json:"redelivered"`
	// Forwarded counts the requests this replica forwarded to one holding
	// the model loaded (Options.OnDemand), whose answers it relayed.
	Forwarded int64 `json:"forwarded"`
	// InFlight is the number being worked on now; Queued the requests
	// waiting for a worker (all models).
	InFlight int64 `json:"in_flight"`
	Queued   int64 `json:"queued"`
	// AverageLatency is the mean time from receiving a request to
	// publishing its reply, in nanoseconds.
	AverageLatency time.Duration `json:"average_latency"`
}

// New starts serving backend's models on opts.Conn: it subscribes an
// endpoint per READY model (and follows the backend as models load and
// unload), starts the worker pool, registers the micro service and, with
// Durable, creates or updates the stream and consumer and starts consuming.
func New(ctx context.Context, backend Backend, opts Options) (*Server, error) {
	if backend == nil {
		return nil, errors.New("natsapi: New: backend is nil")
	}
	if opts.Budget == nil {
		var err error
		if opts.Budget, err = payload.NewBudget(payload.DefaultMemoryBudget); err != nil {
			return nil, err
		}
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if n := opts.Conn.NumSubscriptions(); n > 0 {
		return nil, fmt.Errorf("natsapi: Options.Conn already has %d subscriptions; give the server a connection of its own", n)
	}
	cs, err := payload.NewCodecs(opts.MaxDecompressedBytes)
	if err != nil {
		return nil, err
	}
	s := &Server{
		backend:  backend,
		root:     payload.RootOf(backend),
		budget:   opts.Budget,
		transit:  opts.Budget.Hold(),
		check:    checkerOf(backend),
		opts:     opts,
		log:      opts.Logger,
		nc:       opts.Conn,
		codecs:   cs,
		jobs:     make(chan *job, opts.QueueSize),
		decoding: make(chan struct{}, runtime.GOMAXPROCS(0)),
		stats:    map[string]*modelStats{},
		served:   map[string]bool{},
		syncStop: make(chan struct{}),
		syncDone: make(chan struct{}),
		syncNow:  make(chan struct{}, 1),
	}
	s.replica.Store("")
	s.home = nuid.Next()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	fail := func(err error) (*Server, error) {
		s.cancel()
		cs.Close()
		return nil, err
	}
	if opts.Durable {
		if s.durable, err = s.setupDurable(ctx); err != nil {
			return fail(err)
		}
	}
	// JetStream's API calls may have left the connection's request mux
	// subscribed; it is not the server's to drain.
	s.baseSubs = s.nc.NumSubscriptions()
	for range opts.Workers {
		s.workers.Go(s.worker)
	}
	if err := s.Sync(); err != nil {
		s.stopWorkers()
		return fail(err)
	}
	if err := s.startGenerate(); err != nil {
		s.stopWorkers()
		return fail(fmt.Errorf("natsapi: subscribe generation: %w", err))
	}
	if s.durable != nil {
		if err := s.startDurable(); err != nil {
			s.svcMu.Lock()
			s.svc.Stop()
			s.svcMu.Unlock()
			s.stopWorkers()
			return fail(err)
		}
	}
	go s.syncLoop()
	return s, nil
}

// ID returns the service instance id of the replica (the Xserve-Replica
// header of its replies and the id in $SRV.PING). It changes when the set of
// models changes, as the endpoints are then registered anew.
func (s *Server) ID() string { return s.replica.Load().(string) }

// Subject returns the request subject of model ("" for the any-model
// subject).
func (s *Server) Subject(model string) string { return inferSubject(s.opts.Prefix, model) }

// DurableSubject returns the durable request subject of model ("" for the
// any-model subject).
func (s *Server) DurableSubject(model string) string { return durableSubject(s.opts.Prefix, model) }

func inferSubject(prefix, model string) string {
	if model == "" {
		return prefix + ".infer"
	}
	return prefix + ".infer." + model
}

// healthSubject is the subject of the readiness check, PREFIX.health.
func healthSubject(prefix string) string { return prefix + ".health" }

func durableSubject(prefix, model string) string {
	if model == "" {
		return prefix + ".durable"
	}
	return prefix + ".durable." + model
}

// Stats returns this replica's counts by model ("*" for requests on the
// any-model subject).
func (s *Server) Stats() map[string]EndpointData {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	out := make(map[string]EndpointData, len(s.stats))
	for m, st := range s.stats {
		out[m] = s.data(st)
	}
	return out
}

// statsFor returns the counters of model ("" = the any-model subject); a
// model without an endpoint counts under "*".
func (s *Server) statsFor(model string) *modelStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if model == "" || !s.served[model] {
		model = "*"
	}
	st := s.stats[model]
	if st == nil {
		st = &modelStats{model: model}
		s.stats[model] = st
	}
	return st
}

func (s *Server) data(st *modelStats) EndpointData {
	d := EndpointData{
		Model:       st.model,
		Replica:     s.ID(),
		Requests:    st.requests.Load(),
		Errors:      st.errors.Load(),
		Overloaded:  st.overloaded.Load(),
		Durable:     st.durable.Load(),
		Redelivered: st.redelivered.Load(),
		Forwarded:   st.forwarded.Load(),
		InFlight:    st.inflight.Load(),
		Queued:      s.queued.Load(),
	}
	if d.Requests > 0 {
		d.AverageLatency = time.Duration(st.nanos.Load() / d.Requests)
	}
	return d
}

// handler returns the micro handler of model's subject: it queues the
// request for the worker pool, or answers 429 when the queue is full. It
// never blocks.
func (s *Server) handler(model string, warm bool, st *modelStats) micro.HandlerFunc {
	return func(r micro.Request) {
		s.lastArrival.Store(time.Now().UnixNano())
		j := &job{
			warm:     warm,
			model:    model,
			reply:    r.Reply(),
			header:   nats.Header(r.Headers()),
			data:     r.Data(),
			received: time.Now(),
			stats:    st,
			lease:    s.budget.Lease(),
		}
		// A request forwarded by a replica (warm) is answered under
		// PREFIX.fwd.; only the serving user may publish on PREFIX.warm.
		if !s.validReply(j.reply) && !(warm && isForwardReply(s.opts.Prefix, j.reply)) {
			s.log.Warn("natsapi: request without a valid reply subject dropped", "subject", r.Subject(), "reply", j.reply, "id", requestID(j.header))
			return
		}
		// The body is in memory already: it counts from here, so that
		// requests queued for the workers cannot exceed the budget; and
		// so do the requests still queued behind it (on their way to
		// this handler), so that a long queue gets this one refused.
		s.holdTransit(len(j.data))
		if err := j.lease.Reserve(int64(len(j.data)), "the request body"); err != nil {
			s.finish(j, nil, err)
			return
		}
		if err := s.enqueue(j, false); err != nil {
			if errors.Is(err, ErrOverloaded) {
				st.overloaded.Add(1)
			}
			s.finish(j, nil, err)
		}
	}
}

// holdTransit holds what the NATS server has queued for the connection
// now against the budget (Options.Queued), on the arrival of a request of
// size bytes: always for a large one, at most every transitEvery for small
// ones (asking costs a look-up in the server's connection list). While it
// holds anything it checks again transitEvery later, so that a queue
// drained with no request after it (the end of a burst) is not held.
func (s *Server) holdTransit(size int) {
	if s.opts.Queued == nil || s.transitOff.Load() {
		return
	}
	now := time.Now().UnixNano()
	if size < transitLarge && now-s.transitChecked.Load() < int64(transitEvery) {
		return
	}
	s.transitChecked.Store(now)
	s.transit.Set(s.opts.Queued())
	if s.transitOff.Load() { // Shutdown released the hold meanwhile
		s.transit.Set(0)
		return
	}
	if s.transit.Held() > 0 && s.transitRefresh.CompareAndSwap(false, true) {
		time.AfterFunc(transitEvery, func() {
			s.transitRefresh.Store(false)
			s.holdTransit(transitLarge)
		})
	}
}

// A request body of transitLarge bytes or more has holdTransit ask for the
// NATS server's queue on its arrival; smaller ones at most every
// transitEvery.
const (
	transitLarge = 64 << 10
	transitEvery = 20 * time.Millisecond
)

// enqueue hands j to the worker pool: at once or not at all (ErrOverloaded),
// or, with wait, once there is room.
func (s *Server) enqueue(j *job, wait bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.stopped {
		return fmt.Errorf("%w: the replica is shutting down; retry", ErrServerClosed)
	}
	s.queued.Add(1)
	if wait {
		s.jobs <- j
		return nil
	}
	select {
	case s.jobs <- j:
		return nil
	default:
		s.queued.Add(-1)
		return fmt.Errorf("%w: %d requests are waiting for this replica's %d workers; retry later", ErrOverloaded, s.opts.QueueSize, s.opts.Workers)
	}
}

func (s *Server) worker() {
	for j := range s.jobs {
		s.queued.Add(-1)
		s.work(j)
	}
}

// work answers one request.
func (s *Server) work(j *job) {
	j.stats.inflight.Add(1)
	defer j.stats.inflight.Add(-1)
	var stopProgress func()
	if j.msg != nil {
		stopProgress = s.reportProgress(j.msg)
	}
	reply, err := s.answerSafely(j)
	s.stick(j, reply)
	if stopProgress != nil {
		stopProgress()
	}
	s.finish(j, reply, err)
}

// answerSafely runs answer, turning a panic into an error.
func (s *Server) answerSafely(j *job) (reply *nats.Msg, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("natsapi: handler panicked", "model", j.model, "panic", p, "stack", string(debug.Stack()))
			reply, err = nil, fmt.Errorf("natsapi: internal error: %v", p)
		}
	}()
	return s.answer(j)
}

// validReply reports whether a reply may go to subj, the reply subject of
// a plain request or the Xserve-Reply-To of a durable one (checked alike on
// every path, the health subject's too): a subject of non-empty literal
// tokens; not a system subject ("$JS.API...", "$SRV", "$SYS": a reply there
// would be an API call made with the server's permissions), not one of the
// server's own (PREFIX...: a reply there would be a request again) nor under
// the server connection's own inbox prefix (where the JetStream API answers
// it and its durable requests arrive); and, with Options.ReplyPrefix (the
// embedded server's "_INBOX."), under that prefix.
func (s *Server) validReply(subj string) bool {
	if subj == "" || strings.ContainsAny(subj, " \t\r\n*>") || strings.HasPrefix(subj, "$") ||
		subj == s.opts.Prefix || strings.HasPrefix(subj, s.opts.Prefix+".") ||
		!strings.HasPrefix(subj, s.opts.ReplyPrefix) {
		return false
	}
	if own := s.nc.Opts.InboxPrefix; own != "" && (subj == own || strings.HasPrefix(subj, own+".")) {
		return false
	}
	for _, t := range strings.Split(subj, ".") {
		if t == "" {
			return false
		}
	}
	return true
}

// requestID is the request's id from its headers: X-Request-Id, else
// Nats-Msg-Id.
func requestID(h nats.Header) string {
	if id := headerValue(h, HeaderRequestID); id != "" {
		return id
	}
	return headerValue(h, HeaderMsgID)
}

// headerValue returns the first value of key, matched without regard to
// case (NATS keeps header names as sent).
func headerValue(h nats.Header, key string) string {
	if h == nil {
		return ""
	}
	if v := h[key]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return strings.TrimSpace(v[0])
		}
	}
	return ""
}

// sequenceHeaders applies the sequence headers (HeaderSequenceID, Start,
// End) to d, whose body must then not name a sequence too.
func sequenceHeaders(h nats.Header, d *payload.Request) error {
	id := headerValue(h, HeaderSequenceID)
	flag := func(key string) (bool, error) {
		switch v := strings.ToLower(headerValue(h, key)); v {
		case "", "false", "0":
			return false, nil
		case "true", "1":
			return true, nil
		default:
			return false, fmt.Errorf("%w: %s %q: want true or false", ErrBadHeader, key, v)
		}
	}
	start, err := flag(HeaderSequenceStart)
	if err != nil {
		return err
	}
	end, err := flag(HeaderSequenceEnd)
	if err != nil {
		return err
	}
	if id == "" && !start && !end {
		return nil
	}
	if d.Infer.Sequence != nil {
		return fmt.Errorf("%w: %s and the body's parameters.sequence_id both name a sequence; give one", ErrBadHeader, HeaderSequenceID)
	}
	seq, err := payload.SequenceStep(id, start, end)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadHeader, HeaderSequenceID, err)
	}
	d.Infer.Sequence = seq
	return nil
}

// answer decodes the request, runs it and encodes the reply (with no
// subject yet). A request for a model this replica does not hold may be
// forwarded (maybeForward): its reply is then the other replica's.
func (s *Server) answer(j *job) (*nats.Msg, error) {
	ctx, cancel, err := s.requestContext(j)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if reply, ok := s.maybeForward(ctx, j, j.model); ok {
		return reply, nil
	}
	proto := strings.ToLower(headerValue(j.header, HeaderProtocol))
	d, err := s.request(j, proto)
	if err != nil {
		return nil, err
	}
	if j.model == "" {
		if reply, ok := s.maybeForward(ctx, j, d.Model); ok {
			return reply, nil
		}
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	resp, err := s.backend.Infer(ctx, d.Model, d.Version, d.Infer)
	if err != nil {
		return nil, err
	}
	return s.encodeReply(j.header, proto, d, resp)
}

// requestContext is the context of j's backend call: with the deadline of
// its Xserve-Timeout header, counted from when the client sent a durable
// request or the server received a plain one; an error when that deadline
// has passed already or the header is not a duration.
func (s *Server) requestContext(j *job) (context.Context, context.CancelFunc, error) {
	raw := headerValue(j.header, HeaderTimeout)
	if raw == "" {
		return s.ctx, func() {}, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		return nil, nil, fmt.Errorf("%w: %s %q: want a positive Go duration such as 500ms or 5s", ErrBadHeader, HeaderTimeout, raw)
	}
	start := j.received
	if !j.sent.IsZero() {
		start = j.sent
	}
	if waited := time.Since(start); waited >= d {
		return nil, nil, fmt.Errorf("%w: the request's %s of %v passed before a worker took it (it waited %v)", context.DeadlineExceeded, HeaderTimeout, d, waited.Round(time.Millisecond))
	}
	ctx, cancel := context.WithDeadline(s.ctx, start.Add(d))
	return ctx, cancel, nil
}

// request decodes j's body in protocol proto and applies its headers: the
// model version, the request id, the sequence.
func (s *Server) request(j *job, proto string) (*payload.Request, error) {
	h := j.header
	version, err := payload.ParseVersion(headerValue(h, HeaderModelVersion))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadHeader, HeaderModelVersion, err)
	}
	d, err := s.decode(j, proto, version)
	if err != nil {
		return nil, err
	}
	if version != 0 {
		if d.Version != 0 && d.Version != version {
			return nil, fmt.Errorf("%w: %s is %d but the body asks for version %d", ErrBadHeader, HeaderModelVersion, version, d.Version)
		}
		d.Version = version
	}
	if d.Infer.ID == "" {
		d.Infer.ID = requestID(h)
	}
	if err := sequenceHeaders(h, d); err != nil {
		return nil, err
	}
	j.sequence = d.Infer.Sequence != nil
	return d, nil
}

// encodeReply encodes resp, the answer to d, as the reply (no subject yet)
// in protocol proto, compressed as the request's Accept-Encoding asks when
// it is large enough; ErrReplyTooLarge when it cannot fit the NATS server's
// max_payload.
func (s *Server) encodeReply(h nats.Header, proto string, d *payload.Request, resp *serving.InferResponse) (*nats.Msg, error) {
	var enc payload.Response
	var err error
	if proto == "v2" || proto == "oip" {
		enc, err = payload.EncodeOIP(d, resp)
	} else {
		enc, err = payload.EncodeV1(d, resp)
	}
	if err != nil {
		return nil, err
	}
	out := nats.Header{}
	out.Set(HeaderContentType, "application/json")
	if enc.HeaderLen >= 0 {
		out.Set(HeaderContentType, "application/octet-stream")
		out.Set(HeaderInferenceLength, strconv.Itoa(enc.HeaderLen))
	}
	out.Set(HeaderModel, resp.ModelName)
	out.Set(HeaderModelVersion, strconv.FormatInt(resp.ModelVersion, 10))
	body := enc.Body
	if s.opts.CompressMinBytes >= 0 && len(body) >= s.opts.CompressMinBytes {
		if ce := payload.AcceptEncoding(headerValue(h, HeaderAcceptEncoding)); ce != "" {
			z, err := s.codecs.Encode(ce, body)
			if err != nil {
				return nil, fmt.Errorf("natsapi: compress reply: %w", err)
			}
			out.Set(HeaderContentEncoding, ce)
			body = z
		}
	}
	if max := s.nc.MaxPayload(); max > 0 && int64(len(body))+4096 > max {
		return nil, fmt.Errorf("%w: the reply is %d bytes, more than the NATS server's max_payload of %d allows; ask for binary outputs or a compressed reply (Accept-Encoding), or raise max_payload", ErrReplyTooLarge, len(body), max)
	}
	return &nats.Msg{Header: out, Data: body}, nil
}

// decode undoes the request's Content-Encoding and decodes its body in
// protocol proto, within its lease, one of at most GOMAXPROCS requests
// decoded at once (s.decoding).
func (s *Server) decode(j *job, proto string, version int64) (*payload.Request, error) {
	s.decoding <- struct{}{}
	defer func() { <-s.decoding }()
	h := j.header
	body, err := s.codecs.DecodeWithin(headerValue(h, HeaderContentEncoding), j.data, j.lease)
	if err != nil {
		return nil, err
	}
	hl := headerValue(h, HeaderInferenceLength)
	lim := payload.Limits{MaxElems: s.opts.MaxTensorElements, Check: s.check, Lease: j.lease}
	var d *payload.Request
	switch proto {
	case "", "v1":
		d, err = payload.DecodeV1Within(body, hl, j.model, lim)
	case "v2", "oip":
		if j.model == "" {
			return nil, fmt.Errorf("%w: %s %s needs the model in the subject (%s)", ErrBadHeader, HeaderProtocol, proto, inferSubject(s.opts.Prefix, "<model>"))
		}
		d, err = payload.DecodeOIPWithin(j.model, version, body, hl, lim)
	default:
		return nil, fmt.Errorf("%w: %s %q: want v1 (xserve's /v1/infer form) or v2 (the Open Inference Protocol)", ErrBadHeader, HeaderProtocol, proto)
	}
	if d != nil {
		j.named = d.Model
	}
	return d, err
}

// finish sends the answer to j (reply, or an error reply for err) and, for
// a durable request, settles it with JetStream: acknowledged once the reply
// is published, or handed back for another delivery when this replica could
// not take it (shutting down, model not ready, overloaded) and deliveries
// are left.
func (s *Server) finish(j *job, reply *nats.Msg, err error) {
	if j.done != nil {
		defer j.done()
	}
	defer j.lease.Release()
	st := j.stats
	var delivered uint64
	if j.msg != nil {
		if md, mdErr := j.msg.Metadata(); mdErr == nil {
			delivered = md.NumDelivered
		}
	}
	if err != nil {
		code := statusOf(err)
		if j.msg != nil && (code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests) && delivered < uint64(s.opts.MaxDeliver) {
			s.log.Debug("natsapi: durable request handed back for redelivery", "model", j.model, "status", code, "err", err)
			if nerr := j.msg.NakWithDelay(time.Second); nerr != nil {
				s.log.Warn("natsapi: nak failed; JetStream redelivers after AckWait", "err", nerr)
			}
			return
		}
		if code == http.StatusInternalServerError {
			s.log.Error("natsapi: request failed", "model", j.model, "status", code, "err", err)
		} else {
			s.log.Debug("natsapi: request rejected", "model", j.model, "status", code, "err", err)
		}
		reply = errorReply(err, code, s.root, j.model, j.named)
		st.errors.Add(1)
	} else if headerValue(reply.Header, HeaderError) != "" {
		st.errors.Add(1) // an error reply relayed from the replica holding the model
	}
	reply.Subject = j.reply
	// Every reply carries the request's id: the client's, the trace id of
	// its traceparent, or a new one.
	reply.Header.Set(HeaderRequestID, reqid.From(requestID(j.header), headerValue(j.header, "traceparent")))
	if headerValue(reply.Header, HeaderReplica) == "" { // a relayed reply names the replica that answered
		reply.Header.Set(HeaderReplica, s.ID())
	}
	if j.msg != nil {
		reply.Header.Set(HeaderDelivery, strconv.FormatUint(delivered, 10))
	}
	// Counted before the reply leaves, so that a client that got it sees it
	// in the stats.
	st.requests.Add(1)
	st.nanos.Add(int64(time.Since(j.received)))
	if j.msg != nil {
		st.durable.Add(1)
		if delivered > 1 {
			st.redelivered.Add(1)
		}
	}
	connected := s.nc.IsConnected()
	if perr := s.nc.PublishMsg(reply); perr != nil {
		// The connection is closed or the reply cannot be sent: a durable
		// request goes to another delivery; a plain client times out.
		s.log.Warn("natsapi: cannot publish the reply", "model", j.model, "reply_to", j.reply, "err", perr)
		if j.msg != nil {
			j.msg.Nak()
		}
		return
	}
	if j.msg != nil {
		s.settle(j.msg, connected, delivered)
	}
}

// settle acknowledges a durable request whose reply was published. A reply
// published while the connection was down waits in nats.go's reconnect
// buffer and leaves, with the acknowledgement, once the connection is back,
// possibly before the client has subscribed to its inbox again on the
// restarted server: that reply may be lost, and acknowledged the request
// would be too (its retry, the same Nats-Msg-Id, is dropped as a
// duplicate). Such a request is handed back for another delivery instead,
// while deliveries are left; the client drops the answer that comes twice.
func (s *Server) settle(msg jetstream.Msg, connectedAtReply bool, delivered uint64) {
	if !connectedAtReply && delivered < uint64(s.opts.MaxDeliver) {
		s.log.Debug("natsapi: durable reply sent while reconnecting; handed back for redelivery", "delivered", delivered)
		if err := msg.NakWithDelay(time.Second); err != nil {
			s.log.Warn("natsapi: nak failed; JetStream redelivers after AckWait", "err", err)
		}
		return
	}
	if err := msg.Ack(); err != nil {
		s.log.Warn("natsapi: ack failed; the request may be answered again after AckWait", "err", err)
	}
}

// checkerOf returns the backend's CheckInput (serving.Manager's), nil when
// it has none.
func checkerOf(backend Backend) func(model string, version int64, name string, dt tensor.DType, shape []int64) error {
	c, ok := backend.(interface {
		CheckInput(model string, version int64, name string, dt tensor.DType, shape []int64) error
	})
	if !ok {
		return nil
	}
	return c.CheckInput
}

// errorReply is the error reply for err: the Xserve-Error headers, micro's
// error headers, and {"error": message}, err's public message
// (payload.Public: no absolute paths, no package prefixes, no cause of a
// 500; the log has them), with the names the client sent (keep) as sent.
func errorReply(err error, code int, root string, keep ...string) *nats.Msg {
	msg := payload.Public(err, code, root, keep...)
	h := nats.Header{}
	c := strconv.Itoa(code)
	hv := headerSafe(msg)
	h.Set(HeaderContentType, "application/json")
	h.Set(HeaderError, c)
	h.Set(HeaderErrorMessage, hv)
	h.Set(micro.ErrorCodeHeader, c)
	h.Set(micro.ErrorHeader, hv)
	if code == http.StatusTooManyRequests {
		h.Set(HeaderRetryAfter, strconv.Itoa(int((payload.RetryAfter(err)+time.Second-1)/time.Second)))
	}
	return &nats.Msg{Header: h, Data: payload.ErrorBody(msg)}
}

// headerSafe makes a message fit a header value: one line, at most 1 KiB
// (the body has it whole).
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < 0x20 && r != '\t' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		cut := 1024
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// Drain bounds: Shutdown keeps its subscriptions until no request has
// arrived for drainQuiet, or for drainMax at most.
const (
	drainQuiet = 300 * time.Millisecond
	drainMax   = 5 * time.Second
)

// Shutdown stops taking requests and answers the ones taken: it answers
// health requests 503 and keeps taking requests until none has arrived for
// drainQuiet (a request a client published just before SIGTERM may reach the
// server after it: unsubscribed at once, the server would leave it without a
// responder), then stops the durable consumer (the requests it buffered are
// still answered), drains the request subscriptions, waits for the queued and
// running requests to be answered, flushes the replies and closes the
// connection. If ctx ends first
// it cancels the backend calls still running, closes the connection and
// returns ctx's error. Calling it again returns the first call's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Do(func() { s.stopErr = s.doShutdown(ctx) })
	return s.stopErr
}

func (s *Server) doShutdown(ctx context.Context) error {
	s.closing.Store(true)
	close(s.syncStop)
	<-s.syncDone
	quiet, cancel := context.WithTimeout(ctx, drainMax)
	_ = waitUntil(quiet, func() bool { return time.Since(time.Unix(0, s.lastArrival.Load())) >= drainQuiet })
	cancel()
	var errs []error
	if s.durable != nil {
		if err := s.stopDurable(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.svcMu.Lock()
	if s.svc != nil {
		if err := s.svc.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("natsapi: stop service: %w", err))
		}
	}
	s.svcMu.Unlock()
	s.stopGenerate()
	// Drained subscriptions leave the connection once the requests they
	// had received were handed to the handler.
	if err := waitUntil(ctx, func() bool { return s.nc.NumSubscriptions() <= s.baseSubs || s.nc.IsClosed() }); err != nil {
		errs = append(errs, fmt.Errorf("natsapi: shutdown: draining subscriptions: %w", err))
	}
	s.transitOff.Store(true)
	s.transit.Set(0)
	s.stopWorkers()
	done := make(chan struct{})
	go func() {
		s.workers.Wait()
		s.gens.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		errs = append(errs, fmt.Errorf("natsapi: shutdown: waiting for in-flight requests: %w", ctx.Err()))
	}
	if !s.nc.IsClosed() {
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			fctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		}
		err := s.nc.FlushWithContext(fctx)
		cancel()
		if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, fmt.Errorf("natsapi: shutdown: flushing replies: %w", err))
		}
	}
	s.nc.Close()
	s.cancel()
	select {
	case <-done:
		s.codecs.Close()
	default: // workers still finishing: leave the codecs to them
	}
	return errors.Join(errs...)
}

// stopWorkers closes the job queue: the workers finish what it holds and
// exit; requests arriving later are answered 503.
func (s *Server) stopWorkers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		close(s.jobs)
	}
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
