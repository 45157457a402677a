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
// then as 64 streams of 20 steps with the states gathered and scattered
// in the model's program (fused), then the same with the states joined
// and split by programs of their own (unfused), interleaved so that all
// see the same machine; it reports the median steps/s of each, the
// medians of the rounds' ratios and the device programs per execution.
// Every stream runs 20 chunks before the timer (compiling the batch
// buckets the streams use).
//
//	go test -run '^$' -bench SileroStreams -benchtime 10x ./serving
func BenchmarkSileroStreams(b *testing.B) {
	chunks, _, _ := sileroStreams(b)
	m, _ := start(b, sileroRepo(b), nil)
	v := versionOf(m, "silero", 1)
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
	fused := func(on bool) {
		v.seqs.fused.mu.Lock()
		v.seqs.fused.off = !on
		v.seqs.fused.mu.Unlock()
	}
	// programs runs 64 streams and returns the device programs per execution.
	programs := func(steps int) (time.Duration, float64) {
		st0, _ := m.Statistics("silero", 1)
		p0 := v.seqs.programs.Load()
		d := run(64, steps)
		st1, _ := m.Statistics("silero", 1)
		return d, float64(v.seqs.programs.Load()-p0) / float64(st1[0].ExecutionCount-st0[0].ExecutionCount)
	}
	for _, on := range []bool{false, true} {
		fused(on)
		run(64, 20)
	}
	run(1, 20)
	b.ResetTimer()
	var one, many, unfused, ratio, gain, progFused, progUnfused []float64
	for range b.N {
		d1 := run(1, total)
		d64, pf := programs(total / 64)
		fused(false)
		dUn, pu := programs(total / 64)
		fused(true)
		one = append(one, total/d1.Seconds())
		many = append(many, total/d64.Seconds())
		unfused = append(unfused, total/dUn.Seconds())
		ratio = append(ratio, d1.Seconds()/d64.Seconds())
		gain = append(gain, dUn.Seconds()/d64.Seconds())
		progFused, progUnfused = append(progFused, pf), append(progUnfused, pu)
	}
	b.ReportMetric(median(one), "steps/s@1")
	b.ReportMetric(median(many), "steps/s@64")
	b.ReportMetric(median(unfused), "steps/s@64-unfused")
	b.ReportMetric(median(ratio), "x@64/1")
	b.ReportMetric(median(gain), "x-fused/unfused")
	b.ReportMetric(median(progFused), "programs/exec")
	b.ReportMetric(median(progUnfused), "programs/exec-unfused")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
