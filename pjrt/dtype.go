package pjrt

import (
	"fmt"

	"github.com/gomlx/go-xla/pkg/types/dtypes"

	"github.com/xserve/xserve/tensor"
)

// toXLA maps xserve dtypes to XLA's; tensor.Invalid and tensor.String have no
// XLA counterpart and map to dtypes.InvalidDType.
var toXLA = [...]dtypes.DType{
	tensor.Bool:       dtypes.Bool,
	tensor.Int8:       dtypes.Int8,
	tensor.Int16:      dtypes.Int16,
	tensor.Int32:      dtypes.Int32,
	tensor.Int64:      dtypes.Int64,
	tensor.Uint8:      dtypes.Uint8,
	tensor.Uint16:     dtypes.Uint16,
	tensor.Uint32:     dtypes.Uint32,
	tensor.Uint64:     dtypes.Uint64,
	tensor.Float16:    dtypes.Float16,
	tensor.BFloat16:   dtypes.BFloat16,
	tensor.Float32:    dtypes.Float32,
	tensor.Float64:    dtypes.Float64,
	tensor.Complex64:  dtypes.Complex64,
	tensor.Complex128: dtypes.Complex128,
	tensor.String:     dtypes.InvalidDType,
	// One element a byte on the host, as XLA's host buffers hold them.
	tensor.Float8E4M3FN:   dtypes.F8E4M3FN,
	tensor.Float8E4M3FNUZ: dtypes.F8E4M3FNUZ,
	tensor.Float8E5M2:     dtypes.F8E5M2,
	tensor.Float8E5M2FNUZ: dtypes.F8E5M2FNUZ,
	tensor.Float8E8M0FNU:  dtypes.F8E8M0FNU,
	tensor.Float4E2M1FN:   dtypes.F4E2M1FN,
	tensor.Int4:           dtypes.S4,
	tensor.Uint4:          dtypes.U4,
}

// DTypeToXLA returns the XLA element type of dt. It fails for tensor.Invalid,
// tensor.String and unknown values, which XLA cannot hold.
func DTypeToXLA(dt tensor.DType) (dtypes.DType, error) {
	if int(dt) < len(toXLA) && toXLA[dt] != dtypes.InvalidDType {
		return toXLA[dt], nil
	}
	return dtypes.InvalidDType, fmt.Errorf("pjrt: dtype %s has no XLA element type", dt)
}

// DTypeFromXLA returns the xserve dtype of the XLA element type d. It fails for
// XLA types xserve does not have (F8E4M3B11FNUZ, F8E4M3, F8E3M4, 2-bit ints,
// tokens, tuples).
func DTypeFromXLA(d dtypes.DType) (tensor.DType, error) {
	if d != dtypes.InvalidDType {
		for dt, x := range toXLA {
			if x == d {
				return tensor.DType(dt), nil
			}
		}
	}
	return tensor.Invalid, fmt.Errorf("pjrt: XLA element type %s has no xserve dtype", d)
}
