// Package runner is xserve's compile-and-run path outside the server, in one
// place: load a model file of any supported format (importer.Load), bind the
// input shapes, lower the graph for them, compile the program with PJRT
// (through the on-disk compile cache when one is given), run it on inputs
// and trim bounded (data-dependent) outputs to their valid size. `xserve
// run`, the zoo check and the ONNX conformance harness use it.
package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Options configure a Runner.
type Options struct {
	// Lower are the lowering options; Platform defaults to the client's.
	Lower lower.Options
	// Lowerer, if set, is used as is instead of one made from Lower.
	Lowerer *lower.Lowerer
	// CacheDir, if set, is a compile-cache directory (the server's format):
	// executables are deserialized from it instead of compiled when it holds
	// them, and stored in it when compiled.
	CacheDir string
}

// Runner lowers, compiles and runs models on one PJRT client. It is safe
// for concurrent use.
type Runner struct {
	client  *pjrt.Client
	lowerer *lower.Lowerer
	cache   *serving.ExecutableCache // nil: none
}

// New returns a Runner on client c.
func New(c *pjrt.Client, opts Options) (*Runner, error) {
	if c == nil {
		return nil, fmt.Errorf("runner: no PJRT client")
	}
	if opts.Lower.Platform == "" {
		opts.Lower.Platform = c.Platform()
	}
	if opts.Lower.Kernels == nil {
		opts.Lower.Kernels = c.Kernels()
	}
	r := &Runner{client: c, lowerer: opts.Lowerer}
	if r.lowerer == nil {
		r.lowerer = lower.New(opts.Lower)
	}
	if opts.CacheDir != "" {
		cache, err := serving.OpenExecutableCache(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		r.cache = cache
	}
	return r, nil
}

// Client returns the runner's PJRT client.
func (r *Runner) Client() *pjrt.Client { return r.client }

// Lowerer returns the runner's lowerer.
func (r *Runner) Lowerer() *lower.Lowerer { return r.lowerer }

// Model is an imported graph and the device copies of its weights, shared
// by the programs compiled for it. Close it when done.
//
// A graph with string values runs in host stages around its device graph
// (fxgraph.SplitHost): Bind, Lower and Compile are the device graph's, Run
// runs the whole model.
type Model struct {
	Graph   *fxgraph.Graph
	r       *Runner
	weights *serving.Weights
	// host is the graph's host split, nil when it all runs on the device.
	host *fxgraph.HostSplit
	// dev is the graph lowered to programs (Graph, or host's Device).
	dev *fxgraph.Graph
}

// Import imports the model file at path (any format importer.Load
// supports: .onnx, .pt2); it needs no client.
func Import(path string) (*fxgraph.Graph, error) { return importer.Load(path) }

// Load imports the model file at path (see Import).
func (r *Runner) Load(path string) (*Model, error) {
	g, err := Import(path)
	if err != nil {
		return nil, err
	}
	return r.Model(g)
}

// Model wraps an imported graph, cutting off its host stages.
func (r *Runner) Model(g *fxgraph.Graph) (*Model, error) {
	host, err := fxgraph.SplitHost(g)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	m := &Model{Graph: g, r: r, weights: serving.NewWeights(r.client), host: host, dev: g}
	if host != nil {
		m.dev = host.Device
	}
	return m, nil
}

// Host returns the model's host split, or nil when it runs whole on the
// device.
func (m *Model) Host() *fxgraph.HostSplit { return m.host }

// Close frees the model's device weights.
func (m *Model) Close() error { return m.weights.Close() }

// InputNames returns the names of the model's inputs, in order.
func (m *Model) InputNames() []string {
	var names []string
	for _, p := range m.Graph.Placeholders() {
		names = append(names, p.Target)
	}
	return names
}

// OrderInputs returns the named tensors in the order of the model's inputs.
// Every input must be given, and nothing else.
func (m *Model) OrderInputs(named map[string]*tensor.Tensor) ([]*tensor.Tensor, error) {
	var out []*tensor.Tensor
	for _, p := range m.Graph.Placeholders() {
		t, ok := named[p.Target]
		if !ok {
			return nil, fmt.Errorf("runner: no value for model input %q (%s)", p.Target, p.Val())
		}
		out = append(out, t)
	}
	if len(named) != len(out) {
		names := m.InputNames()
		for name := range named {
			if !slices.Contains(names, name) {
				return nil, fmt.Errorf("runner: the model has no input %q (inputs: %s)", name, strings.Join(names, ", "))
			}
		}
	}
	return out, nil
}

// Bind returns the sizes of the device graph's symbolic dims for inputs
// (in the order of its inputs: the model's, without host stages).
func (m *Model) Bind(inputs []*tensor.Tensor) (map[string]int64, error) {
	if m.dev == nil {
		return nil, fmt.Errorf("runner: the model has no device graph (it runs on the host)")
	}
	dims, err := m.dev.BindDims(inputs)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return dims, nil
}

// Lower lowers the device graph for the bound dims.
func (m *Model) Lower(dims map[string]int64) (*lower.Program, error) {
	return m.r.lowerer.Lower(m.dev, dims)
}

// Compiled is a program compiled for one shape bucket of a model. Close it
// when done.
type Compiled struct {
	Program *lower.Program
	// Cached says the executable came from the compile cache.
	Cached bool
	exe    *serving.Executable
}

// Compile compiles prog (lowered from m), uploading the weights it needs
// that are not on the device yet.
func (m *Model) Compile(ctx context.Context, prog *lower.Program) (*Compiled, error) {
	return m.r.compile(ctx, prog, m.weights)
}

func (r *Runner) compile(ctx context.Context, prog *lower.Program, w *serving.Weights) (*Compiled, error) {
	if r.cache != nil {
		exe, cached, err := r.cache.Compile(ctx, r.client, prog, w)
		if err != nil {
			return nil, err
		}
		return &Compiled{Program: prog, Cached: cached, exe: exe}, nil
	}
	exe, err := serving.Compile(ctx, r.client, prog, w)
	if err != nil {
		return nil, err
	}
	return &Compiled{Program: prog, exe: exe}, nil
}

// Run runs the program on inputs (in the order of the model's inputs) and
// returns the model's outputs: bounded outputs sliced to their valid size,
// their counts dropped (lower.Program.Trim).
func (c *Compiled) Run(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	outs, err := c.exe.Run(ctx, inputs)
	if err != nil {
		return nil, err
	}
	return c.Program.Trim(outs)
}

// OutputNames returns the names of the outputs Run returns, in order.
func (c *Compiled) OutputNames() []string { return OutputNames(c.Program) }

// OutputNames returns the names of the model outputs a run of prog returns
// once trimmed (its results less the count outputs), in order.
func OutputNames(prog *lower.Program) []string {
	counts := map[int]bool{}
	for _, b := range prog.Bounded {
		counts[b.Count] = true
	}
	var names []string
	for i, o := range prog.Outputs[:len(prog.Outputs)-len(prog.Guards)] {
		if !counts[i] {
			names = append(names, o.Name)
		}
	}
	return names
}

// Close frees the executable.
func (c *Compiled) Close() error { return c.exe.Close() }

// Timings are how long each step of Model.Run took.
type Timings struct {
	Lower, Compile, Run time.Duration
	// Cached says the executable came from the compile cache.
	Cached bool
}

// Run binds, lowers, compiles and runs the model once on inputs (in the
// order of its inputs) and returns its outputs, trimmed, and the program it
// ran (nil for a model that runs on the host only). Host stages run before
// and after the program.
func (m *Model) Run(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, *lower.Program, Timings, error) {
	if m.host == nil {
		return m.runDevice(ctx, inputs)
	}
	var prog *lower.Program
	var tm Timings
	outs, err := m.host.Run(ctx, inputs, func(ctx context.Context, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		var outs []*tensor.Tensor
		var err error
		outs, prog, tm, err = m.runDevice(ctx, in)
		return outs, err
	})
	return outs, prog, tm, err
}

// OutputNames returns the names of the outputs Run returns (prog is what
// Run returned).
func (m *Model) OutputNames(prog *lower.Program) []string {
	if m.host == nil {
		return OutputNames(prog)
	}
	var names []string
	for i := range m.Graph.Outputs() {
		names = append(names, m.Graph.OutputName(i))
	}
	return names
}

// runDevice is Run of the device graph.
func (m *Model) runDevice(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, *lower.Program, Timings, error) {
	var tm Timings
	dims, err := m.Bind(inputs)
	if err != nil {
		return nil, nil, tm, err
	}
	start := time.Now()
	prog, err := m.Lower(dims)
	tm.Lower = time.Since(start)
	if err != nil {
		return nil, nil, tm, err
	}
	start = time.Now()
	c, err := m.Compile(ctx, prog)
	tm.Compile = time.Since(start)
	if err != nil {
		return nil, prog, tm, err
	}
	tm.Cached = c.Cached
	defer c.Close()
	start = time.Now()
	outs, err := c.Run(ctx, inputs)
	tm.Run = time.Since(start)
	return outs, prog, tm, err
}

// Execute compiles prog (uploading its weights for this call only), runs it
// once on inputs and returns its outputs, trimmed.
func (r *Runner) Execute(ctx context.Context, prog *lower.Program, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	w := serving.NewWeights(r.client)
	defer w.Close()
	c, err := r.compile(ctx, prog, w)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Run(ctx, inputs)
}
