package batching

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testRunner is a Runner that checks each batch's invariants, records it,
// optionally blocks on a gate, and answers payload (an int) with payload*2.
type testRunner struct {
	opts Options // the batcher's options, defaults filled (for the checks)

	// gate, if not nil, blocks every batch before answering until openGate
	// closes it; RunBatch returns ctx.Err() if its context ends first.
	gate     chan struct{}
	gateOnce sync.Once
	// started, if not nil, receives each batch as RunBatch begins; give it
	// enough capacity.
	started chan *Batch
	// run, if not nil, replaces the answering step.
	run func(ctx context.Context, b *Batch) error

	mu       sync.Mutex
	batches  []record
	seen     map[int]int // payload -> times executed
	problems []string
}

// record is what the runner saw of one batch.
type record struct {
	key        string
	rows       int
	padded     int
	payloads   []int
	rowsEach   []int
	priorities []int
	created    time.Time
	dispatched time.Time
	ctxErr     error // the batch context's error after the gate
}

func newTestRunner() *testRunner { return &testRunner{seen: map[int]int{}} }

// newGatedRunner returns a runner whose batches wait for openGate and that
// reports each batch on started.
func newGatedRunner() *testRunner {
	r := newTestRunner()
	r.gate = make(chan struct{})
	r.started = make(chan *Batch, 10000)
	return r
}

// openGate lets every batch, present and future, through.
func (r *testRunner) openGate() {
	if r.gate != nil {
		r.gateOnce.Do(func() { close(r.gate) })
	}
}

// waitStarted waits for the next batch to reach the runner.
func (r *testRunner) waitStarted(t *testing.T) *Batch {
	t.Helper()
	select {
	case b := <-r.started:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no batch reached the runner within 10s")
		return nil
	}
}

func (r *testRunner) problem(format string, args ...any) {
	r.mu.Lock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *testRunner) RunBatch(ctx context.Context, b *Batch) error {
	r.check(b)
	rec := record{key: b.Key, rows: b.Rows, padded: b.PaddedRows, created: b.Created, dispatched: b.Dispatched}
	for _, it := range b.Items {
		p, _ := it.Payload.(int)
		rec.payloads = append(rec.payloads, p)
		rec.rowsEach = append(rec.rowsEach, it.Rows)
		rec.priorities = append(rec.priorities, it.Priority)
	}
	r.mu.Lock()
	for _, p := range rec.payloads {
		r.seen[p]++
	}
	idx := len(r.batches)
	r.batches = append(r.batches, rec)
	r.mu.Unlock()
	if r.started != nil {
		r.started <- b
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	r.batches[idx].ctxErr = ctx.Err()
	r.mu.Unlock()
	if r.run != nil {
		return r.run(ctx, b)
	}
	for _, it := range b.Items {
		it.SetResult(it.Payload.(int) * 2)
	}
	return nil
}

// check verifies a batch's invariants: one key, contiguous offsets covering
// Rows, Rows <= MaxBatchSize, PaddedRows the smallest bucket >= Rows.
func (r *testRunner) check(b *Batch) {
	if len(b.Items) == 0 {
		r.problem("batch %q with no items", b.Key)
		return
	}
	off := 0
	for i, it := range b.Items {
		if it.Key != b.Key {
			r.problem("batch %q holds item %d of key %q", b.Key, i, it.Key)
		}
		if it.Offset != off {
			r.problem("batch %q item %d: offset %d, want %d", b.Key, i, it.Offset, off)
		}
		if it.Done() {
			r.problem("batch %q item %d already done at dispatch", b.Key, i)
		}
		off += it.Rows
	}
	if off != b.Rows {
		r.problem("batch %q: items cover %d rows, Rows = %d", b.Key, off, b.Rows)
	}
	if b.Rows < 1 || b.Rows > r.opts.MaxBatchSize {
		r.problem("batch %q: Rows = %d, MaxBatchSize %d", b.Key, b.Rows, r.opts.MaxBatchSize)
	}
	want := -1
	for _, s := range r.opts.Buckets {
		if s >= b.Rows {
			want = s
			break
		}
	}
	if b.PaddedRows != want {
		r.problem("batch %q: PaddedRows = %d for %d rows, want %d (buckets %v)", b.Key, b.PaddedRows, b.Rows, want, r.opts.Buckets)
	}
	if b.Created.After(b.Dispatched) {
		r.problem("batch %q created %v after dispatch %v", b.Key, b.Created, b.Dispatched)
	}
}

func (r *testRunner) records() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func (r *testRunner) timesSeen(p int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[p]
}

// newTestBatcher makes a Batcher on r and registers a cleanup that shuts it
// down, fails on runner problems, and checks that the Batcher's goroutines
// are gone.
func newTestBatcher(t *testing.T, opts Options, r *testRunner) *Batcher {
	t.Helper()
	b, err := New(opts, r)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.opts = b.Options()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.openGate()        // unblock a gated runner so that Shutdown can drain
		_ = b.Shutdown(ctx) // may have been shut down by the test already
		r.mu.Lock()
		for _, p := range r.problems {
			t.Error(p)
		}
		r.mu.Unlock()
		checkNoBatcherGoroutines(t)
	})
	return b
}

// checkNoBatcherGoroutines fails unless, within a deadline, no goroutine
// started by a Batcher is left.
func checkNoBatcherGoroutines(t *testing.T) {
	t.Helper()
	const marker = "created by github.com/xserve/xserve/batching.(*Batcher)"
	var stacks string
	ok := poll(5*time.Second, func() bool {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, marker)
	})
	if !ok {
		t.Errorf("goroutines of the Batcher still running after Shutdown:\n%s", stacks)
	}
}

// poll calls cond until it is true or timeout passes, and reports its last
// answer.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// waitFor fails the test unless cond becomes true within 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !poll(5*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitQueued waits until key has n requests queued.
func waitQueued(t *testing.T, b *Batcher, key string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d requests queued for %q", n, key), func() bool {
		return b.Stats().Keys[key].Queued == n
	})
}

// waitIdle waits until no request is queued or executing.
func waitIdle(t *testing.T, b *Batcher) {
	t.Helper()
	waitFor(t, "the batcher to be idle", func() bool {
		s := b.Stats().Total
		return s.Queued == 0 && s.InFlight == 0
	})
}

// outcome is what Submit returned.
type outcome struct {
	payload int
	res     any
	err     error
	took    time.Duration
}

// submitAsync runs Submit in a goroutine and delivers its outcome.
func submitAsync(ctx context.Context, b *Batcher, key string, rows, prio, payload int) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		start := time.Now()
		res, err := b.Submit(ctx, key, rows, prio, payload)
		ch <- outcome{payload: payload, res: res, err: err, took: time.Since(start)}
	}()
	return ch
}

// receive waits up to 10s for an outcome.
func receive(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("Submit did not return within 10s")
		return outcome{}
	}
}

// wantResult checks that o is payload*2 without error.
func wantResult(t *testing.T, o outcome) {
	t.Helper()
	if o.err != nil {
		t.Errorf("Submit(%d): %v", o.payload, o.err)
		return
	}
	if o.res != o.payload*2 {
		t.Errorf("Submit(%d) = %v, want %d", o.payload, o.res, o.payload*2)
	}
}

// checkIdentity checks that every Submit is accounted for exactly once.
func checkIdentity(t *testing.T, s KeyStats) {
	t.Helper()
	sum := s.Rejected + s.Invalid + s.Expired + s.Cancelled + s.Dropped + s.Completed + s.Failed + uint64(s.Queued) + uint64(s.InFlightItems)
	if sum != s.Submitted {
		t.Errorf("stats don't add up: Submitted %d, outcomes %d: %+v", s.Submitted, sum, s)
	}
}

// recordingObserver is an Observer that counts what it is told.
type recordingObserver struct {
	mu       sync.Mutex
	batches  int
	rows     int
	padded   int
	delays   int
	rejected map[string]int // reason -> count
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{rejected: map[string]int{}}
}

func (o *recordingObserver) ObserveBatch(key string, realRows, paddedRows int, queueDelays []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches++
	o.rows += realRows
	o.padded += paddedRows
	o.delays += len(queueDelays)
}

func (o *recordingObserver) ObserveRejected(key, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rejected[reason]++
}

func (o *recordingObserver) rejectedFor(reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rejected[reason]
}
