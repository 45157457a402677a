package lower

import (
	"fmt"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// Func is what rules add ops to: the program's main function, or a region
// (a control-flow branch or body, a reduction's combiner) being built.
// Rules add ops to Block(); a value of an enclosing block may be used in a
// region (StableHLO regions are not isolated from above).
type Func struct {
	f   *stablehlo.Function // nil for a region
	blk *stablehlo.Block
}

// newMain returns the main function of module m.
func newMain(m *stablehlo.Module) (*Func, error) {
	f, err := m.Func("main")
	if err != nil {
		return nil, err
	}
	return &Func{f: f, blk: f.Body()}, nil
}

// Block returns the block ops are added to.
func (fn *Func) Block() *stablehlo.Block { return fn.blk }

// Closure returns a new region, to be built and then given to reduce,
// scatter, sort, if, while, ...
func (fn *Func) Closure() *Func { return &Func{blk: fn.blk.Region()} }

// Input adds an argument of type t to a region (a parameter to the main
// function).
func (fn *Func) Input(t stablehlo.Type) (*stablehlo.Value, error) {
	if fn.f != nil {
		return fn.f.AddParam("", t)
	}
	return fn.blk.AddArg(t)
}

// NamedInput adds a parameter called name to the main function.
func (fn *Func) NamedInput(name string, t stablehlo.Type) (*stablehlo.Value, error) {
	if fn.f == nil {
		return nil, fmt.Errorf("lower: named input %s of a region", name)
	}
	return fn.f.AddParam(name, t)
}

// Return ends the function or region.
func (fn *Func) Return(vals ...*stablehlo.Value) error {
	if fn.f != nil {
		return fn.f.Return(vals...)
	}
	return fn.blk.Return(vals...)
}

// elemTypes maps the IR's dtypes to StableHLO element types (the dtypes a
// program can hold).
var elemTypes = map[tensor.DType]stablehlo.ElementType{
	tensor.Bool: stablehlo.Bool, tensor.Int8: stablehlo.I8, tensor.Int16: stablehlo.I16, tensor.Int32: stablehlo.I32,
	tensor.Int64: stablehlo.I64, tensor.Uint8: stablehlo.U8, tensor.Uint16: stablehlo.U16, tensor.Uint32: stablehlo.U32,
	tensor.Uint64: stablehlo.U64, tensor.Float16: stablehlo.F16, tensor.BFloat16: stablehlo.BF16,
	tensor.Float32: stablehlo.F32, tensor.Float64: stablehlo.F64,
	// The 8- and 4-bit types, one element a byte on the host.
	tensor.Float8E4M3FN: stablehlo.F8E4M3FN, tensor.Float8E4M3FNUZ: stablehlo.F8E4M3FNUZ,
	tensor.Float8E5M2: stablehlo.F8E5M2, tensor.Float8E5M2FNUZ: stablehlo.F8E5M2FNUZ,
	tensor.Float8E8M0FNU: stablehlo.F8E8M0FNU, tensor.Float4E2M1FN: stablehlo.F4E2M1FN,
	tensor.Int4: stablehlo.I4, tensor.Uint4: stablehlo.U4,
}

// ElemOf returns the StableHLO element type of IR dtype dt.
func ElemOf(dt tensor.DType) (stablehlo.ElementType, error) {
	if e, ok := elemTypes[dt]; ok {
		return e, nil
	}
	return stablehlo.Invalid, fmt.Errorf("lower: dtype %s has no StableHLO element type", dt)
}

// DTypeOf returns the IR dtype of StableHLO element type e.
func DTypeOf(e stablehlo.ElementType) (tensor.DType, error) {
	for dt, x := range elemTypes {
		if x == e {
			return dt, nil
		}
	}
	return tensor.Invalid, fmt.Errorf("lower: element type %s has no IR dtype", e)
}
