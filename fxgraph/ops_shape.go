package fxgraph

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// registerShapeOps registers view, permute, expand, concat, slice, gather,
// pad and the other shape and indexing operators.
//
// Where the IR is more lenient than PyTorch it is documented at the
// operator: the indexing operators (index_select, gather, index.Tensor,
// scatter*, index_put) wrap negative indices (index + size) instead of
// rejecting them, and size arguments (view, expand, full) may be a 1-D
// integer tensor node instead of a list, which becomes a list once folded.
func registerShapeOps(r *Registry) {
	for _, name := range []*Op{AtenView, Aten_UnsafeView, AtenReshape} {
		r.define(name, shViewShape, shEvalView)
	}
	r.define(AtenPermute, shPermuteShape, shEvalPermute)
	r.define(AtenT, shPermuteShape, shEvalPermute)
	r.define(AtenTransposeInt, shPermuteShape, shEvalPermute)
	r.define(AtenExpand, shExpandShape, shEvalExpand)
	r.define(AtenUnsqueeze, shUnsqueezeShape, shEvalView)
	for _, name := range []*Op{AtenSqueezeDims, AtenSqueezeDim, AtenSqueeze} {
		r.define(name, shSqueezeShape, shEvalView)
	}
	r.define(AtenCat, shCatShape, shEvalCat)
	r.define(AtenSplitWithSizes, shSplitShape, shEvalSplit)
	r.define(AtenSplitTensor, shSplitShape, shEvalSplit)
	r.define(AtenSliceTensor, shSliceShape, shEvalSlice)
	r.define(AtenSelectInt, shSelectShape, shEvalSelect)
	r.define(AtenFlip, shSameShape, shEvalFlip)
	r.define(AtenIndexSelect, shIndexSelectShape, shEvalIndexSelect)
	r.define(AtenGather, shGatherShape, shEvalGather)
	r.define(AtenIndexTensor, shIndexShape, shEvalIndex)
	r.define(AtenScatterSrc, shScatterShape, shEvalScatter)
	r.define(AtenScatterValue, shScatterShape, shEvalScatter)
	r.define(AtenScatterReduceTwo, shScatterShape, shEvalScatter)
	r.define(AtenIndexPut, shIndexPutShape, shEvalIndexPut)
	r.define(AtenConstantPadNd, shPadShape, shEvalPad)
	for _, op := range []*Op{AtenReflectionPad1d, AtenReflectionPad2d, AtenReflectionPad3d,
		AtenReplicationPad1d, AtenReplicationPad2d, AtenReplicationPad3d} {
		r.define(op, shPadShape, shEvalPad)
	}
	r.define(AtenFull, shFullShape, shEvalFull)
	r.define(AtenArangeStartStep, shArangeShape, shEvalArange)
	r.define(AtenArangeStart, shArangeShape, shEvalArange)
	r.define(AtenArange, shArangeShape, shEvalArange)
	r.define(AtenRepeat, shRepeatShape, shEvalRepeat)
	r.define(AtenTriu, shTriShape, shEvalTri)
	r.define(AtenTril, shTriShape, shEvalTri)
	r.define(AtenPixelShuffle, shPixelShape, shEvalPixel)
	r.define(AtenPixelUnshuffle, shPixelShape, shEvalPixel)
	r.define(Aten_ShapeAsTensor, shShapeAsTensorShape, shEvalShapeOf).ShapeOnly = true
	r.define(AtenSymSizeInt, shScalarInt64Shape, shEvalShapeOf).ShapeOnly = true
	r.define(AtenNumel, shScalarInt64Shape, shEvalShapeOf).ShapeOnly = true
	r.define(AtenAlias, shSameShape, shEvalView)
	r.define(AtenLiftFreshCopy, shSameShape, shEvalView)
}

// shErr formats an error naming the node.
func shErr(n *Node, format string, args ...any) error {
	return fmt.Errorf("%s (%s): %s", n.Name, n.Target, fmt.Sprintf(format, args...))
}

// shSizeArg reads a size argument: an int list literal (whose elements may
// be scalar nodes: constants, sym_size nodes giving symbolic dims, or other
// nodes giving Unknown), or a 1-D integer tensor node (its values when it is
// a constant, Unknown dims of its length otherwise). Negative values (like
// view's -1) are returned as D(v).
func shSizeArg(n *Node, i int, name string) ([]Dim, error) {
	a := n.ArgOr(i, name, nil)
	switch v := a.(type) {
	case *Node:
		if v.graph != nil {
			if t := v.graph.ConstValue(v); t != nil {
				if !(t.DType.IsInt() || t.DType == tensor.Bool) || t.Rank() > 1 {
					return nil, shErr(n, "argument %s is %s, want a 1-D integer tensor", name, t)
				}
				out := make([]Dim, t.NumElements())
				for j := range out {
					out[j] = D(t.Int64At(int64(j)))
				}
				return out, nil
			}
		}
		if len(v.Meta.Vals) != 1 {
			return nil, shErr(n, "argument %s (%s) has meta %s, want a 1-D integer tensor", name, v.Name, v.Meta)
		}
		m := v.Meta.Vals[0]
		if m.Rank() != 1 || !m.Shape[0].IsStatic() {
			return nil, shErr(n, "argument %s (%s) is %s, want a 1-D integer tensor of static length", name, v.Name, m)
		}
		out := make([]Dim, m.Shape[0].Size)
		for j := range out {
			out[j] = Unknown
		}
		return out, nil
	case []any:
		out := make([]Dim, len(v))
		for j, e := range v {
			d, err := shScalarDim(n, e)
			if err != nil {
				return nil, err
			}
			out[j] = d
		}
		return out, nil
	case nil:
		return nil, shErr(n, "argument %s is missing", name)
	}
	vals, ok := AsInts(a)
	if !ok {
		return nil, shErr(n, "argument %s is %s, want a list of ints", name, FormatArg(a))
	}
	out := make([]Dim, len(vals))
	for j, x := range vals {
		out[j] = D(x)
	}
	return out, nil
}

// shScalarDim reads one element of a size list.
func shScalarDim(n *Node, e any) (Dim, error) {
	m, ok := e.(*Node)
	if !ok {
		x, ok := AsInt(e)
		if !ok {
			return Dim{}, shErr(n, "size element %s is not an int", FormatArg(e))
		}
		return D(x), nil
	}
	if m.graph != nil {
		if t := m.graph.ConstValue(m); t != nil {
			if t.NumElements() != 1 {
				return Dim{}, shErr(n, "size element %s is %s, want a scalar", m.Name, t)
			}
			return D(t.Int64At(0)), nil
		}
	}
	if m.Opcode == CallFunction && m.Op == AtenSymSizeInt {
		if src, ok := m.Arg(0).(*Node); ok && len(src.Meta.Vals) == 1 {
			s := src.Meta.Vals[0].Shape
			if d, ok := AsInt(m.Arg(1)); ok {
				if k, err := NormDim(d, len(s)); err == nil {
					return s[k], nil
				}
			}
		}
	}
	return Unknown, nil
}

// shProd is the product of dims: a static factor times symbols.
type shProd struct {
	c       int64
	syms    map[string]int
	unknown bool
}

func shProdOf(dims []Dim) shProd {
	p := shProd{c: 1, syms: map[string]int{}}
	for _, d := range dims {
		switch {
		case d == Unknown:
			p.unknown = true
		case d.IsStatic():
			p.c *= d.Size
		default:
			p.syms[d.Sym]++
		}
	}
	return p
}

// shDivide returns a/b as a Dim when it can be expressed (a static size or a
// single symbol), Unknown otherwise.
func shDivide(a, b shProd) (Dim, error) {
	if a.unknown || b.unknown {
		return Unknown, nil
	}
	rest := map[string]int{}
	for s, k := range a.syms {
		rest[s] = k
	}
	for s, k := range b.syms {
		if rest[s] < k {
			return Unknown, nil
		}
		rest[s] -= k
	}
	var left []string
	for s, k := range rest {
		for ; k > 0; k-- {
			left = append(left, s)
		}
	}
	if b.c == 0 {
		return Dim{}, fmt.Errorf("cannot infer -1 with a zero-sized dimension elsewhere")
	}
	if len(left) == 0 {
		if a.c%b.c != 0 {
			return Dim{}, fmt.Errorf("%d elements do not divide into groups of %d", a.c, b.c)
		}
		return D(a.c / b.c), nil
	}
	if len(left) == 1 && a.c == b.c {
		return S(left[0]), nil
	}
	return Unknown, nil
}

func shViewShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	size, err := shSizeArg(n, 1, "size")
	if err != nil {
		return Meta{}, err
	}
	infer := -1
	for i, d := range size {
		if d.IsStatic() && d.Size < 0 {
			if d.Size != -1 || infer >= 0 {
				return Meta{}, shErr(n, "invalid size %v: only one -1 is allowed, other sizes must be >= 0", size)
			}
			infer = i
		}
	}
	out := Shape(append([]Dim(nil), size...))
	if infer >= 0 {
		others := append(append([]Dim(nil), size[:infer]...), size[infer+1:]...)
		d, err := shDivide(shProdOf(x.Shape), shProdOf(others))
		if err != nil {
			return Meta{}, shErr(n, "view %s as %v: %v", x.Shape, size, err)
		}
		out[infer] = d
	}
	if in, ok := x.Shape.Static(); ok {
		if o, ok := out.Static(); ok && tensor.NumElements(in) != tensor.NumElements(o) {
			return Meta{}, shErr(n, "cannot view %s (%d elements) as %v", x.Shape, tensor.NumElements(in), o)
		}
	}
	return One(x.DType, out), nil
}

// shPerm returns the permutation a permute, t or transpose node applies.
func shPerm(n *Node, rank int) ([]int, error) {
	perm := make([]int, rank)
	for i := range perm {
		perm[i] = i
	}
	switch n.Op {
	case AtenT:
		if rank > 2 {
			return nil, shErr(n, "t() expects a tensor of rank <= 2, got rank %d", rank)
		}
		if rank == 2 {
			perm[0], perm[1] = 1, 0
		}
	case AtenTransposeInt:
		d0, err := n.IntArg(1, "dim0", 0)
		if err != nil {
			return nil, err
		}
		d1, err := n.IntArg(2, "dim1", 0)
		if err != nil {
			return nil, err
		}
		if rank == 0 {
			if (d0 == 0 || d0 == -1) && (d1 == 0 || d1 == -1) {
				return perm, nil
			}
			return nil, shErr(n, "transpose dims %d, %d out of range for a scalar", d0, d1)
		}
		a, err := NormDim(d0, rank)
		if err != nil {
			return nil, shErr(n, "%v", err)
		}
		b, err := NormDim(d1, rank)
		if err != nil {
			return nil, shErr(n, "%v", err)
		}
		perm[a], perm[b] = b, a
	default:
		dims, err := n.IntsArg(1, "dims", nil)
		if err != nil {
			return nil, err
		}
		if len(dims) != rank {
			return nil, shErr(n, "permutation %v has %d entries, the tensor has rank %d", dims, len(dims), rank)
		}
		seen := make([]bool, rank)
		for i, d := range dims {
			k, err := NormDim(d, rank)
			if err != nil || seen[k] {
				return nil, shErr(n, "%v is not a permutation of %d dims", dims, rank)
			}
			seen[k] = true
			perm[i] = k
		}
	}
	return perm, nil
}

func shPermuteShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	perm, err := shPerm(n, x.Rank())
	if err != nil {
		return Meta{}, err
	}
	out := make(Shape, len(perm))
	for i, p := range perm {
		out[i] = x.Shape[p]
	}
	return One(x.DType, out), nil
}

func shExpandShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	size, err := shSizeArg(n, 1, "size")
	if err != nil {
		return Meta{}, err
	}
	if len(size) < x.Rank() {
		return Meta{}, shErr(n, "expand size %v has fewer dims than the input %s", size, x.Shape)
	}
	off := len(size) - x.Rank()
	out := make(Shape, len(size))
	for i, s := range size {
		if i < off {
			if s.IsStatic() && s.Size < 0 {
				return Meta{}, shErr(n, "expand size %v: new leading dim %d cannot be %d", size, i, s.Size)
			}
			out[i] = s
			continue
		}
		d := x.Shape[i-off]
		switch {
		case s.IsStatic() && s.Size == -1:
			out[i] = d
		case s.IsStatic() && s.Size < 0:
			return Meta{}, shErr(n, "expand size %v: invalid size %d", size, s.Size)
		case d == s:
			out[i] = d
		case d == D(1):
			out[i] = s
		case !d.IsStatic():
			out[i] = s // the symbol must be 1 or equal to s
		case s == Unknown:
			out[i] = d // a non-1 dim can only be kept
		case !s.IsStatic():
			out[i] = d
		default:
			return Meta{}, shErr(n, "cannot expand %s to %v (dim %d)", x.Shape, size, i)
		}
	}
	return One(x.DType, out), nil
}

func shUnsqueezeShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return Meta{}, err
	}
	k, err := NormDim(d, x.Rank()+1)
	if err != nil {
		return Meta{}, shErr(n, "%v", err)
	}
	out := make(Shape, 0, x.Rank()+1)
	out = append(out, x.Shape[:k]...)
	out = append(out, D(1))
	out = append(out, x.Shape[k:]...)
	return One(x.DType, out), nil
}

// shSqueezeDims returns which dims of a squeeze node's input are removed.
func shSqueezeDims(n *Node, s Shape) ([]bool, error) {
	drop := make([]bool, len(s))
	var dims []int64
	switch n.Op {
	case AtenSqueeze:
		for i, d := range s {
			drop[i] = d == D(1)
		}
		return drop, nil
	case AtenSqueezeDim:
		d, err := n.IntArg(1, "dim", 0)
		if err != nil {
			return nil, err
		}
		dims = []int64{d}
	default:
		v, err := n.IntsArg(1, "dim", nil)
		if err != nil {
			return nil, err
		}
		dims = v
	}
	for _, d := range dims {
		if len(s) == 0 {
			if d != 0 && d != -1 {
				return nil, shErr(n, "dim %d out of range for a scalar", d)
			}
			continue
		}
		k, err := NormDim(d, len(s))
		if err != nil {
			return nil, shErr(n, "%v", err)
		}
		drop[k] = s[k] == D(1)
	}
	return drop, nil
}

func shSqueezeShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	drop, err := shSqueezeDims(n, x.Shape)
	if err != nil {
		return Meta{}, err
	}
	out := Shape{}
	for i, d := range x.Shape {
		if !drop[i] {
			out = append(out, d)
		}
	}
	return One(x.DType, out), nil
}

func shSameShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	return One(x.DType, x.Shape.Clone()), nil
}

// shCatInputs returns the tensors cat concatenates (legacy empty 1-D
// tensors skipped, as PyTorch does), the normalized dim and the output dtype.
func shCatInputs(n *Node) (ins []*Node, dim int, dt tensor.DType, err error) {
	list, ok := n.Arg(0).([]any)
	if !ok || len(list) == 0 {
		return nil, 0, tensor.Invalid, shErr(n, "argument tensors is %s, want a non-empty list of tensors", FormatArg(n.Arg(0)))
	}
	var all []*Node
	for i, e := range list {
		m, ok := e.(*Node)
		if !ok || len(m.Meta.Vals) != 1 {
			return nil, 0, tensor.Invalid, shErr(n, "tensors[%d] is %s, want a tensor", i, FormatArg(e))
		}
		all = append(all, m)
		v := m.Meta.Vals[0]
		if dt == tensor.Invalid {
			dt = v.DType
		} else {
			dt = PromoteTypes(dt, v.DType)
		}
	}
	for _, m := range all {
		v := m.Val()
		if v.Rank() == 1 && v.Shape[0] == D(0) {
			continue
		}
		ins = append(ins, m)
	}
	if len(ins) == 0 {
		ins = all[:1]
	}
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return nil, 0, dt, err
	}
	rank := ins[0].Val().Rank()
	if rank == 0 {
		return nil, 0, dt, shErr(n, "cannot concatenate scalars")
	}
	dim, err = NormDim(d, rank)
	if err != nil {
		return nil, 0, dt, shErr(n, "%v", err)
	}
	return ins, dim, dt, nil
}

func shCatShape(n *Node) (Meta, error) {
	ins, dim, dt, err := shCatInputs(n)
	if err != nil {
		return Meta{}, err
	}
	out := ins[0].Val().Shape.Clone()
	total := shProd{c: 0}
	static := true
	var sym Dim
	nonzero := 0
	for k, m := range ins {
		s := m.Val().Shape
		if len(s) != len(out) {
			return Meta{}, shErr(n, "tensors[%d] has rank %d, want %d", k, len(s), len(out))
		}
		for i, d := range s {
			if i == dim {
				continue
			}
			switch {
			case d == out[i]:
			case d.IsStatic() && !out[i].IsStatic():
				out[i] = d
			case !d.IsStatic() && out[i].IsStatic():
			case !d.IsStatic() && !out[i].IsStatic():
				out[i] = Unknown
			default:
				return Meta{}, shErr(n, "tensors[%d] has shape %s, which does not match %s except in dim %d", k, s, out, dim)
			}
		}
		d := s[dim]
		if d.IsStatic() {
			total.c += d.Size
			if d.Size != 0 {
				nonzero++
			}
		} else {
			static = false
			sym = d
			nonzero++
		}
	}
	switch {
	case static:
		out[dim] = D(total.c)
	case nonzero == 1:
		out[dim] = sym
	default:
		out[dim] = Unknown
	}
	return One(dt, out), nil
}

// shSplitSizes returns the normalized dim and the sizes of the pieces of a
// split node.
func shSplitSizes(n *Node, s Shape) (int, []int64, error) {
	d, err := n.IntArg(2, "dim", 0)
	if err != nil {
		return 0, nil, err
	}
	dim, err := NormDim(d, len(s))
	if err != nil {
		return 0, nil, shErr(n, "%v", err)
	}
	size := s[dim]
	if n.Op == AtenSplitTensor {
		k, err := n.IntArg(1, "split_size", 0)
		if err != nil {
			return 0, nil, err
		}
		if !size.IsStatic() {
			return 0, nil, shErr(n, "cannot split symbolic dim %s into pieces of %d (the number of pieces is unknown)", size, k)
		}
		if k <= 0 && size.Size > 0 {
			return 0, nil, shErr(n, "split_size must be positive, got %d", k)
		}
		var sizes []int64
		for off := int64(0); off < size.Size; off += k {
			sizes = append(sizes, min(k, size.Size-off))
		}
		if len(sizes) == 0 {
			sizes = []int64{0}
		}
		return dim, sizes, nil
	}
	sizes, err := n.IntsArg(1, "split_sizes", nil)
	if err != nil {
		return 0, nil, err
	}
	var sum int64
	for _, k := range sizes {
		if k < 0 {
			return 0, nil, shErr(n, "split sizes %v must be >= 0", sizes)
		}
		sum += k
	}
	if size.IsStatic() && sum != size.Size {
		return 0, nil, shErr(n, "split sizes %v sum to %d, dim %d has size %d", sizes, sum, dim, size.Size)
	}
	return dim, sizes, nil
}

func shSplitShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	dim, sizes, err := shSplitSizes(n, x.Shape)
	if err != nil {
		return Meta{}, err
	}
	m := Meta{Tuple: true}
	for _, k := range sizes {
		s := x.Shape.Clone()
		s[dim] = D(k)
		m.Vals = append(m.Vals, TensorMeta{DType: x.DType, Shape: s})
	}
	return m, nil
}

// shSliceBounds clamps slice arguments the way PyTorch does: start and end
// default to 0 and size, negative values count from the end, both are
// clamped to [0, size] and end to >= start.
func shSliceBounds(start, end *int64, size int64) (int64, int64) {
	s, e := int64(0), size
	if start != nil {
		s = *start
	}
	if end != nil {
		e = *end
	}
	if s < 0 {
		s += size
	}
	if e < 0 {
		e += size
	}
	s = min(max(s, 0), size)
	e = min(max(e, s), size)
	return s, e
}

// shNotConstError is a slice bound that is a node without a constant value
// yet.
type shNotConstError struct {
	n   *Node
	arg string
	m   *Node
}

func (e *shNotConstError) Error() string {
	return shErr(e.n, "argument %s (%s) is not a constant", e.arg, e.m.Name).Error()
}

// dim returns the sliced dim of n (0 when it cannot be read).
func (e *shNotConstError) dim(n *Node, rank int) int {
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return 0
	}
	nd, err := NormDim(d, rank)
	if err != nil {
		return 0
	}
	return nd
}

// shSliceArgs reads slice.Tensor's dim, start, end (nil when None) and step.
// A start or end that is a node without a constant value yet gives a
// *shNotConstError.
func shSliceArgs(n *Node, rank int) (dim int, start, end *int64, step int64, err error) {
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return
	}
	if dim, err = NormDim(d, rank); err != nil {
		err = shErr(n, "%v", err)
		return
	}
	opt := func(i int, name string) (*int64, error) {
		a := n.ArgOr(i, name, nil)
		if a == nil {
			return nil, nil
		}
		if m, ok := a.(*Node); ok {
			if m.graph != nil {
				if t := m.graph.ConstValue(m); t != nil && t.NumElements() == 1 {
					v := t.Int64At(0)
					return &v, nil
				}
			}
			return nil, &shNotConstError{n: n, arg: name, m: m}
		}
		v, ok := AsInt(a)
		if !ok {
			return nil, shErr(n, "argument %s is %s, want an int", name, FormatArg(a))
		}
		return &v, nil
	}
	if start, err = opt(2, "start"); err != nil {
		return
	}
	if end, err = opt(3, "end"); err != nil {
		return
	}
	if step, err = n.ParamInt("step"); err != nil {
		return
	}
	if step <= 0 {
		err = shErr(n, "slice step must be positive, got %d", step)
	}
	return
}

func shSliceShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() == 0 {
		return Meta{}, shErr(n, "cannot slice a scalar")
	}
	dim, start, end, step, err := shSliceArgs(n, x.Rank())
	var notConst *shNotConstError
	if errors.As(err, &notConst) {
		// A bound computed from symbolic sizes (x[:, :x.size(1)] in
		// torch.export graphs, ONNX Slice with Shape-derived ends): the
		// length is known once specialization folds the bound.
		out := x.Shape.Clone()
		out[notConst.dim(n, x.Rank())] = Unknown
		return One(x.DType, out), nil
	}
	if err != nil {
		return Meta{}, err
	}
	out := x.Shape.Clone()
	d := x.Shape[dim]
	if d.IsStatic() {
		s, e := shSliceBounds(start, end, d.Size)
		out[dim] = D((e - s + step - 1) / step)
	} else {
		whole := (start == nil || *start == 0) && (end == nil || *end >= math.MaxInt64/2) && step == 1
		if !whole {
			out[dim] = Unknown
		}
	}
	return One(x.DType, out), nil
}

func shSelectShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return Meta{}, err
	}
	dim, err := NormDim(d, x.Rank())
	if err != nil {
		return Meta{}, shErr(n, "%v", err)
	}
	idx, err := n.IntArg(2, "index", 0)
	if err != nil {
		return Meta{}, err
	}
	if s := x.Shape[dim]; s.IsStatic() && (idx >= s.Size || idx < -s.Size) {
		return Meta{}, shErr(n, "index %d out of range for dim %d of size %d", idx, dim, s.Size)
	}
	out := append(x.Shape[:dim:dim], x.Shape[dim+1:]...)
	return One(x.DType, out), nil
}

// shIntIndexMeta returns the meta of argument i, which must be an integer
// index tensor.
func shIntIndexMeta(n *Node, i int) (TensorMeta, error) {
	m, err := n.InputMeta(i)
	if err != nil {
		return TensorMeta{}, err
	}
	if m.DType == tensor.Bool {
		return TensorMeta{}, fmt.Errorf("%w: %s (%s): boolean mask indices have a data-dependent shape", ErrUnsupported, n.Name, n.Target)
	}
	if !m.DType.IsInt() {
		return TensorMeta{}, shErr(n, "index is %s, want an integer tensor", m)
	}
	return m, nil
}

func shIndexSelectShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return Meta{}, err
	}
	idx, err := shIntIndexMeta(n, 2)
	if err != nil {
		return Meta{}, err
	}
	if idx.Rank() > 1 {
		return Meta{}, shErr(n, "index has rank %d, want <= 1", idx.Rank())
	}
	if x.Rank() == 0 {
		return One(x.DType, Shape{}), nil
	}
	dim, err := NormDim(d, x.Rank())
	if err != nil {
		return Meta{}, shErr(n, "%v", err)
	}
	out := x.Shape.Clone()
	out[dim] = D(1)
	if idx.Rank() == 1 {
		out[dim] = idx.Shape[0]
	}
	return One(x.DType, out), nil
}

func shGatherShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return Meta{}, err
	}
	idx, err := shIntIndexMeta(n, 2)
	if err != nil {
		return Meta{}, err
	}
	if max(x.Rank(), 1) != max(idx.Rank(), 1) {
		return Meta{}, shErr(n, "index %s and input %s must have the same rank", idx.Shape, x.Shape)
	}
	if _, err := NormDim(d, max(x.Rank(), 1)); err != nil {
		return Meta{}, shErr(n, "%v", err)
	}
	return One(x.DType, idx.Shape.Clone()), nil
}

// shAdvanced describes the index tensors of index.Tensor or index_put.
type shAdvanced struct {
	pos      []int // input dims that are indexed
	idx      []*Node
	bshape   Shape // broadcast shape of the index tensors
	adjacent bool  // indexed dims are consecutive: the result keeps them in place
}

func shAdvancedIndices(n *Node, x TensorMeta) (shAdvanced, error) {
	var a shAdvanced
	list, ok := n.Arg(1).([]any)
	if !ok {
		return a, shErr(n, "argument indices is %s, want a list", FormatArg(n.Arg(1)))
	}
	if len(list) > x.Rank() {
		return a, shErr(n, "too many indices (%d) for a tensor of rank %d", len(list), x.Rank())
	}
	var shapes []Shape
	for i, e := range list {
		if e == nil {
			continue
		}
		m, ok := e.(*Node)
		if !ok || len(m.Meta.Vals) != 1 {
			return a, shErr(n, "indices[%d] is %s, want a tensor or None", i, FormatArg(e))
		}
		v := m.Val()
		if v.DType == tensor.Bool || v.DType == tensor.Uint8 {
			return a, fmt.Errorf("%w: %s (%s): boolean mask indices have a data-dependent shape", ErrUnsupported, n.Name, n.Target)
		}
		if !v.DType.IsInt() {
			return a, shErr(n, "indices[%d] is %s, want an integer tensor", i, v)
		}
		a.pos = append(a.pos, i)
		a.idx = append(a.idx, m)
		shapes = append(shapes, v.Shape)
	}
	if len(a.pos) == 0 {
		return a, shErr(n, "needs at least one index tensor")
	}
	b, err := BroadcastShapes(shapes...)
	if err != nil {
		return a, shErr(n, "indices: %v", err)
	}
	a.bshape = b
	a.adjacent = a.pos[len(a.pos)-1]-a.pos[0] == len(a.pos)-1
	return a, nil
}

// resultShape is the shape of x[indices].
func (a shAdvanced) resultShape(x Shape) Shape {
	indexed := map[int]bool{}
	for _, p := range a.pos {
		indexed[p] = true
	}
	var rest []Dim
	for i, d := range x {
		if !indexed[i] {
			rest = append(rest, d)
		}
	}
	out := Shape{}
	if a.adjacent {
		out = append(out, x[:a.pos[0]]...)
		out = append(out, a.bshape...)
		out = append(out, x[a.pos[len(a.pos)-1]+1:]...)
		return out
	}
	out = append(out, a.bshape...)
	return append(out, rest...)
}

func shIndexShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	a, err := shAdvancedIndices(n, x)
	if err != nil {
		return Meta{}, err
	}
	return One(x.DType, a.resultShape(x.Shape)), nil
}

func shScatterShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return Meta{}, err
	}
	idx, err := shIntIndexMeta(n, 2)
	if err != nil {
		return Meta{}, err
	}
	if max(x.Rank(), 1) != max(idx.Rank(), 1) {
		return Meta{}, shErr(n, "index %s and input %s must have the same rank", idx.Shape, x.Shape)
	}
	if _, err := NormDim(d, max(x.Rank(), 1)); err != nil {
		return Meta{}, shErr(n, "%v", err)
	}
	if n.Op != AtenScatterValue {
		src, err := n.InputMeta(3)
		if err != nil {
			return Meta{}, err
		}
		if max(src.Rank(), 1) != max(idx.Rank(), 1) {
			return Meta{}, shErr(n, "src %s and index %s must have the same rank", src.Shape, idx.Shape)
		}
	}
	if n.Op == AtenScatterReduceTwo {
		v, _ := n.Param("reduce")
		red, _ := v.(string)
		switch red {
		case "sum", "prod", "amax", "amin":
		default:
			return Meta{}, fmt.Errorf("%w: %s (%s): reduce %q", ErrUnsupported, n.Name, n.Target, red)
		}
		if inc, err := n.BoolArg(5, "include_self", true); err != nil || !inc {
			return Meta{}, fmt.Errorf("%w: %s (%s): include_self=False", ErrUnsupported, n.Name, n.Target)
		}
	}
	return One(x.DType, x.Shape.Clone()), nil
}

func shIndexPutShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	a, err := shAdvancedIndices(n, x)
	if err != nil {
		return Meta{}, err
	}
	v, err := n.InputMeta(2)
	if err != nil {
		return Meta{}, err
	}
	if _, err := BroadcastShapes(a.resultShape(x.Shape), v.Shape); err != nil {
		return Meta{}, shErr(n, "values %s do not broadcast to the indexed shape %s", v.Shape, a.resultShape(x.Shape))
	}
	return One(x.DType, x.Shape.Clone()), nil
}

// shPadAmounts returns per-dim (before, after) padding of a pad node, in
// dim order (PyTorch lists pads from the last dim backwards).
func shPadAmounts(n *Node, rank int) ([][2]int64, error) {
	name := "pad"
	if n.Op != AtenConstantPadNd {
		name = "padding"
	}
	pad, err := n.IntsArg(1, name, nil)
	if err != nil {
		return nil, err
	}
	if len(pad)%2 != 0 || len(pad)/2 > rank {
		return nil, shErr(n, "padding %v must have an even length <= 2*rank (%d)", pad, 2*rank)
	}
	if n.Op != AtenConstantPadNd {
		nd := shPadND(n.Target)
		if len(pad) != 2*nd || (rank != nd+1 && rank != nd+2) {
			return nil, shErr(n, "wants %d padding values and an input of rank %d or %d, got %v and rank %d", 2*nd, nd+1, nd+2, pad, rank)
		}
	}
	out := make([][2]int64, rank)
	for i := 0; i < len(pad)/2; i++ {
		out[rank-1-i] = [2]int64{pad[2*i], pad[2*i+1]}
	}
	return out, nil
}

// shPadND returns N of a reflection_padNd/replication_padNd target.
func shPadND(target string) int {
	for nd := 1; nd <= 3; nd++ {
		if strings.HasSuffix(target, fmt.Sprintf("_pad%dd.default", nd)) {
			return nd
		}
	}
	return 0
}

func shPadShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	pads, err := shPadAmounts(n, x.Rank())
	if err != nil {
		return Meta{}, err
	}
	reflect := n.Op != AtenConstantPadNd
	out := x.Shape.Clone()
	for i, p := range pads {
		if p == [2]int64{} {
			continue
		}
		d := x.Shape[i]
		if reflect && (p[0] < 0 || p[1] < 0) {
			return Meta{}, shErr(n, "negative padding %v", p)
		}
		if !d.IsStatic() {
			out[i] = Unknown
			continue
		}
		if strings.Contains(n.Target, "reflection") && (p[0] >= d.Size || p[1] >= d.Size) {
			return Meta{}, shErr(n, "reflection padding %v must be smaller than the dim size %d", p, d.Size)
		}
		if strings.Contains(n.Target, "replication") && d.Size == 0 {
			return Meta{}, shErr(n, "cannot replicate an empty dim")
		}
		s := d.Size + p[0] + p[1]
		if s < 0 {
			return Meta{}, shErr(n, "padding %v makes dim %d negative", p, i)
		}
		out[i] = D(s)
	}
	return One(x.DType, out), nil
}

// shLiteralDType returns the dtype kwarg, or the dtype PyTorch infers from
// the scalar arguments (bool, int64, or float32).
func shLiteralDType(n *Node, vals ...any) (tensor.DType, error) {
	if d, ok := n.Kwargs["dtype"]; ok && d != nil {
		dt, ok := d.(tensor.DType)
		if !ok {
			return tensor.Invalid, shErr(n, "dtype is %s, want a dtype", FormatArg(d))
		}
		return dt, nil
	}
	allBool, allInt := true, true
	for _, v := range vals {
		switch v.(type) {
		case bool:
		case int64, int:
			allBool = false
		case float64:
			allBool, allInt = false, false
		case nil:
		default:
			allBool, allInt = false, false
		}
	}
	switch {
	case allBool && len(vals) > 0:
		return tensor.Bool, nil
	case allInt:
		return tensor.Int64, nil
	}
	return tensor.Float32, nil
}

func shFullShape(n *Node) (Meta, error) {
	size, err := shSizeArg(n, 0, "size")
	if err != nil {
		return Meta{}, err
	}
	for _, d := range size {
		if d.IsStatic() && d.Size < 0 {
			return Meta{}, shErr(n, "negative size %v", size)
		}
	}
	fill := n.ArgOr(1, "fill_value", nil)
	if _, ok := AsFloat(fill); !ok {
		return Meta{}, shErr(n, "fill_value is %s, want a number", FormatArg(fill))
	}
	dt, err := shLiteralDType(n, fill)
	if err != nil {
		return Meta{}, err
	}
	return One(dt, Shape(size)), nil
}

// shArangeArgs returns start, end and step of an arange node.
func shArangeArgs(n *Node) (start, end, step any, err error) {
	switch n.Op {
	case AtenArange:
		start, end, step = int64(0), n.ArgOr(0, "end", nil), int64(1)
	case AtenArangeStart:
		end, step = n.ArgOr(1, "end", nil), int64(1)
		start, err = n.Param("start")
	default:
		end = n.ArgOr(1, "end", nil)
		if start, err = n.Param("start"); err == nil {
			step, err = n.Param("step")
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	start, end, step = shArangeScalar(start), shArangeScalar(end), shArangeScalar(step)
	for _, v := range []any{start, end, step} {
		if m, ok := v.(*Node); ok && len(m.Meta.Vals) == 1 && m.Val().Rank() <= 1 {
			continue // computed in the graph (from symbolic sizes): known when specialized
		}
		if _, ok := AsFloat(v); !ok {
			return nil, nil, nil, shErr(n, "arguments must be numbers, got %s", FormatArgs([]any{start, end, step}))
		}
	}
	return start, end, step, nil
}

// shArangeScalar reads an arange bound that is a node: its value when it is
// a one-element constant (int64 for integer dtypes, float64 otherwise), the
// node itself when it is still computed in the graph (from symbolic sizes,
// e.g. ONNX Shape -> Gather -> Range); a literal is returned unchanged.
func shArangeScalar(v any) any {
	m, ok := v.(*Node)
	if !ok || m.graph == nil {
		return v
	}
	t := m.graph.ConstValue(m)
	if t == nil || t.NumElements() != 1 {
		return v
	}
	if t.DType.IsInt() || t.DType == tensor.Bool {
		return t.Int64At(0)
	}
	return t.Float64At(0)
}

// shArangeDeferred reports whether an arange bound is still a graph value.
func shArangeDeferred(vals ...any) bool {
	for _, v := range vals {
		if _, ok := v.(*Node); ok {
			return true
		}
	}
	return false
}

// shArangeLen is the number of elements of arange(start, end, step).
func shArangeLen(start, end, step any) (int64, error) {
	s, _ := AsFloat(start)
	e, _ := AsFloat(end)
	st, _ := AsFloat(step)
	if st == 0 {
		return 0, fmt.Errorf("arange step must be nonzero")
	}
	si, ok1 := start.(int64)
	ei, ok2 := end.(int64)
	sti, ok3 := step.(int64)
	if ok1 && ok2 && ok3 {
		var k int64
		if sti > 0 {
			k = (ei - si + sti - 1) / sti
		} else {
			k = (si - ei - sti - 1) / -sti
		}
		return max(k, 0), nil
	}
	k := math.Ceil((e - s) / st)
	if math.IsNaN(k) || math.IsInf(k, 0) || k > 1<<40 {
		return 0, fmt.Errorf("arange(%v, %v, %v) has no finite length", s, e, st)
	}
	return max(int64(k), 0), nil
}

func shArangeShape(n *Node) (Meta, error) {
	start, end, step, err := shArangeArgs(n)
	if err != nil {
		return Meta{}, err
	}
	if shArangeDeferred(start, end, step) {
		// The length depends on values computed from symbolic sizes: it
		// becomes static when Specialize folds them for a shape bucket.
		dt, err := shLiteralDType(n)
		if err != nil {
			return Meta{}, err
		}
		if _, ok := n.Kwargs["dtype"]; !ok {
			return Meta{}, shErr(n, "arange over graph values needs a dtype")
		}
		return One(dt, Shape{Unknown}), nil
	}
	k, err := shArangeLen(start, end, step)
	if err != nil {
		return Meta{}, shErr(n, "%v", err)
	}
	dt, err := shLiteralDType(n, start, end, step)
	if err != nil {
		return Meta{}, err
	}
	if dt == tensor.Bool {
		dt = tensor.Int64
	}
	return One(dt, StaticShape(k)), nil
}

func shRepeatShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	reps, err := n.IntsArg(1, "repeats", nil)
	if err != nil {
		return Meta{}, err
	}
	if len(reps) < x.Rank() {
		return Meta{}, shErr(n, "repeats %v has fewer entries than the input rank %d", reps, x.Rank())
	}
	off := len(reps) - x.Rank()
	out := make(Shape, len(reps))
	for i, k := range reps {
		if k < 0 {
			return Meta{}, shErr(n, "negative repeat %d", k)
		}
		d := D(1)
		if i >= off {
			d = x.Shape[i-off]
		}
		switch {
		case d.IsStatic():
			out[i] = D(d.Size * k)
		case k == 1:
			out[i] = d
		case k == 0:
			out[i] = D(0)
		default:
			out[i] = Unknown
		}
	}
	return One(x.DType, out), nil
}

func shTriShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() < 2 {
		return Meta{}, shErr(n, "input must have rank >= 2, got %s", x.Shape)
	}
	if _, err := n.ParamInt("diagonal"); err != nil {
		return Meta{}, err
	}
	return One(x.DType, x.Shape.Clone()), nil
}

// PixelFactor returns the upscale factor of a pixel_shuffle node or the
// downscale factor of a pixel_unshuffle node.
func PixelFactor(n *Node) (int64, error) {
	if n.Op == AtenPixelUnshuffle {
		return n.ParamInt("downscale_factor")
	}
	return n.ParamInt("upscale_factor")
}

func shPixelShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	r, err := PixelFactor(n)
	if err != nil {
		return Meta{}, err
	}
	if r <= 0 {
		return Meta{}, shErr(n, "factor must be positive, got %d", r)
	}
	if x.Rank() < 3 {
		return Meta{}, shErr(n, "input must have rank >= 3, got %s", x.Shape)
	}
	k := x.Rank()
	out := x.Shape.Clone()
	c, h, w := x.Shape[k-3], x.Shape[k-2], x.Shape[k-1]
	scale := func(d Dim, mul bool) (Dim, error) {
		if !d.IsStatic() {
			return Unknown, nil
		}
		if mul {
			return D(d.Size * r), nil
		}
		if d.Size%r != 0 {
			return Dim{}, shErr(n, "dim %d is not divisible by %d", d.Size, r)
		}
		return D(d.Size / r), nil
	}
	up := n.Op == AtenPixelShuffle
	if up {
		if c.IsStatic() && c.Size%(r*r) != 0 {
			return Meta{}, shErr(n, "channels %d not divisible by %d", c.Size, r*r)
		}
		if c.IsStatic() {
			out[k-3] = D(c.Size / (r * r))
		} else {
			out[k-3] = Unknown
		}
	} else if c.IsStatic() {
		out[k-3] = D(c.Size * r * r)
	} else {
		out[k-3] = Unknown
	}
	if out[k-2], err = scale(h, up); err != nil {
		return Meta{}, err
	}
	if out[k-1], err = scale(w, up); err != nil {
		return Meta{}, err
	}
	return One(x.DType, out), nil
}

func shShapeAsTensorShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	return One(tensor.Int64, StaticShape(int64(x.Rank()))), nil
}

func shScalarInt64Shape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if n.Op == AtenSymSizeInt {
		d, err := n.IntArg(1, "dim", 0)
		if err != nil {
			return Meta{}, err
		}
		if _, err := NormDim(d, x.Rank()); err != nil {
			return Meta{}, shErr(n, "%v", err)
		}
	}
	return One(tensor.Int64, Shape{}), nil
}
