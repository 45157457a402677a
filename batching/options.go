package batching

import (
	"fmt"
	"slices"
	"time"
)

// Default values of Options; a zero field takes its default.
const (
	DefaultMaxQueueDelay = 2 * time.Millisecond
	DefaultMaxQueueSize  = 1024
	DefaultTimeout       = 30 * time.Second
)

// NoQueueDelay as Options.MaxQueueDelay dispatches whatever is queued as soon
// as an executor of the key is free (the zero value means the default, 2ms).
const NoQueueDelay time.Duration = -1

// NoTimeout as Options.Timeout gives requests without a deadline no deadline
// at all (the zero value means the default, 30s).
const NoTimeout time.Duration = -1

// maxPriorityLevels bounds Options.PriorityLevels (each key keeps one FIFO per
// level).
const maxPriorityLevels = 256

// Options configures a Batcher. The zero value of every field means its
// default; New fills the defaults and then validates.
type Options struct {
	// MaxBatchSize is the most rows one batch holds. Default: the largest
	// bucket, or 1 without buckets. Must be <= the largest bucket.
	MaxBatchSize int

	// Buckets are the padded batch sizes, strictly ascending and positive,
	// e.g. [1 2 4 8 16 32]; a batch of n rows is padded to the smallest bucket
	// >= n. Default: [MaxBatchSize].
	Buckets []int

	// MaxQueueDelay is how long the oldest queued request of a key may wait
	// for more requests before its (not full) batch is dispatched. Default
	// 2ms; NoQueueDelay (any negative value) dispatches at once whatever is
	// queued. Go timers in an otherwise idle process fire about 1ms late at
	// worst (the poller's resolution), so delays well below 1ms act like ~1ms.
	MaxQueueDelay time.Duration

	// MaxQueueSize is the most requests (not rows) queued per key, not
	// counting those in executing batches; beyond it Submit answers
	// ErrQueueFull at once. Default 1024.
	MaxQueueSize int

	// Timeout is the deadline given to a request whose context has none.
	// Default 30s; NoTimeout (any negative value) sets none.
	Timeout time.Duration

	// PriorityLevels is the number of priority levels; priority 0 is the
	// highest, PriorityLevels-1 the lowest. Default 1, at most 256.
	PriorityLevels int

	// MaxConcurrentBatches is how many batches of one key may execute at
	// once. Default 1.
	MaxConcurrentBatches int

	// IdleDispatch makes MaxQueueDelay adaptive: while no batch of a key is
	// executing, whatever the key has queued is dispatched at once, so a
	// request that finds the key's executors idle never waits for company.
	// MaxQueueDelay then applies only while a batch executes: a further
	// batch (MaxConcurrentBatches > 1) is dispatched when it is full or its
	// oldest request has waited MaxQueueDelay. Requests that arrive while
	// the executors are busy form the next batch meanwhile, so batches grow
	// with the load. A request that finds its key idle runs its batch on
	// the caller's goroutine (see Submit). Default false: every batch that
	// is not full waits for MaxQueueDelay.
	IdleDispatch bool

	// BatchLimit, when not nil, lowers the size of a key's batches below
	// MaxBatchSize at run time: each time the Batcher forms a batch of the
	// key, or checks whether the queued rows fill one, it asks for the most
	// rows the next batch may hold (values outside [1, MaxBatchSize] are
	// clamped). A batch always takes its first request, so a request with
	// more rows than the limit, but not more than MaxBatchSize, runs in a
	// batch of its own. BatchLimit is called with the key's queue lock held:
	// it must be fast and must not call the Batcher. Default nil:
	// MaxBatchSize for every batch.
	BatchLimit func(key string) int

	// BatchRows, when not nil, may make a batch smaller than the rows
	// available to it, to spare padding: when a batch is formed, it is
	// called with the rows that the batch could take (the queued rows up to
	// the limit) and returns how many it should take (clamped to [1, that]).
	// E.g. with buckets [.. 8 16 ..], 9 rows run as 8 now and 1 in the next
	// batch rather than 9 padded to 16, when 16 rows cost much more than 8.
	// As BatchLimit, it is called with the key's queue lock held and must be
	// fast. Default nil: a batch takes every row it can.
	BatchRows func(key string, available int) int

	// OverlapDelay, with IdleDispatch and MaxConcurrentBatches > 1, replaces
	// MaxQueueDelay for a batch that would start beside an executing one:
	// such a batch leaves when full or when its oldest request has waited
	// OverlapDelay(key) (negative values count as 0), and else when the
	// executing batch ends. Set it to about one execution of the key's
	// batches, and the requests that arrive while a batch executes all form
	// the next batch, which starts as soon as the executing one ends; a
	// second, partial batch starts only when the executing one overruns. On
	// a CPU, where one execution already uses every core, two partial
	// batches at once only halve the batches. Called with the key's queue
	// lock held, like BatchLimit. Default nil: MaxQueueDelay.
	OverlapDelay func(key string) time.Duration

	// Observer, when not nil, is told about every dispatched batch and every
	// request that was refused or dropped before dispatch.
	Observer Observer
}

// Observer receives events as they happen, e.g. for a metrics exporter. Its
// methods are called from many goroutines at once, with no lock of the
// Batcher held, and must return quickly.
type Observer interface {
	// ObserveBatch is called once per batch as it is dispatched, before the
	// Runner runs it; queueDelays holds each request's time in the queue, in
	// the batch's order. The slice is not reused by the Batcher.
	ObserveBatch(key string, realRows, paddedRows int, queueDelays []time.Duration)

	// ObserveRejected is called for each request that ends without being
	// executed; reason is one of the Reason constants.
	ObserveRejected(key string, reason string)
}

// Reasons given to Observer.ObserveRejected.
const (
	ReasonQueueFull = "queue_full" // the key's queue was full (ErrQueueFull)
	ReasonTooLarge  = "too_large"  // rows > MaxBatchSize (ErrTooLarge)
	ReasonInvalid   = "invalid"    // rows < 1 or priority out of range (ErrInvalid)
	ReasonClosed    = "closed"     // submitted after Shutdown began, or dropped by Shutdown's timeout (ErrClosed)
	ReasonExpired   = "expired"    // deadline passed before dispatch (ErrExpired)
	ReasonCancelled = "cancelled"  // context cancelled before dispatch
)

// setDefaults fills the zero fields of o. Buckets is copied so that the
// caller's slice is never shared.
func (o *Options) setDefaults() {
	o.Buckets = slices.Clone(o.Buckets)
	if o.MaxBatchSize == 0 {
		if len(o.Buckets) > 0 {
			o.MaxBatchSize = o.Buckets[len(o.Buckets)-1]
		} else {
			o.MaxBatchSize = 1
		}
	}
	if len(o.Buckets) == 0 && o.MaxBatchSize > 0 {
		o.Buckets = []int{o.MaxBatchSize}
	}
	if o.MaxQueueDelay == 0 {
		o.MaxQueueDelay = DefaultMaxQueueDelay
	}
	if o.MaxQueueSize == 0 {
		o.MaxQueueSize = DefaultMaxQueueSize
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.PriorityLevels == 0 {
		o.PriorityLevels = 1
	}
	if o.MaxConcurrentBatches == 0 {
		o.MaxConcurrentBatches = 1
	}
}

// validate checks o after setDefaults; its errors name the field and value.
func (o *Options) validate() error {
	for i, s := range o.Buckets {
		if s < 1 {
			return fmt.Errorf("batching: Options.Buckets[%d] = %d: buckets must be positive (Buckets = %v)", i, s, o.Buckets)
		}
		if i > 0 && s <= o.Buckets[i-1] {
			return fmt.Errorf("batching: Options.Buckets[%d] = %d is not greater than Buckets[%d] = %d: buckets must be strictly ascending (Buckets = %v)", i, s, i-1, o.Buckets[i-1], o.Buckets)
		}
	}
	if o.MaxBatchSize < 1 {
		return fmt.Errorf("batching: Options.MaxBatchSize = %d: must be >= 1 (or 0 for the default)", o.MaxBatchSize)
	}
	if last := o.Buckets[len(o.Buckets)-1]; o.MaxBatchSize > last {
		return fmt.Errorf("batching: Options.MaxBatchSize = %d is larger than the largest bucket %d (Buckets = %v): a full batch would fit no bucket", o.MaxBatchSize, last, o.Buckets)
	}
	if o.MaxQueueSize < 1 {
		return fmt.Errorf("batching: Options.MaxQueueSize = %d: must be >= 1 (or 0 for the default %d)", o.MaxQueueSize, DefaultMaxQueueSize)
	}
	if o.PriorityLevels < 1 || o.PriorityLevels > maxPriorityLevels {
		return fmt.Errorf("batching: Options.PriorityLevels = %d: must be in [1, %d] (or 0 for the default 1)", o.PriorityLevels, maxPriorityLevels)
	}
	if o.MaxConcurrentBatches < 1 {
		return fmt.Errorf("batching: Options.MaxConcurrentBatches = %d: must be >= 1 (or 0 for the default 1)", o.MaxConcurrentBatches)
	}
	return nil
}

// bucketIndex returns the index of the smallest bucket >= rows, or -1 if
// rows exceeds every bucket.
func (o *Options) bucketIndex(rows int) int {
	i, _ := slices.BinarySearch(o.Buckets, rows)
	if i == len(o.Buckets) {
		return -1
	}
	return i
}
