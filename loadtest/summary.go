package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Mode is how a run paces its requests.
type Mode string

// Modes.
const (
	ModeClosed Mode = "closed" // Concurrency workers back to back
	ModeOpen   Mode = "open"   // Rate requests per second on a schedule
)

// LatencyStats are exact latency statistics over the successful measured
// requests. Percentiles use the nearest-rank method.
type LatencyStats struct {
	Min, Mean, P50, P90, P99, Max time.Duration
}

// Summary is what a run measured. Only the measured part counts: warmup
// requests appear in WarmupRequests alone.
type Summary struct {
	// Target describes the target (its String method, or its type).
	Target string
	// Mode, and the Concurrency (closed) or Rate and MaxInFlight (open) of
	// the run.
	Mode        Mode
	Concurrency int
	Rate        float64
	MaxInFlight int
	// Warmup is the warmup duration; WarmupRequests the requests it sent.
	Warmup         time.Duration
	WarmupRequests int
	// Elapsed runs from the start of the measured part to the completion of
	// its last request.
	Elapsed time.Duration

	// Requests completed (successes + failures).
	Requests, Successes, Failures int
	// FailuresByKind counts failures by kind (see FailureKind): "http 503",
	// "timeout", "connection refused", "invalid response", ...
	FailuresByKind map[string]int
	// ErrorSamples holds the first error message seen for each kind.
	ErrorSamples map[string]string
	// Throughput is Requests per second of Elapsed; SuccessThroughput counts
	// successes only.
	Throughput, SuccessThroughput float64
	// Latency of the successful requests, from the scheduled send time in
	// open loop and from the actual send time in closed loop.
	Latency LatencyStats

	// Open loop only: Scheduled is the number of sends the schedule called
	// for in the measured part (bounded by MaxRequests); Dropped those that
	// never went out before the run ended; Late those that started more than
	// the late threshold behind schedule; MaxSendDelay the largest delay.
	Scheduled, Dropped, Late int
	MaxSendDelay             time.Duration

	// BytesSent and BytesReceived count measured request and response body
	// bytes on the wire.
	BytesSent, BytesReceived int64
	// Interrupted is set when the run's context was cancelled before the end.
	Interrupted bool
}

// FailureKind names the kind of a failed request's error, for counting:
// the error's own Kind() when it has one ("http 503"), else "invalid
// response", "timeout", "canceled", "connection refused", "connection
// reset", "broken pipe", "connection closed" or "error".
func FailureKind(err error) string {
	var k interface{ Kind() string }
	if errors.As(err, &k) {
		return k.Kind()
	}
	var ne net.Error
	switch {
	case errors.Is(err, ErrInvalidResponse):
		return "invalid response"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return "error"
}

// summaryJSON is the JSON form of a Summary: durations in seconds or
// milliseconds as the field names say.
type summaryJSON struct {
	Target            string            `json:"target"`
	Mode              Mode              `json:"mode"`
	Concurrency       int               `json:"concurrency,omitempty"`
	Rate              float64           `json:"rate,omitempty"`
	MaxInFlight       int               `json:"max_in_flight,omitempty"`
	WarmupS           float64           `json:"warmup_s"`
	WarmupRequests    int               `json:"warmup_requests"`
	ElapsedS          float64           `json:"elapsed_s"`
	Requests          int               `json:"requests"`
	Successes         int               `json:"successes"`
	Failures          int               `json:"failures"`
	FailuresByKind    map[string]int    `json:"failures_by_kind"`
	ErrorSamples      map[string]string `json:"error_samples,omitempty"`
	Throughput        float64           `json:"throughput_rps"`
	SuccessThroughput float64           `json:"success_throughput_rps"`
	LatencyMs         latencyJSON       `json:"latency_ms"`
	OpenLoop          *openLoopJSON     `json:"open_loop,omitempty"`
	BytesSent         int64             `json:"bytes_sent"`
	BytesReceived     int64             `json:"bytes_received"`
	Interrupted       bool              `json:"interrupted,omitempty"`
}

type latencyJSON struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

type openLoopJSON struct {
	Scheduled      int     `json:"scheduled"`
	Dropped        int     `json:"dropped"`
	Late           int     `json:"late"`
	MaxSendDelayMs float64 `json:"max_send_delay_ms"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 } // µs precision

func fromMs(v float64) time.Duration { return time.Duration(math.Round(v * 1e6)) }

func round3(v float64) float64 { return math.Round(v*1e3) / 1e3 }

// MarshalJSON encodes s in the schema JSON documents.
func (s *Summary) MarshalJSON() ([]byte, error) {
	j := summaryJSON{
		Target: s.Target, Mode: s.Mode, Concurrency: s.Concurrency, Rate: s.Rate, MaxInFlight: s.MaxInFlight,
		WarmupS: s.Warmup.Seconds(), WarmupRequests: s.WarmupRequests, ElapsedS: round3(s.Elapsed.Seconds()),
		Requests: s.Requests, Successes: s.Successes, Failures: s.Failures,
		FailuresByKind: s.FailuresByKind, ErrorSamples: s.ErrorSamples,
		Throughput: round3(s.Throughput), SuccessThroughput: round3(s.SuccessThroughput),
		LatencyMs: latencyJSON{
			Min: ms(s.Latency.Min), Mean: ms(s.Latency.Mean), P50: ms(s.Latency.P50),
			P90: ms(s.Latency.P90), P99: ms(s.Latency.P99), Max: ms(s.Latency.Max),
		},
		BytesSent: s.BytesSent, BytesReceived: s.BytesReceived, Interrupted: s.Interrupted,
	}
	if j.FailuresByKind == nil {
		j.FailuresByKind = map[string]int{}
	}
	if s.Mode == ModeOpen {
		j.OpenLoop = &openLoopJSON{Scheduled: s.Scheduled, Dropped: s.Dropped, Late: s.Late, MaxSendDelayMs: ms(s.MaxSendDelay)}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes (durations to the
// microsecond).
func (s *Summary) UnmarshalJSON(b []byte) error {
	var j summaryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Summary{
		Target: j.Target, Mode: j.Mode, Concurrency: j.Concurrency, Rate: j.Rate, MaxInFlight: j.MaxInFlight,
		Warmup: fromMs(j.WarmupS * 1e3), WarmupRequests: j.WarmupRequests, Elapsed: fromMs(j.ElapsedS * 1e3),
		Requests: j.Requests, Successes: j.Successes, Failures: j.Failures,
		FailuresByKind: j.FailuresByKind, ErrorSamples: j.ErrorSamples,
		Throughput: j.Throughput, SuccessThroughput: j.SuccessThroughput,
		Latency: LatencyStats{
			Min: fromMs(j.LatencyMs.Min), Mean: fromMs(j.LatencyMs.Mean), P50: fromMs(j.LatencyMs.P50),
			P90: fromMs(j.LatencyMs.P90), P99: fromMs(j.LatencyMs.P99), Max: fromMs(j.LatencyMs.Max),
		},
		BytesSent: j.BytesSent, BytesReceived: j.BytesReceived, Interrupted: j.Interrupted,
	}
	if o := j.OpenLoop; o != nil {
		s.Scheduled, s.Dropped, s.Late, s.MaxSendDelay = o.Scheduled, o.Dropped, o.Late, fromMs(o.MaxSendDelayMs)
	}
	return nil
}

// JSON returns the summary as indented JSON, for machines: latencies in
// milliseconds ("latency_ms": {"min", "mean", "p50", "p90", "p99", "max"}),
// "throughput_rps", "requests", "successes", "failures",
// "failures_by_kind", and "open_loop" {"scheduled", "dropped", "late",
// "max_send_delay_ms"} for open-loop runs.
func (s *Summary) JSON() []byte {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil { // only plain types inside; cannot happen
		panic(err)
	}
	return append(b, '\n')
}

// fmtLatency formats d in milliseconds with a precision that suits it.
func fmtLatency(d time.Duration) string {
	v := float64(d) / 1e6
	switch {
	case v < 1:
		return fmt.Sprintf("%.3fms", v)
	case v < 100:
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.1fms", v)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// load describes the pacing: "concurrency 8" or "500 req/s".
func (s *Summary) load() string {
	if s.Mode == ModeOpen {
		return fmt.Sprintf("%g req/s", s.Rate)
	}
	return fmt.Sprintf("concurrency %d", s.Concurrency)
}

// String returns the summary as a table for people.
func (s *Summary) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("target", "%s", s.Target)
	if s.Mode == ModeOpen {
		row("mode", "open loop, %s (at most %d in flight)", s.load(), s.MaxInFlight)
	} else {
		row("mode", "closed loop, %s", s.load())
	}
	row("measured", "%s (warmup %s: %d requests not counted)", s.Elapsed.Round(time.Millisecond), s.Warmup, s.WarmupRequests)
	row("requests", "%d: %d ok, %d failed", s.Requests, s.Successes, s.Failures)
	row("throughput", "%.1f req/s (%.1f ok/s)", s.Throughput, s.SuccessThroughput)
	l := s.Latency
	row("latency", "min %s  mean %s  p50 %s  p90 %s  p99 %s  max %s",
		fmtLatency(l.Min), fmtLatency(l.Mean), fmtLatency(l.P50), fmtLatency(l.P90), fmtLatency(l.P99), fmtLatency(l.Max))
	kinds := make([]string, 0, len(s.FailuresByKind))
	for k := range s.FailuresByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for i, k := range kinds {
		name := ""
		if i == 0 {
			name = "failures"
		}
		msg := s.ErrorSamples[k]
		if len(msg) > 160 {
			msg = msg[:160] + "..."
		}
		row(name, "%s: %d (%s)", k, s.FailuresByKind[k], msg)
	}
	if s.Mode == ModeOpen {
		row("schedule", "%d sends scheduled, %d sent, %d dropped, %d late (max send delay %s)",
			s.Scheduled, s.Requests, s.Dropped, s.Late, fmtLatency(s.MaxSendDelay))
	}
	row("traffic", "%s sent, %s received", fmtBytes(s.BytesSent), fmtBytes(s.BytesReceived))
	if s.Interrupted {
		row("note", "interrupted before the end of the run")
	}
	w.Flush()
	return b.String()
}

// MarkdownTable returns a markdown table with one row per summary: the load
// (concurrency or rate), successful requests per second, p50/p90/p99
// latency in milliseconds, requests and failures.
func MarkdownTable(sums []*Summary) string {
	head := "load"
	closed, open := 0, 0
	for _, s := range sums {
		if s.Mode == ModeOpen {
			open++
		} else {
			closed++
		}
	}
	if open == 0 {
		head = "concurrency"
	} else if closed == 0 {
		head = "rate (req/s)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | req/s | p50 (ms) | p90 (ms) | p99 (ms) | requests | failed |\n", head)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		load := s.load()
		if open == 0 {
			load = fmt.Sprint(s.Concurrency)
		} else if closed == 0 {
			load = fmt.Sprintf("%g", s.Rate)
		}
		l := s.Latency
		fmt.Fprintf(&b, "| %s | %.1f | %.3f | %.3f | %.3f | %d | %d |\n",
			load, s.SuccessThroughput, ms(l.P50), ms(l.P90), ms(l.P99), s.Requests, s.Failures)
	}
	return b.String()
}

// Comparison is one row of CompareTable: two runs of the same load, e.g. a
// model with batching off (Base) and on (Test).
type Comparison struct {
	// Label names the row, e.g. "cnn, c=32"; empty means the load of Base.
	Label      string
	Base, Test *Summary
}

// CompareTable returns a markdown table with one row per comparison:
// successful requests per second of both runs and their ratio (Test/Base),
// then p50 and p99 latency in milliseconds of both and their failures.
// baseName and testName head the columns, e.g. "off" and "on".
func CompareTable(rows []Comparison, baseName, testName string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| run | %[1]s req/s | %[2]s req/s | %[2]s/%[1]s | %[1]s p50 ms | %[2]s p50 ms | %[1]s p99 ms | %[2]s p99 ms | failed (%[1]s/%[2]s) |\n", baseName, testName)
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		label := r.Label
		if label == "" {
			label = r.Base.load()
		}
		ratio := "–"
		if r.Base.SuccessThroughput > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Test.SuccessThroughput/r.Base.SuccessThroughput)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %s | %.2f | %.2f | %.2f | %.2f | %d/%d |\n",
			label, r.Base.SuccessThroughput, r.Test.SuccessThroughput, ratio,
			ms(r.Base.Latency.P50), ms(r.Test.Latency.P50), ms(r.Base.Latency.P99), ms(r.Test.Latency.P99),
			r.Base.Failures, r.Test.Failures)
	}
	return b.String()
}
