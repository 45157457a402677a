package payload

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestScanFloatMatchesStrconv: the one-pass number parser gives exactly
// strconv.ParseFloat's float32 and float64 (the reference), or declines,
// on the numbers clients send (shortest reprs of float32 and float64
// values), random decimals of 1 to 19 digits with exponents, and decimals
// next to float32 rounding midpoints.
func TestScanFloatMatchesStrconv(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var inputs []string
	for range 20000 {
		f := math.Float32frombits(r.Uint32())
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		inputs = append(inputs,
			strconv.FormatFloat(float64(f), 'g', -1, 64),
			strconv.FormatFloat(float64(f), 'g', -1, 32),
			strconv.FormatFloat(float64(f), 'e', 16, 64),
			strconv.FormatFloat(math.Float64frombits(r.Uint64()), 'g', -1, 64))
		digits := 1 + r.IntN(19)
		m := r.Uint64() % uint64(math.Pow10(min(digits, 19)))
		inputs = append(inputs, strconv.FormatUint(m, 10)+"e"+strconv.Itoa(r.IntN(110)-66))
		// A float32 midpoint written with 17 to 19 significant digits:
		// rounds either way, or is the midpoint itself.
		mid := (float64(f) + float64(math.Nextafter32(f, float32(math.Inf(1))))) / 2
		inputs = append(inputs, strconv.FormatFloat(mid, 'e', 16+r.IntN(3), 64))
	}
	inputs = append(inputs, "0", "-0", "0.0", "1", "-1", "0.1", "1e-45", "3.4028235e38", "3.4028236e38", "1e39",
		"1.17549435e-38", "1.1754942e-38", "123456789012345678901", "0.30000001192092896", "16777217", "9007199254740993")
	for _, s := range inputs {
		b := []byte(s + ",")
		for _, f32 := range []bool{true, false} {
			v, end, ok := scanFloat(b, 0, f32)
			if !ok {
				continue
			}
			if end != len(s) {
				t.Fatalf("scanFloat(%q) ended at %d, want %d", s, end, len(s))
			}
			if f32 {
				want, err := strconv.ParseFloat(s, 32)
				if err != nil || math.Float32bits(float32(v)) != math.Float32bits(float32(want)) {
					t.Errorf("float32 %q: got %v, strconv %v (%v)", s, float32(v), float32(want), err)
				}
			} else {
				want, err := strconv.ParseFloat(s, 64)
				if err != nil || math.Float64bits(v) != math.Float64bits(want) {
					t.Errorf("float64 %q: got %v, strconv %v (%v)", s, v, want, err)
				}
			}
		}
	}
	// Not plain numbers: declined, so that the general path reports them.
	for _, s := range []string{"", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1x", "0x10", `"1"`, "--1", "1.5.2", "NaN"} {
		if _, _, ok := scanFloat([]byte(s), 0, true); ok {
			t.Errorf("scanFloat(%q) accepted it", s)
		}
	}
}
