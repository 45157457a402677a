package serving

import (
	"errors"
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// CheckInput checks one input's declared dtype and shape against model
// version (0 = the latest ready one) before a protocol decodes its data, so
// that a request the model would refuse (an unknown input, the wrong dtype
// or rank, a dim that fits no bucket) costs no allocation of its tensor.
// It applies the checks of Infer that one input allows; Infer still checks
// the whole request. Errors wrap ErrModelNotFound, ErrNotReady,
// ErrInvalidInput or ErrNoBucket.
func (m *Manager) CheckInput(model string, version int64, name string, dt tensor.DType, shape []int64) error {
	v, err := m.acquire(model, version)
	if err != nil && errors.Is(err, ErrNotReady) && m.opts.LoadPolicy == LoadLazy {
		return nil // not loaded yet: Infer loads it and checks the inputs then
	}
	if err != nil {
		return err
	}
	defer m.release(v)
	switch {
	case v.pipe != nil:
		return checkSpec(v.name, v.pipe.inputs, name, dt, shape)
	case v.host != nil:
		return v.host.checkInput(v.name, name, dt, shape)
	}
	return v.plan.checkInput(v, name, dt, shape)
}

// checkInput is CheckInput on the plan of v.
func (p *BucketPlan) checkInput(v *version, name string, dt tensor.DType, shape []int64) error {
	for i := range p.Inputs {
		in := &p.Inputs[i]
		if in.Name != name {
			continue
		}
		if dt != in.DType {
			return fmt.Errorf("%w: input %q has dtype %s, model expects %s", ErrInvalidInput, name, dt, in.DType)
		}
		if len(shape) != len(in.Dims) {
			return fmt.Errorf("%w: input %q has shape %s (rank %d), model expects rank %d: %s", ErrInvalidInput, name, tensor.ShapeString(shape), len(shape), len(in.Dims), formatDims(in.Dims))
		}
		for d, spec := range in.Dims {
			if err := p.checkDim(name, d, spec, shape[d], in.Dims); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: model %s has no input %q (inputs: %s)", ErrInvalidInput, v.name, name, p.inputNames())
}

// checkDim checks dim d of an input against its spec: a static size, or a
// symbol whose buckets (or, served exactly, whose range) must hold it.
func (p *BucketPlan) checkDim(name string, d int, spec dimSpec, got int64, dims []dimSpec) error {
	if spec.Sym == "" {
		if got != spec.Size {
			return fmt.Errorf("%w: input %q dim %d is %d, model expects %d (shape %s)", ErrInvalidInput, name, d, got, spec.Size, formatDims(dims))
		}
		return nil
	}
	for _, s := range p.Symbols {
		if s.Name != spec.Sym {
			continue
		}
		top := s.Buckets[len(s.Buckets)-1]
		switch {
		case got > top && (!s.Defaulted || !s.Range.Contains(got)):
			return fmt.Errorf("%w: input %q dim %d (%s) is %d, the largest bucket is %d (buckets: %v)", ErrNoBucket, name, d, s.Name, got, top, s.Buckets)
		case s.Pad == PadExact && !s.Range.Contains(got):
			return fmt.Errorf("%w: input %q dim %d (%s) is %d, outside the range %s the model allows for it", ErrNoBucket, name, d, s.Name, got, s.Range)
		}
	}
	return nil
}
