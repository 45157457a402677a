package payload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

func TestDecodeJSONDataEveryDType(t *testing.T) {
	f32 := func(vs ...float32) []byte { return tensor.FromFloat32s(vs).Data }
	le := func(size int, vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			switch size {
			case 1:
				b = append(b, byte(v))
			case 2:
				b = binary.LittleEndian.AppendUint16(b, uint16(v))
			case 4:
				b = binary.LittleEndian.AppendUint32(b, uint32(v))
			case 8:
				b = binary.LittleEndian.AppendUint64(b, v)
			}
		}
		return b
	}
	neg := func(v int64) uint64 { return uint64(v) }
	tests := []struct {
		name  string
		dtype string
		shape []int64
		data  string
		want  []byte
	}{
		{"bool nested", "bool", []int64{2, 2}, `[[true, false], [false, true]]`, []byte{1, 0, 0, 1}},
		{"bool flat", "BOOL", []int64{2, 2}, `[true,false,false,true]`, []byte{1, 0, 0, 1}},
		{"int8 range", "int8", []int64{3}, `[-128, 0, 127]`, []byte{0x80, 0, 0x7f}},
		{"int16", "INT16", []int64{2}, `[-32768, 32767]`, le(2, neg(-32768), 32767)},
		{"int32", "int32", []int64{2}, `[-2147483648, 2147483647]`, le(4, neg(-2147483648), 2147483647)},
		{"int64 exact", "INT64", []int64{2}, `[-9223372036854775808, 9223372036854775807]`, le(8, neg(math.MinInt64), math.MaxInt64)},
		{"int64 written as float", "int64", []int64{2}, `[2.0, 1e3]`, le(8, 2, 1000)},
		{"uint8", "UINT8", []int64{2}, `[0, 255]`, []byte{0, 255}},
		{"uint16", "uint16", []int64{1}, `[65535]`, le(2, 65535)},
		{"uint32", "UINT32", []int64{1}, `[4294967295]`, le(4, 4294967295)},
		{"uint64 exact", "uint64", []int64{1}, `[18446744073709551615]`, le(8, math.MaxUint64)},
		{"float16", "FP16", []int64{2}, `[1.5, -2]`, le(2, 0x3e00, 0xc000)},
		{"bfloat16", "BF16", []int64{2}, `[1.5, 3]`, le(2, 0x3fc0, 0x4040)},
		{"float32 nested", "float32", []int64{2, 3}, `[[1, 2, 3], [4.5, -5e-1, 6]]`, f32(1, 2, 3, 4.5, -0.5, 6)},
		{"float32 flat", "FP32", []int64{2, 3}, `[1, 2, 3, 4.5, -5e-1, 6]`, f32(1, 2, 3, 4.5, -0.5, 6)},
		{"float32 rank 3", "float32", []int64{2, 1, 2}, `[[[1, 2]], [[3, 4]]]`, f32(1, 2, 3, 4)},
		{"float32 specials", "float32", []int64{3}, `["NaN", "Infinity", "-Infinity"]`, f32(float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)))},
		{"float32 rounds once", "float32", []int64{1}, `[0.1]`, f32(0.1)},
		{"float64", "FP64", []int64{1}, `[0.1]`, le(8, math.Float64bits(0.1))},
		{"float8 e4m3fn rounds", "FP8_E4M3FN", []int64{4}, `[0.3, -448, 449, "NaN"]`, []byte{0x2a, 0xfe, 0x7e, 0x7f}},
		{"float8 by xserve name", "float8_e5m2", []int64{2}, `["Infinity", 57344]`, []byte{0x7c, 0x7b}},
		{"float4", "FP4_E2M1FN", []int64{3}, `[6, -0.75, 6.9]`, []byte{0x7, 0xa, 0x7}},
		{"int4", "INT4", []int64{3}, `[-8, 7, -1]`, []byte{0x8, 0x7, 0xf}},
		{"uint4", "uint4", []int64{2}, `[15, 0]`, []byte{0xf, 0x0}},
		{"e8m0", "FP8_E8M0FNU", []int64{2}, `[1, 0.25]`, []byte{127, 125}},
		{"scalar bare", "float32", []int64{}, `3.5`, f32(3.5)},
		{"scalar in array", "float32", []int64{}, `[3.5]`, f32(3.5)},
		{"empty", "float32", []int64{0, 3}, `[]`, nil},
		{"whitespace", "int32", []int64{2, 1}, " [ [ 1 ] ,\n [ 2 ] ] ", le(4, 1, 2)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dt, err := parseDType("x", tc.dtype)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeJSONData("x", dt, tc.shape, []byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != dt || tensor.ShapeString(got.Shape) != tensor.ShapeString(tc.shape) {
				t.Fatalf("got %s, want %s%v", got, dt, tc.shape)
			}
			if dt == tensor.Float32 && strings.Contains(tc.data, "NaN") {
				if !math.IsNaN(got.Float64At(0)) || !math.IsInf(got.Float64At(1), 1) || !math.IsInf(got.Float64At(2), -1) {
					t.Fatalf("got %v", got.Float64s())
				}
				return
			}
			if !bytes.Equal(got.Data, tc.want) {
				t.Fatalf("data % x, want % x", got.Data, tc.want)
			}
		})
	}
	t.Run("bytes", func(t *testing.T) {
		got, err := decodeJSONData("s", tensor.String, []int64{2}, []byte(`["ab", "\u00e9\n"]`))
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Strings[0]) != "ab" || string(got.Strings[1]) != "é\n" {
			t.Fatalf("got %q", got.Strings)
		}
	})
}

func TestDecodeJSONDataErrors(t *testing.T) {
	tests := []struct {
		name  string
		dtype tensor.DType
		shape []int64
		data  string
		want  string
	}{
		{"nested short row", tensor.Float32, []int64{2, 2}, `[[1, 2], [3]]`, `at [1]: 1 element; dim 1 of shape [2 2] is 2`},
		{"nested long row", tensor.Float32, []int64{2, 2}, `[[1, 2], [3, 4, 5]]`, `at [1]: more than 2 elements`},
		{"nested too few rows", tensor.Float32, []int64{3, 1}, `[[1], [2]]`, `at the top level: 2 elements; dim 0 of shape [3 1] is 3`},
		{"nested too deep", tensor.Float32, []int64{2}, `[[1], [2]]`, `nested deeper than shape [2]`},
		{"nested mixed", tensor.Float32, []int64{2, 2}, `[[1, 2], 3]`, `at [1]: want an array of 2`},
		{"flat short", tensor.Float32, []int64{2, 3}, `[1, 2, 3, 4, 5]`, `has 5 elements; shape [2 3] wants 6`},
		{"flat long", tensor.Float32, []int64{2}, `[1, 2, 3]`, `has more than 2 elements`},
		{"not an array", tensor.Float32, []int64{2}, `{"a": 1}`, `want an array for shape [2]`},
		{"int8 overflow", tensor.Int8, []int64{1}, `[128]`, `element 0 is "128", want an integer in [-128, 127] (int8)`},
		{"uint8 negative", tensor.Uint8, []int64{1}, `[-1]`, `want an integer in [0, 255] (uint8)`},
		{"int fraction", tensor.Int64, []int64{1}, `[2.5]`, `want an integer (int64)`},
		{"bool as number", tensor.Bool, []int64{1}, `[1]`, `want true or false`},
		{"float32 1e400", tensor.Float32, []int64{2}, `[1, 1e400]`, `element 1 is "1e400", want a number within the range of float32`},
		{"float32 beyond float32", tensor.Float32, []int64{1}, `[-1e39]`, `element 0 is "-1e39", want a number within the range of float32`},
		{"float64 1e400", tensor.Float64, []int64{1}, `[1e400]`, `want a number within the range of float64 (write "Infinity"`},
		{"float16 beyond float16", tensor.Float16, []int64{1}, `[70000]`, `want a number within the range of float16`},
		{"bfloat16 beyond bfloat16", tensor.BFloat16, []int64{1}, `[1e39]`, `want a number within the range of bfloat16`},
		{"float8 beyond float8", tensor.Float8E4M3FN, []int64{1}, `[465]`, `want a number within the range of float8_e4m3fn`},
		{"float8 e5m2 beyond", tensor.Float8E5M2, []int64{1}, `[-61440]`, `want a number within the range of float8_e5m2`},
		{"float4 beyond float4", tensor.Float4E2M1FN, []int64{1}, `[7]`, `want a number within the range of float4_e2m1fn`},
		{"e8m0 zero", tensor.Float8E8M0FNU, []int64{1}, `[0]`, `want a number within the range of float8_e8m0fnu`},
		{"int4 overflow", tensor.Int4, []int64{1}, `[8]`, `want an integer in [-8, 7] (int4)`},
		{"uint4 negative", tensor.Uint4, []int64{1}, `[-1]`, `want an integer in [0, 15] (uint4)`},
		{"float as text", tensor.Float32, []int64{1}, `["abc"]`, `want float32 (a number, "NaN", "Infinity" or "-Infinity")`},
		{"float null", tensor.Float32, []int64{2}, `[1, null]`, `element 1 is "null", want a number`},
		{"not JSON number", tensor.Float32, []int64{1}, `[0x10]`, `want a number`},
		{"trailing", tensor.Float32, []int64{2}, `[1, 2] 3`, `unexpected "3" after the data`},
		{"missing comma", tensor.Float32, []int64{2}, `[1 2]`, `want ',' or ']' after element 0`},
		{"complex", tensor.Complex64, []int64{1}, `[1]`, `complex64 data cannot be given in JSON`},
		{"shape bigger than data", tensor.Float32, []int64{1 << 27}, `[1]`, `shape [134217728] needs 134217728 elements, the data is only 3 bytes of JSON`},
		{"empty", tensor.Float32, []int64{1}, ``, `shape [1] needs 1 element,`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeJSONData("x", tc.dtype, tc.shape, []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("err %v does not wrap ErrBadRequest", err)
			}
			if !strings.Contains(err.Error(), `input "x"`) {
				t.Errorf("err %v does not name the input", err)
			}
		})
	}
}

func TestCheckShape(t *testing.T) {
	if _, err := checkShape("x", nil, 10); err == nil || !strings.Contains(err.Error(), "no shape") {
		t.Errorf("nil shape: %v", err)
	}
	if _, err := checkShape("x", []int64{2, -1}, 10); err == nil || !strings.Contains(err.Error(), "dim 1 is -1") {
		t.Errorf("negative dim: %v", err)
	}
	_, err := checkShape("x", []int64{4, 4}, 10)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "limit of 10") {
		t.Errorf("over the limit: %v", err)
	}
	_, err = checkShape("x", []int64{math.MaxInt64, 4}, 10)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("overflow: %v", err)
	}
	if n, err := checkShape("x", []int64{}, 10); err != nil || n != 1 {
		t.Errorf("scalar: %d, %v", n, err)
	}
}

func TestAppendJSONData(t *testing.T) {
	mk := func(dt tensor.DType, vs ...float64) *tensor.Tensor {
		x := tensor.New(dt, int64(len(vs)))
		for i, v := range vs {
			x.SetFloat64(int64(i), v)
		}
		return x
	}
	u64 := tensor.New(tensor.Uint64, 1)
	binary.LittleEndian.PutUint64(u64.Data, math.MaxUint64)
	i64 := tensor.FromInt64s([]int64{math.MinInt64, math.MaxInt64})
	tests := []struct {
		t    *tensor.Tensor
		want string
	}{
		{mk(tensor.Bool, 1, 0), `[true,false]`},
		{mk(tensor.Int8, -128, 127), `[-128,127]`},
		{mk(tensor.Uint8, 255), `[255]`},
		{mk(tensor.Int16, -3), `[-3]`},
		{mk(tensor.Uint16, 65535), `[65535]`},
		{mk(tensor.Int32, -7), `[-7]`},
		{mk(tensor.Uint32, 4294967295), `[4294967295]`},
		{i64, `[-9223372036854775808,9223372036854775807]`},
		{u64, `[18446744073709551615]`},
		{mk(tensor.Float16, 1.5, -0.25), `[1.5,-0.25]`},
		{mk(tensor.BFloat16, 3), `[3]`},
		{mk(tensor.Float32, 0.1, 1e-8, math.NaN(), math.Inf(1), math.Inf(-1)), `[0.1,1e-08,"NaN","Infinity","-Infinity"]`},
		{mk(tensor.Float64, 0.1), `[0.1]`},
		{&tensor.Tensor{DType: tensor.String, Shape: []int64{2}, Strings: [][]byte{[]byte("a\"b"), []byte("é")}}, `["a\"b","é"]`},
		{tensor.New(tensor.Float32, 0, 3), `[]`},
	}
	for _, tc := range tests {
		got, err := appendJSONData(nil, "y", tc.t)
		if err != nil {
			t.Errorf("%s: %v", tc.t, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s: got %s, want %s", tc.t, got, tc.want)
		}
		// What the server writes, it reads back.
		if tc.t.DType != tensor.String {
			back, err := decodeJSONData("y", tc.t.DType, tc.t.Shape, got)
			if err != nil {
				t.Errorf("%s: reading back %s: %v", tc.t, got, err)
			} else if !bytes.Equal(back.Data, tc.t.Data) {
				t.Errorf("%s: read back % x, want % x", tc.t, back.Data, tc.t.Data)
			}
		}
	}
	if _, err := appendJSONData(nil, "z", tensor.New(tensor.Complex64, 1)); err == nil || !strings.Contains(err.Error(), "binary_data") {
		t.Errorf("complex output: %v", err)
	}
}

func TestBinaryTensor(t *testing.T) {
	x, err := binaryTensor("x", tensor.Float32, []int64{2}, tensor.FromFloat32s([]float32{1, 2}).Data)
	if err != nil || x.Float64At(1) != 2 {
		t.Fatalf("%v %v", x, err)
	}
	if _, err := binaryTensor("x", tensor.Float32, []int64{3}, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "binary_data_size is 8 bytes, float32[3] needs 12") {
		t.Errorf("wrong size: %v", err)
	}
	s := &tensor.Tensor{DType: tensor.String, Shape: []int64{2}, Strings: [][]byte{[]byte("ab"), {}}}
	raw := binaryBytes(s)
	if !bytes.Equal(raw, []byte{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0}) {
		t.Fatalf("BYTES serialised as % x", raw)
	}
	back, err := binaryTensor("s", tensor.String, []int64{2}, raw)
	if err != nil || string(back.Strings[0]) != "ab" || len(back.Strings[1]) != 0 {
		t.Fatalf("%v %v", back, err)
	}
	for _, bad := range [][]byte{raw[:3], raw[:5], raw[:6], append(append([]byte{}, raw...), 0, 0, 0, 0)} {
		if _, err := binaryTensor("s", tensor.String, []int64{2}, bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("BYTES % x: err %v", bad, err)
		}
	}
}

func TestSplitBody(t *testing.T) {
	body := []byte(`{"a":1}XYZ`)
	h, rest, err := splitBody(body, "7")
	if err != nil || string(h) != `{"a":1}` || string(rest) != "XYZ" {
		t.Fatalf("%q %q %v", h, rest, err)
	}
	for _, v := range []string{"x", "-1", "11"} {
		if _, _, err := splitBody(body, v); !errors.Is(err, ErrBadRequest) {
			t.Errorf("header length %q: %v", v, err)
		}
	}
}

func TestAcceptEncoding(t *testing.T) {
	for header, want := range map[string]string{
		"":                          "",
		"gzip":                      "gzip",
		"gzip, zstd":                "zstd",
		"zstd;q=0, gzip":            "gzip",
		"br":                        "",
		"deflate":                   "deflate",
		"*":                         "gzip",
		"identity":                  "",
		"gzip;q=0.5, deflate;q=1.0": "gzip",
		"GZIP;Q=0":                  "",
	} {
		if got := AcceptEncoding(header); got != want {
			t.Errorf("AcceptEncoding(%q) = %q, want %q", header, got, want)
		}
	}
}

func TestFloatFormattingIsShortest(t *testing.T) {
	x := tensor.FromFloat32s([]float32{float32(math.Pi), 1.0 / 3})
	b, _ := appendJSONData(nil, "x", x)
	if string(b) != "[3.1415927,0.33333334]" {
		t.Errorf("got %s", b)
	}
}

// TestClientRoundTrip encodes a request as a client does, decodes it as a
// server does, encodes the answer and decodes it as the client, in JSON and
// in binary.
func TestClientRoundTrip(t *testing.T) {
	x := tensor.FromFloat32s([]float32{1.5, -2, float32(math.Inf(1)), 0.25, 3, 4})
	x.Shape = []int64{2, 3}
	ids := tensor.New(tensor.Int64, 2)
	ids.SetInt64(0, 7)
	ids.SetInt64(1, -9)
	inputs := []serving.NamedTensor{{Name: "x", Tensor: x}, {Name: "ids", Tensor: ids}}
	for _, binary := range []bool{false, true} {
		body, hl, err := EncodeV1Request("", 2, "r-1", inputs, binary)
		if err != nil {
			t.Fatal(err)
		}
		if binary != (hl >= 0) {
			t.Fatalf("binary %v: header length %d", binary, hl)
		}
		hdr := ""
		if hl >= 0 {
			hdr = strconv.Itoa(hl)
		}
		if _, err := DecodeV1(body, hdr, "", 1<<20); err == nil || !strings.Contains(err.Error(), `names no "model"`) {
			t.Errorf("no model anywhere: %v", err)
		}
		req, err := DecodeV1(body, hdr, "m", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if req.Model != "m" || req.Version != 2 || req.Infer.ID != "r-1" || len(req.Infer.Inputs) != 2 {
			t.Fatalf("decoded %+v", req)
		}
		resp := &serving.InferResponse{ID: "r-1", ModelName: "m", ModelVersion: 2, Outputs: inputs}
		enc, err := EncodeV1(req, resp)
		if err != nil {
			t.Fatal(err)
		}
		hdr = ""
		if enc.HeaderLen >= 0 {
			hdr = strconv.Itoa(enc.HeaderLen)
		}
		if binary != (enc.HeaderLen >= 0) {
			t.Errorf("binary %v: response header length %d", binary, enc.HeaderLen)
		}
		got, err := DecodeV1Response(enc.Body, hdr, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != "r-1" || got.ModelName != "m" || got.ModelVersion != 2 || len(got.Outputs) != 2 || got.Outputs[0].Name != "x" || got.Outputs[1].Name != "ids" {
			t.Fatalf("response %+v", got)
		}
		if !bytes.Equal(got.Outputs[0].Tensor.Data, x.Data) || !bytes.Equal(got.Outputs[1].Tensor.Data, ids.Data) || tensor.ShapeString(got.Outputs[0].Tensor.Shape) != "[2,3]" {
			t.Errorf("binary %v: outputs %v %v", binary, got.Outputs[0].Tensor.Float64s(), got.Outputs[1].Tensor.Int64s())
		}
	}
	if _, err := DecodeV1([]byte(`{"model": "a", "inputs": {}}`), "", "b", 10); err == nil || !strings.Contains(err.Error(), `names model "a" but was sent to model "b"`) {
		t.Errorf("model mismatch: %v", err)
	}
}
