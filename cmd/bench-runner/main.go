// Command bench-runner times xserve in process for bench/peers.py, which
// drives it over stdin/stdout so that xserve, ONNX Runtime and OpenVINO run
// interleaved on the same inputs. Each model is served by a serving.Manager,
// as `xserve serve` serves it (buckets, split executions, output slicing),
// with batching off and without the wire: each timed call is one
// Manager.Infer. Commands, one a line:
//
//	load KEY MODEL NAME=FILE.npy ...   serve MODEL for inputs of those shapes; prints "ok"
//	time KEY N                         runs KEY N times; prints the N latencies in ns
//	cputime KEY N                      runs KEY N times; prints the CPU time (user + system) of the process over each, in ns
//	quit
//
// The model is served from a repository of its own whose config.yaml has
// the inputs' sizes as buckets, and their half for the leading (batch)
// symbol, so that a split execution (serving.SplitBatches) has its shard
// bucket; every bucket is compiled at load. XSERVE_SPLIT_BATCHES (auto, off,
// always) sets the split policy. Any error is printed as "error: ..." and
// ends the command, not the process.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// warmupCalls are the calls load makes before the first timed one: enough
// for each bucket's split chooser to have measured both ways.
const warmupCalls = 30

type loaded struct {
	mgr *serving.Manager
	dir string
	req *serving.InferRequest
}

func (m *loaded) close() {
	m.mgr.Shutdown(context.Background())
	os.RemoveAll(m.dir)
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-runner:", err)
		os.Exit(1)
	}
}

func run(stdin io.Reader, stdout io.Writer) error {
	split, err := serving.ParseSplitBatches(os.Getenv("XSERVE_SPLIT_BATCHES"))
	if err != nil {
		return fmt.Errorf("XSERVE_SPLIT_BATCHES: %w", err)
	}
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "."})
	if err != nil {
		return err
	}
	client, err := pjrt.Open(path)
	if err != nil {
		return err
	}
	defer client.Close()
	models := map[string]*loaded{}
	defer func() {
		for _, m := range models {
			m.close()
		}
	}()
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "quit":
			return nil
		case f[0] == "load" && len(f) >= 3:
			var m *loaded
			if m, err = load(client, split, f[2], f[3:]); err == nil {
				if old := models[f[1]]; old != nil {
					old.close()
				}
				models[f[1]] = m
				fmt.Fprintln(out, "ok")
			}
		case (f[0] == "time" || f[0] == "cputime") && len(f) == 3:
			err = timeRuns(out, models[f[1]], f[2], f[0] == "cputime")
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		if err != nil {
			fmt.Fprintln(out, "error:", strings.ReplaceAll(err.Error(), "\n", " "))
		}
		out.Flush()
	}
	return in.Err()
}

// load serves model for the inputs in the NAME=FILE.npy specs.
func load(c *pjrt.Client, split serving.SplitBatches, model string, specs []string) (*loaded, error) {
	g, err := importer.Load(model)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, s := range specs {
		name, file, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("input %q: want NAME=FILE.npy", s)
		}
		files[name] = file
	}
	req := &serving.InferRequest{Inputs: map[string]*tensor.Tensor{}}
	var inputs []*tensor.Tensor
	lead := ""
	for i, p := range g.Placeholders() {
		file, ok := files[p.Target]
		if !ok {
			return nil, fmt.Errorf("no input file for %s", p.Target)
		}
		t, err := tensor.ReadNpyFile(file)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, t)
		req.Inputs[p.Target] = t
		if shape := p.Val().Shape; i == 0 && len(shape) > 0 && !shape[0].IsStatic() {
			lead = shape[0].Sym
		}
	}
	dims, err := g.BindDims(inputs)
	if err != nil {
		return nil, err
	}
	dir, err := writeRepo(model, dims, lead)
	if err != nil {
		return nil, err
	}
	m, err := serve(c, split, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	l := &loaded{mgr: m, dir: dir, req: req}
	for range warmupCalls {
		if _, err := m.Infer(context.Background(), "m", 0, req); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

// writeRepo writes a model repository holding model as model "m", version
// 1, with a config.yaml whose buckets are the symbols' sizes in dims, and
// half of it too for lead (the batch symbol) where it is even.
func writeRepo(model string, dims map[string]int64, lead string) (string, error) {
	dir, err := os.MkdirTemp("", "bench-runner-")
	if err != nil {
		return "", err
	}
	file := modelrepo.ModelFileONNX
	if strings.HasSuffix(model, ".pt2") {
		file = modelrepo.ModelFilePT2
	}
	data, err := os.ReadFile(model)
	if err == nil {
		err = os.MkdirAll(filepath.Join(dir, "m", "1"), 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "m", "1", file), data, 0o644)
	}
	if err == nil {
		err = linkExternalData(model, filepath.Join(dir, "m", "1"))
	}
	cfg := "warmup: eager\nbatching:\n  enabled: false\nbuckets:\n"
	for sym, n := range dims {
		sizes := strconv.FormatInt(n, 10)
		if sym == lead && n >= 2 && n%2 == 0 {
			sizes = strconv.FormatInt(n/2, 10) + ", " + sizes
		}
		cfg += fmt.Sprintf("  %s: [%s]\n", strconv.Quote(sym), sizes)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "m", modelrepo.ConfigFile), []byte(cfg), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// linkExternalData puts the external tensor data torch.onnx.export writes
// beside a large model (MODEL.data, which the model names by that base
// name) into the version directory dir, when there is one: a hard link
// where the file system allows one, else a copy (the importer reads a
// repository's files without following symbolic links out of it).
func linkExternalData(model, dir string) error {
	src := model + ".data"
	if _, err := os.Stat(src); err != nil {
		return nil
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// serve starts a Manager on the repository in dir and checks that its
// model loaded.
func serve(c *pjrt.Client, split serving.SplitBatches, dir string) (*serving.Manager, error) {
	repo, err := modelrepo.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := serving.NewManager(context.Background(), serving.Options{
		Client:       c,
		Repository:   repo,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		SplitBatches: split,
	})
	if err != nil {
		return nil, err
	}
	for _, st := range m.Status() {
		if st.State != serving.StateReady {
			m.Shutdown(context.Background())
			return nil, fmt.Errorf("model %s: %s: %s", filepath.Base(dir), st.State, st.Reason)
		}
	}
	return m, nil
}

// timeRuns runs m n times and prints each latency in ns, or with cpu the
// process's CPU time over each: what a call costs the cores, which other
// processes on a shared machine do not change as they change latency.
func timeRuns(out *bufio.Writer, m *loaded, n string, cpu bool) error {
	if m == nil {
		return fmt.Errorf("no such model loaded")
	}
	count, err := strconv.Atoi(n)
	if err != nil {
		return err
	}
	ctx := context.Background()
	lat := make([]string, count)
	base := time.Now()
	clock := func() time.Duration { return time.Since(base) }
	if cpu {
		clock = processCPU
	}
	for i := range count {
		start := clock()
		if _, err := m.mgr.Infer(ctx, "m", 0, m.req); err != nil {
			return err
		}
		lat[i] = strconv.FormatInt(int64(clock()-start), 10)
	}
	fmt.Fprintln(out, strings.Join(lat, " "))
	return nil
}

// processCPU returns the user + system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
