package tensor

import (
	"encoding/json"
	"math"
	"os/exec"
	"strconv"
	"testing"
)

// mlDTypesScript prints, per 8- and 4-bit type, ml_dtypes' value of every
// code and its code for a set of float32 inputs: every code's value, the
// midpoints between neighbours (ties), one float32 step either side of
// them, values out of range, infinities, NaNs and signed zeros.
const mlDTypesScript = `
import json, sys
import numpy as np, ml_dtypes as m
out = {}
for name in sys.argv[1:]:
    dt = np.dtype(getattr(m, name))
    bits = 8 if dt.name.startswith("float8") else 4
    codes = np.arange(1 << bits, dtype=np.uint8)
    values = codes.view(dt).astype(np.float32)
    fin = np.unique(values[np.isfinite(values)].astype(np.float64))
    mids = (fin[1:] + fin[:-1]) / 2
    xs = np.concatenate([fin, mids, fin * 4, fin / 4, [1e30, -1e30, np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    xs = np.concatenate([xs, np.nextafter(xs, np.float32(np.inf)), np.nextafter(xs, np.float32(-np.inf))])
    out[name] = {
        "values": [repr(float(v)) for v in values],
        "inputs": [int(b) for b in xs.view(np.uint32)],
        "codes": [int(c) for c in xs.astype(dt).view(np.uint8)],
    }
json.dump(out, sys.stdout)
`

// TestMinifloatsMatchMLDTypes checks decoding of every code and rounding
// of float32 values against ml_dtypes (the .venv make venv installs), the
// library XLA and the ONNX reference take these types from.
func TestMinifloatsMatchMLDTypes(t *testing.T) {
	types := []DType{Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0FNU, Float4E2M1FN, Int4, Uint4}
	args := []string{"-c", mlDTypesScript}
	for _, dt := range types {
		args = append(args, dt.String())
	}
	out, err := exec.Command("../.venv/bin/python", args...).Output()
	if err != nil {
		t.Fatalf("ml_dtypes (make venv installs it): %v", err)
	}
	var want map[string]struct {
		Values []string `json:"values"`
		Inputs []uint32 `json:"inputs"`
		Codes  []uint8  `json:"codes"`
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for _, dt := range types {
		w := want[dt.String()]
		t.Run(dt.String(), func(t *testing.T) {
			if len(w.Values) == 0 || len(w.Inputs) != len(w.Codes) {
				t.Fatalf("ml_dtypes gave %d values, %d inputs, %d codes", len(w.Values), len(w.Inputs), len(w.Codes))
			}
			x := New(dt, 1)
			for code, s := range w.Values {
				x.Data[0] = uint8(code)
				got := x.Float64At(0)
				w, err := strconv.ParseFloat(s, 64)
				if err != nil {
					t.Fatal(err)
				}
				if !(math.IsNaN(w) && math.IsNaN(got)) && math.Float64bits(w) != math.Float64bits(got) {
					t.Errorf("code %#x = %v, ml_dtypes %s", code, got, s)
				}
			}
			bad := 0
			for i, bits := range w.Inputs {
				v := float64(math.Float32frombits(bits))
				x.SetFloat64(0, v)
				if x.Data[0] != w.Codes[i] && bad < 10 {
					bad++
					t.Errorf("%v (%#08x) -> %#x, ml_dtypes %#x", v, bits, x.Data[0], w.Codes[i])
				}
			}
		})
	}
}
