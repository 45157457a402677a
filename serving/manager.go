package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
)

// Options configure a Manager. The zero value of each optional field means
// its default.
type Options struct {
	// Client compiles and runs the models (required). The Manager does not
	// close it.
	Client *pjrt.Client
	// Repository holds the models (required).
	Repository *modelrepo.Repository
	// CompileCacheDir keeps lowered StableHLO and, where the plugin binding
	// can serialize them, compiled executables across restarts; "" means no
	// on-disk compile cache.
	CompileCacheDir string
	// CompileCache, if set, is the compile cache instead of
	// CompileCacheDir: one that replicas share, such as a
	// clustercache.Tiered (a local directory in front of a JetStream
	// object store). The Manager does not close it.
	CompileCache engine.Cache
	// Lowering configures lowering; Platform defaults to Client.Platform().
	Lowering lower.Options
	// Logger receives load, compile and unload events; nil means
	// slog.Default().
	Logger *slog.Logger
	// PollInterval is how often the repository is scanned for added, removed
	// and changed models; 0 means no polling.
	PollInterval time.Duration
	// ControlMode is who changes the loaded models (see ControlMode); ""
	// means poll with a PollInterval, else explicit.
	ControlMode ControlMode
	// CompileAll compiles every bucket of every loaded version when it loads,
	// whatever the config's warmup says (`xserve compile` fills a compile
	// cache this way).
	CompileAll bool
	// CompileParallelism bounds the executables built at once, across all
	// models (warmups build a version's buckets in parallel); 0 means
	// runtime.GOMAXPROCS.
	CompileParallelism int
	// OnBucket, when set, is called after each bucket's executable is built
	// (compiled, or loaded from the compile cache) or fails to build, from
	// the goroutine that built it.
	OnBucket func(BucketEvent)
	// SplitBatches says when an execution's rows run as shards on idle CPU
	// cores at once (see SplitBatches); "" means SplitAuto. Other platforms
	// always run an execution whole.
	SplitBatches SplitBatches
	// ExactCompilesPerMinute bounds the compiles of exact-size executables
	// (a size no bucket holds) across all models; a compile beyond it waits
	// for the budget, and so do the requests that need it, each within its
	// deadline. 0 means DefaultExactCompilesPerMinute.
	ExactCompilesPerMinute int
	// Cores is how many executions run at once without sharing a CPU core
	// (engine.Options.Cores); 0 means runtime.GOMAXPROCS.
	Cores int
	// RelaxedReadiness makes the server ready once loading is done,
	// whatever failed to load; by default every model version that should
	// load must be READY (see Readiness).
	RelaxedReadiness bool
	// MaxSequenceIdle is how long a sequence of a stateful model may go
	// without a request before it expires and its state is freed; 0 means
	// DefaultMaxSequenceIdle.
	MaxSequenceIdle time.Duration
	// MaxSequences bounds the active sequences of each stateful model
	// version (their state stays on the device); 0 means
	// DefaultMaxSequences.
	MaxSequences int
	// TokenizersLibrary is the path of the tokenizers library generative
	// models' tokenizers load with; "" means tokenizer.FindLibrary's search.
	TokenizersLibrary string
	// LoadPolicy says when models load (see LoadPolicy); "" means
	// LoadEager.
	LoadPolicy LoadPolicy
	// MemoryBudget bounds the device memory the loaded models take, per
	// device: under LoadLazy the least recently used models are unloaded
	// to make room, under LoadEager a load that would not fit is refused;
	// the zero value is unbounded.
	MemoryBudget MemoryBudget
	// Devices places the models whose config.yaml names no devices on
	// these devices of the client, by index: one placement per device,
	// each request's execution on the one with the fewest in flight
	// (Triton's instance_group). nil means device 0.
	Devices []int
	// OnHeldChange, when set, is called from a goroutine of its own after
	// a load on demand or an eviction (LoadLazy) changed which models are
	// held loaded (natsapi announces them).
	OnHeldChange func()
}

// BucketEvent reports one bucket's executable being built (Options.OnBucket).
type BucketEvent struct {
	Model   string
	Version int64
	Bucket  string
	// Done and Total count the buckets of a warmup (or CompileAll) of this
	// version; both are 0 for a compile on first use.
	Done, Total int
	// Cached says the executable came from the compile cache, not the compiler.
	Cached   bool
	Duration time.Duration
	Err      error
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CompileParallelism == 0 {
		o.CompileParallelism = runtime.GOMAXPROCS(0)
	}
	if o.SplitBatches == "" {
		o.SplitBatches = SplitAuto
	}
	if o.LoadPolicy == "" {
		o.LoadPolicy = LoadEager
	}
	if o.ExactCompilesPerMinute == 0 {
		o.ExactCompilesPerMinute = DefaultExactCompilesPerMinute
	}
	if o.MaxSequenceIdle == 0 {
		o.MaxSequenceIdle = DefaultMaxSequenceIdle
	}
	if o.MaxSequences == 0 {
		o.MaxSequences = DefaultMaxSequences
	}
}

func (o *Options) validate() error {
	switch {
	case o.Client == nil:
		return errors.New("serving: Options.Client is required")
	case o.Repository == nil:
		return errors.New("serving: Options.Repository is required")
	case o.CompileParallelism < 0:
		return fmt.Errorf("serving: Options.CompileParallelism must be >= 0, got %d", o.CompileParallelism)
	case o.Cores < 0:
		return fmt.Errorf("serving: Options.Cores must be >= 0, got %d", o.Cores)
	case o.PollInterval < 0:
		return fmt.Errorf("serving: Options.PollInterval must be >= 0, got %v", o.PollInterval)
	case o.ExactCompilesPerMinute < 0:
		return fmt.Errorf("serving: Options.ExactCompilesPerMinute must be >= 0, got %d", o.ExactCompilesPerMinute)
	case o.MaxSequenceIdle < 0:
		return fmt.Errorf("serving: Options.MaxSequenceIdle must be >= 0, got %v", o.MaxSequenceIdle)
	case o.MaxSequences < 0:
		return fmt.Errorf("serving: Options.MaxSequences must be >= 0, got %d", o.MaxSequences)
	}
	if _, err := ParseSplitBatches(string(o.SplitBatches)); err != nil {
		return fmt.Errorf("serving: Options.SplitBatches: %w", err)
	}
	if _, err := ParseLoadPolicy(string(o.LoadPolicy)); err != nil {
		return fmt.Errorf("serving: Options.LoadPolicy: %w", err)
	}
	if err := o.MemoryBudget.validate(); err != nil {
		return err
	}
	if err := validateDevices(o.Devices); err != nil {
		return err
	}
	return o.validateControl()
}

// Manager serves the models of a repository: it loads the versions each
// model's version policy selects, compiles one executable per shape bucket,
// runs inference requests, and follows the repository when polling. All its
// methods are safe for concurrent use.
//
// Lock order: model.op (one model's loads and unloads), then Manager.mu, then
// bucket.mu. No lock is held while loading, compiling or executing, nor
// while waiting for requests to finish.
type Manager struct {
	opts    Options
	log     *slog.Logger
	client  *pjrt.Client
	engine  *engine.Engine // compiles and runs every version's programs
	repo    *modelrepo.Repository
	metrics *serverMetrics

	// lowerings and compiles count the Lower and Compile calls of builds
	// (atomic; tests read them to see what the caches saved).
	lowerings atomic.Int64
	compiles  atomic.Int64

	// compileSlots holds a token per build in progress (CompileParallelism).
	compileSlots chan struct{}
	// exactBudget bounds the compiles of exact-size executables.
	exactBudget *compileBudget

	// ctx is cancelled by Shutdown: it stops polling and aborts loads.
	ctx    context.Context
	cancel context.CancelFunc
	ops    sync.WaitGroup // Load, Unload and the poller's syncs in progress
	bg     sync.WaitGroup // goroutines freeing unloaded versions
	polled chan struct{}  // closed when the poller returns; nil without polling

	// batchHook, when set (by tests, before the first request), is called
	// by each batch's runner before it executes the batch.
	batchHook func(ctx context.Context, bt *batching.Batch)

	mu      sync.Mutex // guards models, closed, scanned, ready, lazyTick and the fields of model and version marked so
	models  map[string]*model
	closed  bool
	scanned bool
	ready   readiness

	// Under LoadLazy: lazyTick orders uses (the least recently used model
	// goes first); lazySlot holds a token per load on demand (one at a
	// time, so that two never count the same free memory).
	lazyTick int64
	lazySlot chan struct{}
}

// model is one model of the repository and its versions.
type model struct {
	name string
	op   sync.Mutex // serializes loads and unloads of this model

	// Guarded by Manager.mu.
	versions map[int64]*version
	// err is a problem with the model as a whole (an invalid config.yaml, no
	// version to serve), reported by Status when no version is known.
	err error
	// lazy is its state under LoadLazy; nil under LoadEager.
	lazy *lazyModel
}

// NewManager scans the repository and loads the versions every model's
// version policy selects, then starts polling when PollInterval > 0. A model
// (or version) that fails to load is recorded UNAVAILABLE with the reason
// and does not affect the others; NewManager fails only for invalid Options,
// an unreadable repository or ctx ending.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Options{
		Client:   opts.Client,
		Lowering: opts.Lowering,
		CacheDir: opts.CompileCacheDir,
		Cache:    opts.CompileCache,
		Logger:   opts.Logger,
		Cores:    opts.Cores,
	})
	if err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}
	m := &Manager{
		opts:         opts,
		log:          opts.Logger,
		client:       opts.Client,
		engine:       eng,
		repo:         opts.Repository,
		metrics:      newServerMetrics(),
		compileSlots: make(chan struct{}, opts.CompileParallelism),
		exactBudget:  newCompileBudget(opts.ExactCompilesPerMinute),
		models:       map[string]*model{},
		lazySlot:     make(chan struct{}, 1),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())

	snap, err := m.repo.Scan()
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("serving: %w", err)
	}
	if err := m.loadAll(ctx, snap); err != nil {
		m.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	m.mu.Lock()
	m.scanned = true
	m.mu.Unlock()
	if opts.PollInterval > 0 {
		m.polled = make(chan struct{})
		go m.poll(snap)
	}
	return m, nil
}

// loadAll syncs every model of snap, a few at a time: four, whatever the
// cores, since a load mostly waits (for the compile cache, local or the
// cluster's, and for the compile slots that bound the builds' CPU).
func (m *Manager) loadAll(ctx context.Context, snap *modelrepo.Snapshot) error {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range snap.Models {
		e := &snap.Models[i]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m.follow(ctx, e.Name, e) // failures are logged and in Status
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// poll follows the repository until Shutdown.
func (m *Manager) poll(base *modelrepo.Snapshot) {
	defer close(m.polled)
	var last *modelrepo.ModelEntry
	m.repo.WatchFrom(m.ctx, base, m.opts.PollInterval, func(c modelrepo.Change) {
		m.log.Debug("repository change", "change", c.String())
		var err error
		switch {
		case c.Kind == modelrepo.ModelError && c.Model == "":
			m.log.Error("repository scan failed; serving what is loaded", "error", c.Err)
			return
		case c.Kind == modelrepo.ModelRemoved:
			last = nil
			err = m.sync(m.ctx, c.Model, nil)
		case c.Entry == last:
			return // one sync per model and poll: the changes share the entry
		default:
			last = c.Entry
			err = m.follow(m.ctx, c.Model, c.Entry)
		}
		if err != nil {
			m.log.Debug("sync failed", "model", c.Model, "error", err) // logged in detail by sync
		}
	})
}

// follow makes the model called name follow the repository's entry, as the
// load policy says: sync under LoadEager, syncLazy under LoadLazy.
func (m *Manager) follow(ctx context.Context, name string, entry *modelrepo.ModelEntry) error {
	if m.opts.LoadPolicy == LoadLazy {
		return m.syncLazy(ctx, name, entry)
	}
	return m.sync(ctx, name, entry)
}

// beginOp registers a Load, Unload or sync, failing once Shutdown began.
func (m *Manager) beginOp() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("%w: the server is shutting down", ErrClosed)
	}
	m.ops.Add(1)
	return nil
}

// lockModel returns the model called name, created if needed, with its op
// lock held.
func (m *Manager) lockModel(name string) *model {
	for {
		m.mu.Lock()
		md := m.models[name]
		if md == nil {
			md = &model{name: name, versions: map[int64]*version{}}
			if m.opts.LoadPolicy == LoadLazy {
				md.lazy = &lazyModel{}
			}
			m.models[name] = md
		}
		m.mu.Unlock()
		md.op.Lock()
		m.mu.Lock()
		current := m.models[name] == md
		m.mu.Unlock()
		if current {
			return md
		}
		md.op.Unlock() // removed meanwhile; take the new one
	}
}

// sync makes the model called name match entry (nil: the model left the
// repository): it loads the versions the policy selects that are not loaded
// (or whose file or config changed, reloading those while the old instance
// keeps serving), records the broken selected versions UNAVAILABLE and
// unloads the others once their requests finish. The error joins the load
// errors, wrapping ErrNotReady.
func (m *Manager) sync(ctx context.Context, name string, entry *modelrepo.ModelEntry) error {
	if err := m.beginOp(); err != nil {
		return err
	}
	defer m.ops.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.ctx, cancel)
	defer stop()

	md := m.lockModel(name)
	defer md.op.Unlock()

	if entry == nil {
		m.removeModel(md)
		return nil
	}
	if entry.Err != nil || entry.Config == nil {
		return m.markBroken(md, entry)
	}
	if md.lazy != nil {
		m.mu.Lock()
		md.lazy.entry = entry
		m.mu.Unlock()
	}
	want := entry.Selected()
	broken := brokenVersions(entry)
	m.recordBroken(md, entry, want, broken)
	var errs []error
	for _, ve := range want {
		if err := m.syncVersion(ctx, md, ve, entry.Config); err != nil {
			errs = append(errs, err)
		}
	}
	m.dropUnselected(md, want, broken)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNotReady, errors.Join(errs...))
	}
	return nil
}

// removeModel unloads every version of a model that left the repository.
func (m *Manager) removeModel(md *model) {
	m.mu.Lock()
	for _, v := range md.versions {
		m.dropLocked(md, v)
	}
	md.err = nil
	if len(md.versions) == 0 {
		delete(m.models, md.name)
	}
	m.mu.Unlock()
	m.log.Info("model removed from the repository", "model", md.name)
}

// markBroken records a model broken as a whole (a bad config.yaml); its
// loaded versions keep serving.
func (m *Manager) markBroken(md *model, entry *modelrepo.ModelEntry) error {
	err := entry.Err
	if err == nil {
		err = errors.New("no config")
	}
	m.mu.Lock()
	md.err = err
	ready := m.readyVersionsLocked(md)
	m.mu.Unlock()
	if len(ready) > 0 {
		m.log.Error("model is broken in the repository; the loaded versions keep serving", "model", md.name, "versions", ready, "error", err)
	} else {
		m.log.Error("model unavailable", "model", md.name, "error", err)
	}
	return fmt.Errorf("%w: model %s: %w", ErrNotReady, md.name, err)
}

// brokenVersions returns the broken versions the policy would select,
// valid or not.
func brokenVersions(entry *modelrepo.ModelEntry) map[int64]error {
	all := make([]int64, 0, len(entry.Versions)+len(entry.VersionErrors))
	for _, ve := range entry.Versions {
		all = append(all, ve.Version)
	}
	for n := range entry.VersionErrors {
		all = append(all, n)
	}
	broken := map[int64]error{}
	for _, n := range entry.Config.VersionPolicy.Select(slices.Compact(sortedInts(all))) {
		if err, ok := entry.VersionErrors[n]; ok {
			broken[n] = err
		}
	}
	return broken
}

// recordBroken marks the broken selected versions UNAVAILABLE (unloading
// what served under that number) and notes a model with nothing to serve.
func (m *Manager) recordBroken(md *model, entry *modelrepo.ModelEntry, want []modelrepo.VersionEntry, broken map[int64]error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	md.err = nil
	if len(want) == 0 && len(broken) == 0 {
		md.err = fmt.Errorf("no version to serve (version policy %s, valid versions: %d)", entry.Config.VersionPolicy, len(entry.Versions))
		m.log.Warn("model unavailable", "model", md.name, "error", md.err)
	}
	for n, err := range broken {
		if v := md.versions[n]; v != nil {
			if v.state == StateUnavailable && v.reason == err.Error() {
				continue
			}
			m.unloadLocked(v, false)
		}
		m.putLocked(md, unavailableVersion(m, md.name, n, err))
	}
}

// syncVersion loads a selected version unless it serves unchanged; a
// changed one reloads beside the serving instance.
func (m *Manager) syncVersion(ctx context.Context, md *model, ve modelrepo.VersionEntry, cfg *modelrepo.Config) error {
	m.mu.Lock()
	cur := md.versions[ve.Version]
	var keep, replace bool
	if cur != nil && cur.state == StateReady {
		keep = sameFile(cur.entry, ve) && reflect.DeepEqual(cur.cfg, cfg)
		if keep && cur.failedReload != nil {
			// The file it was loaded from is back.
			m.setStaleLocked(cur, nil, "")
		}
		if f := cur.failedReload; f != nil && sameFile(f.entry, ve) && reflect.DeepEqual(f.cfg, cfg) {
			keep = true // failed already; retried once the file or config changes
		}
		replace = !keep
	}
	m.mu.Unlock()
	if keep {
		return nil
	}
	var old *version
	if replace {
		old = cur
	}
	return m.loadVersion(ctx, md, ve, cfg, old)
}

// dropUnselected unloads the versions the policy no longer selects once a
// selected one serves, so that replacing version 1 by 2 leaves no gap; if
// none of the selected versions could load, the old ones keep serving.
func (m *Manager) dropUnselected(md *model, want []modelrepo.VersionEntry, broken map[int64]error) {
	m.mu.Lock()
	wanted := map[int64]bool{}
	serving := len(want) == 0
	for _, ve := range want {
		wanted[ve.Version] = true
		if v := md.versions[ve.Version]; v != nil && v.state == StateReady {
			serving = true
		}
	}
	var stale, kept []int64
	for n, v := range md.versions {
		if wanted[n] || broken[n] != nil {
			continue
		}
		if v.freed != nil || v.state != StateReady || serving {
			if v.freed == nil {
				stale = append(stale, n)
			}
			m.dropLocked(md, v)
		} else {
			kept = append(kept, n)
		}
	}
	m.mu.Unlock()
	if len(stale) > 0 {
		slices.Sort(stale)
		m.log.Info("unloading versions the version policy no longer selects", "model", md.name, "versions", stale)
	}
	if len(kept) > 0 {
		slices.Sort(kept)
		m.log.Warn("no selected version could load; the old versions keep serving", "model", md.name, "versions", kept)
	}
}

func sortedInts(s []int64) []int64 {
	slices.Sort(s)
	return s
}

// sameFile reports whether two entries are the same model file, unchanged.
func sameFile(a, b modelrepo.VersionEntry) bool {
	return a.Path == b.Path && a.Format == b.Format && a.Size == b.Size && a.ModTime.Equal(b.ModTime)
}

// loadVersion loads ve. With old (a READY instance of the same version) the
// new instance loads beside it, replaces it once READY, and old is unloaded
// after its requests; if the load fails, old keeps serving. Otherwise the
// version shows LOADING, then READY or UNAVAILABLE with the error.
func (m *Manager) loadVersion(ctx context.Context, md *model, ve modelrepo.VersionEntry, cfg *modelrepo.Config, old *version) error {
	v := newVersion(m, md.name, ve, cfg)
	if old == nil {
		m.mu.Lock()
		if cur := md.versions[ve.Version]; cur != nil {
			m.unloadLocked(cur, false)
		}
		m.putLocked(md, v)
		m.mu.Unlock()
		m.log.Info("loading model version", "model", md.name, "version", ve.Version, "file", ve.Path)
	} else {
		m.log.Info("reloading model version", "model", md.name, "version", ve.Version, "file", ve.Path)
	}
	err := v.load(ctx)
	if err != nil {
		err = fmt.Errorf("model %s version %d: %w", md.name, ve.Version, err)
		v.free()
		m.mu.Lock()
		if old == nil {
			m.setStateLocked(v, StateUnavailable, err.Error())
		} else if md.versions[ve.Version] == old && old.state == StateReady {
			m.metrics.reloadFailures.With(md.name, old.label).Inc()
			m.setStaleLocked(old, &failedReload{entry: ve, cfg: cfg},
				"reload failed, serving the previously loaded model file: "+err.Error())
		}
		m.mu.Unlock()
		if old != nil {
			m.log.Error("reload failed; the loaded instance keeps serving", "model", md.name, "version", ve.Version, "error", err)
		} else {
			m.log.Error("model version unavailable", "model", md.name, "version", ve.Version, "error", err)
		}
		return err
	}
	m.mu.Lock()
	if old != nil {
		m.unloadLocked(old, false)
		m.putLocked(md, v)
	}
	v.loaded = true
	m.setStateLocked(v, StateReady, "")
	m.setStaleLocked(v, nil, "")
	m.mu.Unlock()
	return nil
}

// setStaleLocked records (f non-nil) or clears that v serves an older file
// than the repository holds because f failed to load; reason is v's
// reason while READY.
func (m *Manager) setStaleLocked(v *version, f *failedReload, reason string) {
	v.failedReload = f
	v.reason = reason
	stale := 0.0
	if f != nil {
		stale = 1
	}
	m.metrics.stale.With(v.name, v.label).Set(stale)
}

// putLocked makes v the model's instance of its version.
func (m *Manager) putLocked(md *model, v *version) {
	md.versions[v.num] = v
	m.setStateLocked(v, v.state, v.reason)
}

// setStateLocked sets v's state and, when v is its model's current instance
// of the version, the state metrics.
func (m *Manager) setStateLocked(v *version, s ModelState, reason string) {
	v.state, v.reason = s, reason
	md := m.models[v.name]
	if md == nil || md.versions[v.num] != v {
		return
	}
	m.metrics.setState(v.name, v.label, s)
	if s != StateReady && v.failedReload != nil {
		m.setStaleLocked(v, nil, reason)
	}
	ready := 0
	for _, md := range m.models {
		for _, v := range md.versions {
			if v.state == StateReady {
				ready++
			}
		}
	}
	m.metrics.loaded.With().Set(float64(ready))
}

// unloadLocked starts unloading v: it turns UNLOADING at once (new requests
// get ErrNotReady) and a goroutine frees its executables and weights once
// its in-flight requests finished; then v is dropped from its model when
// forget is set (the version left the repository), else it stays known as
// UNAVAILABLE ("unloaded"). It returns a channel closed once v is freed.
// Unloading an unloading version only returns its channel.
func (m *Manager) unloadLocked(v *version, forget bool) <-chan struct{} {
	v.forget = v.forget || forget
	if v.freed != nil {
		return v.freed
	}
	v.freed = make(chan struct{})
	v.drain = make(chan struct{})
	if v.refs == 0 {
		close(v.drain)
	}
	if v.state == StateReady || v.state == StateLoading {
		m.setStateLocked(v, StateUnloading, "")
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		<-v.drain
		v.free()
		m.mu.Lock()
		if v.state != StateUnavailable {
			m.setStateLocked(v, StateUnavailable, m.unloadedReason(v.name))
			v.unloaded = true
		}
		v.finalized = true
		if md := m.models[v.name]; md != nil && v.forget {
			m.forgetLocked(md, v)
		}
		m.mu.Unlock()
		if v.loaded {
			m.log.Info("model version unloaded", "model", v.name, "version", v.num)
		}
		close(v.freed)
	}()
	return v.freed
}

// dropLocked unloads v and forgets it once freed (at once if it is).
func (m *Manager) dropLocked(md *model, v *version) {
	m.unloadLocked(v, true)
	if v.finalized {
		m.forgetLocked(md, v)
	}
}

// forgetLocked drops v, freed, from its model (if it is still the model's
// instance of its version), and the model once it has nothing to report.
func (m *Manager) forgetLocked(md *model, v *version) {
	if md.versions[v.num] != v {
		return
	}
	delete(md.versions, v.num)
	m.metrics.forgetState(v.name, v.label)
	if len(md.versions) == 0 && md.err == nil && m.models[md.name] == md {
		delete(m.models, md.name)
	}
}

func (m *Manager) readyVersionsLocked(md *model) []int64 {
	var out []int64
	for n, v := range md.versions {
		if v.state == StateReady {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// lookupLocked returns the version a request names: version 0 is the
// highest READY one.
func (m *Manager) lookupLocked(name string, num int64) (*version, error) {
	md := m.models[name]
	if md == nil || (len(md.versions) == 0 && md.err == nil) {
		return nil, fmt.Errorf("%w: no model %q in the repository", ErrModelNotFound, name)
	}
	if num == 0 {
		return latestReady(md)
	}
	v := md.versions[num]
	if v == nil {
		nums := make([]int64, 0, len(md.versions))
		for n := range md.versions {
			nums = append(nums, n)
		}
		slices.Sort(nums)
		return nil, fmt.Errorf("%w: model %s has no version %d (versions: %v)", ErrModelNotFound, name, num, nums)
	}
	if v.state != StateReady {
		return nil, notReady(v)
	}
	return v, nil
}

// latestReady returns the highest READY version of md, else the reason
// none serves.
func latestReady(md *model) (*version, error) {
	var best, latest *version
	for _, v := range md.versions {
		if v.state == StateReady && (best == nil || v.num > best.num) {
			best = v
		}
		if latest == nil || v.num > latest.num {
			latest = v
		}
	}
	switch {
	case best != nil:
		return best, nil
	case latest == nil:
		return nil, fmt.Errorf("%w: model %s is UNAVAILABLE: %v", ErrNotReady, md.name, md.err)
	default:
		return nil, notReady(latest)
	}
}

func notReady(v *version) error {
	if v.reason != "" {
		return fmt.Errorf("%w: %s is %s: %s", ErrNotReady, v, v.state, v.reason)
	}
	return fmt.Errorf("%w: %s is %s", ErrNotReady, v, v.state)
}

// acquire returns the version a request names with a reference held; the
// caller must release it.
func (m *Manager) acquire(name string, num int64) (*version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("%w: the server is shutting down", ErrClosed)
	}
	v, err := m.lookupLocked(name, num)
	if err != nil {
		return nil, err
	}
	v.refs++
	m.touchLocked(m.models[name])
	return v, nil
}

func (m *Manager) release(v *version) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v.refs--
	if v.refs == 0 && v.drain != nil {
		close(v.drain)
	}
}

// Infer runs one inference request on a model version (0: the highest READY
// version). The request's inputs are validated against the model's
// signature (ErrInvalidInput), placed in the smallest bucket that holds them
// (ErrNoBucket when none does), padded, executed and sliced back; on a
// version that batches, the request waits in its queue and runs in a batch
// with others (see the package documentation; a full queue is
// ErrOverloaded). The bucket's executable is compiled on the first request
// that needs it (with warmup lazy); concurrent requests wait for that one
// compile.
func (m *Manager) Infer(ctx context.Context, model string, version int64, req *InferRequest) (*InferResponse, error) {
	start := time.Now()
	if req == nil {
		return nil, fmt.Errorf("%w: no request", ErrInvalidInput)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("serving: infer %s: %w", model, err)
	}
	v, err := m.acquire(model, version)
	if err != nil && errors.Is(err, ErrNotReady) && m.opts.LoadPolicy == LoadLazy {
		v, err = m.acquireLazily(ctx, model, version, err)
	}
	if err != nil {
		return nil, err
	}
	defer m.release(v)
	return v.infer(ctx, req, start)
}

// Metadata returns the signature and buckets of a READY model version (0:
// the highest READY version).
func (m *Manager) Metadata(model string, version int64) (*Metadata, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.lookupLocked(model, version)
	if err != nil {
		return nil, err
	}
	md := &Metadata{
		Name:     v.name,
		Version:  v.num,
		Versions: m.readyVersionsLocked(m.models[model]),
		Platform: v.entry.Format,
		Buckets:  map[string][]int64{},
		Stateful: v.stateful(),
	}
	for _, n := range v.footprintLocked() {
		md.MemoryBytes += n
	}
	if v.pipe != nil {
		v.pipelineMetadata(md)
		return md, nil
	}
	p := v.plan
	if v.host != nil {
		md.Inputs, md.Outputs = slices.Clone(v.host.inputs), slices.Clone(v.host.outputs)
		if p == nil {
			return md, nil
		}
		p = &BucketPlan{Symbols: p.Symbols} // the device graph's buckets
	}
	for i := range p.Inputs {
		md.Inputs = append(md.Inputs, p.Inputs[i].spec())
	}
	for k := range p.Outputs {
		spec := p.Outputs[k].spec()
		if p.batchErr == nil && spec.Dims[p.outBatchAxis[k]] == unknownSym {
			spec.Dims[p.outBatchAxis[k]] = p.batchName
		}
		md.Outputs = append(md.Outputs, spec)
	}
	for _, s := range p.Symbols {
		md.Buckets[s.Name] = slices.Clone(s.Buckets)
		md.Symbols = append(md.Symbols, SymbolInfo{Name: s.Name, Role: s.Role(), ModelSymbols: slices.Clone(s.Model),
			Buckets: slices.Clone(s.Buckets), Min: s.Range.Min, Max: s.Range.Max, Pad: string(s.Pad), PadReason: s.PadReason})
	}
	return md, nil
}

// Status lists every known model version, sorted by name and version. A
// model that is broken as a whole (an invalid config.yaml, no version to
// serve) and has no version loaded is listed once, as version 0,
// UNAVAILABLE with the reason.
func (m *Manager) Status() []ModelStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ModelStatus
	for _, md := range m.models {
		if len(md.versions) == 0 && md.err != nil {
			out = append(out, ModelStatus{Name: md.name, State: StateUnavailable, Reason: md.err.Error()})
		}
		for _, v := range md.versions {
			out = append(out, ModelStatus{Name: v.name, Version: v.num, State: v.state, Reason: v.reason, Unloaded: v.unloaded})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out
}

// Compilations returns how many executables the Manager has compiled (not
// loaded from the compile cache) since it was made.
func (m *Manager) Compilations() int64 { return m.compiles.Load() }

// ModelReady reports whether the model version (0: any version) is READY.
func (m *Manager) ModelReady(model string, version int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	_, err := m.lookupLocked(model, version)
	return err == nil
}

// Load (re)loads a model from the repository as it is now: versions the
// policy selects are loaded, changed ones reloaded (the loaded instance
// serves until the new one is READY), the others unloaded. It returns once
// the loads finished; the error wraps ErrModelNotFound when the repository
// has no such model (a model that left it is unloaded and forgotten) and
// ErrNotReady when a version failed to load. Only the explicit model control
// mode allows it (else ErrModelControl).
func (m *Manager) Load(ctx context.Context, model string) error {
	if err := modelrepo.ValidateName(model); err != nil {
		return fmt.Errorf("%w: %w", ErrModelNotFound, err)
	}
	if err := m.allowControl("load", model); err != nil && !m.isClosed() {
		return err
	}
	snap, err := m.repo.Scan()
	if err != nil {
		return fmt.Errorf("serving: load %s: %w", model, err)
	}
	entry, ok := snap.Model(model)
	if !ok {
		m.mu.Lock()
		known := m.models[model] != nil
		m.mu.Unlock()
		if known { // it left the repository: unload and forget it
			if err := m.sync(ctx, model, nil); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: no model %q in the repository", ErrModelNotFound, model)
	}
	return m.sync(ctx, model, entry)
}

// Unload unloads every version of a model: they turn UNLOADING at once (new
// requests get ErrNotReady), and once their in-flight requests finished
// their executables and weights are freed and they stay known as
// UNAVAILABLE. Unload returns when that is done or ctx ends (the unload then
// completes in the background). Only the explicit model control mode allows
// it (else ErrModelControl); the model then stays unloaded until Load.
func (m *Manager) Unload(ctx context.Context, model string) error {
	if err := m.beginOp(); err != nil {
		return err
	}
	defer m.ops.Done()
	if err := m.allowControl("unload", model); err != nil {
		return err
	}
	m.mu.Lock()
	md := m.models[model]
	m.mu.Unlock()
	if md == nil {
		return fmt.Errorf("%w: no model %q is loaded", ErrModelNotFound, model)
	}
	md = m.lockModel(model)
	var waits []<-chan struct{}
	m.mu.Lock()
	if len(md.versions) == 0 && md.err == nil {
		delete(m.models, model)
		m.mu.Unlock()
		md.op.Unlock()
		return fmt.Errorf("%w: no model %q is loaded", ErrModelNotFound, model)
	}
	for _, v := range md.versions {
		waits = append(waits, m.unloadLocked(v, false))
	}
	m.mu.Unlock()
	md.op.Unlock()
	m.log.Info("unloading model", "model", model, "versions", len(waits))
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return fmt.Errorf("serving: unload %s: waiting for in-flight requests: %w", model, ctx.Err())
		}
	}
	return nil
}

// isClosed reports whether Shutdown began.
func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// RepositoryRoot is the absolute path of the model repository; the api
// packages make paths in client-facing messages relative to it.
func (m *Manager) RepositoryRoot() string { return m.repo.Root() }

// WriteMetrics writes the serving metrics in the Prometheus text exposition
// format (version 0.0.4): xserve_requests_total, xserve_request_duration_seconds,
// xserve_batch_rows, xserve_queue_rejected_total, xserve_batch_size_limit,
// xserve_compilations_total, xserve_compile_seconds,
// xserve_compile_cache_total, xserve_models_loaded, xserve_model_state and
// xserve_queue_depth.
func (m *Manager) WriteMetrics(w io.Writer) error {
	m.updateGauges()
	m.updateGenerateMetrics()
	return m.metrics.reg.Write(w)
}

// Shutdown stops polling and accepting requests (new ones get ErrClosed),
// waits for loads in progress, drains the batching queues (queued requests
// are dispatched at once, without waiting for max_queue_delay, and
// executed), waits for in-flight requests, and frees every version's
// executables and weights. If ctx ends first it returns ctx's error: the
// requests still queued then fail with ErrClosed, and the freeing completes
// in the background. Calling it again waits again.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	if err := waitFor(ctx, func() {
		if m.polled != nil {
			<-m.polled
		}
		m.ops.Wait()
	}); err != nil {
		return fmt.Errorf("serving: shutdown: %w", err)
	}
	drainErr := m.shutdownBatchers(ctx)
	m.mu.Lock()
	for _, md := range m.models {
		for _, v := range md.versions {
			m.unloadLocked(v, false)
		}
	}
	m.mu.Unlock()
	if err := waitFor(ctx, m.bg.Wait); err != nil {
		return fmt.Errorf("serving: shutdown: waiting for in-flight requests: %w", err)
	}
	if drainErr != nil {
		return fmt.Errorf("serving: shutdown: draining the batching queues: %w", drainErr)
	}
	return nil
}

// waitFor runs wait on a goroutine and returns when it does or ctx ends.
func waitFor(ctx context.Context, wait func()) error {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
