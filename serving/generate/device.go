package generate

import (
	"context"
	"errors"
	"fmt"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Device is what the loop needs of the accelerator: compiling a step
// program and running it with state (the cache) that stays on the device
// between runs. PJRTDevice implements it on a PJRT client.
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

// WeightSource returns the device buffer of a program's weight parameter,
// shared by every program of the model (serving.Weights.Get).
type WeightSource func(ctx context.Context, p lower.Param) (*pjrt.Buffer, error)

// PJRTDevice runs step programs on a PJRT client, the weights coming from
// a WeightSource.
type PJRTDevice struct {
	Client  *pjrt.Client
	Weights WeightSource
}

// Compile implements Device.
func (d *PJRTDevice) Compile(ctx context.Context, prog *lower.Program) (Step, error) {
	exe, err := d.Client.Compile(ctx, prog.Module)
	if err != nil {
		return nil, fmt.Errorf("generate: compile: %w", err)
	}
	s := &pjrtStep{exe: exe, client: d.Client, args: make([]*pjrt.Buffer, len(prog.Params)), nOut: len(prog.Outputs)}
	for i, p := range prog.Params {
		if p.Kind == lower.Weight {
			if s.args[i], err = d.Weights(ctx, p); err != nil {
				exe.Close()
				return nil, err
			}
			continue
		}
		s.inputs = append(s.inputs, i)
	}
	return s, nil
}

// Zeros implements Device.
func (d *PJRTDevice) Zeros(ctx context.Context, dt tensor.DType, shape []int64) (Buffer, error) {
	return d.Client.Upload(ctx, tensor.New(dt, shape...))
}

type pjrtStep struct {
	exe    *pjrt.Executable
	client *pjrt.Client
	args   []*pjrt.Buffer // weights at their positions
	inputs []int          // positions of the input parameters
	nOut   int
}

func (s *pjrtStep) Run(ctx context.Context, hosts []*tensor.Tensor, state []Buffer) ([]*tensor.Tensor, []Buffer, error) {
	args := append([]*pjrt.Buffer(nil), s.args...)
	donate := make([]bool, len(args))
	var uploaded []*pjrt.Buffer
	defer func() {
		for _, b := range uploaded {
			b.Close()
		}
	}()
	fail := func(err error) ([]*tensor.Tensor, []Buffer, error) {
		for _, b := range state {
			b.Close()
		}
		return nil, nil, err
	}
	if len(hosts)+len(state) != len(s.inputs) {
		return fail(fmt.Errorf("generate: step takes %d inputs, got %d host tensors and %d state buffers", len(s.inputs), len(hosts), len(state)))
	}
	for i, t := range hosts {
		b, err := s.client.Upload(ctx, t)
		if err != nil {
			return fail(err)
		}
		uploaded = append(uploaded, b)
		args[s.inputs[i]] = b
	}
	for i, st := range state {
		b, ok := st.(*pjrt.Buffer)
		if !ok {
			return fail(errors.New("generate: state buffer of another device"))
		}
		k := s.inputs[len(hosts)+i]
		args[k], donate[k] = b, true
	}
	outs, err := s.exe.ExecuteDonate(ctx, args, donate)
	if err != nil {
		return nil, nil, err
	}
	nHost := s.nOut - len(state)
	res := make([]*tensor.Tensor, nHost)
	for i := range nHost {
		res[i], err = outs[i].ToHost(ctx)
		outs[i].Close()
		if err != nil {
			for _, o := range outs[i+1:] {
				o.Close()
			}
			return nil, nil, err
		}
	}
	next := make([]Buffer, len(state))
	for i := range state {
		next[i] = outs[nHost+i]
	}
	return res, next, nil
}

func (s *pjrtStep) Close() error { return s.exe.Close() }
