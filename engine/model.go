package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// ErrClosed is wrapped by the errors of a Model used after Close.
var ErrClosed = errors.New("engine: model closed")

// Model is an imported graph that executables are built for: optimized once
// (the shape-independent passes, whose weights every executable then
// shares) and its weights uploaded to the device on first use, shared by
// every executable built for it. Its methods are safe for concurrent use.
//
// A graph with string values is cut into host stages around a device graph
// (fxgraph.SplitHost): Host returns the cut, Graph and everything built are
// the device graph's. A graph of string operators only has an empty device
// graph (Host().Device is nil): it runs on the host.
type Model struct {
	e *Engine
	// host is the graph's host stages, nil when it runs whole on the device.
	host *fxgraph.HostSplit
	// graph is nil once closed, so that a closed model does not keep its
	// host weights alive.
	graph atomic.Pointer[fxgraph.Graph]
	// src imports a deferred graph at concrete sizes; nil for others.
	src     *importer.Model
	hash    string // content hash keying the StableHLO cache; "" for none
	weights *Weights
	log     *slog.Logger
}

// LoadOptions configure one model.
type LoadOptions struct {
	// Logger receives the model's compile-cache warnings; nil means the
	// engine's.
	Logger *slog.Logger
	// Device is the index of the client's device the model is placed on
	// (0 ≤ Device < pjrt.Client.Devices()): its weights are uploaded there
	// and its executables run there. Load a model once per device to serve
	// it on several.
	Device int
}

// Load imports the model file at path (any format importer.Load reads).
// With a compile cache, the content of the file's directory (the model
// and what sits beside it, such as ONNX external data) is hashed first: it
// keys the model's lowered programs in the cache.
func (e *Engine) Load(path string, o LoadOptions) (*Model, error) {
	var hash string
	if e.cache != nil {
		h, err := hashVersionDir(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		hash = h
	}
	src, err := importer.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := e.NewModel(src.Graph, o)
	if err != nil {
		return nil, err
	}
	m.hash = hash
	if src.Graph.IsDeferred() {
		m.src = src
	}
	return m, nil
}

// Import imports the model file at path as its importer reads it: not
// optimized, nothing built (a pipeline stitches such graphs, then serves
// the result with NewModel).
func (e *Engine) Import(path string) (*fxgraph.Graph, error) { return importer.Load(path) }

// NewModel returns a model of the imported graph g (which it may optimize
// in place of a copy, never changing g), its host stages cut off. Its
// programs are lowered anew in every process: without a file, nothing keys
// them in the cache.
func (e *Engine) NewModel(g *fxgraph.Graph, o LoadOptions) (*Model, error) {
	if n := e.client.Devices(); o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("engine: no device %d to place the model on (the %s client has %d)", o.Device, e.client.Platform(), n)
	}
	host, err := fxgraph.SplitHost(g)
	if err != nil {
		return nil, err
	}
	m := &Model{e: e, host: host, weights: NewWeightsOn(e.client, o.Device), log: o.Logger}
	if m.log == nil {
		m.log = e.log
	}
	switch {
	case host == nil:
	case host.Device == nil:
		g = fxgraph.New()
	default:
		g = host.Device
	}
	m.graph.Store(e.lowerer.Optimize(g))
	return m, nil
}

// On returns the model placed on device dev of the client as well: the
// same graph (imported and optimized once, shared) with a weight store of
// its own on dev, so that its executables run there. Each placement is
// closed on its own.
func (m *Model) On(dev int) (*Model, error) {
	if n := m.e.client.Devices(); dev < 0 || dev >= n {
		return nil, fmt.Errorf("engine: no device %d to place the model on (the %s client has %d)", dev, m.e.client.Platform(), n)
	}
	g, err := m.liveGraph()
	if err != nil {
		return nil, err
	}
	r := &Model{e: m.e, host: m.host, src: m.src, hash: m.hash, weights: NewWeightsOn(m.e.client, dev), log: m.log}
	r.graph.Store(g)
	return r, nil
}

// Host returns the model's host stages, nil when it runs whole on the
// device.
func (m *Model) Host() *fxgraph.HostSplit { return m.host }

// Graph returns the model's optimized graph, nil once closed: for a model
// whose import waits for its input sizes, a deferred graph that carries
// only the model's signature (fxgraph.Graph.IsDeferred).
func (m *Model) Graph() *fxgraph.Graph { return m.graph.Load() }

func (m *Model) liveGraph() (*fxgraph.Graph, error) {
	g := m.graph.Load()
	if g == nil {
		return nil, ErrClosed
	}
	return g, nil
}

// GraphAt returns the optimized graph for the symbol sizes in dims: the
// model's, or a deferred model's imported at those sizes and optimized.
func (m *Model) GraphAt(dims map[string]int64) (*fxgraph.Graph, error) {
	g, err := m.liveGraph()
	if err != nil || m.src == nil {
		return g, err
	}
	if g, err = m.src.At(dims); err != nil {
		return nil, err
	}
	return m.e.lowerer.Optimize(g), nil
}

// OutputShapes returns the shapes of the model's outputs when its input
// symbols take the sizes in dims (lower.Lowerer.OutputShapes).
func (m *Model) OutputShapes(dims map[string]int64) ([][]int64, error) {
	g, err := m.GraphAt(dims)
	if err != nil {
		return nil, err
	}
	return m.e.lowerer.OutputShapes(g, dims)
}

// Lower lowers the model for the symbol sizes in dims.
func (m *Model) Lower(dims map[string]int64) (*lower.Program, error) {
	g, err := m.GraphAt(dims)
	if err != nil {
		return nil, err
	}
	m.e.lowerings.Add(1)
	return m.e.lowerer.LowerOptimized(g, dims)
}

// Weights returns the model's weight store.
func (m *Model) Weights() *Weights { return m.weights }

// Device returns the index of the device the model is placed on
// (LoadOptions.Device).
func (m *Model) Device() int { return m.weights.Device() }

// Upload copies a host tensor to the model's device, for Execute.
func (m *Model) Upload(ctx context.Context, t *tensor.Tensor) (*pjrt.Buffer, error) {
	return m.e.client.UploadTo(ctx, t, m.weights.Device())
}

// Close frees the model's weights on the device and drops its graph.
// Executables built for it must be closed first. It is safe to call twice.
func (m *Model) Close() error {
	m.graph.Store(nil)
	return m.weights.Close()
}

// Build says how Model.Build made an executable, for a caller's metrics.
type Build struct {
	// Lowered: the graph was lowered (its program was not in the cache).
	Lowered bool
	// Compiled: the program was compiled (not deserialized from the cache).
	Compiled bool
	// Cache lists the compile cache's answers, in order.
	Cache []CacheResult
}

// CacheResult is one answer of the compile cache.
type CacheResult struct {
	// Kind is CacheStableHLO or CacheExecutable.
	Kind string
	// Result is "hit", "miss" or "corrupt" (found damaged, deleted and
	// rebuilt).
	Result string
}

// Kinds of compile-cache entries (CacheResult.Kind).
const (
	CacheStableHLO  = "stablehlo"
	CacheExecutable = "executable"
)

func (b *Build) cache(kind, result string) {
	b.Cache = append(b.Cache, CacheResult{Kind: kind, Result: result})
}

// Build returns the model's executable for the symbol sizes in dims: the
// graph lowered (or its program read from the StableHLO cache) and
// compiled (or deserialized from the executable cache). A cache entry that
// is corrupt, an executable that does not deserialize and cached StableHLO
// that does not compile are deleted, logged as warnings and rebuilt, so
// that a damaged cache never keeps a model from building.
func (m *Model) Build(ctx context.Context, dims map[string]int64) (*Executable, Build, error) {
	var b Build
	prog, cachedKey, err := m.program(dims, &b)
	if err != nil {
		return nil, b, err
	}
	x, err := m.compile(ctx, prog, &b)
	if err == nil || cachedKey == "" || ctx.Err() != nil {
		return x, b, err
	}
	m.log.Warn("compile cache: cached StableHLO does not compile; deleted, lowering again", "dims", dims, "key", cachedKey, "error", err)
	b.cache(CacheStableHLO, "corrupt")
	if derr := m.e.cache.Delete(cachedKey); derr != nil {
		m.log.Warn("compile cache: cannot delete entry", "key", cachedKey, "error", derr)
	}
	if prog, err = m.lower(dims, cachedKey, &b); err != nil {
		return nil, b, err
	}
	x, err = m.compile(ctx, prog, &b)
	return x, b, err
}

// Compile compiles prog, lowered from the model, bound to the model's
// weights (uploading those not on the device yet), or deserializes it from
// the executable cache; cached says which.
func (m *Model) Compile(ctx context.Context, prog *lower.Program) (x *Executable, cached bool, err error) {
	var b Build
	x, err = m.compile(ctx, prog, &b)
	return x, err == nil && !b.Compiled, err
}

// program returns the lowered program for dims, from the StableHLO cache
// when it holds it; cachedKey is the entry's key when it came from there.
func (m *Model) program(dims map[string]int64, b *Build) (prog *lower.Program, cachedKey string, err error) {
	e := m.e
	if e.cache == nil || m.hash == "" {
		prog, err = m.lower(dims, "", b)
		return prog, "", err
	}
	key := programKey(e.buildID, m.hash, dims, e.lowerer.Options())
	data, ok, err := e.cache.Get(key)
	m.cacheGetError(CacheStableHLO, key, err, b)
	if ok {
		g, gerr := m.liveGraph()
		if gerr != nil {
			return nil, "", gerr
		}
		prog, err := decodeProgram(data, g)
		if err == nil {
			b.cache(CacheStableHLO, "hit")
			return prog, key, nil
		}
		m.log.Warn("compile cache: unusable StableHLO entry; lowering again", "key", key, "error", err)
	}
	b.cache(CacheStableHLO, "miss")
	prog, err = m.lower(dims, key, b)
	return prog, "", err
}

// lower lowers the graph for dims and, with key, stores the program in the
// StableHLO cache.
func (m *Model) lower(dims map[string]int64, key string, b *Build) (*lower.Program, error) {
	prog, err := m.Lower(dims)
	b.Lowered = true
	if err != nil {
		return nil, err
	}
	if key != "" {
		var data []byte
		g, err := m.liveGraph()
		if err == nil {
			data, err = encodeProgram(prog, g)
		}
		if err == nil {
			err = m.e.cache.Put(key, data)
		}
		if err != nil {
			m.log.Warn("compile cache: cannot store StableHLO", "error", err)
		}
	}
	return prog, nil
}

// compile deserializes prog's executable from the cache or compiles it
// (and stores it in the cache).
func (m *Model) compile(ctx context.Context, prog *lower.Program, b *Build) (*Executable, error) {
	e := m.e
	if x := m.cachedExecutable(ctx, prog, b); x != nil {
		return x, nil
	}
	x, err := Compile(ctx, e.client, prog, m.weights)
	if err != nil {
		return nil, err
	}
	e.compiles.Add(1)
	b.Compiled = true
	if e.cache != nil {
		data, err := x.Serialize()
		switch {
		case err != nil:
			e.unsupported(m.log, err, "compile cache: cannot serialize executables; caching StableHLO only")
		default:
			if err := e.cache.Put(executableKey(e.client, prog), data); err != nil {
				m.log.Warn("compile cache: cannot store executable", "error", err)
			}
		}
	}
	return x, nil
}

// cachedExecutable returns prog's executable from the cache, or nil. An
// entry that is corrupt or does not deserialize is deleted (and rebuilt by
// the caller).
func (m *Model) cachedExecutable(ctx context.Context, prog *lower.Program, b *Build) *Executable {
	e := m.e
	if e.cache == nil {
		return nil
	}
	key := executableKey(e.client, prog)
	data, ok, err := e.cache.Get(key)
	m.cacheGetError(CacheExecutable, key, err, b)
	if ok {
		x, err := m.deserialize(ctx, prog, data)
		if err == nil {
			b.cache(CacheExecutable, "hit")
			return x
		}
		e.unsupported(m.log, err, "compile cache: cannot deserialize executables; compiling instead")
		if !errors.Is(err, errors.ErrUnsupported) && ctx.Err() == nil {
			b.cache(CacheExecutable, "corrupt")
			if derr := e.cache.Delete(key); derr != nil {
				m.log.Warn("compile cache: cannot delete entry", "key", key, "error", derr)
			}
		}
	}
	b.cache(CacheExecutable, "miss")
	return nil
}

func (m *Model) deserialize(ctx context.Context, prog *lower.Program, data []byte) (*Executable, error) {
	exe, err := m.e.client.Deserialize(ctx, data)
	if err != nil {
		return nil, err
	}
	return bind(ctx, m.e.client, exe, prog, m.weights)
}

// cacheGetError logs (and counts) the error of a cache lookup.
func (m *Model) cacheGetError(kind, key string, err error, b *Build) {
	switch {
	case err == nil:
	case errors.Is(err, ErrCorruptEntry):
		b.cache(kind, "corrupt")
		m.log.Warn("compile cache: corrupt entry deleted; rebuilding it", "kind", kind, "key", key, "error", err)
	default:
		m.log.Warn("compile cache: unreadable entry", "kind", kind, "key", key, "error", err)
	}
}
