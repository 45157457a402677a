package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	grpcapi "github.com/xserve/xserve/api/grpc"
	httpapi "github.com/xserve/xserve/api/http"
	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/internal/tracing"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
)

// runServe is `xserve serve` (and `xserve --model-repo DIR ...`): it loads
// the PJRT plugin and every model of the repository, serves them over HTTP
// and NATS (an embedded NATS server, or the one --nats-url names), and on
// SIGINT/SIGTERM (ctx done) stops accepting, finishes the requests in
// flight, shuts the models down and returns nil.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var limits httpapi.Options
	repoDir := fs.String("model-repo", "", "model repository directory (required)")
	addr := fs.String("http-addr", ":8080", "HTTP listen address (host:port; port 0 picks a free one)")
	grpcAddr := fs.String("grpc-addr", ":8001", `KServe v2 gRPC listen address (host:port; port 0 picks a free one; "" disables gRPC)`)
	plugin := fs.String("pjrt-plugin", "", "PJRT plugin path or platform name (default: $XSERVE_PJRT_PLUGIN, then what \"make pjrt\" installed)")
	cacheDir := fs.String("compile-cache", defaultCompileCache(), `on-disk compile cache directory ("" disables it)`)
	compileJobs := fs.Int("compile-parallelism", 0, "executables compiled at once across all models (0: one per CPU)")
	exactCompiles := fs.Int("exact-compiles-per-minute", 0, "compiles of exact-size executables (sizes no bucket holds) per minute across all models; requests needing one wait within their deadline (0: 30)")
	seqIdle := fs.Duration("max-sequence-idle", 0, "a sequence of a stateful model idle this long expires and its state is freed; its next request is refused (0: 1m)")
	maxSeqs := fs.Int("max-sequences", 0, "active sequences per stateful model version, their state kept on the device (0: 1024)")
	split := fs.String("split-batches", "auto", "on a CPU, run an execution's rows as shards on idle cores at once: auto (when no other execution runs and each bucket's own timings say it is faster), off, always")
	poll := fs.Duration("poll-interval", 5*time.Second, "with --model-control-mode poll: how often to rescan the model repository for changes")
	control := fs.String("model-control-mode", "poll", "who changes the loaded models: poll (follow the repository; the load/unload API is refused), explicit (load every model at start, then only the load/unload API), none (load once)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	fs.BoolVar(&limits.AccessLog, "access-log", false, "log every HTTP and gRPC request at level info, with its request id")
	narrow := fs.Bool("narrow-int64", false, "lower int64 as int32 (as for TPUs)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 30*time.Second, "grace period: how long SIGTERM waits for in-flight and queued requests (HTTP and NATS) before exiting")
	shutdownDelay := fs.Duration("shutdown-delay", 0, "on SIGTERM, answer /v2/health/ready 503 but keep serving this long before draining (lets a load balancer stop routing here first)")
	strict := fs.Bool("strict-readiness", true, "/v2/health/ready is 200 only when every model version that should load is READY (false: once loading is done, whatever failed)")
	lf := loadPolicyFlags(fs)
	nf := natsFlags(fs)
	clusterCacheOn := fs.Bool("cluster-cache", false, "share the compile cache with the other replicas through a JetStream object store on the NATS connection (the embedded server, or the cluster --nats-url names): local cache, then the cluster's, then compile; what this replica compiles is published within seconds")
	ccf := addClusterCacheFlags(fs)
	sf := newSecurityFlags(fs)
	tf := tracingFlags(fs)
	fs.Var(byteSize{&limits.MaxBodyBytes}, "max-body-bytes", "largest request body on the wire, e.g. 64MiB (default 64MiB)")
	fs.Var(byteSize{&limits.MaxDecompressedBytes}, "max-decompressed-bytes", "largest request body after gzip/zstd decompression (default 64MiB)")
	fs.Var(byteSize{&limits.MemoryBudget}, "memory-budget", "most bytes the requests in flight hold at once, HTTP and NATS together (bodies, decompressed bodies, tensors decoded from JSON); past it 429 (default 200MiB)")
	fs.IntVar(&limits.MaxConns, "max-conns", 0, "most HTTP connections at once (default 4096)")
	fs.DurationVar(&limits.IdleTimeout, "idle-timeout", 0, "how long an idle HTTP keep-alive connection is kept (default 30s)")
	fs.Int64Var(&limits.MaxTensorElements, "max-tensor-elements", 0, "most elements one request tensor may declare (default 1<<28)")
	fs.IntVar(&limits.CompressMinBytes, "compress-min-bytes", 0, "smallest response body compressed when the client accepts gzip/zstd (default 1024; -1 never)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve serve --model-repo DIR [flags]   (or: xserve --model-repo DIR [flags])")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := nf.noteSet(fs); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if *repoDir == "" {
		fs.Usage()
		return errors.New("serve: --model-repo DIR is required")
	}
	if *shutdownTimeout <= 0 {
		return fmt.Errorf("serve: --shutdown-timeout must be positive, got %v", *shutdownTimeout)
	}
	if *shutdownDelay < 0 {
		return fmt.Errorf("serve: --shutdown-delay must be 0 or more, got %v", *shutdownDelay)
	}
	splitPolicy, err := serving.ParseSplitBatches(*split)
	if err != nil {
		return fmt.Errorf("serve: --split-batches: %w", err)
	}
	policy, budget, err := lf.parse()
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	grpcOpts := grpcapi.Options{AccessLog: limits.AccessLog}
	if err := sf.apply(&limits, &grpcOpts); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	tracer, stopTracing, err := tracing.Setup(ctx, *tf)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("flushing traces failed", "endpoint", tf.Endpoint, "err", err)
		}
	}()
	limits.Tracer, grpcOpts.Tracer = tracer, tracer

	repo, err := modelrepo.Open(*repoDir)
	if err != nil {
		return err
	}
	client, err := openPlugin(*plugin)
	if err != nil {
		return err
	}
	defer client.Close()
	logPlugin(log, client)
	if *cacheDir != "" {
		if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
			return fmt.Errorf("serve: compile cache: %w", err)
		}
	}

	// NATS first: the embedded server, and the cluster compile cache's
	// connection, are there before the models load.
	ns, err := openNATS(nf, log)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	cc, err := openServeClusterCache(ctx, *clusterCacheOn, ns, ccf, *cacheDir, log)
	if err != nil {
		return err
	}
	// stop closes what the models do not need any more, in order.
	stop := func(ctx context.Context, parts ...error) error {
		errCache := cc.close(ctx)
		ns.stopEmbedded()
		return errors.Join(append(parts, errCache)...)
	}

	// announce re-registers the NATS endpoints when a load on demand or an
	// eviction changed the models held.
	var announce atomic.Pointer[natsapi.Server]
	mode, interval := controlMode(*control, *poll)
	start := time.Now()
	log.Info("loading models", "repository", repo.Root(), "compile_cache", *cacheDir, "cluster_cache", *clusterCacheOn, "model_control_mode", mode)
	mgr, err := serving.NewManager(ctx, serving.Options{
		Client:                 client,
		Repository:             repo,
		CompileCacheDir:        *cacheDir,
		CompileCache:           cc.cache(),
		CompileParallelism:     *compileJobs,
		ExactCompilesPerMinute: *exactCompiles,
		Lowering:               lower.Options{Platform: client.Platform(), NarrowInt64: *narrow},
		Logger:                 log,
		PollInterval:           interval,
		ControlMode:            mode,
		SplitBatches:           splitPolicy,
		MaxSequenceIdle:        *seqIdle,
		MaxSequences:           *maxSeqs,
		LoadPolicy:             policy,
		MemoryBudget:           budget,
		OnHeldChange: func() {
			if srv := announce.Load(); srv != nil {
				if err := srv.Sync(); err != nil {
					log.Warn("cannot announce the models held over NATS", "err", err)
				}
			}
		},
	})
	if err != nil {
		return stop(context.Background(), err)
	}
	ready := 0
	for _, st := range mgr.Status() {
		if st.State == serving.StateReady {
			ready++
			continue
		}
		log.Warn("model not ready", "model", st.Name, "version", st.Version, "state", st.State, "reason", st.Reason)
	}
	log.Info("models loaded", "ready", ready, "duration", time.Since(start).Round(time.Millisecond), "compilations", mgr.Compilations())

	limits.Logger = log
	limits.Version = buildVersion()
	if limits.MemoryBudget == 0 {
		limits.MemoryBudget = payload.DefaultMemoryBudget
	}
	if limits.Budget, err = payload.NewBudget(limits.MemoryBudget); err != nil {
		return stop(context.Background(), fmt.Errorf("serve: --memory-budget: %w", err), mgr.Shutdown(context.Background()))
	}
	backend := &metricsBackend{Manager: mgr, strict: *strict, cache: cc}
	srv, err := httpapi.New(backend, limits)
	if err != nil {
		return stop(context.Background(), err, mgr.Shutdown(context.Background()))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return stop(context.Background(), fmt.Errorf("serve: %w", err), mgr.Shutdown(context.Background()))
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	gs, err := startGRPC(*grpcAddr, mgr, limits, grpcOpts, log)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
		defer cancel()
		errHTTP := srv.Shutdown(sctx)
		<-served
		return stop(sctx, fmt.Errorf("serve: %w", err), errHTTP, mgr.Shutdown(sctx))
	}

	// The replica's NATS subscriptions, on a connection of their own.
	err = ns.serve(ctx, mgr, limits, policy == serving.LoadLazy)
	if srv := ns.server(); srv != nil {
		backend.nats.Store(srv)
		announce.Store(srv)
	}
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
		defer cancel()
		errHTTP := srv.Shutdown(sctx)
		<-served
		return stop(sctx, fmt.Errorf("serve: %w", err), errHTTP, gs.shutdown(sctx), mgr.Shutdown(sctx))
	}

	select {
	case err := <-served: // the listener failed
		sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
		defer cancel()
		errs := []error{fmt.Errorf("serve: %w", err), ns.shutdown(sctx), gs.shutdown(sctx), mgr.Shutdown(sctx)}
		return stop(sctx, errs...)
	case <-ctx.Done():
	}
	if *shutdownDelay > 0 {
		backend.draining.Store(true)
		log.Info("shutting down: not ready any more, still serving", "delay", *shutdownDelay)
		time.Sleep(*shutdownDelay)
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", *shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	// HTTP and NATS stop taking requests and finish theirs side by side;
	// the models go once both are done.
	natsDone := make(chan error, 1)
	go func() { natsDone <- ns.shutdown(sctx) }()
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- gs.shutdown(sctx) }()
	errHTTP := srv.Shutdown(sctx)
	<-served
	errNATS, errGRPC := <-natsDone, <-grpcDone
	errMgr := mgr.Shutdown(sctx)
	if err := stop(sctx, errHTTP, errNATS, errGRPC, errMgr); err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// defaultCompileCache is $XSERVE_CACHE/compile, else .cache/compile.
func defaultCompileCache() string {
	if c := os.Getenv(pjrt.EnvCache); c != "" {
		return filepath.Join(c, "compile")
	}
	return filepath.Join(".cache", "compile")
}

// newLogger makes the slog logger the flags ask for.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// buildVersion is the module version the binary was built from, or "dev".
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// byteSize is a flag holding a size in bytes: a number with an optional
// suffix B, KiB, MiB, GiB (or K, M, G, also powers of 1024).
type byteSize struct{ v *int64 }

func (b byteSize) String() string {
	if b.v == nil || *b.v == 0 {
		return ""
	}
	return strconv.FormatInt(*b.v, 10)
}

func (b byteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("want a positive size such as 1048576, 64MiB or 1GiB")
	}
	*b.v = n * mult
	return nil
}

// memoryBudgetFlag is --model-memory-budget: a size for every device
// ("8GiB"), sizes per device index ("0=40GiB,1=16GiB"), or both
// ("8GiB,1=16GiB").
type memoryBudgetFlag struct{ b *serving.MemoryBudget }

func (f memoryBudgetFlag) String() string {
	if f.b == nil || f.b.Bytes == 0 && len(f.b.Devices) == 0 {
		return ""
	}
	parts := []string{}
	if f.b.Bytes > 0 {
		parts = append(parts, strconv.FormatInt(f.b.Bytes, 10))
	}
	for _, d := range slices.Sorted(maps.Keys(f.b.Devices)) {
		parts = append(parts, fmt.Sprintf("%d=%d", d, f.b.Devices[d]))
	}
	return strings.Join(parts, ",")
}

func (f memoryBudgetFlag) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		dev, size, perDevice := strings.Cut(part, "=")
		if !perDevice {
			size = dev
		}
		var n int64
		if err := (byteSize{&n}).Set(size); err != nil {
			return fmt.Errorf("%q: %w", part, err)
		}
		if !perDevice {
			f.b.Bytes = n
			continue
		}
		d, err := strconv.Atoi(strings.TrimSpace(dev))
		if err != nil || d < 0 {
			return fmt.Errorf("%q: want DEVICE=SIZE with a device index, e.g. 0=40GiB", part)
		}
		if f.b.Devices == nil {
			f.b.Devices = map[int]int64{}
		}
		f.b.Devices[d] = n
	}
	return nil
}

// metricsBackend is the Manager as the HTTP API's backend, with /metrics
// extended by the NATS replica's counts once NATS serves, and the server's
// readiness made strict (--strict-readiness) and dropped while draining.
type metricsBackend struct {
	*serving.Manager
	cache    *clusterCache // nil without --cluster-cache
	nats     atomic.Pointer[natsapi.Server]
	strict   bool
	draining atomic.Bool
}

// Ready reports whether the server takes requests: not draining, the
// Manager is done loading, the durable NATS consumer (if any) is there (not
// gone and being re-created, natsapi.Server.DurableHealth) and, when
// strict, every model version that should load is READY (a model that
// failed to load keeps the server unready until it is fixed or removed). A
// version being unloaded after an upgrade, or unloaded on purpose through
// the repository API, does not count.
func (b *metricsBackend) Ready() bool {
	if b.draining.Load() || !b.Manager.Ready() {
		return false
	}
	if ns := b.nats.Load(); ns != nil && ns.DurableHealth() != nil {
		return false
	}
	if !b.strict {
		return true
	}
	for _, st := range b.Manager.Status() {
		if st.State != serving.StateReady && st.State != serving.StateUnloading && !st.Unloaded {
			return false
		}
	}
	return true
}

// WriteMetrics writes the Manager's metrics, the cluster compile cache's,
// then the NATS ones.
func (b *metricsBackend) WriteMetrics(w io.Writer) error {
	if err := b.Manager.WriteMetrics(w); err != nil {
		return err
	}
	if err := b.cache.writeMetrics(w); err != nil {
		return err
	}
	if ns := b.nats.Load(); ns != nil {
		return ns.WriteMetrics(w)
	}
	return nil
}

// controlMode is the Manager's model control mode and poll interval for the
// flags: only poll polls, and poll with --poll-interval 0 is none.
func controlMode(mode string, interval time.Duration) (serving.ControlMode, time.Duration) {
	switch {
	case mode != string(serving.ControlPoll):
		return serving.ControlMode(mode), 0
	case interval <= 0:
		return serving.ControlNone, 0
	}
	return serving.ControlPoll, interval
}

// loadPolicyOptions are the flags of when models load.
type loadPolicyOptions struct {
	policy *string
	budget serving.MemoryBudget
}

func loadPolicyFlags(fs *flag.FlagSet) *loadPolicyOptions {
	o := &loadPolicyOptions{
		policy: fs.String("model-load-policy", "eager", "when models load: eager (every model at start) or lazy (a model loads on its first request; past --model-memory-budget the least recently used are unloaded; over NATS a request goes to a replica holding its model)"),
	}
	fs.Var(memoryBudgetFlag{&o.budget}, "model-memory-budget", "with --model-load-policy lazy: device memory the loaded models may take (their weights), e.g. 8GiB for each device, or 0=40GiB,1=16GiB per device index (default unbounded)")
	return o
}

// parse checks the load policy flags together.
func (o *loadPolicyOptions) parse() (serving.LoadPolicy, serving.MemoryBudget, error) {
	policy, err := serving.ParseLoadPolicy(*o.policy)
	if err != nil {
		return policy, o.budget, fmt.Errorf("serve: --model-load-policy: %w", err)
	}
	if policy != serving.LoadLazy && (o.budget.Bytes > 0 || len(o.budget.Devices) > 0) {
		return policy, o.budget, errors.New("serve: --model-memory-budget bounds the models loaded on demand: it needs --model-load-policy lazy")
	}
	return policy, o.budget, nil
}

// openServeClusterCache opens the cluster compile cache of `xserve serve`
// on a connection of its own when on (nil otherwise; NATS off is an
// error); on failure it stops the embedded NATS server.
func openServeClusterCache(ctx context.Context, on bool, ns *natsServing, f *clusterCacheFlags, localDir string, log *slog.Logger) (*clusterCache, error) {
	if !on {
		return nil, nil
	}
	if ns == nil {
		return nil, errClusterCacheNeedsNATS
	}
	nc, err := ns.connect(ctx, "compile cache")
	var cc *clusterCache
	if err == nil {
		cc, err = f.open(ctx, nc, localDir, log)
	}
	if err != nil {
		ns.stopEmbedded()
		return nil, fmt.Errorf("serve: %w", err)
	}
	return cc, nil
}

// logPlugin logs the PJRT plugin loaded, its CPU execution mode and kernels.
func logPlugin(log *slog.Logger, client *pjrt.Client) {
	log.Info("loaded PJRT plugin", "plugin", client.String(), "version", client.PluginVersion(), "path", client.PluginPath())
	if m := client.CPUExecution(); m != "" {
		log.Info("CPU execution", "mode", m)
	}
	if ks := client.Kernels(); len(ks) > 0 {
		log.Info("loaded CPU kernels", "kernels", strings.Join(ks, ","), "path", client.KernelsFile())
	} else if err := client.KernelsError(); err != nil {
		log.Warn("CPU kernels not loaded: convolutions run on XLA's own kernels", "err", err)
	}
}
