// Package batching is a generic dynamic batcher: it gathers concurrent
// requests into batches and hands each batch to a Runner.
//
// Requests are grouped by a key (the serving layer uses the model version plus
// the non-batch shape bucket, e.g. "resnet/1/seq=128"); only requests of one
// key are batched together. Each request carries a number of rows (its batch
// dimension, at least 1), a priority (0 is the highest) and an opaque payload.
//
//	b, err := batching.New(batching.Options{Buckets: []int{1, 2, 4, 8}}, runner)
//	res, err := b.Submit(ctx, "resnet/1", rows, 0, payload) // blocks until the result
//	...
//	err = b.Shutdown(ctx) // drain, then stop
//
// # Batch formation
//
// Every key has its own queue, with one FIFO per priority level, and a worker
// goroutine (running only while the queue is not empty) that forms batches
// and hands each to the Runner on a goroutine of its own (with IdleDispatch,
// a request that finds its key idle is run by Submit itself). A batch takes requests from the highest
// priority level first, in FIFO order within a level, then from the next
// level, and stops at the first request that does not fit: requests are never
// split across batches and never overtaken by a later request of the same or
// lower priority. A batch is dispatched as soon as
//
//   - the queued rows reach MaxBatchSize, or the lower limit
//     Options.BatchLimit sets (the batch is full, or the next request cannot
//     fit into it), or
//   - the oldest queued request has waited MaxQueueDelay, or
//   - Options.IdleDispatch is set and no batch of the key is executing, or
//   - Shutdown has begun (draining dispatches whatever is queued),
//
// and fewer than MaxConcurrentBatches batches of the key are executing. So a
// lone request waits at most MaxQueueDelay (plus scheduling) while the
// key's executors are idle (not at all with IdleDispatch), and while one
// batch executes the next one forms.
// A batch's PaddedRows is the smallest of Options.Buckets that holds its rows;
// the Runner pads the batch to that size.
//
// # Deadlines and cancellation
//
// A request whose context is done before its batch is dispatched is removed
// from the queue at once (by Submit, under the queue's lock) and never
// reaches the Runner; Submit returns an error wrapping ctx.Err() and, for a
// deadline, ErrExpired. Requests without a deadline get Options.Timeout. Once
// a batch is dispatched it runs to completion: the context given to the Runner
// is cancelled only when Shutdown's context expires. A client that goes away
// after dispatch gets its context's error from Submit at once, and the result
// is discarded; except for a lone request that IdleDispatch runs on the
// caller's goroutine, which gets its result when its batch is done.
//
// # Errors
//
// Every error starts with "batching: ". The sentinel errors (ErrQueueFull,
// ErrClosed, ErrTooLarge, ErrExpired, ErrInvalid) are documented together in
// errors.go; a full queue answers with a *QueueFullError whose RetryAfter
// estimates when to try again.
//
// # Concurrency
//
// All methods of Batcher are safe for concurrent use. Lock order: Batcher.mu
// before queue.mu (today no path holds both). No lock is held while the Runner
// or the Observer is called or while a request is completed. After Shutdown
// returns, every goroutine the Batcher started has exited.
package batching
