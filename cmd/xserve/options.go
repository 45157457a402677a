package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	grpcapi "github.com/xserve/xserve/api/grpc"
	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/api/shm"
	"github.com/xserve/xserve/internal/flagfile"
	"github.com/xserve/xserve/internal/tracing"
	"github.com/xserve/xserve/serving"
)

// serveOptions is the whole configuration of `xserve serve`: one tree that
// the flags and the --config file (whose keys are the flags' names) fill,
// flags winning. Each part is the Options of the package it configures;
// the parts that only cmd/xserve uses are plain fields.
type serveOptions struct {
	Repo     string // --model-repo
	HTTPAddr string // --http-addr
	GRPCAddr string // --grpc-addr ("" disables gRPC)
	Plugin   string // --pjrt-plugin
	// CPUDevices is the CPU plugin's number of host devices (--cpu-devices).
	CPUDevices int
	// Devices places the models on devices of the client (--devices);
	// startServer resolves it into Serving.Devices.
	Devices devicesFlag
	// Serving holds the Manager's options the flags set; the build adds
	// the client, the repository and the logger.
	Serving serving.Options
	// HTTP holds the HTTP API's limits, which gRPC and NATS share.
	HTTP httpapi.Options
	GRPC grpcapi.Options
	// SharedMemoryRegions bounds Triton's system shared-memory regions
	// registered at once (--shared-memory-regions; 0 turns the extension off).
	SharedMemoryRegions int
	NATS                *natsOptions
	// Load holds --model-load-policy and --model-memory-budget, which
	// validate turns into Serving.LoadPolicy and Serving.MemoryBudget.
	Load *loadPolicyOptions
	// ClusterCache shares the compile cache through a JetStream object
	// store (--cluster-cache), configured by ClusterCacheFlags.
	ClusterCache      bool
	ClusterCacheFlags *clusterCacheFlags
	Security          *securityFlags
	Tracing           *tracing.Options
	// NarrowInt64 lowers int64 as int32 (--narrow-int64).
	NarrowInt64     bool
	ShutdownTimeout time.Duration
	ShutdownDelay   time.Duration
	StrictReadiness bool
	Logger          *slog.Logger

	config, split, control, logLevel, logFormat string
	poll                                        time.Duration
}

// parseServeOptions fills serveOptions from args (and the file --config
// names) and validates it; errors name the flag or the config key.
func parseServeOptions(args []string, stderr io.Writer) (*serveOptions, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve serve --model-repo DIR [flags]   (or: xserve --model-repo DIR [flags])")
		fmt.Fprintln(stderr, "       xserve serve --config xserve.yaml [flags]   (the file's keys are the flags' names; flags win)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.config != "" {
		if err := flagfile.Apply(fs, o.config); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	if err := o.NATS.noteSet(fs); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return nil, fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	if o.Repo == "" {
		fs.Usage()
		return nil, errors.New("serve: --model-repo DIR is required")
	}
	if err := o.validate(stderr); err != nil {
		return nil, err
	}
	return o, nil
}

// serveFlags registers serve's flags on fs, each writing into the tree it
// returns.
func serveFlags(fs *flag.FlagSet) *serveOptions {
	o := &serveOptions{}
	fs.StringVar(&o.config, "config", "", "YAML file of serve's options: each key a flag's name (nested keys join with '-', lists are comma-separated values); the command line wins over it")
	fs.StringVar(&o.Repo, "model-repo", "", "model repository directory (required)")
	fs.StringVar(&o.HTTPAddr, "http-addr", ":8080", "HTTP listen address (host:port; port 0 picks a free one)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", ":8001", `KServe v2 gRPC listen address (host:port; port 0 picks a free one; "" disables gRPC)`)
	fs.StringVar(&o.Plugin, "pjrt-plugin", "", "PJRT plugin path or platform name (default: $XSERVE_PJRT_PLUGIN, then what \"make pjrt\" installed)")
	fs.IntVar(&o.CPUDevices, "cpu-devices", 0, "with the CPU plugin: the number of host devices its client has (its cpu_device_count; 0: the plugin's default); a model's config.yaml devices: [N] places it on device N")
	fs.Var(&o.Devices, "devices", "devices of the PJRT client each model is placed on unless its config.yaml lists devices: all, or indexes such as 0,1 (one executable per bucket and device; each execution runs on the least loaded; default: device 0)")
	fs.StringVar(&o.Serving.CompileCacheDir, "compile-cache", defaultCompileCache(), `on-disk compile cache directory ("" disables it)`)
	fs.IntVar(&o.Serving.CompileParallelism, "compile-parallelism", 0, "executables compiled at once across all models (0: one per CPU)")
	fs.IntVar(&o.Serving.ExactCompilesPerMinute, "exact-compiles-per-minute", 0, "compiles of exact-size executables (sizes no bucket holds) per minute across all models; requests needing one wait within their deadline (0: 30)")
	fs.DurationVar(&o.Serving.MaxSequenceIdle, "max-sequence-idle", 0, "a sequence of a stateful model idle this long expires and its state is freed; its next request is refused (0: 1m)")
	fs.IntVar(&o.Serving.MaxSequences, "max-sequences", 0, "active sequences per stateful model version, their state kept on the device (0: 1024)")
	fs.StringVar(&o.split, "split-batches", "auto", "on a CPU, run an execution's rows as shards on idle cores at once: auto (when no other execution runs and each bucket's own timings say it is faster), off, always")
	fs.DurationVar(&o.poll, "poll-interval", 5*time.Second, "with --model-control-mode poll: how often to rescan the model repository for changes")
	fs.StringVar(&o.control, "model-control-mode", "poll", "who changes the loaded models: poll (follow the repository; the load/unload API is refused), explicit (load every model at start, then only the load/unload API), none (load once)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&o.HTTP.AccessLog, "access-log", false, "log every HTTP and gRPC request at level info, with its request id")
	fs.BoolVar(&o.NarrowInt64, "narrow-int64", false, "lower int64 as int32 (as for TPUs)")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "grace period: how long SIGTERM waits for in-flight and queued requests (HTTP and NATS) before exiting")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", 0, "on SIGTERM, answer /v2/health/ready 503 but keep serving this long before draining (lets a load balancer stop routing here first)")
	fs.BoolVar(&o.StrictReadiness, "strict-readiness", true, "/v2/health/ready is 200 only when every model version that should load is READY (false: once loading is done, whatever failed)")
	o.Load = loadPolicyFlags(fs)
	o.NATS = natsFlags(fs)
	fs.BoolVar(&o.ClusterCache, "cluster-cache", false, "share the compile cache with the other replicas through a JetStream object store on the NATS connection (the embedded server, or the cluster --nats-url names): local cache, then the cluster's, then compile; what this replica compiles is published within seconds")
	o.ClusterCacheFlags = addClusterCacheFlags(fs)
	o.Security = newSecurityFlags(fs)
	o.Tracing = tracingFlags(fs)
	limits := &o.HTTP
	fs.Var(byteSize{&limits.MaxBodyBytes}, "max-body-bytes", "largest request body on the wire, e.g. 64MiB (default 64MiB)")
	fs.Var(byteSize{&limits.MaxDecompressedBytes}, "max-decompressed-bytes", "largest request body after gzip/zstd decompression (default 64MiB)")
	fs.Var(byteSize{&limits.MemoryBudget}, "memory-budget", "most bytes the requests in flight hold at once, HTTP and NATS together (bodies, decompressed bodies, tensors decoded from JSON); past it 429 (default 200MiB)")
	fs.IntVar(&limits.MaxConns, "max-conns", 0, "most HTTP connections at once (default 4096)")
	fs.IntVar(&limits.MaxConnsPerIP, "max-conns-per-ip", 0, "most HTTP connections from one IPv4 address; past it 429 (default half of --max-conns; -1 no limit, e.g. behind a proxy)")
	fs.DurationVar(&limits.IdleTimeout, "idle-timeout", 0, "how long an idle HTTP keep-alive connection is kept (default 30s)")
	fs.DurationVar(&limits.ReadHeaderTimeout, "read-header-timeout", 0, "how long a request's headers may take to arrive, whatever --idle-timeout is (default 10s)")
	fs.DurationVar(&limits.ReadTimeout, "read-timeout", 0, "how long a request's body may take to arrive, after its headers (default 60s)")
	fs.Int64Var(&limits.MinReadRate, "min-read-rate", 0, "slowest a request body may arrive, in bytes/s on average after --read-header-timeout; slower is 408 (default 4096; -1 none)")
	fs.Int64Var(&limits.MaxTensorElements, "max-tensor-elements", 0, "most elements one request tensor may declare (default 1<<28)")
	fs.IntVar(&o.SharedMemoryRegions, "shared-memory-regions", shm.DefaultMaxRegions, "most system shared-memory regions (Triton's extension, HTTP and gRPC) registered at once; 0 turns the extension off (registration refused)")
	fs.IntVar(&limits.CompressMinBytes, "compress-min-bytes", 0, "smallest response body compressed when the client accepts gzip/zstd (default 1024; -1 never)")
	return o
}

// validate checks the values no flag type checks, turns the text flags
// into their typed options, and makes the logger.
func (o *serveOptions) validate(stderr io.Writer) error {
	if o.ShutdownTimeout <= 0 {
		return fmt.Errorf("serve: --shutdown-timeout must be positive, got %v", o.ShutdownTimeout)
	}
	if o.CPUDevices < 0 {
		return fmt.Errorf("serve: --cpu-devices must be 0 or more, got %d", o.CPUDevices)
	}
	if o.SharedMemoryRegions < 0 {
		return fmt.Errorf("serve: --shared-memory-regions must be 0 (off) or more, got %d", o.SharedMemoryRegions)
	}
	if o.ShutdownDelay < 0 {
		return fmt.Errorf("serve: --shutdown-delay must be 0 or more, got %v", o.ShutdownDelay)
	}
	split, err := serving.ParseSplitBatches(o.split)
	if err != nil {
		return fmt.Errorf("serve: --split-batches: %w", err)
	}
	o.Serving.SplitBatches = split
	if o.Serving.LoadPolicy, o.Serving.MemoryBudget, err = o.Load.parse(); err != nil {
		return err
	}
	o.Serving.ControlMode, o.Serving.PollInterval = controlMode(o.control, o.poll)
	if o.Logger, err = newLogger(stderr, o.logLevel, o.logFormat); err != nil {
		return err
	}
	o.GRPC.AccessLog = o.HTTP.AccessLog
	if err := o.Security.apply(&o.HTTP, &o.GRPC); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
