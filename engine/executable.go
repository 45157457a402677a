package engine

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Executable is a compiled program bound to its weights on the device. Its
// methods are safe for concurrent use.
type Executable struct {
	// Program is the lowered program the executable was compiled from.
	Program *lower.Program
	exe     *pjrt.Executable
	client  *pjrt.Client
	// shares counts the Executables bound to exe (On): the last Close
	// frees it. closed makes a second Close of this one do nothing.
	shares *atomic.Int32
	closed atomic.Bool
	// args holds the weight buffers at their parameter positions; input
	// positions are nil and filled per call.
	args []*pjrt.Buffer
	// inputs are the positions of the program's input parameters, in order.
	inputs []int
	// calls says whether the program has custom calls (the CPU kernel
	// library's): without them a limit on its kernels' threads changes
	// nothing, and it runs on the lone path (see Execution.Run).
	calls bool
}

// Compile compiles prog on c and binds its weight parameters from w
// (uploading those not yet on the device). Model.Build and Model.Compile
// do so through the compile cache.
func Compile(ctx context.Context, c *pjrt.Client, prog *lower.Program, w *Weights) (*Executable, error) {
	exe, err := c.Compile(ctx, prog.Module, paramTypes(prog))
	if err != nil {
		return nil, fmt.Errorf("engine: compile: %w", err)
	}
	return bind(ctx, c, exe, prog, w)
}

// paramTypes returns the types of prog's parameters, which the lowering
// knows: Compile takes them instead of reading the module text.
func paramTypes(prog *lower.Program) []pjrt.Type {
	ts := make([]pjrt.Type, len(prog.Params))
	for i, p := range prog.Params {
		ts[i] = pjrt.Type{DType: p.DType, Shape: p.Shape}
	}
	return ts
}

// bind makes an Executable of exe, compiled from prog (or deserialized from
// a cache), binding its weight parameters from w. It closes exe on failure.
func bind(ctx context.Context, c *pjrt.Client, exe *pjrt.Executable, prog *lower.Program, w *Weights) (*Executable, error) {
	x, err := bindShared(ctx, c, exe, new(atomic.Int32), prog, w)
	if err != nil {
		exe.Close()
	}
	return x, err
}

// bindShared binds exe, shared by the Executables that shares counts.
func bindShared(ctx context.Context, c *pjrt.Client, exe *pjrt.Executable, shares *atomic.Int32, prog *lower.Program, w *Weights) (*Executable, error) {
	x := &Executable{Program: prog, exe: exe, client: c, shares: shares, args: make([]*pjrt.Buffer, len(prog.Params)),
		calls: bytes.Contains(prog.Module, []byte("custom_call"))}
	for i, p := range prog.Params {
		if p.Kind != lower.Weight {
			x.inputs = append(x.inputs, i)
			continue
		}
		b, err := w.Get(ctx, p)
		if err != nil {
			return nil, err
		}
		x.args[i] = b
	}
	shares.Add(1)
	return x, nil
}

// On returns x bound to the weights of m, a placement of x's model on
// another device (Model.On): the same compiled program, neither compiled
// nor deserialized again; its executions run on m's device. Each is closed
// on its own; the program is freed with the last.
func (x *Executable) On(ctx context.Context, m *Model) (*Executable, error) {
	if x.closed.Load() {
		return nil, fmt.Errorf("engine: %s is closed", x)
	}
	return bindShared(ctx, x.client, x.exe, x.shares, x.Program, m.weights)
}

// Run executes x once on host inputs (in the order of the program's input
// parameters) and returns its results copied to the host, the guard results
// checked and dropped (see Trim for bounded outputs). Inputs whose dtype
// differs from the parameter's (int64 narrowed to int32) are converted. It
// is Engine.Run of one Job on every thread the kernels want.
func (x *Executable) Run(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	jobs := [1]Job{{Exe: x, Inputs: inputs}}
	if err := run(ctx, x.client, jobs[:]); err != nil {
		return nil, err
	}
	return jobs[0].Outs, nil
}

// Trim turns a run's results into the model's outputs: bounded outputs
// sliced to their valid size, their counts dropped (lower.Program.Trim).
func (x *Executable) Trim(outs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	return x.Program.Trim(outs)
}

// OutputNames returns the names of the outputs Trim returns, in order.
func (x *Executable) OutputNames() []string { return OutputNames(x.Program) }

// OutputNames returns the names of the outputs a run of p returns once
// trimmed, in order: its results less the count outputs of its bounded
// outputs and the guards.
func OutputNames(p *lower.Program) []string {
	counts := map[int]bool{}
	for _, b := range p.Bounded {
		counts[b.Count] = true
	}
	var names []string
	for i, o := range p.Outputs[:len(p.Outputs)-len(p.Guards)] {
		if !counts[i] {
			names = append(names, o.Name)
		}
	}
	return names
}

// hostArgs places inputs at the program's input parameters (nil at its
// weights, which x.args holds), converting int64 narrowing as Run says.
func (x *Executable) hostArgs(inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if len(inputs) != len(x.inputs) {
		return nil, fmt.Errorf("engine: got %d inputs, the program takes %d", len(inputs), len(x.inputs))
	}
	hosts := make([]*tensor.Tensor, len(x.args))
	for k, i := range x.inputs {
		t := inputs[k]
		if p := x.Program.Params[i]; t.DType != p.DType {
			t = t.Convert(p.DType)
		}
		hosts[i] = t
	}
	return hosts, nil
}

// Serialize returns the compiled executable in the plugin's format (see
// pjrt.Executable.Serialize); the error wraps errors.ErrUnsupported where
// the plugin cannot serialize.
func (x *Executable) Serialize() ([]byte, error) { return x.exe.Serialize() }

// Close frees the compiled executable (not the weights, which its Model
// shares) once every Executable On made of it is closed too. It is safe to
// call twice.
func (x *Executable) Close() error {
	if x.closed.Swap(true) || x.shares.Add(-1) > 0 {
		return nil
	}
	return x.exe.Close()
}

// String describes the executable, e.g. `engine executable "m" (3 inputs, 1 output)`.
func (x *Executable) String() string { return "engine " + x.exe.String()[len("pjrt "):] }

// ExecuteOptions configure one Executable.Execute.
type ExecuteOptions struct {
	// Donate lists the inputs (by index into Execute's inputs) the
	// execution consumes: each is invalid afterwards, and where the
	// program aliases it to an output (its parameter's tf.aliasing_output
	// attribute), that output reuses its memory, the plugin permitting: a
	// value updated in place on the device (pjrt.ExecuteOptions.Donate).
	Donate []int
}

// Execute runs x once on device-resident inputs (in the order of the
// program's input parameters, each of its dtype and shape) and returns its
// results on the device, to Close when done: a value kept on the device
// between executions, such as a generation loop's KV cache between decode
// steps, costs no host copy. The program's guard results, if any, are read
// on the host (a scalar each), checked and dropped.
func (x *Executable) Execute(ctx context.Context, inputs []*pjrt.Buffer, opts ExecuteOptions) ([]*pjrt.Buffer, error) {
	if len(inputs) != len(x.inputs) {
		return nil, fmt.Errorf("engine: got %d inputs, the program takes %d", len(inputs), len(x.inputs))
	}
	args := append([]*pjrt.Buffer(nil), x.args...)
	for k, i := range x.inputs {
		args[i] = inputs[k]
	}
	donate := make([]int, len(opts.Donate))
	for j, k := range opts.Donate {
		if k < 0 || k >= len(x.inputs) {
			return nil, fmt.Errorf("engine: cannot donate input %d of %d", k, len(x.inputs))
		}
		donate[j] = x.inputs[k]
	}
	outs, err := x.exe.Execute(ctx, args, pjrt.ExecuteOptions{Donate: donate})
	if err != nil {
		return nil, err
	}
	return x.checkGuards(ctx, outs)
}

// checkGuards reads the guard results of outs on the host and returns the
// others; it closes the guards, and every output on failure.
func (x *Executable) checkGuards(ctx context.Context, outs []*pjrt.Buffer) ([]*pjrt.Buffer, error) {
	ng := len(x.Program.Guards)
	if ng == 0 {
		return outs, nil
	}
	closeAll := func(bs []*pjrt.Buffer) {
		for _, b := range bs {
			_ = b.Close()
		}
	}
	if len(outs) < ng {
		closeAll(outs)
		return nil, fmt.Errorf("engine: %d results, the program has %d guards", len(outs), ng)
	}
	host := make([]*tensor.Tensor, len(outs))
	for _, g := range x.Program.Guards {
		if g.Output < len(outs)-ng || g.Output >= len(outs) {
			closeAll(outs)
			return nil, fmt.Errorf("engine: guard output %d of %d results", g.Output, len(outs))
		}
		t, err := outs[g.Output].ToHost(context.WithoutCancel(ctx))
		if err != nil {
			closeAll(outs)
			return nil, err
		}
		host[g.Output] = t
	}
	kept, guards := outs[:len(outs)-ng], outs[len(outs)-ng:]
	closeAll(guards)
	if _, err := x.Program.CheckGuards(host); err != nil { // reads only the guards
		closeAll(kept)
		return nil, err
	}
	return kept, nil
}

// Upload copies a host tensor to the engine's device, for Execute.
func (e *Engine) Upload(ctx context.Context, t *tensor.Tensor) (*pjrt.Buffer, error) {
	return e.client.Upload(ctx, t)
}

// UploadInput copies host tensor t to the device as the program's input k
// (in the order Execute takes them), converting it to the parameter's dtype
// where they differ (int64 narrowed to int32), as Run does.
func (x *Executable) UploadInput(ctx context.Context, k int, t *tensor.Tensor) (*pjrt.Buffer, error) {
	if k < 0 || k >= len(x.inputs) {
		return nil, fmt.Errorf("engine: no input %d (the program takes %d)", k, len(x.inputs))
	}
	if p := x.Program.Params[x.inputs[k]]; t.DType != p.DType {
		t = t.Convert(p.DType)
	}
	return x.client.Upload(ctx, t)
}

// RunGiven is Run where the inputs given[k] (non-nil) are on the device
// already, buffers of their parameters' dtype and shape (inputs[k] is then
// ignored): one call into the plugin, as Run makes, copies the other
// inputs in and the outputs out, so a value an earlier execution left on
// the device costs no copy. Guard results are checked and dropped.
func (x *Executable) RunGiven(ctx context.Context, inputs []*tensor.Tensor, given []*pjrt.Buffer) ([]*tensor.Tensor, error) {
	if len(inputs) != len(x.inputs) || len(given) != len(x.inputs) {
		return nil, fmt.Errorf("engine: got %d inputs and %d buffers, the program takes %d", len(inputs), len(given), len(x.inputs))
	}
	bufs := append([]*pjrt.Buffer(nil), x.args...)
	hosts := make([]*tensor.Tensor, len(x.args))
	for k, i := range x.inputs {
		if given[k] != nil {
			bufs[i] = given[k]
			continue
		}
		t := inputs[k]
		if p := x.Program.Params[i]; t.DType != p.DType {
			t = t.Convert(p.DType)
		}
		hosts[i] = t
	}
	outs, err := x.exe.RunHost(ctx, bufs, hosts)
	if err != nil {
		return nil, err
	}
	return x.Program.CheckGuards(outs)
}
