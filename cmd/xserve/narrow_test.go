package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/internal/onnxtestdata"
	"github.com/xserve/xserve/tensor"
)

// TestServeNarrowDTypes serves ONNX's own Cast cases to and from float8,
// float4 and int4 (the onnx wheel's backend test data: models and the
// ONNX reference's outputs) with `xserve serve` and sends their inputs over
// HTTP with the Open Inference Protocol, as JSON numbers and as binary
// data: the 8- and 4-bit types travel under the datatype names docs/HTTP.md
// gives them (FP8_E4M3FN, FP4_E2M1FN, INT4, ...), one element a byte in
// binary data, and come back equal to the reference.
func TestServeNarrowDTypes(t *testing.T) {
	cases := []struct{ model, dir, in, out string }{
		{"to_f8", "node/test_cast_FLOAT_to_FLOAT8E4M3FN", "FP32", "FP8_E4M3FN"},
		{"from_f8", "node/test_cast_FLOAT8E4M3FN_to_FLOAT", "FP8_E4M3FN", "FP32"},
		{"from_e5m2", "node/test_cast_FLOAT8E5M2_to_FLOAT16", "FP8_E5M2", "FP16"},
		{"to_fnuz", "node/test_cast_FLOAT_to_FLOAT8E4M3FNUZ", "FP32", "FP8_E4M3FNUZ"},
		{"to_f4", "node/test_cast_FLOAT_to_FLOAT4E2M1", "FP32", "FP4_E2M1FN"},
		{"from_f4", "node/test_cast_FLOAT4E2M1_to_FLOAT", "FP4_E2M1FN", "FP32"},
		{"to_i4", "node/test_cast_FLOAT_to_INT4", "FP32", "INT4"},
		{"from_u4", "node/test_cast_UINT4_to_FLOAT", "UINT4", "FP32"},
	}
	repo := t.TempDir()
	for _, c := range cases {
		dir, err := onnxtestdata.Case(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		model, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(repo, c.model, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, c.model, "1", "model.onnx"), model, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startXserve(t, repo, t.TempDir())
	defer p.stop(t)
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			dir, _ := onnxtestdata.Case(c.dir)
			in := readCaseTensor(t, dir, "input_0.pb")
			want := readCaseTensor(t, dir, "output_0.pb")
			url := p.url + "/v2/models/" + c.model + "/infer"

			body := fmt.Sprintf(`{"inputs": [{"name": "input", "shape": %s, "datatype": %q, "data": %s}]}`,
				shapeJSON(in.Shape), c.in, jsonNumbers(in))
			r := call(t, http.MethodPost, url, []byte(body), "Content-Type", "application/json")
			if r.code != http.StatusOK {
				t.Fatalf("JSON request: %s", r)
			}
			var resp struct {
				Outputs []struct {
					Datatype string
					Shape    []int64
					Data     []any
				}
			}
			if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Outputs) != 1 {
				t.Fatalf("JSON answer %s: %v", r, err)
			}
			o := resp.Outputs[0]
			if o.Datatype != c.out || tensor.ShapeString(o.Shape) != tensor.ShapeString(want.Shape) {
				t.Fatalf("JSON answer is %s%v, want %s%v", o.Datatype, o.Shape, c.out, want.Shape)
			}
			for i, v := range o.Data {
				checkNarrowValue(t, i, jsonValue(t, v), want.Float64At(int64(i)))
			}

			header := fmt.Sprintf(`{"inputs": [{"name": "input", "shape": %s, "datatype": %q, "parameters": {"binary_data_size": %d}}], "outputs": [{"name": "output", "parameters": {"binary_data": true}}]}`,
				shapeJSON(in.Shape), c.in, len(in.Data))
			r = call(t, http.MethodPost, url, append([]byte(header), in.Data...),
				"Content-Type", "application/octet-stream", "Inference-Header-Content-Length", strconv.Itoa(len(header)))
			if r.code != http.StatusOK {
				t.Fatalf("binary request: %s", r)
			}
			n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
			if err != nil || n > len(r.body) {
				t.Fatalf("binary answer %s", r)
			}
			if !strings.Contains(string(r.body[:n]), `"datatype":"`+c.out+`"`) {
				t.Errorf("binary answer header %s, want datatype %s", r.body[:n], c.out)
			}
			got, err := tensor.FromBytes(want.DType, want.Shape, r.body[n:])
			if err != nil {
				t.Fatalf("binary answer: %v (one byte an element for %s)", err, c.out)
			}
			for i := range want.NumElements() {
				checkNarrowValue(t, int(i), got.Float64At(i), want.Float64At(i))
			}
		})
	}
}

func readCaseTensor(t *testing.T, dir, file string) *tensor.Tensor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "test_data_set_0", file))
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := onnx.DecodeTensor(b)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// jsonNumbers writes t's values as a JSON array, non-finite ones as the
// protocol's "NaN", "Infinity" and "-Infinity".
func jsonNumbers(t *tensor.Tensor) string {
	parts := make([]string, t.NumElements())
	for i := range parts {
		v := t.Float64At(int64(i))
		switch {
		case math.IsNaN(v):
			parts[i] = `"NaN"`
		case math.IsInf(v, 1):
			parts[i] = `"Infinity"`
		case math.IsInf(v, -1):
			parts[i] = `"-Infinity"`
		default:
			parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// jsonValue reads one element of a JSON answer: a number or a non-finite
// string.
func jsonValue(t *testing.T, v any) float64 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return x
	case string:
		switch x {
		case "NaN":
			return math.NaN()
		case "Infinity":
			return math.Inf(1)
		case "-Infinity":
			return math.Inf(-1)
		}
	}
	t.Fatalf("element %v is not a number", v)
	return 0
}

func checkNarrowValue(t *testing.T, i int, got, want float64) {
	t.Helper()
	if got != want && !(math.IsNaN(got) && math.IsNaN(want)) || math.Signbit(got) != math.Signbit(want) && !math.IsNaN(want) {
		t.Errorf("element %d: got %v, want the ONNX reference's %v", i, got, want)
	}
}
