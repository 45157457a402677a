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

	httpapi "github.com/xserve/xserve/api/http"
	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/shm"
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
	o, err := parseServeOptions(args, stderr)
	if err != nil {
		return err
	}
	tracer, stopTracing, err := tracing.Setup(ctx, *o.Tracing)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			o.Logger.Warn("flushing traces failed", "endpoint", o.Tracing.Endpoint, "err", err)
		}
	}()
	o.HTTP.Tracer, o.GRPC.Tracer = tracer, tracer
	client, err := openServePlugin(o)
	if err != nil {
		return err
	}
	defer client.Close()
	s, err := startServer(ctx, o, client)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// openServePlugin loads the PJRT plugin and logs what it runs with.
func openServePlugin(o *serveOptions) (*pjrt.Client, error) {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{Path: o.Plugin})
	if err != nil {
		return nil, err
	}
	client, err := pjrt.OpenWith(path, pjrt.OpenOptions{CPUDevices: o.CPUDevices})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	logPlugin(o.Logger, client)
	return client, nil
}

// serveProcess is `xserve serve` while it serves: the models and the protocols
// in front of them.
type serveProcess struct {
	o       *serveOptions
	mgr     *serving.Manager
	backend *metricsBackend
	http    *httpapi.Server
	served  chan error // the HTTP listener's end
	grpc    *grpcServer
	nats    *natsServing  // nil with NATS off
	cache   *clusterCache // nil without --cluster-cache
	// announce re-registers the NATS endpoints when a load on demand or an
	// eviction changed the models held.
	announce atomic.Pointer[natsapi.Server]
}

// startServer opens NATS and the cluster compile cache (so that they are
// there before the models load), loads the models and starts HTTP, gRPC and
// the NATS subscriptions. On an error what it started is stopped again.
func startServer(ctx context.Context, o *serveOptions, client *pjrt.Client) (*serveProcess, error) {
	log := o.Logger
	devices, err := o.Devices.resolve(client.Devices(), client.Platform())
	if err != nil {
		return nil, err
	}
	repo, err := modelrepo.Open(o.Repo)
	if err != nil {
		return nil, err
	}
	if dir := o.Serving.CompileCacheDir; dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("serve: compile cache: %w", err)
		}
	}
	s := &serveProcess{o: o, served: make(chan error, 1)}
	if s.nats, err = openNATS(o.NATS, log); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if s.cache, err = openServeClusterCache(ctx, o.ClusterCache, s.nats, o.ClusterCacheFlags, o.Serving.CompileCacheDir, log); err != nil {
		return nil, err
	}
	mopts := o.Serving
	mopts.Client, mopts.Repository, mopts.Logger = client, repo, log
	mopts.Devices = devices
	mopts.CompileCache = s.cache.cache()
	mopts.Lowering = lower.Options{Platform: client.Platform(), NarrowInt64: o.NarrowInt64}
	mopts.OnHeldChange = s.announceHeld
	mopts.RelaxedReadiness = !o.StrictReadiness
	start := time.Now()
	log.Info("loading models", "repository", repo.Root(), "compile_cache", mopts.CompileCacheDir, "cluster_cache", o.ClusterCache, "model_control_mode", mopts.ControlMode)
	if s.mgr, err = serving.NewManager(ctx, mopts); err != nil {
		return nil, s.stop(context.Background(), err)
	}
	logLoaded(log, s.mgr, start)
	s.backend = &metricsBackend{Manager: s.mgr, cache: s.cache}
	if err := s.startProtocols(ctx); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("serve: %w", err), s.shutdown(sctx))
	}
	return s, nil
}

// announceHeld re-registers the NATS endpoints (the Manager's OnHeldChange).
func (s *serveProcess) announceHeld() {
	if srv := s.announce.Load(); srv != nil {
		if err := srv.Sync(); err != nil {
			s.o.Logger.Warn("cannot announce the models held over NATS", "err", err)
		}
	}
}

// stop closes what the models do not need any more, in order: the cluster
// compile cache, then the embedded NATS server; parts are the errors so far.
func (s *serveProcess) stop(ctx context.Context, parts ...error) error {
	errCache := s.cache.close(ctx)
	s.nats.stopEmbedded()
	return errors.Join(append(parts, errCache)...)
}

// logLoaded logs the models that are not ready, then the count of those
// that are.
func logLoaded(log *slog.Logger, mgr *serving.Manager, start time.Time) {
	ready := 0
	for _, st := range mgr.Status() {
		if st.State == serving.StateReady {
			ready++
			continue
		}
		log.Warn("model not ready", "model", st.Name, "version", st.Version, "state", st.State, "reason", st.Reason)
	}
	log.Info("models loaded", "ready", ready, "duration", time.Since(start).Round(time.Millisecond), "compilations", mgr.Compilations())
}

// startProtocols starts HTTP, then gRPC, then NATS (an embedded server, or
// a connection to the server or cluster --nats-url names, then the
// replica's subscriptions).
func (s *serveProcess) startProtocols(ctx context.Context) error {
	o := s.o
	limits := &o.HTTP
	limits.Logger = o.Logger
	limits.Version = buildVersion()
	if limits.MemoryBudget == 0 {
		limits.MemoryBudget = payload.DefaultMemoryBudget
	}
	var err error
	if limits.Budget, err = payload.NewBudget(limits.MemoryBudget); err != nil {
		return fmt.Errorf("--memory-budget: %w", err)
	}
	o.Logger.Info("memory budget", "memory_budget_mb", limits.MemoryBudget>>20, "go_memory_limit_mb", limits.Budget.LimitRuntime()>>20)
	// One registry of Triton's system shared-memory regions for HTTP and
	// gRPC (a region registered over one is used over the other); closed,
	// its regions unmapped, once both have stopped.
	limits.SharedMemory = shm.New(shm.Limits{MaxRegions: o.SharedMemoryRegions, Off: o.SharedMemoryRegions == 0})
	if s.nats != nil {
		// Ready on every protocol only once NATS serves too: HTTP and gRPC
		// answer before the replica's NATS subscriptions exist.
		s.mgr.AddReadinessCheck(s.natsHealth)
	}
	if s.http, err = httpapi.New(s.backend, *limits); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		s.http = nil
		return err
	}
	go func() { s.served <- s.http.Serve(ln) }()
	if s.grpc, err = startGRPC(o.GRPCAddr, s.mgr, *limits, o.GRPC, o.Logger); err != nil {
		return err
	}
	// The replica's NATS subscriptions, on a connection of their own.
	err = s.nats.serve(ctx, s.mgr, *limits, o.Serving.LoadPolicy == serving.LoadLazy)
	if srv := s.nats.server(); srv != nil {
		s.backend.nats.Store(srv)
		s.announce.Store(srv)
	}
	return err
}

// natsHealth is the readiness check of the NATS side: not ready until the
// replica's subscriptions are on the NATS server (and, with --nats-durable,
// its durable consumer consumes), then as natsapi.Server.Health says.
func (s *serveProcess) natsHealth() error {
	srv := s.announce.Load()
	if srv == nil {
		return errors.New("the NATS subscriptions are not set up yet")
	}
	return srv.Health()
}

// run serves until ctx is done (SIGINT/SIGTERM) or the HTTP listener
// fails, then shuts down: not ready first (--shutdown-delay), then every
// protocol finishes its requests within --shutdown-timeout.
func (s *serveProcess) run(ctx context.Context) error {
	o := s.o
	var failed error
	select {
	case err := <-s.served: // the listener failed
		s.served <- err
		failed = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Not ready from now on, on every protocol.
	s.mgr.Drain()
	if failed == nil && o.ShutdownDelay > 0 {
		o.Logger.Info("shutting down: not ready any more, still serving", "delay", o.ShutdownDelay)
		time.Sleep(o.ShutdownDelay)
	}
	if failed == nil {
		o.Logger.Info("shutting down: finishing in-flight requests", "timeout", o.ShutdownTimeout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	if err := s.shutdown(sctx); err != nil {
		return errors.Join(failed, fmt.Errorf("serve: shutdown: %w", err))
	}
	if failed != nil {
		return failed
	}
	o.Logger.Info("stopped")
	return nil
}

// shutdown stops what startServer started: HTTP, gRPC and NATS stop taking
// requests and finish theirs side by side; the models go once all are
// done. Parts not started are skipped.
func (s *serveProcess) shutdown(ctx context.Context) error {
	natsDone := make(chan error, 1)
	go func() { natsDone <- s.nats.shutdown(ctx) }()
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- s.grpc.shutdown(ctx) }()
	var errHTTP error
	if s.http != nil {
		errHTTP = s.http.Shutdown(ctx)
		<-s.served
	}
	errNATS, errGRPC := <-natsDone, <-grpcDone
	if r := s.o.HTTP.SharedMemory; r != nil {
		errHTTP = errors.Join(errHTTP, r.Close())
	}
	return s.stop(ctx, errHTTP, errNATS, errGRPC, s.mgr.Shutdown(ctx))
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
// extended by the NATS replica's counts once NATS serves.
type metricsBackend struct {
	*serving.Manager
	cache *clusterCache // nil without --cluster-cache
	nats  atomic.Pointer[natsapi.Server]
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
	fs.Var(memoryBudgetFlag{&o.budget}, "model-memory-budget", "device memory the loaded models may take (their weights, on each device a model is placed on), e.g. 8GiB for each device, or 0=40GiB,1=16GiB per device index: with --model-load-policy lazy the least recently used models are unloaded to make room, else a model that would not fit is refused (default unbounded)")
	return o
}

// parse checks the load policy flags together.
func (o *loadPolicyOptions) parse() (serving.LoadPolicy, serving.MemoryBudget, error) {
	policy, err := serving.ParseLoadPolicy(*o.policy)
	if err != nil {
		return policy, o.budget, fmt.Errorf("serve: --model-load-policy: %w", err)
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
	log.Info("loaded PJRT plugin", "plugin", client.String(), "version", client.PluginVersion(), "path", client.PluginPath(), "devices", client.Devices())
	if m := client.CPUExecution(); m != "" {
		log.Info("CPU execution", "mode", m)
	}
	if ks := client.Kernels(); len(ks) > 0 {
		log.Info("loaded CPU kernels", "kernels", strings.Join(ks, ","), "path", client.KernelsFile())
	} else if err := client.KernelsError(); err != nil {
		log.Warn("CPU kernels not loaded: convolutions run on XLA's own kernels", "err", err)
	}
}
