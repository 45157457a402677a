package payload

import (
	"errors"
	"strings"
	"testing"
)

// TestReadRequestErrors: malformed request JSON gets an ErrBadRequest that
// says what and where, in both formats, wherever in the request it is:
// syntax errors with their byte offset, wrong types with the field, unknown
// fields of /v1/infer, and a truncated body at any byte.
func TestReadRequestErrors(t *testing.T) {
	tests := []struct {
		name, format, body, want string
	}{
		{"syntax offset", "v2", `{"inputs": [}`, "invalid JSON in the request at byte 13: invalid character '}' looking for beginning of value"},
		{"bad literal in data", "v2", `{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": _1, 2]}]}`, "at byte 69: invalid character '_' looking for beginning of value"},
		{"scalar data truncated", "v2", `{"inputs": [{"name": "x", "shape": [], "datatype": "BOOL", "data": tru`, "unexpected end of data"},
		{"top level array", "v2", `[1]`, "invalid JSON in the request: the request is a JSON array, want an object"},
		{"inputs not an array", "v2", `{"inputs": {"x": 1}}`, "inputs is a JSON object, want an array"},
		{"input not an object", "v2", `{"inputs": [1]}`, "inputs is a JSON number, want an object"},
		{"name a number", "v2", `{"inputs": [{"name": 3}]}`, "inputs.name is a JSON number, want a string"},
		{"shape of strings", "v2", `{"inputs": [{"name": "x", "shape": ["a"], "datatype": "FP32", "data": [1]}]}`, "inputs.shape is a JSON string, want an integer"},
		{"fractional dim", "v2", `{"inputs": [{"name": "x", "shape": [1.5], "datatype": "FP32", "data": [1]}]}`, "inputs.shape is a JSON number 1.5, want an integer"},
		{"bad number", "v2", `{"id": "a", "x": -}`, "invalid number"},
		{"control character in string", "v2", "{\"id\": \"a\x01\"}", "invalid character '\\x01' in string literal"},
		{"bad escape", "v2", `{"id": "a\q"}`, "invalid string"},
		{"missing colon", "v2", `{"id" "a"}`, "invalid character '\"' after object key"},
		{"trailing data", "v2", `{"inputs": []} x`, "invalid JSON: the request is followed by more data at byte 16"},
		{"unknown field", "v1", `{"model": "m", "input": {}}`, `invalid JSON in the request: unknown field "input"`},
		{"unknown input field", "v1", `{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [1], "dat": [1]}}}`, `invalid JSON in input "x": unknown field "dat"`},
		{"unknown output field", "v1", `{"model": "m", "outputs": [{"nam": "y"}], "inputs": {}}`, `invalid JSON in an output: unknown field "nam"`},
		{"binary_data not bool", "v1", `{"model": "m", "outputs": [{"name": "y", "binary_data": 1}], "inputs": {}}`, "invalid JSON in an output: binary_data is a JSON number, want true or false"},
		{"inputs an array", "v1", `{"model": "m", "inputs": [1]}`, `"inputs" must be an object`},
		{"syntax inside a mistyped value", "v1", `{"model": [1 2]}`, "at byte 14: invalid character '2' after array element"},
		{"model a number", "v1", `{"model": 1}`, "invalid JSON in the request: model is a JSON number, want a string"},
		{"data syntax error", "v1", `{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [2], "data": [1, 2}}}`, "invalid character '}' after array element"},
		{"nested data element", "v1", `{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [2], "data": [1, x]}}}`, `input "x": data: element 1 is "x", want a number`},
		{"case-insensitive keys", "v1", `{"Model": "m", "Inputs": {"x": {"DType": "float32", "Shape": [1], "Data": [1]}}, "Outputs": ["y"], "EXTRA": 1}`, `unknown field "EXTRA"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.format == "v1" {
				_, err = DecodeV1([]byte(tc.body), "", "", 1<<10)
			} else {
				_, err = DecodeOIP("m", 0, []byte(tc.body), "", 1<<10)
			}
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrBadRequest containing %q", err, tc.want)
			}
		})
	}
	// Every truncation of valid requests is refused cleanly.
	for _, body := range []string{
		`{"id": "7", "parameters": {"priority": 1, "x": [true, null, {"a": "\u00e9"}]}, "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2.5], [-3e-2, "NaN"]]}], "outputs": [{"name": "y", "parameters": {"binary_data": true}}]}`,
		`{"model": "m", "version": 2, "id": "a", "inputs": {"x": {"dtype": "bytes", "shape": [1], "data": ["h\"i"]}}, "outputs": ["y", {"name": "z", "binary_data": false}]}`,
	} {
		v1 := strings.HasPrefix(body, `{"model"`)
		for n := range len(body) {
			var err error
			if v1 {
				_, err = DecodeV1([]byte(body[:n]), "", "", 1<<10)
			} else {
				_, err = DecodeOIP("m", 0, []byte(body[:n]), "", 1<<10)
			}
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("%.30q cut at %d: got %v, want ErrBadRequest", body, n, err)
			}
		}
		var err error
		if v1 {
			_, err = DecodeV1([]byte(body), "", "", 1<<10)
		} else {
			_, err = DecodeOIP("m", 0, []byte(body), "", 1<<10)
		}
		if err != nil {
			t.Fatalf("%.30q: %v", body, err)
		}
	}
}
