package serving

import (
	"testing"
	"time"
)

// TestSizer walks the batch size learner through a device whose per-row
// cost falls up to batch 4 and rises after: the limit climbs one bucket per
// new measurement, settles on 4, and tries 8 again every sizerExplore
// batches.
func TestSizer(t *testing.T) {
	s := newSizer([]int{1, 2, 4, 8, 16}, 16)
	if s.Limit() != 16 {
		t.Fatalf("limit before any measurement %d, want max_batch_size 16", s.Limit())
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	steps := []struct {
		padded int
		d      time.Duration
		want   int
	}{
		{1, ms(1), 2},     // only 1 measured: try 2
		{2, ms(1.6), 4},   // 0.8 per row, cheaper: try 4
		{4, ms(2.4), 8},   // 0.6 per row: try 8
		{8, ms(8), 4},     // 1.0 per row: back to 4
		{4, ms(2.6), 4},   // 0.65 per row: its average, 0.6125, is still the cheapest
		{1, ms(0.5), 4},   // 1's average drops to 0.875: still dearer than 4
		{16, ms(1.6), 16}, // 0.1 per row at 16: the largest within tolerance of the best
	}
	for i, st := range steps {
		s.observe(st.padded, st.d)
		if got := s.Limit(); got != st.want {
			t.Fatalf("step %d (batch %d in %v): limit %d, want %d", i, st.padded, st.d, got, st.want)
		}
	}
	s.observe(3, ms(1)) // not a bucket: ignored
	s.observe(2, 0)     // no time: ignored

	// 4 the cheapest and 8 dearer: 8 is tried again every sizerExplore batches.
	s = newSizer([]int{1, 2, 4, 8}, 8)
	s.observe(4, ms(4))
	s.observe(8, ms(16))
	tried := 0
	for range 2 * sizerExplore {
		s.observe(4, ms(4))
		if s.Limit() == 8 {
			tried++
		}
	}
	if tried != 2 {
		t.Errorf("8 tried again %d times in %d batches, want 2", tried, 2*sizerExplore)
	}
}

// TestSizerWantsCore: every batch formed in the queue has its core time
// measured; an inline one (a lone request on an idle queue) while its
// bucket has no measurement, then one in sizerInlineSample.
func TestSizerWantsCore(t *testing.T) {
	s := newSizer([]int{1, 2, 4}, 4)
	for range 3 {
		if !s.wantsCore(1, true) || !s.wantsCore(2, false) {
			t.Fatal("a bucket without a measurement is not measured")
		}
	}
	if s.wantsCore(3, true) {
		t.Error("an inline batch of no bucket is measured")
	}
	s.observe(1, time.Millisecond)
	timed := 0
	for range 4 * sizerInlineSample {
		if s.wantsCore(1, true) {
			timed++
		}
		if !s.wantsCore(1, false) {
			t.Fatal("a batch formed in the queue is not measured")
		}
	}
	if timed != 4 {
		t.Errorf("%d of %d inline batches of a measured bucket measured, want 4", timed, 4*sizerInlineSample)
	}
}

// TestSizerRows: a batch is cut to a smaller bucket only when that bucket,
// filled exactly, runs sizerTrimGain more rows per second than the whole
// batch padded to its bucket, and only between measured buckets. Table 3's
// cnn costs (ms per padded row) at batch 1, 2, 4, 8, 16, 32.
func TestSizerRows(t *testing.T) {
	measured := newSizer([]int{1, 2, 4, 8, 16, 32}, 32)
	for i, perRow := range []float64{0.948, 0.588, 0.449, 0.362, 0.344, 0.331} {
		b := measured.buckets[i]
		measured.observe(b, time.Duration(perRow*float64(b)*float64(time.Millisecond)))
	}
	partly := newSizer([]int{1, 2, 4, 8, 16, 32}, 32)
	partly.observe(8, 3*time.Millisecond) // 16 not measured yet
	for _, c := range []struct {
		name      string
		s         *sizer
		available int
		want      int
	}{
		{"a bucket: all", measured, 8, 8},
		{"3 rows: 3 in 4 beats 2 in 2 by less than the gain", measured, 3, 3},
		{"9 rows: 8 in 8 rather than 9 in 16", measured, 9, 8},
		{"15 rows: 15 in 16", measured, 15, 15},
		{"17 rows: 16 in 16 rather than 17 in 32", measured, 17, 16},
		{"the larger bucket not measured: all", partly, 9, 9},
		{"beyond the buckets: all", measured, 40, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Rows(c.available); got != c.want {
				t.Errorf("Rows(%d) = %d, want %d", c.available, got, c.want)
			}
		})
	}
}

// TestSizerOverlapDelay: a partial batch waits two executions of the slowest
// measured bucket within the limit beside an executing one, and at least
// max_queue_delay.
func TestSizerOverlapDelay(t *testing.T) {
	s := newSizer([]int{1, 2, 4}, 4)
	if got := s.OverlapDelay(2 * time.Millisecond); got != 2*time.Millisecond {
		t.Errorf("before any measurement: %v, want max_queue_delay 2ms", got)
	}
	s.observe(1, time.Millisecond)
	s.observe(4, 3*time.Millisecond) // limit stays 4: 0.75ms per row, the cheapest
	if got := s.OverlapDelay(2 * time.Millisecond); got != 6*time.Millisecond {
		t.Errorf("batch 4 in 3ms: %v, want two executions, 6ms", got)
	}
	if got := s.OverlapDelay(10 * time.Millisecond); got != 10*time.Millisecond {
		t.Errorf("max_queue_delay 10ms: %v, want 10ms", got)
	}
}
