package tensor

import "math"

// IntRange returns the smallest and largest value of integer dtype d (0
// and 1 for Bool). uint64's largest value, 2^64-1, does not fit an int64:
// it is returned as its bit pattern, -1. ok is false for other dtypes.
func (d DType) IntRange() (lo, hi int64, ok bool) {
	switch d {
	case Bool:
		return 0, 1, true
	case Int8:
		return math.MinInt8, math.MaxInt8, true
	case Int16:
		return math.MinInt16, math.MaxInt16, true
	case Int32:
		return math.MinInt32, math.MaxInt32, true
	case Int64:
		return math.MinInt64, math.MaxInt64, true
	case Uint8:
		return 0, math.MaxUint8, true
	case Uint16:
		return 0, math.MaxUint16, true
	case Uint32:
		return 0, math.MaxUint32, true
	case Uint64:
		return 0, -1, true
	case Int4:
		return -8, 7, true
	case Uint4:
		return 0, 15, true
	}
	return 0, 0, false
}

// Lowest returns a scalar of dtype d holding its lowest value: -inf for
// floats, the smallest integer, false for Bool.
func Lowest(d DType) *Tensor { return extreme(d, false) }

// Highest returns a scalar of dtype d holding its highest value: +inf for
// floats, the largest integer, true for Bool.
func Highest(d DType) *Tensor { return extreme(d, true) }

func extreme(d DType, highest bool) *Tensor {
	t := New(d)
	if lo, hi, ok := d.IntRange(); ok {
		v := lo
		if highest {
			v = hi
		}
		t.SetInt64(0, v)
		return t
	}
	v := math.Inf(-1)
	if highest {
		v = math.Inf(1)
	}
	t.SetFloat64(0, v)
	return t
}
