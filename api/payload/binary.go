package payload

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// HeaderInferenceLength is the header of the binary tensor extension that
// gives the length of the JSON part of a body; the raw tensor bytes follow
// it.
const HeaderInferenceLength = "Inference-Header-Content-Length"

// splitBody splits a body into its JSON header and the binary tensor bytes
// that follow it, by the value of the Inference-Header-Content-Length header
// ("" when there is none: all JSON).
func splitBody(body []byte, headerLen string) (header, rest []byte, err error) {
	headerLen = strings.TrimSpace(headerLen)
	if headerLen == "" {
		return body, nil, nil
	}
	n, err := strconv.ParseInt(headerLen, 10, 64)
	if err != nil || n < 0 {
		return nil, nil, badRequest("%s is %q, want the length in bytes of the JSON part of the body", HeaderInferenceLength, headerLen)
	}
	if n > int64(len(body)) {
		return nil, nil, badRequest("%s is %d but the body has only %d bytes (truncated request?)", HeaderInferenceLength, n, len(body))
	}
	return body[:n], body[n:], nil
}

// binaryReader hands out the binary tensor bytes of a request in input
// order.
type binaryReader struct {
	rest   []byte
	off    int64
	hasHdr bool // the request had Inference-Header-Content-Length
}

// take returns the next n bytes for input name.
func (r *binaryReader) take(name string, n int64) ([]byte, error) {
	if !r.hasHdr {
		return nil, badRequest("input %q has parameters.binary_data_size but the request has no %s header saying where the JSON ends", name, HeaderInferenceLength)
	}
	left := int64(len(r.rest)) - r.off
	if n < 0 || n > left {
		return nil, badRequest("input %q: binary_data_size is %d but only %d bytes of binary data are left after byte %d of it (truncated request?)", name, n, left, r.off)
	}
	b := r.rest[r.off : r.off+n : r.off+n]
	r.off += n
	return b, nil
}

// finish checks that every binary byte was claimed by an input.
func (r *binaryReader) finish() error {
	if left := int64(len(r.rest)) - r.off; left > 0 {
		return badRequest("%d bytes of binary data follow the JSON header but the inputs' binary_data_size add up to %d", int64(len(r.rest)), r.off)
	}
	return nil
}

// binaryTensor makes a tensor of dt and shape from its raw little-endian
// bytes (for string tensors: each element as a 4-byte little-endian length
// and its bytes, as the Open Inference Protocol's BYTES).
func binaryTensor(name string, dt tensor.DType, shape []int64, data []byte) (*tensor.Tensor, error) {
	n := tensor.NumElements(shape)
	if dt == tensor.String {
		t := &tensor.Tensor{DType: dt, Shape: append([]int64{}, shape...)}
		if n > int64(len(data))/4 {
			return nil, badRequest("input %q: %d bytes of BYTES data cannot hold %d elements", name, len(data), n)
		}
		t.Strings = make([][]byte, 0, n)
		for len(data) > 0 {
			if len(data) < 4 {
				return nil, badRequest("input %q: BYTES data ends inside an element's length prefix", name)
			}
			l := int64(binary.LittleEndian.Uint32(data))
			data = data[4:]
			if l > int64(len(data)) {
				return nil, badRequest("input %q: BYTES element %d claims %d bytes, %d are left", name, len(t.Strings), l, len(data))
			}
			t.Strings = append(t.Strings, data[:l:l])
			data = data[l:]
		}
		if int64(len(t.Strings)) != n {
			return nil, badRequest("input %q: BYTES data holds %d elements, shape %v wants %d", name, len(t.Strings), shape, n)
		}
		return t, nil
	}
	if dt.Size() == 0 {
		return nil, badRequest("input %q: dtype %s has no binary form", name, dt)
	}
	if want := n * int64(dt.Size()); int64(len(data)) != want {
		return nil, badRequest("input %q: binary_data_size is %d bytes, %s%s needs %d", name, len(data), dt, tensor.ShapeString(shape), want)
	}
	return &tensor.Tensor{DType: dt, Shape: append([]int64{}, shape...), Data: data}, nil
}

// binaryBytes returns the raw bytes of an output for the binary extension.
func binaryBytes(t *tensor.Tensor) []byte {
	if t.DType != tensor.String {
		return t.Data
	}
	size := 0
	for _, s := range t.Strings {
		size += 4 + len(s)
	}
	b := make([]byte, 0, size)
	for _, s := range t.Strings {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}
