package grpcapi

import (
	"encoding/binary"
	"fmt"
	"math"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/tensor"
)

// contentsBytes turns the typed contents of input in into the raw
// little-endian bytes payload.RawTensor reads, checking that the contents
// field matches the datatype, that the element count matches the shape and
// that integers fit the datatype. The bytes are reserved on lease before
// they are allocated.
func contentsBytes(in *pb.ModelInferRequest_InferInputTensor, maxElems int64, lease *payload.Lease) ([]byte, error) {
	n, err := payload.CheckShape(in.Name, in.Shape, maxElems)
	if err != nil {
		return nil, err
	}
	dt, err := payload.ParseDType(in.Name, in.Datatype)
	if err != nil {
		return nil, err
	}
	size := contentsSize(dt, n, in.Contents)
	if err := lease.Reserve(size, fmt.Sprintf("input %q", in.Name)); err != nil {
		return nil, err
	}
	field, got := contentsField(dt, in.Contents)
	switch {
	case field == "":
		return nil, payload.BadRequest("input %q: datatype %s has no typed contents field in the protocol; send it in raw_input_contents", in.Name, in.Datatype)
	case int64(got) != n:
		return nil, payload.BadRequest("input %q: contents.%s holds %d elements, shape %v wants %d", in.Name, field, got, in.Shape, n)
	}
	return appendContents(make([]byte, 0, size), in, dt)
}

// contentsField names the contents field of dt and the elements c holds
// there; "" when the protocol has none for dt.
func contentsField(dt tensor.DType, c *pb.InferTensorContents) (string, int) {
	switch dt {
	case tensor.Bool:
		return "bool_contents", len(c.BoolContents)
	case tensor.Int8, tensor.Int16, tensor.Int32:
		return "int_contents", len(c.IntContents)
	case tensor.Int64:
		return "int64_contents", len(c.Int64Contents)
	case tensor.Uint8, tensor.Uint16, tensor.Uint32:
		return "uint_contents", len(c.UintContents)
	case tensor.Uint64:
		return "uint64_contents", len(c.Uint64Contents)
	case tensor.Float32:
		return "fp32_contents", len(c.Fp32Contents)
	case tensor.Float64:
		return "fp64_contents", len(c.Fp64Contents)
	case tensor.String:
		return "bytes_contents", len(c.BytesContents)
	}
	return "", 0
}

// appendContents appends the raw bytes of in's contents field for dt
// (contentsField has checked it exists and has the right count).
func appendContents(b []byte, in *pb.ModelInferRequest_InferInputTensor, dt tensor.DType) ([]byte, error) {
	c := in.Contents
	switch dt {
	case tensor.Bool:
		for _, v := range c.BoolContents {
			b = append(b, boolByte(v))
		}
	case tensor.Int8, tensor.Int16, tensor.Int32:
		return appendInts(b, in, dt)
	case tensor.Uint8, tensor.Uint16, tensor.Uint32:
		return appendUints(b, in, dt)
	case tensor.Int64:
		for _, v := range c.Int64Contents {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	case tensor.Uint64:
		for _, v := range c.Uint64Contents {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	case tensor.Float32:
		for _, v := range c.Fp32Contents {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	case tensor.Float64:
		for _, v := range c.Fp64Contents {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	case tensor.String:
		for _, v := range c.BytesContents {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// appendInts appends int_contents as int8, int16 or int32, refusing values
// outside dt's range.
func appendInts(b []byte, in *pb.ModelInferRequest_InferInputTensor, dt tensor.DType) ([]byte, error) {
	bits := dt.Size() * 8
	lo, hi := -int64(1)<<(bits-1), int64(1)<<(bits-1)-1
	for i, v := range in.Contents.IntContents {
		if int64(v) < lo || int64(v) > hi {
			return nil, payload.BadRequest("input %q: contents.int_contents[%d] is %d, outside %s's range [%d, %d]", in.Name, i, v, in.Datatype, lo, hi)
		}
		b = appendUint(b, bits, uint32(v))
	}
	return b, nil
}

// appendUints appends uint_contents as uint8, uint16 or uint32, refusing
// values outside dt's range.
func appendUints(b []byte, in *pb.ModelInferRequest_InferInputTensor, dt tensor.DType) ([]byte, error) {
	bits := dt.Size() * 8
	hi := uint64(1)<<bits - 1
	for i, v := range in.Contents.UintContents {
		if uint64(v) > hi {
			return nil, payload.BadRequest("input %q: contents.uint_contents[%d] is %d, outside %s's range [0, %d]", in.Name, i, v, in.Datatype, hi)
		}
		b = appendUint(b, bits, v)
	}
	return b, nil
}

// contentsSize is the size of the raw bytes of n elements of dt in c.
func contentsSize(dt tensor.DType, n int64, c *pb.InferTensorContents) int64 {
	if dt != tensor.String {
		return n * int64(dt.Size())
	}
	size := 4 * n
	for _, v := range c.BytesContents {
		size += int64(len(v))
	}
	return size
}

// appendUint appends the low bits (8, 16 or 32) of v, little-endian.
func appendUint(b []byte, bits int, v uint32) []byte {
	switch bits {
	case 8:
		return append(b, byte(v))
	case 16:
		return binary.LittleEndian.AppendUint16(b, uint16(v))
	}
	return binary.LittleEndian.AppendUint32(b, v)
}
