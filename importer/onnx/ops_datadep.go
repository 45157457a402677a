package onnx

import (
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
	zero, err := c.Emit("aten.logical_not.default", mask)
	if err != nil {
		return err
	}
	key, err := ewCastTo(c, zero, tensor.Int32)
	if err != nil {
		return err
	}
	sorted, err := c.EmitKw("aten.sort.stable", []any{key}, map[string]any{"dim": int64(0), "stable": true})
	if err != nil {
		return err
	}
	idx, err := c.Emit(fxgraph.GetItem, sorted, int64(1))
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
	ones, err := ewCastTo(c, mask, tensor.Int64)
	if err != nil {
		return err
	}
	count, err := c.Emit("aten.sum.default", ones)
	if err != nil {
		return err
	}
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: count, axis: 1, op: "NonZero"})
	c.SetOutput(0, out)
	return nil
}
