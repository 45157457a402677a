package engine

import (
	"context"
	"fmt"

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
	// args holds the weight buffers at their parameter positions; input
	// positions are nil and filled per call.
	args []*pjrt.Buffer
	// inputs are the positions of the program's input parameters, in order.
	inputs []int
}

// Compile compiles prog on c and binds its weight parameters from w
// (uploading those not yet on the device). Model.Build and Model.Compile
// do so through the compile cache.
func Compile(ctx context.Context, c *pjrt.Client, prog *lower.Program, w *Weights) (*Executable, error) {
	exe, err := c.Compile(ctx, prog.Module)
	if err != nil {
		return nil, fmt.Errorf("engine: compile: %w", err)
	}
	return bind(ctx, c, exe, prog, w)
}

// bind makes an Executable of exe, compiled from prog (or deserialized from
// a cache), binding its weight parameters from w. It closes exe on failure.
func bind(ctx context.Context, c *pjrt.Client, exe *pjrt.Executable, prog *lower.Program, w *Weights) (*Executable, error) {
	x := &Executable{Program: prog, exe: exe, client: c, args: make([]*pjrt.Buffer, len(prog.Params))}
	for i, p := range prog.Params {
		if p.Kind != lower.Weight {
			x.inputs = append(x.inputs, i)
			continue
		}
		b, err := w.Get(ctx, p)
		if err != nil {
			exe.Close()
			return nil, err
		}
		x.args[i] = b
	}
	return x, nil
}

// Run executes x once on host inputs (in the order of the program's input
// parameters) and returns its results copied to the host, the guard results
// checked and dropped (see Trim for bounded outputs). Inputs whose dtype
// differs from the parameter's (int64 narrowed to int32) are converted. It
// is Engine.Run of one Job on every thread the kernels want.
func (x *Executable) Run(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	outs, err := run(ctx, x.client, []Job{{Exe: x, Inputs: inputs}})
	if err != nil {
		return nil, err
	}
	return outs[0], nil
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
// shares). It is safe to call twice.
func (x *Executable) Close() error { return x.exe.Close() }

// String describes the executable, e.g. `engine executable "m" (3 inputs, 1 output)`.
func (x *Executable) String() string { return "engine " + x.exe.String()[len("pjrt "):] }
