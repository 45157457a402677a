package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// shNonZero converts NonZero to a value of static upper bound: the indices
// of the nonzero elements of x (static shape, N elements) as int64
// [rank, N], the first count columns valid (fxgraph.BoundedOutput), count
// the number of nonzero elements. A stable sort of "is zero" moves the
// flat indices of the nonzero elements first, in row-major order; each is
// unravelled by the strides of x. Only a NonZero that is a graph output is
// supported: the host slices it by its count (lower.Program.Trim).
func shNonZero(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok || len(dims) == 0 || c.s.bounded == nil {
		return Unsupported("NonZero of %s here: its output size is data-dependent; supported for inputs of static shape and rank >= 1, outside subgraphs, as a graph output (returned padded with a count)", m)
	}
	total := tensor.NumElements(dims)
	flat, err := c.Emit("aten.view.default", x, ints([]int64{total}))
	if err != nil {
		return err
	}
	mask := flat
	if m.DType != tensor.Bool {
		if mask, err = c.Emit("aten.ne.Scalar", flat, 0.0); err != nil {
			return err
		}
	}
	idx, count, err := selectedFirst(c, mask)
	if err != nil {
		return err
	}
	rows := make([]*fxgraph.Node, len(dims))
	stride := total
	for d, size := range dims {
		stride /= max(size, 1)
		q, err := c.EmitKw("aten.div.Tensor_mode", []any{idx, c.ScalarConst(tensor.Int64, float64(max(stride, 1)))}, map[string]any{"rounding_mode": "floor"})
		if err != nil {
			return err
		}
		r, err := c.Emit("aten.remainder.Tensor", q, c.ScalarConst(tensor.Int64, float64(max(size, 1))))
		if err != nil {
			return err
		}
		if rows[d], err = c.Emit("aten.unsqueeze.default", r, int64(0)); err != nil {
			return err
		}
	}
	out, err := c.Emit("aten.cat.default", nodes(rows), int64(0))
	if err != nil {
		return err
	}
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: count, axis: 1, op: "NonZero"})
	c.SetOutput(0, out)
	return nil
}

// selectedFirst returns the indices 0..n-1 of the 1-D bool mask with the
// selected ones first, in order (a stable sort of "not selected"), and the
// number selected, an int64 scalar.
func selectedFirst(c *Ctx, mask *fxgraph.Node) (idx, count *fxgraph.Node, err error) {
	zero, err := c.Emit("aten.logical_not.default", mask)
	if err != nil {
		return nil, nil, err
	}
	key, err := ewCastTo(c, zero, tensor.Int32)
	if err != nil {
		return nil, nil, err
	}
	sorted, err := c.EmitKw("aten.sort.stable", []any{key}, map[string]any{"dim": int64(0), "stable": true})
	if err != nil {
		return nil, nil, err
	}
	if idx, err = c.Emit(fxgraph.GetItem, sorted, int64(1)); err != nil {
		return nil, nil, err
	}
	ones, err := ewCastTo(c, mask, tensor.Int64)
	if err != nil {
		return nil, nil, err
	}
	count, err = c.Emit("aten.sum.default", ones)
	return idx, count, err
}

// shCompress converts Compress to a value of static upper bound: the
// slices of x along axis (x flattened without one) whose condition holds,
// moved first by selectedFirst and gathered, padded to the axis's size,
// with their count (fxgraph.BoundedOutput). A condition shorter than the
// axis is padded with false. Only as a graph output, as NonZero.
func shCompress(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	cond, err := c.Input(1)
	if err != nil {
		return err
	}
	m, cm := Meta(x), Meta(cond)
	dims, ok := m.Shape.Static()
	cdims, cok := cm.Shape.Static()
	if !ok || !cok || len(cdims) != 1 || c.s.bounded == nil {
		return Unsupported("Compress of %s by %s here: its output size is data-dependent; supported for a static input and 1-D condition, outside subgraphs, as a graph output (returned padded with a count)", m, cm)
	}
	axis := int64(0)
	if a := c.Attr("axis"); a != nil {
		axis = a.I
		if axis < 0 {
			axis += int64(len(dims))
		}
		if axis < 0 || axis >= int64(len(dims)) {
			return fmt.Errorf("Compress: axis %d out of range for %s", a.I, m)
		}
	} else {
		total := tensor.NumElements(dims)
		if x, err = c.Emit("aten.view.default", x, ints([]int64{total})); err != nil {
			return err
		}
		dims = []int64{total}
	}
	size := dims[axis]
	if cdims[0] > size {
		return fmt.Errorf("Compress: condition has %d elements, the axis %d", cdims[0], size)
	}
	if cm.DType != tensor.Bool {
		if cond, err = ewCastTo(c, cond, tensor.Bool); err != nil {
			return err
		}
	}
	if cdims[0] < size {
		pad := c.Constant("compress_pad", tensor.New(tensor.Bool, size-cdims[0]))
		if cond, err = c.Emit("aten.cat.default", nodes([]*fxgraph.Node{cond, pad}), int64(0)); err != nil {
			return err
		}
	}
	idx, count, err := selectedFirst(c, cond)
	if err != nil {
		return err
	}
	out, err := c.Emit("aten.index_select.default", x, axis, idx)
	if err != nil {
		return err
	}
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: count, axis: int(axis), op: "Compress"})
	c.SetOutput(0, out)
	return nil
}

// emitChain emits nodes until the first error, which it keeps: a long
// decomposition checks once at the end.
type emitChain struct {
	c   *Ctx
	err error
}

func (e *emitChain) kw(target string, kwargs map[string]any, args ...any) *fxgraph.Node {
	if e.err != nil {
		return nil
	}
	n, err := e.c.EmitKw(target, args, kwargs)
	e.err = err
	return n
}

func (e *emitChain) op(target string, args ...any) *fxgraph.Node { return e.kw(target, nil, args...) }

// sort returns the values and indices of a stable ascending sort of the
// 1-D v.
func (e *emitChain) sort(v *fxgraph.Node) (vals, idx *fxgraph.Node) {
	s := e.kw("aten.sort.stable", map[string]any{"dim": int64(0), "stable": true}, v)
	return e.op(fxgraph.GetItem, s, int64(0)), e.op(fxgraph.GetItem, s, int64(1))
}

// shUnique converts Unique to values of static upper bound (the number of
// elements, or of slices along axis) with their count
// (fxgraph.BoundedOutput): Y, indices and counts padded, inverse_indices
// exact. The elements (or the slices along axis, flattened to rows) are
// sorted stably, lexicographically for rows (one stable sort per column,
// last column first); a group starts where the sorted row changes; the
// start positions, sorted, give each group's first row, its first index in
// x (the sorts are stable) and its size (the next start minus its own). For
// sorted=0 the groups are then ordered by their first index. Only as graph
// outputs, as NonZero.
func shUnique(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok || c.s.bounded == nil || m.DType == tensor.String || tensor.NumElements(dims) == 0 {
		return Unsupported("Unique of %s here: its output size is data-dependent; supported for a static, non-empty input, outside subgraphs, as graph outputs (returned padded with a count)", m)
	}
	e := &emitChain{c: c}
	// rows: [total, width], the elements (no axis) or the slices along axis.
	axis, perm := int64(-1), []int64(nil)
	total, width := tensor.NumElements(dims), int64(1)
	rows := x
	if a := c.Attr("axis"); a != nil {
		if axis = a.I; axis < 0 {
			axis += int64(len(dims))
		}
		if axis < 0 || axis >= int64(len(dims)) {
			return fmt.Errorf("Unique: axis %d out of range for %s", a.I, m)
		}
		perm = []int64{axis}
		for d := range int64(len(dims)) {
			if d != axis {
				perm = append(perm, d)
			}
		}
		rows = e.op("aten.permute.default", x, ints(perm))
		total, width = dims[axis], total/dims[axis]
	}
	rows = e.op("aten.view.default", rows, ints([]int64{total, width}))
	seq := make([]int64, total)
	for i := range seq {
		seq[i] = int64(i)
	}
	iota := c.Constant("iota", tensor.FromInt64s(seq))
	last := c.ScalarConst(tensor.Int64, float64(total))
	// Lexicographic stable sort of the rows: one stable sort per column,
	// last column first.
	order := iota
	for col := width - 1; col >= 0; col-- {
		key := e.op("aten.index_select.default", e.op("aten.select.int", rows, int64(1), col), int64(0), order)
		_, p := e.sort(key)
		order = e.op("aten.index_select.default", order, int64(0), p)
	}
	sv := e.op("aten.index_select.default", rows, int64(0), order)
	prev := e.op("aten.cat.default", nodes([]*fxgraph.Node{e.op("aten.slice.Tensor", sv, int64(0), int64(0), int64(1)), e.op("aten.slice.Tensor", sv, int64(0), int64(0), total-1)}), int64(0))
	differs := e.op("aten.any.dim", e.op("aten.ne.Tensor", sv, prev), int64(1))
	starts := e.op("aten.logical_or.default", differs, e.op("aten.eq.Scalar", iota, int64(0)))
	pos, _ := e.sort(e.op("aten.where.self", starts, iota, last)) // group starts first, then N
	at := e.op("aten.remainder.Scalar", pos, total)               // padding reads row 0
	y := e.op("aten.index_select.default", sv, int64(0), at)
	first := e.op("aten.index_select.default", order, int64(0), at)
	next := e.op("aten.cat.default", nodes([]*fxgraph.Node{e.op("aten.slice.Tensor", pos, int64(0), int64(1), total), e.op("aten.view.default", last, ints([]int64{1}))}), int64(0))
	counts := e.op("aten.sub.Tensor", next, pos)
	if e.err != nil {
		return e.err
	}
	ones, err := ewCastTo(c, starts, tensor.Int64)
	if err != nil {
		return err
	}
	count := e.op("aten.sum.default", ones)
	group := e.op("aten.sub.Scalar", e.kw("aten.cumsum.default", map[string]any{"dtype": tensor.Int64}, ones, int64(0)), int64(1))
	_, back := e.sort(order) // back[j]: where row j went in the sort
	inverse := e.op("aten.index_select.default", group, int64(0), back)
	if c.AttrInt("sorted", 1) == 0 {
		// Order the groups by first index; padding (k >= count) goes last.
		key := e.op("aten.where.self", e.op("aten.lt.Tensor", iota, count), first, last)
		_, order := e.sort(key)
		y = e.op("aten.index_select.default", y, int64(0), order)
		first = e.op("aten.index_select.default", first, int64(0), order)
		counts = e.op("aten.index_select.default", counts, int64(0), order)
		_, rank := e.sort(order) // rank[k]: the new position of sorted group k
		inverse = e.op("aten.index_select.default", rank, int64(0), inverse)
	}
	yAxis := 0
	if axis < 0 {
		y = e.op("aten.view.default", y, ints([]int64{total}))
	} else {
		moved := []int64{total}
		for _, d := range perm[1:] {
			moved = append(moved, dims[d])
		}
		inv := make([]int64, len(perm))
		for i, p := range perm {
			inv[p] = int64(i)
		}
		y = e.op("aten.permute.default", e.op("aten.view.default", y, ints(moved)), ints(inv))
		yAxis = int(axis)
	}
	if e.err != nil {
		return e.err
	}
	for i, v := range []*fxgraph.Node{y, first, inverse, counts} {
		if !c.HasOutput(i) {
			continue
		}
		if i != 2 {
			ax := 0
			if i == 0 {
				ax = yAxis
			}
			*c.s.bounded = append(*c.s.bounded, boundedValue{value: v, count: count, axis: ax, op: "Unique"})
		}
		c.SetOutput(i, v)
	}
	return nil
}
