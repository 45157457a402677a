package tensor

import "math"

// minifloat describes one of the 8- and 4-bit floating-point formats
// (OCP FP8/FP4 and the FNUZ variants), stored one element a byte in the
// low bits, as ml_dtypes and XLA hold them.
type minifloat struct {
	exp, man int  // exponent and mantissa bits
	bias     int  // exponent bias
	signed   bool // has a sign bit above the exponent (E8M0 has none)
	// nan says which codes are NaN: nanIEEE (E5M2: all-ones exponent with a
	// nonzero mantissa; all-ones with zero mantissa is infinity), nanAllOnes
	// (E4M3FN, E8M0: the all-ones exponent and mantissa; no infinity),
	// nanNegZero (FNUZ: the negative-zero code 0x80; no infinity, no -0) or
	// nanNone (E2M1: neither NaN nor infinity).
	nan nanKind
}

type nanKind uint8

const (
	nanNone nanKind = iota
	nanIEEE
	nanAllOnes
	nanNegZero
)

// The formats, by dtype.
var (
	fmtE4M3FN   = &minifloat{exp: 4, man: 3, bias: 7, signed: true, nan: nanAllOnes}
	fmtE4M3FNUZ = &minifloat{exp: 4, man: 3, bias: 8, signed: true, nan: nanNegZero}
	fmtE5M2     = &minifloat{exp: 5, man: 2, bias: 15, signed: true, nan: nanIEEE}
	fmtE5M2FNUZ = &minifloat{exp: 5, man: 2, bias: 16, signed: true, nan: nanNegZero}
	fmtE8M0FNU  = &minifloat{exp: 8, man: 0, bias: 127, nan: nanAllOnes}
	fmtE2M1FN   = &minifloat{exp: 2, man: 1, bias: 1, signed: true, nan: nanNone}
)

// minifloatOf returns the format of dt, or nil when dt is not a minifloat.
func minifloatOf(dt DType) *minifloat {
	switch dt {
	case Float8E4M3FN:
		return fmtE4M3FN
	case Float8E4M3FNUZ:
		return fmtE4M3FNUZ
	case Float8E5M2:
		return fmtE5M2
	case Float8E5M2FNUZ:
		return fmtE5M2FNUZ
	case Float8E8M0FNU:
		return fmtE8M0FNU
	case Float4E2M1FN:
		return fmtE2M1FN
	}
	return nil
}

// decodeByte is the value of a one-byte element of the 4-bit integer and
// the 8- and 4-bit float types (NaN for other dtypes).
func decodeByte(dt DType, b uint8) float64 {
	switch dt {
	case Int4:
		return float64(int8(b<<4) >> 4)
	case Uint4:
		return float64(b & 0xf)
	}
	if f := minifloatOf(dt); f != nil {
		return f.decode(b)
	}
	return math.NaN()
}

// encodeByte is decodeByte's inverse: it stores v, rounded as XLA's
// convert does (integers truncated toward zero and wrapped), in the
// one-byte element b (nothing for other dtypes).
func encodeByte(dt DType, b []byte, v float64) {
	switch f := minifloatOf(dt); {
	case len(b) != 1:
	case f != nil:
		b[0] = f.encode(v)
	case dt == Int4 || dt == Uint4:
		b[0] = uint8(int64(v)) & 0xf
	}
}

func (f *minifloat) signBit() uint8 {
	if !f.signed {
		return 0
	}
	return 1 << (f.exp + f.man)
}

func (f *minifloat) expMax() int { return 1<<f.exp - 1 }

// decode returns the value of code b.
func (f *minifloat) decode(b uint8) float64 {
	sign := 1.0
	if sb := f.signBit(); sb != 0 {
		if b&sb != 0 {
			sign = -1
		}
		b &^= sb
	}
	e := int(b>>f.man) & f.expMax()
	m := int(b) & (1<<f.man - 1)
	switch f.nan {
	case nanIEEE:
		if e == f.expMax() {
			if m == 0 {
				return math.Inf(int(sign))
			}
			return math.NaN()
		}
	case nanAllOnes:
		if e == f.expMax() && m == 1<<f.man-1 {
			return math.NaN()
		}
	case nanNegZero:
		if sign < 0 && e == 0 && m == 0 {
			return math.NaN()
		}
	}
	if e == 0 && f.man > 0 { // subnormal
		return sign * math.Ldexp(float64(m), 1-f.bias-f.man)
	}
	return sign * math.Ldexp(1+float64(m)/float64(int(1)<<f.man), e-f.bias)
}

// maxFinite returns the largest finite code's magnitude.
func (f *minifloat) maxFinite() float64 {
	e, m := f.expMax(), 1<<f.man-1
	switch f.nan {
	case nanIEEE:
		e--
	case nanAllOnes:
		if f.man == 0 {
			e--
		} else {
			m--
		}
	}
	return math.Ldexp(1+float64(m)/float64(int(1)<<f.man), e-f.bias)
}

// encode rounds v to the nearest code, ties to even, as ml_dtypes and XLA
// convert: no saturation (out of range is infinity where the format has it,
// else NaN), except E2M1, which has neither and saturates. NaN stays NaN.
func (f *minifloat) encode(v float64) uint8 {
	var sign uint8
	if math.Signbit(v) {
		sign = f.signBit()
	}
	switch {
	case math.IsNaN(v):
		return f.nanCode(sign)
	case !f.signed && (v < 0 || v == 0):
		return f.nanCode(0) // E8M0 has neither zero nor negative values
	}
	a := math.Abs(v)
	if math.IsInf(a, 0) {
		return f.overflow(sign)
	}
	r := f.round(a)
	if r > f.maxFinite() {
		return f.overflow(sign)
	}
	code := f.magnitudeCode(r)
	if code == 0 && f.nan == nanNegZero {
		return 0 // no negative zero
	}
	return sign | code
}

// round rounds a > 0 to the format's precision, ties to even.
func (f *minifloat) round(a float64) float64 {
	_, e := math.Frexp(a) // a = frac * 2^e, frac in [0.5, 1)
	e--                   // a = 1.x * 2^e
	minE := 1 - f.bias
	if f.man == 0 {
		// E8M0 has no subnormals: ml_dtypes (and XLA) give its smallest
		// code to everything up to 2^-127 and the next one to the rest of
		// (2^-127, 2^-126], rounding up there rather than to nearest.
		minE = -f.bias
		lo := math.Ldexp(1, minE)
		if a <= lo {
			return lo
		}
		if a < 2*lo {
			return 2 * lo
		}
	}
	e = max(e, minE)
	q := math.Ldexp(1, e-f.man) // the spacing of codes at this exponent
	return math.RoundToEven(a/q) * q
}

// magnitudeCode returns the code of r >= 0, exactly representable and
// finite.
func (f *minifloat) magnitudeCode(r float64) uint8 {
	if r == 0 {
		return 0
	}
	frac, e := math.Frexp(r)
	e--
	if f.man == 0 {
		return uint8(e + f.bias)
	}
	be := e + f.bias
	if be <= 0 { // subnormal
		return uint8(math.Ldexp(r, f.bias-1+f.man))
	}
	m := int(math.Ldexp(frac*2-1, f.man))
	return uint8(be<<f.man | m)
}

func (f *minifloat) overflow(sign uint8) uint8 {
	switch f.nan {
	case nanIEEE:
		return sign | uint8(f.expMax()<<f.man)
	case nanNone:
		return sign | f.magnitudeCode(f.maxFinite())
	}
	return f.nanCode(sign)
}

// nanCode is the NaN code; for E2M1, which has none, a zero whose sign is
// the opposite of NaN's (ml_dtypes' choice).
func (f *minifloat) nanCode(sign uint8) uint8 {
	switch f.nan {
	case nanIEEE:
		return sign | uint8(f.expMax()<<f.man) | uint8(1)<<(f.man-1)
	case nanAllOnes:
		return sign | uint8(f.expMax()<<f.man) | uint8(1<<f.man-1)
	case nanNegZero:
		return f.signBit()
	}
	return sign ^ f.signBit()
}

// MaxFinite returns the largest finite value of a floating-point dtype
// (65504 for float16, 448 for float8_e4m3fn), or 0 for other dtypes.
func (d DType) MaxFinite() float64 {
	if f := minifloatOf(d); f != nil {
		return f.maxFinite()
	}
	switch d {
	case Float16:
		return 65504
	case BFloat16:
		return float64(math.Float32frombits(0x7f7f0000))
	case Float32:
		return math.MaxFloat32
	case Float64:
		return math.MaxFloat64
	}
	return 0
}

// Overflows reports whether storing the number v in a floating-point dtype
// leaves its range: v is finite, but rounds to an infinity or NaN (float16,
// bfloat16, float8), beyond the largest finite value (float4_e2m1fn, which
// would saturate), or is not positive for float8_e8m0fnu. NaN and
// infinities never overflow; other dtypes report false.
func (d DType) Overflows(v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) || !d.IsFloat() {
		return false
	}
	if f := minifloatOf(d); f != nil {
		if !f.signed && v <= 0 {
			return true
		}
		return f.round(math.Abs(v)) > f.maxFinite()
	}
	t := New(d, 1)
	t.SetFloat64(0, v)
	return math.IsInf(t.Float64At(0), 0)
}
