package batching

import (
	"context"
	"sync/atomic"
	"time"
)

// Runner executes batches; the Batcher needs nothing more of the model.
//
// Contract: RunBatch sets the result of every item of b (Item.SetResult or
// Item.SetError) before it returns, or returns an error, which then fails
// every item that has no result yet. An item left without a result after a
// nil return fails with an error naming the contract. A panic is recovered
// and fails the batch's items that have no result with a *PanicError.
// RunBatch may be called concurrently for different batches (of different
// keys, or of one key when Options.MaxConcurrentBatches > 1). ctx is
// cancelled only when Shutdown's context expires; RunBatch must then return
// promptly, since Shutdown waits for it.
type Runner interface {
	RunBatch(ctx context.Context, b *Batch) error
}

// RunnerFunc adapts a function to the Runner interface.
type RunnerFunc func(ctx context.Context, b *Batch) error

// RunBatch calls f(ctx, b).
func (f RunnerFunc) RunBatch(ctx context.Context, b *Batch) error { return f(ctx, b) }

// Batch is a group of requests of one key, dispatched together.
type Batch struct {
	// Key is the key shared by all Items.
	Key string
	// Items are the batch's requests, in batch order: their Offsets are
	// 0, Items[0].Rows, Items[0].Rows+Items[1].Rows, ...
	Items []*Item
	// Rows is the batch's real rows, the sum of the Items' Rows
	// (<= Options.MaxBatchSize).
	Rows int
	// PaddedRows is the smallest of Options.Buckets that is >= Rows; the
	// Runner pads the batch to this size.
	PaddedRows int
	// Created is when the batch's oldest request was queued.
	Created time.Time
	// Dispatched is when the batch was handed to the Runner.
	Dispatched time.Time
	// Inline reports a batch dispatched at once because its key was idle
	// (Options.IdleDispatch: nothing else queued, no batch executing): it
	// holds that one request and runs on its Submit's goroutine.
	Inline bool
}

// Item is one request in a Batch. The Runner reads its exported fields, which
// the Batcher does not change after dispatch, and completes it with SetResult
// or SetError.
type Item struct {
	// Key is the request's key.
	Key string
	// Rows is the request's batch dimension (>= 1).
	Rows int
	// Offset is the index of the item's first row in its batch, set at
	// dispatch.
	Offset int
	// Priority is the request's priority level; 0 is the highest.
	Priority int
	// Payload is the value given to Submit.
	Payload any
	// Enqueued is when the request joined the queue.
	Enqueued time.Time
	// Deadline is the request's deadline (its context's, or Options.Timeout
	// after Submit); zero if none.
	Deadline time.Time

	finished atomic.Bool   // set by the first SetResult/SetError
	done     chan struct{} // closed once result and err are written
	result   any           // written once, before done is closed
	err      error         // written once, before done is closed

	// Queue membership, guarded by the key's queue.mu.
	state      itemState
	prev, next *Item
}

// itemState is where a request is; guarded by queue.mu.
type itemState uint8

const (
	stateNew        itemState = iota // not yet queued
	stateQueued                      // in a priority FIFO of its queue
	stateDispatched                  // taken into a batch
	stateRemoved                     // removed before dispatch (ctx done, or dropped by Shutdown)
)

func newItem(key string, rows, priority int, payload any) *Item {
	return &Item{Key: key, Rows: rows, Priority: priority, Payload: payload, done: make(chan struct{})}
}

// SetResult completes the request with result v, which Submit returns. Only
// the first SetResult or SetError of an item counts; later calls are ignored.
func (it *Item) SetResult(v any) { it.complete(v, nil) }

// SetError fails the request with err, which Submit returns. Only the first
// SetResult or SetError of an item counts; later calls are ignored.
func (it *Item) SetError(err error) {
	if err == nil {
		err = errNilError
	}
	it.complete(nil, err)
}

// Done reports whether the item has its result (or error) already.
func (it *Item) Done() bool { return it.finished.Load() }

func (it *Item) complete(v any, err error) bool {
	if !it.finished.CompareAndSwap(false, true) {
		return false
	}
	it.result, it.err = v, err
	close(it.done)
	return true
}

// wait returns the item's outcome once it has one.
func (it *Item) wait() (any, error) {
	<-it.done
	return it.result, it.err
}
