package onnx

import (
	"fmt"
	"math"

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
	for _, b := range *c.s.bounded {
		if b.op == "NonZero" && b.src == x && b.value.Graph() == c.Graph() {
			c.SetOutput(0, b.value) // the same NonZero again (exporters repeat it): one sort
			return nil
		}
	}
	total := tensor.NumElements(dims)
	flat, err := c.Emit(fxgraph.AtenView, x, ints([]int64{total}))
	if err != nil {
		return err
	}
	mask := flat
	if m.DType != tensor.Bool {
		if mask, err = c.Emit(fxgraph.AtenNeScalar, flat, 0.0); err != nil {
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
		q, err := c.EmitKw(fxgraph.AtenDivTensorMode, []any{idx, c.ScalarConst(tensor.Int64, float64(max(stride, 1)))}, map[string]any{"rounding_mode": "floor"})
		if err != nil {
			return err
		}
		r, err := c.Emit(fxgraph.AtenRemainderTensor, q, c.ScalarConst(tensor.Int64, float64(max(size, 1))))
		if err != nil {
			return err
		}
		if rows[d], err = c.Emit(fxgraph.AtenUnsqueeze, r, int64(0)); err != nil {
			return err
		}
	}
	out, err := c.Emit(fxgraph.AtenCat, nodes(rows), int64(0))
	if err != nil {
		return err
	}
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: count, axis: 1, op: "NonZero", src: x})
	c.SetOutput(0, out)
	return nil
}

// selectedFirst returns the indices 0..n-1 of the 1-D bool mask with the
// selected ones first, in order (a stable sort of "not selected"), and the
// number selected, an int64 scalar.
func selectedFirst(c *Ctx, mask *fxgraph.Node) (idx, count *fxgraph.Node, err error) {
	zero, err := c.Emit(fxgraph.AtenLogicalNot, mask)
	if err != nil {
		return nil, nil, err
	}
	key, err := ewCastTo(c, zero, tensor.Int32)
	if err != nil {
		return nil, nil, err
	}
	sorted, err := c.EmitKw(fxgraph.AtenSortStable, []any{key}, map[string]any{"dim": int64(0), "stable": true})
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
	count, err = c.Emit(fxgraph.AtenSum, ones)
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
		if x, err = c.Emit(fxgraph.AtenView, x, ints([]int64{total})); err != nil {
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
		if cond, err = c.Emit(fxgraph.AtenCat, nodes([]*fxgraph.Node{cond, pad}), int64(0)); err != nil {
			return err
		}
	}
	idx, count, err := selectedFirst(c, cond)
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenIndexSelect, x, axis, idx)
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

func (e *emitChain) kw(target *fxgraph.Op, kwargs map[string]any, args ...any) *fxgraph.Node {
	if e.err != nil {
		return nil
	}
	n, err := e.c.EmitKw(target, args, kwargs)
	e.err = err
	return n
}

func (e *emitChain) op(target *fxgraph.Op, args ...any) *fxgraph.Node {
	return e.kw(target, nil, args...)
}

// sort returns the values and indices of a stable ascending sort of the
// 1-D v.
func (e *emitChain) sort(v *fxgraph.Node) (vals, idx *fxgraph.Node) {
	s := e.kw(fxgraph.AtenSortStable, map[string]any{"dim": int64(0), "stable": true}, v)
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
		rows = e.op(fxgraph.AtenPermute, x, ints(perm))
		total, width = dims[axis], total/dims[axis]
	}
	rows = e.op(fxgraph.AtenView, rows, ints([]int64{total, width}))
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
		key := e.op(fxgraph.AtenIndexSelect, e.op(fxgraph.AtenSelectInt, rows, int64(1), col), int64(0), order)
		_, p := e.sort(key)
		order = e.op(fxgraph.AtenIndexSelect, order, int64(0), p)
	}
	sv := e.op(fxgraph.AtenIndexSelect, rows, int64(0), order)
	prev := e.op(fxgraph.AtenCat, nodes([]*fxgraph.Node{e.op(fxgraph.AtenSliceTensor, sv, int64(0), int64(0), int64(1)), e.op(fxgraph.AtenSliceTensor, sv, int64(0), int64(0), total-1)}), int64(0))
	differs := e.op(fxgraph.AtenAnyDim, e.op(fxgraph.AtenNeTensor, sv, prev), int64(1))
	starts := e.op(fxgraph.AtenLogicalOr, differs, e.op(fxgraph.AtenEqScalar, iota, int64(0)))
	pos, _ := e.sort(e.op(fxgraph.AtenWhereSelf, starts, iota, last)) // group starts first, then N
	at := e.op(fxgraph.AtenRemainderScalar, pos, total)               // padding reads row 0
	y := e.op(fxgraph.AtenIndexSelect, sv, int64(0), at)
	first := e.op(fxgraph.AtenIndexSelect, order, int64(0), at)
	next := e.op(fxgraph.AtenCat, nodes([]*fxgraph.Node{e.op(fxgraph.AtenSliceTensor, pos, int64(0), int64(1), total), e.op(fxgraph.AtenView, last, ints([]int64{1}))}), int64(0))
	counts := e.op(fxgraph.AtenSubTensor, next, pos)
	if e.err != nil {
		return e.err
	}
	ones, err := ewCastTo(c, starts, tensor.Int64)
	if err != nil {
		return err
	}
	count := e.op(fxgraph.AtenSum, ones)
	group := e.op(fxgraph.AtenSubScalar, e.kw(fxgraph.AtenCumsum, map[string]any{"dtype": tensor.Int64}, ones, int64(0)), int64(1))
	_, back := e.sort(order) // back[j]: where row j went in the sort
	inverse := e.op(fxgraph.AtenIndexSelect, group, int64(0), back)
	if c.AttrInt("sorted", 1) == 0 {
		// Order the groups by first index; padding (k >= count) goes last.
		key := e.op(fxgraph.AtenWhereSelf, e.op(fxgraph.AtenLtTensor, iota, count), first, last)
		_, order := e.sort(key)
		y = e.op(fxgraph.AtenIndexSelect, y, int64(0), order)
		first = e.op(fxgraph.AtenIndexSelect, first, int64(0), order)
		counts = e.op(fxgraph.AtenIndexSelect, counts, int64(0), order)
		_, rank := e.sort(order) // rank[k]: the new position of sorted group k
		inverse = e.op(fxgraph.AtenIndexSelect, rank, int64(0), inverse)
	}
	yAxis := 0
	if axis < 0 {
		y = e.op(fxgraph.AtenView, y, ints([]int64{total}))
	} else {
		moved := []int64{total}
		for _, d := range perm[1:] {
			moved = append(moved, dims[d])
		}
		inv := make([]int64, len(perm))
		for i, p := range perm {
			inv[p] = int64(i)
		}
		y = e.op(fxgraph.AtenPermute, e.op(fxgraph.AtenView, y, ints(moved)), ints(inv))
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

// scalarInput returns optional input i (one element) as a rank-0 value, or
// a constant def of dtype dt when it is absent.
func scalarInput(c *Ctx, e *emitChain, i int, dt tensor.DType, def float64) (*fxgraph.Node, error) {
	if !c.HasInput(i) {
		return c.ScalarConst(dt, def), nil
	}
	v, err := c.Input(i)
	if err != nil {
		return nil, err
	}
	if m := Meta(v); m.DType != dt || !m.Shape.IsStatic() || tensorElems(m) != 1 {
		return nil, fmt.Errorf("input %d is %s, want %s with one element", i, m, dt)
	}
	return e.op(fxgraph.AtenView, v, ints(nil)), nil
}

// nmsMaxBoxes bounds the boxes per batch entry NonMaxSuppression takes: its
// suppression runs one [N,N] step per box, unrolled at import.
const nmsMaxBoxes = 256

// shNonMaxSuppression converts NonMaxSuppression to a value of static upper
// bound (batch x classes x boxes rows of (batch, class, box)) with its count
// (fxgraph.BoundedOutput). Per batch entry and class, vectorized: the boxes
// sorted by score (stable, descending), their pairwise IoU, and greedy
// suppression as a fixed point: keep = valid && no kept higher-scored box
// overlaps it by more than iou_threshold, iterated N times (after t steps
// the first t boxes are final). Then at most max_output_boxes_per_class per
// class, and the kept rows moved first in (batch, class, score) order.
func shNonMaxSuppression(c *Ctx, n *Node) error {
	boxes, err := c.Input(0)
	if err != nil {
		return err
	}
	scores, err := c.Input(1)
	if err != nil {
		return err
	}
	bd, ok1 := Meta(boxes).Shape.Static()
	sd, ok2 := Meta(scores).Shape.Static()
	if !ok1 || !ok2 || len(bd) != 3 || bd[2] != 4 || len(sd) != 3 || sd[0] != bd[0] || sd[2] != bd[1] || c.s.bounded == nil {
		return Unsupported("NonMaxSuppression of boxes %s and scores %s here: supported for static [B,N,4] boxes and [B,C,N] scores, outside subgraphs, as a graph output (returned padded with a count)", Meta(boxes), Meta(scores))
	}
	nb, nc, nn := bd[0], sd[1], bd[1]
	if nn == 0 {
		return Unsupported("NonMaxSuppression of 0 boxes")
	}
	e := &emitChain{c: c}
	dt := Meta(boxes).DType
	maxOut, err := scalarInput(c, e, 2, tensor.Int64, 0)
	if err != nil {
		return err
	}
	iouThr, err := scalarInput(c, e, 3, dt, 0)
	if err != nil {
		return err
	}
	if scores, err = ewCastTo(c, scores, dt); err != nil {
		return err
	}
	s := e.kw(fxgraph.AtenSortStable, map[string]any{"dim": int64(2), "descending": true, "stable": true}, scores)
	sscore, order := e.op(fxgraph.GetItem, s, int64(0)), e.op(fxgraph.GetItem, s, int64(1))
	bcn4 := ints([]int64{nb, nc, nn, 4})
	sb := e.op(fxgraph.AtenGather, e.op(fxgraph.AtenExpand, e.op(fxgraph.AtenUnsqueeze, boxes, int64(1)), bcn4), int64(2),
		e.op(fxgraph.AtenExpand, e.op(fxgraph.AtenUnsqueeze, order, int64(3)), bcn4))
	coord := func(k int64) *fxgraph.Node { return e.op(fxgraph.AtenSelectInt, sb, int64(3), k) }
	var lo, hi [2]*fxgraph.Node
	for a := range int64(2) {
		if c.AttrInt("center_point_box", 0) != 0 { // [x_center, y_center, width, height]
			half := e.op(fxgraph.AtenMulScalar, coord(2+a), 0.5)
			lo[a], hi[a] = e.op(fxgraph.AtenSubTensor, coord(a), half), e.op(fxgraph.AtenAddTensor, coord(a), half)
		} else { // [y1, x1, y2, x2], any diagonal
			lo[a], hi[a] = e.op(fxgraph.AtenMinimum, coord(a), coord(2+a)), e.op(fxgraph.AtenMaximum, coord(a), coord(2+a))
		}
	}
	row := func(t *fxgraph.Node) *fxgraph.Node { return e.op(fxgraph.AtenUnsqueeze, t, int64(3)) }
	valid := e.op(fxgraph.AtenGtScalar, sscore, math.Inf(-1))
	if c.HasInput(4) {
		scoreThr, err := scalarInput(c, e, 4, dt, 0)
		if err != nil {
			return err
		}
		valid = e.op(fxgraph.AtenGtTensor, sscore, scoreThr)
	}
	var keep *fxgraph.Node
	if nn > nmsMaxBoxes {
		if keep, err = nmsKeepLoop(c, e, lo, hi, valid, iouThr); err != nil {
			return err
		}
	} else {
		keep = nmsKeepUnrolled(c, e, lo, hi, valid, iouThr, nn)
	}
	if e.err != nil {
		return e.err
	}
	kept, err := ewCastTo(c, keep, tensor.Int64)
	if err != nil {
		return err
	}
	rank := e.kw(fxgraph.AtenCumsum, map[string]any{"dtype": tensor.Int64}, kept, int64(2))
	keep = e.op(fxgraph.AtenLogicalAnd, keep, e.op(fxgraph.AtenLeTensor, rank, maxOut))
	bIdx, cIdx := tensor.New(tensor.Int64, nb, nc, nn, 1), tensor.New(tensor.Int64, nb, nc, nn, 1)
	for b := range nb {
		for k := range nc {
			for i := range nn {
				at := (b*nc+k)*nn + i
				bIdx.SetInt64(at, b)
				cIdx.SetInt64(at, k)
			}
		}
	}
	total := nb * nc * nn
	rows := e.op(fxgraph.AtenCat, nodes([]*fxgraph.Node{c.Constant("nms_batch", bIdx), c.Constant("nms_class", cIdx), row(order)}), int64(3))
	rows = e.op(fxgraph.AtenView, rows, ints([]int64{total, 3}))
	flat := e.op(fxgraph.AtenView, keep, ints([]int64{total}))
	if e.err != nil {
		return e.err
	}
	idx, count, err := selectedFirst(c, flat)
	if err != nil {
		return err
	}
	out := e.op(fxgraph.AtenIndexSelect, rows, int64(0), idx)
	if e.err != nil {
		return e.err
	}
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: count, axis: 0, op: "NonMaxSuppression"})
	c.SetOutput(0, out)
	return nil
}

// nmsKeepUnrolled returns which of the sorted boxes (corners lo, hi per
// axis, [B,C,N]) greedy suppression keeps: a fixed point of vectorized
// [N,N] steps, unrolled N times.
func nmsKeepUnrolled(c *Ctx, e *emitChain, lo, hi [2]*fxgraph.Node, valid, iouThr *fxgraph.Node, nn int64) *fxgraph.Node {
	// Pairwise over [B,C,N(j),N(i)]: row j a higher-or-equal-scored box.
	row := func(t *fxgraph.Node) *fxgraph.Node { return e.op(fxgraph.AtenUnsqueeze, t, int64(3)) }
	col := func(t *fxgraph.Node) *fxgraph.Node { return e.op(fxgraph.AtenUnsqueeze, t, int64(2)) }
	inter, area := (*fxgraph.Node)(nil), (*fxgraph.Node)(nil)
	for a := range 2 {
		side := e.op(fxgraph.AtenRelu, e.op(fxgraph.AtenSubTensor, e.op(fxgraph.AtenMinimum, row(hi[a]), col(hi[a])), e.op(fxgraph.AtenMaximum, row(lo[a]), col(lo[a]))))
		ext := e.op(fxgraph.AtenSubTensor, hi[a], lo[a])
		if a == 0 {
			inter, area = side, ext
		} else {
			inter, area = e.op(fxgraph.AtenMulTensor, inter, side), e.op(fxgraph.AtenMulTensor, area, ext)
		}
	}
	union := e.op(fxgraph.AtenSubTensor, e.op(fxgraph.AtenAddTensor, row(area), col(area)), inter)
	iou := e.op(fxgraph.AtenDivTensor, inter, union)
	upper := tensor.New(tensor.Bool, nn, nn) // [j, i]: j < i
	for j := range nn {
		for i := j + 1; i < nn; i++ {
			upper.Data[j*nn+i] = 1
		}
	}
	overlaps := e.op(fxgraph.AtenLogicalAnd, e.op(fxgraph.AtenGtTensor, iou, iouThr), c.Constant("nms_upper", upper))
	keep := valid
	for range nn {
		sup := e.op(fxgraph.AtenAnyDim, e.op(fxgraph.AtenLogicalAnd, row(keep), overlaps), int64(2))
		keep = e.op(fxgraph.AtenLogicalAnd, valid, e.op(fxgraph.AtenLogicalNot, sup))
	}
	return keep
}

// nmsKeepLoop returns which of the sorted boxes (corners lo, hi per axis,
// [B,C,N]) greedy suppression keeps, for many boxes: a while_loop over
// (candidates, kept) that, per batch entry and class, keeps the first
// candidate and drops it and the candidates overlapping it by more than
// iouThr, until no candidate is left. It runs one step per kept box and
// needs O(N) memory, where the unrolled form needs N steps over [N,N].
func nmsKeepLoop(c *Ctx, e *emitChain, lo, hi [2]*fxgraph.Node, valid, iouThr *fxgraph.Node) (*fxgraph.Node, error) {
	if e.err != nil {
		return nil, e.err
	}
	m := Meta(valid) // bool [B,C,N]
	dims, _ := m.Shape.Static()
	nn := dims[2]
	pos := positions(c, nn, 2, 3)
	falses := e.kw(fxgraph.AtenFull, map[string]any{"dtype": tensor.Bool}, ints(dims), false)
	captured := []*fxgraph.Node{lo[0], lo[1], hi[0], hi[1], iouThr, pos}
	if e.err != nil {
		return nil, e.err
	}
	places := func(g *fxgraph.Graph) (carried, capt []*fxgraph.Node) {
		carried = []*fxgraph.Node{g.AddPlaceholder("candidates", m), g.AddPlaceholder("kept", m)}
		for i, v := range captured {
			capt = append(capt, g.AddPlaceholder(fmt.Sprintf("nms_in%d", i), Meta(v)))
		}
		return carried, capt
	}
	var err error
	emit := func(em fxgraph.Emitter, target *fxgraph.Op, args ...any) *fxgraph.Node {
		if err != nil {
			return nil
		}
		var n *fxgraph.Node
		n, err = em.Emit("", target, args, nil)
		return n
	}
	condG := fxgraph.New()
	cc, _ := places(condG)
	ce := fxgraph.Emitter{Graph: condG, IR: c.s.im.ir}
	condG.SetOutput(emit(ce, fxgraph.AtenAny, cc[0]))

	bodyG := fxgraph.New()
	bc, in := places(bodyG)
	be := fxgraph.Emitter{Graph: bodyG, IR: c.s.im.ir}
	cand, kept := bc[0], bc[1]
	big := bodyG.AddConstant("nms_n", tensor.Scalar(tensor.Int64, float64(nn)))
	first := emit(be, fxgraph.AtenAmin, emit(be, fxgraph.AtenWhereSelf, cand, in[5], big), ints([]int64{2}), true) // [B,C,1]
	chosen := emit(be, fxgraph.AtenLogicalAnd, emit(be, fxgraph.AtenEqTensor, in[5], first), cand)                 // one-hot, none when no candidate
	zero := bodyG.AddConstant("nms_zero", tensor.Scalar(Meta(lo[0]).DType, 0))
	pick := func(v *fxgraph.Node) *fxgraph.Node { // the chosen box's value, [B,C,1]
		return emit(be, fxgraph.AtenSumDimIntList, emit(be, fxgraph.AtenWhereSelf, chosen, v, zero), ints([]int64{2}), true)
	}
	var inter, area, areaC *fxgraph.Node
	for a := range 2 {
		l, h := in[a], in[2+a]
		lc, hc := pick(l), pick(h)
		side := emit(be, fxgraph.AtenRelu, emit(be, fxgraph.AtenSubTensor, emit(be, fxgraph.AtenMinimum, h, hc), emit(be, fxgraph.AtenMaximum, l, lc)))
		ext, extC := emit(be, fxgraph.AtenSubTensor, h, l), emit(be, fxgraph.AtenSubTensor, hc, lc)
		if a == 0 {
			inter, area, areaC = side, ext, extC
		} else {
			inter, area, areaC = emit(be, fxgraph.AtenMulTensor, inter, side), emit(be, fxgraph.AtenMulTensor, area, ext), emit(be, fxgraph.AtenMulTensor, areaC, extC)
		}
	}
	union := emit(be, fxgraph.AtenSubTensor, emit(be, fxgraph.AtenAddTensor, area, areaC), inter)
	sup := emit(be, fxgraph.AtenGtTensor, emit(be, fxgraph.AtenDivTensor, inter, union), in[4])
	drop := emit(be, fxgraph.AtenLogicalOr, chosen, sup)
	nextCand := emit(be, fxgraph.AtenLogicalAnd, cand, emit(be, fxgraph.AtenLogicalNot, drop))
	nextKept := emit(be, fxgraph.AtenLogicalOr, kept, chosen)
	if err != nil {
		return nil, err
	}
	bodyG.SetOutput(nextCand, nextKept)
	bodyG.EliminateDeadCode()
	w, err := c.Emit(fxgraph.WhileLoop, c.Graph().AddSubgraph("nms_cond", condG), c.Graph().AddSubgraph("nms_body", bodyG),
		nodes([]*fxgraph.Node{valid, falses}), nodes(captured))
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.GetItem, w, int64(1))
}
