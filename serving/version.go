package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving/generate"
	"github.com/xserve/xserve/tensor"
	"github.com/xserve/xserve/tokenizer"
)

// version is one version of a model as the Manager serves it: its graph and
// signature, its weights on the device and one executable per bucket.
type version struct {
	m     *Manager
	name  string
	num   int64
	label string // num as the version label of metrics
	// series are the version's request metrics (requestSeries).
	seriesOnce sync.Once
	series     *requestSeries
	entry      modelrepo.VersionEntry
	cfg        *modelrepo.Config

	// Set by load and read-only afterwards.
	model *engine.Model // its graph and weights
	// models are the version's placements, one per device it is served on
	// (config.yaml's devices:, else Options.Devices); models[0] is model.
	// A bucket holds one executable per placement, and each execution runs
	// on the placement with the fewest executions in flight (placement.go).
	models   []*engine.Model
	inflight []atomic.Int64 // executions in flight per placement
	turn     atomic.Uint64  // rotates the first choice among equally loaded placements
	plan     *BucketPlan    // nil for a model that runs on the host only
	// host is the model's host stages (string operators), nil when it runs
	// whole on the device.
	host *hostStages
	// pipe is a pipeline's plan and segments, nil for a model.
	pipe *pipe
	// stage prefixes the bucket labels of a pipeline's segment ("s1:")
	// when the pipeline has several; segment is its index.
	stage   string
	segment int
	// batcher groups requests into batches; nil when the version runs each
	// request alone (batching off, or requests that cannot be stacked).
	batcher *batching.Batcher
	// stats are the counters of Manager.Statistics.
	stats versionStats
	// seqs holds the sequences of a stateful model; nil for others.
	seqs *sequenceTable
	// gen runs the sequences of a generative version (config.yaml's
	// generate: section) and tok is its tokenizer (nil without one).
	gen *generate.Model
	tok *tokenizer.Tokenizer
	// encoder is an encoder-decoder's encoder (generate.encoder), whose
	// programs gen runs; nil for others.
	encoder *engine.Model
	// files are the model files v loads onto its device, as the memory
	// budget counts them before the weights are uploaded.
	files modelFiles

	bmu        sync.Mutex         // guards buckets, exactCount, useTick, sizers and the fields of bucket marked so
	buckets    map[string]*bucket // by name
	exactCount int                // exact-size buckets in buckets
	useTick    int64
	sizers     map[string]*sizer // per queue key, created with the queue's first batch

	// ctx is cancelled once the version is unloading and its requests have
	// finished, so that a compile no request waits for any more stops.
	ctx      context.Context
	cancel   context.CancelFunc
	compiles sync.WaitGroup // compile goroutines

	// Guarded by Manager.mu.
	state  ModelState
	reason string
	loaded bool // was READY at some point
	// failedReload, on a READY version, is the newer model file and config
	// that failed to load: v serves what it loaded before (its reason
	// says so) and is not reloaded again until the file or config changes.
	failedReload *failedReload
	refs         int           // in-flight requests
	reserved     bool          // its device memory is counted while it loads (checkFits)
	forget       bool          // drop from the model's versions once freed
	finalized    bool          // freed, and its state settled
	unloaded     bool          // UNAVAILABLE because it was unloaded, not broken
	drain        chan struct{} // closed when refs is 0 after unloading began; nil before
	freed        chan struct{} // closed once executables and weights are freed; nil before unloading
}

// failedReload is a model file and config that failed to load in place of
// a READY version.
type failedReload struct {
	entry modelrepo.VersionEntry
	cfg   *modelrepo.Config
}

func newVersion(m *Manager, name string, ve modelrepo.VersionEntry, cfg *modelrepo.Config) *version {
	v := &version{m: m, name: name, num: ve.Version, label: strconv.FormatInt(ve.Version, 10), entry: ve, cfg: cfg, state: StateLoading}
	v.files = versionFiles(cfg, ve)
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

// source names what v serves in logs: its model file, or the segment of a
// pipeline.
func (v *version) source() string {
	if v.entry.Path == "" || v.entry.Format == modelrepo.FormatEnsemble {
		return fmt.Sprintf("pipeline %s segment %d", v.name, v.segment)
	}
	return v.entry.Path
}

// bucketLabel is the bucket label of b in metrics.
func (v *version) bucketLabel(b *bucket) string { return v.stage + b.name }

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
	if err := ctx.Err(); err != nil {
		return err
	}
	if v.cfg.Pipeline != nil {
		return v.loadPipeline(ctx, start)
	}
	if err := v.withGenAIConfig(); err != nil {
		return err
	}
	devices := v.devices()
	if err := v.m.checkFits(v, devices); err != nil {
		return err
	}
	model, err := v.m.engine.Load(v.entry.Path, engine.LoadOptions{Logger: v.log(), Device: devices[0]})
	if err != nil {
		return err
	}
	if err := v.place(model, devices); err != nil {
		return err
	}
	return v.serve(ctx, model, modelrepo.ConfigPath(filepath.Dir(filepath.Dir(v.entry.Path))), start)
}

// serve makes model what v serves: its host stages, its bucket plan (from
// the model's graph and v's config, read from cfgFile), the warmup, the
// pad probe and batching.
func (v *version) serve(ctx context.Context, model *engine.Model, cfgFile string, start time.Time) error {
	v.model = model
	if v.models == nil {
		v.models = []*engine.Model{model}
		v.inflight = make([]atomic.Int64, 1)
	}
	if h := model.Host(); h != nil {
		v.host = newHostStages(h)
		if h.Device == nil {
			v.log().Info("model version loaded", "file", v.source(), "inputs", specNames(v.host.inputs), "device", "none: it runs on the host only")
			return nil
		}
	}
	shapes := func(dims map[string]int64) ([][]int64, error) {
		shapes, err := model.OutputShapes(dims)
		if errors.Is(err, engine.ErrClosed) {
			return nil, fmt.Errorf("%w: %s is unloaded", ErrNotReady, v)
		}
		return shapes, err
	}
	planCfg := v.cfg
	if v.cfg.Generate != nil {
		planCfg = generativePlanConfig(model.Graph(), v.cfg)
	}
	plan, err := NewBucketPlan(model.Graph(), planCfg, cfgFile, shapes)
	if err != nil {
		return err
	}
	plan.learnSizes()
	v.plan = plan
	if len(plan.UnusedBuckets) > 0 {
		v.log().Warn("config.yaml has buckets for symbols no input has", "symbols", plan.UnusedBuckets, "config", cfgFile)
	}
	v.buckets = map[string]*bucket{}
	v.sizers = map[string]*sizer{}
	if v.cfg.Generate != nil {
		return v.loadGenerative(ctx, cfgFile)
	}
	// Warmup first, so that the probe runs on the compiled buckets.
	if err := v.warmup(ctx); err != nil {
		return err
	}
	if err := v.probePadding(ctx); err != nil {
		return err
	}
	plan.findBatchAxes()
	if err := v.setupBatching(cfgFile); err != nil {
		return err
	}
	if err := v.setupSequences(cfgFile); err != nil {
		return err
	}
	v.log().Info("model version loaded", "file", v.source(), "inputs", plan.inputNames(), "symbols", plan.symbolNames(),
		"warmup", string(v.cfg.Warmup), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// warmup compiles, with warmup eager (or Options.CompileAll), every
// combination of bucket sizes (for a symbol served exactly, its bucket
// sizes: likely sizes, kept like the padded buckets).
func (v *version) warmup(ctx context.Context) error {
	if v.cfg.Warmup != modelrepo.WarmupEager && !v.m.opts.CompileAll {
		return nil
	}
	all := v.plan.buckets()
	n := len(v.models)
	w := &warmupProgress{total: len(all) * n}
	errs := make([]error, len(all)*n)
	var wg sync.WaitGroup
	for i, exec := range all {
		for p := range n {
			b := v.acquireBucket(exec)
			wg.Add(1)
			go func() { // the Manager's compile slots bound how many run at once
				defer wg.Done()
				defer v.releaseBucket(b)
				_, errs[i*n+p] = v.executableOn(ctx, b, p, w)
			}()
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("warmup: %w", err)
		}
	}
	return nil
}

// warmupProgress counts the buckets of one warmup as they finish.
type warmupProgress struct {
	done  atomic.Int64
	total int
}

// next counts one more finished bucket and returns "3/7"; "" without a
// warmup.
func (w *warmupProgress) next() string {
	if w == nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", w.done.Add(1), w.total)
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
// w, the warmup's progress (nil outside one), marks a warmup compile in the
// log line ("3/7").
func (v *version) executable(ctx context.Context, b *bucket, w *warmupProgress) (*engine.Executable, error) {
	return v.executableOn(ctx, b, 0, w)
}

// executableOn returns the bucket's executable on placement p (v.models[p]),
// compiling it on first use, as executable does for the first.
func (v *version) executableOn(ctx context.Context, b *bucket, p int, w *warmupProgress) (*engine.Executable, error) {
	b.mu.Lock()
	if e := b.exe[p]; e != nil {
		b.mu.Unlock()
		return e, nil
	}
	c := b.pending[p]
	if c == nil {
		c = &compileCall{done: make(chan struct{})}
		b.pending[p] = c
		v.compiles.Add(1)
		go v.compile(b, p, c, w)
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.exe, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("serving: %s: waiting for bucket %s to compile: %w", v, b.name, ctx.Err())
	}
}

// compile builds the bucket's executable and completes c. It holds one of
// the Manager's compile slots while building.
func (v *version) compile(b *bucket, p int, c *compileCall, w *warmupProgress) {
	defer v.compiles.Done()
	start := time.Now()
	exe, compiled, err := v.buildOn(b, p)
	d := time.Since(start)
	progress := w.next()
	if err != nil {
		err = fmt.Errorf("serving: %s: bucket %s: %w", v, b.name, err)
		v.log().Error("compile failed", "bucket", b.name, "error", err)
	} else {
		msg := "loaded bucket from the compile cache"
		if p > 0 {
			msg = "bound bucket's executable to another device"
		}
		if compiled {
			msg = "compiled bucket"
			v.m.metrics.compileSeconds.With(v.name, v.label).Observe(d.Seconds())
			v.m.metrics.bucketCompile.With(v.name, v.label, v.bucketLabel(b)).Set(d.Seconds())
		}
		attrs := []any{"model", v.name, "version", v.num, "bucket", b.name}
		if len(v.models) > 1 {
			attrs = append(attrs, "device", v.models[p].Device())
		}
		if progress != "" {
			attrs = append(attrs, "progress", progress)
		}
		v.m.log.Info(msg, append(attrs, "duration", d.Round(time.Microsecond))...)
	}
	b.mu.Lock()
	b.exe[p] = exe
	b.pending[p] = nil
	c.exe, c.err = exe, err
	b.mu.Unlock()
	close(c.done)
	if hook := v.m.opts.OnBucket; hook != nil {
		ev := BucketEvent{Model: v.name, Version: v.num, Bucket: b.name, Cached: err == nil && !compiled, Duration: d, Err: err}
		fmt.Sscanf(progress, "%d/%d", &ev.Done, &ev.Total)
		hook(ev)
	}
}

// buildOn builds b's executable on placement p: for the first, in a
// compile slot; for another, the first's executable bound to p's weights
// (engine.Executable.On: one compile, or one cache read, per bucket
// whatever the devices). compiled says it was compiled.
func (v *version) buildOn(b *bucket, p int) (*engine.Executable, bool, error) {
	if p == 0 {
		return v.buildInSlot(b, 0)
	}
	first, err := v.executableOn(v.ctx, b, 0, nil)
	if err != nil {
		return nil, false, err
	}
	exe, err := first.On(v.ctx, v.models[p])
	return exe, false, err
}

// buildInSlot waits for the compile budget (exact-size buckets) and a
// compile slot (the Manager runs at most Options.CompileParallelism builds
// at once), then builds b.
func (v *version) buildInSlot(b *bucket, p int) (*engine.Executable, bool, error) {
	if b.exact {
		if err := v.m.exactBudget.wait(v.ctx); err != nil {
			return nil, false, fmt.Errorf("waiting for the exact-size compile budget: %w", err)
		}
	}
	select {
	case v.m.compileSlots <- struct{}{}:
	case <-v.ctx.Done():
		return nil, false, fmt.Errorf("waiting for a compile slot: %w", v.ctx.Err())
	}
	defer func() { <-v.m.compileSlots }()
	return v.build(v.ctx, b, p)
}

// build builds b's executable on placement p (engine.Model.Build, through
// the compile cache) and counts what it did; compiled says it was
// compiled, not read from the cache.
func (v *version) build(ctx context.Context, b *bucket, p int) (*engine.Executable, bool, error) {
	m := v.m
	exe, info, err := v.models[p].Build(ctx, b.modelDims)
	if info.Lowered {
		m.lowerings.Add(1)
	}
	for _, r := range info.Cache {
		m.metrics.cache.With(r.Kind, r.Result).Inc()
	}
	if info.Compiled {
		m.compiles.Add(1)
		m.metrics.compilations.With(v.name, v.label, v.bucketLabel(b)).Inc()
	}
	return exe, info.Compiled, err
}

// free waits for the version's batches and compiles and frees its
// executables and weights. It is called once no request uses the version
// (a batch may still execute for requests whose clients went away).
func (v *version) free() {
	if v.seqs != nil {
		v.seqs.close()
	}
	v.freeGenerative()
	if v.batcher != nil {
		if err := v.batcher.Shutdown(context.Background()); err != nil {
			v.log().Warn("batcher shutdown", "error", err)
		}
	}
	v.cancel()
	v.compiles.Wait()
	v.bmu.Lock()
	buckets := v.buckets
	v.buckets, v.sizers = nil, nil
	v.bmu.Unlock()
	for _, b := range buckets {
		b.closeExecutables(v.log())
	}
	v.pipe.free()
	// Dropping the graph drops the host copies of the weights too: an
	// unloaded or failed version stays known (UNAVAILABLE) but must not
	// keep them in memory.
	v.closeModels()
}

// call is one request prepared for execution: its inputs in signature
// order, the size of each symbol, the sizes it executes at, and the
// outputs it wants. runBucket fills outs.
type call struct {
	inputs  []*tensor.Tensor
	dims    map[string]int64
	exec    map[string]int64
	outputs []int // indices into BucketPlan.Outputs, ascending
	outs    []*tensor.Tensor
	probe   bool // the load-time pad probe's: not counted in the statistics
	// timed, on a batch's first call, asks for the execution's core time
	// (runTimes.core), the batch sizer's measurement.
	timed bool
}

// runTimes are the phases of one runBucket, and how it ran.
type runTimes struct {
	wait    time.Duration // until the executable was there
	compute time.Duration // upload, execute, download
	// core is the execution's core time (the CPU time of the threads
	// that ran it, engine.Job.CPU), 0 where not measured.
	core time.Duration
	// split names the shards' buckets of a split execution
	// ("batch=2+batch=2"), "" for a whole one.
	split string
}

// cost is what the execution cost the machine, for the batch sizer: its
// core time, or its wall time where that was not measured. Core time does
// not grow when other work shares the cores (a loaded machine, a second
// batch executing beside it), so the sizer's costs of the buckets stay
// comparable whatever the load was when each one ran.
func (t runTimes) cost() time.Duration {
	if t.core > 0 {
		return t.core
	}
	return t.compute
}

// runBucket executes calls together at exec sizes: each input is built at
// exec's shape, each call's tensor written straight into its rows of it
// (offsets[i] along the batch dim; nil offsets stack the calls in order, one
// call at offset 0), the rest padded with the input's pad value; each call's
// outputs are sliced straight out of the executed outputs to their exact
// shapes at the call's sizes. The calls must have been validated against
// the plan and fit exec together (the batcher's job for several calls). It
// is the unit the batcher runs; an unbatched Infer runs one call. It
// returns the name of the bucket that ran.
func (v *version) runBucket(ctx context.Context, exec map[string]int64, calls []*call, offsets []int64) (runTimes, error) {
	var t runTimes
	if len(calls) == 0 {
		return t, nil
	}
	p := v.plan
	dims := make([]map[string]int64, len(calls))
	for i, c := range calls {
		dims[i] = c.dims
	}
	offsets, err := p.rowOffsets(exec, dims, offsets)
	if err != nil {
		return t, fmt.Errorf("serving: %s: %w", v, err)
	}
	h, err := v.hold(ctx, exec)
	defer v.release(h)
	t.wait = h.wait
	if err != nil {
		return t, err
	}
	b, place, exe := h.b, h.place, h.exe
	inputs := make([]*tensor.Tensor, len(p.Inputs))
	srcs := make([]*tensor.Tensor, len(calls))
	for i := range p.Inputs {
		for ci, c := range calls {
			srcs[ci] = c.inputs[i]
		}
		inputs[i] = p.assemble(i, exec, srcs, offsets)
	}
	dev := v.models[place].Device()
	v.m.metrics.deviceLoad.begin(dev)
	start := time.Now()
	outs, split, core, err := v.execute(ctx, b, place, exe, exec, inputs, realRows(p, dims, offsets), calls[0].timed)
	t.split, t.core = split, core
	t.compute = time.Since(start)
	v.m.metrics.deviceLoad.end(dev) // the busy span holds the compute span
	if err != nil {
		return t, fmt.Errorf("serving: %s: bucket %s: %w", v, b.name, err)
	}
	v.m.metrics.deviceExecutions.With(strconv.Itoa(dev)).Inc()
	if outs, err = exe.Trim(outs); err != nil {
		return t, fmt.Errorf("serving: %s: bucket %s: %w", v, b.name, err)
	}
	if len(outs) != len(p.Outputs) {
		return t, fmt.Errorf("serving: %s: bucket %s returned %d outputs, the model has %d", v, b.name, len(outs), len(p.Outputs))
	}
	p.widenOutputs(outs)
	if !calls[0].probe {
		v.stats.execution(v.executionRows(calls), t.compute)
	}
	for ci, c := range calls {
		if err := v.slice(c, outs, offsets[ci], len(calls) > 1); err != nil {
			return t, fmt.Errorf("serving: %s: bucket %s: %w", v, b.name, err)
		}
	}
	return t, nil
}

// heldBucket is a bucket held for one execution on a placement, with its
// executable there.
type heldBucket struct {
	b     *bucket
	place int
	exe   *engine.Executable
	wait  time.Duration // until the executable was there
}

// hold acquires the bucket at exec sizes and a placement (counted in
// flight) and waits for the executable; release gives both back, also
// after an error.
func (v *version) hold(ctx context.Context, exec map[string]int64) (heldBucket, error) {
	h := heldBucket{b: v.acquireBucket(exec), place: v.pick()}
	start := time.Now()
	exe, err := v.executableOn(ctx, h.b, h.place, nil)
	h.exe, h.wait = exe, time.Since(start)
	return h, err
}

// release gives back what hold took.
func (v *version) release(h heldBucket) {
	v.inflight[h.place].Add(-1)
	v.releaseBucket(h.b)
}

// widenOutputs converts the executed outputs to the model's dtypes (int64
// outputs narrowed for the device).
func (p *BucketPlan) widenOutputs(outs []*tensor.Tensor) {
	for k, o := range outs {
		if want := p.Outputs[k].DType; o.DType != want {
			outs[k] = o.Convert(want)
		}
	}
}

// realRows returns where the requests' rows end along the batch dim (the
// rows after are padding), or 0 without a batch symbol.
func realRows(p *BucketPlan, dims []map[string]int64, offsets []int64) int64 {
	var end int64
	if p.batchName == "" {
		return 0
	}
	for i, d := range dims {
		end = max(end, offsets[i]+d[p.batchName])
	}
	return end
}

// slice cuts call c's outputs out of the executed ones.
func (v *version) slice(c *call, outs []*tensor.Tensor, offset int64, batched bool) error {
	shapes, err := v.plan.outputShapes(c.dims)
	if err != nil {
		return err
	}
	c.outs = c.outs[:0]
	for _, k := range c.outputs {
		o, err := v.plan.extract(k, outs[k], shapes[k], offset, batched)
		if err != nil {
			return err
		}
		c.outs = append(c.outs, o)
	}
	return nil
}
