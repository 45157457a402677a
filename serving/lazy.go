package serving

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xserve/xserve/modelrepo"
)

// LoadPolicy says when the Manager loads a model (Options.LoadPolicy).
type LoadPolicy string

// Model load policies.
const (
	// LoadEager loads every version the version policy selects at start
	// and as the repository changes.
	LoadEager LoadPolicy = "eager"
	// LoadLazy loads a model on its first request (the request waits for
	// the load, within its deadline) and, when loading it would exceed
	// the device memory budget (Options.MemoryBudget), first unloads the
	// models used least recently. A model that is not loaded is listed
	// UNAVAILABLE with Unloaded set, so that readiness does not wait for
	// it; a model held loaded follows the repository as with LoadEager.
	LoadLazy LoadPolicy = "lazy"
)

// ParseLoadPolicy parses "eager" or "lazy".
func ParseLoadPolicy(s string) (LoadPolicy, error) {
	switch p := LoadPolicy(s); p {
	case LoadEager, LoadLazy:
		return p, nil
	}
	return "", fmt.Errorf("model load policy %q: want eager or lazy", s)
}

// MemoryBudget bounds the device memory the loaded models take, per
// device: a model's share on a device is the size of its weights there
// (before its first bucket is built, the size of its model files), on each
// device it is placed on. The zero value is unbounded.
type MemoryBudget struct {
	// Bytes is each device's budget; 0 means unbounded.
	Bytes int64
	// Devices overrides Bytes for the devices it names, by device index.
	Devices map[int]int64
}

// For returns the budget of device d; 0 means unbounded.
func (b MemoryBudget) For(d int) int64 {
	if n, ok := b.Devices[d]; ok {
		return n
	}
	return b.Bytes
}

func (b MemoryBudget) validate() error {
	if b.Bytes < 0 {
		return fmt.Errorf("serving: Options.MemoryBudget.Bytes is %d, want 0 (unbounded) or more", b.Bytes)
	}
	for d, n := range b.Devices {
		if d < 0 || n < 0 {
			return fmt.Errorf("serving: Options.MemoryBudget.Devices[%d] is %d, want a device index and a size >= 0", d, n)
		}
	}
	return nil
}

// lazyModel is a model's state under LoadLazy. Guarded by Manager.mu.
type lazyModel struct {
	// entry is the model's repository entry, loaded on demand.
	entry *modelrepo.ModelEntry
	// lastUse orders the models by last use (Manager.lazyTick).
	lastUse int64
	// loading is closed when the load in progress ends; nil when none.
	loading chan struct{}
	// loadErr is the error of the last load.
	loadErr error
	// generative says entry is a generative model (config.yaml's
	// generate:, or a version directory with genai_config.json), listed
	// as one before it loads.
	generative bool
}

// lazyLoadedReason is the status reason of a model not loaded under
// LoadLazy.
const lazyLoadedReason = "not loaded (model load policy lazy): it loads on its next request"

// syncLazy records a model of the repository under LoadLazy: a model held
// loaded follows the repository as under LoadEager; one that is not is
// listed, UNAVAILABLE and unloaded, until a request loads it.
func (m *Manager) syncLazy(ctx context.Context, name string, entry *modelrepo.ModelEntry) error {
	if entry == nil || entry.Err != nil || entry.Config == nil {
		return m.sync(ctx, name, entry)
	}
	if err := m.beginOp(); err != nil {
		return err
	}
	defer m.ops.Done()
	generative := isGenerative(entry)
	md := m.lockModel(name)
	m.mu.Lock()
	md.lazy.entry, md.lazy.generative = entry, generative
	held := len(m.readyVersionsLocked(md)) > 0 || md.lazy.loading != nil
	m.mu.Unlock()
	if held {
		md.op.Unlock()
		return m.sync(ctx, name, entry)
	}
	defer md.op.Unlock()
	want := entry.Selected()
	broken := brokenVersions(entry)
	m.recordBroken(md, entry, want, broken)
	m.mu.Lock()
	for _, ve := range want {
		if md.versions[ve.Version] == nil {
			v := unavailableVersion(m, name, ve.Version, errors.New(lazyLoadedReason))
			v.unloaded, v.finalized = true, true
			m.putLocked(md, v)
		}
	}
	m.mu.Unlock()
	m.dropUnselected(md, want, broken)
	return nil
}

// touchLocked marks md used now, for the least-recently-used order.
func (m *Manager) touchLocked(md *model) {
	if md.lazy != nil {
		m.lazyTick++
		md.lazy.lastUse = m.lazyTick
	}
}

// acquireLazily loads the model a request names (LoadLazy), waiting for
// the load within ctx, then acquires the version; cause is the error
// acquire gave. A model that is broken, unknown or not loadable on demand
// gets cause back.
func (m *Manager) acquireLazily(ctx context.Context, name string, num int64, cause error) (*version, error) {
	for attempt := 0; ; attempt++ {
		if err := m.ensureLoaded(ctx, name, num, cause); err != nil {
			return nil, err
		}
		v, err := m.acquire(name, num)
		if err == nil || !errors.Is(err, ErrNotReady) || attempt == 3 {
			return v, err
		}
		cause = err // evicted again before this request got to it
	}
}

// ensureLoaded starts loading model name unless a load is in progress, and
// waits for it until ctx ends. The load itself runs on the Manager's
// context: a request that gives up does not stop it for the others.
func (m *Manager) ensureLoaded(ctx context.Context, name string, num int64, cause error) error {
	m.mu.Lock()
	md := m.models[name]
	if md == nil || md.lazy == nil || md.lazy.entry == nil || md.err != nil || m.closed {
		m.mu.Unlock()
		return cause
	}
	if v := md.versions[num]; num != 0 && (v == nil || v.state == StateUnavailable && !v.unloaded) {
		m.mu.Unlock()
		return cause // no such version, or a broken one
	}
	done := md.lazy.loading
	if done == nil {
		done = make(chan struct{})
		md.lazy.loading = done
		m.ops.Add(1)
		go m.lazyLoad(md, done)
	}
	m.mu.Unlock()
	start := time.Now()
	m.metrics.loadWaiting.With().Inc()
	defer func() {
		m.metrics.loadWaiting.With().Dec()
		m.metrics.loadWait.With(name).Observe(time.Since(start).Seconds())
	}()
	select {
	case <-done:
		m.mu.Lock()
		err := md.lazy.loadErr
		m.mu.Unlock()
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: model %s: waiting for it to load (model load policy lazy): %w", ErrNotReady, name, ctx.Err())
	}
}

// lazyLoad loads md after making room for it in the memory budget, and
// completes done. Loads run one at a time (lazySlot), so that two of them
// never count the same free memory.
func (m *Manager) lazyLoad(md *model, done chan struct{}) {
	defer m.ops.Done()
	start := time.Now()
	err := m.loadInBudget(md)
	m.mu.Lock()
	md.lazy.loadErr = err
	md.lazy.loading = nil
	if err == nil {
		m.touchLocked(md)
	}
	m.mu.Unlock()
	close(done)
	if err != nil {
		m.log.Error("model load on demand failed", "model", md.name, "error", err)
		return
	}
	m.metrics.loads.With(md.name).Inc()
	m.log.Info("model loaded on demand", "model", md.name, "duration", time.Since(start).Round(time.Millisecond))
	m.heldChanged()
}

// loadInBudget waits for the lazy load slot, evicts what must go for md to
// fit, waits until it is freed, and loads md.
func (m *Manager) loadInBudget(md *model) error {
	select {
	case m.lazySlot <- struct{}{}:
	case <-m.ctx.Done():
		return fmt.Errorf("%w: the server is shutting down", ErrClosed)
	}
	defer func() { <-m.lazySlot }()
	m.mu.Lock()
	entry := md.lazy.entry
	need := estimateBytes(entry)
	freed, err := m.makeRoomLocked(md, need)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for _, f := range freed {
		select {
		case <-f:
		case <-m.ctx.Done():
			return fmt.Errorf("%w: the server is shutting down", ErrClosed)
		}
	}
	if len(freed) > 0 {
		m.heldChanged()
	}
	if err := m.sync(m.ctx, md.name, entry); err != nil {
		return err
	}
	// The weights on the device may be larger than the files said.
	m.mu.Lock()
	freed, _ = m.makeRoomLocked(md, 0)
	m.mu.Unlock()
	if len(freed) > 0 {
		m.heldChanged()
	}
	return nil
}

// estimateBytes is a model's device memory before its weights are
// uploaded: the size of its selected versions' model files (an
// encoder-decoder's encoder file included).
func estimateBytes(entry *modelrepo.ModelEntry) int64 {
	var n int64
	for _, ve := range entry.Selected() {
		n += filesSize(ve) + versionFiles(entry.Config, ve).encSize
	}
	return n
}

// footprintLocked is the device memory md's loaded versions take on
// device d (version.footprintLocked).
func (m *Manager) footprintLocked(md *model, d int) int64 {
	var n int64
	for _, v := range md.versions {
		n += v.footprintLocked()[d]
	}
	return n
}

// makeRoomLocked unloads the least recently used held models (not keep)
// until need more bytes fit in the budget of each device keep is placed
// on beside what is held there, and returns the channels closed once they
// are freed. It fails when need alone exceeds a device's budget.
func (m *Manager) makeRoomLocked(keep *model, need int64) ([]<-chan struct{}, error) {
	var freed []<-chan struct{}
	for _, d := range m.devicesFor(keep.lazy.entry.Config) {
		f, err := m.makeRoomOnLocked(keep, d, need)
		freed = append(freed, f...)
		if err != nil {
			return freed, err
		}
	}
	return freed, nil
}

// makeRoomOnLocked is makeRoomLocked on device d.
func (m *Manager) makeRoomOnLocked(keep *model, d int, need int64) ([]<-chan struct{}, error) {
	budget := m.opts.MemoryBudget.For(d)
	if budget <= 0 {
		return nil, nil
	}
	if need > budget {
		return nil, fmt.Errorf("%w: model %s takes %d bytes of device memory (its model files), more than the whole budget of %d bytes of device %d (--model-memory-budget)", ErrNotReady, keep.name, need, budget, d)
	}
	var held []*model
	used := need
	for _, md := range m.models {
		if md.lazy == nil || len(m.readyVersionsLocked(md)) == 0 {
			continue
		}
		n := m.footprintLocked(md, d)
		used += n
		if md != keep && md.lazy.loading == nil && n > 0 {
			held = append(held, md)
		}
	}
	slices.SortFunc(held, func(a, b *model) int { return int(a.lazy.lastUse - b.lazy.lastUse) })
	var freed []<-chan struct{}
	for _, md := range held {
		if used <= budget {
			break
		}
		n := m.footprintLocked(md, d)
		for _, v := range md.versions {
			if v.state == StateReady {
				freed = append(freed, m.unloadLocked(v, false))
			}
		}
		used -= n
		m.metrics.evictions.With(md.name).Inc()
		m.log.Info("evicting the least recently used model", "model", md.name, "device", d, "bytes", n, "for", keep.name, "budget", budget)
	}
	return freed, nil
}

// heldChanged tells Options.OnHeldChange that the models held changed.
func (m *Manager) heldChanged() {
	if f := m.opts.OnHeldChange; f != nil {
		go f()
	}
}

// memoryUse is the device memory the held models take.
type memoryUse struct {
	perModel map[string]int64 // as the budget counts it, all devices together
	used     map[int]int64    // as the budget counts it, per device
	weights  map[int]int64    // the weights on each device
}

// memoryLocked returns the device memory the held models take.
func (m *Manager) memoryLocked() memoryUse {
	u := memoryUse{perModel: map[string]int64{}, used: map[int]int64{}, weights: map[int]int64{}}
	for _, md := range m.models {
		if len(m.readyVersionsLocked(md)) == 0 {
			continue
		}
		for _, v := range md.versions {
			for d, n := range v.footprintLocked() {
				u.perModel[md.name] += n
				u.used[d] += n
			}
			if v.state != StateReady {
				continue
			}
			for i, pm := range v.models {
				u.weights[pm.Device()] += v.weightsOn(i)
			}
		}
	}
	return u
}
