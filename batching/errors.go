package batching

import (
	"errors"
	"fmt"
	"time"
)

// The sentinel errors of package batching. Errors returned by Submit and
// Shutdown wrap at most one of them (test with errors.Is) and add the key and
// the numbers involved to the message.
var (
	// ErrQueueFull: the key's queue already holds Options.MaxQueueSize
	// requests. Submit answers at once with a *QueueFullError, which matches
	// ErrQueueFull and carries a RetryAfter hint (HTTP 429 + Retry-After).
	ErrQueueFull = errors.New("batching: queue full")

	// ErrClosed: Shutdown has begun, so Submit accepts nothing more; or
	// Shutdown's context expired while the request was still queued, so it
	// was never executed.
	ErrClosed = errors.New("batching: closed")

	// ErrTooLarge: the request has more rows than Options.MaxBatchSize, so no
	// batch can ever hold it.
	ErrTooLarge = errors.New("batching: request too large")

	// ErrExpired: the request's deadline passed while it was queued, before
	// its batch was dispatched; it was never executed. The error also wraps
	// context.DeadlineExceeded.
	ErrExpired = errors.New("batching: deadline passed before dispatch")

	// ErrInvalid: the request's rows are < 1 or its priority is outside
	// [0, Options.PriorityLevels).
	ErrInvalid = errors.New("batching: invalid request")
)

// QueueFullError is the error Submit returns when the key's queue is full.
// It matches ErrQueueFull under errors.Is.
type QueueFullError struct {
	// Key is the request's key.
	Key string
	// Queued is the number of requests in the key's queue (MaxQueueSize).
	Queued int
	// RetryAfter estimates how long the queue takes to drain at the key's
	// recent batch rate (batch execution time, requests per batch,
	// MaxConcurrentBatches); at least 1ms.
	RetryAfter time.Duration
}

// Error reads "batching: queue full: key "k": 1024 requests queued; retry after 40ms".
func (e *QueueFullError) Error() string {
	return fmt.Sprintf("%v: key %q: %d requests queued; retry after %v", ErrQueueFull, e.Key, e.Queued, e.RetryAfter)
}

// Is reports whether target is ErrQueueFull.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// PanicError is the error given to the requests of a batch whose Runner
// panicked. The worker recovers the panic and keeps serving.
type PanicError struct {
	// Key is the batch's key.
	Key string
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic, for logs; it is not part
	// of Error().
	Stack []byte
}

// Error reads "batching: key "k": runner panicked: <value>".
func (e *PanicError) Error() string {
	return fmt.Sprintf("batching: key %q: runner panicked: %v", e.Key, e.Value)
}
