// Package runner is xserve's compile-and-run path outside the server: load
// a model file of any supported format, bind the input shapes, lower the
// graph for them, compile the program (through the on-disk compile cache
// when one is given), run it on inputs and trim bounded (data-dependent)
// outputs to their valid size. It is a thin layer over package engine, which
// the server uses too; `xserve run`, the zoo check and the ONNX conformance
// harness use it.
package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Options configure a Runner.
type Options struct {
	// Lower are the lowering options; Platform and Kernels default to the
	// client's.
	Lower lower.Options
	// Lowerer, if set, is used as is instead of one made from Lower.
	Lowerer *lower.Lowerer
	// CacheDir, if set, is a compile-cache directory (the server's format):
	// programs and executables are read from it instead of lowered and
	// compiled when it holds them, and stored in it when built.
	CacheDir string
}

// Runner lowers, compiles and runs models on one PJRT client. It is safe
// for concurrent use.
type Runner struct{ e *engine.Engine }

// New returns a Runner on client c.
func New(c *pjrt.Client, opts Options) (*Runner, error) {
	if c == nil {
		return nil, fmt.Errorf("runner: no PJRT client")
	}
	e, err := engine.New(engine.Options{Client: c, Lowering: opts.Lower, Lowerer: opts.Lowerer, CacheDir: opts.CacheDir})
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return &Runner{e: e}, nil
}

// Engine returns the engine the runner runs on.
func (r *Runner) Engine() *engine.Engine { return r.e }

// Client returns the runner's PJRT client.
func (r *Runner) Client() *pjrt.Client { return r.e.Client() }

// Lowerer returns the runner's lowerer.
func (r *Runner) Lowerer() *lower.Lowerer { return r.e.Lowerer() }

// Model is an imported model and the device copies of its weights, shared
// by the programs compiled for it. Close it when done.
//
// A graph with string values runs in host stages around its device graph
// (fxgraph.SplitHost, engine.Model.Host): Bind, Lower and Compile are the
// device graph's, Run runs the whole model.
type Model struct {
	// Graph is the model's graph (optimized; with host stages, the whole
	// graph, whose inputs and outputs are the model's).
	Graph *fxgraph.Graph
	m     *engine.Model
}

func newModel(m *engine.Model) *Model {
	if h := m.Host(); h != nil {
		return &Model{Graph: h.Model, m: m}
	}
	return &Model{Graph: m.Graph(), m: m}
}

// Import imports the model file at path (any format importer.Load
// supports: .onnx, .pt2); it needs no client.
func Import(path string) (*fxgraph.Graph, error) { return importer.Load(path) }

// Load imports the model file at path (see Import).
func (r *Runner) Load(path string) (*Model, error) {
	m, err := r.e.Load(path, engine.LoadOptions{})
	if err != nil {
		return nil, err
	}
	return newModel(m), nil
}

// Model wraps an imported graph, cutting off its host stages.
func (r *Runner) Model(g *fxgraph.Graph) (*Model, error) {
	m, err := r.e.NewModel(g, engine.LoadOptions{})
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return newModel(m), nil
}

// Host returns the model's host stages, or nil when it runs whole on the
// device.
func (m *Model) Host() *fxgraph.HostSplit { return m.m.Host() }

// Close frees the model's device weights.
func (m *Model) Close() error { return m.m.Close() }

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
	if h := m.Host(); h != nil && h.Device == nil {
		return nil, fmt.Errorf("runner: the model has no device graph (it runs on the host)")
	}
	dims, err := m.m.Graph().BindDims(inputs)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return dims, nil
}

// Lower lowers the model for the bound dims.
func (m *Model) Lower(dims map[string]int64) (*lower.Program, error) { return m.m.Lower(dims) }

// Compiled is a program compiled for one shape bucket of a model. Close it
// when done.
type Compiled struct {
	Program *lower.Program
	// Cached says the executable came from the compile cache.
	Cached bool
	exe    *engine.Executable
}

// Compile compiles prog (lowered from m), uploading the weights it needs
// that are not on the device yet.
func (m *Model) Compile(ctx context.Context, prog *lower.Program) (*Compiled, error) {
	exe, cached, err := m.m.Compile(ctx, prog)
	if err != nil {
		return nil, err
	}
	return &Compiled{Program: prog, Cached: cached, exe: exe}, nil
}

// Run runs the program on inputs (in the order of the model's inputs) and
// returns the model's outputs: bounded outputs sliced to their valid size,
// their counts dropped.
func (c *Compiled) Run(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	outs, err := c.exe.Run(ctx, inputs)
	if err != nil {
		return nil, err
	}
	return c.exe.Trim(outs)
}

// OutputNames returns the names of the outputs Run returns, in order.
func (c *Compiled) OutputNames() []string { return c.exe.OutputNames() }

// OutputNames returns the names of the model outputs a run of prog returns
// once trimmed (its results less the count outputs), in order.
func OutputNames(prog *lower.Program) []string { return engine.OutputNames(prog) }

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
	h := m.Host()
	if h == nil {
		return m.runDevice(ctx, inputs)
	}
	var prog *lower.Program
	var tm Timings
	outs, err := h.Run(ctx, inputs, func(ctx context.Context, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
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
	if m.Host() == nil {
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
	m, err := r.Model(fxgraph.New())
	if err != nil {
		return nil, err
	}
	defer m.Close()
	c, err := m.Compile(ctx, prog)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Run(ctx, inputs)
}
