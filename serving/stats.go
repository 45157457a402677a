package serving

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/xserve/xserve/modelrepo"
)

// Duration is a count of events and their summed duration, as Triton's
// statistics extension reports each phase.
type Duration struct {
	Count uint64
	Total time.Duration
}

func (d *Duration) add(t time.Duration) {
	d.Count++
	d.Total += t
}

// BatchStatistics are the executions of one batch size (rows per
// execution).
type BatchStatistics struct {
	BatchSize int64
	// Compute is the executions of that size and their upload, execute and
	// download time.
	Compute Duration
}

// Statistics are a model version's counters since it was loaded, in the
// terms of Triton's statistics extension: a request counts once in Success
// or Fail (with its total time); a successful one also in Queue (waiting for
// its batch or compile) and Compute (its execution's time).
type Statistics struct {
	Name    string
	Version int64
	// LastInference is when the last request finished; zero before any.
	LastInference time.Time
	// InferenceCount counts the rows of successful requests (a request
	// without a batch dim counts as one); ExecutionCount the executions,
	// each running one request or one batch of them.
	InferenceCount, ExecutionCount uint64
	Success, Fail, Queue, Compute  Duration
	// Batches holds one entry per batch size executed, ascending.
	Batches []BatchStatistics
}

// versionStats accumulates a version's Statistics.
type versionStats struct {
	mu         sync.Mutex // guards the fields below
	last       time.Time
	inferences uint64
	executions uint64
	success    Duration
	fail       Duration
	queue      Duration
	compute    Duration
	batches    map[int64]*Duration
}

// request records one finished request.
func (s *versionStats) request(rows int64, total, queue, compute time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = time.Now()
	if err != nil {
		s.fail.add(total)
		return
	}
	s.success.add(total)
	s.queue.add(queue)
	s.compute.add(compute)
	s.inferences += uint64(max(rows, 1))
}

// execution records one execution of rows rows.
func (s *versionStats) execution(rows int64, compute time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executions++
	if s.batches == nil {
		s.batches = map[int64]*Duration{}
	}
	d := s.batches[rows]
	if d == nil {
		d = &Duration{}
		s.batches[rows] = d
	}
	d.add(compute)
}

func (s *versionStats) snapshot(name string, num int64) Statistics {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Statistics{
		Name: name, Version: num, LastInference: s.last,
		InferenceCount: s.inferences, ExecutionCount: s.executions,
		Success: s.success, Fail: s.fail, Queue: s.queue, Compute: s.compute,
	}
	for size, d := range s.batches {
		st.Batches = append(st.Batches, BatchStatistics{BatchSize: size, Compute: *d})
	}
	sort.Slice(st.Batches, func(i, j int) bool { return st.Batches[i].BatchSize < st.Batches[j].BatchSize })
	return st
}

// Statistics returns the counters of the READY versions a request names:
// model "" means every model; version 0 every READY version of the model.
// Unknown models and versions are ErrModelNotFound, a named version that is
// not READY ErrNotReady.
func (m *Manager) Statistics(model string, num int64) ([]Statistics, error) {
	m.mu.Lock()
	var vs []*version
	switch {
	case model == "":
		for _, md := range m.models {
			for _, v := range md.versions {
				if v.state == StateReady {
					vs = append(vs, v)
				}
			}
		}
	case num != 0:
		v, err := m.lookupLocked(model, num)
		if err != nil {
			m.mu.Unlock()
			return nil, err
		}
		vs = append(vs, v)
	default:
		if _, err := m.lookupLocked(model, 0); err != nil {
			m.mu.Unlock()
			return nil, err
		}
		for _, v := range m.models[model].versions {
			if v.state == StateReady {
				vs = append(vs, v)
			}
		}
	}
	m.mu.Unlock()
	out := make([]Statistics, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.stats.snapshot(v.name, v.num))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

// maxBatchSize is the most rows a request to v may hold along a leading
// batch dim shared by every input and output, as Triton's max_batch_size
// states it; 0 when v's tensors have no such dim.
func (v *version) maxBatchSize() int64 {
	p := v.plan
	if p == nil || p.batchErr != nil || len(p.Inputs) == 0 {
		return 0
	}
	for i := range p.Inputs {
		if len(p.Inputs[i].Dims) == 0 || p.Inputs[i].Dims[0].Sym != p.batchName {
			return 0
		}
	}
	for _, axis := range p.outBatchAxis {
		if axis != 0 {
			return 0
		}
	}
	if v.cfg != nil && v.cfg.Batching.MaxBatchSize > 0 {
		return int64(v.cfg.Batching.MaxBatchSize)
	}
	return slices.Max(p.batch().Buckets)
}

// ModelConfig is what Triton's model configuration extension reports of a
// model version: its signature, batch limit and batching settings.
type ModelConfig struct {
	Metadata
	// MaxBatchSize is Triton's max_batch_size: the most rows along the
	// leading "batch" dim of every input and output, 0 when the model has
	// none (its shapes are then given whole).
	MaxBatchSize int64
	// DynamicBatching says whether requests are batched; Batching holds the
	// settings then.
	DynamicBatching bool
	Batching        modelrepo.BatchingConfig
}

// Config returns the configuration of a READY model version (0: the
// highest READY one).
func (m *Manager) Config(model string, version int64) (*ModelConfig, error) {
	md, err := m.Metadata(model, version)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.lookupLocked(model, md.Version)
	if err != nil {
		return nil, err
	}
	sv := v.firstDevice()
	if sv == nil || sv.plan == nil {
		return nil, fmt.Errorf("%w: %s has no signature", ErrNotReady, v)
	}
	c := &ModelConfig{Metadata: *md, MaxBatchSize: sv.maxBatchSize(), DynamicBatching: sv.batcher != nil}
	if v.cfg != nil {
		c.Batching = v.cfg.Batching
	}
	return c, nil
}

// requestRows is the rows of req along its first input's leading batch
// dim, 1 when that input has none.
func (v *version) requestRows(req *InferRequest) int64 {
	p := v.plan
	if p == nil || len(p.Inputs) == 0 || p.batchName == "" || len(p.Inputs[0].Dims) == 0 || p.Inputs[0].Dims[0].Sym != p.batchName {
		return 1
	}
	if t := req.Inputs[p.Inputs[0].Name]; t != nil && len(t.Shape) > 0 {
		return t.Shape[0]
	}
	return 1
}

// executionRows is the rows one execution of calls ran: the sum of their
// batch dims, or one per call without one.
func (v *version) executionRows(calls []*call) int64 {
	var rows int64
	for _, c := range calls {
		if n := c.dims[v.plan.batchName]; n > 0 && v.plan.batchName != "" {
			rows += n
		} else {
			rows++
		}
	}
	return rows
}

// updateGauges sets xserve_queue_depth from the batchers of the READY
// versions that batch.
func (m *Manager) updateGauges() {
	vs := m.readyVersions(func(v *version) bool { return v.batcher != nil })
	m.mu.Lock()
	mem := m.memoryLocked()
	m.mu.Unlock()
	g := m.metrics.queueDepth
	g.Reset()
	for _, v := range vs {
		g.With(v.name, v.label).Set(float64(v.batcher.Stats().Total.Queued))
	}
	m.metrics.memory.Reset()
	for name, n := range mem.perModel {
		m.metrics.memory.With(name).Set(float64(n))
	}
	for d := range m.client.Devices() {
		dev := strconv.Itoa(d)
		m.metrics.memoryUsed.With(dev).Set(float64(mem.used[d]))
		m.metrics.memoryBudget.With(dev).Set(float64(m.opts.MemoryBudget.For(d)))
		m.metrics.deviceMemory.With(dev).Set(float64(mem.weights[d]))
		m.metrics.deviceExecutions.With(dev) // listed from 0
		m.metrics.deviceLoad.scrape(d)
	}
}

// readyVersions returns the READY versions that keep.
func (m *Manager) readyVersions(keep func(*version) bool) []*version {
	m.mu.Lock()
	defer m.mu.Unlock()
	var vs []*version
	for _, md := range m.models {
		for _, v := range md.versions {
			if v.state == StateReady && keep(v) {
				vs = append(vs, v)
			}
		}
	}
	return vs
}
