package serving

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkSileroStreams: silero-vad (no config.yaml) serving one stream
// and 64 streams at once, each a sequence of 512-sample chunks with its
// state on the device. Each op is one round: 1280 steps as one stream,
// then as 64 streams of 20 steps, interleaved so that both see the same
// machine; it reports the median steps/s of each and the median of the
// rounds' ratios. Every stream runs 20 chunks before the timer (compiling
// the batch buckets the streams use).
//
//	go test -run '^$' -bench SileroStreams -benchtime 10x ./serving
func BenchmarkSileroStreams(b *testing.B) {
	chunks, _, _ := sileroStreams(b)
	m, _ := start(b, sileroRepo(b), nil)
	n := int(chunks.Shape[1])
	const total = 1280
	round := 0
	run := func(streams, steps int) time.Duration {
		round++
		begin := time.Now()
		var wg sync.WaitGroup
		for s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("bench-%d-%d", round, s)
				for c := range steps {
					req := sileroStep(id, chunk(chunks, s, c%n), c == 0, c == steps-1)
					if _, err := m.Infer(context.Background(), "silero", 0, req); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(begin)
	}
	run(64, 20)
	run(1, 20)
	b.ResetTimer()
	var one, many, ratio []float64
	for range b.N {
		d1 := run(1, total)
		d64 := run(64, total/64)
		one = append(one, total/d1.Seconds())
		many = append(many, total/d64.Seconds())
		ratio = append(ratio, d1.Seconds()/d64.Seconds())
	}
	b.ReportMetric(median(one), "steps/s@1")
	b.ReportMetric(median(many), "steps/s@64")
	b.ReportMetric(median(ratio), "x@64/1")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
