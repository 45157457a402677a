package serving

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/modelrepo"
)

// A version is served on one or several devices of the client: one
// engine.Model per device (the graph shared, the weights each its own) and
// one executable per (bucket, device). Each execution of runBucket runs on
// the placement with the fewest executions in flight, the first choice
// rotating among equally loaded ones (round robin when idle). Sequences
// and generation keep to the first placement: their state lives there.

// validateDevices checks Options.Devices: device indexes, each once.
func validateDevices(devices []int) error {
	for i, d := range devices {
		if d < 0 || slices.Contains(devices[:i], d) {
			return fmt.Errorf("serving: Options.Devices %v: want distinct device indexes >= 0", devices)
		}
	}
	return nil
}

// devicesFor returns the devices a model with config cfg is placed on:
// its config.yaml's devices, else Options.Devices, else device 0.
func (m *Manager) devicesFor(cfg *modelrepo.Config) []int {
	switch {
	case cfg != nil && len(cfg.Devices) > 0:
		return cfg.Devices
	case len(m.opts.Devices) > 0:
		return m.opts.Devices
	}
	return []int{0}
}

// devices returns the devices v is placed on; a generative version keeps
// to the first (its sequences' caches live there).
func (v *version) devices() []int {
	d := v.m.devicesFor(v.cfg)
	if v.cfg.Generate != nil {
		d = d[:1]
	}
	return d
}

// place makes model (loaded on devices[0]) v's first placement and places
// it on the other devices too. On error the caller frees v, which closes
// what was placed.
func (v *version) place(model *engine.Model, devices []int) error {
	v.model = model
	v.models = []*engine.Model{model}
	for _, d := range devices[1:] {
		r, err := model.On(d)
		if err != nil {
			return err
		}
		v.models = append(v.models, r)
	}
	v.inflight = make([]atomic.Int64, len(v.models))
	return nil
}

// pick returns the placement the next execution runs on, counted in
// flight until the caller decrements v.inflight[p].
func (v *version) pick() int {
	n := len(v.inflight)
	best := 0
	if n > 1 {
		first := int(v.turn.Add(1) % uint64(n))
		best = first
		for k := 1; k < n; k++ {
			if p := (first + k) % n; v.inflight[p].Load() < v.inflight[best].Load() {
				best = p
			}
		}
	}
	v.inflight[best].Add(1)
	return best
}

// closeModels frees the weights of every placement of v.
func (v *version) closeModels() {
	models := v.models
	if len(models) == 0 && v.model != nil {
		models = []*engine.Model{v.model}
	}
	for _, pm := range models {
		if err := pm.Close(); err != nil {
			v.log().Warn("free weights", "device", pm.Device(), "error", err)
		}
	}
}

// footprintLocked returns, per device, the device memory v takes as the
// memory budget counts it: a READY version's weights on each of its
// devices, or its model files' size while that is larger (before the
// first bucket uploads the weights); a loading version's model files on
// each device it is being placed on, once checkFits reserved them. Called
// with Manager.mu held.
func (v *version) footprintLocked() map[int]int64 {
	if v.pipe != nil && (v.state == StateReady || v.state == StateLoading) {
		return map[int]int64{0: v.deviceBytes()} // a pipeline's segments load on device 0
	}
	switch v.state {
	case StateReady:
		if len(v.models) > 0 {
			f := map[int]int64{}
			for i, pm := range v.models {
				f[pm.Device()] += max(v.weightsOn(i), v.files.bytes())
			}
			return f
		}
		fallthrough
	case StateLoading:
		if v.cfg == nil || !v.reserved {
			return nil
		}
		f := map[int]int64{}
		for _, d := range v.m.devicesFor(v.cfg) {
			f[d] += v.files.bytes()
		}
		return f
	}
	return nil
}

// checkFits refuses, under LoadEager with a memory budget, to load v when
// its model files would not fit on one of its devices beside the models
// loaded or loading there; else it reserves them, so that loads running
// at once count each other. (Under LoadLazy, makeRoomLocked unloads
// models instead.)
func (m *Manager) checkFits(v *version, devices []int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opts.LoadPolicy != LoadLazy {
		if err := m.fitsLocked(v, devices); err != nil {
			return err
		}
	}
	v.reserved = true
	return nil
}

// fitsLocked is checkFits's test.
func (m *Manager) fitsLocked(v *version, devices []int) error {
	for _, d := range devices {
		budget := m.opts.MemoryBudget.For(d)
		if budget <= 0 {
			continue
		}
		var used int64
		for _, md := range m.models {
			for _, o := range md.versions {
				if o != v && (o.name != v.name || o.num != v.num) {
					used += o.footprintLocked()[d]
				}
			}
		}
		if used+v.files.bytes() > budget {
			return fmt.Errorf("serving: %s does not fit on device %d: its model files take %d bytes%s and the models loaded there %d, more than the device's memory budget of %d bytes (--model-memory-budget)",
				v, d, v.files.bytes(), v.files.detail(), used, budget)
		}
	}
	return nil
}

// weightsOn is the device memory of v's weights on its i-th placement: an
// encoder-decoder's encoder weights count on the first, where they are.
func (v *version) weightsOn(i int) int64 {
	n := v.models[i].Weights().Bytes()
	if i == 0 && v.encoder != nil {
		n += v.encoder.Weights().Bytes()
	}
	return n
}

// modelFiles are the files a version loads onto its device: its model
// file and, for an encoder-decoder, its encoder (generate.encoder.file).
type modelFiles struct {
	model   int64  // the model file's size
	encoder string // the encoder file's name; "" for others
	encSize int64  // its size (0 while it is missing: the load says so)
}

// versionFiles returns ve's model files under config cfg.
func versionFiles(cfg *modelrepo.Config, ve modelrepo.VersionEntry) modelFiles {
	f := modelFiles{model: ve.Size}
	if cfg == nil || cfg.Generate == nil || cfg.Generate.Encoder == nil || ve.Path == "" {
		return f
	}
	f.encoder = cfg.Generate.Encoder.File
	if fi, err := os.Stat(filepath.Join(filepath.Dir(ve.Path), f.encoder)); err == nil {
		f.encSize = fi.Size()
	}
	return f
}

// bytes is the files' size together.
func (f modelFiles) bytes() int64 { return f.model + f.encSize }

// detail names the files' sizes one by one when there are several:
// " (model file N bytes + generate.encoder.file encoder.pt2 M bytes)".
func (f modelFiles) detail() string {
	if f.encoder == "" {
		return ""
	}
	return fmt.Sprintf(" (model file %d bytes + generate.encoder.file %s %d bytes)", f.model, f.encoder, f.encSize)
}
