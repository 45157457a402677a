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
	c := in.Contents
	count := func(field string, got int) error {
		if int64(got) != n {
			return payload.BadRequest("input %q: contents.%s holds %d elements, shape %v wants %d", in.Name, field, got, in.Shape, n)
		}
		return nil
	}
	size := contentsSize(dt, n, c)
	if err := lease.Reserve(size, fmt.Sprintf("input %q", in.Name)); err != nil {
		return nil, err
	}
	b := make([]byte, 0, size)
	switch dt {
	case tensor.Bool:
		if err := count("bool_contents", len(c.BoolContents)); err != nil {
			return nil, err
		}
		for _, v := range c.BoolContents {
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case tensor.Int8, tensor.Int16, tensor.Int32:
		if err := count("int_contents", len(c.IntContents)); err != nil {
			return nil, err
		}
		bits := dt.Size() * 8
		lo, hi := -int64(1)<<(bits-1), int64(1)<<(bits-1)-1
		for i, v := range c.IntContents {
			if int64(v) < lo || int64(v) > hi {
				return nil, payload.BadRequest("input %q: contents.int_contents[%d] is %d, outside %s's range [%d, %d]", in.Name, i, v, in.Datatype, lo, hi)
			}
			b = appendUint(b, bits, uint32(v))
		}
	case tensor.Int64:
		if err := count("int64_contents", len(c.Int64Contents)); err != nil {
			return nil, err
		}
		for _, v := range c.Int64Contents {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	case tensor.Uint8, tensor.Uint16, tensor.Uint32:
		if err := count("uint_contents", len(c.UintContents)); err != nil {
			return nil, err
		}
		bits := dt.Size() * 8
		hi := uint64(1)<<bits - 1
		for i, v := range c.UintContents {
			if uint64(v) > hi {
				return nil, payload.BadRequest("input %q: contents.uint_contents[%d] is %d, outside %s's range [0, %d]", in.Name, i, v, in.Datatype, hi)
			}
			b = appendUint(b, bits, v)
		}
	case tensor.Uint64:
		if err := count("uint64_contents", len(c.Uint64Contents)); err != nil {
			return nil, err
		}
		for _, v := range c.Uint64Contents {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	case tensor.Float32:
		if err := count("fp32_contents", len(c.Fp32Contents)); err != nil {
			return nil, err
		}
		for _, v := range c.Fp32Contents {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	case tensor.Float64:
		if err := count("fp64_contents", len(c.Fp64Contents)); err != nil {
			return nil, err
		}
		for _, v := range c.Fp64Contents {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	case tensor.String:
		if err := count("bytes_contents", len(c.BytesContents)); err != nil {
			return nil, err
		}
		for _, v := range c.BytesContents {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	default:
		return nil, payload.BadRequest("input %q: datatype %s has no typed contents field in the protocol; send it in raw_input_contents", in.Name, in.Datatype)
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
