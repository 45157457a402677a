package lower

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/go-xla/pkg/types/dtypes/bfloat16"
	"github.com/x448/float16"

	"github.com/xserve/xserve/tensor"
)

// Constant emits t as a StableHLO constant (narrowed when NarrowInt64).
func (ctx *Context) Constant(t *tensor.Tensor) (*stablehlo.Value, error) {
	if ctx.Options.NarrowInt64 && narrow(t.DType) != t.DType {
		t = t.Convert(narrow(t.DType))
	}
	flat, err := flatSlice(t)
	if err != nil {
		return nil, err
	}
	return ctx.Fn.ConstantFromFlatAndDimensions(flat, intsOf(t.Shape)...)
}

// Scalar emits a rank-0 constant of dtype dt holding v.
func (ctx *Context) Scalar(dt tensor.DType, v float64) (*stablehlo.Value, error) {
	return ctx.Constant(tensor.Scalar(dt, v))
}

// flatSlice converts a tensor's bytes to the typed Go slice go-xla's
// constant builder takes.
func flatSlice(t *tensor.Tensor) (any, error) {
	n := int(t.NumElements())
	d := t.Data
	switch t.DType {
	case tensor.Bool:
		out := make([]bool, n)
		for i := range out {
			out[i] = d[i] != 0
		}
		return out, nil
	case tensor.Int8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(d[i])
		}
		return out, nil
	case tensor.Uint8:
		return append([]uint8(nil), d[:n]...), nil
	case tensor.Int16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	case tensor.Uint16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = binary.LittleEndian.Uint16(d[2*i:])
		}
		return out, nil
	case tensor.Int32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case tensor.Uint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = binary.LittleEndian.Uint32(d[4*i:])
		}
		return out, nil
	case tensor.Int64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(d[8*i:]))
		}
		return out, nil
	case tensor.Uint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = binary.LittleEndian.Uint64(d[8*i:])
		}
		return out, nil
	case tensor.Float16:
		out := make([]float16.Float16, n)
		for i := range out {
			out[i] = float16.Frombits(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	case tensor.BFloat16:
		out := make([]bfloat16.BFloat16, n)
		for i := range out {
			out[i] = bfloat16.BFloat16(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	case tensor.Float32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case tensor.Float64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:]))
		}
		return out, nil
	case tensor.Complex64:
		out := make([]complex64, n)
		for i := range out {
			re := math.Float32frombits(binary.LittleEndian.Uint32(d[8*i:]))
			im := math.Float32frombits(binary.LittleEndian.Uint32(d[8*i+4:]))
			out[i] = complex(re, im)
		}
		return out, nil
	case tensor.Complex128:
		out := make([]complex128, n)
		for i := range out {
			re := math.Float64frombits(binary.LittleEndian.Uint64(d[16*i:]))
			im := math.Float64frombits(binary.LittleEndian.Uint64(d[16*i+8:]))
			out[i] = complex(re, im)
		}
		return out, nil
	}
	return nil, fmt.Errorf("lower: cannot make a constant of dtype %s", t.DType)
}
