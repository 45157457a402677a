package payload

import (
	"strings"

	"github.com/xserve/xserve/tensor"
)

// oipNames are the Open Inference Protocol's datatype names, and xserve's
// for the types the protocol has none for (docs/HTTP.md): the 8- and 4-bit
// floats as FP8_/FP4_ and ml_dtypes' format name, the 4-bit integers as
// INT4 and UINT4, all one element a byte in binary data (ml_dtypes' layout).
var oipNames = map[tensor.DType]string{
	tensor.Bool:     "BOOL",
	tensor.Uint8:    "UINT8",
	tensor.Uint16:   "UINT16",
	tensor.Uint32:   "UINT32",
	tensor.Uint64:   "UINT64",
	tensor.Int8:     "INT8",
	tensor.Int16:    "INT16",
	tensor.Int32:    "INT32",
	tensor.Int64:    "INT64",
	tensor.Float16:  "FP16",
	tensor.BFloat16: "BF16",
	tensor.Float32:  "FP32",
	tensor.Float64:  "FP64",
	tensor.String:   "BYTES",

	tensor.Float8E4M3FN:   "FP8_E4M3FN",
	tensor.Float8E4M3FNUZ: "FP8_E4M3FNUZ",
	tensor.Float8E5M2:     "FP8_E5M2",
	tensor.Float8E5M2FNUZ: "FP8_E5M2FNUZ",
	tensor.Float8E8M0FNU:  "FP8_E8M0FNU",
	tensor.Float4E2M1FN:   "FP4_E2M1FN",
	tensor.Int4:           "INT4",
	tensor.Uint4:          "UINT4",
}

// OIPDatatype returns dt's Open Inference Protocol name; types the protocol
// has no name for (complex) get their upper-cased xserve name.
func OIPDatatype(dt tensor.DType) string {
	if s, ok := oipNames[dt]; ok {
		return s
	}
	return strings.ToUpper(dt.String())
}

// parseDType reads a dtype named as xserve (PyTorch) or the Open Inference
// Protocol names it.
func parseDType(input, s string) (tensor.DType, error) {
	if s == "" {
		return tensor.Invalid, badRequest("input %q: no dtype (want e.g. float32 / FP32)", input)
	}
	for d, name := range oipNames {
		if strings.EqualFold(s, name) {
			return d, nil
		}
	}
	dt, err := tensor.ParseDType(s)
	if err != nil || dt == tensor.Invalid {
		return tensor.Invalid, badRequest("input %q: unknown dtype %q (want bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64, float8_e4m3fn, ... or the OIP names BOOL, INT64, FP32, BYTES, FP8_E4M3FN, ...)", input, s)
	}
	return dt, nil
}
