package decomp

import (
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Shape, indexing and distance operators of the full ATen surface.

var shapeDecompositions = map[*fxgraph.Op]Func{
	fxgraph.AtenHsplitInt:        decDirSplit(1),
	fxgraph.AtenHsplitArray:      decDirSplit(1),
	fxgraph.AtenVsplitInt:        decDirSplit(0),
	fxgraph.AtenVsplitArray:      decDirSplit(0),
	fxgraph.AtenMeshgrid:         decMeshgrid,
	fxgraph.AtenMeshgridIndexing: decMeshgrid,
	fxgraph.AtenAtleast1d:        decAtLeast(1),
	fxgraph.AtenAtleast2d:        decAtLeast(2),
	fxgraph.AtenAtleast3d:        decAtLeast(3),
	fxgraph.AtenNanToNum:         decNanToNum,
	fxgraph.AtenTakeAlongDim:     decTakeAlongDim,
	fxgraph.AtenTensordot:        decTensordot,
	fxgraph.AtenInner:            decInner,
	fxgraph.AtenCdist:            decCdist,
	fxgraph.AtenPairwiseDistance: decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		a, b, err := c.twoTensors("x1", "x2")
		if err != nil {
			return nil, err
		}
		eps, _ := fxgraph.AsFloat(c.number("eps", 1e-6))
		keep, _ := fxgraph.AsInt(c.arg("keepdim"))
		d := e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenSubTensor, a, b), eps)
		return []*fxgraph.Node{e.op(fxgraph.AtenLinalgVectorNorm, d, c.number("p", 2), []any{int64(-1)}, keep != 0)}, nil
	}),
	fxgraph.AtenDist: decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		a, b, err := c.twoTensors("self", "other")
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenLinalgVectorNorm, e.op(fxgraph.AtenSubTensor, a, b), c.number("p", 2), nil, false)}, nil
	}),
	fxgraph.AtenDiagonal: decDiagonal,
	fxgraph.AtenTrace: decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		d, err := c.diagonal(x, 0, 0, 1)
		if err != nil {
			return nil, err
		}
		return []*fxgraph.Node{e.op(fxgraph.AtenSum, d)}, nil
	}),
	fxgraph.AtenUnfold: decUnfold,
	fxgraph.AtenRot90:  decRot90,
	fxgraph.AtenAddmv: decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		m, v, err := c.twoTensors("mat", "vec")
		if err != nil {
			return nil, err
		}
		p := e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenMatmul, m, v), c.number("alpha", 1))
		return []*fxgraph.Node{e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulTensor, x, c.number("beta", 1)), p)}, nil
	}),
	fxgraph.AtenCopysignTensor: binary("other", func(_ *Call, e *expr, x, y *fxgraph.Node) *fxgraph.Node {
		// The sign bit of y: y < 0, or y == -0.0 (1/y == -inf).
		neg := e.op(fxgraph.AtenLogicalOr, e.op(fxgraph.AtenLtScalar, y, 0.0),
			e.op(fxgraph.AtenLogicalAnd, e.op(fxgraph.AtenEqScalar, y, 0.0), e.op(fxgraph.AtenLtScalar, e.op(fxgraph.AtenReciprocal, y), 0.0)))
		a := e.op(fxgraph.AtenAbs, x)
		return e.op(fxgraph.AtenWhereSelf, neg, e.op(fxgraph.AtenNeg, a), a)
	}),
}

// twoTensors returns two tensor arguments.
func (c *Call) twoTensors(a, b string) (*fxgraph.Node, *fxgraph.Node, error) {
	x, err := c.tensor(a)
	if err != nil {
		return nil, nil, err
	}
	y, err := c.tensor(b)
	return x, y, err
}

// decDirSplit is hsplit (dim 1, or 0 for 1-D tensors) and vsplit (dim 0):
// tensor_split by sections or indices.
func decDirSplit(dim int64) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		d := dim
		if d == 1 && x.Val().Rank() == 1 {
			d = 0
		}
		target := fxgraph.AtenTensorSplitIndices
		if _, ok := fxgraph.AsInt(c.arg("sections")); ok {
			target = fxgraph.AtenTensorSplitSections
		}
		c.Args["dim"] = d
		c.Op = target
		return decTensorSplit(c)
	}
}

// decMeshgrid reshapes each 1-D operand to its own dim of the grid and
// expands it ("xy" indexing swaps the first two dims).
func decMeshgrid(c *Call) error {
	list, ok := c.arg("tensors").([]any)
	if !ok {
		return c.errorf(ErrFormat, "meshgrid of %s", fxgraph.FormatArg(c.arg("tensors")))
	}
	xy := c.arg("indexing") == "xy"
	n := len(list)
	var nodes []*fxgraph.Node
	var sizes []any
	for _, v := range list {
		t, ok := v.(*fxgraph.Node)
		if !ok || t.Val().Rank() > 1 {
			return c.errorf(ErrFormat, "meshgrid operand %s (want 0-D or 1-D tensors)", fxgraph.FormatArg(v))
		}
		d, err := c.product(mustDims(c, t))
		if err != nil {
			return err
		}
		nodes = append(nodes, t)
		sizes = append(sizes, d)
	}
	pos := func(i int) int {
		if xy && n >= 2 && i < 2 {
			return 1 - i
		}
		return i
	}
	grid := make([]any, n)
	for i := range sizes {
		grid[pos(i)] = sizes[i]
	}
	for i, t := range nodes {
		if c.outName(i) == "" {
			continue
		}
		shape := make([]any, n)
		for k := range shape {
			shape[k] = int64(1)
		}
		shape[pos(i)] = int64(-1)
		r, err := c.emit("", fxgraph.AtenReshape, []any{t, shape}, nil)
		if err != nil {
			return err
		}
		y, err := c.emit(c.outName(i), fxgraph.AtenExpand, []any{r, grid}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, y); err != nil {
			return err
		}
	}
	return nil
}

// mustDims is c.dims for values whose dims were read before (no error
// possible for a converted node); it returns nil on error.
func mustDims(c *Call, x *fxgraph.Node) []any {
	d, err := c.dims(x)
	if err != nil {
		return nil
	}
	return d
}

// decAtLeast reshapes to at least n dims the way torch does (1-D to
// [1, n] for 2-D, [1, n, 1] for 3-D; 2-D to [a, b, 1]).
func decAtLeast(n int) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		dims, err := c.dims(x)
		if err != nil {
			return err
		}
		if len(dims) >= n {
			return c.alias(x)
		}
		var shape []any
		switch len(dims) {
		case 0:
			for range n {
				shape = append(shape, int64(1))
			}
		case 1:
			shape = []any{int64(1), dims[0], int64(1)}[:n]
			if n == 2 {
				shape = []any{int64(1), dims[0]}
			}
		case 2:
			shape = []any{dims[0], dims[1], int64(1)}
		}
		return c.one(fxgraph.AtenReshape, []any{x, shape}, nil)
	}
}

// maxFinite is torch.finfo(dt).max.
func maxFinite(dt tensor.DType) float64 {
	switch dt {
	case tensor.Float16:
		return 65504
	case tensor.BFloat16:
		return 3.3895313892515355e38
	case tensor.Float64:
		return math.MaxFloat64
	}
	return math.MaxFloat32
}

// decNanToNum replaces NaN by nan (0), +inf by posinf and -inf by neginf
// (the dtype's largest finite values by default).
func decNanToNum(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		if !x.Val().DType.IsFloat() {
			return []*fxgraph.Node{x}, nil
		}
		big := maxFinite(x.Val().DType)
		y := e.op(fxgraph.AtenWhereScalarSelf, e.op(fxgraph.AtenIsnan, x), c.number("nan", 0), x)
		inf := e.op(fxgraph.AtenIsinf, x)
		pos := e.op(fxgraph.AtenLogicalAnd, inf, e.op(fxgraph.AtenGtScalar, x, 0.0))
		neg := e.op(fxgraph.AtenLogicalAnd, inf, e.op(fxgraph.AtenLtScalar, x, 0.0))
		y = e.op(fxgraph.AtenWhereScalarSelf, pos, c.number("posinf", big), y)
		return []*fxgraph.Node{e.op(fxgraph.AtenWhereScalarSelf, neg, c.number("neginf", -big), y)}, nil
	})(c)
}

// decTakeAlongDim is gather along dim (of the flattened tensors without
// dim).
func decTakeAlongDim(c *Call) error {
	x, idx, err := c.twoTensors("self", "indices")
	if err != nil {
		return err
	}
	if c.arg("dim") == nil {
		fx, err := c.emit("", fxgraph.AtenReshape, []any{x, []any{int64(-1)}}, nil)
		if err != nil {
			return err
		}
		fi, err := c.emit("", fxgraph.AtenReshape, []any{idx, []any{int64(-1)}}, nil)
		if err != nil {
			return err
		}
		return c.one(fxgraph.AtenGather, []any{fx, int64(0), fi}, nil)
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	return c.one(fxgraph.AtenGather, []any{x, d, idx}, nil)
}

// decTensordot contracts dims_self of self with dims_other of other (as
// einsum does, with one bmm).
func decTensordot(c *Call) error {
	x, y, err := c.twoTensors("self", "other")
	if err != nil {
		return err
	}
	da, err := c.ints("dims_self", 0)
	if err != nil {
		return err
	}
	db, err := c.ints("dims_other", 0)
	if err != nil {
		return err
	}
	return c.tensordot(x, y, da, db)
}

// decInner contracts the last dims of self and other.
func decInner(c *Call) error {
	x, y, err := c.twoTensors("self", "other")
	if err != nil {
		return err
	}
	if x.Val().Rank() == 0 || y.Val().Rank() == 0 {
		return c.one(fxgraph.AtenMulTensor, []any{x, y}, nil)
	}
	return c.tensordot(x, y, []int64{-1}, []int64{-1})
}

// tensordot labels self's dims a..., other's dims the same label for each
// contracted pair and fresh ones otherwise, and contracts.
func (c *Call) tensordot(x, y *fxgraph.Node, da, db []int64) error {
	if len(da) != len(db) {
		return c.errorf(ErrFormat, "tensordot dims %v and %v differ in length", da, db)
	}
	ra, rb := x.Val().Rank(), y.Val().Rank()
	la := make([]rune, ra)
	lb := make([]rune, rb)
	next := rune('a')
	for i := range la {
		la[i] = next
		next++
	}
	for i := range lb {
		lb[i] = 0
	}
	for i := range da {
		a, err1 := fxgraph.NormDim(da[i], ra)
		b, err2 := fxgraph.NormDim(db[i], rb)
		if err1 != nil || err2 != nil {
			return c.errorf(ErrFormat, "tensordot dims %v, %v of %s and %s", da, db, x.Val(), y.Val())
		}
		lb[b] = la[a]
	}
	var out []rune
	for i, l := range la {
		if !slicesContainsInt(da, i, ra) {
			out = append(out, l)
		}
	}
	for i := range lb {
		if lb[i] == 0 {
			lb[i] = next
			next++
			out = append(out, lb[i])
		}
	}
	r, err := c.contract(einsumTerm{x, la}, einsumTerm{y, lb}, out)
	if err != nil {
		return err
	}
	return c.alias(r.x)
}

// slicesContainsInt reports whether dims (possibly negative) name dim i.
func slicesContainsInt(dims []int64, i, rank int) bool {
	for _, d := range dims {
		if k, err := fxgraph.NormDim(d, rank); err == nil && k == i {
			return true
		}
	}
	return false
}

// decCdist is the p-norm distance of every row pair:
// norm(x1[..., :, None, :] - x2[..., None, :, :], p, -1).
func decCdist(c *Call) error {
	return decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		a, b, err := c.twoTensors("x1", "x2")
		if err != nil {
			return nil, err
		}
		d := e.op(fxgraph.AtenSubTensor, e.op(fxgraph.AtenUnsqueeze, a, int64(-2)), e.op(fxgraph.AtenUnsqueeze, b, int64(-3)))
		return []*fxgraph.Node{e.op(fxgraph.AtenLinalgVectorNorm, d, c.number("p", 2), []any{int64(-1)}, false)}, nil
	})(c)
}

// diagonal gathers the diagonal of static dims d1, d2 (offset o) into a
// last dim, as torch.diagonal does.
func (c *Call) diagonal(x *fxgraph.Node, o int64, d1, d2 int64) (*fxgraph.Node, error) {
	r := x.Val().Rank()
	a, err1 := fxgraph.NormDim(d1, r)
	b, err2 := fxgraph.NormDim(d2, r)
	if err1 != nil || err2 != nil || a == b {
		return nil, c.errorf(ErrFormat, "diagonal dims %d, %d of %s", d1, d2, x.Val())
	}
	n1, n2 := x.Val().Shape[a], x.Val().Shape[b]
	if !n1.IsStatic() || !n2.IsStatic() {
		return nil, c.errorf(ErrUnsupported, "diagonal of symbolic dims of %s", x.Val())
	}
	var perm []int64
	for i := 0; i < r; i++ {
		if i != a && i != b {
			perm = append(perm, int64(i))
		}
	}
	perm = append(perm, int64(a), int64(b))
	p, err := c.emit("", fxgraph.AtenPermute, []any{x, ints64(perm)}, nil)
	if err != nil {
		return nil, err
	}
	dims, err := c.dims(p)
	if err != nil {
		return nil, err
	}
	flat, err := c.emit("", fxgraph.AtenReshape, []any{p, append(append([]any{}, dims[:r-2]...), n1.Size*n2.Size)}, nil)
	if err != nil {
		return nil, err
	}
	var idx []int64
	for i := int64(0); i < n1.Size; i++ {
		j := i + o
		if j >= 0 && j < n2.Size {
			idx = append(idx, i*n2.Size+j)
		}
	}
	ix := c.constant("diagonal_index", tensor.FromInt64s(idx, int64(len(idx))))
	return c.emit("", fxgraph.AtenIndexSelect, []any{flat, int64(r - 2), ix}, nil)
}

// decDiagonal is torch.diagonal(self, offset, dim1, dim2).
func decDiagonal(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	o, err := c.intArg("offset")
	if err != nil {
		return err
	}
	d1, err := c.intArg("dim1")
	if err != nil {
		return err
	}
	d2, err := c.intArg("dim2")
	if err != nil {
		return err
	}
	y, err := c.diagonal(x, o, d1, d2)
	if err != nil {
		return err
	}
	return c.bind(0, y)
}

// decUnfold is Tensor.unfold(dimension, size, step): the windows of a
// static dim gathered with constant indices, the window as a new last dim.
func decUnfold(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dimension")
	if err != nil {
		return err
	}
	size, err := c.intArg("size")
	if err != nil {
		return err
	}
	step, err := c.intArg("step")
	if err != nil {
		return err
	}
	r := x.Val().Rank()
	k := 0
	if r > 0 {
		if k, err = fxgraph.NormDim(d, r); err != nil {
			return c.errorf(ErrFormat, "unfold dim %d of %s", d, x.Val())
		}
	}
	if r == 0 || !x.Val().Shape[k].IsStatic() || size <= 0 || step <= 0 || size > x.Val().Shape[k].Size {
		return c.errorf(ErrUnsupported, "unfold of dim %d of %s by size %d step %d (want a static dim)", d, x.Val(), size, step)
	}
	n := (x.Val().Shape[k].Size-size)/step + 1
	idx := make([]int64, 0, n*size)
	for w := int64(0); w < n; w++ {
		for j := int64(0); j < size; j++ {
			idx = append(idx, w*step+j)
		}
	}
	e := &expr{c: c}
	ix := c.constant("unfold_index", tensor.FromInt64s(idx, int64(len(idx))))
	g := e.op(fxgraph.AtenIndexSelect, x, int64(k), ix)
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	shape := append(append(append([]any{}, dims[:k]...), n, size), dims[k+1:]...)
	y := e.op(fxgraph.AtenReshape, g, shape)
	perm := make([]int64, 0, r+1)
	for i := 0; i <= r; i++ {
		if i != k+1 {
			perm = append(perm, int64(i))
		}
	}
	perm = append(perm, int64(k+1))
	y = e.op(fxgraph.AtenPermute, y, ints64(perm))
	if e.err != nil {
		return e.err
	}
	return c.bind(0, y)
}

// decRot90 rotates by k quarter turns in the plane of dims: flips and a
// transpose.
func decRot90(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	k, err := c.intArg("k")
	if err != nil {
		return err
	}
	dims, err := c.ints("dims", 2)
	if err != nil {
		return err
	}
	e := &expr{c: c}
	var y *fxgraph.Node
	switch ((k % 4) + 4) % 4 {
	case 0:
		return c.alias(x)
	case 1:
		y = e.op(fxgraph.AtenTransposeInt, e.op(fxgraph.AtenFlip, x, []any{dims[1]}), dims[0], dims[1])
	case 2:
		y = e.op(fxgraph.AtenFlip, x, ints64(dims))
	case 3:
		y = e.op(fxgraph.AtenTransposeInt, e.op(fxgraph.AtenFlip, x, []any{dims[0]}), dims[0], dims[1])
	}
	if e.err != nil {
		return e.err
	}
	return c.bind(0, y)
}

// fallbacks convert calls of IR operators whose IR form refuses the call's
// arguments, typically sizes computed from the input shape where the IR
// wants ints.
var fallbacks = map[*fxgraph.Op]Func{
	fxgraph.AtenRepeat: decRepeatSymbolic,
}

// decRepeatSymbolic is repeat with symbolic repeats: x reshaped to
// [1, d0, 1, d1, ...], expanded to [r0, d0, r1, d1, ...] and reshaped to
// [r0*d0, r1*d1, ...] (x padded with leading size-1 dims to the repeats'
// length).
func decRepeatSymbolic(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	reps, ok := c.arg("repeats").([]any)
	if !ok || len(reps) < x.Val().Rank() {
		return c.errorf(ErrFormat, "repeat of %s by %s", x.Val(), fxgraph.FormatArg(c.arg("repeats")))
	}
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	for len(dims) < len(reps) {
		dims = append([]any{int64(1)}, dims...)
	}
	var inter, exp, out []any
	for i, r := range reps {
		inter = append(inter, int64(1), dims[i])
		exp = append(exp, r, dims[i])
		p, err := c.product([]any{r, dims[i]})
		if err != nil {
			return err
		}
		out = append(out, p)
	}
	e := &expr{c: c}
	y := e.op(fxgraph.AtenReshape, x, inter)
	y = e.op(fxgraph.AtenExpand, y, exp)
	y = e.op(fxgraph.AtenReshape, y, out)
	if e.err != nil {
		return e.err
	}
	return c.bind(0, y)
}

// moreDecompositions are cumulative and index operators of the full ATen
// surface.
var moreDecompositions = map[*fxgraph.Op]Func{
	fxgraph.AtenLogcumsumexp: decFormula(func(c *Call, e *expr) ([]*fxgraph.Node, error) {
		// log(cumsum(exp(x - m))) + m with m the max along dim (finite).
		x, err := c.tensor("self")
		if err != nil {
			return nil, err
		}
		d, err := c.intArg("dim")
		if err != nil {
			return nil, err
		}
		m := e.op(fxgraph.AtenAmax, x, []any{d}, true)
		m = e.op(fxgraph.AtenWhereSelf, e.op(fxgraph.AtenIsinf, m), e.op(fxgraph.AtenMulTensor, m, 0.0), m)
		s := e.op(fxgraph.AtenCumsum, e.op(fxgraph.AtenExp, e.op(fxgraph.AtenSubTensor, x, m)), d)
		return []*fxgraph.Node{e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenLog, s), m)}, nil
	}),
	fxgraph.AtenDiagEmbed: decDiagEmbed,
	fxgraph.AtenIndexAdd:  decIndexAdd,
}

// decDiagEmbed puts the last dim of self on the diagonal of the last two
// dims (offset 0, dim1 -2, dim2 -1): x[..., :, None] * eye(n).
func decDiagEmbed(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	o, _ := fxgraph.AsInt(c.arg("offset"))
	d1, _ := fxgraph.AsInt(c.arg("dim1"))
	d2, _ := fxgraph.AsInt(c.arg("dim2"))
	r := x.Val().Rank()
	if r == 0 || o != 0 || d1 != -2 || d2 != -1 || !x.Val().Shape[r-1].IsStatic() {
		return c.errorf(ErrUnsupported, "diag_embed of %s with offset %d, dims %d, %d (want offset 0, dims -2, -1, a static last dim)", x.Val(), o, d1, d2)
	}
	n := x.Val().Shape[r-1].Size
	eye := tensor.New(x.Val().DType, n, n)
	for i := int64(0); i < n; i++ {
		eye.SetFloat64(i*n+i, 1)
	}
	e := &expr{c: c}
	y := e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenUnsqueeze, x, int64(-1)), c.constant("diag_embed_eye", eye))
	if e.err != nil {
		return e.err
	}
	return c.bind(0, y)
}

// decIndexAdd adds alpha * source into self at index along dim:
// index_put with accumulate on self and source with dim moved first.
func decIndexAdd(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	idx, src, err := c.twoTensors("index", "source")
	if err != nil {
		return err
	}
	k, err := fxgraph.NormDim(d, max(x.Val().Rank(), 1))
	if err != nil {
		return c.errorf(ErrFormat, "index_add dim %d of %s", d, x.Val())
	}
	e := &expr{c: c}
	if a, ok := fxgraph.AsFloat(c.number("alpha", 1)); !ok || a != 1 {
		src = e.op(fxgraph.AtenMulTensor, src, c.number("alpha", 1))
	}
	if k != 0 {
		x = e.op(fxgraph.AtenTransposeInt, x, int64(0), int64(k))
		src = e.op(fxgraph.AtenTransposeInt, src, int64(0), int64(k))
	}
	y := e.op(fxgraph.AtenIndexPut, x, []any{idx}, src, true)
	if k != 0 {
		y = e.op(fxgraph.AtenTransposeInt, y, int64(0), int64(k))
	}
	if e.err != nil {
		return e.err
	}
	return c.bind(0, y)
}
