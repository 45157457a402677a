package batching

import (
	"sync"
	"time"
)

// ewmaWeight is the weight of the newest observation in the moving averages
// behind QueueFullError.RetryAfter.
const ewmaWeight = 0.2

// queue is one key's pending requests, executor accounting and statistics.
type queue struct {
	key  string
	opts *Options // the Batcher's, read only

	// wake (capacity 1) tells the worker that something it waits for may
	// have happened: the queued rows reached MaxBatchSize, a batch finished,
	// or Shutdown began or dropped the queue. Sends never block; a stale
	// token only costs the worker one more look.
	wake chan struct{}

	mu            sync.Mutex // guards everything below
	levels        []itemList // one FIFO per priority level, 0 first
	n             int        // queued requests
	rows          int        // queued rows
	inflight      int        // batches executing
	inflightItems int        // requests in executing batches
	worker        bool       // a worker goroutine runs for this queue
	closed        bool       // Shutdown began: accept nothing, drain
	execEWMA      float64    // recent RunBatch time, seconds; 0 until the first batch ends
	itemsEWMA     float64    // recent requests per batch
	stats         KeyStats
}

func newQueue(key string, opts *Options) *queue {
	return &queue{
		key:    key,
		opts:   opts,
		wake:   make(chan struct{}, 1),
		levels: make([]itemList, opts.PriorityLevels),
		stats:  newKeyStats(opts.Buckets),
	}
}

// signal wakes the worker, if it waits.
func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pushLocked appends it to its priority's FIFO.
func (q *queue) pushLocked(it *Item) {
	q.levels[it.Priority].push(it)
	it.state = stateQueued
	q.n++
	q.rows += it.Rows
}

// removeLocked takes a queued it out of its FIFO (its context is done, or
// Shutdown drops it).
func (q *queue) removeLocked(it *Item) {
	q.levels[it.Priority].remove(it)
	it.state = stateRemoved
	q.n--
	q.rows -= it.Rows
}

// oldestLocked returns the earliest queued request; q.n > 0.
func (q *queue) oldestLocked() *Item {
	var oldest *Item
	for i := range q.levels {
		if h := q.levels[i].head; h != nil && (oldest == nil || h.Enqueued.Before(oldest.Enqueued)) {
			oldest = h
		}
	}
	return oldest
}

// readyLocked reports whether a batch should be dispatched now and, if not,
// how long until the oldest request has waited MaxQueueDelay (or
// OverlapDelay's). q.n > 0.
func (q *queue) readyLocked(now time.Time) (bool, time.Duration) {
	// Batch formation stops at the limit (MaxBatchSize, or BatchLimit's)
	// or at the first request that does not fit, so queued rows >= the
	// limit means that waiting cannot make the next batch any larger.
	// With IdleDispatch an idle key does not wait for company either.
	if q.closed || q.opts.MaxQueueDelay < 0 || q.rows >= q.limitLocked() ||
		(q.opts.IdleDispatch && q.inflight == 0) {
		return true, 0
	}
	delay := q.opts.MaxQueueDelay
	if q.opts.IdleDispatch && q.opts.OverlapDelay != nil {
		delay = max(q.opts.OverlapDelay(q.key), 0)
	}
	wait := q.oldestLocked().Enqueued.Add(delay).Sub(now)
	return wait <= 0, wait
}

// limitLocked returns the most rows the key's next batch may hold:
// MaxBatchSize, or what Options.BatchLimit says, clamped to [1,
// MaxBatchSize].
func (q *queue) limitLocked() int {
	n := q.opts.MaxBatchSize
	if f := q.opts.BatchLimit; f != nil {
		n = min(max(f(q.key), 1), n)
	}
	return n
}

// takeBatchLocked removes the next batch from the queue: requests in
// priority order, FIFO within a level, up to the limit's rows (the first
// request is always taken; it has at most MaxBatchSize rows), stopping at
// the first request that does not fit. q.n > 0.
func (q *queue) takeBatchLocked(now time.Time) *Batch {
	limit := q.limitLocked()
	if f := q.opts.BatchRows; f != nil && q.rows > 0 {
		available := min(q.rows, limit)
		limit = min(max(f(q.key, available), 1), available)
	}
	b := &Batch{Key: q.key, Dispatched: now}
	rows := 0
levels:
	for l := range q.levels {
		for it := q.levels[l].head; it != nil; {
			if rows+it.Rows > limit && rows > 0 {
				break levels
			}
			next := it.next
			q.levels[l].remove(it)
			it.state = stateDispatched
			it.Offset = rows
			rows += it.Rows
			if b.Created.IsZero() || it.Enqueued.Before(b.Created) {
				b.Created = it.Enqueued
			}
			b.Items = append(b.Items, it)
			if rows >= limit {
				break levels
			}
			it = next
		}
	}
	b.Rows = rows
	bi := q.opts.bucketIndex(rows) // >= 0: rows <= MaxBatchSize <= the largest bucket
	b.PaddedRows = q.opts.Buckets[bi]

	q.n -= len(b.Items)
	q.rows -= rows
	q.inflight++
	q.inflightItems += len(b.Items)
	s := &q.stats
	s.Batches++
	s.RealRows.observeAt(bi, float64(rows))
	s.PaddedRows.observeAt(bi, float64(b.PaddedRows))
	for _, it := range b.Items {
		s.QueueDelay.observe(seconds(now.Sub(it.Enqueued)))
	}
	return b
}

// drainLocked removes and returns every queued request (Shutdown's context
// expired).
func (q *queue) drainLocked() []*Item {
	var out []*Item
	for l := range q.levels {
		for it := q.levels[l].head; it != nil; {
			next := it.next
			q.removeLocked(it)
			out = append(out, it)
			it = next
		}
	}
	return out
}

// finishLocked records the end of a batch that ran for d.
func (q *queue) finishLocked(b *Batch, d time.Duration, completed, failed int) {
	q.inflight--
	q.inflightItems -= len(b.Items)
	q.stats.Completed += uint64(completed)
	q.stats.Failed += uint64(failed)
	q.stats.BatchDuration.observe(seconds(d))
	if q.execEWMA == 0 {
		q.execEWMA, q.itemsEWMA = seconds(d), float64(len(b.Items))
	} else {
		q.execEWMA += ewmaWeight * (seconds(d) - q.execEWMA)
		q.itemsEWMA += ewmaWeight * (float64(len(b.Items)) - q.itemsEWMA)
	}
}

// retryAfterLocked estimates how long the queue takes to drain: the queued
// requests in batches of the recent size, executed MaxConcurrentBatches at a
// time at the recent batch time. Before any batch has finished it falls
// back to MaxQueueDelay. At least 1ms.
func (q *queue) retryAfterLocked() time.Duration {
	delay := max(q.opts.MaxQueueDelay, 0)
	d := delay
	if q.execEWMA > 0 {
		perBatch := max(q.itemsEWMA, 1)
		batches := float64(q.n) / perBatch
		rounds := batches / float64(q.opts.MaxConcurrentBatches)
		d = time.Duration(rounds*q.execEWMA*float64(time.Second)) + delay
	}
	return max(d, time.Millisecond)
}

// snapshotLocked returns a copy of the key's stats with the gauges filled.
func (q *queue) snapshotLocked() KeyStats {
	s := q.stats.clone()
	s.Queued = q.n
	s.QueuedRows = q.rows
	s.InFlight = q.inflight
	s.InFlightItems = q.inflightItems
	return s
}

// itemList is an intrusive doubly linked FIFO of Items, so that a request
// whose context is done leaves the queue in O(1).
type itemList struct {
	head, tail *Item
}

func (l *itemList) push(it *Item) {
	it.prev, it.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = it
	} else {
		l.head = it
	}
	l.tail = it
}

func (l *itemList) remove(it *Item) {
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		l.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		l.tail = it.prev
	}
	it.prev, it.next = nil, nil
}
