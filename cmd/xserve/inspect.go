package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
)

func runInspect(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showHLO := fs.Bool("stablehlo", false, "print the StableHLO program for the given input shapes")
	var shapeFlags, dimFlags multiFlag
	fs.Var(&shapeFlags, "shape", "input shape NAME=1x3x224x224 (repeatable); binds the input's symbolic dims")
	fs.Var(&dimFlags, "dim", "symbol size SYM=N (repeatable), e.g. batch=8")
	narrow := fs.Bool("narrow-int64", false, "lower int64 as int32 (as for TPUs)")
	cpuKernels := fs.Bool("cpu-kernels", true, "on cpu, lower as `xserve serve` does with its CPU kernel library loaded (convolutions and matrix products as custom calls to "+lower.ConvKernel+" and "+lower.MatmulKernel+")")
	platform := fs.String("platform", "cpu", "platform to lower for (cpu, cuda, tpu)")
	unsupported := fs.Bool("unsupported", false, "list every operator xserve cannot import (op, domain, opset, count, nodes); exit non-zero when there is any")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve inspect MODEL [--unsupported | --stablehlo --shape NAME=DIMS ... | --dim SYM=N ...]")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("inspect: want exactly one MODEL path")
	}
	if *unsupported {
		return listUnsupported(pos[0], stdout)
	}
	model, err := importer.Open(pos[0])
	if err != nil {
		return err
	}
	g := model.Graph
	host, err := fxgraph.SplitHost(g)
	if err != nil {
		return err
	}
	if !*showHLO {
		fmt.Fprintf(stdout, "model %s\n", pos[0])
		fmt.Fprint(stdout, signature(g))
		if host != nil {
			fmt.Fprint(stdout, host.Describe())
		}
		fmt.Fprintln(stdout)
		fmt.Fprint(stdout, g.Table())
		return nil
	}
	if host != nil {
		if g = host.Device; g == nil {
			return errors.New("inspect: the model runs on the host only (string operators): it has no StableHLO program")
		}
	}
	dims, err := dimsFromFlags(g, shapeFlags, dimFlags)
	if err != nil {
		return err
	}
	opts := lower.Options{Platform: *platform, NarrowInt64: *narrow, Kernels: []string{}}
	if *platform == "cpu" && *cpuKernels {
		opts.Kernels = []string{lower.ConvKernel, lower.MatmulKernel}
	}
	if g, err = model.At(dims); err != nil {
		return err
	}
	l := lower.New(opts)
	prog, err := l.Lower(g, dims)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s", prog.Module)
	return nil
}

// signature describes the graph's inputs, outputs and constants.
func signature(g *fxgraph.Graph) string {
	var b strings.Builder
	for _, p := range g.Placeholders() {
		fmt.Fprintf(&b, "input  %s: %s\n", p.Target, p.Val())
	}
	for i, o := range g.Outputs() {
		fmt.Fprintf(&b, "output %s: %s\n", g.OutputName(i), o.Meta)
	}
	var n, bytes int64
	for _, t := range g.Attrs {
		n++
		bytes += int64(len(t.Data))
	}
	fmt.Fprintf(&b, "constants: %d tensors, %.1f KiB; nodes: %d\n", n, float64(bytes)/1024, g.Len())
	return b.String()
}

// dimsFromFlags binds the graph's symbols from --shape and --dim flags.
func dimsFromFlags(g *fxgraph.Graph, shapeFlags, dimFlags []string) (map[string]int64, error) {
	dims := map[string]int64{}
	set := func(sym string, v int64, from string) error {
		if prev, ok := dims[sym]; ok && prev != v {
			return fmt.Errorf("%s: symbol %s is %d, but %d elsewhere", from, sym, v, prev)
		}
		dims[sym] = v
		return nil
	}
	for _, f := range dimFlags {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("--dim %q: want SYM=N with N >= 0", f)
		}
		if err := set(k, n, "--dim "+f); err != nil {
			return nil, err
		}
	}
	inputs := map[string]*fxgraph.Node{}
	for _, p := range g.Placeholders() {
		inputs[p.Target] = p
	}
	for _, f := range shapeFlags {
		name, spec, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("--shape %q: want NAME=D1xD2x...", f)
		}
		p, ok := inputs[name]
		if !ok {
			return nil, fmt.Errorf("--shape %q: the model has no input %q (inputs: %s)", f, name, strings.Join(inputNames(g), ", "))
		}
		shape, err := parseDims(spec)
		if err != nil {
			return nil, fmt.Errorf("--shape %q: %w", f, err)
		}
		want := p.Val().Shape
		if len(shape) != len(want) {
			return nil, fmt.Errorf("--shape %q: input %s has rank %d %s", f, name, len(want), want)
		}
		for i, d := range want {
			if d.IsStatic() {
				if d.Size != shape[i] {
					return nil, fmt.Errorf("--shape %q: dim %d of %s is fixed at %d", f, i, name, d.Size)
				}
				continue
			}
			if err := set(d.Sym, shape[i], "--shape "+f); err != nil {
				return nil, err
			}
		}
	}
	var missing []string
	for _, p := range g.Placeholders() {
		for _, s := range p.Val().Shape.Symbols() {
			if _, ok := dims[s]; !ok {
				missing = append(missing, s+" (input "+p.Target+")")
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("no size for symbols %s: pass --shape NAME=DIMS or --dim SYM=N", strings.Join(missing, ", "))
	}
	return dims, nil
}

func inputNames(g *fxgraph.Graph) []string {
	var out []string
	for _, p := range g.Placeholders() {
		out = append(out, p.Target)
	}
	return out
}

// parseDims parses "1x3x224x224" (or "" / "scalar" for rank 0).
func parseDims(s string) ([]int64, error) {
	if s == "" || s == "scalar" {
		return []int64{}, nil
	}
	parts := strings.Split(s, "x")
	out := make([]int64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad dim %q (want non-negative integers joined by x)", p)
		}
		out[i] = n
	}
	return out, nil
}

// listUnsupported prints every operator of the model that xserve cannot
// import, one line each, and fails when there is any. With none it imports
// the model, so that a converter refusing particular attributes or shapes
// still fails the check.
func listUnsupported(path string, stdout io.Writer) error {
	ops, err := importer.UnsupportedOps(path)
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		if _, err := importer.Load(path); err != nil {
			return fmt.Errorf("inspect: every operator of %s has a converter, but the import fails: %w", path, err)
		}
		fmt.Fprintf(stdout, "model %s: no unsupported operators\n", path)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tDOMAIN\tOPSET\tCOUNT\tNODES")
	nodes := 0
	for _, u := range ops {
		domain, opset := u.Domain, "-"
		if domain == "" {
			domain = "ai.onnx"
		}
		if u.Opset > 0 {
			opset = strconv.FormatInt(u.Opset, 10)
		}
		shown := u.Nodes
		if len(shown) > 5 {
			shown = append(append([]string{}, shown[:5]...), fmt.Sprintf("... %d more", len(u.Nodes)-5))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", u.Op, domain, opset, len(u.Nodes), strings.Join(shown, ", "))
		nodes += len(u.Nodes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return fmt.Errorf("inspect: %s has %d unsupported operators (%d nodes)", path, len(ops), nodes)
}
