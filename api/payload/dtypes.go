package payload

import (
	"strings"

	"github.com/xserve/xserve/tensor"
)

// oipNames are the Open Inference Protocol's datatype names.
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
	dt, err := tensor.ParseDType(s)
	if err != nil || dt == tensor.Invalid {
		return tensor.Invalid, badRequest("input %q: unknown dtype %q (want bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64 or the OIP names BOOL, INT64, FP32, BYTES, ...)", input, s)
	}
	return dt, nil
}
