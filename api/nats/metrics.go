package natsapi

import (
	"io"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

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
		{"xserve_nats_forwarded_total", "counter", "NATS requests for a model this replica did not hold, forwarded to a replica holding it (--model-load-policy lazy), by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.forwarded })},
		{"xserve_nats_request_seconds_total", "counter", "Total time from receipt to reply of the answered NATS requests, by model; divide by xserve_nats_requests_total for the mean.",
			func(st *modelStats) float64 { return float64(st.nanos.Load()) / 1e9 }},
		{"xserve_nats_requests_in_flight", "gauge", "NATS requests being handled now, by model.",
			loadInt(func(st *modelStats) *atomic.Int64 { return &st.inflight })},
	}
}

// collector is a prometheus.Collector that reads the counts at each
// scrape, the ones $SRV.STATS reports per endpoint.
type collector struct {
	s        *Server
	descs    []*prometheus.Desc // one per natsCounters entry
	queued   *prometheus.Desc
	lost     *prometheus.Desc // durable mode only
	restores *prometheus.Desc // durable mode only
}

func newCollector(s *Server) *collector {
	c := &collector{s: s}
	for _, nc := range natsCounters() {
		c.descs = append(c.descs, prometheus.NewDesc(nc.name, nc.help, []string{"model"}, nil))
	}
	c.queued = prometheus.NewDesc("xserve_nats_queued", "NATS requests waiting for a worker.", nil, nil)
	c.lost = prometheus.NewDesc("xserve_nats_durable_lost", "1 while the durable consumer or its stream is gone (deleted) and being re-created.", nil, nil)
	c.restores = prometheus.NewDesc("xserve_nats_durable_restores_total", "Times the durable stream and consumer were re-created after they were found gone.", nil, nil)
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.queued
	ch <- c.lost
	ch <- c.restores
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.s.statsMu.Lock()
	stats := make([]*modelStats, 0, len(c.s.stats))
	for _, st := range c.s.stats {
		stats = append(stats, st)
	}
	c.s.statsMu.Unlock()
	for i, nc := range natsCounters() {
		vt := prometheus.CounterValue
		if nc.typ == "gauge" {
			vt = prometheus.GaugeValue
		}
		for _, st := range stats {
			ch <- prometheus.MustNewConstMetric(c.descs[i], vt, nc.value(st), st.model)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(c.s.queued.Load()))
	if d := c.s.durable; d != nil {
		lost := 0.0
		if d.lost.Load() {
			lost = 1
		}
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.GaugeValue, lost)
		ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(d.restores.Load()))
	}
}

// WriteMetrics writes this replica's NATS counts, the ones $SRV.STATS
// reports per endpoint, in the Prometheus text format (version 0.0.4), so
// that one /metrics scrape covers HTTP and NATS.
func (s *Server) WriteMetrics(w io.Writer) error {
	s.metricsOnce.Do(func() {
		s.metrics = metrics.NewRegistry()
		s.metrics.Prometheus().MustRegister(newCollector(s))
	})
	return s.metrics.Write(w)
}
