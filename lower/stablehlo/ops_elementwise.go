package stablehlo

import (
	"fmt"
	"strings"
)

// kinds of element types an elementwise op accepts.
type kinds uint8

const (
	kBool kinds = 1 << iota
	kSigned
	kUnsigned
	kFloat

	kInt     = kSigned | kUnsigned
	kNumeric = kInt | kFloat
	kAll     = kBool | kNumeric
	kLogical = kBool | kInt
)

func (k kinds) has(e ElementType) bool {
	switch {
	case e == Bool:
		return k&kBool != 0
	case e.IsUnsigned():
		return k&kUnsigned != 0
	case e.IsInt():
		return k&kSigned != 0
	case e.IsFloat():
		return k&kFloat != 0
	}
	return false
}

func (k kinds) String() string {
	var parts []string
	for _, p := range []struct {
		k kinds
		s string
	}{{kBool, "i1"}, {kSigned, "signed integers"}, {kUnsigned, "unsigned integers"}, {kFloat, "floats"}} {
		if k&p.k != 0 {
			parts = append(parts, p.s)
		}
	}
	return strings.Join(parts, ", ")
}

func (b *Block) unary(name string, k kinds, x *Value) (*Value, error) {
	if x == nil {
		return nil, b.check(name, []*Value{x})
	}
	return b.unaryTo(name, k, x, x.typ.Elem)
}

// unaryTo emits an elementwise op of one operand whose result has elem.
func (b *Block) unaryTo(name string, k kinds, x *Value, elem ElementType) (*Value, error) {
	if err := b.check(name, []*Value{x}); err != nil {
		return nil, err
	}
	if !k.has(x.typ.Elem) {
		return nil, shapeErr(name, "operand is %s; the op takes %s", x.typ, k)
	}
	return b.emit1(name, []*Value{x}, nil, nil, x.typ.WithElem(elem))
}

func (b *Block) binary(name string, k kinds, x, y *Value) (*Value, error) {
	if err := b.check(name, []*Value{x, y}); err != nil {
		return nil, err
	}
	if !x.typ.Equal(y.typ) {
		return nil, shapeErr(name, "operands differ: %s and %s (broadcast explicitly with broadcast_in_dim)", x.typ, y.typ)
	}
	if !k.has(x.typ.Elem) {
		return nil, shapeErr(name, "operands are %s; the op takes %s", x.typ, k)
	}
	return b.emit1(name, []*Value{x, y}, nil, nil, x.typ)
}

// Abs is |x| (signed integers, floats).
func (b *Block) Abs(x *Value) (*Value, error) { return b.unary("abs", kSigned|kFloat, x) }

// Negate is -x.
func (b *Block) Negate(x *Value) (*Value, error) { return b.unary("negate", kNumeric, x) }

// Sign is -1, 0 or 1 (NaN for NaN).
func (b *Block) Sign(x *Value) (*Value, error) { return b.unary("sign", kSigned|kFloat, x) }

// Not is logical not for i1 and bitwise not for integers.
func (b *Block) Not(x *Value) (*Value, error) { return b.unary("not", kLogical, x) }

// Popcnt counts the set bits of integers.
func (b *Block) Popcnt(x *Value) (*Value, error) { return b.unary("popcnt", kInt, x) }

// CountLeadingZeros counts the leading zero bits of integers.
func (b *Block) CountLeadingZeros(x *Value) (*Value, error) {
	return b.unary("count_leading_zeros", kInt, x)
}

// Float-only unary ops, named as the spec names them.
func (b *Block) Exponential(x *Value) (*Value, error) { return b.unary("exponential", kFloat, x) }

// ExponentialMinusOne is exp(x)-1, exact near 0.
func (b *Block) ExponentialMinusOne(x *Value) (*Value, error) {
	return b.unary("exponential_minus_one", kFloat, x)
}

// Log is the natural logarithm.
func (b *Block) Log(x *Value) (*Value, error) { return b.unary("log", kFloat, x) }

// LogPlusOne is log(1+x), exact near 0.
func (b *Block) LogPlusOne(x *Value) (*Value, error) { return b.unary("log_plus_one", kFloat, x) }

// Logistic is 1/(1+exp(-x)).
func (b *Block) Logistic(x *Value) (*Value, error) { return b.unary("logistic", kFloat, x) }

// Sqrt is the square root.
func (b *Block) Sqrt(x *Value) (*Value, error) { return b.unary("sqrt", kFloat, x) }

// Rsqrt is 1/sqrt(x).
func (b *Block) Rsqrt(x *Value) (*Value, error) { return b.unary("rsqrt", kFloat, x) }

// Cbrt is the cube root.
func (b *Block) Cbrt(x *Value) (*Value, error) { return b.unary("cbrt", kFloat, x) }

// Tanh is the hyperbolic tangent.
func (b *Block) Tanh(x *Value) (*Value, error) { return b.unary("tanh", kFloat, x) }

// Sine is sin(x).
func (b *Block) Sine(x *Value) (*Value, error) { return b.unary("sine", kFloat, x) }

// Cosine is cos(x).
func (b *Block) Cosine(x *Value) (*Value, error) { return b.unary("cosine", kFloat, x) }

// Tan is tan(x).
func (b *Block) Tan(x *Value) (*Value, error) { return b.unary("tan", kFloat, x) }

// Floor rounds down.
func (b *Block) Floor(x *Value) (*Value, error) { return b.unary("floor", kFloat, x) }

// Ceil rounds up.
func (b *Block) Ceil(x *Value) (*Value, error) { return b.unary("ceil", kFloat, x) }

// RoundNearestEven rounds half to even.
func (b *Block) RoundNearestEven(x *Value) (*Value, error) {
	return b.unary("round_nearest_even", kFloat, x)
}

// RoundNearestAfz rounds half away from zero.
func (b *Block) RoundNearestAfz(x *Value) (*Value, error) {
	return b.unary("round_nearest_afz", kFloat, x)
}

// Erf is the error function (chlo.erf, which XLA expands).
func (b *Block) Erf(x *Value) (*Value, error) { return b.unary("chlo.erf", kFloat, x) }

// IsFinite is true where x is neither infinite nor NaN.
func (b *Block) IsFinite(x *Value) (*Value, error) { return b.unaryTo("is_finite", kFloat, x, Bool) }

// Add is x+y (logical or for i1).
func (b *Block) Add(x, y *Value) (*Value, error) { return b.binary("add", kAll, x, y) }

// Subtract is x-y.
func (b *Block) Subtract(x, y *Value) (*Value, error) { return b.binary("subtract", kNumeric, x, y) }

// Multiply is x*y (logical and for i1).
func (b *Block) Multiply(x, y *Value) (*Value, error) { return b.binary("multiply", kAll, x, y) }

// Divide is x/y (truncating for integers).
func (b *Block) Divide(x, y *Value) (*Value, error) { return b.binary("divide", kNumeric, x, y) }

// Remainder is x - y*trunc(x/y), the sign of x.
func (b *Block) Remainder(x, y *Value) (*Value, error) { return b.binary("remainder", kNumeric, x, y) }

// Maximum is the larger of x and y (NaN if either is).
func (b *Block) Maximum(x, y *Value) (*Value, error) { return b.binary("maximum", kAll, x, y) }

// Minimum is the smaller of x and y (NaN if either is).
func (b *Block) Minimum(x, y *Value) (*Value, error) { return b.binary("minimum", kAll, x, y) }

// Power is x**y.
func (b *Block) Power(x, y *Value) (*Value, error) { return b.binary("power", kNumeric, x, y) }

// Atan2 is atan(x/y) in the right quadrant.
func (b *Block) Atan2(x, y *Value) (*Value, error) { return b.binary("atan2", kFloat, x, y) }

// And is logical (i1) or bitwise (integers) and.
func (b *Block) And(x, y *Value) (*Value, error) { return b.binary("and", kLogical, x, y) }

// Or is logical or bitwise or.
func (b *Block) Or(x, y *Value) (*Value, error) { return b.binary("or", kLogical, x, y) }

// Xor is logical or bitwise exclusive or.
func (b *Block) Xor(x, y *Value) (*Value, error) { return b.binary("xor", kLogical, x, y) }

// ShiftLeft shifts integers left.
func (b *Block) ShiftLeft(x, y *Value) (*Value, error) { return b.binary("shift_left", kInt, x, y) }

// ShiftRightArithmetic shifts integers right, copying the sign bit.
func (b *Block) ShiftRightArithmetic(x, y *Value) (*Value, error) {
	return b.binary("shift_right_arithmetic", kInt, x, y)
}

// ShiftRightLogical shifts integers right, filling zeros.
func (b *Block) ShiftRightLogical(x, y *Value) (*Value, error) {
	return b.binary("shift_right_logical", kInt, x, y)
}

// Direction is a comparison direction.
type Direction string

// The comparison directions.
const (
	EQ Direction = "EQ"
	NE Direction = "NE"
	GE Direction = "GE"
	GT Direction = "GT"
	LE Direction = "LE"
	LT Direction = "LT"
)

// CompareType says how compare orders its operands.
type CompareType string

// The compare types; CompareDefault picks FLOAT, SIGNED or UNSIGNED from the
// element type (i1 compares as UNSIGNED).
const (
	CompareDefault CompareType = ""
	CompareFloat   CompareType = "FLOAT"
	CompareTotal   CompareType = "TOTALORDER"
	CompareSigned  CompareType = "SIGNED"
	CompareUnsign  CompareType = "UNSIGNED"
)

// Compare compares x and y elementwise, giving i1.
func (b *Block) Compare(x, y *Value, dir Direction, ct CompareType) (*Value, error) {
	if err := b.check("compare", []*Value{x, y}); err != nil {
		return nil, err
	}
	if !x.typ.Equal(y.typ) {
		return nil, shapeErr("compare", "operands differ: %s and %s", x.typ, y.typ)
	}
	switch dir {
	case EQ, NE, GE, GT, LE, LT:
	default:
		return nil, shapeErr("compare", "unknown direction %q", dir)
	}
	e := x.typ.Elem
	if ct == CompareDefault {
		switch {
		case e.IsFloat():
			ct = CompareFloat
		case e.IsInt() && !e.IsUnsigned():
			ct = CompareSigned
		default:
			ct = CompareUnsign
		}
	}
	switch {
	case (ct == CompareFloat || ct == CompareTotal) && !e.IsFloat(),
		ct == CompareSigned && !(e.IsInt() && !e.IsUnsigned()),
		ct == CompareUnsign && !(e.IsUnsigned() || e == Bool):
		return nil, shapeErr("compare", "compare_type %s does not fit operands %s", ct, x.typ)
	}
	attrs := []string{
		fmt.Sprintf("comparison_direction = #stablehlo<comparison_direction %s>", dir),
		fmt.Sprintf("compare_type = #stablehlo<comparison_type %s>", ct),
	}
	return b.emit1("compare", []*Value{x, y}, nil, attrs, x.typ.WithElem(Bool))
}

// Select picks onTrue where pred holds, else onFalse. pred is an i1 scalar
// or has their shape.
func (b *Block) Select(pred, onTrue, onFalse *Value) (*Value, error) {
	if err := b.check("select", []*Value{pred, onTrue, onFalse}); err != nil {
		return nil, err
	}
	if !onTrue.typ.Equal(onFalse.typ) {
		return nil, shapeErr("select", "branches differ: %s and %s", onTrue.typ, onFalse.typ)
	}
	if pred.typ.Elem != Bool || (pred.typ.Rank() != 0 && !pred.typ.SameShape(onTrue.typ)) {
		return nil, shapeErr("select", "pred is %s; want tensor<i1> or i1 of shape %s", pred.typ, onTrue.typ)
	}
	return b.emit1("select", []*Value{pred, onTrue, onFalse}, nil, nil, onTrue.typ)
}

// Clamp is min(max(x, lo), hi); lo and hi are scalars or have x's shape.
func (b *Block) Clamp(lo, x, hi *Value) (*Value, error) {
	if err := b.check("clamp", []*Value{lo, x, hi}); err != nil {
		return nil, err
	}
	for _, bound := range []*Value{lo, hi} {
		if bound.typ.Elem != x.typ.Elem || (bound.typ.Rank() != 0 && !bound.typ.SameShape(x.typ)) {
			return nil, shapeErr("clamp", "bound is %s; want a scalar or %s", bound.typ, x.typ)
		}
	}
	return b.emit1("clamp", []*Value{lo, x, hi}, nil, nil, x.typ)
}

// Convert converts each element to elem.
func (b *Block) Convert(x *Value, elem ElementType) (*Value, error) {
	if err := b.check("convert", []*Value{x}); err != nil {
		return nil, err
	}
	if err := x.typ.WithElem(elem).valid(); err != nil {
		return nil, shapeErr("convert", "%v", err)
	}
	return b.emit1("convert", []*Value{x}, nil, nil, x.typ.WithElem(elem))
}

// BitcastConvert reinterprets the bits of x as elem, which must be as wide.
func (b *Block) BitcastConvert(x *Value, elem ElementType) (*Value, error) {
	if err := b.check("bitcast_convert", []*Value{x}); err != nil {
		return nil, err
	}
	if elem.Bits() != x.typ.Elem.Bits() {
		return nil, shapeErr("bitcast_convert", "%s to %s changes the element width (only same-width bitcasts are supported)", x.typ, elem)
	}
	return b.emit1("bitcast_convert", []*Value{x}, nil, nil, x.typ.WithElem(elem))
}

// ReducePrecision rounds floats to a format with the given exponent and
// mantissa bits, keeping the type.
func (b *Block) ReducePrecision(x *Value, exponentBits, mantissaBits int) (*Value, error) {
	if err := b.check("reduce_precision", []*Value{x}); err != nil {
		return nil, err
	}
	if !x.typ.Elem.IsFloat() || exponentBits < 1 || mantissaBits < 0 {
		return nil, shapeErr("reduce_precision", "operand %s with exponent_bits %d, mantissa_bits %d; want floats, exponent_bits >= 1, mantissa_bits >= 0", x.typ, exponentBits, mantissaBits)
	}
	attrs := []string{fmt.Sprintf("exponent_bits = %d : i32", exponentBits), fmt.Sprintf("mantissa_bits = %d : i32", mantissaBits)}
	return b.emit1("reduce_precision", []*Value{x}, nil, attrs, x.typ)
}
