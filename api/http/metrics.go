package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// durationBuckets are the upper bounds, in seconds, of the request duration
// histogram.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// routeKey labels one series: the route pattern (never the raw path, so the
// number of series stays bounded), the method and the status code.
type routeKey struct {
	route, method string
	code          int
}

// routeStats is the histogram of one route and method.
type routeStats struct {
	counts []uint64 // per bucket, cumulative at write time
	sum    float64
	count  uint64
}

// httpMetrics counts HTTP requests for /metrics. mu guards requests and
// durations; inflight is accessed atomically.
type httpMetrics struct {
	inflight atomic.Int64

	mu        sync.Mutex
	requests  map[routeKey]uint64
	durations map[[2]string]*routeStats
}

func newHTTPMetrics() *httpMetrics {
	return &httpMetrics{requests: map[routeKey]uint64{}, durations: map[[2]string]*routeStats{}}
}

// observe records one finished request.
func (m *httpMetrics) observe(route, method string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[routeKey{route, method, code}]++
	k := [2]string{route, method}
	s := m.durations[k]
	if s == nil {
		s = &routeStats{counts: make([]uint64, len(durationBuckets))}
		m.durations[k] = s
	}
	sec := d.Seconds()
	if i, _ := slices.BinarySearch(durationBuckets, sec); i < len(durationBuckets) {
		s.counts[i]++
	}
	s.sum += sec
	s.count++
}

// write appends the metrics in the Prometheus text format, series sorted.
func (m *httpMetrics) write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	m.mu.Lock()
	keys := make([]routeKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b routeKey) int {
		if a.route != b.route {
			return strings.Compare(a.route, b.route)
		}
		if a.method != b.method {
			return strings.Compare(a.method, b.method)
		}
		return a.code - b.code
	})
	fmt.Fprintln(bw, "# HELP xserve_http_requests_total HTTP requests answered, by route pattern, method and status code.")
	fmt.Fprintln(bw, "# TYPE xserve_http_requests_total counter")
	for _, k := range keys {
		fmt.Fprintf(bw, "xserve_http_requests_total{route=%s,method=%s,code=\"%d\"} %d\n", strconv.Quote(k.route), strconv.Quote(k.method), k.code, m.requests[k])
	}
	dkeys := make([][2]string, 0, len(m.durations))
	for k := range m.durations {
		dkeys = append(dkeys, k)
	}
	slices.SortFunc(dkeys, func(a, b [2]string) int {
		if a[0] != b[0] {
			return strings.Compare(a[0], b[0])
		}
		return strings.Compare(a[1], b[1])
	})
	fmt.Fprintln(bw, "# HELP xserve_http_request_duration_seconds Time from a request's routing to its response, by route pattern and method.")
	fmt.Fprintln(bw, "# TYPE xserve_http_request_duration_seconds histogram")
	for _, k := range dkeys {
		s := m.durations[k]
		labels := fmt.Sprintf("route=%s,method=%s", strconv.Quote(k[0]), strconv.Quote(k[1]))
		cum := uint64(0)
		for i, le := range durationBuckets {
			cum += s.counts[i]
			fmt.Fprintf(bw, "xserve_http_request_duration_seconds_bucket{%s,le=\"%s\"} %d\n", labels, strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		fmt.Fprintf(bw, "xserve_http_request_duration_seconds_bucket{%s,le=\"+Inf\"} %d\n", labels, s.count)
		fmt.Fprintf(bw, "xserve_http_request_duration_seconds_sum{%s} %s\n", labels, strconv.FormatFloat(s.sum, 'g', -1, 64))
		fmt.Fprintf(bw, "xserve_http_request_duration_seconds_count{%s} %d\n", labels, s.count)
	}
	m.mu.Unlock()
	fmt.Fprintln(bw, "# HELP xserve_http_requests_in_flight HTTP requests being handled now.")
	fmt.Fprintln(bw, "# TYPE xserve_http_requests_in_flight gauge")
	fmt.Fprintf(bw, "xserve_http_requests_in_flight %d\n", m.inflight.Load())
	return bw.Flush()
}
