package tensor

import (
	"fmt"
	"strings"
)

// DType is the element type of a tensor. The zero value is Invalid.
type DType uint8

// The element types xserve knows. Names follow PyTorch (float32, int64, bool, ...).
const (
	Invalid DType = iota
	Bool
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	Complex64
	Complex128
	String // only in constants of importers; never lowered
	// The 8- and 4-bit floating-point types (OCP FP8 and FP4, and the FNUZ
	// variants: finite, unsigned zero, NaN at 0x80) and the 4-bit integers.
	// Each element takes one byte, its code in the low bits, as in ml_dtypes
	// and XLA's host buffers; 4-bit integers keep the high nibble zero.
	Float8E4M3FN
	Float8E4M3FNUZ
	Float8E5M2
	Float8E5M2FNUZ
	Float8E8M0FNU // unsigned powers of two 2^-127..2^127, NaN at 0xff
	Float4E2M1FN
	Int4
	Uint4
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Invalid:    {"invalid", 0},
	Bool:       {"bool", 1},
	Int8:       {"int8", 1},
	Int16:      {"int16", 2},
	Int32:      {"int32", 4},
	Int64:      {"int64", 8},
	Uint8:      {"uint8", 1},
	Uint16:     {"uint16", 2},
	Uint32:     {"uint32", 4},
	Uint64:     {"uint64", 8},
	Float16:    {"float16", 2},
	BFloat16:   {"bfloat16", 2},
	Float32:    {"float32", 4},
	Float64:    {"float64", 8},
	Complex64:  {"complex64", 8},
	Complex128: {"complex128", 16},
	String:     {"string", 0},
	// ml_dtypes' names (PyTorch's for the float8 types).
	Float8E4M3FN:   {"float8_e4m3fn", 1},
	Float8E4M3FNUZ: {"float8_e4m3fnuz", 1},
	Float8E5M2:     {"float8_e5m2", 1},
	Float8E5M2FNUZ: {"float8_e5m2fnuz", 1},
	Float8E8M0FNU:  {"float8_e8m0fnu", 1},
	Float4E2M1FN:   {"float4_e2m1fn", 1},
	Int4:           {"int4", 1},
	Uint4:          {"uint4", 1},
}

// String returns the PyTorch-style name of the dtype ("float32", "int64", ...).
func (d DType) String() string {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].name
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size returns the size of one element in bytes (0 for Invalid and String).
func (d DType) Size() int {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].size
	}
	return 0
}

// IsFloat reports whether d is a real floating-point type (the 8- and
// 4-bit ones included).
func (d DType) IsFloat() bool {
	return d == Float16 || d == BFloat16 || d == Float32 || d == Float64 || minifloatOf(d) != nil
}

// IsMinifloat reports whether d is one of the 8- or 4-bit floating-point
// types, which XLA stores and converts but does not compute in: programs
// compute in float32 and convert at the ends.
func (d DType) IsMinifloat() bool { return minifloatOf(d) != nil }

// IsSubByte reports whether d holds 4-bit values (one a byte in memory,
// two a byte in ONNX TensorProtos).
func (d DType) IsSubByte() bool { return d == Int4 || d == Uint4 || d == Float4E2M1FN }

// IsComplex reports whether d is a complex type.
func (d DType) IsComplex() bool { return d == Complex64 || d == Complex128 }

// IsInt reports whether d is a signed or unsigned integer type (not Bool).
func (d DType) IsInt() bool {
	switch d {
	case Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Int4, Uint4:
		return true
	}
	return false
}

// IsUnsigned reports whether d is an unsigned integer type.
func (d DType) IsUnsigned() bool {
	return d == Uint8 || d == Uint16 || d == Uint32 || d == Uint64 || d == Uint4
}

// xlaName are XLA's (lower-cased) names of the minifloat types.
var xlaName = map[DType]string{
	Float8E4M3FN: "f8e4m3fn", Float8E4M3FNUZ: "f8e4m3fnuz", Float8E5M2: "f8e5m2",
	Float8E5M2FNUZ: "f8e5m2fnuz", Float8E8M0FNU: "f8e8m0fnu", Float4E2M1FN: "f4e2m1fn",
}

// ParseDType parses a dtype name. It accepts the PyTorch and ml_dtypes names
// used by String ("float32", "float8_e4m3fn"), their short aliases ("f32",
// "float", "half", "long", "int", XLA's "f8e4m3fn", "s4") and the Open
// Inference Protocol names ("FP32", "INT64", "BOOL", "BF16").
func ParseDType(s string) (DType, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	k = strings.TrimPrefix(k, "torch.")
	switch k {
	case "bool", "b1":
		return Bool, nil
	case "int8", "i8", "s8":
		return Int8, nil
	case "int16", "i16", "short", "s16":
		return Int16, nil
	case "int32", "i32", "int", "s32":
		return Int32, nil
	case "int64", "i64", "long", "s64":
		return Int64, nil
	case "uint8", "u8":
		return Uint8, nil
	case "uint16", "u16":
		return Uint16, nil
	case "uint32", "u32":
		return Uint32, nil
	case "uint64", "u64":
		return Uint64, nil
	case "float16", "f16", "half", "fp16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "float32", "f32", "float", "fp32":
		return Float32, nil
	case "float64", "f64", "double", "fp64":
		return Float64, nil
	case "complex64", "c64":
		return Complex64, nil
	case "complex128", "c128":
		return Complex128, nil
	case "string", "bytes":
		return String, nil
	case "int4", "i4", "s4":
		return Int4, nil
	case "uint4", "u4":
		return Uint4, nil
	}
	for dt := Float8E4M3FN; dt <= Float4E2M1FN; dt++ {
		if k == dt.String() || k == xlaName[dt] {
			return dt, nil
		}
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q (want one of bool, int8..int64, uint8..uint64, int4, uint4, float16, bfloat16, float32, float64, complex64, complex128, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn)", s)
}
