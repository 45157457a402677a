package payload

import "math"

// scanFloat parses the JSON number at b[i:] for a float32 (f32) or float64
// element in one pass (grammar, digits and value together) and returns its
// value and end. ok is false, with nothing consumed, when the text is not a
// plain number followed by a delimiter, or when its value cannot be proved
// correctly rounded this way; the caller then takes the general path
// (strconv.ParseFloat, with its error messages).
//
// The value is mantissa × 10^exp with at most 19 significant digits:
//   - float64: exact when mantissa <= 2^53 and |exp| <= 22, since both
//     factors are exact doubles and one multiply or divide rounds once.
//   - float32: the double x computed with at most three roundings (the
//     mantissa, and one per power-of-ten step of at most 10^22, each exact)
//     is within 2 ulp of the decimal value d. Rounding x to float32 gives
//     d's correctly rounded float32 unless a float32 rounding boundary (a
//     midpoint between two float32s, which is a double) lies between them;
//     that is only possible if x's 29 bits below float32 precision are
//     within a few units of the midpoint pattern 1<<28, which is checked.
//     Results outside the normal float32 range take the general path.
func scanFloat(b []byte, i int, f32 bool) (v float64, end int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	mant, exp, end, ok := readDecimal(b, i)
	if !ok {
		return 0, 0, false
	}
	if end < len(b) {
		switch b[end] {
		case ',', ']', ' ', '\t', '\n', '\r':
		default:
			return 0, 0, false
		}
	}
	if v, ok = decimalValue(mant, exp, f32); !ok {
		return 0, 0, false
	}
	if neg {
		v = math.Copysign(v, -1)
	}
	return v, end, true
}

// readDecimal reads the digits of an unsigned JSON number at b[i:] as
// mant × 10^exp; ok is false if it is not one or has more than 19
// significant digits.
func readDecimal(b []byte, i int) (mant uint64, exp, end int, ok bool) {
	s := decimalScan{b: b, i: i}
	if !s.integer() || !s.fraction() || !s.exponent() {
		return 0, 0, 0, false
	}
	return s.mant, s.exp, s.i, true
}

// decimalScan is readDecimal's state: the number is mant × 10^exp, with nd
// significant digits read so far, up to b[i].
type decimalScan struct {
	b       []byte
	i       int
	mant    uint64
	exp, nd int
}

// digits reads a run of digits into mant (frac: after the point, each one
// lowers exp); false past 19 significant digits.
func (s *decimalScan) digits(frac bool) bool {
	for ; s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9'; s.i++ {
		if frac {
			s.exp--
		}
		if s.mant == 0 && s.b[s.i] == '0' {
			continue
		}
		if s.nd == 19 {
			return false
		}
		s.mant = s.mant*10 + uint64(s.b[s.i]-'0')
		s.nd++
	}
	return true
}

// integer reads the integer part: 0, or a digit 1-9 and more digits.
func (s *decimalScan) integer() bool {
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
		return true
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		return s.digits(false)
	}
	return false
}

// fraction reads an optional '.' and at least one digit.
func (s *decimalScan) fraction() bool {
	if s.i >= len(s.b) || s.b[s.i] != '.' {
		return true
	}
	s.i++
	start := s.i
	return s.digits(true) && s.i != start
}

// exponent reads an optional e or E, a sign and at least one digit.
func (s *decimalScan) exponent() bool {
	if s.i >= len(s.b) || (s.b[s.i] != 'e' && s.b[s.i] != 'E') {
		return true
	}
	s.i++
	sign := 1
	if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
		if s.b[s.i] == '-' {
			sign = -1
		}
		s.i++
	}
	start, e := s.i, 0
	for ; s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9'; s.i++ {
		if e < 10000 {
			e = e*10 + int(s.b[s.i]-'0')
		}
	}
	s.exp += sign * e
	return s.i != start
}

// decimalValue returns mant × 10^exp as a float64 (f32: one whose float32
// conversion is the correctly rounded float32), or ok false where that is
// not proved (see scanFloat).
func decimalValue(mant uint64, exp int, f32 bool) (float64, bool) {
	if mant == 0 {
		return 0, true
	}
	x := float64(mant)
	if !f32 {
		if mant > 1<<53 || exp < -22 || exp > 22 {
			return 0, false
		}
		return scale(x, exp), true
	}
	if exp < -66 || exp > 44 {
		return 0, false
	}
	x = scale(x, exp)
	if x > math.MaxFloat32 || x < 0x1p-126 {
		return 0, false
	}
	if low := math.Float64bits(x) & (1<<29 - 1); low >= 1<<28-16 && low <= 1<<28+16 {
		return 0, false
	}
	return x, true
}

// pow10 holds the powers of ten that are exact doubles.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// scale returns x × 10^exp in steps of at most 10^22.
func scale(x float64, exp int) float64 {
	for exp > 22 {
		x *= 1e22
		exp -= 22
	}
	for exp < -22 {
		x /= 1e22
		exp += 22
	}
	if exp >= 0 {
		return x * pow10[exp]
	}
	return x / pow10[-exp]
}
