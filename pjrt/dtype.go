package pjrt

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include "pjrt_c_api.h"
*/
import "C"

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// bufferTypes maps xserve dtypes to PJRT buffer types; tensor.Invalid and
// tensor.String have none (PJRT_Buffer_Type_INVALID).
var bufferTypes = [...]C.PJRT_Buffer_Type{
	tensor.Bool:       C.PJRT_Buffer_Type_PRED,
	tensor.Int8:       C.PJRT_Buffer_Type_S8,
	tensor.Int16:      C.PJRT_Buffer_Type_S16,
	tensor.Int32:      C.PJRT_Buffer_Type_S32,
	tensor.Int64:      C.PJRT_Buffer_Type_S64,
	tensor.Uint8:      C.PJRT_Buffer_Type_U8,
	tensor.Uint16:     C.PJRT_Buffer_Type_U16,
	tensor.Uint32:     C.PJRT_Buffer_Type_U32,
	tensor.Uint64:     C.PJRT_Buffer_Type_U64,
	tensor.Float16:    C.PJRT_Buffer_Type_F16,
	tensor.BFloat16:   C.PJRT_Buffer_Type_BF16,
	tensor.Float32:    C.PJRT_Buffer_Type_F32,
	tensor.Float64:    C.PJRT_Buffer_Type_F64,
	tensor.Complex64:  C.PJRT_Buffer_Type_C64,
	tensor.Complex128: C.PJRT_Buffer_Type_C128,
	tensor.String:     C.PJRT_Buffer_Type_INVALID,
	// One element a byte on the host, as XLA's host buffers hold them.
	tensor.Float8E4M3FN:   C.PJRT_Buffer_Type_F8E4M3FN,
	tensor.Float8E4M3FNUZ: C.PJRT_Buffer_Type_F8E4M3FNUZ,
	tensor.Float8E5M2:     C.PJRT_Buffer_Type_F8E5M2,
	tensor.Float8E5M2FNUZ: C.PJRT_Buffer_Type_F8E5M2FNUZ,
	tensor.Float8E8M0FNU:  C.PJRT_Buffer_Type_F8E8M0FNU,
	tensor.Float4E2M1FN:   C.PJRT_Buffer_Type_F4E2M1FN,
	tensor.Int4:           C.PJRT_Buffer_Type_S4,
	tensor.Uint4:          C.PJRT_Buffer_Type_U4,
}

// bufferType returns the PJRT buffer type of dt. It fails for
// tensor.Invalid, tensor.String and unknown values, which a device cannot
// hold.
func bufferType(dt tensor.DType) (C.PJRT_Buffer_Type, error) {
	if int(dt) < len(bufferTypes) && bufferTypes[dt] != C.PJRT_Buffer_Type_INVALID {
		return bufferTypes[dt], nil
	}
	return C.PJRT_Buffer_Type_INVALID, fmt.Errorf("pjrt: dtype %s has no PJRT buffer type", dt)
}

// dtypeOf returns the xserve dtype of a PJRT buffer type. It fails for
// types xserve does not have (F8E4M3B11FNUZ, F8E4M3, F8E3M4, 2-bit
// ints, tokens).
func dtypeOf(t C.PJRT_Buffer_Type) (tensor.DType, error) {
	if t != C.PJRT_Buffer_Type_INVALID {
		for dt, b := range bufferTypes {
			if b == t {
				return tensor.DType(dt), nil
			}
		}
	}
	name, ok := enumNames["PJRT_Buffer_Type"][int(t)]
	if !ok {
		name = fmt.Sprint(int(t))
	}
	return tensor.Invalid, fmt.Errorf("pjrt: PJRT buffer type %s has no xserve dtype", name)
}
