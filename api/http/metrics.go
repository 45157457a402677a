package httpapi

import (
	"io"
	"strconv"
	"time"

	"github.com/xserve/xserve/internal/metrics"
)

// durationBuckets are the upper bounds, in seconds, of the request duration
// histogram.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// httpMetrics counts HTTP requests for /metrics, in a registry that also
// holds the Go runtime and process collectors. Routes are label values by
// their pattern (never the raw path), so the number of series stays
// bounded.
type httpMetrics struct {
	reg      *metrics.Registry
	requests *metrics.CounterVec   // route, method, code
	duration *metrics.HistogramVec // route, method
	inflight *metrics.Gauge
}

func newHTTPMetrics() *httpMetrics {
	r := metrics.NewRegistry()
	r.RegisterRuntime()
	return &httpMetrics{
		reg: r,
		requests: r.NewCounterVec("xserve_http_requests_total",
			"HTTP requests answered, by route pattern, method and status code.", "route", "method", "code"),
		duration: r.NewHistogramVec("xserve_http_request_duration_seconds",
			"Time from a request's routing to its response, by route pattern and method.", durationBuckets, "route", "method"),
		inflight: r.NewGaugeVec("xserve_http_requests_in_flight", "HTTP requests being handled now.").With(),
	}
}

// observe records one finished request.
func (m *httpMetrics) observe(route, method string, code int, d time.Duration) {
	m.requests.With(route, method, strconv.Itoa(code)).Inc()
	m.duration.With(route, method).Observe(d.Seconds())
}

// write appends the metrics (and the runtime's) in the Prometheus text
// format.
func (m *httpMetrics) write(w io.Writer) error { return m.reg.Write(w) }
