package payload

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/xserve/xserve/tensor"
)

// The request decoders take bytes from anyone: each fuzz target checks that
// a decoder never panics, that every error is one of the package's
// sentinels (so that it maps to a 4xx), and that what it accepts is
// consistent (every tensor's data matches its dtype and shape, within the
// element limit).

const fuzzMaxElems = 1 << 16

// checkDecoded checks the outcome of a request decoder.
func checkDecoded(t *testing.T, d *Request, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error %q wraps no sentinel of the package", err)
		}
		return
	}
	for name, x := range d.Infer.Inputs {
		n := tensor.NumElements(x.Shape)
		if n > fuzzMaxElems {
			t.Fatalf("input %q has %d elements, over the limit of %d", name, n, fuzzMaxElems)
		}
		if x.DType == tensor.String {
			if int64(len(x.Strings)) != n {
				t.Fatalf("input %q: %d strings for shape %v", name, len(x.Strings), x.Shape)
			}
			continue
		}
		if int64(len(x.Data)) != n*int64(x.DType.Size()) {
			t.Fatalf("input %q: %d bytes for %s%v", name, len(x.Data), x.DType, x.Shape)
		}
	}
}

// binarySeed is a v1 request with one input in the binary tensor extension.
func binarySeed(header string, data []byte) ([]byte, string) {
	return append([]byte(header), data...), strconv.Itoa(len(header))
}

func FuzzDecodeV1(f *testing.F) {
	f.Add([]byte(`{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}}}`), "")
	f.Add([]byte(`{"model": "m", "version": "2", "id": "a", "inputs": {"x": {"dtype": "int8", "shape": [3], "data": [1, -2, 127]}, "s": {"dtype": "bytes", "shape": [1], "data": ["hi"]}}, "outputs": {"y": {"binary_data": true}}, "parameters": {"timeout": "5s", "priority": 1}}`), "")
	f.Add([]byte(`{"model": "m", "inputs": {"x": {"dtype": "float16", "shape": [], "data": ["NaN"]}}}`), "")
	body, hl := binarySeed(`{"model": "m", "inputs": {"x": {"dtype": "float32", "shape": [2], "parameters": {"binary_data_size": 8}}}}`, make([]byte, 8))
	f.Add(body, hl)
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		d, err := DecodeV1(body, headerLen, "", fuzzMaxElems)
		checkDecoded(t, d, err)
	})
}

func FuzzDecodeOIP(f *testing.F) {
	f.Add([]byte(`{"id": "7", "inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [0.5, 1, 1.5]}], "outputs": [{"name": "y", "parameters": {"binary_data": true}}]}`), "")
	f.Add([]byte(`{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "b"]}], "parameters": {"priority": 2, "binary_data_output": true}}`), "")
	f.Add([]byte(`{"inputs": [{"name": "x", "shape": [2, 1], "datatype": "INT64", "data": [[1], [2]]}]}`), "")
	body, hl := binarySeed(`{"inputs": [{"name": "x", "shape": [2], "datatype": "INT32", "parameters": {"binary_data_size": 8}}]}`, []byte{1, 0, 0, 0, 2, 0, 0, 0})
	f.Add(body, hl)
	body, hl = binarySeed(`{"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]}`, []byte{2, 0, 0, 0, 'h', 'i'})
	f.Add(body, hl)
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		d, err := DecodeOIP("m", 0, body, headerLen, fuzzMaxElems)
		checkDecoded(t, d, err)
	})
}

// FuzzDecodeJSONData decodes the data of one tensor for a dtype and shape
// the fuzzer picks.
func FuzzDecodeJSONData(f *testing.F) {
	f.Add(uint8(tensor.Float32), []byte{2, 2}, []byte(`[[1, 2], [3, 1e400]]`))
	f.Add(uint8(tensor.Int8), []byte{3}, []byte(`[1, -129, 2.0]`))
	f.Add(uint8(tensor.Bool), []byte{}, []byte(`true`))
	f.Add(uint8(tensor.String), []byte{1}, []byte(`["\u00e9"]`))
	f.Add(uint8(tensor.BFloat16), []byte{1}, []byte(`["-Infinity"]`))
	f.Fuzz(func(t *testing.T, dt uint8, dims []byte, data []byte) {
		shape := make([]int64, 0, len(dims))
		n := int64(1)
		for _, d := range dims[:min(len(dims), 4)] {
			shape = append(shape, int64(d%8))
			n *= int64(d % 8)
		}
		x, err := decodeJSONData("x", tensor.DType(dt), shape, data)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %q is not ErrBadRequest", err)
			}
			return
		}
		if tensor.NumElements(x.Shape) != n {
			t.Fatalf("decoded %v for shape %v", x.Shape, shape)
		}
	})
}

// FuzzDecompress feeds bodies under each Content-Encoding through a 1 MiB
// limit: the output never exceeds it, errors are the package's.
func FuzzDecompress(f *testing.F) {
	const limit = 1 << 20
	cs, err := NewCodecs(limit)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(cs.Close)
	plain := []byte(`{"model": "m", "inputs": {}}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte{'0'}, 2*limit)) // a bomb
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	for _, e := range []string{"gzip", "zstd", "deflate", "identity", "br", "gzip, zstd"} {
		if z, err := cs.Encode(e, plain); err == nil {
			f.Add(e, z)
		} else {
			f.Add(e, plain)
		}
	}
	f.Add("gzip", gz.Bytes())
	f.Add("zstd", enc.EncodeAll(bytes.Repeat([]byte{'1'}, 2*limit), nil))
	enc.Close()
	f.Fuzz(func(t *testing.T, encoding string, body []byte) {
		out, err := cs.Decode(encoding, body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnsupportedEncoding) {
				t.Fatalf("error %q wraps no sentinel of the package", err)
			}
			return
		}
		if len(out) > limit {
			t.Fatalf("decoded %d bytes, over the limit of %d", len(out), limit)
		}
	})
}

// FuzzDeepAndWide builds requests of up to megabytes from a few numbers:
// a value nested depth levels deep (arrays or objects, up to four
// million), each level width elements wide, at one of the places the
// reader walks (parameters, id, a tensor's data or shape, an unknown
// field...), in either format. The byte-level targets above cannot reach
// such sizes; these bodies check that depth and width are bounded by
// limits (a 400 naming MaxJSONDepth or MaxRank), never by the stack.
func FuzzDeepAndWide(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint32(2_000_000), uint16(1), []byte("1"))
	f.Add(uint8(1), uint8(3), uint32(70), uint16(1000), []byte("0.5"))
	f.Add(uint8(0), uint8(4), uint32(127), uint16(3), []byte(`"s"`))
	f.Add(uint8(1), uint8(5), uint32(100_000), uint16(2), []byte("true"))
	places := []string{
		`{"parameters": {"p": @}, "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`,
		`{"id": @, "inputs": []}`,
		`{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": @}]}`,
		`{"inputs": [{"name": "x", "shape": [@], "datatype": "FP32", "data": [1]}]}`,
		`{"zz": @, "inputs": []}`,
		`{"inputs": [], "outputs": [{"name": "y", "parameters": {"a": @}}]}`,
	}
	f.Fuzz(func(t *testing.T, format, place uint8, depth uint32, width uint16, fill []byte) {
		depth %= 4_000_001
		if len(fill) == 0 || len(fill) > 64 {
			fill = []byte("1")
		}
		tmpl := places[int(place)%len(places)]
		if format%2 == 1 { // the same places in the /v1/infer form
			tmpl = strings.NewReplacer(`"inputs": []`, `"model": "m", "inputs": {}`,
				`"inputs": [{"name": "x", `, `"model": "m", "inputs": {"x": {`, `"datatype": "FP32"`, `"dtype": "float32"`,
				`"data": [1]}]`, `"data": [1]}}`, `@}]}`, `@}}}`, `"outputs": [{"name": "y", "parameters": {"a": @}}]`, `"parameters": {"a": @}`).Replace(tmpl)
		}
		open, sep, close := "[", ",", "]"
		if depth%2 == 1 && place%3 == 0 {
			open, close = `{"k":`, "}"
			width = 1
		}
		// Each level holds one nested value and width-1 copies of fill.
		w := max(int(width), 1)
		perLevel := len(open) + len(close) + (w-1)*(len(fill)+len(sep))
		if int(depth)*perLevel > 4<<20 {
			depth = uint32((4 << 20) / perLevel)
		}
		i := strings.IndexByte(tmpl, '@')
		var b bytes.Buffer
		b.WriteString(tmpl[:i])
		for range depth {
			b.WriteString(open)
			for range w - 1 {
				b.Write(fill)
				b.WriteString(sep)
			}
		}
		b.Write(fill)
		for range depth {
			b.WriteString(close)
		}
		b.WriteString(tmpl[i+1:])
		var d *Request
		var err error
		if format%2 == 1 {
			d, err = DecodeV1(b.Bytes(), "", "", fuzzMaxElems)
		} else {
			d, err = DecodeOIP("m", 0, b.Bytes(), "", fuzzMaxElems)
		}
		checkDecoded(t, d, err)
		if err != nil && len(err.Error()) > 4096 {
			t.Fatalf("a %d-byte error for a %d-byte body: %.300s", len(err.Error()), b.Len(), err)
		}
		if err == nil && depth > MaxJSONDepth && int(place)%len(places) != 3 {
			t.Fatalf("a value %d levels deep was accepted", depth)
		}
	})
}
