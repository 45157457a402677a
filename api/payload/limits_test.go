package payload

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// deepBody is a request of about size bytes whose value at the place
// where marks "@" is nested depth levels deep: open repeated, then close.
func deepBody(tmpl, open, close string, depth int) []byte {
	i := strings.IndexByte(tmpl, '@')
	var b bytes.Buffer
	b.Grow(len(tmpl) + depth*(len(open)+len(close)))
	b.WriteString(tmpl[:i])
	for range depth {
		b.WriteString(open)
	}
	b.WriteString("1")
	for range depth {
		b.WriteString(close)
	}
	b.WriteString(tmpl[i+1:])
	return b.Bytes()
}

// TestDeepBodiesAreRefused: a body nested two million levels deep (4 MB,
// under the body limit) wherever the reader walks a value it does not
// keep (parameters, the id before its type is checked, an output's
// parameters, an unknown field, a tensor's data or shape) is a 400 naming
// the limit, decoded with a bounded stack and bounded allocations, in both
// formats.
func TestDeepBodiesAreRefused(t *testing.T) {
	const depth = 2_000_000
	tests := []struct {
		name, format, tmpl, open, close, limit string
	}{
		{"v2 parameters", "v2", `{"parameters": {"p": @}, "inputs": []}`, "[", "]", "MaxJSONDepth"},
		{"v2 id", "v2", `{"id": @, "inputs": []}`, "[", "]", "MaxJSONDepth"},
		{"v2 input parameters", "v2", `{"inputs": [{"name": "x", "parameters": {"a": @}}]}`, `{"a":`, "}", "MaxJSONDepth"},
		{"v2 output parameters", "v2", `{"inputs": [], "outputs": [{"name": "y", "parameters": {"a": @}}]}`, "[", "]", "MaxJSONDepth"},
		{"v2 unknown field", "v2", `{"zz": @, "inputs": []}`, "[", "]", "MaxJSONDepth"},
		{"v2 data", "v2", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": @}]}`, "[", "]", ""},
		{"v1 parameters", "v1", `{"model": "m", "parameters": {"p": @}, "inputs": {}}`, "[", "]", "MaxJSONDepth"},
		{"v1 version", "v1", `{"model": "m", "version": @, "inputs": {}}`, "[", "]", "MaxJSONDepth"},
		{"v1 data", "v1", `{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [1], "data": @}}}`, "[", "]", ""},
		{"v1 shape", "v1", `{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [@], "data": 1}}}`, "1,", "", "MaxRank"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := deepBody(tc.tmpl, tc.open, tc.close, depth)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var err error
			if tc.format == "v1" {
				_, err = DecodeV1(body, "", "", 1<<20)
			} else {
				_, err = DecodeOIP("m", 0, body, "", 1<<20)
			}
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.limit) {
				t.Fatalf("got %v, want ErrBadRequest naming %q", err, tc.limit)
			}
			if len(err.Error()) > 512 {
				t.Errorf("the error is %d bytes long: %.200s", len(err.Error()), err)
			}
			// The body is 2-8 MB; the reader may copy it once, no more.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(2*len(body)) {
				t.Errorf("decoding a %d-byte body allocated %d bytes", len(body), alloc)
			}
		})
	}
}

// TestDepthLimitIsExact: MaxJSONDepth levels decode, one more is refused.
func TestDepthLimitIsExact(t *testing.T) {
	// The top-level object is one level, "parameters" another.
	const in = `"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]`
	ok := deepBody(`{"parameters": {"p": @}, `+in+`}`, "[", "]", MaxJSONDepth-2)
	if _, err := DecodeOIP("m", 0, ok, "", 1); err != nil {
		t.Errorf("%d levels: %v", MaxJSONDepth, err)
	}
	deep := deepBody(`{"parameters": {"p": @}, `+in+`}`, "[", "]", MaxJSONDepth-1)
	if _, err := DecodeOIP("m", 0, deep, "", 1); err == nil || !strings.Contains(err.Error(), "nested deeper than the limit of 128 levels (MaxJSONDepth)") {
		t.Errorf("%d levels: %v", MaxJSONDepth+1, err)
	}
	shape := `{"inputs": [{"name": "x", "shape": [` + strings.Repeat("1,", MaxRank) + `1], "datatype": "FP32", "data": [1]}]}`
	if _, err := DecodeOIP("m", 0, []byte(shape), "", 1); err == nil || !strings.Contains(err.Error(), "more than 64 dims, the limit (MaxRank)") {
		t.Errorf("rank %d: %v", MaxRank+1, err)
	}
}
