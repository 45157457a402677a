package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ContentType is the Content-Type of what Registry.Write produces.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

var (
	metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// Registry is a set of metric families. The zero value is not usable; call
// NewRegistry.
type Registry struct {
	mu       sync.Mutex // guards families
	families map[string]family
}

// family is one metric family of a Registry.
type family interface {
	// write appends the family's exposition text (HELP, TYPE, samples).
	write(w *bufio.Writer)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{families: map[string]family{}}
}

// register adds f under name; it panics on a duplicate or invalid name.
func (r *Registry) register(name string, f family) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.families[name]; dup {
		panic(fmt.Sprintf("metrics: %s is registered twice", name))
	}
	r.families[name] = f
}

// Write writes every family in the text exposition format (version 0.0.4),
// families sorted by name and series by label values.
func (r *Registry) Write(w io.Writer) error {
	r.mu.Lock()
	names := make([]string, 0, len(r.families))
	for n := range r.families {
		names = append(names, n)
	}
	sort.Strings(names)
	fams := make([]family, len(names))
	for i, n := range names {
		fams[i] = r.families[n]
	}
	r.mu.Unlock()

	bw := bufio.NewWriter(w)
	for _, f := range fams {
		f.write(bw)
	}
	return bw.Flush()
}

// vec is the label handling shared by the three vector types: a family of
// series of type T keyed by their label values.
type vec[T any] struct {
	name, help, typ string
	labels          []string // as declared
	sorted          []int    // indices into labels, in label-name order
	newSeries       func() *T

	mu     sync.RWMutex // guards series
	series map[string]*entry[T]
}

type entry[T any] struct {
	values []string // in declared label order
	s      *T
}

func newVec[T any](name, help, typ string, labels []string, newSeries func() *T) *vec[T] {
	if !metricNameRE.MatchString(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	seen := map[string]bool{}
	for _, l := range labels {
		if !labelNameRE.MatchString(l) || strings.HasPrefix(l, "__") {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
		if typ == "histogram" && l == "le" {
			panic(fmt.Sprintf("metrics: %s: a histogram cannot have a label named le", name))
		}
		if seen[l] {
			panic(fmt.Sprintf("metrics: %s: label %q is declared twice", name, l))
		}
		seen[l] = true
	}
	v := &vec[T]{name: name, help: help, typ: typ, labels: slices.Clone(labels), newSeries: newSeries, series: map[string]*entry[T]{}}
	v.sorted = make([]int, len(labels))
	for i := range v.sorted {
		v.sorted[i] = i
	}
	sort.Slice(v.sorted, func(a, b int) bool { return labels[v.sorted[a]] < labels[v.sorted[b]] })
	if len(labels) == 0 {
		v.with() // a vector without labels has its one series from the start
	}
	return v
}

// key joins label values with a byte that cannot appear in valid UTF-8.
func key(values []string) string { return strings.Join(values, "\xff") }

func (v *vec[T]) with(values ...string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values (%s), got %d", v.name, len(v.labels), strings.Join(v.labels, ", "), len(values)))
	}
	k := key(values)
	v.mu.RLock()
	e, ok := v.series[k]
	v.mu.RUnlock()
	if ok {
		return e.s
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.series[k]; ok {
		return e.s
	}
	e = &entry[T]{values: slices.Clone(values), s: v.newSeries()}
	v.series[k] = e
	return e.s
}

func (v *vec[T]) delete(values ...string) bool {
	if len(values) != len(v.labels) {
		return false
	}
	k := key(values)
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.series[k]
	delete(v.series, k)
	return ok
}

// snapshot returns the series sorted by their label values in label-name
// order.
func (v *vec[T]) snapshot() []*entry[T] {
	v.mu.RLock()
	out := make([]*entry[T], 0, len(v.series))
	for _, e := range v.series {
		out = append(out, e)
	}
	v.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool {
		for _, i := range v.sorted {
			if x, y := out[a].values[i], out[b].values[i]; x != y {
				return x < y
			}
		}
		return false
	})
	return out
}

// header writes the HELP and TYPE lines.
func (v *vec[T]) header(w *bufio.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", v.name, escapeHelp(v.help), v.name, v.typ)
}

// labelText formats the label set of e, sorted by name, plus extra pairs
// (already formatted, e.g. `le="0.5"`) at the end; "" when there are none.
func (v *vec[T]) labelText(e *entry[T], extra string) string {
	if len(v.labels) == 0 && extra == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for n, i := range v.sorted {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v.labels[i])
		b.WriteString(`="`)
		b.WriteString(escapeLabel(e.values[i]))
		b.WriteByte('"')
	}
	if extra != "" {
		if len(v.labels) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(extra)
	}
	b.WriteByte('}')
	return b.String()
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

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

// atomicFloat is a float64 updated with atomic operations.
type atomicFloat struct{ bits atomic.Uint64 }

func (a *atomicFloat) load() float64   { return math.Float64frombits(a.bits.Load()) }
func (a *atomicFloat) store(f float64) { a.bits.Store(math.Float64bits(f)) }
func (a *atomicFloat) add(d float64) {
	for {
		old := a.bits.Load()
		if a.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Counter is a value that only goes up.
type Counter struct{ v atomicFloat }

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d, which must not be negative (a programming error: it panics).
func (c *Counter) Add(d float64) {
	if d < 0 {
		panic(fmt.Sprintf("metrics: counter cannot decrease (Add(%v))", d))
	}
	c.v.add(d)
}

// Value returns the current value.
func (c *Counter) Value() float64 { return c.v.load() }

// CounterVec is a family of counters distinguished by label values.
type CounterVec struct{ v *vec[Counter] }

// NewCounterVec registers a counter family; labels are the label names.
func (r *Registry) NewCounterVec(name, help string, labels ...string) *CounterVec {
	cv := &CounterVec{v: newVec(name, help, "counter", labels, func() *Counter { return new(Counter) })}
	r.register(name, cv)
	return cv
}

// With returns the counter of the given label values (in the order the
// labels were declared), creating it at 0.
func (cv *CounterVec) With(values ...string) *Counter { return cv.v.with(values...) }

// Delete removes the series of the given label values and reports whether
// it existed.
func (cv *CounterVec) Delete(values ...string) bool { return cv.v.delete(values...) }

func (cv *CounterVec) write(w *bufio.Writer) {
	cv.v.header(w)
	for _, e := range cv.v.snapshot() {
		fmt.Fprintf(w, "%s%s %s\n", cv.v.name, cv.v.labelText(e, ""), FormatFloat(e.s.Value()))
	}
}

// Gauge is a value that goes up and down.
type Gauge struct{ v atomicFloat }

// Set sets the value.
func (g *Gauge) Set(f float64) { g.v.store(f) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) { g.v.add(d) }

// Inc adds 1.
func (g *Gauge) Inc() { g.v.add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.v.add(-1) }

// Value returns the current value.
func (g *Gauge) Value() float64 { return g.v.load() }

// GaugeVec is a family of gauges distinguished by label values.
type GaugeVec struct{ v *vec[Gauge] }

// NewGaugeVec registers a gauge family; labels are the label names.
func (r *Registry) NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	gv := &GaugeVec{v: newVec(name, help, "gauge", labels, func() *Gauge { return new(Gauge) })}
	r.register(name, gv)
	return gv
}

// With returns the gauge of the given label values, creating it at 0.
func (gv *GaugeVec) With(values ...string) *Gauge { return gv.v.with(values...) }

// Delete removes the series of the given label values and reports whether
// it existed.
func (gv *GaugeVec) Delete(values ...string) bool { return gv.v.delete(values...) }

func (gv *GaugeVec) write(w *bufio.Writer) {
	gv.v.header(w)
	for _, e := range gv.v.snapshot() {
		fmt.Fprintf(w, "%s%s %s\n", gv.v.name, gv.v.labelText(e, ""), FormatFloat(e.s.Value()))
	}
}

// Histogram counts observations in fixed buckets.
type Histogram struct {
	upper []float64 // ascending upper bounds, +Inf excluded; shared, read-only

	mu     sync.Mutex // guards counts, sum, count
	counts []uint64   // per bucket, not cumulative; the last is +Inf
	sum    float64
	count  uint64
}

// Observe records one value: it lands in the first bucket whose upper bound
// is >= v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.upper, v)
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.count++
	h.mu.Unlock()
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// Sum returns the sum of the observations.
func (h *Histogram) Sum() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sum
}

// HistogramVec is a family of histograms with the same buckets,
// distinguished by label values.
type HistogramVec struct {
	v     *vec[Histogram]
	upper []float64
}

// NewHistogramVec registers a histogram family with the given bucket upper
// bounds (strictly ascending, finite; the +Inf bucket is implicit). Invalid
// buckets are a programming error and panic.
func (r *Registry) NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	for i, b := range buckets {
		if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= buckets[i-1]) {
			panic(fmt.Sprintf("metrics: %s: buckets must be finite and strictly ascending, got %v", name, buckets))
		}
	}
	upper := slices.Clone(buckets)
	hv := &HistogramVec{upper: upper}
	hv.v = newVec(name, help, "histogram", labels, func() *Histogram {
		return &Histogram{upper: upper, counts: make([]uint64, len(upper)+1)}
	})
	r.register(name, hv)
	return hv
}

// With returns the histogram of the given label values, creating it empty.
func (hv *HistogramVec) With(values ...string) *Histogram { return hv.v.with(values...) }

// Delete removes the series of the given label values and reports whether
// it existed.
func (hv *HistogramVec) Delete(values ...string) bool { return hv.v.delete(values...) }

func (hv *HistogramVec) write(w *bufio.Writer) {
	v := hv.v
	v.header(w)
	for _, e := range v.snapshot() {
		h := e.s
		h.mu.Lock()
		counts := slices.Clone(h.counts)
		sum, count := h.sum, h.count
		h.mu.Unlock()
		var cum uint64
		for i, c := range counts {
			cum += c
			le := "+Inf"
			if i < len(hv.upper) {
				le = FormatFloat(hv.upper[i])
			}
			fmt.Fprintf(w, "%s_bucket%s %d\n", v.name, v.labelText(e, `le="`+le+`"`), cum)
		}
		labels := v.labelText(e, "")
		fmt.Fprintf(w, "%s_sum%s %s\n", v.name, labels, FormatFloat(sum))
		fmt.Fprintf(w, "%s_count%s %d\n", v.name, labels, count)
	}
}
