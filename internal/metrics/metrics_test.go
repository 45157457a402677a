package metrics

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

func write(t *testing.T, r *Registry) string {
	t.Helper()
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWriteExact(t *testing.T) {
	r := NewRegistry()
	// Declared out of name order, with labels out of name order.
	reqs := r.NewCounterVec("xserve_requests_total", "Inference requests, by outcome.", "model", "outcome")
	state := r.NewGaugeVec("xserve_model_state", "1 for a version's current state.", "state", "model")
	loaded := r.NewGaugeVec("xserve_models_loaded", "Versions READY.")
	lat := r.NewHistogramVec("xserve_latency_seconds", "Latency.\nSecond line with a \\ backslash.", []float64{0.01, 0.1, 1}, "phase")
	r.NewCounterVec("a_unused_total", "No series yet.", "x")

	reqs.With("resnet", "success").Add(3)
	reqs.With("alpha", "failure").Inc()
	reqs.With("resnet", "failure").Inc()
	reqs.With(`we"ird\name`+"\n", "success").Inc()
	state.With("READY", "resnet").Set(1)
	state.With("LOADING", "resnet").Set(0)
	loaded.With().Set(2)
	loaded.With().Dec()
	h := lat.With("total")
	for _, v := range []float64{0.005, 0.01, 0.05, 2, 0.5} {
		h.Observe(v)
	}
	lat.With("queue") // empty series

	want := `# HELP a_unused_total No series yet.
# TYPE a_unused_total counter
# HELP xserve_latency_seconds Latency.\nSecond line with a \\ backslash.
# TYPE xserve_latency_seconds histogram
xserve_latency_seconds_bucket{phase="queue",le="0.01"} 0
xserve_latency_seconds_bucket{phase="queue",le="0.1"} 0
xserve_latency_seconds_bucket{phase="queue",le="1"} 0
xserve_latency_seconds_bucket{phase="queue",le="+Inf"} 0
xserve_latency_seconds_sum{phase="queue"} 0
xserve_latency_seconds_count{phase="queue"} 0
xserve_latency_seconds_bucket{phase="total",le="0.01"} 2
xserve_latency_seconds_bucket{phase="total",le="0.1"} 3
xserve_latency_seconds_bucket{phase="total",le="1"} 4
xserve_latency_seconds_bucket{phase="total",le="+Inf"} 5
xserve_latency_seconds_sum{phase="total"} 2.565
xserve_latency_seconds_count{phase="total"} 5
# HELP xserve_model_state 1 for a version's current state.
# TYPE xserve_model_state gauge
xserve_model_state{model="resnet",state="LOADING"} 0
xserve_model_state{model="resnet",state="READY"} 1
# HELP xserve_models_loaded Versions READY.
# TYPE xserve_models_loaded gauge
xserve_models_loaded 1
# HELP xserve_requests_total Inference requests, by outcome.
# TYPE xserve_requests_total counter
xserve_requests_total{model="alpha",outcome="failure"} 1
xserve_requests_total{model="resnet",outcome="failure"} 1
xserve_requests_total{model="resnet",outcome="success"} 3
xserve_requests_total{model="we\"ird\\name\n",outcome="success"} 1
`
	if got := write(t, r); got != want {
		t.Errorf("exposition differs\ngot:\n%s\nwant:\n%s", got, want)
	}
}

func TestHistogramWithoutLabels(t *testing.T) {
	r := NewRegistry()
	h := r.NewHistogramVec("h_seconds", "H.", []float64{1, 2.5}).With()
	h.Observe(3)
	h.Observe(1)
	want := `# HELP h_seconds H.
# TYPE h_seconds histogram
h_seconds_bucket{le="1"} 1
h_seconds_bucket{le="2.5"} 1
h_seconds_bucket{le="+Inf"} 2
h_seconds_sum 4
h_seconds_count 2
`
	if got := write(t, r); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if h.Count() != 2 || h.Sum() != 4 {
		t.Errorf("Count, Sum = %d, %v; want 2, 4", h.Count(), h.Sum())
	}
}

func TestDelete(t *testing.T) {
	r := NewRegistry()
	g := r.NewGaugeVec("g", "G.", "k")
	g.With("a").Set(1)
	g.With("b").Set(2)
	if !g.Delete("a") || g.Delete("a") || g.Delete("a", "extra") {
		t.Fatal("Delete reported the wrong result")
	}
	want := "# HELP g G.\n# TYPE g gauge\ng{k=\"b\"} 2\n"
	if got := write(t, r); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestFormatFloat(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {1, "1"}, {0.25, "0.25"}, {1e6, "1e+06"}, {-2.5, "-2.5"},
		{math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	} {
		if got := FormatFloat(c.in); got != c.want {
			t.Errorf("FormatFloat(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestProgrammingErrorsPanic(t *testing.T) {
	for name, f := range map[string]func(r *Registry){
		"duplicate family":   func(r *Registry) { r.NewCounterVec("x", ""); r.NewGaugeVec("x", "") },
		"bad metric name":    func(r *Registry) { r.NewCounterVec("1x", "") },
		"bad label name":     func(r *Registry) { r.NewCounterVec("x", "", "a-b") },
		"reserved label":     func(r *Registry) { r.NewCounterVec("x", "", "__name") },
		"duplicate label":    func(r *Registry) { r.NewCounterVec("x", "", "a", "a") },
		"le on a histogram":  func(r *Registry) { r.NewHistogramVec("x", "", []float64{1}, "le") },
		"unsorted buckets":   func(r *Registry) { r.NewHistogramVec("x", "", []float64{2, 1}) },
		"infinite bucket":    func(r *Registry) { r.NewHistogramVec("x", "", []float64{1, math.Inf(1)}) },
		"wrong label count":  func(r *Registry) { r.NewCounterVec("x", "", "a").With() },
		"negative increment": func(r *Registry) { r.NewCounterVec("x", "").With().Add(-1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("did not panic")
				}
			}()
			f(NewRegistry())
		})
	}
}

func TestConcurrentUpdates(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounterVec("c_total", "C.", "k")
	h := r.NewHistogramVec("h", "H.", []float64{0.5}, "k")
	g := r.NewGaugeVec("g", "G.")
	const workers, n = 8, 1000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprint(w % 2)
			for range n {
				c.With(k).Inc()
				h.With(k).Observe(1)
				g.With().Inc()
			}
		}()
	}
	// Write concurrently with the updates.
	for range 10 {
		if err := r.Write(new(strings.Builder)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	total := c.With("0").Value() + c.With("1").Value()
	if total != workers*n || g.With().Value() != workers*n || h.With("0").Count()+h.With("1").Count() != workers*n {
		t.Errorf("lost updates: counter %v, gauge %v, histogram %d", total, g.With().Value(), h.With("0").Count()+h.With("1").Count())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	r := NewRegistry()
	r.NewCounterVec("c", "C.").With().Inc()
	if err := r.Write(failWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Write = %v, want the writer's error", err)
	}
}
