// Package hlo lets lower's rules build StableHLO with package
// lower/stablehlo in the operand-directed style they were written in: each
// op is a function of its operands and is added to the block that defines
// its first operand, and shapes are go-xla's shapes.Shape (dtypes only; no
// go-xla StableHLO). It is the bridge while the rules move to
// lower/stablehlo's Block methods.
package hlo

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gomlx/go-xla/pkg/types"
	"github.com/gomlx/go-xla/pkg/types/dtypes"
	"github.com/gomlx/go-xla/pkg/types/dtypes/bfloat16"
	"github.com/gomlx/go-xla/pkg/types/shapes"
	"github.com/x448/float16"

	"github.com/xserve/xserve/lower/stablehlo"
)

// Value is a value of the program being built.
type Value = stablehlo.Value

var elems = map[dtypes.DType]stablehlo.ElementType{
	dtypes.Bool: stablehlo.Bool, dtypes.Int8: stablehlo.I8, dtypes.Int16: stablehlo.I16, dtypes.Int32: stablehlo.I32,
	dtypes.Int64: stablehlo.I64, dtypes.Uint8: stablehlo.U8, dtypes.Uint16: stablehlo.U16, dtypes.Uint32: stablehlo.U32,
	dtypes.Uint64: stablehlo.U64, dtypes.Float16: stablehlo.F16, dtypes.BFloat16: stablehlo.BF16,
	dtypes.Float32: stablehlo.F32, dtypes.Float64: stablehlo.F64,
	dtypes.F8E4M3FN: stablehlo.F8E4M3FN, dtypes.F8E4M3FNUZ: stablehlo.F8E4M3FNUZ, dtypes.F8E5M2: stablehlo.F8E5M2,
	dtypes.F8E5M2FNUZ: stablehlo.F8E5M2FNUZ, dtypes.F8E8M0FNU: stablehlo.F8E8M0FNU, dtypes.F4E2M1FN: stablehlo.F4E2M1FN,
	dtypes.S4: stablehlo.I4, dtypes.U4: stablehlo.U4,
}

// Elem maps a dtype to the emitter's element type.
func Elem(d dtypes.DType) (stablehlo.ElementType, error) {
	e, ok := elems[d]
	if !ok {
		return stablehlo.Invalid, fmt.Errorf("stablehlo: dtype %s has no StableHLO element type here", d)
	}
	return e, nil
}

// dtypes indexed by element type: the inverse of elems.
var dtypesOf = func() map[stablehlo.ElementType]dtypes.DType {
	out := make(map[stablehlo.ElementType]dtypes.DType, len(elems))
	for d, e := range elems {
		out[e] = d
	}
	return out
}()

func dtypeOf(e stablehlo.ElementType) dtypes.DType {
	if d, ok := dtypesOf[e]; ok {
		return d
	}
	return dtypes.InvalidDType
}

// TypeOf converts a shape to the emitter's tensor type.
func TypeOf(s shapes.Shape) (stablehlo.Type, error) {
	e, err := Elem(s.DType)
	if err != nil {
		return stablehlo.Type{}, err
	}
	return stablehlo.TensorOf(e, int64s(s.Dimensions)...), nil
}

// ShapeOf returns v's shape.
func ShapeOf(v *Value) shapes.Shape {
	t := v.Type()
	return shapes.Make(dtypeOf(t.Elem), ints(t.Dims)...)
}

func int64s(v []int) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func ints(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// Builder builds one module.
type Builder struct {
	m    *stablehlo.Module
	main *Function
}

// New returns a builder of a module called name.
func New(name string) *Builder { return &Builder{m: stablehlo.NewModule(name)} }

// Main returns the module's main function (created on first call).
func (b *Builder) Main() *Function {
	if b.main == nil {
		f, err := b.m.Func("main")
		if err != nil {
			panic(err) // "main" is the first function of a new module
		}
		b.main = &Function{f: f, blk: f.Body()}
	}
	return b.main
}

// Build prints the module.
func (b *Builder) Build() ([]byte, error) { return b.m.Text() }

// Function is the main function or a region (a closure) being built.
type Function struct {
	f   *stablehlo.Function // nil for a closure
	blk *stablehlo.Block
}

// Block returns the block ops are added to.
func (fn *Function) Block() *stablehlo.Block { return fn.blk }

// Closure returns a new region, to be given to reduce, scatter, ...
func (fn *Function) Closure() *Function { return &Function{blk: fn.blk.Region()} }

// Input adds an argument to a closure.
func (fn *Function) Input(s shapes.Shape) (*Value, error) {
	t, err := TypeOf(s)
	if err != nil {
		return nil, err
	}
	if fn.f != nil {
		return fn.f.AddParam("", t)
	}
	return fn.blk.AddArg(t)
}

// NamedInput adds a parameter to the main function.
func (fn *Function) NamedInput(name string, s shapes.Shape) (*Value, error) {
	t, err := TypeOf(s)
	if err != nil {
		return nil, err
	}
	if fn.f == nil {
		return nil, fmt.Errorf("stablehlo: named input %s of a closure", name)
	}
	return fn.f.AddParam(name, t)
}

// Return ends the function or closure.
func (fn *Function) Return(vals ...*Value) error {
	if fn.f != nil {
		return fn.f.Return(vals...)
	}
	return fn.blk.Return(vals...)
}

// Iota fills shape with the index along axis.
func (fn *Function) Iota(s shapes.Shape, axis int) (*Value, error) {
	t, err := TypeOf(s)
	if err != nil {
		return nil, err
	}
	return fn.blk.Iota(t, axis)
}

// ConstantFromFlatAndDimensions adds a constant from a flat Go slice.
func (fn *Function) ConstantFromFlatAndDimensions(flat any, dims ...int) (*Value, error) {
	var dt dtypes.DType
	var data []byte
	put := func(n int, size int, f func(b []byte, i int)) {
		data = make([]byte, n*size)
		for i := 0; i < n; i++ {
			f(data[i*size:], i)
		}
	}
	le := binary.LittleEndian
	switch v := flat.(type) {
	case []bool:
		dt = dtypes.Bool
		put(len(v), 1, func(b []byte, i int) {
			if v[i] {
				b[0] = 1
			}
		})
	case []int8:
		dt = dtypes.Int8
		put(len(v), 1, func(b []byte, i int) { b[0] = byte(v[i]) })
	case []uint8:
		dt = dtypes.Uint8
		put(len(v), 1, func(b []byte, i int) { b[0] = v[i] })
	case []int16:
		dt = dtypes.Int16
		put(len(v), 2, func(b []byte, i int) { le.PutUint16(b, uint16(v[i])) })
	case []uint16:
		dt = dtypes.Uint16
		put(len(v), 2, func(b []byte, i int) { le.PutUint16(b, v[i]) })
	case []int32:
		dt = dtypes.Int32
		put(len(v), 4, func(b []byte, i int) { le.PutUint32(b, uint32(v[i])) })
	case []uint32:
		dt = dtypes.Uint32
		put(len(v), 4, func(b []byte, i int) { le.PutUint32(b, v[i]) })
	case []int64:
		dt = dtypes.Int64
		put(len(v), 8, func(b []byte, i int) { le.PutUint64(b, uint64(v[i])) })
	case []uint64:
		dt = dtypes.Uint64
		put(len(v), 8, func(b []byte, i int) { le.PutUint64(b, v[i]) })
	case []float32:
		dt = dtypes.Float32
		put(len(v), 4, func(b []byte, i int) { le.PutUint32(b, math.Float32bits(v[i])) })
	case []float64:
		dt = dtypes.Float64
		put(len(v), 8, func(b []byte, i int) { le.PutUint64(b, math.Float64bits(v[i])) })
	case []float16.Float16:
		dt = dtypes.Float16
		put(len(v), 2, func(b []byte, i int) { le.PutUint16(b, v[i].Bits()) })
	case []bfloat16.BFloat16:
		dt = dtypes.BFloat16
		put(len(v), 2, func(b []byte, i int) { le.PutUint16(b, uint16(v[i])) })
	default:
		return nil, fmt.Errorf("stablehlo: constant from %T is not supported", flat)
	}
	e, err := Elem(dt)
	if err != nil {
		return nil, err
	}
	return fn.blk.Constant(stablehlo.TensorOf(e, int64s(dims)...), data)
}

func blockOf(v *Value) (*stablehlo.Block, error) {
	if v == nil {
		return nil, fmt.Errorf("stablehlo: nil operand")
	}
	return v.Block(), nil
}

type unaryFn func(*stablehlo.Block, *Value) (*Value, error)

func unary(f unaryFn, x *Value) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return f(b, x)
}

type binaryFn func(*stablehlo.Block, *Value, *Value) (*Value, error)

func binop(f binaryFn, x, y *Value) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return f(b, x, y)
}

// The elementwise ops.
func Abs(x *Value) (*Value, error)         { return unary((*stablehlo.Block).Abs, x) }
func Ceil(x *Value) (*Value, error)        { return unary((*stablehlo.Block).Ceil, x) }
func Cosine(x *Value) (*Value, error)      { return unary((*stablehlo.Block).Cosine, x) }
func Erf(x *Value) (*Value, error)         { return unary((*stablehlo.Block).Erf, x) }
func Exponential(x *Value) (*Value, error) { return unary((*stablehlo.Block).Exponential, x) }
func ExponentialMinusOne(x *Value) (*Value, error) {
	return unary((*stablehlo.Block).ExponentialMinusOne, x)
}
func Floor(x *Value) (*Value, error)            { return unary((*stablehlo.Block).Floor, x) }
func IsFinite(x *Value) (*Value, error)         { return unary((*stablehlo.Block).IsFinite, x) }
func Log(x *Value) (*Value, error)              { return unary((*stablehlo.Block).Log, x) }
func LogPlusOne(x *Value) (*Value, error)       { return unary((*stablehlo.Block).LogPlusOne, x) }
func Logistic(x *Value) (*Value, error)         { return unary((*stablehlo.Block).Logistic, x) }
func Negate(x *Value) (*Value, error)           { return unary((*stablehlo.Block).Negate, x) }
func Not(x *Value) (*Value, error)              { return unary((*stablehlo.Block).Not, x) }
func RoundNearestEven(x *Value) (*Value, error) { return unary((*stablehlo.Block).RoundNearestEven, x) }
func Rsqrt(x *Value) (*Value, error)            { return unary((*stablehlo.Block).Rsqrt, x) }
func Sign(x *Value) (*Value, error)             { return unary((*stablehlo.Block).Sign, x) }
func Sine(x *Value) (*Value, error)             { return unary((*stablehlo.Block).Sine, x) }
func Sqrt(x *Value) (*Value, error)             { return unary((*stablehlo.Block).Sqrt, x) }
func Tan(x *Value) (*Value, error)              { return unary((*stablehlo.Block).Tan, x) }
func Tanh(x *Value) (*Value, error)             { return unary((*stablehlo.Block).Tanh, x) }
func Add(x, y *Value) (*Value, error)           { return binop((*stablehlo.Block).Add, x, y) }
func And(x, y *Value) (*Value, error)           { return binop((*stablehlo.Block).And, x, y) }
func Atan2(x, y *Value) (*Value, error)         { return binop((*stablehlo.Block).Atan2, x, y) }
func Divide(x, y *Value) (*Value, error)        { return binop((*stablehlo.Block).Divide, x, y) }
func Maximum(x, y *Value) (*Value, error)       { return binop((*stablehlo.Block).Maximum, x, y) }
func Minimum(x, y *Value) (*Value, error)       { return binop((*stablehlo.Block).Minimum, x, y) }
func Multiply(x, y *Value) (*Value, error)      { return binop((*stablehlo.Block).Multiply, x, y) }
func Or(x, y *Value) (*Value, error)            { return binop((*stablehlo.Block).Or, x, y) }
func Power(x, y *Value) (*Value, error)         { return binop((*stablehlo.Block).Power, x, y) }
func Remainder(x, y *Value) (*Value, error)     { return binop((*stablehlo.Block).Remainder, x, y) }
func ShiftLeft(x, y *Value) (*Value, error)     { return binop((*stablehlo.Block).ShiftLeft, x, y) }
func ShiftRightArithmetic(x, y *Value) (*Value, error) {
	return binop((*stablehlo.Block).ShiftRightArithmetic, x, y)
}
func ShiftRightLogical(x, y *Value) (*Value, error) {
	return binop((*stablehlo.Block).ShiftRightLogical, x, y)
}
func Subtract(x, y *Value) (*Value, error) { return binop((*stablehlo.Block).Subtract, x, y) }
func Xor(x, y *Value) (*Value, error)      { return binop((*stablehlo.Block).Xor, x, y) }

// Compare compares elementwise.
func Compare(x, y *Value, dir types.ComparisonDirection, ct types.ComparisonType) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	d := map[types.ComparisonDirection]stablehlo.Direction{
		types.CompareEQ: stablehlo.EQ, types.CompareNE: stablehlo.NE, types.CompareGE: stablehlo.GE,
		types.CompareGT: stablehlo.GT, types.CompareLE: stablehlo.LE, types.CompareLT: stablehlo.LT,
	}[dir]
	c := map[types.ComparisonType]stablehlo.CompareType{
		types.CompareFloat: stablehlo.CompareFloat, types.CompareTotalOrder: stablehlo.CompareTotal,
		types.CompareSigned: stablehlo.CompareSigned, types.CompareUnsigned: stablehlo.CompareUnsign,
	}[ct]
	return b.Compare(x, y, d, c)
}

// Select picks onTrue where pred holds.
func Select(pred, onTrue, onFalse *Value) (*Value, error) {
	b, err := blockOf(pred)
	if err != nil {
		return nil, err
	}
	return b.Select(pred, onTrue, onFalse)
}

// Clamp is min(max(x, lo), hi).
func Clamp(lo, x, hi *Value) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return b.Clamp(lo, x, hi)
}

// Convert converts to dtype.
func Convert(x *Value, d dtypes.DType) (*Value, error) {
	return toElem((*stablehlo.Block).Convert, x, d)
}

// BitcastConvert reinterprets the bits as dtype.
func BitcastConvert(x *Value, d dtypes.DType) (*Value, error) {
	return toElem((*stablehlo.Block).BitcastConvert, x, d)
}

func toElem(f func(*stablehlo.Block, *Value, stablehlo.ElementType) (*Value, error), x *Value, d dtypes.DType) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	e, err := Elem(d)
	if err != nil {
		return nil, err
	}
	return f(b, x, e)
}

// Reshape gives x the shape's dims.
func Reshape(x *Value, s shapes.Shape) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return b.Reshape(x, int64s(s.Dimensions)...)
}

// BroadcastInDim broadcasts x to target, operand dim i to target dim axes[i].
func BroadcastInDim(x *Value, target shapes.Shape, axes []int) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return b.BroadcastInDim(x, int64s(target.Dimensions), int64s(axes))
}

// Transpose permutes the dims.
func Transpose(x *Value, perm ...int) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return b.Transpose(x, int64s(perm)...)
}

// Reverse reverses the axes.
func Reverse(x *Value, axes ...int) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	return b.Reverse(x, int64s(axes)...)
}

// Slice takes x[starts:limits:strides].
func Slice(x *Value, starts, limits, strides []int) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	if strides == nil { // go-xla's default: stride 1
		strides = make([]int, len(starts))
		for i := range strides {
			strides[i] = 1
		}
	}
	return b.Slice(x, int64s(starts), int64s(limits), int64s(strides))
}

// Concatenate joins operands along axis.
func Concatenate(axis int, operands ...*Value) (*Value, error) {
	if len(operands) == 0 {
		return nil, fmt.Errorf("stablehlo: concatenate: no operands")
	}
	b, err := blockOf(operands[0])
	if err != nil {
		return nil, err
	}
	return b.Concatenate(axis, operands...)
}

// Pad pads x with fill.
func Pad(x, fill *Value, start, end, interior []int) (*Value, error) {
	b, err := blockOf(x)
	if err != nil {
		return nil, err
	}
	if interior == nil { // go-xla's default: no interior padding
		interior = make([]int, len(start))
	}
	return b.Pad(x, fill, int64s(start), int64s(end), int64s(interior))
}

// Gather is stablehlo.gather.
func Gather(operand, startIndices *Value, indexVectorAxis int, offsetOutputAxes, collapsedSliceAxes, operandBatchingAxes,
	startIndicesBatchingAxes, startIndexMap, sliceSizes []int, indicesAreSorted bool) (*Value, error) {
	b, err := blockOf(operand)
	if err != nil {
		return nil, err
	}
	return b.Gather(operand, startIndices, stablehlo.GatherDims{
		OffsetDims: int64s(offsetOutputAxes), CollapsedSliceDims: int64s(collapsedSliceAxes),
		OperandBatchingDims: int64s(operandBatchingAxes), StartIndicesBatchingDims: int64s(startIndicesBatchingAxes),
		StartIndexMap: int64s(startIndexMap), IndexVectorDim: int64(indexVectorAxis),
	}, int64s(sliceSizes), indicesAreSorted)
}

// Scatter is stablehlo.scatter of one input.
func Scatter(input, scatterIndices, updates *Value, updateWindowAxes, insertedWindowAxes, inputBatchingAxes,
	scatterIndicesBatchingAxes, indexedInputAxes []int, indexVectorAxis int, indicesAreSorted, uniqueIndices bool,
	updateFn *Function) (*Value, error) {
	b, err := blockOf(input)
	if err != nil {
		return nil, err
	}
	out, err := b.Scatter([]*Value{input}, scatterIndices, []*Value{updates}, stablehlo.ScatterDims{
		UpdateWindowDims: int64s(updateWindowAxes), InsertedWindowDims: int64s(insertedWindowAxes),
		InputBatchingDims: int64s(inputBatchingAxes), ScatterIndicesBatchingDims: int64s(scatterIndicesBatchingAxes),
		ScatterDimsToOperandDims: int64s(indexedInputAxes), IndexVectorDim: int64(indexVectorAxis),
	}, updateFn.blk, indicesAreSorted, uniqueIndices)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Reduce reduces x over axes with fn.
func Reduce(x, init *Value, fn *Function, axes ...int) (*Value, error) {
	out, err := MultiReduce([]*Value{x}, []*Value{init}, fn, axes...)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// MultiReduce reduces inputs together over axes with fn.
func MultiReduce(inputs, inits []*Value, fn *Function, axes ...int) ([]*Value, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("stablehlo: reduce: no inputs")
	}
	b, err := blockOf(inputs[0])
	if err != nil {
		return nil, err
	}
	return b.Reduce(inputs, inits, int64s(axes), fn.blk)
}

func pads(p [][2]int) [][2]int64 {
	if p == nil {
		return nil
	}
	out := make([][2]int64, len(p))
	for i, x := range p {
		out[i] = [2]int64{int64(x[0]), int64(x[1])}
	}
	return out
}

func orNil(v []int) []int64 {
	if v == nil {
		return nil
	}
	return int64s(v)
}

// ReduceWindow reduces windows of input with fn.
func ReduceWindow(input, init *Value, fn *Function, window, strides, inputDilations, windowDilations []int, padding [][2]int) (*Value, error) {
	out, err := MultiReduceWindow([]*Value{input}, []*Value{init}, fn, window, strides, inputDilations, windowDilations, padding)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// MultiReduceWindow reduces windows of inputs together with fn.
func MultiReduceWindow(inputs, inits []*Value, fn *Function, window, strides, inputDilations, windowDilations []int, padding [][2]int) ([]*Value, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("stablehlo: reduce_window: no inputs")
	}
	b, err := blockOf(inputs[0])
	if err != nil {
		return nil, err
	}
	return b.ReduceWindow(inputs, inits, stablehlo.Window{
		Dims: int64s(window), Strides: orNil(strides), BaseDilations: orNil(inputDilations),
		WindowDilations: orNil(windowDilations), Padding: pads(padding),
	}, fn.blk)
}

func precision(p types.DotGeneralPrecisionType) stablehlo.Precision {
	switch p {
	case types.DotGeneralPrecisionHighest:
		return stablehlo.PrecisionHighest
	case types.DotGeneralPrecisionHigh:
		return stablehlo.PrecisionHigh
	}
	return stablehlo.PrecisionDefault
}

// Convolution is stablehlo.convolution.
func Convolution(input, kernel *Value, strides []int, paddings [][2]int, inputDilations, kernelDilations []int,
	inputBatchAxis, inputChannelsAxis int, inputSpatialAxes []int,
	kernelInputChannelsAxis, kernelOutputChannelsAxis int, kernelSpatialAxes []int,
	outputBatchAxis, outputChannelsAxis int, outputSpatialAxes []int,
	channelGroupCount, batchGroupCount int, inputPrecision, _ types.DotGeneralPrecisionType) (*Value, error) {
	b, err := blockOf(input)
	if err != nil {
		return nil, err
	}
	return b.Convolution(input, kernel, stablehlo.ConvDims{
		InputBatch: int64(inputBatchAxis), InputFeature: int64(inputChannelsAxis), InputSpatial: int64s(inputSpatialAxes),
		KernelInput: int64(kernelInputChannelsAxis), KernelOutput: int64(kernelOutputChannelsAxis), KernelSpatial: int64s(kernelSpatialAxes),
		OutputBatch: int64(outputBatchAxis), OutputFeature: int64(outputChannelsAxis), OutputSpatial: int64s(outputSpatialAxes),
		Strides: orNil(strides), LhsDilation: orNil(inputDilations), RhsDilation: orNil(kernelDilations), Padding: pads(paddings),
		FeatureGroups: int64(channelGroupCount), BatchGroups: int64(batchGroupCount),
	}, precision(inputPrecision), stablehlo.Invalid)
}

// DotGeneralBuilder collects the options of a dot_general.
type DotGeneralBuilder struct {
	lhs, rhs *Value
	dims     stablehlo.DotDims
	prec     stablehlo.Precision
	out      dtypes.DType
}

// DotGeneral starts a dot_general of lhs and rhs.
func DotGeneral(lhs *Value, lhsContracting, lhsBatch []int, rhs *Value, rhsContracting, rhsBatch []int) *DotGeneralBuilder {
	return &DotGeneralBuilder{lhs: lhs, rhs: rhs, dims: stablehlo.DotDims{
		LhsBatch: int64s(lhsBatch), RhsBatch: int64s(rhsBatch), LhsContract: int64s(lhsContracting), RhsContract: int64s(rhsContracting),
	}}
}

// Precision sets the precision of both operands.
func (d *DotGeneralBuilder) Precision(lhs, _ types.DotGeneralPrecisionType) *DotGeneralBuilder {
	d.prec = precision(lhs)
	return d
}

// OutputDType sets the result dtype.
func (d *DotGeneralBuilder) OutputDType(dt dtypes.DType) *DotGeneralBuilder {
	d.out = dt
	return d
}

// Done adds the op.
func (d *DotGeneralBuilder) Done() (*Value, error) {
	b, err := blockOf(d.lhs)
	if err != nil {
		return nil, err
	}
	e := stablehlo.Invalid
	if d.out != dtypes.InvalidDType {
		if e, err = Elem(d.out); err != nil {
			return nil, err
		}
	}
	return b.DotGeneral(d.lhs, d.rhs, d.dims, d.prec, e)
}
