package stablehlo

import (
	"fmt"
	"strconv"
	"strings"
)

// Precision is the precision_config of dot_general and convolution.
type Precision string

// The precisions; PrecisionNone leaves the attribute out.
const (
	PrecisionNone    Precision = ""
	PrecisionDefault Precision = "DEFAULT"
	PrecisionHigh    Precision = "HIGH"
	PrecisionHighest Precision = "HIGHEST"
)

func precisionAttr(p Precision) []string {
	if p == PrecisionNone {
		return nil
	}
	return []string{fmt.Sprintf("precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]", p, p)}
}

// DotDims are dot_general's dimension numbers.
type DotDims struct {
	LhsBatch, RhsBatch, LhsContract, RhsContract []int64
}

// DotGeneral contracts lhs and rhs: the result has the batch dims, then
// lhs's free dims, then rhs's free dims; elem is its element type (Invalid:
// lhs's).
func (b *Block) DotGeneral(lhs, rhs *Value, d DotDims, p Precision, elem ElementType) (*Value, error) {
	if err := b.check("dot_general", []*Value{lhs, rhs}); err != nil {
		return nil, err
	}
	fail := func(why string) error {
		return shapeErr("dot_general", "%s: lhs %s, rhs %s, batching %v/%v, contracting %v/%v", why, lhs.typ, rhs.typ, d.LhsBatch, d.RhsBatch, d.LhsContract, d.RhsContract)
	}
	if len(d.LhsBatch) != len(d.RhsBatch) || len(d.LhsContract) != len(d.RhsContract) {
		return nil, fail("batching and contracting dims must pair up")
	}
	if !uniqueDims(append(append([]int64(nil), d.LhsBatch...), d.LhsContract...), lhs.typ.Rank()) ||
		!uniqueDims(append(append([]int64(nil), d.RhsBatch...), d.RhsContract...), rhs.typ.Rank()) {
		return nil, fail("dims must be distinct and in range")
	}
	for i := range d.LhsBatch {
		if lhs.typ.Dims[d.LhsBatch[i]] != rhs.typ.Dims[d.RhsBatch[i]] {
			return nil, fail("batching dims differ in size")
		}
	}
	for i := range d.LhsContract {
		if lhs.typ.Dims[d.LhsContract[i]] != rhs.typ.Dims[d.RhsContract[i]] {
			return nil, fail("contracting dims differ in size")
		}
	}
	if lhs.typ.Elem != rhs.typ.Elem {
		return nil, fail("element types differ")
	}
	var dims []int64
	for _, bd := range d.LhsBatch {
		dims = append(dims, lhs.typ.Dims[bd])
	}
	free := func(t Type, used ...[]int64) {
		skip := map[int64]bool{}
		for _, u := range used {
			for _, x := range u {
				skip[x] = true
			}
		}
		for i, s := range t.Dims {
			if !skip[int64(i)] {
				dims = append(dims, s)
			}
		}
	}
	free(lhs.typ, d.LhsBatch, d.LhsContract)
	free(rhs.typ, d.RhsBatch, d.RhsContract)
	if elem == Invalid {
		elem = lhs.typ.Elem
	}
	attr := fmt.Sprintf("dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = %s, rhs_batching_dimensions = %s, lhs_contracting_dimensions = %s, rhs_contracting_dimensions = %s>",
		intList(d.LhsBatch), intList(d.RhsBatch), intList(d.LhsContract), intList(d.RhsContract))
	return b.emit1("dot_general", []*Value{lhs, rhs}, nil, append([]string{attr}, precisionAttr(p)...), TensorOf(elem, dims...))
}

// ConvDims are convolution's dimension numbers and window settings. Nil
// strides and dilations mean 1, nil padding means 0, group counts 0 mean 1.
type ConvDims struct {
	InputBatch, InputFeature          int64
	InputSpatial                      []int64
	KernelInput, KernelOutput         int64
	KernelSpatial                     []int64
	OutputBatch, OutputFeature        int64
	OutputSpatial                     []int64
	Strides, LhsDilation, RhsDilation []int64
	Padding                           [][2]int64
	FeatureGroups, BatchGroups        int64
}

// windowDefaults fills nil strides and dilations with 1s and nil padding
// with 0s, for n dims.
func windowDefaults(n int, strides, d1, d2 []int64, pad [][2]int64) ([]int64, []int64, []int64, [][2]int64) {
	ones := func(v []int64) []int64 {
		if v != nil {
			return v
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	if pad == nil {
		pad = make([][2]int64, n)
	}
	return ones(strides), ones(d1), ones(d2), pad
}

// layout prints one side of the compact conv dimension numbers, e.g.
// [b, f, 0, 1].
func layout(rank int, a, b int64, an, bn string, spatial []int64) (string, bool) {
	labels := make([]string, rank)
	set := func(i int64, s string) bool {
		if i < 0 || i >= int64(rank) || labels[i] != "" {
			return false
		}
		labels[i] = s
		return true
	}
	ok := set(a, an) && set(b, bn)
	for i, s := range spatial {
		ok = ok && set(s, strconv.Itoa(i))
	}
	return "[" + strings.Join(labels, ", ") + "]", ok && len(spatial)+2 == rank
}

// Convolution convolves lhs with the kernel rhs.
func (b *Block) Convolution(lhs, rhs *Value, c ConvDims, p Precision, elem ElementType) (*Value, error) {
	if err := b.check("convolution", []*Value{lhs, rhs}); err != nil {
		return nil, err
	}
	n := len(c.InputSpatial)
	fail := func(why string) error {
		return shapeErr("convolution", "%s: lhs %s, rhs %s", why, lhs.typ, rhs.typ)
	}
	in, ok1 := layout(lhs.typ.Rank(), c.InputBatch, c.InputFeature, "b", "f", c.InputSpatial)
	kn, ok2 := layout(rhs.typ.Rank(), c.KernelInput, c.KernelOutput, "i", "o", c.KernelSpatial)
	out, ok3 := layout(n+2, c.OutputBatch, c.OutputFeature, "b", "f", c.OutputSpatial)
	if !ok1 || !ok2 || !ok3 || len(c.KernelSpatial) != n || len(c.OutputSpatial) != n {
		return nil, fail(fmt.Sprintf("dimension numbers %s x %s -> %s do not fit", in, kn, out))
	}
	c.Strides, c.LhsDilation, c.RhsDilation, c.Padding = windowDefaults(n, c.Strides, c.LhsDilation, c.RhsDilation, c.Padding)
	c.FeatureGroups, c.BatchGroups = max(c.FeatureGroups, 1), max(c.BatchGroups, 1)
	if why := convCheck(lhs.typ, rhs.typ, c); why != "" {
		return nil, fail(why)
	}
	dims := convOutDims(lhs.typ, rhs.typ, c)
	if elem == Invalid {
		elem = lhs.typ.Elem
	}
	padRows := make([]string, n)
	for i, pd := range c.Padding {
		padRows[i] = fmt.Sprintf("[%d, %d]", pd[0], pd[1])
	}
	attrs := []string{
		"window_strides = " + i64Array(c.Strides),
		fmt.Sprintf("padding = dense<[%s]> : tensor<%dx2xi64>", strings.Join(padRows, ", "), n),
		"lhs_dilation = " + i64Array(c.LhsDilation),
		"rhs_dilation = " + i64Array(c.RhsDilation),
		"dimension_numbers = #stablehlo.conv<" + in + "x" + kn + "->" + out + ">",
		fmt.Sprintf("feature_group_count = %d : i64", c.FeatureGroups),
		fmt.Sprintf("batch_group_count = %d : i64", c.BatchGroups),
	}
	if n == 0 {
		attrs[1] = "padding = dense<> : tensor<0x2xi64>"
	}
	return b.emit1("convolution", []*Value{lhs, rhs}, nil, append(attrs, precisionAttr(p)...), TensorOf(elem, dims...))
}

// convCheck returns what is wrong with a convolution of lhs and rhs by c
// (window and groups filled in), or "".
func convCheck(lhs, rhs Type, c ConvDims) string {
	n := len(c.InputSpatial)
	if len(c.Strides) != n || len(c.LhsDilation) != n || len(c.RhsDilation) != n || len(c.Padding) != n {
		return fmt.Sprintf("strides %v, dilations %v/%v, padding %v; want %d each", c.Strides, c.LhsDilation, c.RhsDilation, c.Padding, n)
	}
	fg, bg := c.FeatureGroups, c.BatchGroups
	inF, kIn, kOut := lhs.Dims[c.InputFeature], rhs.Dims[c.KernelInput], rhs.Dims[c.KernelOutput]
	batch := lhs.Dims[c.InputBatch]
	if inF%fg != 0 || inF/fg != kIn || kOut%fg != 0 || batch%bg != 0 || kOut%bg != 0 || (fg > 1 && bg > 1) {
		return fmt.Sprintf("input features %d, kernel input features %d, output features %d do not fit feature_group_count %d, batch_group_count %d", inF, kIn, kOut, fg, bg)
	}
	if lhs.Elem != rhs.Elem {
		return "element types differ"
	}
	for i := range n {
		if c.Strides[i] < 1 || c.LhsDilation[i] < 1 || c.RhsDilation[i] < 1 {
			return fmt.Sprintf("strides %v and dilations %v/%v must be >= 1", c.Strides, c.LhsDilation, c.RhsDilation)
		}
	}
	return ""
}

// convOutDims returns the result dims of a valid convolution (convCheck).
func convOutDims(lhs, rhs Type, c ConvDims) []int64 {
	n := len(c.InputSpatial)
	dims := make([]int64, n+2)
	dims[c.OutputBatch] = lhs.Dims[c.InputBatch] / c.BatchGroups
	dims[c.OutputFeature] = rhs.Dims[c.KernelOutput]
	for i := range n {
		x := lhs.Dims[c.InputSpatial[i]]
		k := rhs.Dims[c.KernelSpatial[i]]
		dx := max((x-1)*c.LhsDilation[i]+1, 0) + c.Padding[i][0] + c.Padding[i][1]
		dk := max((k-1)*c.RhsDilation[i]+1, 0)
		if dx >= dk {
			dims[c.OutputSpatial[i]] = (dx-dk)/c.Strides[i] + 1
		}
	}
	return dims
}

func scalarsOf(vs []*Value) []Type {
	out := make([]Type, len(vs))
	for i, v := range vs {
		out[i] = TensorOf(v.typ.Elem)
	}
	return out
}

// reduceOperands checks the inputs and initial values of reduce and
// reduce_window and returns them as the op's operands.
func (b *Block) reduceOperands(name string, inputs, inits []*Value) ([]*Value, error) {
	ops := append(append([]*Value(nil), inputs...), inits...)
	if err := b.check(name, ops); err != nil {
		return nil, err
	}
	if len(inputs) == 0 || len(inputs) != len(inits) {
		return nil, shapeErr(name, "%d inputs and %d initial values", len(inputs), len(inits))
	}
	for i, in := range inputs {
		if !in.typ.SameShape(inputs[0].typ) || inits[i].typ.Rank() != 0 || inits[i].typ.Elem != in.typ.Elem {
			return nil, shapeErr(name, "inputs (%s) and initial values (%s) do not agree", typesString(inputs), typesString(inits))
		}
	}
	return ops, nil
}

// Reduce reduces inputs over dims with body, a region taking (accumulators,
// elements) as scalars and returning the new accumulators; inits are the
// scalar initial values.
func (b *Block) Reduce(inputs, inits []*Value, dims []int64, body *Block) ([]*Value, error) {
	ops, err := b.reduceOperands("reduce", inputs, inits)
	if err != nil {
		return nil, err
	}
	first := inputs[0].typ
	if !uniqueDims(dims, first.Rank()) {
		return nil, shapeErr("reduce", "dimensions %v for %s", dims, first)
	}
	elems := scalarsOf(inputs)
	if err := checkRegion("reduce", body, append(elems, elems...), elems); err != nil {
		return nil, err
	}
	skip := make([]bool, first.Rank())
	for _, d := range dims {
		skip[d] = true
	}
	var keep []int64
	for i, s := range first.Dims {
		if !skip[i] {
			keep = append(keep, s)
		}
	}
	results := make([]Type, len(inputs))
	for i, in := range inputs {
		results[i] = TensorOf(in.typ.Elem, keep...)
	}
	return b.emit("reduce", ops, []*Block{body}, []string{"dimensions = " + i64Array(dims)}, results...)
}

// Window describes reduce_window's window. Nil strides and dilations mean
// 1, nil padding means 0.
type Window struct {
	Dims, Strides, BaseDilations, WindowDilations []int64
	Padding                                       [][2]int64
}

// ReduceWindow reduces each window of inputs with body (as Reduce).
func (b *Block) ReduceWindow(inputs, inits []*Value, w Window, body *Block) ([]*Value, error) {
	ops, err := b.reduceOperands("reduce_window", inputs, inits)
	if err != nil {
		return nil, err
	}
	first := inputs[0].typ
	r := first.Rank()
	strides, bd, wd, pad := windowDefaults(r, w.Strides, w.BaseDilations, w.WindowDilations, w.Padding)
	if len(w.Dims) != r || len(strides) != r || len(bd) != r || len(wd) != r || len(pad) != r {
		return nil, shapeErr("reduce_window", "window %v, strides %v, dilations %v/%v, padding %v for rank-%d %s", w.Dims, strides, bd, wd, pad, r, first)
	}
	elems := scalarsOf(inputs)
	if err := checkRegion("reduce_window", body, append(elems, elems...), elems); err != nil {
		return nil, err
	}
	dims := make([]int64, r)
	padRows := make([]string, r)
	for i, x := range first.Dims {
		if w.Dims[i] < 1 || strides[i] < 1 || bd[i] < 1 || wd[i] < 1 {
			return nil, shapeErr("reduce_window", "window %v, strides %v and dilations %v/%v must be >= 1", w.Dims, strides, bd, wd)
		}
		dx := max((x-1)*bd[i]+1, 0) + pad[i][0] + pad[i][1]
		dk := (w.Dims[i]-1)*wd[i] + 1
		if dx >= dk {
			dims[i] = (dx-dk)/strides[i] + 1
		}
		padRows[i] = fmt.Sprintf("[%d, %d]", pad[i][0], pad[i][1])
	}
	attrs := []string{
		"window_dimensions = " + i64Array(w.Dims),
		"window_strides = " + i64Array(strides),
		"base_dilations = " + i64Array(bd),
		"window_dilations = " + i64Array(wd),
		fmt.Sprintf("padding = dense<[%s]> : tensor<%dx2xi64>", strings.Join(padRows, ", "), r),
	}
	results := make([]Type, len(inputs))
	for i, in := range inputs {
		results[i] = TensorOf(in.typ.Elem, dims...)
	}
	return b.emit("reduce_window", ops, []*Block{body}, attrs, results...)
}
