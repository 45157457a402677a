package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// smallInputs is one random float32 [1, 3, 4, 4] input named "image".
func smallInputs() *Inputs {
	return &Inputs{Random: []RandomSpec{{Name: "image", DType: tensor.Float32, Shape: []int64{1, 3, 4, 4}}}, Seed: 7}
}

func run(t *testing.T, opts Options) *Summary {
	t.Helper()
	if opts.Inputs == nil {
		opts.Inputs = smallInputs()
	}
	s, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("summary:\n%s", s)
	return s
}

func checkLatencyOrder(t *testing.T, l LatencyStats) {
	t.Helper()
	if !(0 < l.Min && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
		t.Errorf("latency not ordered 0 < min <= p50 <= p90 <= p99 <= max: %+v", l)
	}
	if l.Mean < l.Min || l.Mean > l.Max {
		t.Errorf("mean %v outside [min %v, max %v]", l.Mean, l.Min, l.Max)
	}
}

func TestClosedLoopCounts(t *testing.T) {
	for _, proto := range []Protocol{ProtocolV1JSON, ProtocolV2JSON, ProtocolV2Binary} {
		t.Run(string(proto), func(t *testing.T) {
			f := newFakeServer(t, 2*time.Millisecond)
			const conc, n = 4, 200
			s := run(t, Options{Target: newTarget(t, f, HTTPOptions{Protocol: proto, Conns: conc, Validate: true}), Concurrency: conc, MaxRequests: n})
			if s.Requests != n || s.Successes != n || s.Failures != 0 {
				t.Errorf("requests %d, successes %d, failures %d (%v); want %d, %d, 0", s.Requests, s.Successes, s.Failures, s.ErrorSamples, n, n)
			}
			if got := f.count.Load(); got != n {
				t.Errorf("server saw %d requests, want %d", got, n)
			}
			if errs := f.protocolErrors(); len(errs) > 0 {
				t.Errorf("server rejected requests: %v", errs)
			}
			// Keep-alive reuse: far fewer connections than requests. A
			// loaded machine may see a connection replaced now and then
			// (a read racing the idle close), so allow twice the workers.
			if got := f.newConns.Load(); got > 2*conc {
				t.Errorf("server accepted %d connections for concurrency %d and %d requests; want keep-alive reuse", got, conc, n)
			}
			checkLatencyOrder(t, s.Latency)
			if s.Latency.Min < f.delay {
				t.Errorf("min latency %v below the server's delay %v", s.Latency.Min, f.delay)
			}
			if s.Mode != ModeClosed || s.Concurrency != conc || s.Throughput <= 0 || s.Elapsed <= 0 {
				t.Errorf("mode %q, concurrency %d, throughput %v, elapsed %v", s.Mode, s.Concurrency, s.Throughput, s.Elapsed)
			}
			if s.BytesSent == 0 || s.BytesReceived == 0 {
				t.Errorf("bytes sent %d, received %d; want both > 0", s.BytesSent, s.BytesReceived)
			}
		})
	}
}

func TestFailuresCountedByStatus(t *testing.T) {
	f := newFakeServer(t, 0)
	f.failEvery = 4
	const n = 100
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{}), Concurrency: 3, MaxRequests: n})
	if s.Requests != n || s.Successes+s.Failures != n {
		t.Errorf("requests %d = successes %d + failures %d, want %d", s.Requests, s.Successes, s.Failures, n)
	}
	if got, want := s.FailuresByKind["http 503"], int(f.failed.Load()); got != want || got != n/4 {
		t.Errorf("failures_by_kind[http 503] = %d, server sent %d 503s (want %d)", got, want, n/4)
	}
	if len(s.FailuresByKind) != 1 {
		t.Errorf("failure kinds %v, want only http 503", s.FailuresByKind)
	}
	if msg := s.ErrorSamples["http 503"]; !strings.Contains(msg, "overloaded") {
		t.Errorf("error sample %q does not carry the server's message", msg)
	}
	if !strings.Contains(s.String(), "http 503: 25") {
		t.Errorf("String() does not list the failures:\n%s", s)
	}
}

func TestInvalidResponseCounted(t *testing.T) {
	f := newFakeServer(t, 0)
	f.badShape = true
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{Validate: true}), Concurrency: 2, MaxRequests: 10})
	if s.FailuresByKind["invalid response"] != 10 || s.Successes != 0 {
		t.Errorf("failures %v, successes %d; want 10 invalid responses", s.FailuresByKind, s.Successes)
	}
}

func TestExpectOutputs(t *testing.T) {
	f := newFakeServer(t, 0)
	for _, tc := range []struct {
		expect map[string][]int64
		ok     bool
	}{
		{map[string][]int64{"probs": {1, 10}}, true},
		{map[string][]int64{"probs": {-1, 10}}, true},
		{map[string][]int64{"probs": {1, 1000}}, false},
		{map[string][]int64{"logits": {1, 10}}, false},
	} {
		s := run(t, Options{Target: newTarget(t, f, HTTPOptions{ExpectOutputs: tc.expect}), Concurrency: 1, MaxRequests: 3})
		if ok := s.Successes == 3; ok != tc.ok {
			t.Errorf("expect %v: %d successes, failures %v; want ok=%v", tc.expect, s.Successes, s.ErrorSamples, tc.ok)
		}
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tg, err := NewHTTPTarget(context.Background(), HTTPOptions{URL: "http://" + addr, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	s := run(t, Options{Target: tg, Concurrency: 2, MaxRequests: 6})
	if s.FailuresByKind["connection refused"] != 6 {
		t.Errorf("failures %v, want 6 connection refused", s.FailuresByKind)
	}
	if s.Latency != (LatencyStats{}) {
		t.Errorf("latency %+v without a success, want zero", s.Latency)
	}
}

func TestWarmupNotCounted(t *testing.T) {
	f := newFakeServer(t, time.Millisecond)
	const n = 30
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{}), Concurrency: 2, MaxRequests: n, Warmup: 100 * time.Millisecond})
	if s.Requests != n {
		t.Errorf("requests %d, want %d", s.Requests, n)
	}
	if s.WarmupRequests == 0 {
		t.Errorf("no warmup requests in a 100ms warmup")
	}
	if got, want := f.count.Load(), int64(n+s.WarmupRequests); got != want {
		t.Errorf("server saw %d requests, want %d measured + %d warmup", got, n, s.WarmupRequests)
	}
}

func TestDurationBound(t *testing.T) {
	f := newFakeServer(t, time.Millisecond)
	start := time.Now()
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{}), Concurrency: 2, Duration: 300 * time.Millisecond})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a 300ms run took %v", took)
	}
	if s.Requests == 0 || s.Requests != s.Successes {
		t.Errorf("requests %d, successes %d", s.Requests, s.Successes)
	}
	if s.Elapsed < 300*time.Millisecond {
		t.Errorf("elapsed %v shorter than the duration", s.Elapsed)
	}
}

func TestOpenLoopRate(t *testing.T) {
	f := newFakeServer(t, 5*time.Millisecond)
	const rate = 200.0
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{}), Rate: rate, Duration: time.Second})
	if s.Mode != ModeOpen || s.Scheduled != 200 {
		t.Errorf("mode %q, scheduled %d; want open, 200", s.Mode, s.Scheduled)
	}
	if r := float64(s.Requests) / 200; r < 0.6 || r > 1.0 {
		t.Errorf("sent %d of 200 scheduled requests (ratio %.2f)", s.Requests, r)
	}
	if r := s.Throughput / rate; r < 0.5 || r > 1.5 {
		t.Errorf("throughput %.1f req/s for a rate of %g (ratio %.2f)", s.Throughput, rate, r)
	}
	if s.Dropped != s.Scheduled-s.Requests {
		t.Errorf("dropped %d, want scheduled %d - sent %d", s.Dropped, s.Scheduled, s.Requests)
	}
	checkLatencyOrder(t, s.Latency)
}

// TestOpenLoopNoCoordinatedOmission loads a server that handles one request
// per 40ms at 100 req/s through a single connection: the schedule falls
// behind, sends are late or dropped, and the latency, measured from the
// schedule, includes the time the requests waited.
func TestOpenLoopNoCoordinatedOmission(t *testing.T) {
	const delay = 40 * time.Millisecond
	f := newFakeServer(t, delay)
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{}), Rate: 100, MaxInFlight: 1, Duration: 500 * time.Millisecond})
	if s.Scheduled != 50 {
		t.Errorf("scheduled %d, want 50", s.Scheduled)
	}
	if s.Dropped < s.Scheduled/4 || s.Dropped != s.Scheduled-s.Requests {
		t.Errorf("dropped %d of %d scheduled (%d sent); want many", s.Dropped, s.Scheduled, s.Requests)
	}
	if s.Late == 0 || s.MaxSendDelay < delay {
		t.Errorf("late %d, max send delay %v; want late sends", s.Late, s.MaxSendDelay)
	}
	if s.Latency.Max < 3*delay {
		t.Errorf("max latency %v with a %v server that is 4x too slow; queueing time not counted", s.Latency.Max, delay)
	}
	checkLatencyOrder(t, s.Latency)
}

func TestOpenLoopMaxRequests(t *testing.T) {
	f := newFakeServer(t, 0)
	s := run(t, Options{Target: newTarget(t, f, HTTPOptions{}), Rate: 500, MaxRequests: 40, Warmup: 20 * time.Millisecond})
	if s.Requests != 40 || s.Scheduled != 40 || s.Dropped != 0 {
		t.Errorf("requests %d, scheduled %d, dropped %d; want 40, 40, 0", s.Requests, s.Scheduled, s.Dropped)
	}
	if s.WarmupRequests != 10 {
		t.Errorf("warmup requests %d, want 10 (20ms at 500 req/s)", s.WarmupRequests)
	}
	if got := f.count.Load(); got != 50 {
		t.Errorf("server saw %d requests, want 50", got)
	}
}

func TestCancel(t *testing.T) {
	f := newFakeServer(t, 10*time.Millisecond)
	for _, opts := range []Options{
		{Concurrency: 2, Duration: time.Hour},
		{Rate: 10, Duration: time.Hour},
	} {
		opts.Target, opts.Inputs = newTarget(t, f, HTTPOptions{}), smallInputs()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		s, err := Run(ctx, opts)
		if !errors.Is(err, context.DeadlineExceeded) || s == nil || !s.Interrupted {
			t.Fatalf("Run: summary %v, error %v; want an interrupted summary and the context's error", s, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("cancelled run took %v", took)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	f := newFakeServer(t, 0)
	tg := newTarget(t, f, HTTPOptions{})
	in := smallInputs()
	for name, o := range map[string]Options{
		"no target":      {Inputs: in, Concurrency: 1, MaxRequests: 1},
		"no inputs":      {Target: tg, Concurrency: 1, MaxRequests: 1},
		"no pacing":      {Target: tg, Inputs: in, MaxRequests: 1},
		"both pacings":   {Target: tg, Inputs: in, Concurrency: 1, Rate: 10, MaxRequests: 1},
		"unbounded":      {Target: tg, Inputs: in, Concurrency: 1},
		"negative":       {Target: tg, Inputs: in, Concurrency: -1, MaxRequests: 1},
		"rate too high":  {Target: tg, Inputs: in, Rate: 1e9, MaxRequests: 1},
		"rate too low":   {Target: tg, Inputs: in, Rate: 1e-9, MaxRequests: 1},
		"negative dur":   {Target: tg, Inputs: in, Concurrency: 1, Duration: -time.Second},
		"negative count": {Target: tg, Inputs: in, Concurrency: 1, Duration: time.Second, MaxRequests: -1},
	} {
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrOptions) {
			t.Errorf("%s: Run error %v, want ErrOptions", name, err)
		}
	}
	if got := f.count.Load(); got != 0 {
		t.Errorf("invalid options sent %d requests", got)
	}
}

func TestSummaryJSON(t *testing.T) {
	f := newFakeServer(t, time.Millisecond)
	f.failEvery = 5
	for _, opts := range []Options{
		{Concurrency: 2, MaxRequests: 20},
		{Rate: 200, MaxRequests: 20},
	} {
		opts.Target = newTarget(t, f, HTTPOptions{})
		s := run(t, opts)
		var m map[string]any
		if err := json.Unmarshal(s.JSON(), &m); err != nil {
			t.Fatalf("JSON(): %v\n%s", err, s.JSON())
		}
		for _, k := range []string{"target", "mode", "elapsed_s", "requests", "successes", "failures", "failures_by_kind", "throughput_rps", "success_throughput_rps", "latency_ms", "bytes_sent", "bytes_received", "warmup_requests"} {
			if _, ok := m[k]; !ok {
				t.Errorf("JSON has no %q:\n%s", k, s.JSON())
			}
		}
		lat, _ := m["latency_ms"].(map[string]any)
		for _, k := range []string{"min", "mean", "p50", "p90", "p99", "max"} {
			if v, ok := lat[k].(float64); !ok || v <= 0 {
				t.Errorf("latency_ms.%s = %v, want a positive number", k, lat[k])
			}
		}
		if m["requests"] != 20.0 || m["failures"] != 4.0 {
			t.Errorf("requests %v, failures %v; want 20, 4", m["requests"], m["failures"])
		}
		if k, _ := m["failures_by_kind"].(map[string]any); k["http 503"] != 4.0 {
			t.Errorf("failures_by_kind %v, want http 503: 4", m["failures_by_kind"])
		}
		open, hasOpen := m["open_loop"].(map[string]any)
		if hasOpen != (s.Mode == ModeOpen) {
			t.Errorf("mode %s: open_loop present = %v", s.Mode, hasOpen)
		}
		for _, k := range []string{"scheduled", "dropped", "late", "max_send_delay_ms"} {
			if _, ok := open[k]; hasOpen && !ok {
				t.Errorf("open_loop has no %q", k)
			}
		}

		var back Summary
		if err := json.Unmarshal(s.JSON(), &back); err != nil {
			t.Fatal(err)
		}
		if back.Requests != s.Requests || back.Mode != s.Mode || back.FailuresByKind["http 503"] != 4 ||
			(back.Latency.P99-s.Latency.P99).Abs() > time.Microsecond || back.Scheduled != s.Scheduled {
			t.Errorf("JSON round trip lost data:\n%+v\n%+v", back, *s)
		}
		if md := MarkdownTable([]*Summary{&back}); !strings.Contains(md, "| 20 | 4 |") {
			t.Errorf("MarkdownTable:\n%s", md)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	got := latencyStats(lat)
	want := LatencyStats{Min: time.Millisecond, Mean: 50500 * time.Microsecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Errorf("latencyStats(1..100ms) = %+v, want %+v", got, want)
	}
	if one := latencyStats([]time.Duration{7}); one.P50 != 7 || one.P99 != 7 || one.Min != 7 || one.Max != 7 {
		t.Errorf("latencyStats of one = %+v", one)
	}
}

func TestMarkdownTable(t *testing.T) {
	sums := []*Summary{
		{Mode: ModeClosed, Concurrency: 1, SuccessThroughput: 812.34, Requests: 8123, Latency: LatencyStats{P50: 1200 * time.Microsecond, P90: 1500 * time.Microsecond, P99: 2500 * time.Microsecond}},
		{Mode: ModeClosed, Concurrency: 8, SuccessThroughput: 2000, Requests: 20000, Failures: 2},
	}
	want := "| concurrency | req/s | p50 (ms) | p90 (ms) | p99 (ms) | requests | failed |\n" +
		"|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| 1 | 812.3 | 1.200 | 1.500 | 2.500 | 8123 | 0 |\n" +
		"| 8 | 2000.0 | 0.000 | 0.000 | 0.000 | 20000 | 2 |\n"
	if got := MarkdownTable(sums); got != want {
		t.Errorf("MarkdownTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestCompareTable(t *testing.T) {
	off := &Summary{Mode: ModeClosed, Concurrency: 32, SuccessThroughput: 400, Failures: 1,
		Latency: LatencyStats{P50: 80 * time.Millisecond, P99: 120 * time.Millisecond}}
	on := &Summary{Mode: ModeClosed, Concurrency: 32, SuccessThroughput: 1000,
		Latency: LatencyStats{P50: 32 * time.Millisecond, P99: 41500 * time.Microsecond}}
	none := &Summary{Mode: ModeClosed, Concurrency: 1}
	want := "| run | off req/s | on req/s | on/off | off p50 ms | on p50 ms | off p99 ms | on p99 ms | failed (off/on) |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| cnn c=32 | 400.0 | 1000.0 | 2.50x | 80.00 | 32.00 | 120.00 | 41.50 | 1/0 |\n" +
		"| concurrency 1 | 0.0 | 0.0 | – | 0.00 | 0.00 | 0.00 | 0.00 | 0/0 |\n"
	got := CompareTable([]Comparison{{Label: "cnn c=32", Base: off, Test: on}, {Base: none, Test: none}}, "off", "on")
	if got != want {
		t.Errorf("CompareTable:\n%s\nwant:\n%s", got, want)
	}
}
