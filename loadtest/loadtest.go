package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xserve/xserve/tensor"
)

// Sentinel errors of the package. Every error the package returns wraps one
// of them (or a context error) and says what was wrong.
var (
	// ErrOptions: an Options or HTTPOptions field is missing, out of range or
	// in conflict with another.
	ErrOptions = errors.New("loadtest: invalid options")
	// ErrInput: an input file or spec cannot be read or parsed, or cannot be
	// encoded for the chosen protocol.
	ErrInput = errors.New("loadtest: bad input")
	// ErrNotLoopback: the target is not on the loopback interface and remote
	// targets were not allowed.
	ErrNotLoopback = errors.New("loadtest: refusing a non-loopback target")
	// ErrInvalidResponse: the server answered with success but the body is
	// malformed or does not match the expected outputs. Counted as the
	// failure kind "invalid response".
	ErrInvalidResponse = errors.New("loadtest: invalid response")
)

// Target sends one request to the system under test.
//
// Do is called from many goroutines at once. It returns a non-nil Result and
// a nil error when the request succeeded (for HTTP: status 200 and, when
// asked, a valid response), and an error otherwise; the error's failure kind
// (see [FailureKind]) is what the summary counts. Do must honour ctx and must
// not modify req.
type Target interface {
	Do(ctx context.Context, req *Request) (*Result, error)
}

// Preparer is implemented by targets that encode request bodies ahead of
// time. Run calls Prepare once per request, before any request is sent, and
// Prepare stores the encoded form in req.Payload. Do must still work (more
// slowly) on a request that was never prepared.
type Preparer interface {
	Prepare(req *Request) error
}

// Sample is one set of named input tensors: everything one request carries.
type Sample map[string]*tensor.Tensor

// Request is one request a run sends, possibly many times.
type Request struct {
	// Index is the position of the request's sample in the InputSource's
	// list; a run sends the samples round-robin.
	Index int
	// Inputs are the tensors to send, by input name.
	Inputs Sample
	// Payload is the target's pre-encoded form of the request, set by
	// Preparer.Prepare before the run; nil until then. Targets must treat it
	// as read-only during the run.
	Payload any
}

// Result describes a request that got an answer.
type Result struct {
	// Status is the protocol's status code (the HTTP status), 0 if none.
	Status int
	// BytesSent and BytesReceived count the body bytes on the wire (after
	// compression).
	BytesSent, BytesReceived int64
}

// StatusError is a response with a non-success status. Its failure kind is
// Protocol and Code ("http 503").
type StatusError struct {
	Protocol string // "http"
	Code     int
	// Message is the start of the response body, for diagnosis.
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("loadtest: %s status %d", e.Protocol, e.Code)
	}
	return fmt.Sprintf("loadtest: %s status %d: %s", e.Protocol, e.Code, e.Message)
}

// Kind returns the failure kind, e.g. "http 503".
func (e *StatusError) Kind() string { return fmt.Sprintf("%s %d", e.Protocol, e.Code) }

// InputSource provides the samples a run sends.
type InputSource interface {
	// Samples returns the input sets to send, round-robin; at least one.
	// Run calls it once, before the run starts.
	Samples() ([]Sample, error)
}

// Samples is an InputSource holding fixed samples.
type Samples []Sample

// Samples returns s.
func (s Samples) Samples() ([]Sample, error) { return s, nil }

// Options configures a run. Exactly one of Concurrency and Rate must be set,
// and at least one of Duration and MaxRequests, so a run always ends by
// itself.
type Options struct {
	// Target receives the requests. Required.
	Target Target
	// Inputs provides the requests' tensors. Required.
	Inputs InputSource

	// Concurrency selects a closed loop with that many workers, each sending
	// its next request when the previous one completes.
	Concurrency int
	// Rate selects an open loop sending that many requests per second on a
	// fixed schedule (from 0.001 to 1e6), whatever the server does.
	Rate float64
	// MaxInFlight bounds the requests in flight at once in open-loop mode;
	// a scheduled send that finds them all busy waits (and its latency,
	// measured from the schedule, grows). Default 256. Ignored in closed loop.
	MaxInFlight int
	// LateThreshold is how far behind its schedule an open-loop send may
	// start before it counts as late. Default: one send interval (1/Rate),
	// at least 1ms.
	LateThreshold time.Duration

	// Duration is the length of the measured part of the run; no request
	// starts after it (requests in flight are waited for). 0: bounded by
	// MaxRequests alone.
	Duration time.Duration
	// MaxRequests stops the run after that many measured requests. 0: bounded
	// by Duration alone.
	MaxRequests int
	// Warmup is sent before the measured part, in the same mode, and not
	// counted.
	Warmup time.Duration
}

const (
	defaultMaxInFlight = 256
	minRate            = 1e-3
	maxRate            = 1e6
)

// setDefaults fills zero fields with their defaults.
func (o *Options) setDefaults() {
	if o.Rate > 0 && o.MaxInFlight == 0 {
		o.MaxInFlight = defaultMaxInFlight
	}
	if o.Rate > 0 && o.LateThreshold == 0 {
		o.LateThreshold = max(o.interval(), time.Millisecond)
	}
}

// interval is the open-loop time between two scheduled sends.
func (o *Options) interval() time.Duration {
	if o.Rate <= 0 {
		return 0
	}
	return time.Duration(math.Round(float64(time.Second) / o.Rate))
}

func (o *Options) validate() error {
	switch {
	case o.Target == nil:
		return fmt.Errorf("%w: Target is nil", ErrOptions)
	case o.Inputs == nil:
		return fmt.Errorf("%w: Inputs is nil", ErrOptions)
	case o.Concurrency < 0:
		return fmt.Errorf("%w: Concurrency %d is negative", ErrOptions, o.Concurrency)
	case math.IsNaN(o.Rate) || o.Rate < 0 || o.Rate > maxRate || o.Rate > 0 && o.Rate < minRate:
		return fmt.Errorf("%w: Rate %v is out of range [%g, %g]", ErrOptions, o.Rate, minRate, maxRate)
	case o.Concurrency > 0 && o.Rate > 0:
		return fmt.Errorf("%w: Concurrency %d and Rate %v both set; choose a closed loop (Concurrency) or an open loop (Rate)", ErrOptions, o.Concurrency, o.Rate)
	case o.Concurrency == 0 && o.Rate == 0:
		return fmt.Errorf("%w: neither Concurrency nor Rate set", ErrOptions)
	case o.Duration < 0 || o.Warmup < 0 || o.MaxRequests < 0:
		return fmt.Errorf("%w: Duration %v, Warmup %v and MaxRequests %d must not be negative", ErrOptions, o.Duration, o.Warmup, o.MaxRequests)
	case o.Duration == 0 && o.MaxRequests == 0:
		return fmt.Errorf("%w: the run is unbounded; set Duration, MaxRequests or both", ErrOptions)
	case o.MaxInFlight < 0 || o.LateThreshold < 0:
		return fmt.Errorf("%w: MaxInFlight %d and LateThreshold %v must not be negative", ErrOptions, o.MaxInFlight, o.LateThreshold)
	}
	return nil
}

// responseDefaults fills the defaults every target shares: a 30s timeout
// per request, a 256 MiB bound on a response, and validation whenever
// output shapes are expected.
func responseDefaults(timeout *time.Duration, maxResponseBytes *int64, validate *bool, expect map[string][]int64) {
	if *timeout == 0 {
		*timeout = 30 * time.Second
	}
	if *maxResponseBytes == 0 {
		*maxResponseBytes = 256 << 20
	}
	if len(expect) > 0 {
		*validate = true
	}
}

// Run prepares the requests, sends them as opts says and returns the summary
// of the measured part. When ctx is cancelled the run stops early and Run
// returns the summary of what completed so far (Interrupted set; requests
// cut short by the cancellation are not counted) together with ctx's error.
// Any other error means nothing was sent.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	reqs, err := prepare(opts.Target, opts.Inputs)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &runner{opts: opts, reqs: reqs}
	if opts.Rate > 0 {
		r.openLoop(ctx)
	} else {
		r.closedLoop(ctx)
	}
	s := r.summary()
	if err := ctx.Err(); err != nil {
		s.Interrupted = true
		return s, err
	}
	return s, nil
}

// prepare builds one Request per sample and lets the target encode it.
func prepare(t Target, in InputSource) ([]*Request, error) {
	samples, err := in.Samples()
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("%w: the input source gave no samples", ErrInput)
	}
	reqs := make([]*Request, len(samples))
	p, _ := t.(Preparer)
	for i, s := range samples {
		reqs[i] = &Request{Index: i, Inputs: s}
		if p != nil {
			if err := p.Prepare(reqs[i]); err != nil {
				return nil, fmt.Errorf("sample %d: %w", i, err)
			}
		}
	}
	return reqs, nil
}

// runner holds one run's state. Workers record into their own recorder and
// hand it to the runner under mu when they finish.
type runner struct {
	opts Options
	reqs []*Request

	// next counts the requests handed out (closed loop) or the schedule
	// slots claimed (open loop); accessed atomically.
	next atomic.Int64
	// measured counts measured requests started in closed loop; accessed
	// atomically.
	measured atomic.Int64

	// Set before the workers start, read-only after.
	start, measureStart, end time.Time
	hasEnd                   bool
	warmupSlots              int64 // open loop: slots before measureStart
	expected                 int64 // open loop: measured slots scheduled

	mu   sync.Mutex // guards recs
	recs []*recorder
}

// recorder is one worker's tally; only its worker touches it until it is
// handed to the runner.
type recorder struct {
	latencies     []time.Duration // successful measured requests
	failures      map[string]int
	samples       map[string]string // first error message per kind
	requests      int
	warmup        int
	late          int
	maxDelay      time.Duration
	sent, recvd   int64
	lastCompleted time.Time
}

func newRecorder() *recorder {
	return &recorder{failures: map[string]int{}, samples: map[string]string{}}
}

// record tallies one measured request that was due at due and completed at done.
func (rec *recorder) record(due, done time.Time, res *Result, err error) {
	rec.requests++
	if done.After(rec.lastCompleted) {
		rec.lastCompleted = done
	}
	if res != nil {
		rec.sent += res.BytesSent
		rec.recvd += res.BytesReceived
	}
	if err != nil {
		k := FailureKind(err)
		rec.failures[k]++
		if _, ok := rec.samples[k]; !ok {
			rec.samples[k] = err.Error()
		}
		return
	}
	rec.latencies = append(rec.latencies, done.Sub(due))
}

func (r *runner) hand(rec *recorder) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *runner) request(i int64) *Request { return r.reqs[i%int64(len(r.reqs))] }

// closedLoop runs Concurrency workers back to back.
func (r *runner) closedLoop(ctx context.Context) {
	r.start = time.Now()
	r.measureStart = r.start.Add(r.opts.Warmup)
	if r.opts.Duration > 0 {
		r.hasEnd, r.end = true, r.measureStart.Add(r.opts.Duration)
	}
	var wg sync.WaitGroup
	for range r.opts.Concurrency {
		wg.Go(func() {
			rec := newRecorder()
			defer r.hand(rec)
			for ctx.Err() == nil {
				now := time.Now()
				if r.hasEnd && !now.Before(r.end) {
					return
				}
				measured := !now.Before(r.measureStart)
				if measured && r.opts.MaxRequests > 0 && r.measured.Add(1) > int64(r.opts.MaxRequests) {
					return
				}
				req := r.request(r.next.Add(1) - 1)
				res, err := r.opts.Target.Do(ctx, req)
				if err != nil && ctx.Err() != nil {
					return // interrupted: not the server's failure
				}
				if !measured {
					rec.warmup++
					continue
				}
				rec.record(now, time.Now(), res, err)
			}
		})
	}
	wg.Wait()
}

// openLoop sends on the schedule start + i*interval. MaxInFlight workers
// each claim the next slot, wait for its time, send and record the latency
// from the slot's time. A slot claimed after its time is sent at once (late);
// slots still unclaimed when the run's end comes are dropped.
func (r *runner) openLoop(ctx context.Context) {
	iv := r.opts.interval()
	r.start = time.Now()
	r.warmupSlots = int64((r.opts.Warmup + iv - 1) / iv)
	r.measureStart = r.slot(r.warmupSlots)
	if r.opts.Duration > 0 {
		r.hasEnd, r.end = true, r.measureStart.Add(r.opts.Duration)
		r.expected = int64((r.opts.Duration + iv - 1) / iv)
	}
	if n := int64(r.opts.MaxRequests); n > 0 && (!r.hasEnd || n < r.expected) {
		r.expected = n
	}
	var wg sync.WaitGroup
	for range r.opts.MaxInFlight {
		wg.Go(func() {
			rec := newRecorder()
			defer r.hand(rec)
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for ctx.Err() == nil {
				i := r.next.Add(1) - 1
				measured := i >= r.warmupSlots
				if measured && i-r.warmupSlots >= r.expected {
					return
				}
				due := r.slot(i)
				now := time.Now()
				if r.hasEnd && !now.Before(r.end) {
					return // this slot and the rest are dropped
				}
				if wait := due.Sub(now); wait > 0 {
					timer.Reset(wait)
					select {
					case <-ctx.Done():
						return
					case <-timer.C:
					}
					now = time.Now()
				}
				res, err := r.opts.Target.Do(ctx, r.request(i))
				if err != nil && ctx.Err() != nil {
					return // interrupted: not the server's failure
				}
				if !measured {
					rec.warmup++
					continue
				}
				if d := now.Sub(due); d > 0 {
					rec.maxDelay = max(rec.maxDelay, d)
					if d > r.opts.LateThreshold {
						rec.late++
					}
				}
				rec.record(due, time.Now(), res, err)
			}
		})
	}
	wg.Wait()
}

// slot returns the scheduled time of open-loop slot i.
func (r *runner) slot(i int64) time.Time {
	return r.start.Add(time.Duration(i) * r.opts.interval())
}

// summary merges the workers' recorders.
func (r *runner) summary() *Summary {
	s := &Summary{
		Concurrency:    r.opts.Concurrency,
		Rate:           r.opts.Rate,
		Warmup:         r.opts.Warmup,
		FailuresByKind: map[string]int{},
		ErrorSamples:   map[string]string{},
	}
	if st, ok := r.opts.Target.(fmt.Stringer); ok {
		s.Target = st.String()
	} else {
		s.Target = fmt.Sprintf("%T", r.opts.Target)
	}
	if r.opts.Rate > 0 {
		s.Mode = ModeOpen
		s.MaxInFlight = r.opts.MaxInFlight
	} else {
		s.Mode = ModeClosed
	}
	var lat []time.Duration
	var last time.Time
	for _, rec := range r.recs {
		lat = append(lat, rec.latencies...)
		s.Requests += rec.requests
		s.WarmupRequests += rec.warmup
		s.Late += rec.late
		s.MaxSendDelay = max(s.MaxSendDelay, rec.maxDelay)
		s.BytesSent += rec.sent
		s.BytesReceived += rec.recvd
		for k, n := range rec.failures {
			s.FailuresByKind[k] += n
			s.Failures += n
		}
		for k, m := range rec.samples {
			if _, ok := s.ErrorSamples[k]; !ok {
				s.ErrorSamples[k] = m
			}
		}
		if rec.lastCompleted.After(last) {
			last = rec.lastCompleted
		}
	}
	s.Successes = len(lat)
	if s.Requests > 0 {
		s.Elapsed = last.Sub(r.measureStart)
	}
	if secs := s.Elapsed.Seconds(); secs > 0 {
		s.Throughput = float64(s.Requests) / secs
		s.SuccessThroughput = float64(s.Successes) / secs
	}
	if s.Mode == ModeOpen {
		s.Scheduled = int(r.expected)
		s.Dropped = max(s.Scheduled-s.Requests, 0)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	s.Latency = latencyStats(lat)
	return s
}

// latencyStats computes exact statistics of sorted latencies (nearest-rank
// percentiles).
func latencyStats(sorted []time.Duration) LatencyStats {
	n := len(sorted)
	if n == 0 {
		return LatencyStats{}
	}
	var sum float64
	for _, d := range sorted {
		sum += float64(d)
	}
	return LatencyStats{
		Min:  sorted[0],
		Mean: time.Duration(sum / float64(n)),
		P50:  percentile(sorted, 50),
		P90:  percentile(sorted, 90),
		P99:  percentile(sorted, 99),
		Max:  sorted[n-1],
	}
}

// percentile returns the nearest-rank p-th percentile of sorted (non-empty).
func percentile(sorted []time.Duration, p float64) time.Duration {
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
