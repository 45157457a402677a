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

// dtypeAliases are the names ParseDType accepts besides String's: short
// and PyTorch aliases, the Open Inference Protocol's (lower-cased) and
// XLA's.
var dtypeAliases = map[string]DType{
	"b1": Bool, "i8": Int8, "s8": Int8, "i16": Int16, "short": Int16, "s16": Int16,
	"i32": Int32, "int": Int32, "s32": Int32, "i64": Int64, "long": Int64, "s64": Int64,
	"u8": Uint8, "u16": Uint16, "u32": Uint32, "u64": Uint64,
	"f16": Float16, "half": Float16, "fp16": Float16, "bf16": BFloat16,
	"f32": Float32, "float": Float32, "fp32": Float32, "f64": Float64, "double": Float64, "fp64": Float64,
	"c64": Complex64, "c128": Complex128, "bytes": String, "i4": Int4, "s4": Int4, "u4": Uint4,
	"f8e4m3fn": Float8E4M3FN, "f8e4m3fnuz": Float8E4M3FNUZ, "f8e5m2": Float8E5M2,
	"f8e5m2fnuz": Float8E5M2FNUZ, "f8e8m0fnu": Float8E8M0FNU, "f4e2m1fn": Float4E2M1FN,
}

// ParseDType parses a dtype name. It accepts the PyTorch and ml_dtypes names
// used by String ("float32", "float8_e4m3fn"), their short aliases ("f32",
// "float", "half", "long", "int", XLA's "f8e4m3fn", "s4") and the Open
// Inference Protocol names ("FP32", "INT64", "BOOL", "BF16").
func ParseDType(s string) (DType, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	k = strings.TrimPrefix(k, "torch.")
	if dt, ok := dtypeAliases[k]; ok {
		return dt, nil
	}
	for dt := Bool; int(dt) < len(dtypeInfo); dt++ {
		if k == dtypeInfo[dt].name {
			return dt, nil
		}
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q (want one of bool, int8..int64, uint8..uint64, int4, uint4, float16, bfloat16, float32, float64, complex64, complex128, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn)", s)
}
