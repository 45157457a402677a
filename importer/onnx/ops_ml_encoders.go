package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// LabelEncoder, CategoryMapper and OneHotEncoder: a key lookup (strings on
// the host by xserve.string_lookup, numbers in the program by comparison
// with the keys) giving each element's key index or -1, then the value at
// that index (numbers gathered in the program, strings on the host by
// xserve.string_take) or the default.

func registerMLEncoders(cs converters) {
	cs.register(mlDomain, "LabelEncoder", 1, labelEncoderConvert)
	cs.register(mlDomain, "CategoryMapper", 1, categoryMapperConvert)
	cs.register(mlDomain, "OneHotEncoder", 1, oneHotEncoderConvert)
}

// mlTable is one side of an encoder's mapping: strings, or numbers of a
// dtype.
type mlTable struct {
	strs [][]byte
	nums []float64
	dt   tensor.DType
}

func (t mlTable) len() int {
	if t.dt == tensor.String {
		return len(t.strs)
	}
	return len(t.nums)
}

func intsTable(v []int64) mlTable {
	t := mlTable{dt: tensor.Int64}
	for _, e := range v {
		t.nums = append(t.nums, float64(e))
	}
	return t
}

// labelEncoderTables reads LabelEncoder's keys, values and default, per
// opset: classes_strings (1), keys_*/values_* (2), *_tensor (4).
func labelEncoderTables(c *Ctx, in tensor.DType) (keys, values, def mlTable, err error) {
	if c.Opset < 2 {
		classes := c.Attr("classes_strings")
		if classes == nil {
			return keys, values, def, fmt.Errorf("classes_strings is required")
		}
		idx := make([]int64, len(classes.Strings))
		for i := range idx {
			idx[i] = int64(i)
		}
		if in == tensor.String {
			return mlTable{strs: classes.Strings, dt: tensor.String}, intsTable(idx), intsTable([]int64{c.AttrInt("default_int64", -1)}), nil
		}
		return intsTable(idx), mlTable{strs: classes.Strings, dt: tensor.String},
			mlTable{strs: [][]byte{[]byte(c.AttrString("default_string", "_Unused"))}, dt: tensor.String}, nil
	}
	if keys, err = mlSide(c, "keys"); err != nil {
		return
	}
	if values, err = mlSide(c, "values"); err != nil {
		return
	}
	if keys.len() != values.len() {
		return keys, values, def, fmt.Errorf("%d keys for %d values", keys.len(), values.len())
	}
	def, err = labelEncoderDefault(c, values.dt)
	return
}

// mlSide reads keys_* or values_* (or the *_tensor attribute).
func mlSide(c *Ctx, side string) (mlTable, error) {
	if a := c.Attr(side + "_tensor"); a != nil && a.T != nil {
		return tensorTable(a.T), nil
	}
	if a := c.Attr(side + "_strings"); a != nil {
		return mlTable{strs: a.Strings, dt: tensor.String}, nil
	}
	if a := c.Attr(side + "_int64s"); a != nil {
		return intsTable(a.Ints), nil
	}
	if a := c.Attr(side + "_floats"); a != nil {
		return mlTable{nums: f64s(a.Floats), dt: tensor.Float32}, nil
	}
	return mlTable{}, fmt.Errorf("no %s_strings, %s_int64s, %s_floats or %s_tensor attribute", side, side, side, side)
}

func tensorTable(t *tensor.Tensor) mlTable {
	if t.DType == tensor.String {
		return mlTable{strs: t.Strings, dt: tensor.String}
	}
	return mlTable{nums: t.Float64s(), dt: t.DType}
}

func labelEncoderDefault(c *Ctx, dt tensor.DType) (mlTable, error) {
	if a := c.Attr("default_tensor"); a != nil && a.T != nil {
		return tensorTable(a.T), nil
	}
	switch {
	case dt == tensor.String:
		return mlTable{strs: [][]byte{[]byte(c.AttrString("default_string", "_Unused"))}, dt: dt}, nil
	case dt.IsFloat():
		return mlTable{nums: []float64{c.AttrFloat("default_float", math.Copysign(0, -1))}, dt: dt}, nil
	}
	return mlTable{nums: []float64{float64(c.AttrInt("default_int64", -1))}, dt: dt}, nil
}

// lookup returns each element's index among the keys, -1 for none (NaN
// finds a NaN key).
func (b *mlBuild) lookup(x *fxgraph.Node, keys mlTable) *fxgraph.Node {
	if keys.dt == tensor.String {
		if Meta(x).DType != tensor.String {
			b.err = fmt.Errorf("%s input for string keys", Meta(x))
			return nil
		}
		return b.emit(fxgraph.XserveStringLookup, x, stringConst(b.c, "keys", keys.strs))
	}
	if Meta(x).DType == tensor.String {
		b.err = fmt.Errorf("string input for %s keys", keys.dt)
		return nil
	}
	kt := tensor.New(keys.dt, int64(len(keys.nums)))
	for i, v := range keys.nums {
		kt.SetFloat64(int64(i), v)
	}
	k := b.constant("keys", kt)
	xe := b.emit(fxgraph.AtenUnsqueeze, b.to(x, keys.dt), int64(-1))
	hit := b.eq(xe, k)
	if keys.dt.IsFloat() {
		hit = b.or(hit, b.and(b.isnan(xe), b.isnan(k)))
	}
	found := b.emit(fxgraph.AtenAnyDim, hit, int64(-1), false)
	first := b.emit(fxgraph.AtenArgmax, b.to(hit, tensor.Int32), int64(-1))
	return b.where(found, first, b.scalar(tensor.Int64, -1))
}

// take returns values[idx], def where idx is -1.
func (b *mlBuild) take(idx *fxgraph.Node, values, def mlTable) *fxgraph.Node {
	if values.dt == tensor.String {
		d := ""
		if len(def.strs) > 0 {
			d = string(def.strs[0])
		}
		return b.emitKw(fxgraph.XserveStringTake, []any{stringConst(b.c, "values", values.strs), idx}, map[string]any{"default": d})
	}
	if len(def.nums) != 1 {
		b.err = fmt.Errorf("default has %d values, want 1", len(def.nums))
		return nil
	}
	vt := tensor.New(values.dt, int64(len(values.nums)))
	for i, v := range values.nums {
		vt.SetFloat64(int64(i), v)
	}
	if len(values.nums) == 0 {
		return b.where(b.lt(idx, b.scalar(tensor.Int64, 0)), b.scalar(values.dt, def.nums[0]), b.scalar(values.dt, def.nums[0]))
	}
	shape := Meta(idx).Shape
	flat := b.emit(fxgraph.AtenReshape, idx, []any{int64(-1)})
	safe := b.emit(fxgraph.AtenClamp, flat, int64(0), nil)
	got := b.emit(fxgraph.AtenIndexSelect, b.constant("values", vt), int64(0), safe)
	got = b.emit(fxgraph.AtenReshape, got, shapeArgs(shape))
	return b.where(b.lt(idx, b.scalar(tensor.Int64, 0)), b.scalar(values.dt, def.nums[0]), got)
}

// shapeArgs is a reshape target for shape: its static dims, -1 for the one
// symbolic dim (more than one cannot be a reshape target).
func shapeArgs(s fxgraph.Shape) []any {
	out := make([]any, len(s))
	for i, d := range s {
		if d.IsStatic() {
			out[i] = d.Size
		} else {
			out[i] = int64(-1)
		}
	}
	return out
}

func labelEncoderConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	keys, values, def, err := labelEncoderTables(c, Meta(x).DType)
	if err != nil {
		return err
	}
	c.SetOutput(0, b.take(b.lookup(x, keys), values, def))
	return b.err
}

func categoryMapperConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	var strs [][]byte
	if a := c.Attr("cats_strings"); a != nil {
		strs = a.Strings
	}
	ints := intsTable(c.AttrInts("cats_int64s", nil))
	s := mlTable{strs: strs, dt: tensor.String}
	if len(strs) != len(ints.nums) {
		return fmt.Errorf("%d cats_strings for %d cats_int64s", len(strs), len(ints.nums))
	}
	if Meta(x).DType == tensor.String {
		c.SetOutput(0, b.take(b.lookup(x, s), ints, intsTable([]int64{c.AttrInt("default_int64", -1)})))
	} else {
		def := mlTable{strs: [][]byte{[]byte(c.AttrString("default_string", "_Unused"))}, dt: tensor.String}
		c.SetOutput(0, b.take(b.lookup(b.to(x, tensor.Int64), ints), s, def))
	}
	return b.err
}

// oneHotEncoderConvert converts OneHotEncoder: x.shape + [categories],
// float32; unknown values are all zeros (with zeros=0 ONNX Runtime fails
// on them instead).
func oneHotEncoderConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	var cats mlTable
	if a := c.Attr("cats_strings"); a != nil && len(a.Strings) > 0 {
		cats = mlTable{strs: a.Strings, dt: tensor.String}
	} else {
		cats = intsTable(c.AttrInts("cats_int64s", nil))
	}
	if cats.len() == 0 {
		return fmt.Errorf("no cats_strings or cats_int64s")
	}
	if Meta(x).DType != tensor.String {
		x = b.to(x, tensor.Int64)
	}
	idx := b.lookup(x, cats)
	iota := make([]int64, cats.len())
	for i := range iota {
		iota[i] = int64(i)
	}
	hot := b.eq(b.emit(fxgraph.AtenUnsqueeze, idx, int64(-1)), b.constant("categories", tensor.FromInt64s(iota)))
	c.SetOutput(0, b.to(hot, tensor.Float32))
	return b.err
}
