package serving

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/xserve/xserve/batching"
)

// Dynamic batching: a version whose config enables batching and whose
// inputs and outputs all have one "batch" dim gets a batching.Batcher. Its
// queue key is the model version plus the request's non-batch bucket, so
// only requests that run in the same executable family share a batch; the
// runner (runBatch) executes each batch once in the batch bucket of its
// padded rows, and a sizer per queue (sizer.go) learns which batch size runs
// rows the cheapest and limits the queue's batches to it.

// concurrentBatches is how many batches of one queue key execute at once.
// With batching.Options.IdleDispatch, a request that finds no batch of its
// key executing is dispatched at once. A second batch starts while the
// first executes once it is full (the sizer's limit), which keeps the device
// busy while the host uploads, downloads and splits results under heavy
// load, or once its oldest request has waited the sizer's OverlapDelay (two
// measured executions, at least max_queue_delay), which keeps one slow
// execution on a shared CPU from stalling the queue. Otherwise the requests
// that queue while a batch executes leave together when it ends: on a CPU,
// where one execution uses every core, two partial batches at once only
// halved the batches (docs/BUCKETS.md, "Batching policy"). The sizer's Rows
// cuts a batch to a smaller bucket when padding would cost more than the
// rows left for the next batch.
const concurrentBatches = 2

// batchResult is what runBatch gives each request of a batch.
type batchResult struct {
	times runTimes
	exec  map[string]int64 // the sizes the batch ran at
}

// setupBatching creates v's batcher when its config enables batching and its
// plan allows stacking requests; it logs why batching is off otherwise. It
// runs at the end of load, once the pad policies are known.
func (v *version) setupBatching(cfgFile string) error {
	bc := v.cfg.Batching
	if !bc.Enabled {
		return nil
	}
	if err := v.plan.batchErr; err != nil {
		v.log().Info("batching is enabled but requests cannot be stacked; they run one by one", "reason", err.Error(), "config", cfgFile)
		return nil
	}
	sizes := v.plan.batch().Buckets
	buckets := make([]int, len(sizes))
	for i, s := range sizes {
		buckets[i] = int(s)
	}
	maxBatch := bc.MaxBatchSize
	if maxBatch == 0 || maxBatch > buckets[len(buckets)-1] {
		// config.yaml gives neither max_batch_size nor batch buckets: the
		// largest of the buckets picked for the batch dim is the limit.
		maxBatch = buckets[len(buckets)-1]
	}
	delay := bc.MaxQueueDelay
	if delay <= 0 {
		delay = batching.NoQueueDelay // config 0: dispatch at once
	}
	timeout := bc.Timeout
	if timeout <= 0 {
		timeout = batching.NoTimeout
	}
	b, err := batching.New(batching.Options{
		MaxBatchSize:         maxBatch,
		Buckets:              buckets,
		MaxQueueDelay:        delay,
		MaxQueueSize:         bc.MaxQueueSize,
		Timeout:              timeout,
		PriorityLevels:       bc.PriorityLevels,
		MaxConcurrentBatches: concurrentBatches,
		IdleDispatch:         true,
		BatchLimit:           func(key string) int { return v.sizer(key).Limit() },
		BatchRows:            func(key string, available int) int { return v.sizer(key).Rows(available) },
		OverlapDelay:         func(key string) time.Duration { return v.sizer(key).OverlapDelay(max(delay, 0)) },
		Observer:             batchObserver{v},
	}, batching.RunnerFunc(v.runBatch))
	if err != nil {
		return configError(cfgFile, "batching", "%v", err)
	}
	for _, reason := range queueReasons {
		v.m.metrics.queueRejected.With(v.name, v.label, reason)
	}
	v.batcher = b
	for _, exec := range v.plan.buckets() {
		v.sizer(v.plan.queueKey(v.queuePrefix(), exec)) // the queues of the buckets, shown in metrics from the start
	}
	opts := b.Options()
	v.log().Info("dynamic batching on", "batch_symbol", v.plan.batchName, "max_batch_size", opts.MaxBatchSize, "batch_buckets", fmt.Sprint(opts.Buckets),
		"max_queue_delay", bc.MaxQueueDelay, "max_queue_size", opts.MaxQueueSize, "priority_levels", opts.PriorityLevels)
	return nil
}

// sizer returns the batch size learner of a queue, created on first use.
func (v *version) sizer(key string) *sizer {
	v.bmu.Lock()
	defer v.bmu.Unlock()
	sz := v.sizers[key]
	if sz == nil {
		opts := v.batcher.Options()
		sz = newSizer(opts.Buckets, opts.MaxBatchSize)
		if v.sizers != nil {
			v.sizers[key] = sz
		}
		v.m.metrics.batchLimit.With(v.name, v.label, queueLabel(key, v)).Set(float64(sz.Limit()))
	}
	return sz
}

// queueLabel is the queue label of metrics: the queue key without the
// version's prefix ("seq=8"), or "all" when batch is the only symbol.
func queueLabel(key string, v *version) string {
	prefix := v.queuePrefix()
	if key == prefix {
		return "all"
	}
	return key[len(prefix)+1:]
}

func (v *version) queuePrefix() string { return v.name + "/" + v.label }

// inferBatched queues the prepared call c with the version's batcher, in
// the queue of its non-batch sizes, and waits for its batch. Errors wrap
// ErrOverloaded (the queue is full; the *batching.QueueFullError with its
// RetryAfter is kept in the chain), ErrInvalidInput (too many rows, a bad
// priority), ErrClosed (shutdown), or the context's error (expired or
// cancelled while queued).
func (v *version) inferBatched(ctx context.Context, req *InferRequest, c *call) (runTimes, map[string]int64, error) {
	rows := c.dims[v.plan.batchName]
	key := v.plan.queueKey(v.queuePrefix(), c.exec)
	res, err := v.batcher.Submit(ctx, key, int(rows), req.Priority, c)
	if err != nil {
		return runTimes{}, nil, v.batchError(err)
	}
	r := res.(batchResult)
	return r.times, r.exec, nil
}

// batchError maps an error of Submit to the package's sentinel errors,
// keeping the batcher's error in the chain.
func (v *version) batchError(err error) error {
	switch {
	case errors.Is(err, batching.ErrQueueFull):
		return fmt.Errorf("%w: %s: %w", ErrOverloaded, v, err)
	case errors.Is(err, batching.ErrTooLarge), errors.Is(err, batching.ErrInvalid):
		return fmt.Errorf("%w: %s: %w", ErrInvalidInput, v, err)
	case errors.Is(err, batching.ErrClosed):
		return fmt.Errorf("%w: %s: %w", ErrClosed, v, err)
	case errors.Is(err, batching.ErrExpired), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("serving: %s: %w", v, err)
	}
	return err // the runner's error, already a serving error inside
}

// runBatch is the version's batching.Runner: it runs the batch's requests
// as one execution at their queue's non-batch sizes and the batch bucket
// bt.PaddedRows, each request's rows written straight into its slot
// (Item.Offset) of the batch's input tensors and its outputs sliced
// straight out of the batch's.
func (v *version) runBatch(ctx context.Context, bt *batching.Batch) error {
	calls := make([]*call, len(bt.Items))
	offsets := make([]int64, len(bt.Items))
	for i, it := range bt.Items {
		calls[i] = it.Payload.(*call)
		offsets[i] = int64(it.Offset)
	}
	exec := maps.Clone(calls[0].exec)
	exec[v.plan.batchName] = int64(bt.PaddedRows)
	if hook := v.m.batchHook; hook != nil {
		hook(ctx, bt)
	}
	sz := v.sizer(bt.Key)
	calls[0].timed = sz.wantsCore(bt.PaddedRows, bt.Inline)
	t, err := v.runBucket(ctx, exec, calls, offsets)
	if err != nil {
		return err
	}
	if calls[0].timed {
		before := sz.Limit()
		sz.observe(bt.PaddedRows, t.cost())
		if after := sz.Limit(); after != before {
			v.m.metrics.batchLimit.With(v.name, v.label, queueLabel(bt.Key, v)).Set(float64(after))
		}
	}
	for _, it := range bt.Items {
		it.SetResult(batchResult{
			times: runTimes{wait: bt.Dispatched.Sub(it.Enqueued) + t.wait, compute: t.compute, split: t.split},
			exec:  exec,
		})
	}
	return nil
}

// batchObserver records a version's batching events in the Manager's
// metrics.
type batchObserver struct{ v *version }

func (o batchObserver) ObserveBatch(key string, realRows, paddedRows int, queueDelays []time.Duration) {
	mt := o.v.m.metrics
	mt.batchRows.With(o.v.name, o.v.label, rowsReal).Observe(float64(realRows))
	mt.batchRows.With(o.v.name, o.v.label, rowsPadded).Observe(float64(paddedRows))
}

func (o batchObserver) ObserveRejected(key, reason string) {
	o.v.m.metrics.queueRejected.With(o.v.name, o.v.label, reason).Inc()
}

// BatchStats returns the batching counters of a model version (0: the
// highest READY version), per queue and in total; ok is false when the
// version does not batch (batching off in config.yaml, or inputs without a
// batch dim).
func (m *Manager) BatchStats(model string, version int64) (st batching.Stats, ok bool, err error) {
	m.mu.Lock()
	v, err := m.lookupLocked(model, version)
	m.mu.Unlock()
	if err != nil {
		return batching.Stats{}, false, err
	}
	if v.batcher == nil {
		return batching.Stats{}, false, nil
	}
	return v.batcher.Stats(), true, nil
}

// shutdownBatchers drains the queues of every version that batches: each
// batcher stops taking requests, dispatches what is queued without waiting
// for max_queue_delay, and waits for its batches. If ctx ends first, the
// requests still queued fail with ErrClosed. It runs the batchers'
// shutdowns in parallel.
func (m *Manager) shutdownBatchers(ctx context.Context) error {
	m.mu.Lock()
	var vs []*version
	for _, md := range m.models {
		for _, v := range md.versions {
			if v.batcher != nil {
				vs = append(vs, v)
			}
		}
	}
	m.mu.Unlock()
	slices.SortFunc(vs, func(a, b *version) int {
		if a.name != b.name {
			if a.name < b.name {
				return -1
			}
			return 1
		}
		return int(a.num - b.num)
	})
	errs := make([]error, len(vs))
	done := make(chan int, len(vs))
	for i, v := range vs {
		go func() {
			if err := v.batcher.Shutdown(ctx); err != nil {
				errs[i] = fmt.Errorf("%s: %w", v, err)
			}
			done <- i
		}()
	}
	for range vs {
		<-done
	}
	return errors.Join(errs...)
}
