package batching

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// errNilError replaces a nil error given to Item.SetError.
var errNilError = errors.New("batching: the runner called Item.SetError(nil)")

// Batcher gathers requests into batches per key and runs them on a Runner.
// Create it with New; stop it with Shutdown. Its methods are safe for
// concurrent use.
//
// Goroutines: one worker per key while the key has queued requests (it
// forms the batches), plus one per executing batch (it calls the Runner).
// Every key ever submitted keeps a small record (its queue and statistics)
// for the Batcher's lifetime, so keys should come from a bounded set.
type Batcher struct {
	opts   Options // with defaults; read only after New
	runner Runner

	// runCtx is the context given to RunBatch; cancelRun cancels it when
	// Shutdown's context expires.
	runCtx    context.Context
	cancelRun context.CancelFunc

	// wg counts the goroutines the Batcher started: key workers and batch
	// executors. A worker is started only under its queue's mu while the
	// queue is not closed, and Shutdown closes every queue before it waits,
	// so no Add with a zero counter races with Wait.
	wg       sync.WaitGroup
	waitOnce sync.Once     // starts the goroutine that closes idle
	idle     chan struct{} // closed when wg reaches zero after Shutdown began

	// Lock order: mu before queue.mu.
	mu     sync.RWMutex // guards queues and closed
	queues map[string]*queue
	closed bool
}

// New returns a Batcher that runs batches on r. Zero fields of opts take
// their defaults; invalid options are an error naming the field and value.
// No goroutine runs until the first Submit.
func New(opts Options, r Runner) (*Batcher, error) {
	if r == nil {
		return nil, errors.New("batching: New: the Runner is nil")
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Batcher{
		opts:      opts,
		runner:    r,
		runCtx:    ctx,
		cancelRun: cancel,
		idle:      make(chan struct{}),
		queues:    map[string]*queue{},
	}, nil
}

// Options returns the options in effect, defaults filled.
func (b *Batcher) Options() Options {
	o := b.opts
	o.Buckets = slices.Clone(o.Buckets)
	return o
}

// Submit queues a request of rows rows (its batch dimension) under key with
// the given priority (0 is the highest) and waits for its result: the value
// the Runner passed to Item.SetResult, or the error it set or returned.
//
// Submit checks ctx before queueing. A request whose context has no
// deadline gets Options.Timeout. If ctx is done before the request's batch
// is dispatched, the request leaves the queue at once, is never executed,
// and Submit returns an error wrapping ctx.Err() (and ErrExpired for a
// deadline). If ctx is done after dispatch, Submit returns an error wrapping
// ctx.Err() at once while the batch runs on; its result is discarded. (With
// Options.IdleDispatch, a request that finds its key idle, nothing queued
// and no batch executing, is dispatched at once and its batch runs on the
// caller's goroutine: Submit then returns when the batch is done, with its
// result, whatever happened to ctx meanwhile.)
//
// Errors: ErrClosed after Shutdown began; ErrTooLarge if rows >
// MaxBatchSize; ErrInvalid if rows < 1 or priority is not in
// [0, PriorityLevels); a *QueueFullError (ErrQueueFull) at once if the key's
// queue holds MaxQueueSize requests.
func (b *Batcher) Submit(ctx context.Context, key string, rows, priority int, payload any) (any, error) {
	q, err := b.queue(key)
	if err != nil {
		b.observeRejected(key, ReasonClosed)
		return nil, err
	}
	if err := b.admit(ctx, q, key, rows, priority); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok && b.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.Timeout)
		defer cancel()
	}

	it := newItem(key, rows, priority, payload)
	it.Deadline, _ = ctx.Deadline()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		b.observeRejected(key, ReasonClosed)
		return nil, errClosed(key)
	}
	q.stats.Submitted++
	if q.n >= b.opts.MaxQueueSize {
		q.stats.Rejected++
		qerr := &QueueFullError{Key: key, Queued: q.n, RetryAfter: q.retryAfterLocked()}
		q.mu.Unlock()
		b.observeRejected(key, ReasonQueueFull)
		return nil, qerr
	}
	it.Enqueued = time.Now()
	q.pushLocked(it)
	if b.opts.IdleDispatch && !q.worker && q.n == 1 && q.inflight == 0 {
		// A lone request on an idle key is ready at once: run its batch
		// here, on the caller's goroutine. Handing it to a worker and an
		// executor goroutine would cost more than the rest of the batcher
		// (tens of microseconds), which is all batching costs at low load.
		batch := q.takeBatchLocked(it.Enqueued)
		batch.Inline = true
		b.wg.Add(1)
		q.mu.Unlock()
		b.run(q, batch)
		return it.result, it.err
	}
	startWorker := !q.worker
	if startWorker {
		q.worker = true
		b.wg.Add(1)
	}
	// The worker sleeps until the oldest request's MaxQueueDelay; a new
	// request only changes that when it fills a batch.
	wake := q.rows >= q.limitLocked() && q.inflight < b.opts.MaxConcurrentBatches
	q.mu.Unlock()
	if startWorker {
		go b.work(q)
	} else if wake {
		q.signal()
	}

	select {
	case <-it.done:
		return it.result, it.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	if it.state == stateQueued {
		q.removeLocked(it)
		waited := time.Since(it.Enqueued)
		err := ctx.Err()
		expired := q.countEndedLocked(err)
		q.mu.Unlock()
		if expired {
			b.observeRejected(key, ReasonExpired)
			return nil, fmt.Errorf("%w: key %q: queued for %v: %w", ErrExpired, key, waited.Round(time.Microsecond), err)
		}
		b.observeRejected(key, ReasonCancelled)
		return nil, fmt.Errorf("batching: key %q: cancelled before dispatch, queued for %v: %w", key, waited.Round(time.Microsecond), err)
	}
	q.mu.Unlock()
	select {
	case <-it.done: // finished meanwhile, or dropped by Shutdown
		return it.result, it.err
	default:
	}
	return nil, fmt.Errorf("batching: key %q: gave up waiting for the result after dispatch: %w", key, ctx.Err())
}

// admit refuses, before it is queued, a request whose ctx is already done
// or whose rows or priority are invalid, counting it in q's statistics.
func (b *Batcher) admit(ctx context.Context, q *queue, key string, rows, priority int) error {
	if err := ctx.Err(); err != nil {
		q.mu.Lock()
		q.stats.Submitted++
		expired := q.countEndedLocked(err)
		q.mu.Unlock()
		if expired {
			b.observeRejected(key, ReasonExpired)
			return fmt.Errorf("%w: key %q: the deadline passed before the request was queued: %w", ErrExpired, key, err)
		}
		b.observeRejected(key, ReasonCancelled)
		return fmt.Errorf("batching: key %q: the context was cancelled before the request was queued: %w", key, err)
	}
	if err := b.checkRequest(key, rows, priority); err != nil {
		q.mu.Lock()
		q.stats.Submitted++
		q.stats.Invalid++
		q.mu.Unlock()
		if errors.Is(err, ErrTooLarge) {
			b.observeRejected(key, ReasonTooLarge)
		} else {
			b.observeRejected(key, ReasonInvalid)
		}
		return err
	}
	return nil
}

// countEndedLocked counts a request whose context ended with err (the
// deadline passed: expired; else cancelled) and reports whether it expired.
// q.mu is held.
func (q *queue) countEndedLocked(err error) bool {
	expired := errors.Is(err, context.DeadlineExceeded)
	if expired {
		q.stats.Expired++
	} else {
		q.stats.Cancelled++
	}
	return expired
}

// checkRequest validates Submit's rows and priority.
func (b *Batcher) checkRequest(key string, rows, priority int) error {
	switch {
	case rows < 1:
		return fmt.Errorf("%w: key %q: rows = %d, want >= 1", ErrInvalid, key, rows)
	case rows > b.opts.MaxBatchSize:
		return fmt.Errorf("%w: key %q: %d rows exceed the maximum batch size %d (buckets %v)", ErrTooLarge, key, rows, b.opts.MaxBatchSize, b.opts.Buckets)
	case priority < 0 || priority >= b.opts.PriorityLevels:
		return fmt.Errorf("%w: key %q: priority = %d, want 0 (highest) to %d", ErrInvalid, key, priority, b.opts.PriorityLevels-1)
	}
	return nil
}

func errClosed(key string) error {
	return fmt.Errorf("%w: key %q: the batcher is shutting down", ErrClosed, key)
}

// queue returns key's queue, creating it, or ErrClosed after Shutdown began.
func (b *Batcher) queue(key string) (*queue, error) {
	b.mu.RLock()
	q, closed := b.queues[key], b.closed
	b.mu.RUnlock()
	if closed {
		return nil, errClosed(key)
	}
	if q != nil {
		return q, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed(key)
	}
	if q = b.queues[key]; q == nil {
		q = newQueue(key, &b.opts)
		b.queues[key] = q
	}
	return q, nil
}

func (b *Batcher) observeRejected(key, reason string) {
	if o := b.opts.Observer; o != nil {
		o.ObserveRejected(key, reason)
	}
}

// work is a key's worker: it forms batches and starts their execution, and
// exits when the queue is empty (the next Submit starts a new one).
func (b *Batcher) work(q *queue) {
	defer b.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		q.mu.Lock()
		if q.n == 0 {
			q.worker = false
			q.mu.Unlock()
			return
		}
		if q.inflight >= b.opts.MaxConcurrentBatches {
			q.mu.Unlock()
			<-q.wake // a batch finished (or Shutdown dropped the queue)
			continue
		}
		now := time.Now()
		ready, wait := q.readyLocked(now)
		if ready {
			batch := q.takeBatchLocked(now)
			b.wg.Add(1)
			q.mu.Unlock()
			go b.run(q, batch)
			continue
		}
		q.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-q.wake:
		case <-timer.C:
		}
	}
}

// run executes one batch and completes its requests.
func (b *Batcher) run(q *queue, bt *Batch) {
	defer b.wg.Done()
	if o := b.opts.Observer; o != nil {
		delays := make([]time.Duration, len(bt.Items))
		for i, it := range bt.Items {
			delays[i] = bt.Dispatched.Sub(it.Enqueued)
		}
		o.ObserveBatch(bt.Key, bt.Rows, bt.PaddedRows, delays)
	}
	start := time.Now()
	err := b.call(bt)
	d := time.Since(start)
	if err != nil {
		var pe *PanicError
		if !errors.As(err, &pe) {
			err = fmt.Errorf("batching: key %q: batch of %d requests, %d rows (padded to %d) failed: %w", bt.Key, len(bt.Items), bt.Rows, bt.PaddedRows, err)
		}
	}
	completed, failed := 0, 0
	for _, it := range bt.Items {
		if !it.Done() {
			if err != nil {
				it.SetError(err)
			} else {
				it.SetError(fmt.Errorf("batching: key %q: the runner returned without a result for the request at offset %d (%d rows) of a batch of %d rows", bt.Key, it.Offset, it.Rows, bt.Rows))
			}
		}
		if _, e := it.wait(); e != nil {
			failed++
		} else {
			completed++
		}
	}
	q.mu.Lock()
	q.finishLocked(bt, d, completed, failed)
	q.mu.Unlock()
	q.signal()
}

// call runs the Runner, turning a panic into a *PanicError.
func (b *Batcher) call(bt *Batch) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Key: bt.Key, Value: v, Stack: debug.Stack()}
		}
	}()
	return b.runner.RunBatch(b.runCtx, bt)
}

// Shutdown stops accepting requests (Submit returns ErrClosed) and drains:
// queued requests are still dispatched, without waiting for MaxQueueDelay,
// and Shutdown waits for every batch to finish. If ctx expires first, the
// requests still queued fail with ErrClosed, the context of the executing
// batches is cancelled, and Shutdown, once they have returned, returns an
// error wrapping ctx.Err(). When Shutdown returns, every goroutine of the
// Batcher has exited. Shutdown may be called more than once.
func (b *Batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	qs := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.Unlock()
	for _, q := range qs {
		q.mu.Lock()
		q.closed = true
		q.mu.Unlock()
		q.signal()
	}
	b.waitOnce.Do(func() {
		go func() {
			b.wg.Wait()
			close(b.idle)
		}()
	})
	select {
	case <-b.idle:
		return nil
	case <-ctx.Done():
	}

	dropped := 0
	for _, q := range qs {
		q.mu.Lock()
		items := q.drainLocked()
		q.stats.Dropped += uint64(len(items))
		q.mu.Unlock()
		q.signal()
		for _, it := range items {
			it.SetError(fmt.Errorf("%w: key %q: shutdown timed out before the request was dispatched", ErrClosed, q.key))
			b.observeRejected(q.key, ReasonClosed)
		}
		dropped += len(items)
	}
	b.cancelRun()
	<-b.idle
	return fmt.Errorf("batching: shutdown: %d queued requests dropped, executing batches cancelled: %w", dropped, ctx.Err())
}

// Stats returns a snapshot of the counters, per key and in total.
func (b *Batcher) Stats() Stats {
	b.mu.RLock()
	qs := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.RUnlock()
	st := Stats{Keys: make(map[string]KeyStats, len(qs)), Total: newKeyStats(b.opts.Buckets)}
	for _, q := range qs {
		q.mu.Lock()
		ks := q.snapshotLocked()
		q.mu.Unlock()
		st.Keys[q.key] = ks
		st.Total.add(ks)
	}
	return st
}
