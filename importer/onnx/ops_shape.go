package onnx

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerShapeOps registers converters of shape and indexing ONNX operators.
func registerShapeOps(cs converters) {
	cs.add("Reshape", shReshape)
	cs.add("Flatten", shFlatten)
	cs.add("Transpose", shTranspose)
	cs.add("Concat", shConcat)
	cs.add("Split", shSplit)
	cs.add("Slice", shSlice)
	cs.add("Gather", shGather)
	cs.register("", "GatherElements", 11, shGatherElements)
	cs.register("", "GatherND", 11, shGatherND)
	cs.add("Squeeze", shSqueeze)
	cs.add("Unsqueeze", shUnsqueeze)
	cs.register("", "Expand", 8, shExpand)
	cs.add("Shape", shShape)
	cs.add("Size", shSize)
	cs.register("", "ConstantOfShape", 9, shConstantOfShape)
	cs.add("Constant", shConstant)
	cs.add("Pad", shPad)
	cs.register("", "Tile", 6, shTile)
	cs.register("", "Range", 11, shRange)
	cs.register("", "Trilu", 14, shTrilu)
	cs.add("DepthToSpace", shDepthToSpace)
	cs.add("SpaceToDepth", shSpaceToDepth)
	cs.register("", "OneHot", 9, shOneHot)
	cs.register("", "EyeLike", 9, shEyeLike)
	cs.register("", "Scatter", 9, shScatterElements)
	cs.register("", "ScatterElements", 11, shScatterElements)
	cs.register("", "ScatterND", 11, shScatterND)
	cs.register("", "ReverseSequence", 10, shReverseSequence)
	cs.register("", "NonZero", 9, shNonZero)
	cs.register("", "Compress", 9, shCompress)
	cs.register("", "Unique", 11, shUnique)
	cs.register("", "NonMaxSuppression", 10, shNonMaxSuppression)
}

// shIntsInput returns the values of constant integer input i, or the
// attribute attr for opsets before since.
func shIntsInput(c *Ctx, i int, attr string, since int64) ([]int64, bool, error) {
	if c.Opset < since {
		a := c.Attr(attr)
		if a == nil {
			return nil, false, nil
		}
		return a.Ints, true, nil
	}
	if !c.HasInput(i) {
		return nil, false, nil
	}
	v, err := c.ConstInts(i)
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// shNormAxis maps an ONNX axis (negative counts from the end) into [0, rank).
func shNormAxis(axis int64, rank int) (int, error) {
	k, err := fxgraph.NormDim(axis, rank)
	if err != nil {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, rank)
	}
	return k, nil
}

// shDimArg returns dim k of x as a size-list element: the int when static,
// else an aten.sym_size.int node.
func shDimArg(c *Ctx, x *fxgraph.Node, k int) (any, error) {
	d := Meta(x).Shape[k]
	if d.IsStatic() {
		return d.Size, nil
	}
	return c.Emit(fxgraph.AtenSymSizeInt, x, int64(k))
}

// shValueDeps returns a *NeedsValueError when input i is computed from the
// values of graph inputs, and nil when it depends only on their shapes
// (through Shape, Size and the like): such an operand becomes a constant
// when the graph is specialized for concrete dims.
func shValueDeps(c *Ctx, i int) error {
	n, err := c.Input(i)
	if err != nil {
		return err
	}
	var deps []string
	seen := map[*fxgraph.Node]bool{}
	var walk func(m *fxgraph.Node)
	walk = func(m *fxgraph.Node) {
		if seen[m] {
			return
		}
		seen[m] = true
		switch m.Opcode {
		case fxgraph.Placeholder:
			deps = append(deps, m.Target)
			return
		case fxgraph.CallFunction:
			if info, ok := c.s.im.ir.Lookup(m.Target); ok && info.ShapeOnly {
				return
			}
		}
		for _, in := range m.InputNodes() {
			walk(in)
		}
	}
	walk(n)
	if len(deps) == 0 {
		return nil
	}
	sort.Strings(deps)
	return &NeedsValueError{Inputs: deps, Operand: c.node.Inputs[i]}
}

// shHasTarget reports whether the IR knows target (ops of other families a
// composition needs).
func shHasTarget(c *Ctx, target *fxgraph.Op) bool {
	return c.s.im.ir.Has(target)
}

func shReshape(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	allowZero := c.AttrInt("allowzero", 0) != 0
	var shape []int64
	if c.Opset < 5 {
		a := c.Attr("shape")
		if a == nil {
			return fmt.Errorf("missing attribute shape")
		}
		shape = a.Ints
	} else if t := c.Const(1); t != nil {
		if !t.DType.IsInt() || t.Rank() != 1 {
			return fmt.Errorf("shape is %s, want a 1-D int64 tensor", t)
		}
		shape = t.Int64s()
	} else {
		if err := shValueDeps(c, 1); err != nil {
			return err
		}
		return shReshapeDynamic(c, x, allowZero)
	}
	xs := Meta(x).Shape
	size := make([]any, len(shape))
	for i, v := range shape {
		switch {
		case v == 0 && !allowZero:
			if i >= len(xs) {
				return fmt.Errorf("shape %v copies dim %d, the input has rank %d", shape, i, len(xs))
			}
			if size[i], err = shDimArg(c, x, i); err != nil {
				return err
			}
		case v < -1:
			return fmt.Errorf("invalid shape %v", shape)
		default:
			size[i] = v
		}
	}
	out, err := c.Emit(fxgraph.AtenView, x, size)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shReshapeDynamic reshapes to a shape computed in the graph (a shape
// subgraph over symbolic dims, resolved when the graph is specialized).
// ONNX's 0 ("copy the input dim") is resolved in the graph:
// where(shape == 0, input_shape, shape).
func shReshapeDynamic(c *Ctx, x *fxgraph.Node, allowZero bool) error {
	s, err := c.Input(1)
	if err != nil {
		return err
	}
	sm := Meta(s)
	if sm.Rank() != 1 || !sm.Shape[0].IsStatic() || !sm.DType.IsInt() {
		return Unsupported("Reshape to a shape %s of unknown length", sm)
	}
	size := s
	if !allowZero {
		if !shHasTarget(c, fxgraph.AtenEqScalar) || !shHasTarget(c, fxgraph.AtenWhereSelf) {
			return Unsupported("Reshape to a shape computed at run time")
		}
		k := sm.Shape[0].Size
		r := int64(Meta(x).Rank())
		xs, err := c.Emit(fxgraph.Aten_ShapeAsTensor, x)
		if err != nil {
			return err
		}
		switch {
		case k < r:
			if xs, err = c.Emit(fxgraph.AtenSliceTensor, xs, int64(0), int64(0), k); err != nil {
				return err
			}
		case k > r:
			ones, err := c.EmitKw(fxgraph.AtenFull, []any{[]any{k - r}, int64(1)}, map[string]any{"dtype": tensor.Int64})
			if err != nil {
				return err
			}
			if xs, err = c.Emit(fxgraph.AtenCat, []any{xs, ones}); err != nil {
				return err
			}
		}
		if sm.DType != tensor.Int64 {
			if s, err = c.EmitKw(fxgraph.Aten_ToCopy, []any{s}, map[string]any{"dtype": tensor.Int64}); err != nil {
				return err
			}
		}
		zero, err := c.Emit(fxgraph.AtenEqScalar, s, int64(0))
		if err != nil {
			return err
		}
		if size, err = c.Emit(fxgraph.AtenWhereSelf, zero, xs, s); err != nil {
			return err
		}
	}
	out, err := c.Emit(fxgraph.AtenView, x, size)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shProduct returns the product of dims [from, to) of x as a size-list
// element: an int when static, a sym_size node for a single symbolic dim,
// or ok=false.
func shProduct(c *Ctx, x *fxgraph.Node, from, to int) (any, bool, error) {
	s := Meta(x).Shape
	p := int64(1)
	sym := -1
	for i := from; i < to; i++ {
		if s[i].IsStatic() {
			p *= s[i].Size
			continue
		}
		if sym >= 0 {
			return nil, false, nil
		}
		sym = i
	}
	if sym < 0 {
		return p, true, nil
	}
	if p != 1 {
		return nil, false, nil
	}
	d, err := shDimArg(c, x, sym)
	return d, err == nil, err
}

func shFlatten(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	r := Meta(x).Rank()
	axis := c.AttrInt("axis", 1)
	if axis < 0 {
		axis += int64(r)
	}
	if axis < 0 || axis > int64(r) {
		return fmt.Errorf("axis %d out of range for rank %d", c.AttrInt("axis", 1), r)
	}
	left, lok, err := shProduct(c, x, 0, int(axis))
	if err != nil {
		return err
	}
	right, rok, err := shProduct(c, x, int(axis), r)
	if err != nil {
		return err
	}
	var size []any
	switch {
	case lok && rok:
		if _, static := right.(int64); static {
			size = []any{left, right}
			if _, ls := left.(int64); !ls {
				size = []any{int64(-1), right}
			}
		} else {
			size = []any{left, int64(-1)}
		}
	case lok:
		size = []any{left, int64(-1)}
	case rok:
		size = []any{int64(-1), right}
	default:
		return Unsupported("Flatten of %s at axis %d (symbolic dims on both sides)", Meta(x).Shape, axis)
	}
	out, err := c.Emit(fxgraph.AtenView, x, size)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shTranspose(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	r := Meta(x).Rank()
	perm := c.AttrInts("perm", nil)
	if perm == nil {
		for i := r - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	out, err := c.Emit(fxgraph.AtenPermute, x, ints(perm))
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shConcat(c *Ctx, n *Node) error {
	xs, err := c.Inputs()
	if err != nil {
		return err
	}
	if len(xs) == 0 {
		return fmt.Errorf("Concat needs at least one input")
	}
	a := c.Attr("axis")
	axis := int64(1) // opset 1 default
	if a != nil {
		axis = a.I
	} else if c.Opset >= 4 {
		return fmt.Errorf("missing attribute axis")
	}
	out, err := c.Emit(fxgraph.AtenCat, nodes(xs), axis)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shSplit(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xs := Meta(x).Shape
	axis, err := shNormAxis(c.AttrInt("axis", 0), len(xs))
	if err != nil {
		return err
	}
	var sizes []int64
	switch {
	case c.Opset >= 13 || (c.Opset < 2 && c.HasInput(1)):
		if c.HasInput(1) {
			if sizes, err = c.ConstInts(1); err != nil {
				return err
			}
		}
	default:
		sizes = c.AttrInts("split", nil)
	}
	k := len(n.Outputs)
	if sizes == nil {
		d := xs[axis]
		if !d.IsStatic() {
			return Unsupported("Split of symbolic dim %s without explicit sizes", d)
		}
		if c.Opset >= 18 {
			if a := c.Attr("num_outputs"); a != nil {
				k = int(a.I)
			}
		}
		if k <= 0 {
			return fmt.Errorf("Split into %d outputs", k)
		}
		chunk := d.Size / int64(k)
		if d.Size%int64(k) != 0 {
			if c.Opset < 18 {
				return fmt.Errorf("dim %d of size %d does not split evenly into %d outputs", axis, d.Size, k)
			}
			chunk = (d.Size + int64(k) - 1) / int64(k)
		}
		for off := int64(0); off < d.Size || len(sizes) < k; off += chunk {
			sizes = append(sizes, max(min(chunk, d.Size-off), 0))
		}
	}
	if len(sizes) != k {
		return fmt.Errorf("Split has %d sizes %v for %d outputs", len(sizes), sizes, k)
	}
	sp, err := c.Emit(fxgraph.AtenSplitWithSizes, x, ints(sizes), int64(axis))
	if err != nil {
		return err
	}
	for i := range sizes {
		if !c.HasOutput(i) {
			continue
		}
		g, err := c.Emit(fxgraph.GetItem, sp, int64(i))
		if err != nil {
			return err
		}
		c.SetOutput(i, g)
	}
	return nil
}

// shapeOnlyDependency reports whether err says an operand is computed only
// from symbolic sizes (Shape, Size), not from input values: it becomes a
// constant when the graph is specialized to a bucket.
func shapeOnlyDependency(err error) bool {
	var nv *NeedsValueError
	return errors.As(err, &nv) && len(nv.Inputs) == 0
}

// shSliceSymbolic converts a Slice (opset >= 10) whose starts or ends are
// computed from symbolic sizes, e.g. x[:, :Shape(y)[1]]: each axis becomes an
// aten.slice.Tensor whose start and end are scalar nodes, folded to
// constants at specialization. Axes and steps must be constant, steps 1.
func shSliceSymbolic(c *Ctx, x *fxgraph.Node) error {
	rank := len(Meta(x).Shape)
	starts, err := c.Input(1)
	if err != nil {
		return err
	}
	ends, err := c.Input(2)
	if err != nil {
		return err
	}
	n := Meta(starts).Shape
	if len(n) != 1 || !n[0].IsStatic() {
		return Unsupported("Slice with starts of shape %s computed at run time", n)
	}
	var axes []int64
	if c.HasInput(3) {
		if axes, err = c.ConstInts(3); err != nil {
			return err
		}
	} else {
		for i := int64(0); i < n[0].Size; i++ {
			axes = append(axes, i)
		}
	}
	if c.HasInput(4) {
		steps, err := c.ConstInts(4)
		if err != nil {
			return err
		}
		for _, st := range steps {
			if st != 1 {
				return Unsupported("Slice with step %d and bounds computed from symbolic sizes", st)
			}
		}
	}
	if int64(len(axes)) != n[0].Size {
		return fmt.Errorf("Slice has %d axes but %d starts", len(axes), n[0].Size)
	}
	out := x
	for i, a := range axes {
		axis, err := shNormAxis(a, rank)
		if err != nil {
			return err
		}
		s, err := c.Emit(fxgraph.AtenSelectInt, starts, int64(0), int64(i))
		if err != nil {
			return err
		}
		e, err := c.Emit(fxgraph.AtenSelectInt, ends, int64(0), int64(i))
		if err != nil {
			return err
		}
		if out, err = c.Emit(fxgraph.AtenSliceTensor, out, int64(axis), s, e, int64(1)); err != nil {
			return err
		}
	}
	c.SetOutput(0, out)
	return nil
}

func shSlice(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xs := Meta(x).Shape
	var starts, ends, axes, steps []int64
	if c.Opset < 10 {
		starts, ends, axes = c.AttrInts("starts", nil), c.AttrInts("ends", nil), c.AttrInts("axes", nil)
	} else {
		starts, err = c.ConstInts(1)
		if err == nil {
			ends, err = c.ConstInts(2)
		}
		if shapeOnlyDependency(err) {
			return shSliceSymbolic(c, x)
		}
		if err != nil {
			return err
		}
		if c.HasInput(3) {
			if axes, err = c.ConstInts(3); err != nil {
				return err
			}
		}
		if c.HasInput(4) {
			if steps, err = c.ConstInts(4); err != nil {
				return err
			}
		}
	}
	if len(starts) != len(ends) {
		return fmt.Errorf("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if steps == nil {
		steps = make([]int64, len(starts))
		for i := range steps {
			steps[i] = 1
		}
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		return fmt.Errorf("starts, ends, axes and steps differ in length")
	}
	out := x
	for i, a := range axes {
		axis, err := shNormAxis(a, len(xs))
		if err != nil {
			return err
		}
		if out, err = shSliceAxis(c, out, axis, xs[axis], starts[i], ends[i], steps[i]); err != nil {
			return err
		}
	}
	if out == x {
		if out, err = c.Emit(fxgraph.AtenAlias, x); err != nil {
			return err
		}
	}
	c.SetOutput(0, out)
	return nil
}

// shSliceAxis slices out along axis (of size d) from start to end by step,
// as ONNX Slice: negative indices count from the end, a negative step walks
// backwards (a flip, then a forward slice); a slice that keeps the whole
// axis emits nothing.
func shSliceAxis(c *Ctx, out *fxgraph.Node, axis int, d fxgraph.Dim, start, end, step int64) (*fxgraph.Node, error) {
	switch {
	case step == 0:
		return nil, fmt.Errorf("slice step cannot be 0")
	case step > 0:
		if d.IsStatic() {
			s, e := shClamp(start, 0, d.Size, d.Size), shClamp(end, 0, d.Size, d.Size)
			if s == 0 && e >= d.Size && step == 1 {
				return out, nil
			}
			start, end = s, max(e, s)
		}
		return c.Emit(fxgraph.AtenSliceTensor, out, int64(axis), start, end, step)
	}
	if !d.IsStatic() {
		return nil, Unsupported("Slice with negative step on symbolic dim %s", d)
	}
	// Walk backwards: flip, then slice forwards.
	s, e := shClamp(start, 0, d.Size-1, d.Size), shClamp(end, -1, d.Size-1, d.Size)
	fs, fe := d.Size-1-s, d.Size-1-e
	out, err := c.Emit(fxgraph.AtenFlip, out, []any{int64(axis)})
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenSliceTensor, out, int64(axis), fs, max(fe, fs), -step)
}

// shClamp adds size to a negative v and clamps it to [lo, hi] (ONNX Slice).
func shClamp(v, lo, hi, size int64) int64 {
	if v < 0 {
		if v < math.MinInt64+size {
			v = math.MinInt64
		} else {
			v += size
		}
	}
	return min(max(v, lo), hi)
}

func shGather(c *Ctx, n *Node) error {
	data, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	axis, err := shNormAxis(c.AttrInt("axis", 0), Meta(data).Rank())
	if err != nil {
		return err
	}
	var out *fxgraph.Node
	if Meta(idx).Rank() == 1 {
		out, err = c.Emit(fxgraph.AtenIndexSelect, data, int64(axis), idx)
	} else {
		list := make([]any, axis+1)
		list[axis] = idx
		out, err = c.Emit(fxgraph.AtenIndexTensor, data, list)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shGatherElements(c *Ctx, n *Node) error {
	data, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	axis, err := shNormAxis(c.AttrInt("axis", 0), Meta(data).Rank())
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenGather, data, int64(axis), idx)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shNDIndices splits GatherND/ScatterND indices [..., k] into the index
// list of aten.index.Tensor / index_put: arange tensors for the batch dims,
// then one index tensor per component of the last dim.
func shNDIndices(c *Ctx, data, idx *fxgraph.Node, batch int) ([]any, error) {
	im := Meta(idx)
	if im.Rank() < 1 || !im.Shape[im.Rank()-1].IsStatic() {
		return nil, fmt.Errorf("indices %s must have a static last dim", im)
	}
	k := int(im.Shape[im.Rank()-1].Size)
	if k == 0 {
		return nil, Unsupported("GatherND/ScatterND with empty index vectors")
	}
	dm := Meta(data)
	if batch+k > dm.Rank() {
		return nil, fmt.Errorf("indices %s index %d dims after %d batch dims of data %s", im, k, batch, dm)
	}
	var list []any
	br := im.Rank() - 1 // rank of the per-point index tensors
	for b := 0; b < batch; b++ {
		d := dm.Shape[b]
		if !d.IsStatic() {
			return nil, Unsupported("GatherND/ScatterND batch dim %d is symbolic", b)
		}
		ar, err := c.EmitKw(fxgraph.AtenArange, []any{d.Size}, map[string]any{"dtype": tensor.Int64})
		if err != nil {
			return nil, err
		}
		shape := make([]any, br)
		for i := range shape {
			shape[i] = int64(1)
		}
		shape[b] = d.Size
		if ar, err = c.Emit(fxgraph.AtenView, ar, shape); err != nil {
			return nil, err
		}
		list = append(list, ar)
	}
	for j := 0; j < k; j++ {
		sel, err := c.Emit(fxgraph.AtenSelectInt, idx, int64(-1), int64(j))
		if err != nil {
			return nil, err
		}
		list = append(list, sel)
	}
	return list, nil
}

func shGatherND(c *Ctx, n *Node) error {
	data, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	batch := int(c.AttrInt("batch_dims", 0))
	list, err := shNDIndices(c, data, idx, batch)
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenIndexTensor, data, list)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shScatterND(c *Ctx, n *Node) error {
	data, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	upd, err := c.Input(2)
	if err != nil {
		return err
	}
	acc := false
	switch red := c.AttrString("reduction", "none"); red {
	case "none":
	case "add":
		acc = true
	case "mul", "max", "min":
		out, err := shScatterNDReduce(c, data, idx, upd, map[string]string{"mul": "prod", "max": "amax", "min": "amin"}[red])
		if err != nil {
			return err
		}
		c.SetOutput(0, out)
		return nil
	default:
		return Unsupported("ScatterND reduction %q", red)
	}
	list, err := shNDIndices(c, data, idx, 0)
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenIndexPut, data, list, upd, acc)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shScatterNDReduce is ScatterND with a multiplicative or min/max
// reduction, which index_put cannot express: the k index components become
// a flat position into data viewed as [prod(dims[:k]), prod(dims[k:])], and
// scatter_reduce along dim 0 combines the update rows there.
func shScatterNDReduce(c *Ctx, data, idx, upd *fxgraph.Node, red string) (*fxgraph.Node, error) {
	for _, t := range []*fxgraph.Op{fxgraph.AtenRemainderScalar, fxgraph.AtenMulScalar, fxgraph.AtenAddTensor, fxgraph.Aten_ToCopy} {
		if !shHasTarget(c, t) {
			return nil, Unsupported("ScatterND reduction %s", red)
		}
	}
	dims, ok := Meta(data).Shape.Static()
	im := Meta(idx)
	ib, ok2 := im.Shape.Static()
	if !ok || !ok2 || len(ib) == 0 {
		return nil, Unsupported("ScatterND reduction %s with symbolic shapes", red)
	}
	k := int(ib[len(ib)-1])
	if k == 0 || k > len(dims) {
		return nil, fmt.Errorf("indices %s do not index data %v", im, dims)
	}
	var err error
	if im.DType != tensor.Int64 {
		if idx, err = c.EmitKw(fxgraph.Aten_ToCopy, []any{idx}, map[string]any{"dtype": tensor.Int64}); err != nil {
			return nil, err
		}
	}
	var flat *fxgraph.Node
	stride := int64(1)
	for j := k - 1; j >= 0; j-- {
		sel, err := c.Emit(fxgraph.AtenSelectInt, idx, int64(-1), int64(j))
		if err != nil {
			return nil, err
		}
		if sel, err = c.Emit(fxgraph.AtenRemainderScalar, sel, dims[j]); err != nil {
			return nil, err
		}
		if sel, err = c.Emit(fxgraph.AtenMulScalar, sel, stride); err != nil {
			return nil, err
		}
		if flat == nil {
			flat = sel
		} else if flat, err = c.Emit(fxgraph.AtenAddTensor, flat, sel); err != nil {
			return nil, err
		}
		stride *= dims[j]
	}
	rows := tensor.NumElements(ib[:len(ib)-1])
	width := tensor.NumElements(dims[k:])
	if flat, err = c.Emit(fxgraph.AtenView, flat, []any{rows, int64(1)}); err != nil {
		return nil, err
	}
	if flat, err = c.Emit(fxgraph.AtenExpand, flat, []any{rows, width}); err != nil {
		return nil, err
	}
	d2, err := c.Emit(fxgraph.AtenView, data, []any{stride, width})
	if err != nil {
		return nil, err
	}
	u2, err := c.Emit(fxgraph.AtenView, upd, []any{rows, width})
	if err != nil {
		return nil, err
	}
	out, err := c.Emit(fxgraph.AtenScatterReduceTwo, d2, int64(0), flat, u2, red)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenView, out, ints(dims))
}

func shScatterElements(c *Ctx, n *Node) error {
	data, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	upd, err := c.Input(2)
	if err != nil {
		return err
	}
	axis, err := shNormAxis(c.AttrInt("axis", 0), Meta(data).Rank())
	if err != nil {
		return err
	}
	var out *fxgraph.Node
	switch red := c.AttrString("reduction", "none"); red {
	case "none":
		out, err = c.Emit(fxgraph.AtenScatterSrc, data, int64(axis), idx, upd)
	case "add", "mul", "max", "min":
		r := map[string]string{"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[red]
		out, err = c.Emit(fxgraph.AtenScatterReduceTwo, data, int64(axis), idx, upd, r)
	default:
		return Unsupported("ScatterElements reduction %q", red)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shSqueeze(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	axes, given, err := shIntsInput(c, 1, "axes", 13)
	if err != nil {
		return err
	}
	xs := Meta(x).Shape
	var out *fxgraph.Node
	if !given {
		out, err = c.Emit(fxgraph.AtenSqueeze, x)
	} else {
		drop := map[int]bool{}
		symbolic := false
		var dims []int64
		for _, a := range axes {
			k, err := shNormAxis(a, len(xs))
			if err != nil {
				return err
			}
			switch d := xs[k]; {
			case d == fxgraph.D(1):
			case d.IsStatic():
				return fmt.Errorf("cannot squeeze dim %d of size %d", k, d.Size)
			default:
				symbolic = true
			}
			drop[k] = true
			dims = append(dims, int64(k))
		}
		if symbolic {
			// The symbolic dims are 1 by the model's contract: view
			// keeps the rank right before specialization.
			var size []any
			for i := range xs {
				if drop[i] {
					continue
				}
				d, err := shDimArg(c, x, i)
				if err != nil {
					return err
				}
				size = append(size, d)
			}
			out, err = c.Emit(fxgraph.AtenView, x, size)
		} else {
			out, err = c.Emit(fxgraph.AtenSqueezeDims, x, ints(dims))
		}
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shUnsqueeze(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	axes, given, err := shIntsInput(c, 1, "axes", 13)
	if err != nil {
		return err
	}
	if !given {
		return fmt.Errorf("Unsqueeze needs axes")
	}
	r := Meta(x).Rank() + len(axes)
	var norm []int
	seen := map[int]bool{}
	for _, a := range axes {
		k, err := shNormAxis(a, r)
		if err != nil {
			return err
		}
		if seen[k] {
			return fmt.Errorf("axis %d repeated in %v", k, axes)
		}
		seen[k] = true
		norm = append(norm, k)
	}
	sort.Ints(norm)
	out := x
	for _, k := range norm {
		if out, err = c.Emit(fxgraph.AtenUnsqueeze, out, int64(k)); err != nil {
			return err
		}
	}
	if out == x {
		if out, err = c.Emit(fxgraph.AtenAlias, x); err != nil {
			return err
		}
	}
	c.SetOutput(0, out)
	return nil
}

func shExpand(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if c.Const(1) == nil {
		if err := shValueDeps(c, 1); err != nil {
			return err
		}
		return shExpandDynamic(c, x)
	}
	shape, err := c.ConstInts(1)
	if err != nil {
		return err
	}
	xs := Meta(x).Shape
	r := max(len(shape), len(xs))
	size := make([]any, r)
	for i := 0; i < r; i++ {
		sv := int64(1)
		if j := i - (r - len(shape)); j >= 0 {
			sv = shape[j]
		}
		j := i - (r - len(xs))
		if j < 0 {
			size[i] = sv
			continue
		}
		d := xs[j]
		switch {
		case d == fxgraph.D(1):
			size[i] = sv
		case sv == 1:
			size[i] = int64(-1)
		case d.IsStatic() && d.Size != sv:
			return fmt.Errorf("cannot expand %s to %v", xs, shape)
		case d.IsStatic():
			size[i] = int64(-1)
		default:
			size[i] = sv // the symbolic dim must be 1 or sv
		}
	}
	out, err := c.Emit(fxgraph.AtenExpand, x, size)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shExpandDynamic expands to a shape computed in the graph (resolved when
// the graph is specialized). ONNX broadcasts the input shape with the given
// one, so the expand sizes are where(shape == 1, input_shape, shape), both
// aligned to the longer rank with leading 1s.
func shExpandDynamic(c *Ctx, x *fxgraph.Node) error {
	s, err := c.Input(1)
	if err != nil {
		return err
	}
	sm := Meta(s)
	if sm.Rank() != 1 || !sm.Shape[0].IsStatic() || !sm.DType.IsInt() {
		return Unsupported("Expand to a shape %s of unknown length", sm)
	}
	for _, t := range []*fxgraph.Op{fxgraph.AtenEqScalar, fxgraph.AtenWhereSelf, fxgraph.Aten_ToCopy} {
		if !shHasTarget(c, t) {
			return Unsupported("Expand to a shape computed at run time")
		}
	}
	k := sm.Shape[0].Size
	r := int64(Meta(x).Rank())
	if sm.DType != tensor.Int64 {
		if s, err = c.EmitKw(fxgraph.Aten_ToCopy, []any{s}, map[string]any{"dtype": tensor.Int64}); err != nil {
			return err
		}
	}
	pad := func(v *fxgraph.Node, have int64) (*fxgraph.Node, error) {
		if have >= max(k, r) {
			return v, nil
		}
		ones, err := c.EmitKw(fxgraph.AtenFull, []any{[]any{max(k, r) - have}, int64(1)}, map[string]any{"dtype": tensor.Int64})
		if err != nil {
			return nil, err
		}
		return c.Emit(fxgraph.AtenCat, []any{ones, v})
	}
	xs, err := c.Emit(fxgraph.Aten_ShapeAsTensor, x)
	if err != nil {
		return err
	}
	if xs, err = pad(xs, r); err != nil {
		return err
	}
	if s, err = pad(s, k); err != nil {
		return err
	}
	one, err := c.Emit(fxgraph.AtenEqScalar, s, int64(1))
	if err != nil {
		return err
	}
	size, err := c.Emit(fxgraph.AtenWhereSelf, one, xs, s)
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenExpand, x, size)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shShape(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.Aten_ShapeAsTensor, x)
	if err != nil {
		return err
	}
	r := int64(Meta(x).Rank())
	start, end := c.AttrInt("start", 0), c.AttrInt("end", r)
	if c.Opset < 15 {
		start, end = 0, r
	}
	s, e := shClamp(start, 0, r, r), shClamp(end, 0, r, r)
	if s != 0 || e != r {
		if out, err = c.Emit(fxgraph.AtenSliceTensor, out, int64(0), s, max(e, s)); err != nil {
			return err
		}
	}
	c.SetOutput(0, out)
	return nil
}

func shSize(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenNumel, x)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shLiteral returns element 0 of t as an IR scalar literal: int64 for
// integer and bool dtypes (exact), float64 otherwise.
func shLiteral(t *tensor.Tensor) any {
	if t.DType.IsInt() || t.DType == tensor.Bool {
		return t.Int64At(0)
	}
	return t.Float64At(0)
}

func shConstantOfShape(c *Ctx, n *Node) error {
	s, err := c.Input(0)
	if err != nil {
		return err
	}
	val := tensor.Scalar(tensor.Float32, 0)
	if a := c.Attr("value"); a != nil && a.T != nil {
		val = a.T
	}
	if val.NumElements() != 1 || val.DType == tensor.String {
		return Unsupported("ConstantOfShape value %s (want one numeric element)", val)
	}
	var size any = s
	if t := c.Const(0); t == nil {
		if err := shValueDeps(c, 0); err != nil {
			return err
		}
	} else {
		if !t.DType.IsInt() || t.Rank() != 1 {
			return fmt.Errorf("shape is %s, want a 1-D int64 tensor", t)
		}
		size = ints(t.Int64s())
	}
	out, err := c.EmitKw(fxgraph.AtenFull, []any{size, shLiteral(val)}, map[string]any{"dtype": val.DType})
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shConstant(c *Ctx, n *Node) error {
	var t *tensor.Tensor
	for _, a := range n.Attributes {
		switch a.Name {
		case "value":
			t = a.T
		case "value_float":
			t = tensor.FromFloat32s([]float32{a.F}, []int64{}...)
		case "value_floats":
			t = tensor.FromFloat32s(append([]float32{}, a.Floats...))
		case "value_int":
			t = tensor.FromInt64s([]int64{a.I}, []int64{}...)
		case "value_ints":
			t = tensor.FromInt64s(append([]int64{}, a.Ints...))
		case "sparse_value", "value_string", "value_strings":
			return Unsupported("Constant with attribute %s", a.Name)
		}
	}
	if t == nil {
		return fmt.Errorf("Constant has no value attribute")
	}
	if t.DType == tensor.String {
		return Unsupported("string constants")
	}
	c.SetOutput(0, c.s.modelConstant(n.Outputs[0], t))
	return nil
}

func shTile(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	reps, err := c.ConstInts(1)
	if err != nil {
		return err
	}
	if len(reps) != Meta(x).Rank() {
		return fmt.Errorf("repeats %v must have one entry per dim of %s", reps, Meta(x).Shape)
	}
	out, err := c.Emit(fxgraph.AtenRepeat, x, ints(reps))
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shRange(c *Ctx, n *Node) error {
	var vals [3]any
	dt := tensor.Invalid
	for i := range vals {
		t, err := c.ConstValue(i)
		if err != nil {
			// A bound computed from symbolic sizes (Shape -> Gather ->
			// Squeeze -> Range, as in every position encoding) stays a
			// graph value; Specialize folds it per shape bucket.
			if shValueDeps(c, i) != nil {
				return err
			}
			n, err := c.Input(i)
			if err != nil {
				return err
			}
			if m := Meta(n); m.Rank() > 1 || (m.Rank() == 1 && m.Shape[0] != fxgraph.D(1)) {
				return fmt.Errorf("input %d is %s, want a scalar", i, m)
			}
			vals[i], dt = n, Meta(n).DType
			continue
		}
		if t.NumElements() != 1 {
			return fmt.Errorf("input %d is %s, want a scalar", i, t)
		}
		vals[i] = shLiteral(t)
		dt = t.DType
	}
	out, err := c.EmitKw(fxgraph.AtenArangeStartStep, vals[:], map[string]any{"dtype": dt})
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shTrilu(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	k := int64(0)
	if c.HasInput(1) {
		v, err := c.ConstInts(1)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("k must be a scalar, got %v", v)
		}
		k = v[0]
	}
	target := fxgraph.AtenTriu
	if c.AttrInt("upper", 1) == 0 {
		target = fxgraph.AtenTril
	}
	out, err := c.Emit(target, x, k)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shStaticNCHW returns the dims of a rank-4 input whose C, H and W are static.
func shStaticNCHW(c *Ctx, x *fxgraph.Node, op string) (nDim any, ch, h, w int64, err error) {
	s := Meta(x).Shape
	if len(s) != 4 {
		return nil, 0, 0, 0, fmt.Errorf("%s wants a rank-4 input, got %s", op, s)
	}
	for _, d := range s[1:] {
		if !d.IsStatic() {
			return nil, 0, 0, 0, Unsupported("%s of %s with symbolic C, H or W", op, s)
		}
	}
	nDim, err = shDimArg(c, x, 0)
	return nDim, s[1].Size, s[2].Size, s[3].Size, err
}

func shDepthToSpace(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	b := c.AttrInt("blocksize", 0)
	if b <= 0 {
		return fmt.Errorf("blocksize must be positive, got %d", b)
	}
	var out *fxgraph.Node
	mode := c.AttrString("mode", "DCR")
	switch mode {
	case "CRD":
		out, err = c.Emit(fxgraph.AtenPixelShuffle, x, b)
	case "DCR":
		nd, ch, h, w, err := shStaticNCHW(c, x, "DepthToSpace")
		if err != nil {
			return err
		}
		if ch%(b*b) != 0 {
			return fmt.Errorf("channels %d not divisible by blocksize^2 %d", ch, b*b)
		}
		cc := ch / (b * b)
		v, err := c.Emit(fxgraph.AtenView, x, []any{nd, b, b, cc, h, w})
		if err != nil {
			return err
		}
		if v, err = c.Emit(fxgraph.AtenPermute, v, ints([]int64{0, 3, 4, 1, 5, 2})); err != nil {
			return err
		}
		out, err = c.Emit(fxgraph.AtenView, v, []any{nd, cc, h * b, w * b})
		if err != nil {
			return err
		}
	default:
		return Unsupported("DepthToSpace mode %q", mode)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shSpaceToDepth(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	b := c.AttrInt("blocksize", 0)
	if b <= 0 {
		return fmt.Errorf("blocksize must be positive, got %d", b)
	}
	nd, ch, h, w, err := shStaticNCHW(c, x, "SpaceToDepth")
	if err != nil {
		return err
	}
	if h%b != 0 || w%b != 0 {
		return fmt.Errorf("H %d and W %d must be divisible by blocksize %d", h, w, b)
	}
	v, err := c.Emit(fxgraph.AtenView, x, []any{nd, ch, h / b, b, w / b, b})
	if err != nil {
		return err
	}
	if v, err = c.Emit(fxgraph.AtenPermute, v, ints([]int64{0, 3, 5, 1, 2, 4})); err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenView, v, []any{nd, ch * b * b, h / b, w / b})
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shOneHot builds full(off) and scatters the on value at the indices along
// axis; negative indices wrap (index + depth) as the IR's scatter does, and
// out-of-range ones leave their row all off, as ONNX asks.
func shOneHot(c *Ctx, n *Node) error {
	idx, err := c.Input(0)
	if err != nil {
		return err
	}
	dt, err := c.ConstValue(1)
	if err != nil {
		return err
	}
	vals, err := c.ConstValue(2)
	if err != nil {
		return err
	}
	if dt.NumElements() != 1 || vals.NumElements() != 2 {
		return fmt.Errorf("OneHot wants a scalar depth and two values, got %s and %s", dt, vals)
	}
	depth := int64(dt.Float64At(0))
	if dt.DType.IsInt() {
		depth = dt.Int64At(0)
	}
	im := Meta(idx)
	r := im.Rank() + 1
	axis, err := shNormAxis(c.AttrInt("axis", -1), r)
	if err != nil {
		return err
	}
	if !im.DType.IsInt() {
		if !shHasTarget(c, fxgraph.Aten_ToCopy) {
			return Unsupported("OneHot with %s indices", im.DType)
		}
		if idx, err = c.EmitKw(fxgraph.Aten_ToCopy, []any{idx}, map[string]any{"dtype": tensor.Int64}); err != nil {
			return err
		}
	}
	var size []any
	for i := 0; i < r; i++ {
		switch {
		case i == axis:
			size = append(size, depth)
		default:
			j := i
			if i > axis {
				j--
			}
			d, err := shDimArg(c, idx, j)
			if err != nil {
				return err
			}
			size = append(size, d)
		}
	}
	lit := func(i int64) any {
		if vals.DType.IsInt() || vals.DType == tensor.Bool {
			return vals.Int64At(i)
		}
		return vals.Float64At(i)
	}
	base, err := c.EmitKw(fxgraph.AtenFull, []any{size, lit(0)}, map[string]any{"dtype": vals.DType})
	if err != nil {
		return err
	}
	u, err := c.Emit(fxgraph.AtenUnsqueeze, idx, int64(axis))
	if err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenScatterValue, base, int64(axis), u, lit(1))
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func shEyeLike(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok || len(dims) != 2 {
		return Unsupported("EyeLike of %s (want a static 2-D shape)", m)
	}
	dt := m.DType
	if a := c.Attr("dtype"); a != nil {
		if dt, err = shONNXDType(a.I); err != nil {
			return err
		}
	}
	k := c.AttrInt("k", 0)
	t := tensor.New(dt, dims...)
	for i := int64(0); i < dims[0]; i++ {
		if j := i + k; j >= 0 && j < dims[1] {
			t.SetFloat64(i*dims[1]+j, 1)
		}
	}
	c.SetOutput(0, c.s.modelConstant(n.Outputs[0], t))
	return nil
}

// shONNXDType maps a TensorProto.DataType code to a dtype.
func shONNXDType(code int64) (tensor.DType, error) {
	m := map[int64]tensor.DType{
		1: tensor.Float32, 2: tensor.Uint8, 3: tensor.Int8, 4: tensor.Uint16, 5: tensor.Int16,
		6: tensor.Int32, 7: tensor.Int64, 9: tensor.Bool, 10: tensor.Float16, 11: tensor.Float64,
		12: tensor.Uint32, 13: tensor.Uint64, 14: tensor.Complex64, 15: tensor.Complex128, 16: tensor.BFloat16,
	}
	dt, ok := m[code]
	if !ok {
		return tensor.Invalid, Unsupported("ONNX data type %d", code)
	}
	return dt, nil
}

// shPad converts Pad (all opsets): constant mode to constant_pad_nd;
// reflect and edge to reflection/replication_padNd when the padded dims
// fit them, else to index_select with constant positions per dim; wrap to
// index_select. Negative pads crop with slice first.
func shPad(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xm := Meta(x)
	r := xm.Rank()
	mode := c.AttrString("mode", "constant")
	var pads []int64
	var value any = float64(0)
	switch {
	case c.Opset < 11:
		name := "pads"
		if c.Opset < 2 {
			name = "paddings"
		}
		pads = c.AttrInts(name, nil)
		value = c.AttrFloat("value", 0)
	default:
		if pads, err = c.ConstInts(1); err != nil {
			return err
		}
		if c.HasInput(2) {
			t, err := c.ConstValue(2)
			if err != nil {
				return err
			}
			if t.NumElements() != 1 {
				return fmt.Errorf("constant_value is %s, want a scalar", t)
			}
			value = shLiteral(t)
		}
	}
	axes, err := padAxes(c, r)
	if err != nil {
		return err
	}
	if len(pads) != 2*len(axes) {
		return fmt.Errorf("pads %v: want %d values", pads, 2*len(axes))
	}
	before, after := make([]int64, r), make([]int64, r)
	for i, a := range axes {
		before[a], after[a] = pads[i], pads[i+len(axes)]
	}
	if fv, ok := value.(float64); ok && (xm.DType.IsInt() || xm.DType == tensor.Bool) {
		value = int64(fv)
	}
	var out *fxgraph.Node
	switch mode {
	case "constant":
		tp := []any{}
		for i := r - 1; i >= shFirstPadded(before, after); i-- {
			tp = append(tp, before[i], after[i])
		}
		out, err = c.Emit(fxgraph.AtenConstantPadNd, x, tp, value)
	case "reflect", "edge", "wrap":
		out, err = shPadIndexed(c, x, mode, before, after)
	default:
		return Unsupported("Pad mode %q", mode)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// shFirstPadded returns the first dim with nonzero padding (or len).
func shFirstPadded(before, after []int64) int {
	for i := range before {
		if before[i] != 0 || after[i] != 0 {
			return i
		}
	}
	return len(before)
}

// shPadIndexed pads x by before/after per dim in mode reflect, edge or wrap:
// negative pads crop first; trailing 1-3 padded dims of reflect/edge use
// PyTorch's reflection/replication pads; otherwise each padded dim gathers
// its source positions.
func shPadIndexed(c *Ctx, x *fxgraph.Node, mode string, before, after []int64) (*fxgraph.Node, error) {
	r := len(before)
	x, err := shCropNegativePads(c, x, before, after)
	if err != nil {
		return nil, err
	}
	xs := Meta(x).Shape
	first := shFirstPadded(before, after)
	if first == r {
		return c.Emit(fxgraph.AtenAlias, x)
	}
	if op, tp, ok := shTorchPad(mode, xs, before, after, first); ok {
		return c.Emit(op, x, tp)
	}
	for i := 0; i < r; i++ {
		if before[i] == 0 && after[i] == 0 {
			continue
		}
		if !xs[i].IsStatic() || xs[i].Size == 0 {
			return nil, Unsupported("Pad mode %s on dim %s", mode, xs[i])
		}
		pos := shPadPositions(mode, xs[i].Size, before[i], after[i])
		if x, err = c.Emit(fxgraph.AtenIndexSelect, x, int64(i), c.IntsConst(pos)); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// shCropNegativePads slices off the negative pads of x and sets them to 0
// in before and after.
func shCropNegativePads(c *Ctx, x *fxgraph.Node, before, after []int64) (*fxgraph.Node, error) {
	xs := Meta(x).Shape
	var err error
	for i := range before {
		if before[i] >= 0 && after[i] >= 0 {
			continue
		}
		if !xs[i].IsStatic() {
			return nil, Unsupported("negative Pad on symbolic dim %s", xs[i])
		}
		s := max(-before[i], 0)
		e := xs[i].Size - max(-after[i], 0)
		if x, err = c.Emit(fxgraph.AtenSliceTensor, x, int64(i), s, max(e, s)); err != nil {
			return nil, err
		}
		before[i], after[i] = max(before[i], 0), max(after[i], 0)
	}
	return x, nil
}

// shTorchPad returns PyTorch's reflection or replication pad of the
// trailing 1-3 dims and its padding list, when mode is reflect or edge,
// only those dims are padded (first is the first padded dim) and, for
// reflect, each static pad is smaller than its dim.
func shTorchPad(mode string, xs fxgraph.Shape, before, after []int64, first int) (*fxgraph.Op, []any, bool) {
	if mode == "wrap" {
		return nil, nil, false
	}
	r := len(before)
	nd := -1
	for _, cand := range []int{r - 2, r - 1} {
		if cand >= 1 && cand <= 3 && r-cand <= first {
			nd = cand
			break
		}
	}
	if nd <= 0 {
		return nil, nil, false
	}
	for i := r - nd; i < r; i++ {
		// A symbolic dim is checked when the graph is specialized
		// (reflection_pad's shape rule wants pads < size).
		if mode == "reflect" && xs[i].IsStatic() && (before[i] >= xs[i].Size || after[i] >= xs[i].Size) && (before[i] != 0 || after[i] != 0) {
			return nil, nil, false
		}
	}
	var tp []any
	for i := r - 1; i >= r-nd; i-- {
		tp = append(tp, before[i], after[i])
	}
	op := fxgraph.ReflectionPadOp(nd)
	if mode == "edge" {
		op = fxgraph.ReplicationPadOp(nd)
	}
	return op, tp, true
}

// shPadPositions returns, for a dim of size padded by before and after in
// mode reflect, edge or wrap, the source position of each output position.
func shPadPositions(mode string, size, before, after int64) []int64 {
	var pos []int64
	for o := int64(0); o < size+before+after; o++ {
		j := o - before
		switch {
		case j >= 0 && j < size:
		case mode == "wrap":
			j = ((j % size) + size) % size
		case mode == "edge":
			j = min(max(j, 0), size-1)
		case size == 1:
			j = 0
		default:
			p := 2 * (size - 1)
			j = ((j % p) + p) % p
			if j >= size {
				j = p - j
			}
		}
		pos = append(pos, j)
	}
	return pos
}

// shReverseSequence reverses the first sequence_lens[b] steps along
// time_axis of every batch b, as a gather along time_axis with positions
// where(t < len, len - 1 - t, t) (computed in the graph, so the lengths may
// be run-time inputs).
func shReverseSequence(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	lens, err := c.Input(1)
	if err != nil {
		return err
	}
	for _, t := range []*fxgraph.Op{fxgraph.AtenSubTensor, fxgraph.AtenSubScalar, fxgraph.AtenLtTensor, fxgraph.AtenWhereSelf, fxgraph.Aten_ToCopy} {
		if !shHasTarget(c, t) {
			return Unsupported("ReverseSequence")
		}
	}
	xm := Meta(x)
	r := xm.Rank()
	if r < 2 {
		return fmt.Errorf("ReverseSequence wants rank >= 2, got %s", xm.Shape)
	}
	ta, err := shNormAxis(c.AttrInt("time_axis", 0), r)
	if err != nil {
		return err
	}
	ba, err := shNormAxis(c.AttrInt("batch_axis", 1), r)
	if err != nil {
		return err
	}
	if ta == ba {
		return fmt.Errorf("time_axis and batch_axis are both %d", ta)
	}
	td := xm.Shape[ta]
	if !td.IsStatic() {
		return Unsupported("ReverseSequence over symbolic time dim %s", td)
	}
	// shapeWith returns a rank-r size list of 1s with d at axis k.
	shapeWith := func(k int, d any) []any {
		out := make([]any, r)
		for i := range out {
			out[i] = int64(1)
		}
		out[k] = d
		return out
	}
	t, err := c.EmitKw(fxgraph.AtenArange, []any{td.Size}, map[string]any{"dtype": tensor.Int64})
	if err != nil {
		return err
	}
	if t, err = c.Emit(fxgraph.AtenView, t, shapeWith(ta, td.Size)); err != nil {
		return err
	}
	if Meta(lens).DType != tensor.Int64 {
		if lens, err = c.EmitKw(fxgraph.Aten_ToCopy, []any{lens}, map[string]any{"dtype": tensor.Int64}); err != nil {
			return err
		}
	}
	bd, err := shDimArg(c, x, ba)
	if err != nil {
		return err
	}
	if lens, err = c.Emit(fxgraph.AtenView, lens, shapeWith(ba, bd)); err != nil {
		return err
	}
	last, err := c.Emit(fxgraph.AtenSubScalar, lens, int64(1))
	if err != nil {
		return err
	}
	rev, err := c.Emit(fxgraph.AtenSubTensor, last, t)
	if err != nil {
		return err
	}
	inside, err := c.Emit(fxgraph.AtenLtTensor, t, lens)
	if err != nil {
		return err
	}
	pos, err := c.Emit(fxgraph.AtenWhereSelf, inside, rev, t)
	if err != nil {
		return err
	}
	size := make([]any, r)
	for i := range size {
		if i == ta || i == ba {
			size[i] = int64(-1)
		} else if size[i], err = shDimArg(c, x, i); err != nil {
			return err
		}
	}
	if pos, err = c.Emit(fxgraph.AtenExpand, pos, size); err != nil {
		return err
	}
	out, err := c.Emit(fxgraph.AtenGather, x, int64(ta), pos)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// padAxes returns the axes Pad's pads apply to (input 3 from opset 18, else
// every axis of a rank-r input), normalized.
func padAxes(c *Ctx, r int) ([]int, error) {
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if c.Opset < 18 || !c.HasInput(3) {
		return axes, nil
	}
	av, err := c.ConstInts(3)
	if err != nil {
		return nil, err
	}
	axes = axes[:0]
	for _, a := range av {
		k, err := shNormAxis(a, r)
		if err != nil {
			return nil, err
		}
		axes = append(axes, k)
	}
	return axes, nil
}
