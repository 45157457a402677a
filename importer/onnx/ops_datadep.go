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
