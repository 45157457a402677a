package batching

import (
	"slices"
	"time"
)

// Stats is a snapshot of a Batcher's counters, per key and in total.
type Stats struct {
	// Keys holds one entry per key ever submitted.
	Keys map[string]KeyStats
	// Total sums all keys.
	Total KeyStats
}

// KeyStats are the counters of one key (or of all keys). Every Submit call
// made before Shutdown began is counted once in Submitted and, at any time,
// in exactly one of Rejected, Invalid, Expired, Cancelled, Dropped,
// Completed, Failed, Queued and InFlightItems. Counters only grow; Queued,
// QueuedRows, InFlight and InFlightItems are gauges. A batch's requests move
// from InFlightItems to Completed or Failed when RunBatch returns, which may
// be just after their Submit calls returned.
type KeyStats struct {
	Submitted uint64 // Submit calls
	Rejected  uint64 // refused at once: queue full (ErrQueueFull)
	Invalid   uint64 // refused at once: rows or priority out of range (ErrTooLarge, ErrInvalid)
	Expired   uint64 // deadline passed before dispatch (ErrExpired); never executed
	Cancelled uint64 // context cancelled before dispatch; never executed
	Dropped   uint64 // still queued when Shutdown's context expired (ErrClosed); never executed
	Completed uint64 // executed, with a result
	Failed    uint64 // executed, with an error (Runner error, panic or missing result)
	Batches   uint64 // batches dispatched

	Queued        int // requests queued now
	QueuedRows    int // rows queued now
	InFlight      int // batches executing now
	InFlightItems int // requests in executing batches now

	// RealRows observes each batch's real rows, PaddedRows its padded rows;
	// both use Options.Buckets as bounds, so their Counts agree (a batch of n
	// rows falls in the bucket it is padded to) and their Sums differ by the
	// padding.
	RealRows   Histogram
	PaddedRows Histogram
	// QueueDelay observes each dispatched request's time in the queue, in
	// seconds.
	QueueDelay Histogram
	// BatchDuration observes each batch's RunBatch time, in seconds.
	BatchDuration Histogram
}

// Histogram is a fixed-bucket histogram, shaped like Prometheus'.
type Histogram struct {
	// Bounds are the buckets' inclusive upper bounds, ascending; an implicit
	// +Inf bucket follows the last.
	Bounds []float64
	// Counts has len(Bounds)+1 entries, not cumulative: Counts[i] counts the
	// observations v with Bounds[i-1] < v <= Bounds[i]; the last entry counts
	// those above every bound.
	Counts []uint64
	// Count is the number of observations, Sum their sum.
	Count uint64
	Sum   float64
}

// Cumulative returns the counts of observations <= each bound, then the
// total (the +Inf bucket), as Prometheus exposes them.
func (h Histogram) Cumulative() []uint64 {
	out := make([]uint64, len(h.Counts))
	var n uint64
	for i, c := range h.Counts {
		n += c
		out[i] = n
	}
	return out
}

// Mean returns Sum/Count, or 0 without observations.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / float64(h.Count)
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

// observe adds v; the caller guards h.
func (h *Histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.Bounds, v)
	h.observeAt(i, v)
}

// observeAt adds v, known to fall in bucket i.
func (h *Histogram) observeAt(i int, v float64) {
	h.Counts[i]++
	h.Count++
	h.Sum += v
}

// clone returns a deep copy of h.
func (h Histogram) clone() Histogram {
	h.Bounds = slices.Clone(h.Bounds)
	h.Counts = slices.Clone(h.Counts)
	return h
}

// add adds o's observations to h; both have the same bounds.
func (h *Histogram) add(o Histogram) {
	if h.Counts == nil {
		*h = o.clone()
		return
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// add adds o to s.
func (s *KeyStats) add(o KeyStats) {
	s.Submitted += o.Submitted
	s.Rejected += o.Rejected
	s.Invalid += o.Invalid
	s.Expired += o.Expired
	s.Cancelled += o.Cancelled
	s.Dropped += o.Dropped
	s.Completed += o.Completed
	s.Failed += o.Failed
	s.Batches += o.Batches
	s.Queued += o.Queued
	s.QueuedRows += o.QueuedRows
	s.InFlight += o.InFlight
	s.InFlightItems += o.InFlightItems
	s.RealRows.add(o.RealRows)
	s.PaddedRows.add(o.PaddedRows)
	s.QueueDelay.add(o.QueueDelay)
	s.BatchDuration.add(o.BatchDuration)
}

// durationBounds are the bounds, in seconds, of the QueueDelay and
// BatchDuration histograms: 100µs to 10s.
func durationBounds() []float64 {
	return []float64{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// newKeyStats returns empty stats whose histograms have the batcher's bounds.
func newKeyStats(buckets []int) KeyStats {
	rb := make([]float64, len(buckets))
	for i, s := range buckets {
		rb[i] = float64(s)
	}
	return KeyStats{
		RealRows:      newHistogram(rb),
		PaddedRows:    newHistogram(slices.Clone(rb)),
		QueueDelay:    newHistogram(durationBounds()),
		BatchDuration: newHistogram(durationBounds()),
	}
}

// clone returns a deep copy of s.
func (s KeyStats) clone() KeyStats {
	s.RealRows = s.RealRows.clone()
	s.PaddedRows = s.PaddedRows.clone()
	s.QueueDelay = s.QueueDelay.clone()
	s.BatchDuration = s.BatchDuration.clone()
	return s
}

// seconds converts d for the duration histograms.
func seconds(d time.Duration) float64 { return d.Seconds() }
