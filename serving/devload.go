package serving

import (
	"strconv"
	"sync"
	"time"

	"github.com/xserve/xserve/internal/metrics"
)

// deviceLoad is the utilisation of the client's devices as /metrics shows
// it: per device, the executions of requests' batches in flight now
// (xserve_device_executions_in_flight) and the wall time during which at
// least one was (xserve_device_busy_seconds_total), so that
// rate(xserve_device_busy_seconds_total[1m]) is the fraction of the time
// the device had work — its utilisation as the server sees it (on a CPU
// client the devices share the host's cores: a busy device is not a
// saturated CPU).
type deviceLoad struct {
	busy     *metrics.CounterVec // device
	inFlight *metrics.GaugeVec   // device

	mu   sync.Mutex
	devs map[int]*deviceSpan
}

// deviceSpan is one device's executions in flight and since when it has
// had one, up to which its busy time is counted.
type deviceSpan struct {
	n     int
	since time.Time
}

func newDeviceLoad(busy *metrics.CounterVec, inFlight *metrics.GaugeVec) *deviceLoad {
	return &deviceLoad{busy: busy, inFlight: inFlight, devs: map[int]*deviceSpan{}}
}

// begin counts an execution starting on device dev; end must follow.
func (l *deviceLoad) begin(dev int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.devs[dev]
	if s == nil {
		s = &deviceSpan{}
		l.devs[dev] = s
	}
	if s.n == 0 {
		s.since = time.Now()
	}
	s.n++
	l.inFlight.With(strconv.Itoa(dev)).Set(float64(s.n))
}

// end counts an execution on device dev ending: the busy time up to now
// is added when it was the last one in flight.
func (l *deviceLoad) end(dev int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.devs[dev]
	s.n--
	label := strconv.Itoa(dev)
	l.inFlight.With(label).Set(float64(s.n))
	if s.n == 0 {
		l.busy.With(label).Add(time.Since(s.since).Seconds())
	}
}

// scrape lists device dev and adds the busy time of the executions in
// flight on it up to now, so that a long execution counts at each scrape,
// not only when it ends.
func (l *deviceLoad) scrape(dev int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	label := strconv.Itoa(dev)
	c := l.busy.With(label)
	g := l.inFlight.With(label)
	s := l.devs[dev]
	if s == nil || s.n == 0 {
		g.Set(0)
		return
	}
	now := time.Now()
	c.Add(now.Sub(s.since).Seconds())
	s.since = now
	g.Set(float64(s.n))
}
