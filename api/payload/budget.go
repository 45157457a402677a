package payload

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBudget: the server's memory budget for requests in flight is full;
// retry later (429 with Retry-After). A single request that needs more
// than the whole budget is ErrTooLarge instead.
var ErrBudget = errors.New("payload: memory budget full")

// DefaultMemoryBudget is the default of the servers' Options.MemoryBudget.
const DefaultMemoryBudget = 200 << 20

// Budget bounds the memory that requests in flight hold, across every
// request of every protocol that shares it: request bodies, their
// decompressed form and decoded tensors are reserved before they are
// allocated, and released when the request is answered. A nil *Budget
// bounds nothing. Safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64 // bytes reserved now

	mu       sync.Mutex // guards freed, lastFree and pending
	freed    int64      // bytes released since memory was last returned
	lastFree time.Time
	pending  bool // returnMemory is scheduled
}

// After a burst (burstBytes released since, with nothing in flight), the
// heap's free memory goes back to the OS, at most every freeEvery.
const (
	burstBytes = 64 << 20
	freeEvery  = 2 * time.Second
)

// NewBudget returns a budget of limit bytes (> 0).
func NewBudget(limit int64) (*Budget, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("payload: NewBudget: the memory budget is %d bytes, want > 0", limit)
	}
	return &Budget{limit: limit}, nil
}

// Limit is the budget in bytes (0 for a nil budget).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Used is the bytes reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Lease returns an empty lease on b for one request; Release it when the
// request is answered.
func (b *Budget) Lease() *Lease { return &Lease{b: b} }

// Lease is one request's reservations. Not safe for concurrent use.
type Lease struct {
	b *Budget
	n int64
}

// Reserve reserves n more bytes for what (e.g. "the request body"), or
// fails with ErrBudget (the budget is full now) or ErrTooLarge (the request
// would need more than the whole budget).
func (l *Lease) Reserve(n int64, what string) error {
	if l == nil || l.b == nil || n <= 0 {
		return nil
	}
	b := l.b
	if l.n+n > b.limit {
		return tooLarge("%s needs %d more bytes, and the request holds %d: more than the server's whole memory budget for requests of %d bytes", what, n, l.n, b.limit)
	}
	if used := b.used.Add(n); used > b.limit {
		b.used.Add(-n)
		return fmt.Errorf("%w: %s needs %d bytes, and requests in flight hold %d of the server's budget of %d; retry later", ErrBudget, what, n, used-n, b.limit)
	}
	l.n += n
	return nil
}

// Unreserve gives back n bytes of the lease (at most what it holds).
func (l *Lease) Unreserve(n int64) {
	if l == nil || l.b == nil || n <= 0 {
		return
	}
	n = min(n, l.n)
	l.n -= n
	l.b.release(n)
}

// Release gives back everything the lease holds.
func (l *Lease) Release() { l.Unreserve(l.Held()) }

// Held is the bytes the lease holds.
func (l *Lease) Held() int64 {
	if l == nil {
		return 0
	}
	return l.n
}

// Hold is bytes that the server holds for requests before any lease has
// reserved them: a transport's queue of requests not yet read (the
// embedded NATS server's buffer for xserve's connection). They exist
// already, so they cannot be refused; holding them makes the requests
// after them refused (429) while the queue is long, so that the requests
// in flight and the queue in front of them together stay within the
// budget. A nil *Hold holds nothing. Safe for concurrent use.
type Hold struct {
	b *Budget
	n atomic.Int64
}

// Hold returns an empty hold on b.
func (b *Budget) Hold() *Hold { return &Hold{b: b} }

// Set makes the hold n bytes (>= 0), whatever it was.
func (h *Hold) Set(n int64) {
	if h == nil || h.b == nil {
		return
	}
	n = max(n, 0)
	d := n - h.n.Swap(n)
	switch {
	case d > 0:
		h.b.used.Add(d)
	case d < 0:
		h.b.release(-d)
	}
}

// Held is the bytes the hold holds.
func (h *Hold) Held() int64 {
	if h == nil {
		return 0
	}
	return h.n.Load()
}

// release returns n bytes to the budget. After a burst (burstBytes
// released since, with nothing in flight) it schedules returnMemory: at
// once, or freeEvery after the last time, so that a burst of large requests
// does not leave the process holding its peak, however its requests ended.
func (b *Budget) release(n int64) {
	used := b.used.Add(-n)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.freed += n
	if used != 0 || b.freed < burstBytes || b.pending {
		return
	}
	b.pending = true
	time.AfterFunc(max(freeEvery-time.Since(b.lastFree), 0), b.returnMemory)
}

// returnMemory gives the heap's free memory back to the OS, unless a new
// burst began (its end schedules it again).
func (b *Budget) returnMemory() {
	b.mu.Lock()
	b.pending = false
	if b.used.Load() != 0 {
		b.mu.Unlock()
		return
	}
	b.freed, b.lastFree = 0, time.Now()
	b.mu.Unlock()
	// Twice: pooled buffers survive one collection (sync.Pool's victim
	// cache).
	debug.FreeOSMemory()
	debug.FreeOSMemory()
}

// Chunks of ReadAll: a small first one for the usual small bodies, then
// large ones, pooled so that a burst reuses them instead of growing the
// heap.
const (
	smallChunk = 64 << 10
	largeChunk = 1 << 20
)

var (
	smallChunks = sync.Pool{New: func() any { b := make([]byte, smallChunk); return &b }}
	largeChunks = sync.Pool{New: func() any { b := make([]byte, largeChunk); return &b }}
)

// ErrOverLimit is returned by ReadAll for a stream longer than its limit;
// callers say what was too long.
var ErrOverLimit = errors.New("payload: over the limit")

// ReadAll reads r to its end into one buffer of the exact size, refusing
// more than limit bytes (ErrOverLimit) and reserving what it reads from lease as it goes, so that a
// body that expands without bound costs at most limit bytes (in pooled
// chunks) and a burst of them at most the budget. A read error is returned
// as is.
func ReadAll(r io.Reader, limit int64, lease *Lease, what string) ([]byte, error) {
	var chunks []*[]byte
	var total int64
	defer func() {
		for i, c := range chunks {
			if i == 0 {
				smallChunks.Put(c)
			} else {
				largeChunks.Put(c)
			}
		}
	}()
	reserved := int64(0)
	defer func() { lease.Unreserve(reserved) }()
	for {
		size, pool := int64(largeChunk), &largeChunks
		if len(chunks) == 0 {
			size, pool = smallChunk, &smallChunks
		}
		if err := lease.Reserve(size, what); err != nil {
			return nil, err
		}
		reserved += size
		c := pool.Get().(*[]byte)
		chunks = append(chunks, c)
		n, err := fill(r, *c)
		total += int64(n)
		if total > limit {
			return nil, ErrOverLimit
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if err := lease.Reserve(total, what); err != nil {
		return nil, err
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, (*c)[:min(int64(len(*c)), total-int64(len(out)))]...)
	}
	return out, nil
}

// fill reads into b until it is full (nil error), r ends (io.EOF) or fails.
// Unlike io.ReadFull it keeps an io.ErrUnexpectedEOF of r (a truncated
// compressed stream) apart from the end of r.
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// runtimeSlack is what LimitRuntime allows the Go runtime beyond the
// budget: pools, stacks, the copies of a request the budget does not count
// (a transport's buffers, with the queue in front of the handlers held
// against the budget, see Hold). 32 MiB: the limit is what the collector
// keeps the heap to while a burst leaves garbage, so it is the RSS such a
// burst reaches.
const runtimeSlack = 32 << 20

// LimitRuntime tells the Go runtime about the budget: a soft memory limit
// (debug.SetMemoryLimit) of the memory the runtime holds now plus the
// budget plus runtimeSlack, so that the garbage left by a burst of large
// requests is collected before the heap doubles over it (the collector's
// default pace). Call it once the process holds its steady state (the
// models loaded). It returns the limit; a GOMEMLIMIT set in the
// environment wins: LimitRuntime then changes nothing and returns 0.
func (b *Budget) LimitRuntime() int64 {
	if b == nil || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	limit := int64(ms.Sys-ms.HeapReleased) + b.limit + runtimeSlack
	debug.SetMemoryLimit(limit)
	return limit
}
