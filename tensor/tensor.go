package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/x448/float16"
)

// Tensor is a dense host tensor: DType elements laid out row-major in Data,
// little-endian. A rank-0 tensor (scalar) has an empty Shape and one element.
// String tensors keep their elements in Strings and leave Data empty.
type Tensor struct {
	DType   DType
	Shape   []int64
	Data    []byte
	Strings [][]byte
}

// ErrShape reports a shape that does not fit the data or a limit.
var ErrShape = errors.New("tensor: bad shape")

// NumElements returns the product of dims (1 for a scalar). It returns -1 when
// a dim is negative or the product overflows int64.
func NumElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/d {
			return -1
		}
		n *= d
	}
	return n
}

// New returns a zero-filled tensor of the given dtype and shape.
func New(dt DType, shape ...int64) *Tensor {
	n := NumElements(shape)
	if n < 0 {
		panic(fmt.Sprintf("tensor.New: invalid shape %v", shape))
	}
	t := &Tensor{DType: dt, Shape: append([]int64{}, shape...)}
	if dt == String {
		t.Strings = make([][]byte, n)
	} else {
		t.Data = make([]byte, n*int64(dt.Size()))
	}
	return t
}

// FromBytes wraps data as a tensor after checking its length against the shape.
func FromBytes(dt DType, shape []int64, data []byte) (*Tensor, error) {
	n := NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("%w: %v", ErrShape, shape)
	}
	if want := n * int64(dt.Size()); int64(len(data)) != want {
		return nil, fmt.Errorf("%w: %s%v needs %d bytes, got %d", ErrShape, dt, shape, want, len(data))
	}
	return &Tensor{DType: dt, Shape: append([]int64{}, shape...), Data: data}, nil
}

// NumElements returns the number of elements of t.
func (t *Tensor) NumElements() int64 { return NumElements(t.Shape) }

// Rank returns len(t.Shape).
func (t *Tensor) Rank() int { return len(t.Shape) }

// String describes the tensor's dtype and shape, e.g. "float32[2,3]".
func (t *Tensor) String() string { return t.DType.String() + ShapeString(t.Shape) }

// ShapeString formats a shape as "[2,3,4]".
func ShapeString(shape []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, d)
	}
	b.WriteByte(']')
	return b.String()
}

// Clone returns a deep copy of t.
func (t *Tensor) Clone() *Tensor {
	c := &Tensor{DType: t.DType, Shape: append([]int64{}, t.Shape...), Data: append([]byte(nil), t.Data...)}
	for _, s := range t.Strings {
		c.Strings = append(c.Strings, append([]byte(nil), s...))
	}
	return c
}

// Float64At returns element i converted to float64 (real part for complex).
func (t *Tensor) Float64At(i int64) float64 {
	sz := int64(t.DType.Size())
	b := t.Data[i*sz : (i+1)*sz]
	switch t.DType {
	case Bool, Uint8:
		return float64(b[0])
	case Int8:
		return float64(int8(b[0]))
	case Int16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case Uint16:
		return float64(binary.LittleEndian.Uint16(b))
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case Float16:
		return float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32())
	case BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case Float32, Complex64:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[:4])))
	case Float64, Complex128:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[:8]))
	}
	if len(b) != 1 {
		return math.NaN()
	}
	return decodeByte(t.DType, b[0])
}

// Int64At returns element i converted to int64 (floats are truncated).
func (t *Tensor) Int64At(i int64) int64 {
	sz := int64(t.DType.Size())
	b := t.Data[i*sz : (i+1)*sz]
	switch t.DType {
	case Int64:
		return int64(binary.LittleEndian.Uint64(b))
	case Uint64:
		return int64(binary.LittleEndian.Uint64(b))
	case Int32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	}
	return int64(t.Float64At(i))
}

// SetFloat64 stores v at element i, converting to t's dtype: floats round
// to nearest even (the 8- and 4-bit ones as ml_dtypes and XLA's convert do:
// out of range is infinity or NaN, except float4_e2m1fn, which saturates),
// integers truncate toward zero (4-bit ones then wrap).
func (t *Tensor) SetFloat64(i int64, v float64) {
	sz := int64(t.DType.Size())
	b := t.Data[i*sz : (i+1)*sz]
	switch t.DType {
	case Bool:
		if v != 0 {
			b[0] = 1
		} else {
			b[0] = 0
		}
	case Uint8:
		b[0] = uint8(v)
	case Int8:
		b[0] = uint8(int8(v))
	case Int16:
		binary.LittleEndian.PutUint16(b, uint16(int16(v)))
	case Uint16:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	case Uint32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case Uint64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	case Float16:
		binary.LittleEndian.PutUint16(b, float16.Fromfloat32(float32(v)).Bits())
	case BFloat16:
		binary.LittleEndian.PutUint16(b, bf16FromF32(float32(v)))
	case Float32, Complex64:
		binary.LittleEndian.PutUint32(b[:4], math.Float32bits(float32(v)))
	case Float64, Complex128:
		binary.LittleEndian.PutUint64(b[:8], math.Float64bits(v))
	default:
		encodeByte(t.DType, b, v)
	}
}

// SetInt64 stores v at element i, converting to t's dtype without going
// through float64 for 64-bit integers.
func (t *Tensor) SetInt64(i int64, v int64) {
	switch t.DType {
	case Int64, Uint64:
		binary.LittleEndian.PutUint64(t.Data[i*8:(i+1)*8], uint64(v))
	default:
		t.SetFloat64(i, float64(v))
	}
}

// bf16FromF32 rounds to nearest even, keeping NaN a NaN.
func bf16FromF32(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Float64s returns all elements converted to float64.
func (t *Tensor) Float64s() []float64 {
	n := t.NumElements()
	out := make([]float64, n)
	for i := int64(0); i < n; i++ {
		out[i] = t.Float64At(i)
	}
	return out
}

// Int64s returns all elements converted to int64.
func (t *Tensor) Int64s() []int64 {
	n := t.NumElements()
	out := make([]int64, n)
	for i := int64(0); i < n; i++ {
		out[i] = t.Int64At(i)
	}
	return out
}

// Convert returns a copy of t with elements converted to dt (via float64, or
// int64 between integer types).
func (t *Tensor) Convert(dt DType) *Tensor {
	out := New(dt, t.Shape...)
	n := t.NumElements()
	intPath := (t.DType.IsInt() || t.DType == Bool) && (dt.IsInt() || dt == Bool)
	for i := int64(0); i < n; i++ {
		if intPath {
			v := t.Int64At(i)
			if dt == Bool && v != 0 {
				v = 1
			}
			out.SetInt64(i, v)
		} else {
			out.SetFloat64(i, t.Float64At(i))
		}
	}
	return out
}

// Scalar makes a rank-0 tensor holding v converted to dt.
func Scalar(dt DType, v float64) *Tensor {
	t := New(dt)
	t.SetFloat64(0, v)
	return t
}

// FromInt64s makes a tensor of dtype Int64 from values with the given shape
// (a 1-D shape of len(values) when shape is nil).
func FromInt64s(values []int64, shape ...int64) *Tensor {
	if shape == nil {
		shape = []int64{int64(len(values))}
	}
	t := New(Int64, shape...)
	for i, v := range values {
		t.SetInt64(int64(i), v)
	}
	return t
}

// FromFloat32s makes a float32 tensor from values with the given shape (1-D
// when shape is nil).
func FromFloat32s(values []float32, shape ...int64) *Tensor {
	if shape == nil {
		shape = []int64{int64(len(values))}
	}
	t := New(Float32, shape...)
	for i, v := range values {
		binary.LittleEndian.PutUint32(t.Data[i*4:], math.Float32bits(v))
	}
	return t
}

// Transpose returns a new tensor whose dim i is t's dim perm[i], as
// numpy.transpose(t, perm) (a copy, row-major). perm must be a permutation
// of 0..Rank()-1; String tensors are not supported (it panics on both, a
// programming error).
func (t *Tensor) Transpose(perm []int) *Tensor {
	rank := t.Rank()
	if len(perm) != rank || t.DType == String {
		panic(fmt.Sprintf("tensor.Transpose: %s by %v", t, perm))
	}
	seen := make([]bool, rank)
	shape := make([]int64, rank)
	for i, p := range perm {
		if p < 0 || p >= rank || seen[p] {
			panic(fmt.Sprintf("tensor.Transpose: %v is not a permutation of %d dims", perm, rank))
		}
		seen[p] = true
		shape[i] = t.Shape[p]
	}
	out := New(t.DType, shape...)
	size := int64(t.DType.Size())
	// srcStride[i]: the step in t's data, in elements, along out's dim i.
	strides := make([]int64, rank)
	s := int64(1)
	for d := rank - 1; d >= 0; d-- {
		strides[d] = s
		s *= t.Shape[d]
	}
	srcStride := make([]int64, rank)
	for i, p := range perm {
		srcStride[i] = strides[p]
	}
	idx := make([]int64, rank)
	var src int64
	for dst := int64(0); dst < out.NumElements(); dst++ {
		copy(out.Data[dst*size:(dst+1)*size], t.Data[src*size:(src+1)*size])
		for i := rank - 1; i >= 0; i-- {
			idx[i]++
			src += srcStride[i]
			if idx[i] < shape[i] {
				break
			}
			src -= srcStride[i] * shape[i]
			idx[i] = 0
		}
	}
	return out
}
