package clustercache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/internal/metrics"
)

// Defaults of TieredOptions.
const (
	DefaultQueueBytes = 512 << 20
	DefaultAttempts   = 5
)

// TieredOptions configure a Tiered cache. The zero value of each field means
// its default.
type TieredOptions struct {
	// QueueBytes bounds the bytes of the entries waiting to be published;
	// an entry that does not fit is not published (it stays in the local
	// cache, and the next replica that builds it publishes it). Default
	// 512 MiB.
	QueueBytes int64
	// Attempts is how often publishing one entry is tried, a second apart
	// and waiting for the connection, before it is given up; default 5.
	Attempts int
	// Logger receives the cache's warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Results of a cluster lookup (xserve_cluster_cache_lookups_total).
const (
	resultHit     = "hit"
	resultMiss    = "miss"
	resultCorrupt = "corrupt"
	resultError   = "error"
	resultOffline = "offline"
)

// Results of a publication (xserve_cluster_cache_publications_total).
const (
	pubPublished = "published"
	pubPresent   = "present"
	pubFailed    = "failed"
	pubDropped   = "dropped"
)

// Tiered is the engine.Cache of a replica in a cluster: a local cache (nil
// for none) in front of the cluster's Store. See the package comment. Its
// methods are safe for concurrent use.
type Tiered struct {
	local  engine.Cache
	shared *Store
	opts   TieredOptions
	log    *slog.Logger

	mu     sync.Mutex // guards queue, keys, bytes, busy and closed
	wake   *sync.Cond // signalled when queue grows or closed is set
	queue  []pending
	keys   map[string]bool // the keys in queue
	bytes  int64           // the payload bytes in queue
	busy   bool            // the publisher is working on an entry
	closed bool
	done   chan struct{} // closed when the publisher returns

	reg            *metrics.Registry
	lookups        *metrics.CounterVec // result
	publications   *metrics.CounterVec // result
	publishSeconds *metrics.Histogram
	pendingGauge   *metrics.Gauge
}

// pending is an entry waiting to be published.
type pending struct {
	key  string
	data []byte
	at   time.Time // when it was queued
}

var _ engine.Cache = (*Tiered)(nil)

// NewTiered returns the cache of local (nil for none) then shared, and
// starts publishing in the background; Close stops it.
func NewTiered(local engine.Cache, shared *Store, opts TieredOptions) *Tiered {
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.Attempts <= 0 {
		opts.Attempts = DefaultAttempts
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := metrics.NewRegistry()
	t := &Tiered{
		local:  local,
		shared: shared,
		opts:   opts,
		log:    opts.Logger.With("bucket", shared.Bucket()),
		keys:   map[string]bool{},
		done:   make(chan struct{}),
		reg:    r,
		lookups: r.NewCounterVec("xserve_cluster_cache_lookups_total",
			"Compile-cache lookups that reached the cluster's object store (the local cache missed), by result: hit, miss, corrupt (checksum failed; deleted and rebuilt), error, offline (skipped while NATS is disconnected).", "result"),
		publications: r.NewCounterVec("xserve_cluster_cache_publications_total",
			"Compile-cache entries offered to the cluster's object store, by result: published, present (another replica had published it), failed (after the retries), dropped (the publication queue was full).", "result"),
		publishSeconds: r.NewHistogramVec("xserve_cluster_cache_publish_seconds",
			"Time from an entry being stored locally to its publication in the cluster's object store.",
			[]float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}).With(),
		pendingGauge: r.NewGaugeVec("xserve_cluster_cache_pending", "Compile-cache entries waiting to be published to the cluster.").With(),
	}
	for _, res := range []string{resultHit, resultMiss, resultCorrupt, resultError, resultOffline} {
		t.lookups.With(res)
	}
	for _, res := range []string{pubPublished, pubPresent, pubFailed, pubDropped} {
		t.publications.With(res)
	}
	t.wake = sync.NewCond(&t.mu)
	go t.publisher()
	return t
}

// Store returns the cluster's store.
func (t *Tiered) Store() *Store { return t.shared }

// Get returns the entry of key from the local cache, else from the
// cluster (writing it to the local cache). An entry the local cache holds
// is offered to the cluster too, in case it lacks it. A corrupt entry in
// either is deleted there; the error of the last tier that failed is
// returned with a miss.
func (t *Tiered) Get(key string) ([]byte, bool, error) {
	var localErr error
	if t.local != nil {
		data, ok, err := t.local.Get(key)
		if ok {
			t.enqueue(key, data)
			return data, true, nil
		}
		localErr = err
	}
	if !t.shared.Connected() {
		t.lookups.With(resultOffline).Inc()
		return nil, false, localErr
	}
	data, ok, err := t.shared.Get(key)
	switch {
	case ok:
		t.lookups.With(resultHit).Inc()
		if t.local != nil {
			if err := t.local.Put(key, data); err != nil {
				t.log.Warn("cluster compile cache: cannot keep an entry in the local cache", "key", key, "error", err)
			}
		}
		return data, true, nil
	case errors.Is(err, engine.ErrCorruptEntry):
		t.lookups.With(resultCorrupt).Inc()
	case err != nil:
		t.lookups.With(resultError).Inc()
	default:
		t.lookups.With(resultMiss).Inc()
		return nil, false, localErr
	}
	return nil, false, errors.Join(localErr, err)
}

// Put stores the entry of key in the local cache at once and queues it for
// the cluster. Only the local cache's error is returned: a publication
// that fails is logged and counted.
func (t *Tiered) Put(key string, data []byte) error {
	var err error
	if t.local != nil {
		err = t.local.Put(key, data)
	}
	t.enqueue(key, data)
	return err
}

// Delete removes the entry of key from both tiers.
func (t *Tiered) Delete(key string) error {
	var errs []error
	if t.local != nil {
		errs = append(errs, t.local.Delete(key))
	}
	t.mu.Lock()
	t.dropLocked(key)
	t.mu.Unlock()
	if t.shared.Connected() {
		errs = append(errs, t.shared.Delete(key))
	}
	return errors.Join(errs...)
}

// enqueue queues the entry of key for publication, unless it is queued
// already, the queue is full or the cache is closed.
func (t *Tiered) enqueue(key string, data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed || t.keys[key]:
		return
	case t.bytes+int64(len(data)) > t.opts.QueueBytes:
		t.publications.With(pubDropped).Inc()
		t.log.Warn("cluster compile cache: publication queue full; the entry stays local", "key", key, "bytes", len(data), "queued_bytes", t.bytes)
		return
	}
	t.queue = append(t.queue, pending{key: key, data: data, at: time.Now()})
	t.keys[key] = true
	t.bytes += int64(len(data))
	t.pendingGauge.Set(float64(len(t.queue)))
	t.wake.Signal()
}

// dropLocked removes key from the queue.
func (t *Tiered) dropLocked(key string) {
	if !t.keys[key] {
		return
	}
	for i, p := range t.queue {
		if p.key == key {
			t.bytes -= int64(len(p.data))
			t.queue = append(t.queue[:i], t.queue[i+1:]...)
			break
		}
	}
	delete(t.keys, key)
	t.pendingGauge.Set(float64(len(t.queue)))
}

// publisher publishes the queued entries in order until Close.
func (t *Tiered) publisher() {
	defer close(t.done)
	for {
		t.mu.Lock()
		for len(t.queue) == 0 && !t.closed {
			t.wake.Wait()
		}
		if t.closed && len(t.queue) == 0 {
			t.mu.Unlock()
			return
		}
		p := t.queue[0]
		t.busy = true
		t.mu.Unlock()

		result := t.publish(p)

		t.mu.Lock()
		t.busy = false
		if len(t.queue) > 0 && t.queue[0].key == p.key {
			t.queue = t.queue[1:]
			t.bytes -= int64(len(p.data))
			delete(t.keys, p.key)
		}
		t.pendingGauge.Set(float64(len(t.queue)))
		t.mu.Unlock()
		t.publications.With(result).Inc()
		if result == pubPublished {
			t.publishSeconds.Observe(time.Since(p.at).Seconds())
		}
	}
}

// publish stores p in the cluster unless it holds the key already,
// retrying a second apart; it returns the result to count.
func (t *Tiered) publish(p pending) string {
	var err error
	for attempt := range t.opts.Attempts {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		if !t.shared.Connected() {
			err = errors.New("NATS is disconnected")
			continue
		}
		var has bool
		if has, err = t.shared.Has(p.key); err == nil && has {
			return pubPresent
		}
		if err = t.shared.Put(p.key, p.data); err == nil {
			return pubPublished
		}
	}
	t.log.Warn("cluster compile cache: cannot publish an entry; it stays local", "key", p.key, "attempts", t.opts.Attempts, "error", err)
	return pubFailed
}

// Counts are what a Tiered cache did, as its metrics count it.
type Counts struct {
	// Cluster lookups (local misses) by result.
	Hits, Misses, Corrupt, Errors, Offline int64
	// Publications by result.
	Published, Present, Failed, Dropped int64
	// PublishSeconds is the total time from storing an entry locally to
	// publishing it, over the Published entries.
	PublishSeconds float64
}

// Counts returns what the cache did so far.
func (t *Tiered) Counts() Counts {
	l := func(r string) int64 { return int64(t.lookups.With(r).Value()) }
	p := func(r string) int64 { return int64(t.publications.With(r).Value()) }
	return Counts{
		Hits: l(resultHit), Misses: l(resultMiss), Corrupt: l(resultCorrupt), Errors: l(resultError), Offline: l(resultOffline),
		Published: p(pubPublished), Present: p(pubPresent), Failed: p(pubFailed), Dropped: p(pubDropped),
		PublishSeconds: t.publishSeconds.Sum(),
	}
}

// Pending returns how many entries wait to be published.
func (t *Tiered) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.queue)
	if t.busy && n == 0 {
		n = 1
	}
	return n
}

// Flush waits until every queued entry was published (or given up), or ctx
// ends.
func (t *Tiered) Flush(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		idle := len(t.queue) == 0 && !t.busy
		n := len(t.queue)
		t.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clustercache: %d entries not published yet: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// Close publishes what is queued (until ctx ends) and stops the publisher;
// afterwards Put and Get use the local cache and the store without
// publishing. It is safe to call twice.
func (t *Tiered) Close(ctx context.Context) error {
	err := t.Flush(ctx)
	t.mu.Lock()
	t.closed = true
	if err != nil { // give up what is left
		t.queue, t.bytes = nil, 0
		clear(t.keys)
	}
	t.wake.Broadcast()
	t.mu.Unlock()
	<-t.done
	return err
}

// WriteMetrics writes the cluster cache's metrics in the Prometheus text
// format: xserve_cluster_cache_lookups_total,
// xserve_cluster_cache_publications_total,
// xserve_cluster_cache_publish_seconds and xserve_cluster_cache_pending.
func (t *Tiered) WriteMetrics(w io.Writer) error { return t.reg.Write(w) }

// String describes the cache.
func (t *Tiered) String() string {
	if t.local == nil {
		return "cluster compile cache " + t.shared.String()
	}
	return fmt.Sprintf("local compile cache, then %s", t.shared)
}
