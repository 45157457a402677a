package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
)

// runCompile is `xserve compile`: it loads every model version of the
// repository that `serve` would load, compiles each of its buckets into the
// compile cache (whatever the config's warmup says), prints a progress line
// per bucket and a summary, and fails if any version could not be compiled.
// A server started later on the same cache, with the same binary, plugin,
// machine kind and lowering flags, then loads every executable instead of
// compiling it.
func runCompile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repoDir := fs.String("model-repo", "", "model repository directory (required)")
	cacheDir := fs.String("compile-cache", defaultCompileCache(), "compile cache directory to fill")
	compileJobs := fs.Int("compile-parallelism", 0, "executables compiled at once across all models (0: one per CPU)")
	plugin := fs.String("pjrt-plugin", "", "PJRT plugin path or platform name (default: $XSERVE_PJRT_PLUGIN, then what \"make pjrt\" installed)")
	narrow := fs.Bool("narrow-int64", false, "lower int64 as int32 (as for TPUs); must match the server's flag")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	publish := fs.Bool("publish", false, "also publish every executable to the cluster compile cache (the JetStream object store the replicas' --cluster-cache reads) on the NATS cluster --nats-url names")
	publishTimeout := fs.Duration("publish-timeout", 10*time.Minute, "with --publish: how long to wait for the publications once compiling is done")
	conn := addNATSConnFlags(fs, "with --publish: the NATS server or cluster whose object store the replicas share")
	ccf := addClusterCacheFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve compile --model-repo DIR --compile-cache DIR [--publish --nats-url URL] [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("compile: unexpected arguments %q", fs.Args())
	}
	if *repoDir == "" {
		fs.Usage()
		return errors.New("compile: --model-repo DIR is required")
	}
	if *cacheDir == "" {
		return errors.New("compile: --compile-cache DIR is required (the executables are written there)")
	}
	if *publish && *conn.url == "" {
		return errors.New("compile: --publish needs --nats-url (the NATS cluster whose object store the replicas share)")
	}
	if err := conn.check(); err != nil {
		return fmt.Errorf("compile: %w", err)
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	repo, err := modelrepo.Open(*repoDir)
	if err != nil {
		return err
	}
	client, err := openPlugin(*plugin)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
		return fmt.Errorf("compile: compile cache: %w", err)
	}
	cc, err := openPublishCache(ctx, *publish, conn, ccf, *cacheDir, log)
	if err != nil {
		return err
	}
	defer cc.close(context.Background())
	into := *cacheDir
	if cc != nil {
		into += " and " + cc.Store().String()
	}
	fmt.Fprintf(stdout, "compiling %s with %s into %s\n", repo.Root(), client, into)

	p := &compileProgress{w: stdout, per: map[string]*versionCount{}}
	start := time.Now()
	mgr, err := serving.NewManager(ctx, serving.Options{
		Client:             client,
		Repository:         repo,
		CompileCacheDir:    *cacheDir,
		CompileCache:       cc.cache(),
		CompileParallelism: *compileJobs,
		Lowering:           lower.Options{Platform: client.Platform(), NarrowInt64: *narrow},
		Logger:             log,
		CompileAll:         true,
		OnBucket:           p.bucket,
	})
	if err != nil {
		return err
	}
	status := mgr.Status()
	compiled := mgr.Compilations()
	errShutdown := mgr.Shutdown(context.Background())
	elapsed := time.Since(start)

	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tVERSION\tSTATE\tBUCKETS\tCOMPILED\tFROM CACHE\tREASON")
	var failed []string
	buckets, cached := 0, 0
	for _, st := range status {
		c := p.count(st.Name, st.Version)
		buckets += c.compiled + c.cached
		cached += c.cached
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", st.Name, st.Version, st.State, c.compiled+c.cached, c.compiled, c.cached, st.Reason)
		if st.State != serving.StateReady {
			failed = append(failed, fmt.Sprintf("%s version %d: %s", st.Name, st.Version, st.Reason))
		}
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d model versions, %d buckets: %d compiled, %d from the cache, %d failed, in %s; cache %s (%s)\n",
		len(status), buckets, compiled, cached, len(failed), elapsed.Round(time.Millisecond), *cacheDir, dirSize(*cacheDir))
	errShutdown = errors.Join(errShutdown, cc.report(stdout, *publishTimeout))
	if len(status) == 0 {
		return fmt.Errorf("compile: the repository %s has no model to compile", repo.Root())
	}
	if len(failed) > 0 {
		return fmt.Errorf("compile: %d of %d model versions failed:\n  %s", len(failed), len(status), strings.Join(failed, "\n  "))
	}
	return errShutdown
}

// openPublishCache opens the cluster compile cache `xserve compile
// --publish` fills (nil without --publish).
func openPublishCache(ctx context.Context, publish bool, conn *natsConnFlags, f *clusterCacheFlags, localDir string, log *slog.Logger) (*clusterCache, error) {
	if !publish {
		return nil, nil
	}
	nc, err := conn.connect(ctx, "compile cache", log)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	cc, err := f.open(ctx, nc, localDir, log)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	return cc, nil
}

// compileProgress prints one line per built bucket and counts them per
// model version.
type compileProgress struct {
	w   io.Writer
	mu  sync.Mutex
	per map[string]*versionCount
}

type versionCount struct{ compiled, cached int }

func (p *compileProgress) count(model string, version int64) versionCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.per[fmt.Sprintf("%s/%d", model, version)]; c != nil {
		return *c
	}
	return versionCount{}
}

func (p *compileProgress) bucket(ev serving.BucketEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := fmt.Sprintf("%s/%d", ev.Model, ev.Version)
	c := p.per[key]
	if c == nil {
		c = &versionCount{}
		p.per[key] = c
	}
	what := "compiled"
	switch {
	case ev.Err != nil:
		what = "FAILED: " + ev.Err.Error()
	case ev.Cached:
		what = "from the cache"
		c.cached++
	default:
		c.compiled++
	}
	bar := ""
	if ev.Total > 0 {
		const width = 20
		n := ev.Done * width / ev.Total
		bar = fmt.Sprintf("[%s%s] %*d/%d ", strings.Repeat("#", n), strings.Repeat(".", width-n), len(fmt.Sprint(ev.Total)), ev.Done, ev.Total)
	}
	fmt.Fprintf(p.w, "%s%s v%d bucket %s: %s in %s\n", bar, ev.Model, ev.Version, ev.Bucket, what, ev.Duration.Round(time.Millisecond))
}

// dirSize formats the total size of the regular files under dir.
func dirSize(dir string) string {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}
