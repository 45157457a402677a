package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// ContentType is the Content-Type of what Registry.Write produces.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

var (
	metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// Registry is a set of metric families, a prometheus.Registry underneath.
// The zero value is not usable; call NewRegistry.
type Registry struct {
	reg *prometheus.Registry

	mu       sync.Mutex // guards families
	families map[string]header
}

// header is what Write prints of a family that has no series yet
// (client_golang leaves such families out).
type header struct{ help, typ string }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{reg: prometheus.NewRegistry(), families: map[string]header{}}
}

// RegisterRuntime adds the Go runtime (go_*) and process (process_*)
// collectors of client_golang. Call it on one registry of a process.
func (r *Registry) RegisterRuntime() {
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Prometheus returns the underlying registry, for handlers and exporters
// that take a prometheus.Gatherer.
func (r *Registry) Prometheus() *prometheus.Registry { return r.reg }

// register validates a family's names and adds c under name; it panics on a
// duplicate or invalid name (programming errors).
func (r *Registry) register(name, help, typ string, labels []string, c prometheus.Collector) {
	if !metricNameRE.MatchString(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	seen := map[string]bool{}
	for _, l := range labels {
		if !labelNameRE.MatchString(l) || strings.HasPrefix(l, "__") || seen[l] {
			panic(fmt.Sprintf("metrics: %s: invalid or duplicate label name %q", name, l))
		}
		if typ == "histogram" && l == "le" {
			panic(fmt.Sprintf("metrics: %s: a histogram cannot have the label le", name))
		}
		seen[l] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.families[name]; dup {
		panic(fmt.Sprintf("metrics: %s is registered twice", name))
	}
	r.reg.MustRegister(c)
	r.families[name] = header{help, typ}
}

// Write writes every family in the text exposition format (version 0.0.4),
// families sorted by name and series by label values; a family without
// series yet is written as its HELP and TYPE lines.
func (r *Registry) Write(w io.Writer) error {
	mfs, err := r.reg.Gather()
	if err != nil {
		return fmt.Errorf("metrics: gather: %w", err)
	}
	type item struct {
		name string
		mf   *dto.MetricFamily
	}
	items := make([]item, 0, len(mfs))
	gathered := map[string]bool{}
	for _, mf := range mfs {
		items = append(items, item{mf.GetName(), mf})
		gathered[mf.GetName()] = true
	}
	r.mu.Lock()
	empty := map[string]header{}
	for n, h := range r.families {
		if !gathered[n] {
			items = append(items, item{name: n})
			empty[n] = h
		}
	}
	r.mu.Unlock()
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })
	bw := bufio.NewWriter(w)
	for _, it := range items {
		if it.mf == nil {
			h := empty[it.name]
			fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", it.name, escapeHelp(h.help), it.name, h.typ)
			continue
		}
		if _, err := expfmt.MetricFamilyToText(bw, it.mf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// FormatFloat formats a sample value as the exposition format wants it:
// the shortest representation that reads back exactly, and +Inf, -Inf, NaN.
func FormatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// read returns the current state of one series.
func read(m prometheus.Metric) *dto.Metric {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(fmt.Sprintf("metrics: reading %s: %v", m.Desc(), err))
	}
	return &d
}

// Counter is a value that only goes up.
type Counter struct{ c prometheus.Counter }

// Inc adds 1.
func (c *Counter) Inc() { c.c.Inc() }

// Add adds d, which must not be negative (a programming error: it panics).
func (c *Counter) Add(d float64) { c.c.Add(d) }

// Value returns the current value.
func (c *Counter) Value() float64 { return read(c.c).GetCounter().GetValue() }

// CounterVec is a family of counters distinguished by label values.
type CounterVec struct{ v *prometheus.CounterVec }

// NewCounterVec registers a counter family; labels are the label names.
func (r *Registry) NewCounterVec(name, help string, labels ...string) *CounterVec {
	cv := &CounterVec{prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)}
	r.register(name, help, "counter", labels, cv.v)
	return cv
}

// With returns the counter of the given label values (in the order the
// labels were declared), creating it at 0. The wrong number of values is a
// programming error and panics.
func (cv *CounterVec) With(values ...string) *Counter {
	return &Counter{cv.v.WithLabelValues(values...)}
}

// Delete removes the series of the given label values and reports whether
// it existed.
func (cv *CounterVec) Delete(values ...string) bool { return cv.v.DeleteLabelValues(values...) }

// Gauge is a value that goes up and down.
type Gauge struct{ g prometheus.Gauge }

// Set sets the value.
func (g *Gauge) Set(f float64) { g.g.Set(f) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) { g.g.Add(d) }

// Inc adds 1.
func (g *Gauge) Inc() { g.g.Inc() }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.g.Dec() }

// Value returns the current value.
func (g *Gauge) Value() float64 { return read(g.g).GetGauge().GetValue() }

// GaugeVec is a family of gauges distinguished by label values.
type GaugeVec struct{ v *prometheus.GaugeVec }

// NewGaugeVec registers a gauge family; labels are the label names.
func (r *Registry) NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	gv := &GaugeVec{prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)}
	r.register(name, help, "gauge", labels, gv.v)
	return gv
}

// With returns the gauge of the given label values, creating it at 0.
func (gv *GaugeVec) With(values ...string) *Gauge { return &Gauge{gv.v.WithLabelValues(values...)} }

// Delete removes the series of the given label values and reports whether
// it existed.
func (gv *GaugeVec) Delete(values ...string) bool { return gv.v.DeleteLabelValues(values...) }

// Reset removes every series.
func (gv *GaugeVec) Reset() { gv.v.Reset() }

// Histogram counts observations in fixed buckets.
type Histogram struct{ h prometheus.Observer }

// Observe records one value: it lands in the first bucket whose upper bound
// is >= v.
func (h *Histogram) Observe(v float64) { h.h.Observe(v) }

func (h *Histogram) read() *dto.Histogram { return read(h.h.(prometheus.Metric)).GetHistogram() }

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.read().GetSampleCount() }

// Sum returns the sum of the observations.
func (h *Histogram) Sum() float64 { return h.read().GetSampleSum() }

// HistogramVec is a family of histograms with the same buckets,
// distinguished by label values.
type HistogramVec struct{ v *prometheus.HistogramVec }

// NewHistogramVec registers a histogram family with the given bucket upper
// bounds (strictly ascending, finite; the +Inf bucket is implicit). Invalid
// buckets are a programming error and panic.
func (r *Registry) NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	for i, b := range buckets {
		if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= buckets[i-1]) {
			panic(fmt.Sprintf("metrics: %s: buckets must be finite and strictly ascending, got %v", name, buckets))
		}
	}
	hv := &HistogramVec{prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: append([]float64(nil), buckets...)}, labels)}
	r.register(name, help, "histogram", labels, hv.v)
	return hv
}

// With returns the histogram of the given label values, creating it empty.
func (hv *HistogramVec) With(values ...string) *Histogram {
	return &Histogram{hv.v.WithLabelValues(values...)}
}

// Delete removes the series of the given label values and reports whether
// it existed.
func (hv *HistogramVec) Delete(values ...string) bool { return hv.v.DeleteLabelValues(values...) }
