package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/lower/platforms"
)

// inspectFlags are xserve inspect's flags.
type inspectFlags struct {
	showHLO, check, narrow, cpuKernels, unsupported *bool
	platform                                        *string
	shapes, dims                                    multiFlag
}

func runInspect(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f inspectFlags
	f.showHLO = fs.Bool("stablehlo", false, "print the StableHLO program for the given input shapes")
	f.check = fs.Bool("check", false, "lower for --platform and list what the program uses that the platform lacks or runs slowly (custom calls, host callbacks, f64, 64-bit integer arithmetic); exit non-zero when it lacks something (symbols without --shape or --dim are 1)")
	fs.Var(&f.shapes, "shape", "input shape NAME=1x3x224x224 (repeatable); binds the input's symbolic dims")
	fs.Var(&f.dims, "dim", "symbol size SYM=N (repeatable), e.g. batch=8")
	f.narrow = fs.Bool("narrow-int64", false, "lower int64 as int32 (as for TPUs)")
	f.cpuKernels = fs.Bool("cpu-kernels", true, "on cpu, lower as `xserve serve` does with its CPU kernel library loaded (convolutions and matrix products as custom calls to "+cpu.ConvKernel+" and "+cpu.MatmulKernel+")")
	f.platform = fs.String("platform", "cpu", "platform to lower for (cpu, cuda, tpu)")
	f.unsupported = fs.Bool("unsupported", false, "list every operator xserve cannot import (op, domain, opset, count, nodes); exit non-zero when there is any")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: xserve inspect MODEL [--unsupported | --stablehlo --shape NAME=DIMS ... | --dim SYM=N ... | --platform cuda|tpu --check]")
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
	if *f.unsupported {
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
	if !*f.showHLO && !*f.check {
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
		model = &importer.Model{Graph: g}
	}
	prog, err := f.lower(model)
	if err != nil {
		return err
	}
	if *f.check {
		return checkProgram(stdout, pos[0], *f.platform, prog)
	}
	fmt.Fprintf(stdout, "%s", prog.Module)
	return nil
}

// lower lowers the model for the flags' platform and shapes.
func (f *inspectFlags) lower(model *importer.Model) (*lower.Program, error) {
	dims, err := dimsFromFlags(model.Graph, f.shapes, f.dims, *f.check)
	if err != nil {
		return nil, err
	}
	if _, err := platforms.Named(*f.platform); err != nil {
		return nil, fmt.Errorf("inspect: --platform: %w", err)
	}
	opts := lower.Options{Platform: *f.platform, NarrowInt64: *f.narrow, Kernels: []string{}}
	if *f.platform == "cpu" && *f.cpuKernels {
		opts.Kernels = []string{cpu.ConvKernel, cpu.MatmulKernel}
	}
	g, err := model.At(dims)
	if err != nil {
		return nil, err
	}
	return platforms.New(opts).Lower(g, dims)
}

// checkProgram prints what prog uses that platform lacks or runs slowly,
// and fails when it lacks something.
func checkProgram(w io.Writer, path, platform string, prog *lower.Program) error {
	p, err := platforms.Named(platform)
	if err != nil {
		return err
	}
	findings := p.Check(prog.Usage)
	fmt.Fprintf(w, "%s on %s at %v: %d ops\n", path, platform, prog.Dims, prog.Usage.Count())
	lacks := 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range findings {
		fmt.Fprintln(tw, f)
		if f.Lacks {
			lacks++
		}
	}
	tw.Flush()
	if lacks > 0 {
		return fmt.Errorf("inspect: the program uses %d thing(s) platform %s lacks", lacks, platform)
	}
	fmt.Fprintf(w, "ok: nothing platform %s lacks\n", platform)
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

// symbolSizes are symbol sizes bound from flags.
type symbolSizes map[string]int64

// set binds sym to v, refusing a different size bound before.
func (dims symbolSizes) set(sym string, v int64, from string) error {
	if prev, ok := dims[sym]; ok && prev != v {
		return fmt.Errorf("%s: symbol %s is %d, but %d elsewhere", from, sym, v, prev)
	}
	dims[sym] = v
	return nil
}

// dimsFromFlags binds the graph's symbols from --shape and --dim flags;
// the symbols left are 1 when defaultOne, else an error.
func dimsFromFlags(g *fxgraph.Graph, shapeFlags, dimFlags []string, defaultOne bool) (map[string]int64, error) {
	dims := symbolSizes{}
	for _, f := range dimFlags {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("--dim %q: want SYM=N with N >= 0", f)
		}
		if err := dims.set(k, n, "--dim "+f); err != nil {
			return nil, err
		}
	}
	for _, f := range shapeFlags {
		if err := dims.bindShape(g, f); err != nil {
			return nil, err
		}
	}
	var missing []string
	for _, p := range g.Placeholders() {
		for _, s := range p.Val().Shape.Symbols() {
			if _, ok := dims[s]; !ok && defaultOne {
				dims[s] = 1
			} else if !ok {
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

// bindShape binds the symbols of the input a --shape flag f names.
func (dims symbolSizes) bindShape(g *fxgraph.Graph, f string) error {
	name, spec, ok := strings.Cut(f, "=")
	if !ok {
		return fmt.Errorf("--shape %q: want NAME=D1xD2x...", f)
	}
	i := slices.IndexFunc(g.Placeholders(), func(p *fxgraph.Node) bool { return p.Target == name })
	if i < 0 {
		return fmt.Errorf("--shape %q: the model has no input %q (inputs: %s)", f, name, strings.Join(inputNames(g), ", "))
	}
	shape, err := parseDims(spec)
	if err != nil {
		return fmt.Errorf("--shape %q: %w", f, err)
	}
	want := g.Placeholders()[i].Val().Shape
	if len(shape) != len(want) {
		return fmt.Errorf("--shape %q: input %s has rank %d %s", f, name, len(want), want)
	}
	for i, d := range want {
		if d.IsStatic() {
			if d.Size != shape[i] {
				return fmt.Errorf("--shape %q: dim %d of %s is fixed at %d", f, i, name, d.Size)
			}
			continue
		}
		if err := dims.set(d.Sym, shape[i], "--shape "+f); err != nil {
			return err
		}
	}
	return nil
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
