package batching

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestConcurrentSubmit: 2,000 concurrent requests of 1..4 rows over several
// keys each get exactly their own result, every request runs exactly once,
// and every batch keeps the invariants (checked by the runner).
func TestConcurrentSubmit(t *testing.T) {
	r := newTestRunner()
	r.run = func(ctx context.Context, b *Batch) error {
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // vary batch times
		}
		for _, it := range b.Items {
			it.SetResult(it.Payload.(int) * 2)
		}
		return nil
	}
	obs := newRecordingObserver()
	b := newTestBatcher(t, Options{
		MaxBatchSize:         12, // below the largest bucket on purpose
		Buckets:              []int{1, 2, 4, 8, 16},
		MaxQueueDelay:        time.Millisecond,
		MaxQueueSize:         4096,
		MaxConcurrentBatches: 2,
		PriorityLevels:       2,
		Observer:             obs,
	}, r)

	const n = 2000
	keys := []string{"resnet/1/seq=64", "resnet/1/seq=128", "bert/2/seq=128", "bert/2/seq=512"}
	rowsOf := func(i int) int { return 1 + i%4 }
	var wg sync.WaitGroup
	start := make(chan struct{})
	var wrong, failed atomic.Int64
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := b.Submit(context.Background(), keys[i%len(keys)], rowsOf(i), i%2, i)
			switch {
			case err != nil:
				failed.Add(1)
				t.Errorf("Submit(%d): %v", i, err)
			case res != i*2:
				wrong.Add(1)
				t.Errorf("Submit(%d) = %v, want %d", i, res, i*2)
			}
		})
	}
	close(start)
	wg.Wait()
	if wrong.Load() != 0 || failed.Load() != 0 {
		t.Fatalf("%d wrong results, %d errors", wrong.Load(), failed.Load())
	}

	for i := range n {
		if c := r.timesSeen(i); c != 1 {
			t.Errorf("request %d executed %d times", i, c)
		}
	}
	recs := r.records()
	rowsPerKey := map[string]int{}
	multi := 0
	for _, rec := range recs {
		rowsPerKey[rec.key] += rec.rows
		if len(rec.payloads) > 1 {
			multi++
		}
		for _, p := range rec.payloads {
			if keys[p%len(keys)] != rec.key {
				t.Errorf("request %d of key %q ran in a batch of key %q", p, keys[p%len(keys)], rec.key)
			}
		}
	}
	if multi == 0 {
		t.Errorf("no batch held more than one request in %d batches", len(recs))
	}
	waitIdle(t, b) // a batch is counted when RunBatch returns, just after its Submits may have
	st := b.Stats()
	checkIdentity(t, st.Total)
	if st.Total.Submitted != n || st.Total.Completed != n {
		t.Errorf("Total: Submitted %d, Completed %d, want %d", st.Total.Submitted, st.Total.Completed, n)
	}
	if st.Total.Batches != uint64(len(recs)) {
		t.Errorf("Total.Batches = %d, runner saw %d", st.Total.Batches, len(recs))
	}
	for _, k := range keys {
		ks := st.Keys[k]
		checkIdentity(t, ks)
		if int(ks.RealRows.Sum) != rowsPerKey[k] {
			t.Errorf("%s: RealRows.Sum = %v, runner saw %d rows", k, ks.RealRows.Sum, rowsPerKey[k])
		}
		if ks.QueueDelay.Count != ks.Completed {
			t.Errorf("%s: %d queue delays observed for %d requests", k, ks.QueueDelay.Count, ks.Completed)
		}
	}
	if obs.batches != len(recs) || obs.delays != n {
		t.Errorf("Observer saw %d batches and %d delays, want %d and %d", obs.batches, obs.delays, len(recs), n)
	}
	t.Logf("%d requests in %d batches (mean %.1f rows, padded %.1f)", n, len(recs), st.Total.RealRows.Mean(), st.Total.PaddedRows.Mean())
}

// TestLoneRequestDelay: a lone request waits MaxQueueDelay for company, and
// not much longer.
func TestLoneRequestDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	r := newTestRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: delay}, r)
	for i := range 3 { // the worker exits between requests; each starts one anew
		start := time.Now()
		res, err := b.Submit(context.Background(), "k", 1, 0, i)
		took := time.Since(start)
		wantResult(t, outcome{payload: i, res: res, err: err})
		rec := r.records()[i]
		waited := rec.dispatched.Sub(rec.created)
		if waited < delay {
			t.Errorf("request %d dispatched after %v, before MaxQueueDelay %v", i, waited, delay)
		}
		if took >= delay+50*time.Millisecond {
			t.Errorf("lone request %d took %v, want < MaxQueueDelay %v + 50ms", i, took, delay)
		}
	}
}

// TestQueueDelayExact checks the delay bound on a fake clock: a batch that
// does not fill is dispatched exactly MaxQueueDelay after its oldest request
// was queued, whatever arrived later.
func TestQueueDelayExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 20 * time.Millisecond
		var dispatched []time.Duration
		t0 := time.Now()
		var mu sync.Mutex
		b, err := New(Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: delay}, RunnerFunc(func(ctx context.Context, bt *Batch) error {
			mu.Lock()
			dispatched = append(dispatched, time.Since(t0))
			mu.Unlock()
			for _, it := range bt.Items {
				it.SetResult(it.Payload)
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i, at := range []time.Duration{0, 5 * time.Millisecond, 19 * time.Millisecond, 25 * time.Millisecond} {
			wg.Go(func() {
				time.Sleep(at)
				if _, err := b.Submit(context.Background(), "k", 1, 0, i); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		// The first three share a batch at 20ms; the fourth, alone, leaves at 45ms.
		want := []time.Duration{20 * time.Millisecond, 45 * time.Millisecond}
		if fmt.Sprint(dispatched) != fmt.Sprint(want) {
			t.Errorf("batches dispatched at %v, want %v", dispatched, want)
		}
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		// synctest.Test fails if a goroutine of the bubble is left.
	})
}

// TestFullBatches: with a slow runner, queued requests form full batches at
// once, without waiting for MaxQueueDelay.
func TestFullBatches(t *testing.T) {
	r := newGatedRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: time.Hour}, r)
	const n = 64
	outs := make([]<-chan outcome, n)
	for i := range n {
		outs[i] = submitAsync(context.Background(), b, "k", 1, 0, i)
	}
	r.waitStarted(t) // the first full batch is executing
	waitQueued(t, b, "k", n-8)
	r.openGate()
	for _, ch := range outs {
		wantResult(t, receive(t, ch))
	}
	recs := r.records()
	if len(recs) != n/8 {
		t.Errorf("%d batches, want %d", len(recs), n/8)
	}
	for i, rec := range recs {
		if rec.rows != 8 || rec.padded != 8 {
			t.Errorf("batch %d: %d rows padded to %d, want full batches of 8", i, rec.rows, rec.padded)
		}
	}
}

// TestNextRequestDoesNotFit: a batch that the next request cannot join is
// dispatched at once without it; requests are never split or reordered.
func TestNextRequestDoesNotFit(t *testing.T) {
	r := newTestRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: time.Hour}, r)
	a := submitAsync(context.Background(), b, "k", 3, 0, 1)
	waitQueued(t, b, "k", 1)
	bb := submitAsync(context.Background(), b, "k", 3, 0, 2)
	waitQueued(t, b, "k", 2)
	c := submitAsync(context.Background(), b, "k", 3, 0, 3) // 9 rows queued > 8
	wantResult(t, receive(t, a))
	wantResult(t, receive(t, bb))
	if st := b.Stats().Keys["k"]; st.Queued != 1 || st.QueuedRows != 3 {
		t.Errorf("after the first batch: %d requests, %d rows queued; want 1 and 3", st.Queued, st.QueuedRows)
	}
	if err := b.Shutdown(context.Background()); err != nil { // drains c at once
		t.Fatal(err)
	}
	wantResult(t, receive(t, c))
	recs := r.records()
	want := "[{[1 2] 6 8} {[3] 3 4}]"
	var got []string
	for _, rec := range recs {
		got = append(got, fmt.Sprintf("{%v %d %d}", rec.payloads, rec.rows, rec.padded))
	}
	if g := "[" + strings.Join(got, " ") + "]"; g != want {
		t.Errorf("batches (payloads rows padded) = %s, want %s", g, want)
	}
}

// TestQueueFull: a full queue answers at once with a *QueueFullError that
// matches ErrQueueFull and carries a RetryAfter hint; the rejection is
// counted and observed.
func TestQueueFull(t *testing.T) {
	r := newGatedRunner()
	obs := newRecordingObserver()
	b := newTestBatcher(t, Options{MaxBatchSize: 1, MaxQueueDelay: NoQueueDelay, MaxQueueSize: 4, Observer: obs}, r)
	outs := []<-chan outcome{submitAsync(context.Background(), b, "k", 1, 0, 0)}
	r.waitStarted(t) // request 0 executes, blocked
	for i := 1; i <= 4; i++ {
		outs = append(outs, submitAsync(context.Background(), b, "k", 1, 0, i))
	}
	waitQueued(t, b, "k", 4)

	o := receive(t, submitAsync(context.Background(), b, "k", 1, 0, 5))
	if !errors.Is(o.err, ErrQueueFull) {
		t.Fatalf("Submit on a full queue: %v, want ErrQueueFull", o.err)
	}
	var qf *QueueFullError
	if !errors.As(o.err, &qf) {
		t.Fatalf("error %T is not a *QueueFullError", o.err)
	}
	if qf.Key != "k" || qf.Queued != 4 || qf.RetryAfter < time.Millisecond {
		t.Errorf("QueueFullError = %+v, want key k, 4 queued, RetryAfter >= 1ms", qf)
	}
	if !strings.HasPrefix(o.err.Error(), "batching: ") {
		t.Errorf("error %q does not start with \"batching: \"", o.err)
	}
	st := b.Stats().Keys["k"]
	if st.Rejected != 1 || obs.rejectedFor(ReasonQueueFull) != 1 {
		t.Errorf("Rejected = %d, observed %d, want 1", st.Rejected, obs.rejectedFor(ReasonQueueFull))
	}
	checkIdentity(t, st)
	r.openGate()
	for _, ch := range outs {
		wantResult(t, receive(t, ch))
	}
	if r.timesSeen(5) != 0 {
		t.Error("the rejected request was executed")
	}
}

// TestRetryAfterEstimate: RetryAfter follows recent batch times.
func TestRetryAfterEstimate(t *testing.T) {
	opts := Options{MaxBatchSize: 4, MaxQueueDelay: 2 * time.Millisecond, MaxConcurrentBatches: 2}
	opts.setDefaults()
	q := newQueue("k", &opts)
	if got := q.retryAfterLocked(); got != 2*time.Millisecond {
		t.Errorf("without history: %v, want MaxQueueDelay 2ms", got)
	}
	for range 3 {
		q.inflight++
		q.inflightItems += 4
		q.finishLocked(&Batch{Items: make([]*Item, 4)}, 10*time.Millisecond, 4, 0)
	}
	q.n = 16 // 4 batches of 4, 2 at a time, 10ms each: 20ms, plus the delay
	if got := q.retryAfterLocked(); got < 21*time.Millisecond || got > 23*time.Millisecond {
		t.Errorf("RetryAfter = %v, want about 22ms", got)
	}
	nd := Options{MaxQueueDelay: NoQueueDelay}
	nd.setDefaults()
	if got := newQueue("k", &nd).retryAfterLocked(); got != time.Millisecond {
		t.Errorf("RetryAfter = %v, want the 1ms minimum", got)
	}
}

// TestNotDispatched: a request whose deadline passes or whose client goes
// away while queued leaves the queue at once and never runs.
func TestNotDispatched(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // Options.Timeout
		ctx     func() (context.Context, context.CancelFunc)
		cancel  bool // cancel once queued
		want    error
		reason  string
	}{
		{"deadline", 0, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 30*time.Millisecond)
		}, false, context.DeadlineExceeded, ReasonExpired},
		{"default timeout", 30 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.Background(), func() {}
		}, false, context.DeadlineExceeded, ReasonExpired},
		{"cancelled", 0, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, true, context.Canceled, ReasonCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newGatedRunner()
			obs := newRecordingObserver()
			b := newTestBatcher(t, Options{MaxBatchSize: 1, MaxQueueDelay: NoQueueDelay, Timeout: tc.timeout, Observer: obs}, r)
			long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
			defer cancelLong()
			blocker := submitAsync(long, b, "k", 1, 0, 0)
			r.waitStarted(t)

			ctx, cancel := tc.ctx()
			defer cancel()
			ch := submitAsync(ctx, b, "k", 1, 0, 1)
			waitQueued(t, b, "k", 1)
			if tc.cancel {
				cancel()
			}
			o := receive(t, ch)
			st := b.Stats().Keys["k"] // taken right after Submit returned
			if !errors.Is(o.err, tc.want) {
				t.Fatalf("Submit: %v, want %v", o.err, tc.want)
			}
			if got := errors.Is(o.err, ErrExpired); got != (tc.want == context.DeadlineExceeded) {
				t.Errorf("errors.Is(%v, ErrExpired) = %v", o.err, got)
			}
			if !strings.HasPrefix(o.err.Error(), "batching: ") {
				t.Errorf("error %q does not start with \"batching: \"", o.err)
			}
			if o.took > 2*time.Second {
				t.Errorf("Submit returned after %v", o.took)
			}
			if st.Queued != 0 || st.QueuedRows != 0 {
				t.Errorf("request still queued after Submit returned: %d requests, %d rows", st.Queued, st.QueuedRows)
			}
			if tc.reason == ReasonExpired && st.Expired != 1 || tc.reason == ReasonCancelled && st.Cancelled != 1 {
				t.Errorf("stats: Expired %d, Cancelled %d", st.Expired, st.Cancelled)
			}
			if obs.rejectedFor(tc.reason) != 1 {
				t.Errorf("Observer: %v, want one %s", obs.rejected, tc.reason)
			}
			checkIdentity(t, st)

			r.openGate()
			wantResult(t, receive(t, blocker))
			if err := b.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r.timesSeen(1) != 0 {
				t.Error("the runner saw the request that was not dispatched")
			}
			if n := len(r.records()); n != 1 {
				t.Errorf("%d batches ran, want only the blocker's", n)
			}
		})
	}
}

// TestDeadContext: Submit checks ctx before queueing.
func TestDeadContext(t *testing.T) {
	r := newTestRunner()
	b := newTestBatcher(t, Options{}, r)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Submit(ctx, "k", 1, 0, 1); !errors.Is(err, context.Canceled) || errors.Is(err, ErrExpired) {
		t.Errorf("cancelled ctx: %v", err)
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if _, err := b.Submit(dctx, "k", 1, 0, 2); !errors.Is(err, ErrExpired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("expired ctx: %v", err)
	}
	st := b.Stats().Keys["k"]
	if st.Cancelled != 1 || st.Expired != 1 || st.Batches != 0 {
		t.Errorf("stats %+v", st)
	}
	checkIdentity(t, st)
}

// TestCancelAfterDispatch: a client that goes away after dispatch gets its
// error at once, while the batch runs on with an uncancelled context.
func TestCancelAfterDispatch(t *testing.T) {
	r := newGatedRunner()
	b := newTestBatcher(t, Options{MaxBatchSize: 1}, r)
	ctx, cancel := context.WithCancel(context.Background())
	ch := submitAsync(ctx, b, "k", 1, 0, 7)
	r.waitStarted(t)
	cancel()
	o := receive(t, ch)
	if !errors.Is(o.err, context.Canceled) || errors.Is(o.err, ErrExpired) {
		t.Fatalf("Submit: %v, want context.Canceled", o.err)
	}
	r.openGate()
	waitFor(t, "the batch to complete", func() bool { return b.Stats().Keys["k"].Completed == 1 })
	if rec := r.records()[0]; rec.ctxErr != nil {
		t.Errorf("the batch's context was cancelled: %v", rec.ctxErr)
	}
	st := b.Stats().Keys["k"]
	if st.Cancelled != 0 {
		t.Errorf("Cancelled = %d for a dispatched request", st.Cancelled)
	}
	checkIdentity(t, st)
}

// TestShutdownDrains: Shutdown stops accepting at once, executes every
// queued request (without waiting for MaxQueueDelay) and returns nil.
func TestShutdownDrains(t *testing.T) {
	r := newGatedRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: time.Hour}, r)
	outs := []<-chan outcome{submitAsync(context.Background(), b, "a", 4, 0, 0)} // full: dispatched
	r.waitStarted(t)
	for i := 1; i <= 10; i++ {
		outs = append(outs, submitAsync(context.Background(), b, "a", 1, 0, i))
	}
	outs = append(outs, submitAsync(context.Background(), b, "b", 1, 0, 11)) // alone, would wait an hour
	waitQueued(t, b, "a", 10)
	waitQueued(t, b, "b", 1)

	done := make(chan error, 1)
	go func() { done <- b.Shutdown(context.Background()) }()
	dead, cancel := context.WithCancel(context.Background())
	cancel() // a probe that never queues: ErrClosed once closed, else context.Canceled
	waitFor(t, "Submit to return ErrClosed", func() bool {
		_, err := b.Submit(dead, "a", 1, 0, 100)
		return errors.Is(err, ErrClosed)
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while a batch was executing", err)
	default:
	}
	r.openGate()
	for _, ch := range outs {
		wantResult(t, receive(t, ch))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	_, err := b.Submit(context.Background(), "new key", 1, 0, 1)
	if !errors.Is(err, ErrClosed) || !strings.HasPrefix(err.Error(), "batching: ") {
		t.Errorf("Submit after Shutdown: %v, want ErrClosed", err)
	}
	st := b.Stats()
	if st.Total.Completed != 12 || st.Total.Queued != 0 || st.Total.InFlight != 0 {
		t.Errorf("after Shutdown: Completed %d, Queued %d, InFlight %d", st.Total.Completed, st.Total.Queued, st.Total.InFlight)
	}
	checkIdentity(t, st.Total)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

// TestShutdownTimeout: when Shutdown's context expires, queued requests fail
// with ErrClosed, executing batches see their context cancelled, and
// Shutdown returns the context's error after they returned.
func TestShutdownTimeout(t *testing.T) {
	r := newGatedRunner() // never opened before Shutdown returns
	obs := newRecordingObserver()
	b := newTestBatcher(t, Options{MaxBatchSize: 1, MaxQueueDelay: NoQueueDelay, Observer: obs}, r)
	blocker := submitAsync(context.Background(), b, "k", 1, 0, 0)
	r.waitStarted(t)
	var outs []<-chan outcome
	for i := 1; i <= 5; i++ {
		outs = append(outs, submitAsync(context.Background(), b, "k", 1, 0, i))
	}
	waitQueued(t, b, "k", 5)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := b.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "batching: ") {
		t.Fatalf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	for _, ch := range outs {
		if o := receive(t, ch); !errors.Is(o.err, ErrClosed) {
			t.Errorf("queued request %d: %v, want ErrClosed", o.payload, o.err)
		}
	}
	if o := receive(t, blocker); !errors.Is(o.err, context.Canceled) {
		t.Errorf("executing request: %v, want the runner's context.Canceled", o.err)
	}
	st := b.Stats().Keys["k"]
	if st.Dropped != 5 || st.Failed != 1 || obs.rejectedFor(ReasonClosed) != 5 {
		t.Errorf("Dropped %d, Failed %d, observed closed %d; want 5, 1, 5", st.Dropped, st.Failed, obs.rejectedFor(ReasonClosed))
	}
	checkIdentity(t, st)
	checkNoBatcherGoroutines(t) // already, before cleanup
}

// TestShutdownRace: Submits racing with Shutdown either complete or get
// ErrClosed; none hangs, none is lost.
func TestShutdownRace(t *testing.T) {
	for round := range 20 {
		r := newTestRunner()
		b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: 200 * time.Microsecond, MaxConcurrentBatches: 2}, r)
		var wg sync.WaitGroup
		var ok, closed atomic.Int64
		for g := range 16 {
			wg.Go(func() {
				for i := 0; ; i++ {
					p := g*1000 + i
					res, err := b.Submit(context.Background(), fmt.Sprintf("k%d", g%3), 1+i%2, 0, p)
					if errors.Is(err, ErrClosed) {
						closed.Add(1)
						return
					}
					if err != nil || res != p*2 {
						t.Errorf("round %d: Submit(%d) = %v, %v", round, p, res, err)
						return
					}
					ok.Add(1)
				}
			})
		}
		waitFor(t, "some requests to complete", func() bool { return ok.Load() > 50 })
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		st := b.Stats().Total
		checkIdentity(t, st)
		if st.Completed != uint64(ok.Load()) || closed.Load() != 16 || st.Queued != 0 || st.InFlight != 0 {
			t.Fatalf("round %d: Completed %d, ok %d, closed %d, stats %+v", round, st.Completed, ok.Load(), closed.Load(), st)
		}
	}
}

// TestPriority: higher priority levels are always dispatched first; FIFO
// within a level; a batch takes the next level only after the higher ones.
func TestPriority(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		r := newGatedRunner()
		b := newTestBatcher(t, Options{MaxBatchSize: 1, MaxQueueDelay: NoQueueDelay, PriorityLevels: 3}, r)
		outs := []<-chan outcome{submitAsync(context.Background(), b, "k", 1, 0, 0)}
		r.waitStarted(t)
		// payload: priority
		seq := []struct{ payload, prio int }{{1, 2}, {2, 2}, {3, 1}, {4, 1}, {5, 0}, {6, 0}, {7, 2}, {8, 0}}
		for i, s := range seq {
			outs = append(outs, submitAsync(context.Background(), b, "k", 1, s.prio, s.payload))
			waitQueued(t, b, "k", i+1)
		}
		r.openGate()
		for _, ch := range outs {
			wantResult(t, receive(t, ch))
		}
		var got []int
		for _, rec := range r.records() {
			got = append(got, rec.payloads...)
		}
		if want := "[0 5 6 8 3 4 1 2 7]"; fmt.Sprint(got) != want {
			t.Errorf("execution order %v, want %s", got, want)
		}
	})
	t.Run("mixed batch", func(t *testing.T) {
		r := newGatedRunner()
		b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: time.Hour, PriorityLevels: 2}, r)
		outs := []<-chan outcome{submitAsync(context.Background(), b, "k", 4, 0, 0)}
		r.waitStarted(t)
		seq := []struct{ payload, rows, prio int }{{1, 1, 1}, {2, 1, 1}, {3, 2, 0}, {4, 1, 0}, {5, 2, 0}}
		for i, s := range seq {
			outs = append(outs, submitAsync(context.Background(), b, "k", s.rows, s.prio, s.payload))
			waitQueued(t, b, "k", i+1)
		}
		r.openGate()
		for _, ch := range outs {
			wantResult(t, receive(t, ch))
		}
		var got []string
		for _, rec := range r.records() {
			got = append(got, fmt.Sprintf("%v/%d", rec.payloads, rec.rows))
		}
		// [3 4] stops at 5 (2 rows do not fit into 1); then 5 leads, and
		// the low-priority requests fill the rest.
		if want := "[[0]/4 [3 4]/3 [5 1 2]/4]"; fmt.Sprint(got) != want {
			t.Errorf("batches %v, want %s", got, want)
		}
	})
}

// TestRunnerFailures: a runner error fails the items without a result; a
// panic is recovered and fails the batch; a missing result is an error; the
// batcher keeps serving.
func TestRunnerFailures(t *testing.T) {
	boom := errors.New("device on fire")
	r := newTestRunner()
	r.run = func(ctx context.Context, b *Batch) error {
		switch b.Items[0].Payload.(int) / 100 {
		case 1: // answer the first item, fail the rest
			b.Items[0].SetResult(b.Items[0].Payload.(int) * 2)
			return boom
		case 2:
			panic("index out of range")
		case 3: // forget the items
			return nil
		case 4: // fail one explicitly, answer the rest
			b.Items[0].SetError(boom)
			for _, it := range b.Items[1:] {
				it.SetResult(it.Payload.(int) * 2)
			}
			return nil
		}
		for _, it := range b.Items {
			it.SetResult(it.Payload.(int) * 2)
		}
		return nil
	}
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: time.Hour}, r)
	batch := func(base int) []outcome {
		var chs []<-chan outcome
		for i := range 4 {
			chs = append(chs, submitAsync(context.Background(), b, "k", 1, 0, base+i))
			waitQueued(t, b, "k", (i+1)%4) // the fourth fills the batch
		}
		var outs []outcome
		for _, ch := range chs {
			outs = append(outs, receive(t, ch))
		}
		return outs
	}

	outs := batch(100)
	wantResult(t, outs[0])
	for _, o := range outs[1:] {
		if !errors.Is(o.err, boom) || !strings.HasPrefix(o.err.Error(), "batching: ") {
			t.Errorf("runner error: request %d got %v", o.payload, o.err)
		}
	}
	for _, o := range batch(200) {
		var pe *PanicError
		if !errors.As(o.err, &pe) || pe.Value != "index out of range" || len(pe.Stack) == 0 {
			t.Errorf("runner panic: request %d got %v", o.payload, o.err)
		}
	}
	for _, o := range batch(300) {
		if o.err == nil || !strings.Contains(o.err.Error(), "without a result") {
			t.Errorf("missing result: request %d got %v, %v", o.payload, o.res, o.err)
		}
	}
	outs = batch(400)
	if !errors.Is(outs[0].err, boom) {
		t.Errorf("SetError: %v", outs[0].err)
	}
	for _, o := range outs[1:] {
		wantResult(t, o)
	}
	for _, o := range batch(500) { // still serving
		wantResult(t, o)
	}
	waitIdle(t, b)
	st := b.Stats().Keys["k"]
	if st.Completed != 1+3+4 || st.Failed != 3+4+4+1 {
		t.Errorf("Completed %d, Failed %d; want 8 and 12", st.Completed, st.Failed)
	}
	checkIdentity(t, st)
}

// TestNoGoroutineLeak: after Shutdown the goroutine count returns to what it
// was before the Batcher existed.
func TestNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	r := newTestRunner()
	b, err := New(Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: 500 * time.Microsecond, MaxConcurrentBatches: 3, PriorityLevels: 2}, r)
	if err != nil {
		t.Fatal(err)
	}
	r.opts = b.Options()
	var wg sync.WaitGroup
	for i := range 600 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%10 == 0 {
				go cancel() // some leave early
			}
			res, err := b.Submit(ctx, fmt.Sprintf("key%d", i%5), 1+i%3, i%2, i)
			if err == nil && res != i*2 {
				t.Errorf("Submit(%d) = %v", i, res)
			} else if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Submit(%d): %v", i, err)
			}
		})
	}
	wg.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	if !poll(5*time.Second, func() bool { n = runtime.NumGoroutine(); return n <= base }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Shutdown, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
	checkIdentity(t, b.Stats().Total)
}

// TestSubmitInvalid: rows and priority are checked, with clear errors.
func TestSubmitInvalid(t *testing.T) {
	r := newTestRunner()
	obs := newRecordingObserver()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxBatchSize: 6, PriorityLevels: 2, Observer: obs}, r)
	for _, tc := range []struct {
		rows, prio int
		want       error
		msg        string
	}{
		{0, 0, ErrInvalid, "rows = 0"},
		{-3, 0, ErrInvalid, "rows = -3"},
		{7, 0, ErrTooLarge, "7 rows exceed the maximum batch size 6"},
		{1, 2, ErrInvalid, "priority = 2"},
		{1, -1, ErrInvalid, "priority = -1"},
	} {
		_, err := b.Submit(context.Background(), "k", tc.rows, tc.prio, 1)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "batching: ") {
			t.Errorf("Submit(rows %d, priority %d): %v, want %v mentioning %q", tc.rows, tc.prio, err, tc.want, tc.msg)
		}
	}
	st := b.Stats().Keys["k"]
	if st.Invalid != 5 || st.Batches != 0 || obs.rejectedFor(ReasonTooLarge) != 1 || obs.rejectedFor(ReasonInvalid) != 4 {
		t.Errorf("Invalid %d, Batches %d, observed %v", st.Invalid, st.Batches, obs.rejected)
	}
	checkIdentity(t, st)
	if res, err := b.Submit(context.Background(), "k", 6, 1, 21); err != nil || res != 42 {
		t.Errorf("Submit(6 rows) = %v, %v", res, err)
	}
}

// TestOptions: defaults and validation errors that name field and value.
func TestOptions(t *testing.T) {
	r := newTestRunner()
	for _, tc := range []struct {
		name string
		opts Options
		want string // substring of the error
	}{
		{"negative MaxBatchSize", Options{MaxBatchSize: -1}, "Options.MaxBatchSize = -1"},
		{"zero bucket", Options{Buckets: []int{0, 2}}, "Options.Buckets[0] = 0"},
		{"negative bucket", Options{Buckets: []int{-4}}, "Options.Buckets[0] = -4"},
		{"descending", Options{Buckets: []int{1, 4, 2}}, "Options.Buckets[2] = 2 is not greater than Buckets[1] = 4"},
		{"duplicate", Options{Buckets: []int{1, 2, 2}}, "Options.Buckets[2] = 2"},
		{"batch above buckets", Options{MaxBatchSize: 16, Buckets: []int{1, 8}}, "Options.MaxBatchSize = 16 is larger than the largest bucket 8"},
		{"queue size", Options{MaxQueueSize: -5}, "Options.MaxQueueSize = -5"},
		{"priority levels", Options{PriorityLevels: -1}, "Options.PriorityLevels = -1"},
		{"too many levels", Options{PriorityLevels: 1000}, "Options.PriorityLevels = 1000"},
		{"concurrency", Options{MaxConcurrentBatches: -2}, "Options.MaxConcurrentBatches = -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts, r)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "batching: ") {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(Options{}, nil); err == nil || !strings.HasPrefix(err.Error(), "batching: ") {
		t.Errorf("New with a nil Runner: %v", err)
	}

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"zero", Options{}, "max 1 buckets [1] delay 2ms queue 1024 timeout 30s levels 1 concurrent 1"},
		{"buckets", Options{Buckets: []int{1, 2, 4, 8}}, "max 8 buckets [1 2 4 8] delay 2ms queue 1024 timeout 30s levels 1 concurrent 1"},
		{"max only", Options{MaxBatchSize: 6}, "max 6 buckets [6] delay 2ms queue 1024 timeout 30s levels 1 concurrent 1"},
		{"explicit", Options{MaxBatchSize: 3, Buckets: []int{2, 4}, MaxQueueDelay: NoQueueDelay, MaxQueueSize: 9, Timeout: NoTimeout, PriorityLevels: 4, MaxConcurrentBatches: 2},
			"max 3 buckets [2 4] delay -1ns queue 9 timeout -1ns levels 4 concurrent 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.opts, r)
			if err != nil {
				t.Fatal(err)
			}
			o := b.Options()
			got := fmt.Sprintf("max %d buckets %v delay %v queue %d timeout %v levels %d concurrent %d",
				o.MaxBatchSize, o.Buckets, o.MaxQueueDelay, o.MaxQueueSize, o.Timeout, o.PriorityLevels, o.MaxConcurrentBatches)
			if got != tc.want {
				t.Errorf("defaults: %s, want %s", got, tc.want)
			}
		})
	}
	buckets := []int{1, 2}
	b, _ := New(Options{Buckets: buckets}, r)
	buckets[0] = 99
	if b.Options().Buckets[0] != 1 {
		t.Error("New kept the caller's Buckets slice")
	}
}

// TestConcurrentBatchesPerKey: MaxConcurrentBatches batches of one key run at
// once, no more.
func TestConcurrentBatchesPerKey(t *testing.T) {
	r := newGatedRunner()
	b := newTestBatcher(t, Options{MaxBatchSize: 1, MaxQueueDelay: NoQueueDelay, MaxConcurrentBatches: 3}, r)
	var outs []<-chan outcome
	for i := range 5 {
		outs = append(outs, submitAsync(context.Background(), b, "k", 1, 0, i))
	}
	for range 3 {
		r.waitStarted(t)
	}
	waitQueued(t, b, "k", 2)
	if st := b.Stats().Keys["k"]; st.InFlight != 3 || st.InFlightItems != 3 {
		t.Errorf("InFlight %d, InFlightItems %d, want 3", st.InFlight, st.InFlightItems)
	}
	select {
	case <-r.started:
		t.Error("a fourth batch started while three were executing")
	default:
	}
	r.openGate()
	for _, ch := range outs {
		wantResult(t, receive(t, ch))
	}
}

// TestHistogram checks Cumulative and the bucket an observation lands in.
func TestHistogram(t *testing.T) {
	h := newHistogram([]float64{1, 2, 4})
	for _, v := range []float64{0.5, 1, 1.5, 4, 9} {
		h.observe(v)
	}
	if fmt.Sprint(h.Counts) != "[2 1 1 1]" || fmt.Sprint(h.Cumulative()) != "[2 3 4 5]" || h.Count != 5 || h.Sum != 16 {
		t.Errorf("histogram %+v, cumulative %v", h, h.Cumulative())
	}
}

// BenchmarkSubmit measures Submit's cost with a runner that answers at
// once, from 16 goroutines over 4 keys: "nodelay" dispatches whatever is
// queued (the batcher's own overhead), "fill" uses batches of 4 that the 4
// submitters of a key fill (the delay only matters for the stragglers at the
// end of a run), "delay" waits the default 2ms for batches of up to 32 rows
// that never fill (bound by the delay, not by CPU).
func BenchmarkSubmit(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"nodelay", Options{Buckets: []int{1, 2, 4, 8, 16, 32}, MaxQueueDelay: NoQueueDelay}},
		{"fill", Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: time.Millisecond}},
		{"delay", Options{Buckets: []int{1, 2, 4, 8, 16, 32}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := RunnerFunc(func(ctx context.Context, bt *Batch) error {
				for _, it := range bt.Items {
					it.SetResult(it.Payload)
				}
				return nil
			})
			bt, err := New(bc.opts, r)
			if err != nil {
				b.Fatal(err)
			}
			keys := []string{"a", "b", "c", "d"}
			var next atomic.Int64
			b.SetParallelism(16 / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := keys[next.Add(1)%int64(len(keys))]
				for pb.Next() {
					if _, err := bt.Submit(context.Background(), key, 1, 0, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if err := bt.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
			if st := bt.Stats().Total; st.Batches > 0 {
				b.ReportMetric(st.RealRows.Sum/float64(st.Batches), "rows/batch")
			}
		})
	}
}

// TestIdleDispatch checks the adaptive delay on a fake clock: a request that
// finds the key idle is dispatched at once, whatever MaxQueueDelay; while a
// batch executes, a further batch waits for MaxQueueDelay (or a free
// executor, whichever comes later).
func TestIdleDispatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			delay = 20 * time.Millisecond
			exec  = 100 * time.Millisecond
		)
		var (
			mu         sync.Mutex
			dispatched []time.Duration
			sizes      []int
		)
		t0 := time.Now()
		b, err := New(Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: delay, MaxConcurrentBatches: 2, IdleDispatch: true},
			RunnerFunc(func(ctx context.Context, bt *Batch) error {
				mu.Lock()
				dispatched = append(dispatched, time.Since(t0))
				sizes = append(sizes, len(bt.Items))
				mu.Unlock()
				time.Sleep(exec)
				for _, it := range bt.Items {
					it.SetResult(it.Payload)
				}
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i, at := range []time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 45 * time.Millisecond, 300 * time.Millisecond} {
			wg.Go(func() {
				time.Sleep(at)
				if _, err := b.Submit(context.Background(), "k", 1, 0, i); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		// 0: idle, at once. 10ms: one batch executes, so it waits for the
		// delay (30ms). 40ms and 45ms: both executors busy until the first
		// batch ends at 100ms; their oldest has waited longer than the
		// delay, so they leave together then. 300ms: idle again, at once.
		want := []time.Duration{0, 30 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond}
		if fmt.Sprint(dispatched) != fmt.Sprint(want) || fmt.Sprint(sizes) != "[1 1 2 1]" {
			t.Errorf("batches of %v requests dispatched at %v, want [1 1 2 1] at %v", sizes, dispatched, want)
		}
		if err := b.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestIdleDispatchOneExecutor: with one executor, requests that queue while
// a batch executes leave together as soon as it ends, without waiting for a
// long MaxQueueDelay, and a lone request on an idle key is not held.
func TestIdleDispatchOneExecutor(t *testing.T) {
	r := newGatedRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: time.Hour, IdleDispatch: true}, r)
	first := submitAsync(context.Background(), b, "k", 1, 0, 0)
	if bt := r.waitStarted(t); len(bt.Items) != 1 {
		t.Fatalf("first batch has %d items, want 1", len(bt.Items))
	}
	var outs []<-chan outcome
	for i := 1; i <= 3; i++ {
		outs = append(outs, submitAsync(context.Background(), b, "k", 1, 0, i))
	}
	waitQueued(t, b, "k", 3)
	r.openGate()
	wantResult(t, receive(t, first))
	for _, ch := range outs {
		wantResult(t, receive(t, ch))
	}
	if bt := r.waitStarted(t); len(bt.Items) != 3 {
		t.Errorf("second batch has %d items, want the 3 that queued meanwhile", len(bt.Items))
	}
	start := time.Now()
	res, err := b.Submit(context.Background(), "k", 1, 0, 9)
	wantResult(t, outcome{payload: 9, res: res, err: err})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a lone request on an idle key took %v", took)
	}
}

// TestBatchLimit: Options.BatchLimit lowers the batch size at run time: a
// queue holding the limit's rows counts as full (dispatched at once despite
// a long MaxQueueDelay), batches stop at the limit, a request larger than
// the limit runs alone, and the limit is clamped to [1, MaxBatchSize].
func TestBatchLimit(t *testing.T) {
	var limit atomic.Int64
	limit.Store(2)
	r := newGatedRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: time.Hour, MaxConcurrentBatches: 2,
		BatchLimit: func(key string) int { return int(limit.Load()) }}, r)
	ctx := context.Background()
	var outs []<-chan outcome
	outs = append(outs, submitAsync(ctx, b, "k", 1, 0, 0))
	waitQueued(t, b, "k", 1) // MaxQueueDelay 1h: it waits for company
	outs = append(outs, submitAsync(ctx, b, "k", 1, 0, 1))
	if bt := r.waitStarted(t); bt.Rows != 2 {
		t.Fatalf("first batch has %d rows, want the limit 2 (dispatched when full)", bt.Rows)
	}
	for i := 2; i < 7; i++ {
		outs = append(outs, submitAsync(ctx, b, "k", 1, 0, i))
		if i == 3 {
			if bt := r.waitStarted(t); bt.Rows != 2 {
				t.Fatalf("second batch has %d rows, want 2", bt.Rows)
			}
		}
	}
	outs = append(outs, submitAsync(ctx, b, "k", 3, 0, 7)) // more rows than the limit
	waitQueued(t, b, "k", 4)
	outs = append(outs, submitAsync(ctx, b, "k", 2, 0, 8))
	waitQueued(t, b, "k", 5)
	limit.Store(100) // clamped to MaxBatchSize 8: the 8 queued rows fill a batch
	r.openGate()
	for _, ch := range outs {
		wantResult(t, receive(t, ch))
	}
	var rows []int
	for _, rec := range r.records() {
		rows = append(rows, rec.rows)
	}
	if fmt.Sprint(rows) != "[2 2 8]" {
		t.Errorf("batches of %v rows, want [2 2 8] (the last formed after the limit rose)", rows)
	}

	limit.Store(0) // clamped to 1
	r2 := newGatedRunner()
	b2 := newTestBatcher(t, Options{Buckets: []int{1, 2, 4, 8}, MaxQueueDelay: NoQueueDelay,
		BatchLimit: func(key string) int { return int(limit.Load()) }}, r2)
	first := submitAsync(ctx, b2, "k", 1, 0, 10)
	r2.waitStarted(t)
	big := submitAsync(ctx, b2, "k", 3, 0, 11)
	waitQueued(t, b2, "k", 1)
	small := submitAsync(ctx, b2, "k", 1, 0, 12)
	waitQueued(t, b2, "k", 2)
	r2.openGate()
	for _, ch := range []<-chan outcome{first, big, small} {
		wantResult(t, receive(t, ch))
	}
	rows = nil
	for _, rec := range r2.records() {
		rows = append(rows, rec.rows)
	}
	if fmt.Sprint(rows) != "[1 3 1]" {
		t.Errorf("batches of %v rows with limit 1, want [1 3 1]", rows)
	}
}

// TestIdleDispatchInline: with IdleDispatch, a lone request on an idle key
// runs its batch on the caller's goroutine, so Submit answers with the
// result when the batch is done even if its context ended meanwhile;
// requests that queue behind it keep the usual rules. Only the lone
// request's batch is marked Inline.
func TestIdleDispatchInline(t *testing.T) {
	r := newGatedRunner()
	b := newTestBatcher(t, Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: time.Hour, IdleDispatch: true}, r)
	ctx, cancel := context.WithCancel(context.Background())
	first := submitAsync(ctx, b, "k", 1, 0, 1)
	if bt := r.waitStarted(t); !bt.Inline {
		t.Error("the lone request's batch is not marked Inline")
	}
	queuedCtx, cancelQueued := context.WithCancel(context.Background())
	queued := submitAsync(queuedCtx, b, "k", 1, 0, 2)
	waitQueued(t, b, "k", 1)
	cancel()
	cancelQueued()
	if o := receive(t, queued); !errors.Is(o.err, context.Canceled) {
		t.Errorf("queued request cancelled: %v, want context.Canceled", o.err)
	}
	select {
	case o := <-first:
		t.Fatalf("the inline request answered (%v, %v) before its batch was done", o.res, o.err)
	case <-time.After(50 * time.Millisecond):
	}
	r.openGate()
	wantResult(t, receive(t, first))

	// Two requests while a batch executes: their batch formed in the queue.
	r = newGatedRunner()
	b = newTestBatcher(t, Options{Buckets: []int{1, 2, 4}, MaxQueueDelay: time.Hour, IdleDispatch: true}, r)
	first = submitAsync(context.Background(), b, "k", 1, 0, 1)
	r.waitStarted(t)
	second := submitAsync(context.Background(), b, "k", 1, 0, 2)
	third := submitAsync(context.Background(), b, "k", 1, 0, 3)
	waitQueued(t, b, "k", 2)
	r.openGate()
	if bt := r.waitStarted(t); bt.Inline || len(bt.Items) != 2 {
		t.Errorf("the queued requests' batch: Inline %v, %d requests; want false, 2", bt.Inline, len(bt.Items))
	}
	for _, ch := range []<-chan outcome{first, second, third} {
		wantResult(t, receive(t, ch))
	}
}

// TestOverlapDelay: with OverlapDelay a batch starts beside an executing
// one when full, or when its oldest request has waited OverlapDelay (the
// executing one overran); otherwise the requests that queue meanwhile wait
// for the executing batch to end and leave together, however long ago
// MaxQueueDelay passed.
func TestOverlapDelay(t *testing.T) {
	for _, c := range []struct {
		name      string
		buckets   []int
		exec      time.Duration
		arrivals  []time.Duration
		wantAt    []time.Duration
		wantSizes string
	}{
		{"partial batches wait for the executing one", []int{1, 2, 4, 8}, 100 * time.Millisecond,
			[]time.Duration{0, 10 * time.Millisecond, 40 * time.Millisecond, 45 * time.Millisecond, 300 * time.Millisecond},
			[]time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond}, "[1 3 1]"},
		{"a full batch starts beside it", []int{1, 2}, 100 * time.Millisecond,
			[]time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond},
			[]time.Duration{0, 20 * time.Millisecond}, "[1 2]"},
		{"an overrun: beside it after OverlapDelay", []int{1, 2, 4, 8}, 400 * time.Millisecond,
			[]time.Duration{0, 10 * time.Millisecond},
			[]time.Duration{0, 160 * time.Millisecond}, "[1 1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				overlap := func(string) time.Duration { return 150 * time.Millisecond }
				dispatched, sizes := runTimed(t, Options{Buckets: c.buckets, MaxQueueDelay: 5 * time.Millisecond, MaxConcurrentBatches: 2,
					IdleDispatch: true, OverlapDelay: overlap}, c.arrivals, c.exec)
				if fmt.Sprint(dispatched) != fmt.Sprint(c.wantAt) || fmt.Sprint(sizes) != c.wantSizes {
					t.Errorf("batches of %v requests dispatched at %v, want %s at %v", sizes, dispatched, c.wantSizes, c.wantAt)
				}
			})
		})
	}
}

// TestBatchRows: BatchRows cuts a batch to the rows it returns; the rest
// stay queued for the next batch.
func TestBatchRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked []int
		pow2 := func(key string, available int) int {
			asked = append(asked, available)
			n := 1
			for n*2 <= available {
				n *= 2
			}
			return n
		}
		arrivals := []time.Duration{0, 10 * time.Millisecond, 11 * time.Millisecond, 12 * time.Millisecond, 13 * time.Millisecond, 14 * time.Millisecond}
		dispatched, sizes := runTimed(t, Options{Buckets: []int{1, 2, 4, 8}, IdleDispatch: true, BatchRows: pow2}, arrivals, 100*time.Millisecond)
		want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}
		if fmt.Sprint(dispatched) != fmt.Sprint(want) || fmt.Sprint(sizes) != "[1 4 1]" {
			t.Errorf("batches of %v requests dispatched at %v, want [1 4 1] at %v", sizes, dispatched, want)
		}
		if fmt.Sprint(asked) != "[1 5 1]" {
			t.Errorf("BatchRows was asked for %v available rows, want [1 5 1]", asked)
		}
	})
}

// runTimed submits one 1-row request per arrival time to a Batcher with
// opts whose runner takes exec per batch, and returns when each batch was
// dispatched (since the first arrival) and how many requests it held. Call
// it inside synctest.Test.
func runTimed(t *testing.T, opts Options, arrivals []time.Duration, exec time.Duration) ([]time.Duration, []int) {
	t.Helper()
	var (
		mu         sync.Mutex
		dispatched []time.Duration
		sizes      []int
	)
	t0 := time.Now()
	b, err := New(opts, RunnerFunc(func(ctx context.Context, bt *Batch) error {
		mu.Lock()
		dispatched = append(dispatched, time.Since(t0))
		sizes = append(sizes, len(bt.Items))
		mu.Unlock()
		time.Sleep(exec)
		for _, it := range bt.Items {
			it.SetResult(it.Payload)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, at := range arrivals {
		wg.Go(func() {
			time.Sleep(at)
			if _, err := b.Submit(context.Background(), "k", 1, 0, i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dispatched, sizes
}
