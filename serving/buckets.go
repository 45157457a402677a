package serving

import (
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/xserve/xserve/engine"
)

// bucket is one set of executable sizes (one per served symbol) and the
// executable compiled for it. Buckets whose sizes are all bucket sizes stay
// until the version is freed; those with an exactly served size live in a
// bounded least-recently-used cache.
type bucket struct {
	// name reads "batch=4,sequence=128" (symbols sorted), or "static".
	name string
	// dims gives each served symbol its size; modelDims each of the model's
	// symbols (what the graph is lowered with).
	dims      map[string]int64
	modelDims map[string]int64
	exact     bool // in the exact-size cache

	// Guarded by version.bmu.
	refs    int   // runs holding the bucket
	lastUse int64 // version.useTick at the last acquire
	evicted bool  // dropped from the cache; closed when refs reaches 0

	// strategy chooses how each execution of this bucket runs (whole, on
	// fewer threads, or split across idle cores) and learns from their
	// times (rowsplit.go).
	strategy engine.Strategy

	// exe and pending hold, per placement of the version (version.models),
	// its executable (nil until compiled) and the compile in flight (nil
	// when none).
	mu      sync.Mutex // guards exe, pending
	exe     []*engine.Executable
	pending []*compileCall
}

// closeExecutables closes the bucket's executables on every placement.
func (b *bucket) closeExecutables(log *slog.Logger) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, exe := range b.exe {
		if exe == nil {
			continue
		}
		if err := exe.Close(); err != nil {
			log.Warn("close executable", "bucket", b.name, "placement", p, "error", err)
		}
		b.exe[p] = nil
	}
}

// compileCall is one compile of a bucket that concurrent requests share.
type compileCall struct {
	done chan struct{} // closed when exe or err is set
	exe  *engine.Executable
	err  error
}

// acquireBucket returns the bucket of exec sizes, created on first use,
// held until releaseBucket. Creating an exact-size bucket beyond the
// version's exact_executables evicts the least recently used one (its
// executable is closed once no run holds it).
func (v *version) acquireBucket(exec map[string]int64) *bucket {
	name := v.plan.keyName(exec)
	v.bmu.Lock()
	defer v.bmu.Unlock()
	v.useTick++
	b := v.buckets[name]
	if b != nil {
		b.refs++
		b.lastUse = v.useTick
		return b
	}
	if v.buckets == nil {
		v.buckets = map[string]*bucket{} // a freed version: nothing keeps this bucket
	}
	n := max(1, len(v.models))
	b = &bucket{name: name, dims: maps.Clone(exec), modelDims: v.plan.modelDims(exec), exact: !v.plan.isBucket(exec), refs: 1, lastUse: v.useTick,
		strategy: v.m.engine.NewStrategy(v.m.opts.SplitBatches), exe: make([]*engine.Executable, n), pending: make([]*compileCall, n)}
	v.buckets[name] = b
	if b.exact {
		v.exactCount++
		v.evictLocked() // b is the most recently used: never the one evicted
	}
	return b
}

// evictLocked drops the least recently used exact-size buckets beyond the
// limit.
func (v *version) evictLocked() {
	limit := max(1, v.cfg.ExactExecutables) // the newest bucket always stays
	for v.exactCount > limit {
		var lru *bucket
		for _, b := range v.buckets {
			if b.exact && (lru == nil || b.lastUse < lru.lastUse) {
				lru = b
			}
		}
		delete(v.buckets, lru.name)
		v.exactCount--
		lru.evicted = true
		v.m.metrics.exactEvicted.With(v.name, v.label).Inc()
		if lru.refs == 0 {
			v.closeBucketAsync(lru)
		}
	}
	v.m.metrics.exactExes.With(v.name, v.label).Set(float64(v.exactCount))
}

// releaseBucket ends a run's hold on b.
func (v *version) releaseBucket(b *bucket) {
	v.bmu.Lock()
	b.refs--
	closeNow := b.evicted && b.refs == 0
	v.bmu.Unlock()
	if closeNow {
		v.closeBucketAsync(b)
	}
}

// closeBucketAsync closes an evicted bucket's executables once its
// compiles, if any, finished.
func (v *version) closeBucketAsync(b *bucket) {
	v.compiles.Add(1)
	go func() {
		defer v.compiles.Done()
		b.mu.Lock()
		pending := slices.Clone(b.pending)
		b.mu.Unlock()
		for _, c := range pending {
			if c != nil {
				<-c.done
			}
		}
		b.closeExecutables(v.log())
	}()
}

// isBucket reports whether every size of exec is one of its symbol's
// buckets.
func (p *BucketPlan) isBucket(exec map[string]int64) bool {
	for _, s := range p.Symbols {
		found := false
		for _, n := range s.Buckets {
			found = found || n == exec[s.Name]
		}
		if !found {
			return false
		}
	}
	return true
}
