package serving

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkSileroStreams: silero-vad (no config.yaml) serving 1 and 64
// streams at once, each a sequence of 512-sample chunks with its state on
// the device; an op is one chunk of every stream, steps/s the throughput.
// Before the timer every stream runs 20 chunks (compiling the batch
// buckets the streams use).
//
//	go test -run '^$' -bench SileroStreams -benchtime 100x ./serving
func BenchmarkSileroStreams(b *testing.B) {
	chunks, _, _ := sileroStreams(b)
	m, _ := start(b, sileroRepo(b), nil)
	n := int(chunks.Shape[1])
	for _, streams := range []int{1, 64} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			run := func(steps int, first bool) {
				var wg sync.WaitGroup
				for s := range streams {
					wg.Add(1)
					go func() {
						defer wg.Done()
						id := fmt.Sprintf("bench-%d-%d", streams, s)
						for c := range steps {
							req := sileroStep(id, chunk(chunks, s, c%n), first && c == 0, false)
							if _, err := m.Infer(context.Background(), "silero", 0, req); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			run(20, true)
			b.ResetTimer()
			start := time.Now()
			run(b.N, false)
			b.ReportMetric(float64(streams*b.N)/time.Since(start).Seconds(), "steps/s")
		})
	}
}
