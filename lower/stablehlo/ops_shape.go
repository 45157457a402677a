package stablehlo

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Constant adds a constant of type t from its raw little-endian data (one
// byte per element for i1 and the 4-bit types), as package tensor stores it.
func (b *Block) Constant(t Type, data []byte) (*Value, error) {
	if err := b.check("constant", nil); err != nil {
		return nil, err
	}
	if err := t.valid(); err != nil {
		return nil, shapeErr("constant", "%v", err)
	}
	size := max(t.Elem.Bits()/8, 1)
	n := t.NumElements()
	if int64(len(data)) != n*int64(size) {
		return nil, shapeErr("constant", "%d bytes of data for %s, want %d", len(data), t, n*int64(size))
	}
	attr := "value = dense<" + denseLiteral(t, data, size) + "> : " + t.String()
	return b.emit1("constant", nil, nil, []string{attr}, t)
}

// ScalarConstant adds a rank-0 constant of elem holding v (converted as Go
// converts float64 to the type).
func (b *Block) ScalarConstant(elem ElementType, v float64) (*Value, error) {
	t := TensorOf(elem)
	data := make([]byte, max(elem.Bits()/8, 1))
	switch elem {
	case Bool:
		if v != 0 {
			data[0] = 1
		}
	case I8, U8:
		data[0] = byte(int64(v))
	case I16, U16:
		binary.LittleEndian.PutUint16(data, uint16(int64(v)))
	case I32, U32:
		binary.LittleEndian.PutUint32(data, uint32(int64(v)))
	case I64:
		binary.LittleEndian.PutUint64(data, uint64(int64(v)))
	case U64:
		binary.LittleEndian.PutUint64(data, uint64(v))
	case F32:
		binary.LittleEndian.PutUint32(data, math.Float32bits(float32(v)))
	case F64:
		binary.LittleEndian.PutUint64(data, math.Float64bits(v))
	case F16:
		binary.LittleEndian.PutUint16(data, f16Bits(float32(v)))
	case BF16:
		binary.LittleEndian.PutUint16(data, bf16Bits(float32(v)))
	default:
		return nil, shapeErr("constant", "invalid element type %d", elem)
	}
	return b.Constant(t, data)
}

// bf16Bits converts to bfloat16, rounding to nearest even.
func bf16Bits(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return uint16(bits>>16) | 0x40 // a quiet NaN
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}

// f16Bits converts to IEEE half precision, rounding to nearest even.
func f16Bits(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23&0xff) - 127 + 15
	mant := bits & 0x7fffff
	switch {
	case bits&0x7fffffff > 0x7f800000:
		return sign | 0x7e00
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - exp)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > 1<<(shift-1) || (rem == 1<<(shift-1) && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// denseLiteral prints a splat as one element, anything else as hex bytes.
func denseLiteral(t Type, data []byte, size int) string {
	n := int(t.NumElements())
	splat := n > 0
	for i := 1; i < n && splat; i++ {
		for j := 0; j < size; j++ {
			if data[i*size+j] != data[j] {
				splat = false
				break
			}
		}
	}
	if n == 0 {
		return ""
	}
	if splat {
		return elementLiteral(t.Elem, data[:size])
	}
	if t.Elem == Bool { // hex i1 data: one byte per element, 0 or 1
		parts := make([]string, n)
		for i := range parts {
			parts[i] = strconv.FormatBool(data[i] != 0)
		}
		return nested(t.Dims, parts)
	}
	return `"0x` + strings.ToUpper(hex.EncodeToString(data)) + `"`
}

// nested prints elements as nested lists following dims.
func nested(dims []int64, elems []string) string {
	if len(dims) == 0 {
		return elems[0]
	}
	step := len(elems) / int(dims[0])
	parts := make([]string, dims[0])
	for i := range parts {
		parts[i] = nested(dims[1:], elems[i*step:(i+1)*step])
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func elementLiteral(e ElementType, d []byte) string {
	switch e {
	case Bool:
		return strconv.FormatBool(d[0] != 0)
	case I8:
		return strconv.FormatInt(int64(int8(d[0])), 10)
	case U8:
		return strconv.FormatUint(uint64(d[0]), 10)
	case I16:
		return strconv.FormatInt(int64(int16(binary.LittleEndian.Uint16(d))), 10)
	case U16:
		return strconv.FormatUint(uint64(binary.LittleEndian.Uint16(d)), 10)
	case I32:
		return strconv.FormatInt(int64(int32(binary.LittleEndian.Uint32(d))), 10)
	case U32:
		return strconv.FormatUint(uint64(binary.LittleEndian.Uint32(d)), 10)
	case I64:
		return strconv.FormatInt(int64(binary.LittleEndian.Uint64(d)), 10)
	case U64:
		return strconv.FormatUint(binary.LittleEndian.Uint64(d), 10)
	case F32:
		bits := binary.LittleEndian.Uint32(d)
		f := math.Float32frombits(bits)
		if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
			return fmt.Sprintf("0x%08X", bits)
		}
		return floatLiteral(strconv.FormatFloat(float64(f), 'g', -1, 32))
	case F64:
		bits := binary.LittleEndian.Uint64(d)
		f := math.Float64frombits(bits)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Sprintf("0x%016X", bits)
		}
		return floatLiteral(strconv.FormatFloat(f, 'g', -1, 64))
	case I4:
		return strconv.Itoa(int(int8(d[0]<<4) >> 4))
	case U4:
		return strconv.Itoa(int(d[0] & 0xf))
	case F4E2M1FN:
		return fmt.Sprintf("0x%X", d[0]&0xf) // exact bits
	case F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0FNU:
		return fmt.Sprintf("0x%02X", d[0]) // exact bits
	}
	return fmt.Sprintf("0x%04X", binary.LittleEndian.Uint16(d)) // f16, bf16: exact bits
}

// floatLiteral makes Go's shortest float text an MLIR float literal, which
// needs a decimal point: "2" -> "2.0", "1e-05" -> "1.0e-05".
func floatLiteral(s string) string {
	if strings.ContainsAny(s, ".") {
		return s
	}
	if i := strings.IndexAny(s, "e"); i >= 0 {
		return s[:i] + ".0" + s[i:]
	}
	return s + ".0"
}

// Iota fills t with the index along dim.
func (b *Block) Iota(t Type, dim int) (*Value, error) {
	if err := t.valid(); err != nil {
		return nil, shapeErr("iota", "%v", err)
	}
	if dim < 0 || dim >= t.Rank() || t.Elem == Bool {
		return nil, shapeErr("iota", "iota_dimension %d of %s; want a dim in [0, %d) of a numeric type", dim, t, t.Rank())
	}
	return b.emit1("iota", nil, nil, []string{fmt.Sprintf("iota_dimension = %d : i64", dim)}, t)
}

// Reshape gives x the dims, keeping the number of elements.
func (b *Block) Reshape(x *Value, dims ...int64) (*Value, error) {
	if err := b.check("reshape", []*Value{x}); err != nil {
		return nil, err
	}
	out := TensorOf(x.typ.Elem, dims...)
	if err := out.valid(); err != nil || out.NumElements() != x.typ.NumElements() {
		return nil, shapeErr("reshape", "%s to %s changes the number of elements", x.typ, out)
	}
	return b.emit1("reshape", []*Value{x}, nil, nil, out)
}

// BroadcastInDim broadcasts x to dims: operand dim i becomes result dim
// bdims[i], of the same size or broadcast from size 1.
func (b *Block) BroadcastInDim(x *Value, dims []int64, bdims []int64) (*Value, error) {
	if err := b.check("broadcast_in_dim", []*Value{x}); err != nil {
		return nil, err
	}
	out := TensorOf(x.typ.Elem, dims...)
	if len(bdims) != x.typ.Rank() || !uniqueDims(bdims, out.Rank()) {
		return nil, shapeErr("broadcast_in_dim", "broadcast_dimensions %v for %s to %s; want %d distinct dims in [0, %d)", bdims, x.typ, out, x.typ.Rank(), out.Rank())
	}
	for i, d := range bdims {
		if x.typ.Dims[i] != 1 && x.typ.Dims[i] != dims[d] {
			return nil, shapeErr("broadcast_in_dim", "dim %d of %s (size %d) cannot become dim %d of %s", i, x.typ, x.typ.Dims[i], d, out)
		}
	}
	return b.emit1("broadcast_in_dim", []*Value{x}, nil, []string{"broadcast_dimensions = " + i64Array(bdims)}, out)
}

// Transpose permutes the dims of x: result dim i is operand dim perm[i].
func (b *Block) Transpose(x *Value, perm ...int64) (*Value, error) {
	if err := b.check("transpose", []*Value{x}); err != nil {
		return nil, err
	}
	if !isPermutation(perm, x.typ.Rank()) {
		return nil, shapeErr("transpose", "permutation %v is not a permutation of the %d dims of %s", perm, x.typ.Rank(), x.typ)
	}
	dims := make([]int64, len(perm))
	for i, p := range perm {
		dims[i] = x.typ.Dims[p]
	}
	return b.emit1("transpose", []*Value{x}, nil, []string{"permutation = " + i64Array(perm)}, TensorOf(x.typ.Elem, dims...))
}

// Slice takes x[start:limit:stride] in every dim; nil strides are all 1.
func (b *Block) Slice(x *Value, start, limit, strides []int64) (*Value, error) {
	if err := b.check("slice", []*Value{x}); err != nil {
		return nil, err
	}
	r := x.typ.Rank()
	if strides == nil {
		strides = ones(r)
	}
	if len(start) != r || len(limit) != r || len(strides) != r {
		return nil, shapeErr("slice", "start %v, limit %v, strides %v for rank-%d %s", start, limit, strides, r, x.typ)
	}
	dims := make([]int64, r)
	for i := range dims {
		if start[i] < 0 || start[i] > limit[i] || limit[i] > x.typ.Dims[i] || strides[i] < 1 {
			return nil, shapeErr("slice", "dim %d: start %d, limit %d, stride %d out of range for %s", i, start[i], limit[i], strides[i], x.typ)
		}
		dims[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i]
	}
	attrs := []string{"start_indices = " + i64Array(start), "limit_indices = " + i64Array(limit), "strides = " + i64Array(strides)}
	return b.emit1("slice", []*Value{x}, nil, attrs, TensorOf(x.typ.Elem, dims...))
}

func checkStarts(op string, x *Value, starts []*Value) error {
	if len(starts) != x.typ.Rank() {
		return shapeErr(op, "%d start indices for %s", len(starts), x.typ)
	}
	for i, s := range starts {
		if s.typ.Rank() != 0 || !s.typ.Elem.IsInt() || s.typ.Elem != starts[0].typ.Elem {
			return shapeErr(op, "start index %d is %s; want integer scalars of one type", i, s.typ)
		}
	}
	return nil
}

// DynamicSlice takes a slice of sizes at run-time start indices (clamped
// into range, as the spec says).
func (b *Block) DynamicSlice(x *Value, starts []*Value, sizes []int64) (*Value, error) {
	ops := append([]*Value{x}, starts...)
	if err := b.check("dynamic_slice", ops); err != nil {
		return nil, err
	}
	if err := checkStarts("dynamic_slice", x, starts); err != nil {
		return nil, err
	}
	if len(sizes) != x.typ.Rank() {
		return nil, shapeErr("dynamic_slice", "slice_sizes %v for %s", sizes, x.typ)
	}
	for i, s := range sizes {
		if s < 0 || s > x.typ.Dims[i] {
			return nil, shapeErr("dynamic_slice", "slice size %d of dim %d exceeds %s", s, i, x.typ)
		}
	}
	return b.emit1("dynamic_slice", ops, nil, []string{"slice_sizes = " + i64Array(sizes)}, TensorOf(x.typ.Elem, sizes...))
}

// DynamicUpdateSlice writes update into x at run-time start indices.
func (b *Block) DynamicUpdateSlice(x, update *Value, starts []*Value) (*Value, error) {
	ops := append([]*Value{x, update}, starts...)
	if err := b.check("dynamic_update_slice", ops); err != nil {
		return nil, err
	}
	if err := checkStarts("dynamic_update_slice", x, starts); err != nil {
		return nil, err
	}
	if update.typ.Elem != x.typ.Elem || update.typ.Rank() != x.typ.Rank() {
		return nil, shapeErr("dynamic_update_slice", "update %s does not fit operand %s", update.typ, x.typ)
	}
	for i, d := range update.typ.Dims {
		if d > x.typ.Dims[i] {
			return nil, shapeErr("dynamic_update_slice", "update %s is larger than operand %s in dim %d", update.typ, x.typ, i)
		}
	}
	return b.emit1("dynamic_update_slice", ops, nil, nil, x.typ)
}

// Concatenate joins xs along dim.
func (b *Block) Concatenate(dim int, xs ...*Value) (*Value, error) {
	if err := b.check("concatenate", xs); err != nil {
		return nil, err
	}
	if len(xs) == 0 {
		return nil, shapeErr("concatenate", "no operands")
	}
	first := xs[0].typ
	if dim < 0 || dim >= first.Rank() {
		return nil, shapeErr("concatenate", "dimension %d out of range for %s", dim, first)
	}
	dims := append([]int64(nil), first.Dims...)
	for _, x := range xs[1:] {
		ok := x.typ.Elem == first.Elem && x.typ.Rank() == first.Rank()
		for i := 0; ok && i < first.Rank(); i++ {
			ok = i == dim || x.typ.Dims[i] == first.Dims[i]
		}
		if !ok {
			return nil, shapeErr("concatenate", "operands %s do not agree outside dimension %d", typesString(xs), dim)
		}
		dims[dim] += x.typ.Dims[dim]
	}
	return b.emit1("concatenate", xs, nil, []string{fmt.Sprintf("dimension = %d : i64", dim)}, TensorOf(first.Elem, dims...))
}

// Pad pads x with the scalar pad: low and high edges (negative values cut)
// and interior padding between elements (nil: none).
func (b *Block) Pad(x, pad *Value, low, high, interior []int64) (*Value, error) {
	if err := b.check("pad", []*Value{x, pad}); err != nil {
		return nil, err
	}
	r := x.typ.Rank()
	if interior == nil {
		interior = make([]int64, r)
	}
	if pad.typ.Rank() != 0 || pad.typ.Elem != x.typ.Elem || len(low) != r || len(high) != r || len(interior) != r {
		return nil, shapeErr("pad", "operand %s, padding value %s, low %v, high %v, interior %v", x.typ, pad.typ, low, high, interior)
	}
	dims := make([]int64, r)
	for i, d := range x.typ.Dims {
		if interior[i] < 0 {
			return nil, shapeErr("pad", "negative interior padding %v", interior)
		}
		dims[i] = low[i] + high[i] + d + max(d-1, 0)*interior[i]
		if dims[i] < 0 {
			return nil, shapeErr("pad", "dim %d of %s becomes negative with low %d, high %d", i, x.typ, low[i], high[i])
		}
	}
	attrs := []string{"edge_padding_low = " + i64Array(low), "edge_padding_high = " + i64Array(high), "interior_padding = " + i64Array(interior)}
	return b.emit1("pad", []*Value{x, pad}, nil, attrs, TensorOf(x.typ.Elem, dims...))
}

// Reverse reverses x along dims.
func (b *Block) Reverse(x *Value, dims ...int64) (*Value, error) {
	if err := b.check("reverse", []*Value{x}); err != nil {
		return nil, err
	}
	if !uniqueDims(dims, x.typ.Rank()) {
		return nil, shapeErr("reverse", "dimensions %v for %s", dims, x.typ)
	}
	return b.emit1("reverse", []*Value{x}, nil, []string{"dimensions = " + i64Array(dims)}, x.typ)
}

// GatherDims are gather's dimension numbers, as the spec names them.
type GatherDims struct {
	OffsetDims, CollapsedSliceDims, OperandBatchingDims, StartIndicesBatchingDims, StartIndexMap []int64
	IndexVectorDim                                                                               int64
}

func (d GatherDims) attr() string {
	return dimNumbers("gather", d.IndexVectorDim, "offset_dims", d.OffsetDims, "collapsed_slice_dims", d.CollapsedSliceDims,
		"operand_batching_dims", d.OperandBatchingDims, "start_indices_batching_dims", d.StartIndicesBatchingDims, "start_index_map", d.StartIndexMap)
}

// dimNumbers prints #stablehlo.<kind><name = [..], ..., index_vector_dim = n>
// from name, list pairs; the batching pairs (3rd and 4th) only when set.
func dimNumbers(kind string, indexVectorDim int64, pairs ...any) string {
	var parts []string
	for i := 0; i < len(pairs); i += 2 {
		list := pairs[i+1].([]int64)
		if (i == 4 || i == 6) && len(list) == 0 {
			continue
		}
		parts = append(parts, pairs[i].(string)+" = "+intList(list))
	}
	parts = append(parts, fmt.Sprintf("index_vector_dim = %d", indexVectorDim))
	return "#stablehlo." + kind + "<" + strings.Join(parts, ", ") + ">"
}

// Gather takes slices of sizes from x at the start indices in indices.
func (b *Block) Gather(x, indices *Value, d GatherDims, sizes []int64, sorted bool) (*Value, error) {
	if err := b.check("gather", []*Value{x, indices}); err != nil {
		return nil, err
	}
	dims, why := gatherDims(x.typ, indices.typ, d, sizes)
	if why != "" {
		return nil, shapeErr("gather", "%s (operand %s, indices %s, slice_sizes %v, %s)", why, x.typ, indices.typ, sizes, d.attr())
	}
	attrs := []string{"dimension_numbers = " + d.attr(), "slice_sizes = " + i64Array(sizes), fmt.Sprintf("indices_are_sorted = %t", sorted)}
	return b.emit1("gather", []*Value{x, indices}, nil, attrs, TensorOf(x.typ.Elem, dims...))
}

// gatherOffsets returns the slice sizes of the dims a gather keeps (not
// collapsed nor batching), or what is wrong with sizes.
func gatherOffsets(x Type, d GatherDims, sizes []int64) ([]int64, string) {
	skipped := append(append([]int64(nil), d.CollapsedSliceDims...), d.OperandBatchingDims...)
	if !uniqueDims(skipped, x.Rank()) {
		return nil, "collapsed and batching dims must be distinct operand dims"
	}
	var offsets []int64
	for i, s := range sizes {
		isSkipped := slices.Contains(skipped, int64(i))
		if s < 0 || s > x.Dims[i] || (isSkipped && s > 1) {
			return nil, fmt.Sprintf("slice size %d of dim %d out of range", s, i)
		}
		if !isSkipped {
			offsets = append(offsets, s)
		}
	}
	return offsets, ""
}

// gatherDims returns the result dims of a gather from x at indices, or
// what is wrong with it.
func gatherDims(x, indices Type, d GatherDims, sizes []int64) ([]int64, string) {
	r, ir := x.Rank(), indices.Rank()
	if !indices.Elem.IsInt() || len(sizes) != r || d.IndexVectorDim < 0 || d.IndexVectorDim > int64(ir) {
		return nil, "indices must be integers, slice_sizes one per operand dim, index_vector_dim within the indices' rank"
	}
	ivd := int64(1)
	if d.IndexVectorDim < int64(ir) {
		ivd = indices.Dims[d.IndexVectorDim]
	}
	if int64(len(d.StartIndexMap)) != ivd || !uniqueDims(d.StartIndexMap, r) {
		return nil, "start_index_map must map each index component to a distinct operand dim"
	}
	offsets, why := gatherOffsets(x, d, sizes)
	if why != "" {
		return nil, why
	}
	var batch []int64
	for i, s := range indices.Dims {
		if int64(i) != d.IndexVectorDim {
			batch = append(batch, s)
		}
	}
	outRank := len(batch) + len(offsets)
	if len(d.OffsetDims) != len(offsets) || !uniqueDims(d.OffsetDims, outRank) {
		return nil, "offset_dims must name one distinct result dim per non-collapsed slice dim"
	}
	dims := make([]int64, outRank)
	oi, bi := 0, 0
	for i := range dims {
		if slices.Contains(d.OffsetDims, int64(i)) {
			dims[i] = offsets[oi]
			oi++
		} else {
			dims[i] = batch[bi]
			bi++
		}
	}
	return dims, ""
}

// ScatterDims are scatter's dimension numbers, as the spec names them.
type ScatterDims struct {
	UpdateWindowDims, InsertedWindowDims, InputBatchingDims, ScatterIndicesBatchingDims, ScatterDimsToOperandDims []int64
	IndexVectorDim                                                                                                int64
}

func (d ScatterDims) attr() string {
	return dimNumbers("scatter", d.IndexVectorDim, "update_window_dims", d.UpdateWindowDims, "inserted_window_dims", d.InsertedWindowDims,
		"input_batching_dims", d.InputBatchingDims, "scatter_indices_batching_dims", d.ScatterIndicesBatchingDims, "scatter_dims_to_operand_dims", d.ScatterDimsToOperandDims)
}

// Scatter combines updates into inputs at indices with update, a region
// taking (input element, update element) scalars per input and returning
// the new elements.
func (b *Block) Scatter(inputs []*Value, indices *Value, updates []*Value, d ScatterDims, update *Block, sorted, unique bool) ([]*Value, error) {
	ops := append(append(append([]*Value(nil), inputs...), indices), updates...)
	if err := b.check("scatter", ops); err != nil {
		return nil, err
	}
	if len(inputs) == 0 || len(inputs) != len(updates) || !indices.typ.Elem.IsInt() {
		return nil, shapeErr("scatter", "%d inputs, %d updates, indices %s", len(inputs), len(updates), indices.typ)
	}
	r := inputs[0].typ.Rank()
	ivd := int64(1)
	if d.IndexVectorDim < int64(indices.typ.Rank()) {
		ivd = indices.typ.Dims[d.IndexVectorDim]
	}
	if int64(len(d.ScatterDimsToOperandDims)) != ivd || !uniqueDims(d.ScatterDimsToOperandDims, r) {
		return nil, shapeErr("scatter", "scatter_dims_to_operand_dims %v for indices %s and inputs %s", d.ScatterDimsToOperandDims, indices.typ, inputs[0].typ)
	}
	wantUpdRank := indices.typ.Rank() - 1 + len(d.UpdateWindowDims)
	if d.IndexVectorDim == int64(indices.typ.Rank()) {
		wantUpdRank++
	}
	if len(d.UpdateWindowDims)+len(d.InsertedWindowDims)+len(d.InputBatchingDims) != r {
		return nil, shapeErr("scatter", "update_window_dims %v, inserted_window_dims %v and input_batching_dims %v do not cover the %d dims of %s", d.UpdateWindowDims, d.InsertedWindowDims, d.InputBatchingDims, r, inputs[0].typ)
	}
	var elems []Type
	for i, in := range inputs {
		if !in.typ.SameShape(inputs[0].typ) || updates[i].typ.Elem != in.typ.Elem || updates[i].typ.Rank() != wantUpdRank {
			return nil, shapeErr("scatter", "input %s and update %s do not fit (want updates of rank %d)", in.typ, updates[i].typ, wantUpdRank)
		}
		elems = append(elems, TensorOf(in.typ.Elem))
	}
	if err := checkRegion("scatter", update, append(elems, elems...), elems); err != nil {
		return nil, err
	}
	attrs := []string{"scatter_dimension_numbers = " + d.attr(), fmt.Sprintf("indices_are_sorted = %t", sorted), fmt.Sprintf("unique_indices = %t", unique)}
	results := make([]Type, len(inputs))
	for i, in := range inputs {
		results[i] = in.typ
	}
	return b.emit("scatter", ops, []*Block{update}, attrs, results...)
}

// checkRegion checks a region's argument and result types.
func checkRegion(op string, r *Block, args, results []Type) error {
	if r == nil {
		return shapeErr(op, "no region")
	}
	if len(r.args) != len(args) {
		return shapeErr(op, "region takes %d arguments, want %d (%s)", len(r.args), len(args), typeList(args))
	}
	for i, a := range r.args {
		if !a.typ.Equal(args[i]) {
			return shapeErr(op, "region argument %d is %s, want %s", i, a.typ, args[i])
		}
	}
	if !r.returned {
		return shapeErr(op, "region does not return")
	}
	got := r.results()
	if results != nil && typeList(got) != typeList(results) {
		return shapeErr(op, "region returns (%s), want (%s)", typeList(got), typeList(results))
	}
	return nil
}
