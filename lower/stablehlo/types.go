package stablehlo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrShape is wrapped by every error about an op whose operands break the
// spec's shape or type rules.
var ErrShape = errors.New("stablehlo: invalid op")

// ElementType is the element type of a tensor.
type ElementType uint8

// The element types the emitter prints.
const (
	Invalid ElementType = iota
	Bool                // i1
	I8
	I16
	I32
	I64
	U8
	U16
	U32
	U64
	F16
	BF16
	F32
	F64
	// The 8- and 4-bit floats and ints, which XLA stores and converts.
	F8E4M3FN
	F8E4M3FNUZ
	F8E5M2
	F8E5M2FNUZ
	F8E8M0FNU
	F4E2M1FN
	I4
	U4
)

var elemNames = [...]string{"invalid", "i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "f16", "bf16", "f32", "f64",
	"f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ", "f8E8M0FNU", "f4E2M1FN", "i4", "ui4"}

// String returns the MLIR name: i1, i32, ui8, bf16, f32, ...
func (t ElementType) String() string {
	if int(t) < len(elemNames) {
		return elemNames[t]
	}
	return "invalid"
}

// Bits returns the width of one element in bits.
func (t ElementType) Bits() int {
	switch t {
	case Bool:
		return 1
	case I8, U8:
		return 8
	case I16, U16, F16, BF16:
		return 16
	case I32, U32, F32:
		return 32
	case I64, U64, F64:
		return 64
	case F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0FNU:
		return 8
	case F4E2M1FN, I4, U4:
		return 4
	}
	return 0
}

// IsFloat reports a floating-point type.
func (t ElementType) IsFloat() bool {
	return t == F16 || t == BF16 || t == F32 || t == F64 || (t >= F8E4M3FN && t <= F4E2M1FN)
}

// IsInt reports a signed or unsigned integer type (not Bool).
func (t ElementType) IsInt() bool { return t >= I8 && t <= U64 || t == I4 || t == U4 }

// IsUnsigned reports an unsigned integer type.
func (t ElementType) IsUnsigned() bool { return t >= U8 && t <= U64 || t == U4 }

// Type is a ranked tensor type with static dims.
type Type struct {
	Elem ElementType
	Dims []int64
}

// TensorOf returns the tensor type of elem with dims (none: a scalar).
func TensorOf(elem ElementType, dims ...int64) Type {
	return Type{Elem: elem, Dims: append([]int64(nil), dims...)}
}

// Rank returns the number of dims.
func (t Type) Rank() int { return len(t.Dims) }

// NumElements returns the product of the dims.
func (t Type) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Equal reports the same element type and dims.
func (t Type) Equal(u Type) bool {
	if t.Elem != u.Elem || len(t.Dims) != len(u.Dims) {
		return false
	}
	for i := range t.Dims {
		if t.Dims[i] != u.Dims[i] {
			return false
		}
	}
	return true
}

// SameShape reports the same dims, whatever the element types.
func (t Type) SameShape(u Type) bool {
	return TensorOf(Bool, t.Dims...).Equal(TensorOf(Bool, u.Dims...))
}

// WithElem returns t with another element type.
func (t Type) WithElem(e ElementType) Type { return TensorOf(e, t.Dims...) }

// String prints the MLIR type: tensor<2x3xf32>, tensor<i1>.
func (t Type) String() string {
	var b strings.Builder
	b.WriteString("tensor<")
	for _, d := range t.Dims {
		b.WriteString(strconv.FormatInt(d, 10))
		b.WriteByte('x')
	}
	b.WriteString(t.Elem.String())
	b.WriteByte('>')
	return b.String()
}

func (t Type) valid() error {
	if t.Elem == Invalid || int(t.Elem) >= len(elemNames) {
		return fmt.Errorf("invalid element type %d", t.Elem)
	}
	for _, d := range t.Dims {
		if d < 0 {
			return fmt.Errorf("negative dim in %s", t)
		}
	}
	return nil
}

func shapeErr(op string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrShape, op, fmt.Sprintf(format, args...))
}

// typesString prints "tensor<2xf32>, tensor<i1>" for error messages.
func typesString(vs []*Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.typ.String()
	}
	return strings.Join(parts, ", ")
}

func i64Array(vals []int64) string {
	if len(vals) == 0 {
		return "array<i64>"
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return "array<i64: " + strings.Join(parts, ", ") + ">"
}

func intList(vals []int64) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// isPermutation reports whether p holds each of 0..n-1 once.
func isPermutation(p []int64, n int) bool { return len(p) == n && uniqueDims(p, n) }

// uniqueDims reports whether dims are distinct and within [0, rank).
func uniqueDims(dims []int64, rank int) bool {
	seen := make([]bool, rank)
	for _, d := range dims {
		if d < 0 || d >= int64(rank) || seen[d] {
			return false
		}
		seen[d] = true
	}
	return true
}

// ones returns n ones.
func ones(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}
