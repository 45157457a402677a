package serving

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Batch size learning. How much a larger batch saves per row depends on the
// model and the device: on XLA CPU a small model's per-row cost falls by half
// or more from batch 1 to 32, while a model whose rows are large already
// (a 112x112 CNN, 128-token sequences) costs about as much per row at batch
// 32 as at batch 8 and more at 64 (its activations no longer fit the
// caches), so filling the largest bucket would lower throughput
// (docs/BENCHMARKS.md, "Dynamic batching", table 3). The sizer measures each
// batch bucket's core time per padded row as batches run (the CPU time of
// the threads that executed it, runTimes.cost: wall time would count the
// time an execution waited for a core that other work held, which depends
// on the load of the moment, not on the bucket), and limits a
// queue's batches (batching.Options.BatchLimit) to the largest bucket whose
// cost is within sizerTolerance of the cheapest one measured, one bucket
// above it being tried whenever it has no measurement yet and every
// sizerExplore batches after, so that the limit follows the load and the
// device.

const (
	// sizerTolerance is how much more per row than the cheapest bucket a
	// larger bucket may cost and still be used.
	sizerTolerance = 0.10
	// sizerExplore is how often (in batches of a queue) the bucket above
	// the limit is tried again although it was measured more expensive.
	sizerExplore = 50
	// sizerWeight is the weight of a new measurement in a bucket's moving
	// average.
	sizerWeight = 0.25
	// sizerTrimGain is how much more rows per second a batch cut down to a
	// smaller bucket must run than the whole batch padded to its bucket for
	// Rows to cut it.
	sizerTrimGain = 0.05
)

// sizerInlineSample is how often (in inline batches of a queue: lone
// requests on an idle queue, batching.Batch.Inline) the core time of an
// inline batch whose bucket has a measurement is read again. A thread CPU
// clock read is a system call (two per execution, about 3 µs on a loaded
// VM); a lone request would pay them where batching off does not, and its
// bucket's cost, always batch 1 at concurrency 1, changes little.
const sizerInlineSample = 16

// sizer holds one queue's measurements and its current limit.
type sizer struct {
	buckets []int // the batch buckets, ascending

	limit atomic.Int64 // the current limit, in rows; read by the batcher

	mu      sync.Mutex // guards the fields below
	cost    []float64  // per bucket: moving average of core seconds per padded row; 0 = not measured
	batches int        // batches observed
	inline  int        // inline batches seen by wantsCore
}

// newSizer returns a sizer for batch buckets buckets; it allows up to
// maxBatch rows until it has measured something.
func newSizer(buckets []int, maxBatch int) *sizer {
	s := &sizer{buckets: buckets, cost: make([]float64, len(buckets))}
	s.limit.Store(int64(maxBatch))
	return s
}

// wantsCore reports whether the core time of a batch padded to padded rows
// should be measured and learned from: always for a batch that formed in
// the queue, and for an inline one (a lone request run at once) while its
// bucket has no measurement, then one in sizerInlineSample.
func (s *sizer) wantsCore(padded int, inline bool) bool {
	if !inline {
		return true
	}
	i := slices.Index(s.buckets, padded)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inline++
	return i >= 0 && (s.cost[i] == 0 || s.inline%sizerInlineSample == 0)
}

// Limit returns the most rows the queue's next batch may hold.
func (s *sizer) Limit() int { return int(s.limit.Load()) }

// observe records that a batch padded to padded rows cost d of core time
// and updates the limit.
func (s *sizer) observe(padded int, d time.Duration) {
	i := -1
	for k, b := range s.buckets {
		if b == padded {
			i = k
			break
		}
	}
	if i < 0 || d <= 0 {
		return
	}
	perRow := d.Seconds() / float64(padded)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cost[i] == 0 {
		s.cost[i] = perRow
	} else {
		s.cost[i] += sizerWeight * (perRow - s.cost[i])
	}
	s.batches++
	s.limit.Store(int64(s.buckets[s.chooseLocked()]))
}

// chooseLocked returns the index of the bucket to limit batches to: the
// largest measured one within sizerTolerance of the cheapest, or the one
// above it when that has no measurement or it is time to try it again.
func (s *sizer) chooseLocked() int {
	best := 0.0
	for _, c := range s.cost {
		if c > 0 && (best == 0 || c < best) {
			best = c
		}
	}
	pick := 0
	for k, c := range s.cost {
		if c > 0 && c <= best*(1+sizerTolerance) {
			pick = k
		}
	}
	if next := pick + 1; next < len(s.buckets) && (s.cost[next] == 0 || s.batches%sizerExplore == 0) {
		pick = next
	}
	return pick
}

// Rows returns how many of available queued rows the next batch should take
// (batching.Options.BatchRows): all of them, unless a smaller bucket, filled
// exactly, runs more than sizerTrimGain more rows per second than the
// bucket that available rows would be padded to (e.g. 9 rows: 8 in bucket
// 8 rather than 9 in bucket 16). The rows left behind join the next batch.
// Buckets without a measurement are not compared, so nothing is cut until
// the buckets involved have run.
func (s *sizer) Rows(available int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	whole := -1
	for k, b := range s.buckets {
		if b >= available {
			whole = k
			break
		}
	}
	if whole < 0 || s.buckets[whole] == available || s.cost[whole] == 0 {
		return available
	}
	rate := func(rows, k int) float64 { return float64(rows) / (s.cost[k] * float64(s.buckets[k])) }
	best, bestRate := available, rate(available, whole)*(1+sizerTrimGain)
	for k := whole - 1; k >= 0; k-- {
		if s.cost[k] > 0 && rate(s.buckets[k], k) > bestRate {
			best, bestRate = s.buckets[k], rate(s.buckets[k], k)
		}
	}
	return best
}

// sizerOverlapRuns is how many executions of the slowest bucket within the
// limit a partial batch waits beside an executing one (OverlapDelay).
const sizerOverlapRuns = 2

// OverlapDelay returns how long a partial batch waits beside an executing
// one before it starts on the second executor (batching.Options
// .OverlapDelay): sizerOverlapRuns measured executions of the slowest bucket
// up to the limit, and at least min (max_queue_delay). Normally the
// executing batch ends first and the waiting requests leave together as the
// next batch; only an execution that overruns (a descheduled thread) lets a
// second batch start beside it. Before any measurement it is min.
func (s *sizer) OverlapDelay(min time.Duration) time.Duration {
	limit := s.Limit()
	s.mu.Lock()
	defer s.mu.Unlock()
	longest := 0.0
	for k, b := range s.buckets {
		if b <= limit && s.cost[k] > 0 {
			longest = max(longest, s.cost[k]*float64(b))
		}
	}
	return max(min, time.Duration(sizerOverlapRuns*longest*float64(time.Second)))
}
