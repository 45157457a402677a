package tensor

import (
	"math"
	"testing"
)

func TestLimits(t *testing.T) {
	for _, c := range []struct {
		dt       DType
		lo, hi   float64 // as read back with Float64At
		intRange bool
	}{
		{Bool, 0, 1, true},
		{Int8, -128, 127, true},
		{Uint8, 0, 255, true},
		{Int16, -32768, 32767, true},
		{Uint16, 0, 65535, true},
		{Int32, math.MinInt32, math.MaxInt32, true},
		{Uint32, 0, math.MaxUint32, true},
		{Int64, math.MinInt64, math.MaxInt64, true},
		{Uint64, 0, math.MaxUint64, true},
		{Float16, math.Inf(-1), math.Inf(1), false},
		{BFloat16, math.Inf(-1), math.Inf(1), false},
		{Float32, math.Inf(-1), math.Inf(1), false},
		{Float64, math.Inf(-1), math.Inf(1), false},
	} {
		if _, _, ok := c.dt.IntRange(); ok != c.intRange {
			t.Errorf("%s: IntRange ok = %v", c.dt, ok)
		}
		if got := Lowest(c.dt).Float64At(0); got != c.lo {
			t.Errorf("Lowest(%s) = %v, want %v", c.dt, got, c.lo)
		}
		if got := Highest(c.dt).Float64At(0); got != c.hi {
			t.Errorf("Highest(%s) = %v, want %v", c.dt, got, c.hi)
		}
	}
	if lo, hi, _ := Uint64.IntRange(); lo != 0 || uint64(hi) != math.MaxUint64 {
		t.Errorf("Uint64.IntRange = %d, %d", lo, hi)
	}
}
