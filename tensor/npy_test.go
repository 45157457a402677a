package tensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// npyDTypes are the dtypes .npy files can hold (the last nine under their
// ml_dtypes names).
var npyDTypes = []DType{Bool, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64,
	Float16, Float32, Float64, Complex64, Complex128,
	BFloat16, Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0FNU, Float4E2M1FN, Int4, Uint4}

// npyPatterned returns a tensor whose bytes follow a fixed pattern (0/1 for bool).
func npyPatterned(dt DType, shape ...int64) *Tensor {
	t := New(dt, shape...)
	for i := range t.Data {
		t.Data[i] = byte(i*37 + 11)
		if dt == Bool {
			t.Data[i] &= 1
		}
	}
	return t
}

func TestNpyRoundTrip(t *testing.T) {
	for _, dt := range npyDTypes {
		for _, shape := range [][]int64{{}, {5}, {2, 3}, {0, 4}, {1, 2, 1, 3}} {
			in := npyPatterned(dt, shape...)
			var buf bytes.Buffer
			if err := WriteNpy(&buf, in); err != nil {
				t.Fatalf("%v: %v", in, err)
			}
			if hlen := buf.Len() - len(in.Data); hlen%64 != 0 {
				t.Errorf("%v: data offset %d is not 64-aligned", in, hlen)
			}
			out, err := ReadNpy(&buf)
			if err != nil {
				t.Fatalf("%v: %v", in, err)
			}
			if out.DType != dt || !slices.Equal(out.Shape, in.Shape) || !bytes.Equal(out.Data, in.Data) || out.Shape == nil {
				t.Errorf("round trip of %v gave %v", in, out)
			}
			if buf.Len() != 0 {
				t.Errorf("%v: %d bytes left unread", in, buf.Len())
			}
		}
	}
}

func TestNpyHeaderMatchesNumPy(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteNpy(&buf, New(Float32, 2, 3)); err != nil {
		t.Fatal(err)
	}
	// As written by numpy.save(f, numpy.zeros((2, 3), "<f4")).
	dict := "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
	want := "\x93NUMPY\x01\x00\x76\x00" + dict + strings.Repeat(" ", 118-len(dict)-1) + "\n"
	if got := buf.String()[:128]; got != want {
		t.Errorf("header\n%q\nwant\n%q", got, want)
	}
	buf.Reset()
	if err := WriteNpy(&buf, New(Uint8, 7)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }") {
		t.Errorf("1-d uint8 header = %q", buf.String())
	}
}

func TestNpyWriteErrors(t *testing.T) {
	tests := []struct {
		t    *Tensor
		want string
	}{
		{&Tensor{DType: String, Shape: []int64{2}, Strings: [][]byte{[]byte("x")}}, "has 1 strings"},
		{&Tensor{DType: Float32, Shape: []int64{2}, Data: make([]byte, 4)}, "has 4 data bytes"},
		{&Tensor{DType: Float32, Shape: []int64{-1}}, "bad shape"},
		{&Tensor{DType: Invalid}, "no NumPy equivalent"},
	}
	for _, tc := range tests {
		err := WriteNpy(&bytes.Buffer{}, tc.t)
		if err == nil || !strings.HasPrefix(err.Error(), "tensor: npy: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WriteNpy(%v) error = %v, want %q", tc.t, err, tc.want)
		}
	}
}

// npyBytes builds a .npy stream of the given version with a header dict
// (padded to 64 bytes) followed by data.
func npyBytes(major byte, dict string, data []byte) []byte {
	lenSize := 2
	if major > 1 {
		lenSize = 4
	}
	prefix := 8 + lenSize
	hlen := (prefix+len(dict)+1+63)/64*64 - prefix
	b := []byte(npyMagic)
	b = append(b, major, 0)
	if lenSize == 2 {
		b = binary.LittleEndian.AppendUint16(b, uint16(hlen))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(hlen))
	}
	b = append(b, dict+strings.Repeat(" ", hlen-len(dict)-1)+"\n"...)
	return append(b, data...)
}

func npyF32s(vals ...float32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestNpyReadVariants(t *testing.T) {
	be := func(vals ...uint32) []byte {
		var b []byte
		for _, v := range vals {
			b = binary.BigEndian.AppendUint32(b, v)
		}
		return b
	}
	tests := []struct {
		name  string
		in    []byte
		dt    DType
		shape []int64
		data  []byte
	}{
		{"v2", npyBytes(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", npyF32s(1, 2)), Float32, []int64{2}, npyF32s(1, 2)},
		{"v3", npyBytes(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", npyF32s(1, 2)), Float32, []int64{2}, npyF32s(1, 2)},
		{"big-endian f4", npyBytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be(math.Float32bits(1.5), math.Float32bits(-2))), Float32, []int64{2}, npyF32s(1.5, -2)},
		{"big-endian i2", npyBytes(1, "{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }", []byte{0x01, 0x02, 0xFF, 0xFE}), Int16, []int64{2}, []byte{0x02, 0x01, 0xFE, 0xFF}},
		{"big-endian c8", npyBytes(1, "{'descr': '>c8', 'fortran_order': False, 'shape': (1,), }", be(math.Float32bits(1), math.Float32bits(2))), Complex64, []int64{1}, npyF32s(1, 2)},
		{"big-endian u1", npyBytes(1, "{'descr': '>u1', 'fortran_order': False, 'shape': (2,), }", []byte{1, 2}), Uint8, []int64{2}, []byte{1, 2}},
		{"native", npyBytes(1, "{'descr': '=i4', 'fortran_order': False, 'shape': (), }", []byte{7, 0, 0, 0}), Int32, []int64{}, []byte{7, 0, 0, 0}},
		{"|i1", npyBytes(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }", []byte{0xFF}), Int8, []int64{1}, []byte{0xFF}},
		{"<u1", npyBytes(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (1,), }", []byte{9}), Uint8, []int64{1}, []byte{9}},
		{"bool normalized", npyBytes(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", []byte{0, 1, 2}), Bool, []int64{3}, []byte{0, 1, 1}},
		{"key order and quotes", npyBytes(1, `{"shape": (1L, 2L), "fortran_order": False, "descr": "<f4"}`, npyF32s(3, 4)), Float32, []int64{1, 2}, npyF32s(3, 4)},
		{"fortran rank 1", npyBytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", npyF32s(5, 6)), Float32, []int64{2}, npyF32s(5, 6)},
		{"trailing data left", append(npyBytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", []byte{1}), 9, 9), Uint8, []int64{1}, []byte{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadNpy(bytes.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != tc.dt || !slices.Equal(got.Shape, tc.shape) || !bytes.Equal(got.Data, tc.data) {
				t.Errorf("got %v %v, want %s%v %v", got, got.Data, tc.dt, tc.shape, tc.data)
			}
		})
	}
}

func TestNpyReadErrors(t *testing.T) {
	hdr := func(dict string, data ...byte) []byte { return npyBytes(1, dict, data) }
	huge := binary.LittleEndian.AppendUint32([]byte(npyMagic+"\x02\x00"), 1<<30)
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "reading magic: EOF"},
		{"bad magic", []byte("PK\x03\x04xxxxxxxx"), "not a .npy file"},
		{"version 4", []byte(npyMagic + "\x04\x00\x00\x00"), "unsupported format version 4.0"},
		{"version 1.1", []byte(npyMagic + "\x01\x01\x00\x00"), "unsupported format version 1.1"},
		{"header too long", huge, "header of 1073741824 bytes exceeds the limit"},
		{"truncated header", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }")[:40], "reading header: unexpected EOF"},
		{"truncated data", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 1, 2, 3, 4), "float32[2]: data: want 8 bytes: unexpected EOF"},
		{"missing key", hdr("{'descr': '<f4', 'shape': (1,), }"), "want the keys descr, fortran_order and shape"},
		{"extra key", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"), `unexpected key "x"`},
		{"duplicate key", hdr("{'descr': '<f4', 'descr': '<f4', 'shape': (1,)}"), `key "descr" twice`},
		{"structured", hdr("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"), "structured dtypes are not supported"},
		{"unicode without data", hdr("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }"), "string[1]: data"},
		{"unicode too wide", hdr("{'descr': '<U999999999', 'fortran_order': False, 'shape': (1,), }"), `unsupported dtype "<U999999999"`},
		{"object", hdr("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"), `unsupported dtype "|O"`},
		{"bad order", hdr("{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }"), `byte order '|' for a 4-byte type`},
		{"fortran", hdr("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"), "fortran_order arrays are not supported"},
		{"negative dim", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"), "shape: bad dim"},
		{"overflow", hdr("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"), "too many elements"},
		{"bad bool", hdr("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }"), "want True or False"},
		{"unterminated", hdr("{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }"), "want ','"},
		{"trailing text", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x"), `trailing text "x"`},
		{"no brace", hdr("'descr': '<f4'"), "want '{'"},
		{"rank", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (" + strings.Repeat("1,", 65) + "), }"), "more than 64 dims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadNpy(bytes.NewReader(tc.in))
			if err == nil || !strings.HasPrefix(err.Error(), "tensor: npy: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestNpyHugeShapeDoesNotAllocate checks that a header claiming a huge array
// over a short input fails without allocating the claimed size.
func TestNpyHugeShapeDoesNotAllocate(t *testing.T) {
	in := npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", npyF32s(1))
	path := filepath.Join(t.TempDir(), "huge.npy")
	if err := os.WriteFile(path, in, 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadNpy(bytes.NewReader(in))
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("ReadNpy error = %v", err)
	}
	_, err = ReadNpyFile(path)
	if err == nil || !strings.Contains(err.Error(), "needs 4398046511104 data bytes, the file has 4") {
		t.Errorf("ReadNpyFile error = %v", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("allocated %d bytes", grew)
	}
}

// TestNpyLargeStream reads an array larger than one read chunk from a
// stream of unknown size.
func TestNpyLargeStream(t *testing.T) {
	in := npyPatterned(Uint8, 3*npyChunk+5)
	var buf bytes.Buffer
	if err := WriteNpy(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadNpy(struct{ *bytes.Buffer }{&buf})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Data, in.Data) {
		t.Error("data differs")
	}
}

func TestNpyFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.npy")
	in := FromFloat32s([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	if err := WriteNpyFile(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadNpyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "float32[2,3]" || !bytes.Equal(out.Data, in.Data) {
		t.Errorf("got %v", out)
	}
	if _, err := ReadNpyFile(filepath.Join(t.TempDir(), "missing.npy")); err == nil || !strings.HasPrefix(err.Error(), "tensor: npy: ") {
		t.Errorf("missing file: %v", err)
	}
	if err := WriteNpyFile(filepath.Join(t.TempDir(), "no", "dir.npy"), in); err == nil {
		t.Error("writing into a missing directory: no error")
	}
	if err := WriteNpyFile(filepath.Join(t.TempDir(), "s.npy"), &Tensor{DType: String, Shape: []int64{2}, Strings: [][]byte{[]byte("x")}}); err == nil {
		t.Error("writing 1 string as a [2] tensor: no error")
	}
}

// pythonWithNumPy returns the .venv's Python if it can import numpy and
// ml_dtypes (make venv installs both), or "".
func pythonWithNumPy() string {
	py := "../.venv/bin/python"
	if exec.Command(py, "-c", "import numpy, ml_dtypes").Run() == nil {
		return py
	}
	return ""
}

// npyCase describes an array in the NumPy cross-check: dtype name, shape and
// the elements as [real, imag] pairs in C order.
type npyCase struct {
	DType  string       `json:"dtype"`
	Shape  []int64      `json:"shape"`
	Values [][2]float64 `json:"values"`
	Error  string       `json:"error,omitempty"`
}

const numpyWriter = `
import json, os, sys
import numpy as np, ml_dtypes
out = sys.argv[1]
cases = {}
base = np.array([0, 1, -2, 3, 100, -7])
def save(name, arr, version=None, error=None):
    path = os.path.join(out, name + ".npy")
    if version is None:
        np.save(path, arr)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)
    vals = [[float(np.real(v)), float(np.imag(v))] for v in np.asarray(arr).ravel(order="C")]
    cases[name] = {"dtype": arr.dtype.name, "shape": list(arr.shape), "values": vals}
    if error:
        cases[name]["error"] = error
for dt in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64", "complex64", "complex128"]:
    v = base
    if dt.startswith("uint"):
        v = np.abs(base)
    elif dt == "bool":
        v = base % 2
    elif dt.startswith("float"):
        v = base * 0.5
    elif dt.startswith("complex"):
        v = base * 0.5 + 1j * np.arange(6)
    save(dt, v.astype(dt).reshape(2, 3))
    if np.dtype(dt).itemsize > 1:
        save(dt + "_be", v.astype(np.dtype(dt).newbyteorder(">")).reshape(3, 2))
save("scalar", np.array(3.5))
save("empty", np.zeros((0, 3), "f4"))
save("v2", base.astype("i4"), version=(2, 0))
save("v3", base.astype("f8"), version=(3, 0))
save("fortran", np.asfortranarray(base.astype("f4").reshape(2, 3)), error="fortran_order")
# The ml_dtypes types under their names (numpy.load reads them back once
# ml_dtypes is imported); numpy.save's own '<V1' names no type.
for dt in ["bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
           "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4"]:
    v = np.array([0.5, 1, -2, 3, 6, -1.5]) if dt != "uint4" else np.abs(base) % 16
    if dt == "float8_e8m0fnu":
        v = np.array([0.5, 1, 2, 4, 2.0**-127, 2.0**127])
    elif dt == "int4":
        v = np.array([0, 1, -2, 3, 7, -8])
    arr = v.astype(dt).reshape(2, 3)
    with open(os.path.join(out, dt + ".npy"), "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": dt, "fortran_order": False, "shape": arr.shape})
        f.write(arr.tobytes())
    cases[dt] = {"dtype": dt, "shape": [2, 3], "values": [[float(x), 0.0] for x in arr.astype(np.float64).ravel()]}
save("void", np.array([1, 2], "float8_e4m3fn"), error="names no type")
json.dump(cases, open(os.path.join(out, "cases.json"), "w"))
`

const numpyReader = `
import json, os, sys
import numpy as np, ml_dtypes
d = sys.argv[1]
cases = json.load(open(os.path.join(d, "cases.json")))
for name, c in cases.items():
    a = np.load(os.path.join(d, name + ".npy"))
    assert a.dtype.name == c["dtype"], (name, a.dtype)
    assert a.dtype.byteorder in "<|=", (name, a.dtype.byteorder)
    assert list(a.shape) == c["shape"], (name, a.shape)
    want = np.array([complex(re, im) for re, im in c["values"]]).astype(a.dtype) if a.dtype.kind == "c" \
        else np.array([re for re, _ in c["values"]]).astype(a.dtype)
    assert np.array_equal(a.ravel(), want), (name, a, want)
print("ok", len(cases))
`

// npyElem returns element i of t as a [real, imag] pair.
func npyElem(t *Tensor, i int64) [2]float64 {
	switch t.DType {
	case Complex64:
		return [2]float64{t.Float64At(i), float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[i*8+4:])))}
	case Complex128:
		return [2]float64{t.Float64At(i), math.Float64frombits(binary.LittleEndian.Uint64(t.Data[i*16+8:]))}
	}
	return [2]float64{t.Float64At(i), 0}
}

// TestNpyNumPyCrossCheck reads files written by NumPy and has NumPy read
// files written by WriteNpy, with the NumPy of the .venv that make test
// installs (or the system's); without one it fails.
func TestNpyNumPyCrossCheck(t *testing.T) {
	py := pythonWithNumPy()
	if py == "" {
		t.Fatal("no .venv python with numpy and ml_dtypes: run make venv")
	}
	dir := t.TempDir()
	if out, err := exec.Command(py, "-c", numpyWriter, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy writer: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]npyCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("only %d numpy cases", len(cases))
	}
	for name, c := range cases {
		checkNumPyFile(t, filepath.Join(dir, name+".npy"), name, c)
	}

	// The other way: WriteNpy files for numpy.load.
	outDir := t.TempDir()
	goCases := map[string]npyCase{}
	for _, dt := range npyDTypes {
		for _, shape := range [][]int64{{2, 3}, {}, {0, 2}} {
			tt := New(dt, shape...)
			c := npyCase{DType: dt.String(), Shape: shape, Values: [][2]float64{}}
			for i := range tt.NumElements() {
				v := float64(i%5) - 1
				if dt.IsUnsigned() || dt == Bool {
					v = float64(i % 2)
				}
				if dt == Float8E8M0FNU {
					v = math.Ldexp(1, int(i%5)-1) // powers of two only
				}
				tt.SetFloat64(i, v)
				c.Values = append(c.Values, npyElem(tt, i))
			}
			name := dt.String() + "_" + strings.Trim(ShapeString(shape), "[]")
			if err := WriteNpyFile(filepath.Join(outDir, name+".npy"), tt); err != nil {
				t.Fatal(err)
			}
			goCases[name] = c
		}
	}
	manifest, err := json.Marshal(goCases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "cases.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", numpyReader, outDir).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy reader: %v\n%s", err, out)
	}
	t.Logf("numpy read back our files: %s", bytes.TrimSpace(out))
}

func checkNumPyFile(t *testing.T, path, name string, c npyCase) {
	t.Helper()
	got, err := ReadNpyFile(path)
	if c.Error != "" {
		if err == nil || !strings.Contains(err.Error(), c.Error) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.Error)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if got.DType.String() != c.DType || !slices.Equal(got.Shape, c.Shape) {
		t.Errorf("%s: got %v, want %s%v", name, got, c.DType, c.Shape)
		return
	}
	for i, want := range c.Values {
		if e := npyElem(got, int64(i)); e != want {
			t.Errorf("%s[%d] = %v, want %v", name, i, e, want)
		}
	}
}

// TestNpyStrings reads NumPy's unicode and bytes arrays (the layout of
// np.save of np.array(["a", "héllo", ""]) and of a bytes array) and writes
// string tensors that read back the same; the project's .npy files from
// NumPy (testdata/mlmodels) are read by internal/realmodels.
func TestNpyStrings(t *testing.T) {
	npy := func(descr, shape, data string) string {
		dict := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }"
		pad := 64 - (10+len(dict)+1)%64
		h := dict + strings.Repeat(" ", pad%64) + "\n"
		return "\x93NUMPY\x01\x00" + string([]byte{byte(len(h)), byte(len(h) >> 8)}) + h + data
	}
	unicode := npy("<U5", "(3,)", "a\x00\x00\x00"+strings.Repeat("\x00", 16)+
		"h\x00\x00\x00\xe9\x00\x00\x00l\x00\x00\x00l\x00\x00\x00o\x00\x00\x00"+strings.Repeat("\x00", 20))
	bytesArr := npy("|S2", "(2,)", "abc\x00")
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"unicode", unicode, []string{"a", "héllo", ""}},
		{"bytes", bytesArr, []string{"ab", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadNpy(strings.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != String || len(got.Strings) != len(tc.want) {
				t.Fatalf("got %s", got)
			}
			for i, w := range tc.want {
				if string(got.Strings[i]) != w {
					t.Errorf("element %d = %q, want %q", i, got.Strings[i], w)
				}
			}
			var buf bytes.Buffer
			if err := WriteNpy(&buf, got); err != nil {
				t.Fatal(err)
			}
			back, err := ReadNpy(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if len(back.Strings) != len(tc.want) || string(back.Strings[1]) != tc.want[1] {
				t.Errorf("round trip %v", back.Strings)
			}
		})
	}
	if _, err := ReadNpy(strings.NewReader(unicode[:len(unicode)-30])); err == nil {
		t.Error("a truncated unicode array read without error")
	}
}
