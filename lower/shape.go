package lower

import (
	"fmt"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerShapeOps registers the rules of shape and indexing operators.
func registerShapeOps(r *Registry) {
	for _, t := range []*fxgraph.Op{
		fxgraph.AtenView, fxgraph.Aten_UnsafeView, fxgraph.AtenReshape,
		fxgraph.AtenUnsqueeze, fxgraph.AtenSqueezeDims, fxgraph.AtenSqueezeDim, fxgraph.AtenSqueeze,
		fxgraph.AtenAlias, fxgraph.AtenLiftFreshCopy,
	} {
		r.Register(t, shLowerReshape)
	}
	r.Register(fxgraph.AtenPermute, shLowerPermute)
	r.Register(fxgraph.AtenT, shLowerPermute)
	r.Register(fxgraph.AtenTransposeInt, shLowerPermute)
	r.Register(fxgraph.AtenExpand, shLowerExpand)
	r.Register(fxgraph.AtenCat, shLowerCat)
	r.Register(fxgraph.AtenSplitWithSizes, shLowerSplit)
	r.Register(fxgraph.AtenSplitTensor, shLowerSplit)
	r.Register(fxgraph.AtenSliceTensor, shLowerSlice)
	r.Register(fxgraph.AtenSelectInt, shLowerSelect)
	r.Register(fxgraph.AtenFlip, shLowerFlip)
	r.Register(fxgraph.AtenIndexSelect, shLowerIndexSelect)
	r.Register(fxgraph.AtenIndexTensor, shLowerIndex)
	r.Register(fxgraph.AtenGather, shLowerGather)
	r.Register(fxgraph.AtenScatterSrc, shLowerScatter)
	r.Register(fxgraph.AtenScatterValue, shLowerScatter)
	r.Register(fxgraph.AtenScatterReduceTwo, shLowerScatter)
	r.Register(fxgraph.AtenIndexPut, shLowerIndexPut)
	r.Register(fxgraph.AtenConstantPadNd, shLowerConstantPad)
	for _, op := range []*fxgraph.Op{fxgraph.AtenReflectionPad1d, fxgraph.AtenReflectionPad2d, fxgraph.AtenReflectionPad3d,
		fxgraph.AtenReplicationPad1d, fxgraph.AtenReplicationPad2d, fxgraph.AtenReplicationPad3d} {
		r.Register(op, shLowerIndexPad)
	}
	r.Register(fxgraph.AtenFull, shLowerFull)
	r.Register(fxgraph.AtenArangeStartStep, shLowerArange)
	r.Register(fxgraph.AtenArangeStart, shLowerArange)
	r.Register(fxgraph.AtenArange, shLowerArange)
	r.Register(fxgraph.AtenRepeat, shLowerRepeat)
	r.Register(fxgraph.AtenTriu, shLowerTri)
	r.Register(fxgraph.AtenTril, shLowerTri)
	r.Register(fxgraph.AtenPixelShuffle, shLowerPixel)
	r.Register(fxgraph.AtenPixelUnshuffle, shLowerPixel)
	r.Register(fxgraph.Aten_ShapeAsTensor, shLowerShapeOf)
	r.Register(fxgraph.AtenSymSizeInt, shLowerShapeOf)
	r.Register(fxgraph.AtenNumel, shLowerShapeOf)
}

// shOne wraps a single result.
func shOne(v *stablehlo.Value, err error) ([]*stablehlo.Value, error) {
	if err != nil {
		return nil, err
	}
	return []*stablehlo.Value{v}, nil
}

// shIn returns in[i] or an error when argument i has no lowered tensor.
func shIn(n *fxgraph.Node, in []*stablehlo.Value, i int) (*stablehlo.Value, error) {
	if i >= len(in) || in[i] == nil {
		return nil, fmt.Errorf("argument %d is not a tensor", i)
	}
	return in[i], nil
}

// shNormDim reads int argument i (or kwarg name) as a dim of a rank-r tensor.
func shNormDim(n *fxgraph.Node, i int, name string, def int64, rank int) (int, error) {
	d, err := n.IntArg(i, name, def)
	if err != nil {
		return 0, err
	}
	return fxgraph.NormDim(d, rank)
}

func shLowerReshape(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	s, err := ctx.TypeOf(n.Meta.Vals[0])
	if err != nil {
		return nil, err
	}
	if x.Type().Equal(s) {
		return []*stablehlo.Value{x}, nil
	}
	return shOne(x.Block().Reshape(x, s.Dims...))
}

// shPermOf returns the permutation of a permute, t or transpose node.
func shPermOf(n *fxgraph.Node, rank int) ([]int64, error) {
	perm := make([]int64, rank)
	for i := range perm {
		perm[i] = int64(i)
	}
	switch n.Op {
	case fxgraph.AtenT:
		if rank == 2 {
			perm[0], perm[1] = 1, 0
		}
	case fxgraph.AtenTransposeInt:
		if rank == 0 {
			return perm, nil
		}
		a, err := shNormDim(n, 1, "dim0", 0, rank)
		if err != nil {
			return nil, err
		}
		b, err := shNormDim(n, 2, "dim1", 0, rank)
		if err != nil {
			return nil, err
		}
		perm[a], perm[b] = int64(b), int64(a)
	default:
		dims, err := n.IntsArg(1, "dims", nil)
		if err != nil {
			return nil, err
		}
		if len(dims) != rank {
			return nil, fmt.Errorf("permutation %v for rank %d", dims, rank)
		}
		for i, d := range dims {
			k, err := fxgraph.NormDim(d, rank)
			if err != nil {
				return nil, err
			}
			perm[i] = int64(k)
		}
	}
	return perm, nil
}

func shLowerPermute(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	perm, err := shPermOf(n, x.Type().Rank())
	if err != nil {
		return nil, err
	}
	identity := true
	for i, p := range perm {
		identity = identity && int64(i) == p
	}
	if identity {
		return []*stablehlo.Value{x}, nil
	}
	return shOne(x.Block().Transpose(x, perm...))
}

func shLowerExpand(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	_, dims := Out(n, 0)
	return shOne(ctx.BroadcastTo(x, dims))
}

func shLowerCat(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	list, ok := n.Arg(0).([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("tensors is %s, want a list", fxgraph.FormatArg(n.Arg(0)))
	}
	dt, dims := Out(n, 0)
	var vals []*stablehlo.Value
	for _, e := range list {
		m, ok := e.(*fxgraph.Node)
		if !ok {
			return nil, fmt.Errorf("tensors element %s is not a tensor", fxgraph.FormatArg(e))
		}
		s, _ := m.Val().Shape.Static()
		if len(s) == 1 && s[0] == 0 && len(dims) != 1 {
			continue // legacy empty tensor, skipped by PyTorch
		}
		v, err := ctx.Value(m)
		if err != nil {
			return nil, err
		}
		if v, err = ctx.ConvertTo(v, dt); err != nil {
			return nil, err
		}
		vals = append(vals, v)
	}
	if len(vals) == 0 {
		return shOne(ctx.Full(dt, 0, dims))
	}
	dim, err := shNormDim(n, 1, "dim", 0, len(dims))
	if err != nil {
		return nil, err
	}
	return shOne(vals[0].Block().Concatenate(dim, vals...))
}

func shLowerSplit(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	xd := x.Type().Dims
	dim, err := shNormDim(n, 2, "dim", 0, len(xd))
	if err != nil {
		return nil, err
	}
	var outs []*stablehlo.Value
	off := int64(0)
	for i := range n.Meta.Vals {
		dt, dims := Out(n, i)
		k := dims[dim]
		if tensor.NumElements(dims) == 0 {
			v, err := ctx.Full(dt, 0, dims) // XLA rejects empty slices at the end
			if err != nil {
				return nil, err
			}
			outs = append(outs, v)
			off += k
			continue
		}
		starts := make([]int64, len(xd))
		limits := append([]int64(nil), xd...)
		starts[dim], limits[dim] = off, off+k
		v, err := x.Block().Slice(x, starts, limits, nil)
		if err != nil {
			return nil, err
		}
		outs = append(outs, v)
		off += k
	}
	return outs, nil
}

// shSliceStart returns the clamped start of a slice.Tensor node on a dim of
// the given size.
func shSliceStart(n *fxgraph.Node, size int64) (int64, error) {
	a := n.ArgOr(2, "start", nil)
	if a == nil {
		return 0, nil
	}
	var s int64
	if m, ok := a.(*fxgraph.Node); ok {
		t := m.Graph().ConstValue(m)
		if t == nil || t.NumElements() != 1 {
			return 0, fmt.Errorf("start %s is not a constant", m.Name)
		}
		s = t.Int64At(0)
	} else {
		v, ok := fxgraph.AsInt(a)
		if !ok {
			return 0, fmt.Errorf("start is %s, want an int", fxgraph.FormatArg(a))
		}
		s = v
	}
	if s < 0 {
		s += size
	}
	return min(max(s, 0), size), nil
}

func shLowerSlice(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	xd := x.Type().Dims
	dim, err := shNormDim(n, 1, "dim", 0, len(xd))
	if err != nil {
		return nil, err
	}
	step, err := n.ParamInt("step")
	if err != nil {
		return nil, err
	}
	start, err := shSliceStart(n, int64(xd[dim]))
	if err != nil {
		return nil, err
	}
	dt, dims := Out(n, 0)
	if tensor.NumElements(dims) == 0 {
		return shOne(ctx.Full(dt, 0, dims)) // XLA rejects empty slices at the end
	}
	k := dims[dim]
	starts := make([]int64, len(xd))
	limits := append([]int64(nil), xd...)
	strides := make([]int64, len(xd))
	for i := range strides {
		strides[i] = 1
	}
	starts[dim] = start
	limits[dim] = start + max(k-1, 0)*step + 1
	if k == 0 {
		limits[dim] = start
	}
	strides[dim] = step
	return shOne(x.Block().Slice(x, starts, limits, strides))
}

func shLowerSelect(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	xd := x.Type().Dims
	dim, err := shNormDim(n, 1, "dim", 0, len(xd))
	if err != nil {
		return nil, err
	}
	i, err := n.IntArg(2, "index", 0)
	if err != nil {
		return nil, err
	}
	if i < 0 {
		i += int64(xd[dim])
	}
	starts := make([]int64, len(xd))
	limits := append([]int64(nil), xd...)
	starts[dim], limits[dim] = i, i+1
	v, err := x.Block().Slice(x, starts, limits, nil)
	if err != nil {
		return nil, err
	}
	s, err := ctx.TypeOf(n.Meta.Vals[0])
	if err != nil {
		return nil, err
	}
	return shOne(v.Block().Reshape(v, s.Dims...))
}

func shLowerFlip(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	dims, err := n.IntsArg(1, "dims", nil)
	if err != nil {
		return nil, err
	}
	var axes []int64
	for _, d := range dims {
		k, err := fxgraph.NormDim(d, x.Type().Rank())
		if err != nil {
			return nil, err
		}
		axes = append(axes, int64(k))
	}
	if len(axes) == 0 {
		return []*stablehlo.Value{x}, nil
	}
	return shOne(x.Block().Reverse(x, axes...))
}

// shIndexType is the program dtype indices are computed in.
func (ctx *Context) shIndexType() (stablehlo.ElementType, error) { return ctx.Elem(tensor.Int64) }

// shWrapIndex converts idx to the index type and maps negative entries to
// idx + size.
func shWrapIndex(ctx *Context, idx *stablehlo.Value, size int) (*stablehlo.Value, error) {
	it, err := ctx.shIndexType()
	if err != nil {
		return nil, err
	}
	if idx.Type().Elem != it {
		if idx, err = idx.Block().Convert(idx, it); err != nil {
			return nil, err
		}
	}
	dims := make([]int64, idx.Type().Rank())
	for i, d := range idx.Type().Dims {
		dims[i] = int64(d)
	}
	zero, err := ctx.Full(tensor.Int64, 0, dims)
	if err != nil {
		return nil, err
	}
	sz, err := ctx.Full(tensor.Int64, float64(size), dims)
	if err != nil {
		return nil, err
	}
	neg, err := idx.Block().Compare(idx, zero, stablehlo.LT, stablehlo.CompareSigned)
	if err != nil {
		return nil, err
	}
	plus, err := idx.Block().Add(idx, sz)
	if err != nil {
		return nil, err
	}
	return neg.Block().Select(neg, plus, idx)
}

// shStackIndices reshapes each index (all of shape B) to B+[1] and
// concatenates them into the B+[k] start indices of a gather or scatter.
func shStackIndices(idxs []*stablehlo.Value) (*stablehlo.Value, error) {
	var parts []*stablehlo.Value
	for _, v := range idxs {
		s := v.Type()
		r, err := v.Block().Reshape(v, append(append([]int64(nil), s.Dims...), 1)...)
		if err != nil {
			return nil, err
		}
		parts = append(parts, r)
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return parts[0].Block().Concatenate(len(parts[0].Type().Dims)-1, parts...)
}

// shAdvanced is a lowered advanced index: dims pos of the input indexed by
// idx (wrapped, broadcast to bdims).
type shAdvanced struct {
	pos      []int64
	idx      []*stablehlo.Value
	bdims    []int64
	adjacent bool
}

// shAdvancedIndices lowers the indices list (argument 1) of index.Tensor or
// index_put against input dims xd.
func shAdvancedIndices(ctx *Context, n *fxgraph.Node, xd []int64) (*shAdvanced, error) {
	list, ok := n.Arg(1).([]any)
	if !ok {
		return nil, fmt.Errorf("indices is %s, want a list", fxgraph.FormatArg(n.Arg(1)))
	}
	a := &shAdvanced{}
	var bshapes []fxgraph.Shape
	for i, e := range list {
		if e == nil {
			continue
		}
		m, ok := e.(*fxgraph.Node)
		if !ok {
			return nil, fmt.Errorf("indices[%d] is %s, want a tensor", i, fxgraph.FormatArg(e))
		}
		v, err := ctx.Value(m)
		if err != nil {
			return nil, err
		}
		if v, err = shWrapIndex(ctx, v, int(xd[i])); err != nil {
			return nil, err
		}
		a.pos = append(a.pos, int64(i))
		a.idx = append(a.idx, v)
		bshapes = append(bshapes, m.Val().Shape)
	}
	if len(a.pos) == 0 {
		return nil, fmt.Errorf("no index tensors")
	}
	b, err := fxgraph.BroadcastShapes(bshapes...)
	if err != nil {
		return nil, err
	}
	bd, ok := b.Static()
	if !ok {
		return nil, fmt.Errorf("index shape %s is not static", b)
	}
	for i, v := range a.idx {
		if a.idx[i], err = ctx.BroadcastTo(v, bd); err != nil {
			return nil, err
		}
	}
	a.bdims = bd
	a.adjacent = a.pos[len(a.pos)-1]-a.pos[0] == int64(len(a.pos)-1)
	return a, nil
}

// windowDims returns, for the result of indexing an input of rank r, the
// result positions of the input dims that are not indexed.
func (a *shAdvanced) windowDims(r int) []int64 {
	nb := int64(len(a.bdims))
	var out []int64
	j := int64(0)
	for d := range int64(r) {
		if slices.Contains(a.pos, d) {
			continue
		}
		switch {
		case !a.adjacent:
			out = append(out, nb+j)
		case d < a.pos[0]:
			out = append(out, d)
		default:
			out = append(out, d-int64(len(a.pos))+nb)
		}
		j++
	}
	return out
}

// gather returns x[indices] with PyTorch's advanced-indexing layout.
func (a *shAdvanced) gather(x *stablehlo.Value) (*stablehlo.Value, error) {
	xd := x.Type().Dims
	start, err := shStackIndices(a.idx)
	if err != nil {
		return nil, err
	}
	sizes := append([]int64(nil), xd...)
	for _, p := range a.pos {
		sizes[p] = 1
	}
	return x.Block().Gather(x, start, stablehlo.GatherDims{OffsetDims: a.windowDims(len(xd)), CollapsedSliceDims: a.pos,
		StartIndexMap: a.pos, IndexVectorDim: int64(len(a.bdims))}, sizes, false)
}

func shLowerIndex(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	a, err := shAdvancedIndices(ctx, n, x.Type().Dims)
	if err != nil {
		return nil, err
	}
	return shOne(a.gather(x))
}

func shLowerIndexSelect(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	idx, err := shIn(n, in, 2)
	if err != nil {
		return nil, err
	}
	xd := x.Type().Dims
	if len(xd) == 0 {
		return []*stablehlo.Value{x}, nil
	}
	dim, err := shNormDim(n, 1, "dim", 0, len(xd))
	if err != nil {
		return nil, err
	}
	if idx.Type().Rank() == 0 {
		if idx, err = idx.Block().Reshape(idx, 1); err != nil {
			return nil, err
		}
	}
	if idx, err = shWrapIndex(ctx, idx, int(xd[dim])); err != nil {
		return nil, err
	}
	a := &shAdvanced{pos: []int64{int64(dim)}, idx: []*stablehlo.Value{idx}, bdims: idx.Type().Dims, adjacent: true}
	return shOne(a.gather(x))
}

// shIndexConst gathers x along dim at the constant positions idx.
func shIndexConst(ctx *Context, x *stablehlo.Value, dim int, idx []int64) (*stablehlo.Value, error) {
	t := tensor.New(tensor.Int32, int64(len(idx)))
	for i, v := range idx {
		t.SetInt64(int64(i), v)
	}
	c, err := ctx.Constant(t)
	if err != nil {
		return nil, err
	}
	a := &shAdvanced{pos: []int64{int64(dim)}, idx: []*stablehlo.Value{c}, bdims: []int64{int64(len(idx))}, adjacent: true}
	return a.gather(x)
}

// shCoords builds the full start indices (index shape + [r]) of an
// elementwise gather/scatter: iota along every dim except dim, which takes
// the (wrapped) index values.
func shCoords(ctx *Context, idx *stablehlo.Value, dim, size int) (*stablehlo.Value, error) {
	w, err := shWrapIndex(ctx, idx, size)
	if err != nil {
		return nil, err
	}
	s := w.Type()
	var comps []*stablehlo.Value
	for d := 0; d < s.Rank(); d++ {
		if d == dim {
			comps = append(comps, w)
			continue
		}
		io, err := ctx.Fn.Block().Iota(s, d)
		if err != nil {
			return nil, err
		}
		comps = append(comps, io)
	}
	return shStackIndices(comps)
}

// shAsRank1 reshapes a scalar to shape [1] (gather/scatter treat scalars as
// 1-element vectors).
func shAsRank1(v *stablehlo.Value) (*stablehlo.Value, error) {
	if v.Type().Rank() > 0 {
		return v, nil
	}
	return v.Block().Reshape(v, 1)
}

func shSeq(k int) []int64 {
	out := make([]int64, k)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

func shLowerGather(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	idx, err := shIn(n, in, 2)
	if err != nil {
		return nil, err
	}
	if x, err = shAsRank1(x); err != nil {
		return nil, err
	}
	if idx, err = shAsRank1(idx); err != nil {
		return nil, err
	}
	r := x.Type().Rank()
	dim, err := shNormDim(n, 1, "dim", 0, r)
	if err != nil {
		return nil, err
	}
	start, err := shCoords(ctx, idx, dim, int(x.Type().Dims[dim]))
	if err != nil {
		return nil, err
	}
	sizes := make([]int64, r)
	for i := range sizes {
		sizes[i] = 1
	}
	v, err := x.Block().Gather(x, start, stablehlo.GatherDims{CollapsedSliceDims: shSeq(r), StartIndexMap: shSeq(r), IndexVectorDim: int64(r)}, sizes, false)
	if err != nil {
		return nil, err
	}
	return shLowerReshape(ctx, n, []*stablehlo.Value{v})
}

// shUpdateFn returns the scatter combiner: "" replaces, otherwise the
// reduction sum, prod, amax or amin.
func shUpdateFn(ctx *Context, red string, d stablehlo.ElementType) (*Func, error) {
	switch red {
	case "":
		fn := ctx.Fn.Closure()
		if _, err := fn.Input(stablehlo.TensorOf(d)); err != nil {
			return nil, err
		}
		b, err := fn.Input(stablehlo.TensorOf(d))
		if err != nil {
			return nil, err
		}
		if err := fn.Return(b); err != nil {
			return nil, err
		}
		return fn, nil
	case "sum":
		if d == stablehlo.Bool {
			return ctx.ReduceFn(ReduceOr, d)
		}
		return ctx.ReduceFn(ReduceSum, d)
	case "prod":
		if d == stablehlo.Bool {
			return ctx.ReduceFn(ReduceAnd, d)
		}
		return ctx.ReduceFn(ReduceMul, d)
	case "amax":
		return ctx.ReduceFn(ReduceMax, d)
	case "amin":
		return ctx.ReduceFn(ReduceMin, d)
	}
	return nil, fmt.Errorf("unsupported scatter reduction %q", red)
}

func shLowerScatter(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	idx, err := shIn(n, in, 2)
	if err != nil {
		return nil, err
	}
	dt, _ := Out(n, 0)
	if x, err = shAsRank1(x); err != nil {
		return nil, err
	}
	if idx, err = shAsRank1(idx); err != nil {
		return nil, err
	}
	r := x.Type().Rank()
	dim, err := shNormDim(n, 1, "dim", 0, r)
	if err != nil {
		return nil, err
	}
	id := idx.Type().Dims
	var upd *stablehlo.Value
	if n.Op == fxgraph.AtenScatterValue {
		v, ok := fxgraph.AsFloat(n.ArgOr(3, "value", nil))
		if !ok {
			return nil, fmt.Errorf("value is %s, want a number", fxgraph.FormatArg(n.Arg(3)))
		}
		dims := make([]int64, len(id))
		for i, d := range id {
			dims[i] = int64(d)
		}
		if upd, err = ctx.Full(dt, v, dims); err != nil {
			return nil, err
		}
	} else {
		src, err := shIn(n, in, 3)
		if err != nil {
			return nil, err
		}
		if src, err = shAsRank1(src); err != nil {
			return nil, err
		}
		if src, err = ctx.ConvertTo(src, dt); err != nil {
			return nil, err
		}
		if !slices.Equal(src.Type().Dims, id) {
			if src, err = src.Block().Slice(src, make([]int64, len(id)), id, nil); err != nil {
				return nil, err
			}
		}
		upd = src
	}
	red := ""
	if n.Op == fxgraph.AtenScatterReduceTwo {
		v, _ := n.Param("reduce")
		red, _ = v.(string)
	}
	fn, err := shUpdateFn(ctx, red, x.Type().Elem)
	if err != nil {
		return nil, err
	}
	start, err := shCoords(ctx, idx, dim, int(x.Type().Dims[dim]))
	if err != nil {
		return nil, err
	}
	v, err := shScatter(x, start, upd, stablehlo.ScatterDims{InsertedWindowDims: shSeq(r), ScatterDimsToOperandDims: shSeq(r), IndexVectorDim: int64(r)}, fn)
	if err != nil {
		return nil, err
	}
	return shLowerReshape(ctx, n, []*stablehlo.Value{v})
}

func shLowerIndexPut(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	vals, err := shIn(n, in, 2)
	if err != nil {
		return nil, err
	}
	dt, _ := Out(n, 0)
	xd := x.Type().Dims
	a, err := shAdvancedIndices(ctx, n, xd)
	if err != nil {
		return nil, err
	}
	// The shape of x[indices], which values broadcast to.
	win := a.windowDims(len(xd))
	rank := len(a.bdims) + len(xd) - len(a.pos)
	rdims := make([]int64, rank)
	isWin := map[int]bool{}
	for _, w := range win {
		isWin[int(w)] = true
	}
	bi, wi := 0, 0
	indexed := map[int]bool{}
	for _, p := range a.pos {
		indexed[int(p)] = true
	}
	var rest []int64
	for d := range xd {
		if !indexed[d] {
			rest = append(rest, xd[d])
		}
	}
	for i := range rdims {
		if isWin[i] {
			rdims[i] = int64(rest[wi])
			wi++
		} else {
			rdims[i] = int64(a.bdims[bi])
			bi++
		}
	}
	if vals, err = ctx.ConvertTo(vals, dt); err != nil {
		return nil, err
	}
	if vals, err = ctx.BroadcastTo(vals, rdims); err != nil {
		return nil, err
	}
	acc, err := n.ParamBool("accumulate")
	if err != nil {
		return nil, err
	}
	red := ""
	if acc {
		red = "sum"
	}
	fn, err := shUpdateFn(ctx, red, x.Type().Elem)
	if err != nil {
		return nil, err
	}
	start, err := shStackIndices(a.idx)
	if err != nil {
		return nil, err
	}
	return shOne(shScatter(x, start, vals, stablehlo.ScatterDims{UpdateWindowDims: win, InsertedWindowDims: a.pos, ScatterDimsToOperandDims: a.pos,
		IndexVectorDim: int64(len(a.bdims))}, fn))
}

// shScatter is stablehlo.scatter of one input, combining with fn.
func shScatter(x, indices, updates *stablehlo.Value, d stablehlo.ScatterDims, fn *Func) (*stablehlo.Value, error) {
	out, err := x.Block().Scatter([]*stablehlo.Value{x}, indices, []*stablehlo.Value{updates}, d, fn.Block(), false, false)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// shPads returns the per-dim (low, high) padding of a pad node.
func shPads(n *fxgraph.Node, rank int) ([][2]int64, error) {
	name := "pad"
	if n.Op != fxgraph.AtenConstantPadNd {
		name = "padding"
	}
	pad, err := n.IntsArg(1, name, nil)
	if err != nil {
		return nil, err
	}
	if len(pad)%2 != 0 || len(pad)/2 > rank {
		return nil, fmt.Errorf("bad padding %v for rank %d", pad, rank)
	}
	out := make([][2]int64, rank)
	for i := 0; i < len(pad)/2; i++ {
		out[rank-1-i] = [2]int64{pad[2*i], pad[2*i+1]}
	}
	return out, nil
}

// shScalarOf returns a rank-0 constant of IR dtype dt holding the literal a
// (int64 literals stay exact).
func shScalarOf(ctx *Context, dt tensor.DType, a any) (*stablehlo.Value, error) {
	t := tensor.New(dt)
	if iv, ok := a.(int64); ok && (dt.IsInt() || dt == tensor.Bool) {
		if dt == tensor.Bool && iv != 0 {
			iv = 1
		}
		t.SetInt64(0, iv)
	} else {
		v, ok := fxgraph.AsFloat(a)
		if !ok {
			return nil, fmt.Errorf("value is %s, want a number", fxgraph.FormatArg(a))
		}
		t.SetFloat64(0, v)
	}
	return ctx.Constant(t)
}

func shLowerConstantPad(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	dt, _ := Out(n, 0)
	r := x.Type().Rank()
	pads, err := shPads(n, r)
	if err != nil {
		return nil, err
	}
	v, err := n.Param("value")
	if err != nil {
		return nil, err
	}
	fill, err := shScalarOf(ctx, dt, v)
	if err != nil {
		return nil, err
	}
	lo, hi := make([]int64, r), make([]int64, r)
	for i, p := range pads {
		lo[i], hi[i] = p[0], p[1]
	}
	return shOne(x.Block().Pad(x, fill, lo, hi, nil))
}

// shLowerIndexPad lowers reflection and replication padding as a gather
// with constant positions along each padded dim.
func shLowerIndexPad(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	xd := x.Type().Dims
	pads, err := shPads(n, len(xd))
	if err != nil {
		return nil, err
	}
	reflect := slices.Contains([]*fxgraph.Op{fxgraph.ReflectionPadOp(1), fxgraph.ReflectionPadOp(2), fxgraph.ReflectionPadOp(3)}, n.Op)
	for d, p := range pads {
		if p == [2]int64{} {
			continue
		}
		size := xd[d]
		var idx []int64
		for o := int64(0); o < size+p[0]+p[1]; o++ {
			i := o - p[0]
			switch {
			case i >= 0 && i < size:
			case reflect:
				period := 2 * (size - 1)
				if period == 0 {
					i = 0
					break
				}
				i = ((i % period) + period) % period
				if i >= size {
					i = period - i
				}
			default:
				i = min(max(i, 0), size-1)
			}
			idx = append(idx, i)
		}
		if x, err = shIndexConst(ctx, x, d, idx); err != nil {
			return nil, err
		}
	}
	return []*stablehlo.Value{x}, nil
}

func shLowerFull(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, dims := Out(n, 0)
	s, err := shScalarOf(ctx, dt, n.ArgOr(1, "fill_value", nil))
	if err != nil {
		return nil, err
	}
	return shOne(ctx.BroadcastTo(s, dims))
}

func shLowerArange(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, dims := Out(n, 0)
	var start, step any = int64(0), int64(1)
	var err error
	switch n.Op {
	case fxgraph.AtenArangeStart:
		start, err = n.Param("start")
	case fxgraph.AtenArangeStartStep:
		if start, err = n.Param("start"); err == nil {
			step, err = n.Param("step")
		}
	}
	if err != nil {
		return nil, err
	}
	ct := tensor.Float64
	if dt.IsInt() {
		ct = tensor.Int64
	}
	xt, err := ctx.Elem(ct)
	if err != nil {
		return nil, err
	}
	io, err := ctx.Fn.Block().Iota(stablehlo.TensorOf(xt, dims...), 0)
	if err != nil {
		return nil, err
	}
	s0, err := shScalarOf(ctx, ct, start)
	if err != nil {
		return nil, err
	}
	st, err := shScalarOf(ctx, ct, step)
	if err != nil {
		return nil, err
	}
	if s0, err = ctx.BroadcastTo(s0, dims); err != nil {
		return nil, err
	}
	if st, err = ctx.BroadcastTo(st, dims); err != nil {
		return nil, err
	}
	v, err := io.Block().Multiply(io, st)
	if err != nil {
		return nil, err
	}
	if v, err = v.Block().Add(v, s0); err != nil {
		return nil, err
	}
	return shOne(ctx.ConvertTo(v, dt))
}

func shLowerRepeat(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	reps, err := n.IntsArg(1, "repeats", nil)
	if err != nil {
		return nil, err
	}
	xs := x.Type()
	off := len(reps) - xs.Rank()
	padded := make([]int64, len(reps))
	for i := range padded {
		padded[i] = 1
		if i >= off {
			padded[i] = xs.Dims[i-off]
		}
	}
	if x, err = x.Block().Reshape(x, padded...); err != nil {
		return nil, err
	}
	var wide []int64
	var axes []int64
	for i, k := range reps {
		wide = append(wide, k, padded[i])
		axes = append(axes, int64(2*i+1))
	}
	b, err := x.Block().BroadcastInDim(x, wide, axes)
	if err != nil {
		return nil, err
	}
	return shLowerReshape(ctx, n, []*stablehlo.Value{b})
}

func shLowerTri(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	dt, dims := Out(n, 0)
	k, err := n.ParamInt("diagonal")
	if err != nil {
		return nil, err
	}
	r := len(dims)
	it, err := ctx.shIndexType()
	if err != nil {
		return nil, err
	}
	mat := stablehlo.TensorOf(it, dims[r-2], dims[r-1])
	rows, err := ctx.Fn.Block().Iota(mat, 0)
	if err != nil {
		return nil, err
	}
	cols, err := ctx.Fn.Block().Iota(mat, 1)
	if err != nil {
		return nil, err
	}
	diff, err := cols.Block().Subtract(cols, rows)
	if err != nil {
		return nil, err
	}
	kc, err := shScalarOf(ctx, tensor.Int64, k)
	if err != nil {
		return nil, err
	}
	kb, err := kc.Block().BroadcastInDim(kc, mat.Dims, nil)
	if err != nil {
		return nil, err
	}
	dir := stablehlo.LE
	if n.Op == fxgraph.AtenTriu {
		dir = stablehlo.GE
	}
	mask, err := diff.Block().Compare(diff, kb, dir, stablehlo.CompareSigned)
	if err != nil {
		return nil, err
	}
	if mask, err = mask.Block().BroadcastInDim(mask, dims, []int64{int64(r - 2), int64(r - 1)}); err != nil {
		return nil, err
	}
	zero, err := ctx.Full(dt, 0, dims)
	if err != nil {
		return nil, err
	}
	return shOne(mask.Block().Select(mask, x, zero))
}

func shLowerPixel(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	x, err := shIn(n, in, 0)
	if err != nil {
		return nil, err
	}
	f64, err := fxgraph.PixelFactor(n)
	if err != nil {
		return nil, err
	}
	f := f64
	xs := x.Type()
	k := xs.Rank()
	batch := append([]int64(nil), xs.Dims[:k-3]...)
	c, h, w := xs.Dims[k-3], xs.Dims[k-2], xs.Dims[k-1]
	b := len(batch)
	perm := shSeq(b + 5)
	var mid []int64
	if n.Op == fxgraph.AtenPixelShuffle {
		mid = append(append([]int64(nil), batch...), c/(f*f), f, f, h, w)
		copy(perm[b:], []int64{int64(b), int64(b + 3), int64(b + 1), int64(b + 4), int64(b + 2)})
	} else {
		mid = append(append([]int64(nil), batch...), c, h/f, f, w/f, f)
		copy(perm[b:], []int64{int64(b), int64(b + 2), int64(b + 4), int64(b + 1), int64(b + 3)})
	}
	v, err := x.Block().Reshape(x, mid...)
	if err != nil {
		return nil, err
	}
	if v, err = v.Block().Transpose(v, perm...); err != nil {
		return nil, err
	}
	return shLowerReshape(ctx, n, []*stablehlo.Value{v})
}

// shLowerShapeOf emits the value of _shape_as_tensor, sym_size or numel
// (normally folded away during specialization) as a constant.
func shLowerShapeOf(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	_, dims, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	var t *tensor.Tensor
	switch n.Op {
	case fxgraph.Aten_ShapeAsTensor:
		t = tensor.FromInt64s(append([]int64{}, dims...))
	case fxgraph.AtenSymSizeInt:
		d, err := shNormDim(n, 1, "dim", 0, len(dims))
		if err != nil {
			return nil, err
		}
		t = tensor.New(tensor.Int64)
		t.SetInt64(0, dims[d])
	default:
		t = tensor.New(tensor.Int64)
		t.SetInt64(0, tensor.NumElements(dims))
	}
	return shOne(ctx.Constant(t))
}
