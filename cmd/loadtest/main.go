// Command loadtest sends inference load to an xserve server and prints what
// it measured: requests, failures by kind, throughput and latency
// percentiles.
//
//	loadtest -model tinycnn -random image=float32:1x3x32x32 -c 8 -d 10s
//	loadtest -model tinycnn -input image=image.npy -batch 1 -rate 500 -d 10s -json out.json
//	loadtest -nats nats://127.0.0.1:4222 [-durable] -model tinycnn -input image=image.npy -batch 1 -c 8
//	loadtest -grpc 127.0.0.1:8001 -model tinycnn -input image=image.npy -batch 8 -c 1 -d 5s
//	loadtest -markdown c1.json c8.json c32.json   # one markdown table of saved summaries
//	loadtest -compare -compare-names off,on "c=8=off8.json,on8.json" "c=32=off32.json,on32.json"
//
// A run always ends by itself (-d, -n or both), and only loads servers on
// the loopback interface unless -allow-remote is given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/xserve/xserve/loadtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// addInputs adds the -input NAME=FILE.npy files and the -random specs to
// src.
func addInputs(src *loadtest.Inputs, inputs, randoms []string) error {
	for _, in := range inputs {
		name, path, ok := strings.Cut(in, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("-input %q: want NAME=FILE.npy", in)
		}
		if _, dup := src.Files[name]; dup {
			return fmt.Errorf("-input %s given twice", name)
		}
		src.Files[name] = path
	}
	for _, r := range randoms {
		spec, err := loadtest.ParseRandomSpec(r)
		if err != nil {
			return err
		}
		src.Random = append(src.Random, spec)
	}
	return nil
}

// parseExpects reads the -expect NAME=SHAPE flags.
func parseExpects(expects []string) (map[string][]int64, error) {
	expect := map[string][]int64{}
	for _, e := range expects {
		name, shape, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-expect %q: want NAME=SHAPE, e.g. probs=1x10", e)
		}
		dims, err := parseExpectShape(shape)
		if err != nil {
			return nil, fmt.Errorf("-expect %q: %w", e, err)
		}
		expect[name] = dims
	}
	return expect, nil
}

// multiFlag collects a repeated flag's values.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		inputs, randoms, expects multiFlag

		rawURL      = fs.String("url", "http://127.0.0.1:8080", "base URL of the xserve HTTP server")
		model       = fs.String("model", "", "model name (required)")
		version     = fs.String("version", "", "model version (default: the server's choice)")
		protocol    = fs.String("protocol", "v1json", "request format: v1json (/v1/infer), v2json or v2binary (/v2/models/M/infer)")
		grpcAddr    = fs.String("grpc", "", "load xserve's KServe v2 gRPC service at this address (host:port, xserve --grpc-addr) instead of HTTP: ModelInfer calls with raw tensor contents")
		conc        = fs.Int("c", 8, "closed loop: concurrent workers, each sending as soon as its last request completes")
		rate        = fs.Float64("rate", 0, "open loop: requests per second on a fixed schedule (instead of -c); latency counts from the scheduled time")
		maxInFlight = fs.Int("max-inflight", 0, "open loop: most requests in flight at once (default 256)")
		duration    = fs.Duration("d", 10*time.Second, "measured duration (0: bounded by -n alone)")
		maxReq      = fs.Int("n", 0, "stop after this many measured requests (0: bounded by -d alone)")
		warmup      = fs.Duration("warmup", time.Second, "warmup before measuring, not counted")
		jsonOut     = fs.String("json", "", "also write the summary as JSON to this file")
		batch       = fs.Int("batch", 0, "rows per request along dim 0: cut .npy files into, or generate, N-row inputs (0: shapes as given)")
		variants    = fs.Int("variants", 1, "least number of distinct input samples (random data differs)")
		seed        = fs.Uint64("seed", 1, "seed of random inputs")
		compress    = fs.String("compress", "", "compress request bodies: gzip or zstd")
		acceptEnc   = fs.String("accept-encoding", "", "ask for compressed responses: gzip or zstd")
		outputs     = fs.String("outputs", "", "comma-separated output names to ask for (default: all)")
		validate    = fs.Bool("validate", false, "decode every response and check its outputs' data against their shapes")
		timeout     = fs.Duration("timeout", 30*time.Second, "per-request timeout")
		allowRemote = fs.Bool("allow-remote", false, "allow a server that is not on the loopback interface (127.0.0.0/8, ::1)")
		markdown    = fs.Bool("markdown", false, "print a markdown table of the JSON summary files given as arguments, and exit")
		compare     = fs.Bool("compare", false, "print a markdown table comparing pairs of JSON summaries, given as arguments LABEL=BASE.json,TEST.json, and exit")
		compareAs   = fs.String("compare-names", "base,test", "-compare: the names of the two runs of each pair, as column heads")
	)
	nf := natsFlags(fs)
	fs.Var(&inputs, "input", "input NAME=FILE.npy (repeatable)")
	fs.Var(&randoms, "random", "random input NAME=DTYPE:SHAPE, e.g. image=float32:1x3x32x32 (repeatable)")
	fs.Var(&expects, "expect", "check output NAME=SHAPE in every response, -1 for any size, e.g. probs=1x10 (repeatable; implies -validate)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: loadtest -model M (-input NAME=FILE.npy | -random NAME=DTYPE:SHAPE)... [-c N | -rate R] [-d DUR] [-n N] [flags]")
		fmt.Fprintln(stderr, "       loadtest -markdown SUMMARY.json...")
		fmt.Fprintln(stderr, "       loadtest -compare [-compare-names BASE,TEST] LABEL=BASE.json,TEST.json...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *markdown {
		return printMarkdown(fs.Args(), stdout)
	}
	if *compare {
		return printComparison(fs.Args(), *compareAs, stdout)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkLoop(fs, *rate, conc, *duration, *maxReq); err != nil {
		return err
	}

	src := &loadtest.Inputs{Files: map[string]string{}, Batch: *batch, Variants: *variants, Seed: *seed}
	if err := addInputs(src, inputs, randoms); err != nil {
		return err
	}
	expect, err := parseExpects(expects)
	if err != nil {
		return err
	}
	proto, err := loadtest.ParseProtocol(*protocol)
	if err != nil {
		return err
	}
	if *model == "" {
		fs.Usage()
		return errors.New("-model is required")
	}
	conns := *conc
	if *rate > 0 {
		conns = *maxInFlight
		if conns == 0 {
			conns = 256 // loadtest's default MaxInFlight
		}
	}
	hopts := loadtest.HTTPOptions{
		URL: *rawURL, Model: *model, Version: *version, Protocol: proto,
		Compression: *compress, AcceptEncoding: *acceptEnc,
		Validate: *validate, ExpectOutputs: expect,
		Conns: conns, Timeout: *timeout, AllowRemote: *allowRemote,
	}
	if *outputs != "" {
		hopts.Outputs = strings.Split(*outputs, ",")
	}
	target, err := newTarget(ctx, hopts, nf, *grpcAddr)
	if err != nil {
		return err
	}
	defer target.Close()

	opts := loadtest.Options{
		Target: target, Inputs: src,
		Concurrency: *conc, Rate: *rate, MaxInFlight: *maxInFlight,
		Duration: *duration, MaxRequests: *maxReq, Warmup: *warmup,
	}
	fmt.Fprintf(stderr, "loadtest: %s, %s, %s\n", target, pace(opts), bound(opts))
	sum, runErr := loadtest.Run(ctx, opts)
	if sum == nil {
		return runErr
	}
	return report(stdout, sum, runErr, *jsonOut)
}

// checkLoop checks the pacing flags: -rate (an open loop, which sets
// *conc to 0) excludes -c, -max-inflight needs -rate, and -d or -n bounds
// the run.
func checkLoop(fs *flag.FlagSet, rate float64, conc *int, duration time.Duration, maxReq int) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if rate > 0 {
		if set["c"] {
			return errors.New("-c and -rate are exclusive: -c runs a closed loop, -rate an open loop")
		}
		*conc = 0
	} else if set["max-inflight"] {
		return errors.New("-max-inflight applies to open-loop runs (-rate) only")
	}
	if duration == 0 && maxReq == 0 {
		return errors.New("the run would never end: give -d, -n or both")
	}
	return nil
}

// report prints a run's summary (and writes it as JSON to jsonOut, if
// set); an interrupted run or one without a success is an error.
func report(stdout io.Writer, sum *loadtest.Summary, runErr error, jsonOut string) error {
	fmt.Fprint(stdout, sum.String())
	if jsonOut != "" {
		if err := os.WriteFile(jsonOut, sum.JSON(), 0o644); err != nil {
			return err
		}
	}
	if runErr != nil {
		return fmt.Errorf("interrupted: %w", runErr)
	}
	if sum.Successes == 0 {
		return errors.New("no request succeeded")
	}
	return nil
}

func pace(o loadtest.Options) string {
	if o.Rate > 0 {
		return fmt.Sprintf("open loop at %g req/s", o.Rate)
	}
	return fmt.Sprintf("closed loop, concurrency %d", o.Concurrency)
}

func bound(o loadtest.Options) string {
	var parts []string
	if o.Warmup > 0 {
		parts = append(parts, fmt.Sprintf("%s warmup", o.Warmup))
	}
	if o.Duration > 0 {
		parts = append(parts, fmt.Sprintf("%s measured", o.Duration))
	}
	if o.MaxRequests > 0 {
		parts = append(parts, fmt.Sprintf("at most %d requests", o.MaxRequests))
	}
	return strings.Join(parts, ", ")
}

// parseExpectShape parses "1x10" with -1 for any size.
func parseExpectShape(s string) ([]int64, error) {
	dims := []int64{}
	for _, p := range strings.FieldsFunc(strings.Trim(s, "[]"), func(r rune) bool { return r == 'x' || r == ',' }) {
		var d int64
		if _, err := fmt.Sscan(strings.TrimSpace(p), &d); err != nil || d < -1 {
			return nil, fmt.Errorf("dim %q is not an integer >= -1", p)
		}
		dims = append(dims, d)
	}
	return dims, nil
}

func printMarkdown(files []string, stdout io.Writer) error {
	if len(files) == 0 {
		return errors.New("-markdown: give the JSON summary files to tabulate")
	}
	var sums []*loadtest.Summary
	for _, f := range files {
		s, err := readSummary(f)
		if err != nil {
			return err
		}
		sums = append(sums, s)
	}
	fmt.Fprint(stdout, loadtest.MarkdownTable(sums))
	return nil
}

func readSummary(file string) (*loadtest.Summary, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s := new(loadtest.Summary)
	if err := s.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// printComparison prints loadtest.CompareTable of the pairs given as
// LABEL=BASE.json,TEST.json (the label is everything before the last '='
// that precedes the files, so labels may hold '=').
func printComparison(args []string, names string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("-compare: give pairs of JSON summaries as LABEL=BASE.json,TEST.json")
	}
	base, test, ok := strings.Cut(names, ",")
	if !ok || base == "" || test == "" || strings.Contains(test, ",") {
		return fmt.Errorf("-compare-names %q: want two names, e.g. off,on", names)
	}
	var rows []loadtest.Comparison
	for _, a := range args {
		i := strings.LastIndex(a, "=")
		files := strings.Split(a[i+1:], ",")
		if i < 0 || len(files) != 2 || files[0] == "" || files[1] == "" {
			return fmt.Errorf("-compare: %q: want LABEL=BASE.json,TEST.json", a)
		}
		b, err := readSummary(files[0])
		if err != nil {
			return err
		}
		t, err := readSummary(files[1])
		if err != nil {
			return err
		}
		rows = append(rows, loadtest.Comparison{Label: a[:i], Base: b, Test: t})
	}
	fmt.Fprint(stdout, loadtest.CompareTable(rows, base, test))
	return nil
}
