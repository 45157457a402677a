package natsapi

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/xserve/xserve/internal/metrics"
)

// natsCounter is one per-model series family WriteMetrics exposes, read from
// the same counts as $SRV.STATS.
type natsCounter struct {
	name, typ, help string
	value           func(*modelStats) float64
}

func loadInt(f func(*modelStats) *atomic.Int64) func(*modelStats) float64 {
	return func(st *modelStats) float64 { return float64(f(st).Load()) }
}

// natsCounters lists the families in the order WriteMetrics writes them.
func natsCounters() []natsCounter {
	return []natsCounter{
		{"xserve_nats_requests_total", "counter", "NATS requests answered (plain and durable, successes and errors), by model (\"*\" for names without an endpoint).",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.requests })},
		{"xserve_nats_errors_total", "counter", "NATS requests answered with an error, by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.errors })},
		{"xserve_nats_overloaded_total", "counter", "NATS requests refused with 429 because the worker queue was full, by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.overloaded })},
		{"xserve_nats_durable_requests_total", "counter", "Durable (JetStream) NATS requests answered, by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.durable })},
		{"xserve_nats_redelivered_total", "counter", "Durable NATS requests answered on a redelivery (a replica failed before acknowledging them), by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.redelivered })},
		{"xserve_nats_request_seconds_total", "counter", "Total time from receipt to reply of the answered NATS requests, by model; divide by xserve_nats_requests_total for the mean.",
			func(st *modelStats) float64 { return float64(st.nanos.Load()) / 1e9 }},
		{"xserve_nats_requests_in_flight", "gauge", "NATS requests being handled now, by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.inflight })},
	}
}

// WriteMetrics writes this replica's NATS counts, the ones $SRV.STATS
// reports per endpoint, in the Prometheus text format (version 0.0.4), so
// that one /metrics scrape covers HTTP and NATS.
func (s *Server) WriteMetrics(w io.Writer) error {
	s.statsMu.Lock()
	stats := make([]*modelStats, 0, len(s.stats))
	for _, st := range s.stats {
		stats = append(stats, st)
	}
	s.statsMu.Unlock()
	slices.SortFunc(stats, func(a, b *modelStats) int { return strings.Compare(a.model, b.model) })

	bw := bufio.NewWriter(w)
	for _, c := range natsCounters() {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", c.name, c.help, c.name, c.typ)
		for _, st := range stats {
			fmt.Fprintf(bw, "%s{model=%s} %s\n", c.name, strconv.Quote(st.model), metrics.FormatFloat(c.value(st)))
		}
	}
	fmt.Fprintf(bw, "# HELP xserve_nats_queued NATS requests waiting for a worker.\n# TYPE xserve_nats_queued gauge\nxserve_nats_queued %d\n", s.queued.Load())
	if d := s.durable; d != nil {
		lost := 0
		if d.lost.Load() {
			lost = 1
		}
		fmt.Fprintf(bw, "# HELP xserve_nats_durable_lost 1 while the durable consumer or its stream is gone (deleted) and being re-created.\n# TYPE xserve_nats_durable_lost gauge\nxserve_nats_durable_lost %d\n", lost)
		fmt.Fprintf(bw, "# HELP xserve_nats_durable_restores_total Times the durable stream and consumer were re-created after they were found gone.\n# TYPE xserve_nats_durable_restores_total counter\nxserve_nats_durable_restores_total %d\n", d.restores.Load())
	}
	return bw.Flush()
}
