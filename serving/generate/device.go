package generate

import (
	"context"
	"errors"
	"fmt"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Device is what the loop needs of the accelerator: compiling a step
// program and running it with state (the cache) that stays on the device
// between runs. EngineDevice implements it on the engine.
type Device interface {
	// Compile compiles prog, binding its weight parameters.
	Compile(ctx context.Context, prog *lower.Program) (Step, error)
	// Zeros returns a zero-filled buffer on the device.
	Zeros(ctx context.Context, dt tensor.DType, shape []int64) (Buffer, error)
}

// Step is a compiled step program whose input parameters are host tensors
// followed by state buffers, and whose results are host tensors followed by
// the new state, each state result aliased to its state input.
type Step interface {
	// Run copies hosts to the device, runs the program with state donated
	// (each state buffer is consumed by the call, also when it fails) and
	// returns the host results and the new state buffers.
	Run(ctx context.Context, hosts []*tensor.Tensor, state []Buffer) ([]*tensor.Tensor, []Buffer, error)
	// Close frees the compiled program.
	Close() error
}

// Buffer is an array on the device.
type Buffer interface {
	// Close frees the device memory; it is safe to call twice.
	Close() error
}

// EngineDevice runs step programs through the engine: each is compiled
// bound to the model's weights (engine.Model.Compile, through the engine's
// compile cache) and run on device-resident inputs with the state donated
// (engine.Executable.Execute).
type EngineDevice struct {
	Engine *engine.Engine
	// Model is the model the step programs are lowered from; its weights
	// are shared by all of them.
	Model *engine.Model
}

// Compile implements Device.
func (d *EngineDevice) Compile(ctx context.Context, prog *lower.Program) (Step, error) {
	x, _, err := d.Model.Compile(ctx, prog)
	if err != nil {
		return nil, fmt.Errorf("generate: compile: %w", err)
	}
	return &engineStep{exe: x, engine: d.Engine, nOut: len(prog.Outputs) - len(prog.Guards)}, nil
}

// Zeros implements Device.
func (d *EngineDevice) Zeros(ctx context.Context, dt tensor.DType, shape []int64) (Buffer, error) {
	return d.Engine.Upload(ctx, tensor.New(dt, shape...))
}

type engineStep struct {
	exe    *engine.Executable
	engine *engine.Engine
	nOut   int // results less the guards
}

func (s *engineStep) Run(ctx context.Context, hosts []*tensor.Tensor, state []Buffer) ([]*tensor.Tensor, []Buffer, error) {
	inputs := make([]*pjrt.Buffer, 0, len(hosts)+len(state))
	donate := make([]int, 0, len(state))
	defer func() {
		for _, b := range inputs[:min(len(hosts), len(inputs))] {
			b.Close()
		}
	}()
	fail := func(err error) ([]*tensor.Tensor, []Buffer, error) {
		for _, b := range state {
			b.Close()
		}
		return nil, nil, err
	}
	for _, t := range hosts {
		b, err := s.engine.Upload(ctx, t)
		if err != nil {
			return fail(err)
		}
		inputs = append(inputs, b)
	}
	for _, st := range state {
		b, ok := st.(*pjrt.Buffer)
		if !ok {
			return fail(errors.New("generate: state buffer of another device"))
		}
		donate = append(donate, len(inputs))
		inputs = append(inputs, b)
	}
	outs, err := s.exe.Execute(ctx, inputs, engine.ExecuteOptions{Donate: donate})
	if err != nil {
		// A state buffer the execution did not consume (refused before it
		// started) is freed here; closing a consumed one is a no-op.
		return fail(err)
	}
	if len(outs) != s.nOut {
		closeBuffers(outs)
		return nil, nil, fmt.Errorf("generate: step returned %d results, want %d", len(outs), s.nOut)
	}
	nHost := s.nOut - len(state)
	res := make([]*tensor.Tensor, nHost)
	for i := range nHost {
		res[i], err = outs[i].ToHost(ctx)
		outs[i].Close()
		if err != nil {
			closeBuffers(outs[i+1:])
			return nil, nil, err
		}
	}
	next := make([]Buffer, len(state))
	for i := range state {
		next[i] = outs[nHost+i]
	}
	return res, next, nil
}

func closeBuffers(bs []*pjrt.Buffer) {
	for _, b := range bs {
		b.Close()
	}
}

func (s *engineStep) Close() error { return s.exe.Close() }
