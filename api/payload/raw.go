package payload

import "github.com/xserve/xserve/tensor"

// RawTensor makes input name from its datatype (an OIP or xserve name), its
// shape and its raw little-endian bytes (BYTES: each element as a 4-byte
// little-endian length and its bytes), as the KServe v2 gRPC protocol's
// raw_input_contents carry it. The shape is checked against maxElems before
// the bytes are looked at; data is kept, not copied.
func RawTensor(name, datatype string, shape []int64, data []byte, maxElems int64) (*tensor.Tensor, error) {
	dt, err := parseDType(name, datatype)
	if err != nil {
		return nil, err
	}
	if _, err := checkShape(name, shape, maxElems); err != nil {
		return nil, err
	}
	return binaryTensor(name, dt, shape, data)
}

// CheckShape validates the declared shape of input name: dims >= 0 and at
// most maxElems elements. It returns the element count.
func CheckShape(name string, shape []int64, maxElems int64) (int64, error) {
	return checkShape(name, shape, maxElems)
}

// TensorBytes is t's raw little-endian form, as RawTensor reads it.
func TensorBytes(t *tensor.Tensor) []byte { return binaryBytes(t) }

// ParseDType reads the datatype of input name as the Open Inference
// Protocol (FP32, INT64, BYTES, ...) or xserve (float32, ...) names it.
func ParseDType(name, datatype string) (tensor.DType, error) { return parseDType(name, datatype) }
