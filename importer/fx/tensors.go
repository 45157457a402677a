package fx

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/xserve/xserve/tensor"
)

// scalarTypes maps schema.ScalarType values to dtypes. Missing values
// (complex32) have no dtype in xserve.
var scalarTypes = map[int64]tensor.DType{
	1:  tensor.Uint8,      // BYTE
	2:  tensor.Int8,       // CHAR
	3:  tensor.Int16,      // SHORT
	4:  tensor.Int32,      // INT
	5:  tensor.Int64,      // LONG
	6:  tensor.Float16,    // HALF
	7:  tensor.Float32,    // FLOAT
	8:  tensor.Float64,    // DOUBLE
	10: tensor.Complex64,  // COMPLEXFLOAT
	11: tensor.Complex128, // COMPLEXDOUBLE
	12: tensor.Bool,       // BOOL
	13: tensor.BFloat16,   // BFLOAT16
	28: tensor.Uint16,     // UINT16
	29: tensor.Float8E4M3FN,
	30: tensor.Float8E5M2,
	31: tensor.Float8E4M3FNUZ,
	32: tensor.Float8E5M2FNUZ,
	33: tensor.Float8E8M0FNU,
	34: tensor.Uint32, // UINT32
	35: tensor.Uint64, // UINT64
}

// scalarTypeNames names the ScalarType values without a dtype, for errors.
var scalarTypeNames = map[int64]string{
	0: "UNKNOWN", 9: "COMPLEXHALF",
}

// dtypeOf maps a ScalarType to a dtype.
func dtypeOf(st int64) (tensor.DType, error) {
	if dt, ok := scalarTypes[st]; ok {
		return dt, nil
	}
	name := scalarTypeNames[st]
	if name == "" {
		name = "unknown"
	}
	return tensor.Invalid, fmt.Errorf("%w: scalar type %d (%s)", ErrUnsupported, st, name)
}

// staticInts decodes a list of SymInts that must all be concrete.
func staticInts(list []union, what string) ([]int64, error) {
	out := make([]int64, len(list))
	for i, u := range list {
		d, err := decodeSymInt(u)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", what, i, err)
		}
		if d.sym != "" || d.expr != "" {
			return nil, fmt.Errorf("%s[%d] is symbolic (%s%s)", what, i, d.sym, d.expr)
		}
		out[i] = d.size
	}
	return out, nil
}

// materialize builds the contiguous tensor that meta describes as a view
// (sizes, strides, storage offset, all in elements) of the storage bytes.
// Every element's byte range is checked against the storage first.
func (a *archive) materialize(meta *tensorMeta, storage []byte, what string) (*tensor.Tensor, error) {
	dt, err := dtypeOf(meta.DType)
	if err != nil {
		return nil, err
	}
	if dt == tensor.String || dt.Size() == 0 {
		return nil, fmt.Errorf("%w: dtype %s", ErrUnsupported, dt)
	}
	if meta.Layout != nil && *meta.Layout != layoutStrided {
		return nil, fmt.Errorf("%w: layout %d (only dense strided tensors are supported)", ErrUnsupported, *meta.Layout)
	}
	sizes, err := staticInts(meta.Sizes, "sizes")
	if err != nil {
		return nil, err
	}
	strides, err := staticInts(meta.Strides, "strides")
	if err != nil {
		return nil, err
	}
	if len(strides) != len(sizes) {
		return nil, fmt.Errorf("%d strides for %d sizes", len(strides), len(sizes))
	}
	offset := int64(0)
	if meta.StorageOffset != nil {
		o, err := staticInts([]union{*meta.StorageOffset}, "storage_offset")
		if err != nil {
			return nil, err
		}
		offset = o[0]
	}
	if offset < 0 {
		return nil, fmt.Errorf("negative storage offset %d", offset)
	}
	for i := range sizes {
		if sizes[i] < 0 {
			return nil, fmt.Errorf("negative size %d in %v", sizes[i], sizes)
		}
		if strides[i] < 0 {
			return nil, fmt.Errorf("negative stride %d in %v", strides[i], strides)
		}
	}
	numel := tensor.NumElements(sizes)
	es := int64(dt.Size())
	if numel < 0 || numel > math.MaxInt64/es {
		return nil, fmt.Errorf("shape %v has too many elements", sizes)
	}
	nbytes := numel * es
	if len(storage)%int(es) != 0 {
		return nil, fmt.Errorf("storage of %d bytes is not a whole number of %s elements", len(storage), dt)
	}
	if err := a.reserve(nbytes, what); err != nil {
		return nil, err
	}
	t := &tensor.Tensor{DType: dt, Shape: sizes, Data: make([]byte, nbytes)}
	if numel == 0 {
		return t, nil
	}
	if len(storage) == 0 {
		// torch writes no bytes for fake or empty-storage tensors and loads
		// them as zeros (pt2_archive._build_file_map).
		return t, nil
	}
	// The last element read is at offset + sum((size-1)*stride).
	last := offset
	for i := range sizes {
		hi, lo := bits.Mul64(uint64(sizes[i]-1), uint64(strides[i]))
		if hi != 0 || lo > math.MaxInt64 || int64(lo) > math.MaxInt64-last {
			return nil, fmt.Errorf("view sizes %v strides %v offset %d overflow", sizes, strides, offset)
		}
		last += int64(lo)
	}
	avail := int64(len(storage)) / es
	if last >= avail {
		return nil, fmt.Errorf("view sizes %v strides %v offset %d reads element %d of a storage of %d elements",
			sizes, strides, offset, last, avail)
	}
	if dt == tensor.Bool {
		defer func() {
			for i, b := range t.Data {
				if b != 0 {
					t.Data[i] = 1
				}
			}
		}()
	}
	if isContiguous(sizes, strides) {
		copy(t.Data, storage[offset*es:offset*es+nbytes])
		return t, nil
	}
	copyStrided(t.Data, storage, sizes, strides, offset, es)
	return t, nil
}

// isContiguous reports whether strides are the row-major strides of sizes
// (dims of size 1 may have any stride).
func isContiguous(sizes, strides []int64) bool {
	want := int64(1)
	for i := len(sizes) - 1; i >= 0; i-- {
		if sizes[i] != 1 && strides[i] != want {
			return false
		}
		want *= sizes[i]
	}
	return true
}

// copyStrided gathers a strided view into dst in row-major order. The
// innermost dim is copied as one run when its stride is 1.
func copyStrided(dst, src []byte, sizes, strides []int64, offset, es int64) {
	rank := len(sizes)
	if rank == 0 {
		copy(dst, src[offset*es:(offset+1)*es])
		return
	}
	inner := sizes[rank-1]
	innerStride := strides[rank-1]
	idx := make([]int64, rank-1)
	pos := int64(0)
	for {
		base := offset
		for i, k := range idx {
			base += k * strides[i]
		}
		if innerStride == 1 {
			n := copy(dst[pos:], src[base*es:(base+inner)*es])
			pos += int64(n)
		} else {
			for j := int64(0); j < inner; j++ {
				e := (base + j*innerStride) * es
				copy(dst[pos:pos+es], src[e:e+es])
				pos += es
			}
		}
		// Advance the odometer over the outer dims.
		i := rank - 2
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < sizes[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}
