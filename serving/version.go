package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// version is one version of a model as the Manager serves it: its graph and
// signature, its weights on the device and one executable per bucket.
type version struct {
	m     *Manager
	name  string
	num   int64
	label string // num as the version label of metrics
	entry modelrepo.VersionEntry
	cfg   *modelrepo.Config

	// Set by load and read-only afterwards.
	graph   *fxgraph.Graph
	sig     *signature
	hash    string // content hash of the version directory
	buckets map[string]*bucket
	order   []*bucket // buckets in allBuckets order
	weights *Weights
	// batcher groups requests into batches; nil when the version runs each
	// request alone (batching off, or inputs without a batch dim).
	// batchBuckets maps each queue key and batch size to its bucket, sizers
	// each queue key to its batch size learner.
	batcher      *batching.Batcher
	batchBuckets map[string]map[int64]*bucket
	sizers       map[string]*sizer

	// ctx is cancelled once the version is unloading and its requests have
	// finished, so that a compile no request waits for any more stops.
	ctx      context.Context
	cancel   context.CancelFunc
	compiles sync.WaitGroup // compile goroutines

	// Guarded by Manager.mu.
	state     ModelState
	reason    string
	loaded    bool          // was READY at some point
	refs      int           // in-flight requests
	forget    bool          // drop from the model's versions once freed
	finalized bool          // freed, and its state settled
	drain     chan struct{} // closed when refs is 0 after unloading began; nil before
	freed     chan struct{} // closed once executables and weights are freed; nil before unloading
}

func newVersion(m *Manager, name string, ve modelrepo.VersionEntry, cfg *modelrepo.Config) *version {
	v := &version{m: m, name: name, num: ve.Version, label: strconv.FormatInt(ve.Version, 10), entry: ve, cfg: cfg, state: StateLoading}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	return v
}

// unavailableVersion records a version that cannot be loaded at all (its
// directory is broken).
func unavailableVersion(m *Manager, name string, num int64, reason error) *version {
	v := &version{m: m, name: name, num: num, label: strconv.FormatInt(num, 10), state: StateUnavailable, reason: reason.Error()}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	return v
}

func (v *version) String() string { return fmt.Sprintf("model %s version %d", v.name, v.num) }

func (v *version) log() *slog.Logger {
	return v.m.log.With("model", v.name, "version", v.num)
}

// load imports the model file, merges its signature with the config, and
// with warmup eager compiles every bucket. On error the caller frees v.
func (v *version) load(ctx context.Context) error {
	start := time.Now()
	if err := v.checkPlugin(); err != nil {
		return err
	}
	if v.m.cache != nil {
		hash, err := hashVersionDir(filepath.Dir(v.entry.Path))
		if err != nil {
			return err
		}
		v.hash = hash
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g, err := importer.Load(v.entry.Path)
	if err != nil {
		return err
	}
	// Shape-independent passes once per version, so the weights they make
	// are shared by every bucket (and found by the StableHLO cache).
	v.graph = v.m.lowerer.Optimize(g)
	cfgFile := filepath.Join(filepath.Dir(filepath.Dir(v.entry.Path)), modelrepo.ConfigFile)
	sig, err := buildSignature(g, v.cfg, cfgFile)
	if err != nil {
		return err
	}
	v.sig = sig
	if len(sig.Defaulted) > 0 {
		for _, sym := range sig.Defaulted {
			v.log().Info("no buckets for symbol in config.yaml; using the default", "symbol", sym, "buckets", fmt.Sprint(defaultBuckets()), "config", cfgFile)
		}
	}
	if len(sig.UnusedBuckets) > 0 {
		v.log().Warn("config.yaml has buckets for symbols no input has", "symbols", sig.UnusedBuckets, "config", cfgFile)
	}
	v.order = sig.allBuckets()
	v.buckets = make(map[string]*bucket, len(v.order))
	for _, b := range v.order {
		v.buckets[b.name] = b
	}
	v.weights = NewWeights(v.m.client)
	if err := v.setupBatching(cfgFile); err != nil {
		return err
	}

	if v.cfg.Warmup == modelrepo.WarmupEager || v.m.opts.CompileAll {
		for i, b := range v.order {
			if _, err := v.executable(ctx, b, fmt.Sprintf("%d/%d", i+1, len(v.order))); err != nil {
				return fmt.Errorf("warmup: %w", err)
			}
		}
	}
	v.log().Info("model version loaded", "file", v.entry.Path, "inputs", v.sig.inputNames(), "buckets", len(v.order),
		"warmup", string(v.cfg.Warmup), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkPlugin rejects a config whose pjrt_plugin is not the Manager's client.
func (v *version) checkPlugin() error {
	p := v.cfg.PJRTPlugin
	c := v.m.client
	if p == "" || p == c.Platform() || p == c.PluginPath() {
		return nil
	}
	if abs, err := filepath.Abs(p); err == nil {
		if r, err := filepath.EvalSymlinks(abs); err == nil && r == c.PluginPath() {
			return nil
		}
	}
	return fmt.Errorf("serving: config.yaml pjrt_plugin is %q, but this server runs only %s (%s)", p, c.Platform(), c.PluginPath())
}

// executable returns the bucket's executable, compiling it on first use.
// Concurrent callers share one compile, run on a goroutine of its own so
// that a caller giving up does not cancel it for the others; a failed
// compile is reported to every waiter and retried by the next caller.
// progress ("3/7") marks a warmup compile in the log line.
func (v *version) executable(ctx context.Context, b *bucket, progress string) (*Executable, error) {
	b.mu.Lock()
	if b.exe != nil {
		e := b.exe
		b.mu.Unlock()
		return e, nil
	}
	c := b.pending
	if c == nil {
		c = &compileCall{done: make(chan struct{})}
		b.pending = c
		v.compiles.Add(1)
		go v.compile(b, c, progress)
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.exe, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("serving: %s: waiting for bucket %s to compile: %w", v, b.name, ctx.Err())
	}
}

// compile builds the bucket's executable and completes c.
func (v *version) compile(b *bucket, c *compileCall, progress string) {
	defer v.compiles.Done()
	start := time.Now()
	exe, compiled, err := v.build(v.ctx, b)
	d := time.Since(start)
	if err != nil {
		err = fmt.Errorf("serving: %s: bucket %s: %w", v, b.name, err)
		v.log().Error("compile failed", "bucket", b.name, "error", err)
	} else {
		msg := "loaded bucket from the compile cache"
		if compiled {
			msg = "compiled bucket"
			v.m.metrics.compileSeconds.With(v.name, v.label).Observe(d.Seconds())
		}
		attrs := []any{"model", v.name, "version", v.num, "bucket", b.name}
		if progress != "" {
			attrs = append(attrs, "progress", progress)
		}
		v.m.log.Info(msg, append(attrs, "duration", d.Round(time.Microsecond))...)
	}
	b.mu.Lock()
	b.exe = exe
	b.pending = nil
	c.exe, c.err = exe, err
	b.mu.Unlock()
	close(c.done)
	if hook := v.m.opts.OnBucket; hook != nil {
		ev := BucketEvent{Model: v.name, Version: v.num, Bucket: b.name, Cached: err == nil && !compiled, Duration: d, Err: err}
		fmt.Sscanf(progress, "%d/%d", &ev.Done, &ev.Total)
		hook(ev)
	}
}

// build lowers the graph for b (or reads the StableHLO from the cache) and
// compiles it (or deserializes the executable from the cache); compiled
// says which.
func (v *version) build(ctx context.Context, b *bucket) (exe *Executable, compiled bool, err error) {
	prog, err := v.program(b)
	if err != nil {
		return nil, false, err
	}
	m := v.m
	if m.cache != nil {
		key := executableKey(m.client, prog)
		data, ok, err := m.cache.Get(key)
		if err != nil {
			v.log().Warn("compile cache: unreadable executable entry", "key", key, "error", err)
		}
		if ok {
			exe, err := v.deserialize(ctx, prog, data)
			if err == nil {
				m.metrics.cacheResult(cacheExecutable, true)
				return exe, false, nil
			}
			m.unsupported(err, "compile cache: cannot deserialize executables; compiling instead")
		}
		m.metrics.cacheResult(cacheExecutable, false)
	}
	exe, err = Compile(ctx, m.client, prog, v.weights)
	if err != nil {
		return nil, false, err
	}
	m.compiles.Add(1)
	m.metrics.compilations.With(v.name, v.label, b.name).Inc()
	if m.cache != nil {
		data, err := exe.Serialize()
		switch {
		case err != nil:
			m.unsupported(err, "compile cache: cannot serialize executables; caching StableHLO only")
		default:
			if err := m.cache.Put(executableKey(m.client, prog), data); err != nil {
				v.log().Warn("compile cache: cannot store executable", "error", err)
			}
		}
	}
	return exe, true, nil
}

func (v *version) deserialize(ctx context.Context, prog *lower.Program, data []byte) (*Executable, error) {
	pe, err := v.m.client.Deserialize(ctx, data)
	if err != nil {
		return nil, err
	}
	return bind(ctx, v.m.client, pe, prog, v.weights)
}

// program returns the bucket's lowered program, from the StableHLO cache
// when it holds it.
func (v *version) program(b *bucket) (*lower.Program, error) {
	m := v.m
	var key string
	if m.cache != nil {
		key = programKey(m.buildID, v.hash, b.modelDims, m.lowerer.Options())
		data, ok, err := m.cache.Get(key)
		if err != nil {
			v.log().Warn("compile cache: unreadable StableHLO entry", "key", key, "error", err)
		}
		if ok {
			prog, err := decodeProgram(data, v.graph)
			if err == nil {
				m.metrics.cacheResult(cacheStableHLO, true)
				return prog, nil
			}
			v.log().Warn("compile cache: unusable StableHLO entry; lowering again", "key", key, "error", err)
		}
		m.metrics.cacheResult(cacheStableHLO, false)
	}
	prog, err := m.lowerer.Lower(v.graph, b.modelDims)
	m.lowerings.Add(1)
	if err != nil {
		return nil, err
	}
	if m.cache != nil {
		data, err := encodeProgram(prog)
		if err == nil {
			err = m.cache.Put(key, data)
		}
		if err != nil {
			v.log().Warn("compile cache: cannot store StableHLO", "error", err)
		}
	}
	return prog, nil
}

// free waits for the version's batches and compiles and frees its
// executables and weights. It is called once no request uses the version
// (a batch may still execute for requests whose clients went away).
func (v *version) free() {
	if v.batcher != nil {
		if err := v.batcher.Shutdown(context.Background()); err != nil {
			v.log().Warn("batcher shutdown", "error", err)
		}
	}
	v.cancel()
	v.compiles.Wait()
	for _, b := range v.order {
		b.mu.Lock()
		if b.exe != nil {
			if err := b.exe.Close(); err != nil {
				v.log().Warn("close executable", "bucket", b.name, "error", err)
			}
			b.exe = nil
		}
		b.mu.Unlock()
	}
	if v.weights != nil {
		if err := v.weights.Close(); err != nil {
			v.log().Warn("free weights", "error", err)
		}
	}
	// Drop the host copies too: an unloaded or failed version stays known
	// (UNAVAILABLE) but must not keep the model's weights in memory.
	v.graph, v.buckets, v.order, v.batchBuckets, v.sizers = nil, nil, nil, nil, nil
}

// call is one request prepared for execution: its inputs in signature
// order, the size of each symbol, and the outputs it wants. runBucket fills
// outs.
type call struct {
	inputs  []*tensor.Tensor
	dims    map[string]int64
	outputs []int // indices into signature.Outputs, ascending
	outs    []*tensor.Tensor
}

// runTimes are the phases of one runBucket.
type runTimes struct {
	wait    time.Duration // until the executable was there
	compute time.Duration // upload, execute, download
}

// runBucket executes calls together in bucket b: each input is built at the
// bucket's shape, each call's tensor written straight into its rows of it
// (offsets[i] along the batch dim; nil offsets stack the calls in order, one
// call at offset 0), the rest padded with the input's pad value; each call's
// outputs are sliced straight out of the bucket's outputs along every dim
// that follows a symbol. The calls must have been validated against the
// signature and fit b together (the batcher's job for several calls). It is
// the unit the batcher runs; an unbatched Infer runs one call.
func (v *version) runBucket(ctx context.Context, b *bucket, calls []*call, offsets []int64) (runTimes, error) {
	var t runTimes
	if len(calls) == 0 {
		return t, nil
	}
	offsets, err := v.rowOffsets(b, calls, offsets)
	if err != nil {
		return t, err
	}
	start := time.Now()
	exe, err := v.executable(ctx, b, "")
	t.wait = time.Since(start)
	if err != nil {
		return t, err
	}
	inputs := make([]*tensor.Tensor, len(v.sig.Inputs))
	for i := range v.sig.Inputs {
		inputs[i] = v.assemble(b, i, calls, offsets)
	}
	start = time.Now()
	outs, err := exe.Run(ctx, inputs)
	t.compute = time.Since(start)
	if err != nil {
		return t, fmt.Errorf("serving: %s: bucket %s: %w", v, b.name, err)
	}
	if len(outs) != len(v.sig.Outputs) {
		return t, fmt.Errorf("serving: %s: bucket %s returned %d outputs, the model has %d", v, b.name, len(outs), len(v.sig.Outputs))
	}
	for k, o := range outs {
		if want := v.sig.Outputs[k].DType; o.DType != want {
			outs[k] = o.Convert(want) // int64 outputs narrowed for the device
		}
	}
	for ci, c := range calls {
		c.outs = c.outs[:0]
		for _, k := range c.outputs {
			c.outs = append(c.outs, v.extract(b, k, outs[k], c, offsets[ci], len(calls) > 1))
		}
	}
	return t, nil
}

// rowOffsets returns where each call's rows start along the batch dim:
// given (from the batcher) or, when nil, stacked in order. It checks that
// the calls fit b and that their rows do not overlap.
func (v *version) rowOffsets(b *bucket, calls []*call, given []int64) ([]int64, error) {
	if len(calls) > 1 && v.sig.batchErr != nil {
		return nil, fmt.Errorf("serving: %s cannot run %d requests in one batch: %w", v, len(calls), v.sig.batchErr)
	}
	if given != nil && len(given) != len(calls) {
		return nil, fmt.Errorf("serving: %s: %d offsets for %d requests", v, len(given), len(calls))
	}
	offsets := make([]int64, len(calls))
	var rows int64 // the end of the rows placed so far
	for i, c := range calls {
		offsets[i] = rows
		if given != nil {
			if given[i] < rows {
				return nil, fmt.Errorf("serving: %s: request %d starts at row %d, inside the rows before it (which end at %d)", v, i, given[i], rows)
			}
			offsets[i] = given[i]
		}
		for _, sym := range v.sig.Symbols {
			n := c.dims[sym]
			if sym == modelrepo.BatchSymbol {
				rows = offsets[i] + n
				n = rows
			}
			if n > b.dims[sym] {
				return nil, fmt.Errorf("serving: %s: requests do not fit bucket %s (%s is %d)", v, b.name, sym, n)
			}
		}
	}
	return offsets, nil
}

// assemble builds input i at the bucket's shape from the calls.
func (v *version) assemble(b *bucket, i int, calls []*call, offsets []int64) *tensor.Tensor {
	in := &v.sig.Inputs[i]
	shape := b.inShapes[i]
	if len(calls) == 1 && equalShape(calls[0].inputs[i].Shape, shape) {
		return calls[0].inputs[i] // fits the bucket exactly: no copy
	}
	dst := tensor.New(in.DType, shape...)
	fill(dst.Data, in.pad)
	elem := int64(in.DType.Size())
	for ci, c := range calls {
		src := c.inputs[i]
		dstOff := make([]int64, len(shape))
		if offsets[ci] != 0 {
			dstOff[in.batchAxis] = offsets[ci]
		}
		copyBlock(dst.Data, shape, dstOff, src.Data, src.Shape, make([]int64, len(shape)), src.Shape, elem)
	}
	return dst
}

// extract cuts call c's part out of output k: along the batch dim (when
// several calls ran) its rows, along every other dim that follows a symbol
// the request's size. A dim the server cannot relate to a symbol (unknown in
// the model's signature) is returned at its executed, possibly padded, size.
func (v *version) extract(b *bucket, k int, out *tensor.Tensor, c *call, offset int64, batched bool) *tensor.Tensor {
	o := &v.sig.Outputs[k]
	size := append([]int64(nil), out.Shape...)
	off := make([]int64, len(size))
	if len(o.Dims) == len(size) {
		for d, spec := range o.Dims {
			if !spec.isSymbol() || out.Shape[d] != b.dims[spec.Sym] {
				continue // static, unknown, or not the bucket's size: leave it
			}
			size[d] = c.dims[spec.Sym]
			if batched && d == o.batchAxis {
				off[d] = offset
			}
		}
	}
	if !batched && equalShape(size, out.Shape) {
		return out
	}
	res := tensor.New(out.DType, size...)
	copyBlock(res.Data, size, make([]int64, len(size)), out.Data, out.Shape, off, size, int64(out.DType.Size()))
	return res
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// errUnsupported reports whether err says an operation is not supported.
func errUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
