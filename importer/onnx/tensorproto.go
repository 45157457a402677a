package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xserve/xserve/tensor"
)

// maxTensorRank bounds the number of dims of a TensorProto.
const maxTensorRank = 64

// onnxTypeNames are the TensorProto.DataType names, indexed by code.
var onnxTypeNames = [...]string{
	"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64",
	"STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64",
	"COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
	"FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
}

// onnxDTypes maps the supported TensorProto.DataType codes to tensor dtypes.
var onnxDTypes = [...]tensor.DType{
	1: tensor.Float32, 2: tensor.Uint8, 3: tensor.Int8, 4: tensor.Uint16,
	5: tensor.Int16, 6: tensor.Int32, 7: tensor.Int64, 8: tensor.String,
	9: tensor.Bool, 10: tensor.Float16, 11: tensor.Float64, 12: tensor.Uint32,
	13: tensor.Uint64, 14: tensor.Complex64, 15: tensor.Complex128,
	16: tensor.BFloat16, 17: tensor.Float8E4M3FN, 18: tensor.Float8E4M3FNUZ,
	19: tensor.Float8E5M2, 20: tensor.Float8E5M2FNUZ, 21: tensor.Uint4, 22: tensor.Int4,
	23: tensor.Float4E2M1FN, 24: tensor.Float8E8M0FNU,
}

// onnxTypeName returns the onnx.proto name of a data type code.
func onnxTypeName(code int32) string {
	if code >= 0 && int(code) < len(onnxTypeNames) {
		return onnxTypeNames[code]
	}
	return "unknown"
}

// DType converts an ONNX TensorProto.DataType code (FLOAT=1, UINT8=2, ...,
// BFLOAT16=16, FLOAT8E4M3FN=17, ..., FLOAT8E8M0=24) to a tensor.DType. Codes
// without a tensor.DType (UNDEFINED, the 2-bit integers) give an error
// naming the type.
func DType(onnxElemType int32) (tensor.DType, error) {
	dt, err := dtypeOf(onnxElemType)
	if err != nil {
		return dt, fmt.Errorf("onnx: %w", err)
	}
	return dt, nil
}

// dtypeOf is DType without the "onnx: " prefix on errors.
func dtypeOf(code int32) (tensor.DType, error) {
	if code > 0 && int(code) < len(onnxDTypes) {
		return onnxDTypes[code], nil
	}
	return tensor.Invalid, fmt.Errorf("data type %s (%d) not supported", onnxTypeName(code), code)
}

// DecodeTensor decodes a serialized TensorProto on its own, such as the
// input_0.pb files of the ONNX backend test data, and returns it with its
// name. External data is an error, as there is no model directory.
func DecodeTensor(data []byte) (*tensor.Tensor, string, error) {
	d := newProtoDecoder(DecodeOptions{}, false)
	defer d.close()
	t, name, err := d.tensor(data)
	if err != nil {
		return nil, "", fmt.Errorf("onnx: tensor %q: %w", name, err)
	}
	return t, name, nil
}

// TensorProto field numbers.
const (
	tpDims         = 1
	tpDataType     = 2
	tpSegment      = 3
	tpFloatData    = 4
	tpInt32Data    = 5
	tpStringData   = 6
	tpInt64Data    = 7
	tpName         = 8
	tpRawData      = 9
	tpDoubleData   = 10
	tpUint64Data   = 11
	tpExternalData = 13
	tpDataLocation = 14
	tpNumFields    = 15
)

// tpFieldNames names the TensorProto fields in errors.
var tpFieldNames = [tpNumFields]string{
	tpFloatData: "float_data", tpInt32Data: "int32_data", tpStringData: "string_data",
	tpInt64Data: "int64_data", tpRawData: "raw_data", tpDoubleData: "double_data",
	tpUint64Data: "uint64_data",
}

// tpElemWire is the wire type of one element of the repeated numeric fields.
var tpElemWire = [tpNumFields]protowire.Type{
	tpFloatData: protowire.Fixed32Type, tpInt32Data: protowire.VarintType,
	tpInt64Data: protowire.VarintType, tpDoubleData: protowire.Fixed64Type,
	tpUint64Data: protowire.VarintType,
}

// tensorHeader is what a first pass over a TensorProto learns: everything but
// the elements of the typed data fields, which it only counts.
type tensorHeader struct {
	name     string
	dims     []int64
	dataType int32
	raw      []byte
	hasRaw   bool
	counts   [tpNumFields]int64 // elements per typed data field
	external [][2]string
	location int64
}

// tensor decodes a TensorProto and returns it with its name. The name is
// returned with errors as far as it was read.
func (d *protoDecoder) tensor(b []byte) (*tensor.Tensor, string, error) {
	h, err := readTensorHeader(b)
	if err != nil {
		return nil, h.name, err
	}
	if dt, _ := dtypeOf(h.dataType); dt.IsSubByte() {
		t, err := d.tensor4(b, h, dt)
		return t, h.name, err
	}
	t, err := d.tensorData(b, h)
	return t, h.name, err
}

// tensor4 decodes an INT4, UINT4 or FLOAT4E2M1 tensor (two elements a
// byte, the first in the low nibble, in raw_data, external data or one byte
// per int32_data value) unpacked to one element a byte (dt's layout).
func (d *protoDecoder) tensor4(b []byte, h *tensorHeader, dt tensor.DType) (*tensor.Tensor, error) {
	what := onnxTypeName(h.dataType) + tensor.ShapeString(h.dims)
	n := tensor.NumElements(h.dims)
	if n < 0 || n > math.MaxInt/2 {
		return nil, fmt.Errorf("invalid dims %v: negative or too many elements", h.dims)
	}
	packed := (n + 1) / 2
	var data []byte
	var err error
	switch {
	case h.location == 1:
		if err := h.onlySource(-1); err != nil {
			return nil, fmt.Errorf("%s: external tensor also has %w", what, err)
		}
		if data, err = d.external(h.external, packed); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	case h.location != 0:
		return nil, fmt.Errorf("%s: unknown data_location %d", what, h.location)
	case h.hasRaw:
		if err := h.onlySource(tpRawData); err != nil {
			return nil, fmt.Errorf("%s: tensor has both raw_data and %w", what, err)
		}
		data = h.raw
	default:
		if err := h.onlySource(tpInt32Data); err != nil {
			return nil, fmt.Errorf("%s: %w in a 4-bit tensor", what, err)
		}
		if h.counts[tpInt32Data] != packed {
			return nil, fmt.Errorf("%s: int32_data has %d values, want %d packed bytes", what, h.counts[tpInt32Data], packed)
		}
		data = make([]byte, 0, packed)
		err = eachWireField(b, func(f wireField) error {
			if f.num != tpInt32Data {
				return nil
			}
			return eachValue(f, func(v uint64) {
				if int64(len(data)) < packed {
					data = append(data, byte(v))
				}
			})
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	if int64(len(data)) != packed {
		return nil, fmt.Errorf("%s: data has %d bytes, want %d", what, len(data), packed)
	}
	out := make([]byte, n)
	for i := range out {
		v := data[i/2]
		if i%2 == 1 {
			v >>= 4
		}
		out[i] = v & 0xf
	}
	return &tensor.Tensor{DType: dt, Shape: h.dims, Data: out}, err
}

func readTensorHeader(b []byte) (*tensorHeader, error) {
	h := &tensorHeader{dims: []int64{}}
	err := eachWireField(b, func(f wireField) error {
		var err error
		switch f.num {
		case tpDims:
			h.dims, err = appendDims(h.dims, f)
		case tpDataType:
			var v int64
			v, err = f.i64("data_type")
			h.dataType = int32(v)
		case tpSegment:
			err = errors.New("segmented tensors not supported")
		case tpFloatData, tpInt32Data, tpInt64Data, tpDoubleData, tpUint64Data:
			var n int64
			n, err = countElems(f)
			h.counts[f.num] += n
		case tpStringData:
			err = f.want("string_data", protowire.BytesType)
			h.counts[f.num]++
		case tpName:
			h.name, err = f.str("name")
		case tpRawData:
			err = f.want("raw_data", protowire.BytesType)
			h.raw, h.hasRaw = f.b, true
		case tpExternalData:
			var kv [2]string
			kv, err = stringPair(f, "external_data", len(h.external))
			h.external = append(h.external, kv)
		case tpDataLocation:
			h.location, err = f.i64("data_location")
		}
		return err
	})
	return h, err
}

// appendDims appends the packed or unpacked dims in f, checking the rank.
func appendDims(dims []int64, f wireField) ([]int64, error) {
	if f.typ != protowire.BytesType {
		v, err := f.i64("dims")
		if err != nil {
			return dims, err
		}
		return appendDim(dims, v)
	}
	for b := f.b; len(b) > 0; {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return dims, fmt.Errorf("dims: %w", wireError("varint", n))
		}
		var err error
		if dims, err = appendDim(dims, int64(v)); err != nil {
			return dims, err
		}
		b = b[n:]
	}
	return dims, nil
}

func appendDim(dims []int64, v int64) ([]int64, error) {
	if len(dims) >= maxTensorRank {
		return dims, fmt.Errorf("more than %d dims", maxTensorRank)
	}
	return append(dims, v), nil
}

// countElems counts the elements of a packed or unpacked numeric field.
func countElems(f wireField) (int64, error) {
	name, elem := tpFieldNames[f.num], tpElemWire[f.num]
	if f.typ != protowire.BytesType {
		return 1, f.want(name, elem)
	}
	switch elem {
	case protowire.Fixed32Type, protowire.Fixed64Type:
		size := 4
		if elem == protowire.Fixed64Type {
			size = 8
		}
		if len(f.b)%size != 0 {
			return 0, fmt.Errorf("%s: packed length %d is not a multiple of %d", name, len(f.b), size)
		}
		return int64(len(f.b) / size), nil
	}
	var n int64
	for _, c := range f.b {
		if c < 0x80 {
			n++
		}
	}
	if len(f.b) > 0 && f.b[len(f.b)-1] >= 0x80 {
		return 0, fmt.Errorf("%s: truncated varint", name)
	}
	return n, nil
}

// stringPair decodes the i-th StringStringEntryProto of a repeated field.
func stringPair(f wireField, what string, i int) ([2]string, error) {
	var kv [2]string
	if err := f.want(what, protowire.BytesType); err != nil {
		return kv, err
	}
	err := eachWireField(f.b, func(f wireField) error {
		var err error
		if f.num == 1 || f.num == 2 {
			kv[f.num-1], err = f.str([2]string{"key", "value"}[f.num-1])
		}
		return err
	})
	if err != nil {
		return kv, fmt.Errorf("%s %d: %w", what, i, err)
	}
	return kv, nil
}

// tensorData checks the header against the data present and builds the
// tensor. Nothing is allocated before the shape is known to fit the data.
func (d *protoDecoder) tensorData(b []byte, h *tensorHeader) (*tensor.Tensor, error) {
	dt, err := dtypeOf(h.dataType)
	if err != nil {
		return nil, err
	}
	n := tensor.NumElements(h.dims)
	if n < 0 {
		return nil, fmt.Errorf("invalid dims %v: negative or too many elements", h.dims)
	}
	size := int64(dt.Size())
	if size > 0 && n > math.MaxInt/size {
		return nil, fmt.Errorf("%s%v is too large", dt, tensor.ShapeString(h.dims))
	}
	nbytes := n * size
	t := &tensor.Tensor{DType: dt, Shape: h.dims}
	what := dt.String() + tensor.ShapeString(h.dims)
	switch {
	case h.location == 1:
		if err := h.onlySource(-1); err != nil {
			return nil, fmt.Errorf("%s: external tensor also has %w", what, err)
		}
		if dt == tensor.String {
			return nil, fmt.Errorf("%s: external data for a string tensor", what)
		}
		t.Data, err = d.external(h.external, nbytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	case h.location != 0:
		return nil, fmt.Errorf("%s: unknown data_location %d", what, h.location)
	case h.hasRaw:
		if err := h.onlySource(tpRawData); err != nil {
			return nil, fmt.Errorf("%s: tensor has both raw_data and %w", what, err)
		}
		if dt == tensor.String {
			return nil, fmt.Errorf("%s: raw_data for a string tensor", what)
		}
		if int64(len(h.raw)) != nbytes {
			return nil, fmt.Errorf("%s: raw_data has %d bytes, want %d", what, len(h.raw), nbytes)
		}
		t.Data = h.raw
		if !d.alias {
			t.Data = append([]byte{}, h.raw...)
		}
	default:
		if err := d.typedData(t, b, h, n); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return t, nil
}

// onlySource returns an error naming a data field other than keep that holds
// data, or nil.
func (h *tensorHeader) onlySource(keep int) error {
	if keep != tpRawData && h.hasRaw {
		return errors.New("raw_data")
	}
	for num, c := range h.counts {
		if num != keep && c > 0 {
			return errors.New(tpFieldNames[num])
		}
	}
	return nil
}

// typedSource returns the TensorProto field holding the elements of dt when
// raw_data is not used, and how many values make one element.
func typedSource(dt tensor.DType) (num int, per int64) {
	switch dt {
	case tensor.Float32:
		return tpFloatData, 1
	case tensor.Complex64:
		return tpFloatData, 2
	case tensor.Float64:
		return tpDoubleData, 1
	case tensor.Complex128:
		return tpDoubleData, 2
	case tensor.Int64:
		return tpInt64Data, 1
	case tensor.Uint32, tensor.Uint64:
		return tpUint64Data, 1
	case tensor.String:
		return tpStringData, 1
	}
	// Int32, Int16, Int8, Uint16, Uint8, Bool, Float16 and BFloat16 (as bits).
	return tpInt32Data, 1
}

// typedData fills t from the typed data field for its dtype.
func (d *protoDecoder) typedData(t *tensor.Tensor, b []byte, h *tensorHeader, n int64) error {
	num, per := typedSource(t.DType)
	if err := h.onlySource(num); err != nil {
		return fmt.Errorf("%s in a %s tensor", err, t.DType)
	}
	if got := h.counts[num]; got != n*per {
		if got == 0 {
			return fmt.Errorf("no data for %d elements", n)
		}
		return fmt.Errorf("%s has %d values, want %d", tpFieldNames[num], got, n*per)
	}
	if t.DType == tensor.String {
		t.Strings = d.stringData(b, n)
		return nil
	}
	t.Data = make([]byte, n*int64(t.DType.Size()))
	width := t.DType.Size() / int(per)
	isBool := t.DType == tensor.Bool
	i := 0
	return eachWireField(b, func(f wireField) error {
		if f.num != protowire.Number(num) {
			return nil
		}
		return eachValue(f, func(v uint64) {
			if i+width > len(t.Data) {
				return
			}
			if isBool && v != 0 {
				v = 1
			}
			putLittleEndian(t.Data[i:i+width], v)
			i += width
		})
	})
}

// stringData collects the n string_data entries of b.
func (d *protoDecoder) stringData(b []byte, n int64) [][]byte {
	out := make([][]byte, 0, n)
	_ = eachWireField(b, func(f wireField) error {
		if f.num == tpStringData && int64(len(out)) < n {
			s, _ := f.data("string_data", d.alias)
			out = append(out, s)
		}
		return nil
	})
	return out
}

// eachValue calls fn for every value of a packed or unpacked numeric field,
// whose wire types readTensorHeader has checked.
func eachValue(f wireField, fn func(uint64)) error {
	if f.typ != protowire.BytesType {
		fn(f.u)
		return nil
	}
	b := f.b
	for len(b) > 0 {
		var v uint64
		n := 0
		switch tpElemWire[f.num] {
		case protowire.Fixed32Type:
			var v32 uint32
			v32, n = protowire.ConsumeFixed32(b)
			v = uint64(v32)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		default:
			v, n = protowire.ConsumeVarint(b)
		}
		if n < 0 {
			return fmt.Errorf("%s: %w", tpFieldNames[f.num], wireError("value", n))
		}
		fn(v)
		b = b[n:]
	}
	return nil
}

// putLittleEndian stores the low len(b) bytes of v in b, little-endian.
func putLittleEndian(b []byte, v uint64) {
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b, v)
	}
}

// external reads nbytes of tensor data from the file named by the
// external_data entries, relative to BaseDir.
func (d *protoDecoder) external(entries [][2]string, nbytes int64) ([]byte, error) {
	loc, offset, length, err := parseExternal(entries)
	if err != nil {
		return nil, err
	}
	if d.opts.BaseDir == "" {
		return nil, fmt.Errorf("data is in external file %q but no base directory was given (use ReadModelFile or DecodeOptions.BaseDir)", loc)
	}
	if length >= 0 && length != nbytes {
		return nil, fmt.Errorf("external data %q: length %d, want %d bytes", loc, length, nbytes)
	}
	path := filepath.FromSlash(loc)
	if strings.HasPrefix(loc, "/") || filepath.IsAbs(path) || !filepath.IsLocal(path) {
		return nil, fmt.Errorf("external data location %q is absolute or escapes the model directory", loc)
	}
	if nbytes > d.opts.MaxExternalBytes-d.extBytes {
		return nil, fmt.Errorf("external data %q: %d more bytes exceed the limit of %d", loc, nbytes, d.opts.MaxExternalBytes)
	}
	data, err := d.readExternal(path, offset, nbytes)
	if err != nil {
		return nil, fmt.Errorf("external data %q: %w", loc, err)
	}
	d.extBytes += nbytes
	return data, nil
}

// parseExternal reads the location, offset and length keys; length is -1
// when absent.
func parseExternal(entries [][2]string) (loc string, offset, length int64, err error) {
	length = -1
	for _, kv := range entries {
		switch kv[0] {
		case "location":
			loc = kv[1]
		case "offset", "length":
			v, perr := strconv.ParseInt(kv[1], 10, 64)
			if perr != nil || v < 0 {
				return "", 0, 0, fmt.Errorf("external_data %s %q is not a non-negative integer", kv[0], kv[1])
			}
			if kv[0] == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if loc == "" {
		return "", 0, 0, errors.New("external data without a location")
	}
	return loc, offset, length, nil
}

// readExternal reads nbytes at offset from path inside BaseDir, checking the
// file's size before allocating.
func (d *protoDecoder) readExternal(path string, offset, nbytes int64) ([]byte, error) {
	if d.root == nil {
		root, err := os.OpenRoot(d.opts.BaseDir)
		if err != nil {
			return nil, err
		}
		d.root = root
	}
	f, err := d.root.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if size := fi.Size(); offset > size || nbytes > size-offset {
		return nil, fmt.Errorf("file has %d bytes, need %d at offset %d", size, nbytes, offset)
	}
	data := make([]byte, nbytes)
	if _, err := io.ReadFull(io.NewSectionReader(f, offset, nbytes), data); err != nil {
		return nil, err
	}
	return data, nil
}
