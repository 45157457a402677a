package lower

import (
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// Constant emits t as a StableHLO constant (narrowed when NarrowInt64 or
// NarrowFloat64).
func (ctx *Context) Constant(t *tensor.Tensor) (*stablehlo.Value, error) {
	if dt := ctx.Options.ProgramDType(t.DType); dt != t.DType {
		t = t.Convert(dt)
	}
	e, err := ElemOf(t.DType)
	if err != nil {
		return nil, err
	}
	// tensor stores elements little-endian, bools one byte each: the layout
	// the emitter takes.
	return ctx.Fn.Block().Constant(stablehlo.TensorOf(e, t.Shape...), t.Data)
}

// Scalar emits a rank-0 constant of dtype dt holding v.
func (ctx *Context) Scalar(dt tensor.DType, v float64) (*stablehlo.Value, error) {
	return ctx.Constant(tensor.Scalar(dt, v))
}
