package lower

import (
	"fmt"
	"math"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerReductions registers the rules of reductions, cumulative ops and
// losses. Argument conventions are those of the IR (see fxgraph's
// registerReductions).
func registerReductions(r *Registry) {
	r.Register(fxgraph.AtenSum, rdReduceRule(ReduceSum, -1))
	r.Register(fxgraph.AtenSumDimIntList, rdReduceRule(ReduceSum, 1))
	r.Register(fxgraph.AtenProd, rdReduceRule(ReduceMul, -1))
	r.Register(fxgraph.AtenProdDimInt, rdReduceRule(ReduceMul, 1))
	r.Register(fxgraph.AtenAmax, rdReduceRule(ReduceMax, 1))
	r.Register(fxgraph.AtenAmin, rdReduceRule(ReduceMin, 1))
	r.Register(fxgraph.AtenMax, rdReduceRule(ReduceMax, -1))
	r.Register(fxgraph.AtenMin, rdReduceRule(ReduceMin, -1))
	r.Register(fxgraph.AtenAny, rdReduceRule(ReduceOr, -1))
	r.Register(fxgraph.AtenAnyDim, rdReduceRule(ReduceOr, 1))
	r.Register(fxgraph.AtenAnyDims, rdReduceRule(ReduceOr, 1))
	r.Register(fxgraph.AtenAll, rdReduceRule(ReduceAnd, -1))
	r.Register(fxgraph.AtenAllDim, rdReduceRule(ReduceAnd, 1))
	r.Register(fxgraph.AtenAllDims, rdReduceRule(ReduceAnd, 1))
	r.Register(fxgraph.AtenMean, rdMeanRule(-1))
	r.Register(fxgraph.AtenMeanDim, rdMeanRule(1))
	r.Register(fxgraph.AtenTopk, rdTopK)
	r.Register(fxgraph.AtenSort, rdSort)
	r.Register(fxgraph.AtenSortStable, rdSort)
	r.Register(fxgraph.AtenMaxDim, rdArgRule(ReduceMax, true))
	r.Register(fxgraph.AtenMinDim, rdArgRule(ReduceMin, true))
	r.Register(fxgraph.AtenArgmax, rdArgRule(ReduceMax, false))
	r.Register(fxgraph.AtenArgmin, rdArgRule(ReduceMin, false))
	r.Register(fxgraph.AtenCumsum, rdCumRule(ReduceSum))
	r.Register(fxgraph.AtenCumprod, rdCumRule(ReduceMul))
	r.Register(fxgraph.AtenLogsumexp, lowerLogSumExp)
	r.Register(fxgraph.AtenVarCorrection, rdVarRule(false))
	r.Register(fxgraph.AtenStdCorrection, rdVarRule(true))
	r.Register(fxgraph.AtenLinalgVectorNorm, lowerVectorNorm)
	r.Register(fxgraph.AtenNllLossForward, lowerNLLLoss)
	r.Register(fxgraph.AtenNllLoss2dForward, lowerNLLLoss)
}

// rdKwOnly is an argument index past any positional argument, to read a
// keyword-only argument with the Node.*Arg helpers.
const rdKwOnly = 1 << 20

// rdAxes returns the dims a reduce node reduces, increasing: argument
// dimArg (an int, a list, a constant tensor node), or every dim when dimArg
// is negative or the argument is None or [].
func rdAxes(n *fxgraph.Node, dimArg, rank int) ([]int64, error) {
	var dims []int64
	if dimArg >= 0 {
		vals, known, err := n.ConstInts(dimArg, "dim")
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, fmt.Errorf("dim of %s is not a constant", n.Name)
		}
		dims = vals
	}
	reduced := make([]bool, rank)
	if len(dims) == 0 {
		for i := range reduced {
			reduced[i] = true
		}
	}
	for _, d := range dims {
		if rank == 0 {
			continue // a scalar "reduced" along dim 0 / -1 stays itself
		}
		k, err := fxgraph.NormDim(d, rank)
		if err != nil {
			return nil, err
		}
		reduced[k] = true
	}
	var out []int64
	for i, r := range reduced {
		if r {
			out = append(out, int64(i))
		}
	}
	return out, nil
}

// rdKept returns the dims of a rank-rank tensor that axes does not reduce.
func rdKept(axes []int64, rank int) []int64 {
	red := make([]bool, rank)
	for _, a := range axes {
		red[a] = true
	}
	var out []int64
	for i := 0; i < rank; i++ {
		if !red[i] {
			out = append(out, int64(i))
		}
	}
	return out
}

// rdAccDType is the dtype to accumulate a sum-like reduction of dt in:
// float32 for half-precision floats (as PyTorch does), dt otherwise.
func rdAccDType(dt tensor.DType) tensor.DType {
	if dt == tensor.Float16 || dt == tensor.BFloat16 {
		return tensor.Float32
	}
	return dt
}

// rdProgramDType is the dtype values of IR dtype dt have in the program
// (int64 narrowed to int32 under Options.NarrowInt64).
func (ctx *Context) rdProgramDType(dt tensor.DType) (tensor.DType, stablehlo.ElementType, error) {
	x, err := ctx.Elem(dt)
	if err != nil {
		return tensor.Invalid, stablehlo.Invalid, err
	}
	pdt, err := DTypeOf(x)
	return pdt, x, err
}

// rdInit returns the identity of reducer kind for values of IR dtype dt: the
// result of reducing an empty set (0 for sum, 1 for prod, -inf or the
// smallest integer for max, ...).
func (ctx *Context) rdInit(dt tensor.DType, kind string) (*stablehlo.Value, error) {
	pdt, _, err := ctx.rdProgramDType(dt)
	if err != nil {
		return nil, err
	}
	t := tensor.New(pdt)
	switch kind {
	case ReduceSum, ReduceOr:
		// zero
	case ReduceMul, ReduceAnd:
		t.SetInt64(0, 1)
	case ReduceMax:
		t = tensor.Lowest(pdt)
	case ReduceMin:
		t = tensor.Highest(pdt)
	default:
		return nil, fmt.Errorf("unknown reducer %q", kind)
	}
	return ctx.Constant(t)
}

// rdReduce reduces x (of IR dtype dt) over axes with reducer kind.
func (ctx *Context) rdReduce(x *stablehlo.Value, dt tensor.DType, kind string, axes []int64) (*stablehlo.Value, error) {
	if dt == tensor.Bool {
		switch kind {
		case ReduceMax, ReduceSum:
			kind = ReduceOr
		case ReduceMin, ReduceMul:
			kind = ReduceAnd
		}
	}
	init, err := ctx.rdInit(dt, kind)
	if err != nil {
		return nil, err
	}
	fn, err := ctx.ReduceFn(kind, x.Type().Elem)
	if err != nil {
		return nil, err
	}
	out, err := x.Block().Reduce([]*stablehlo.Value{x}, []*stablehlo.Value{init}, axes, fn.Block())
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// rdReshapeOut reshapes v to the node's output dims when they differ (the
// size-1 dims of keepdim).
func rdReshapeOut(v *stablehlo.Value, dims []int64) (*stablehlo.Value, error) {
	if slices.Equal(v.Type().Dims, dims) {
		return v, nil
	}
	return v.Block().Reshape(v, dims...)
}

// rdBroadcastBack broadcasts a reduced value r (the kept dims of a tensor of
// dims full) back to full.
func rdBroadcastBack(r *stablehlo.Value, full []int64, axes []int64) (*stablehlo.Value, error) {
	return r.Block().BroadcastInDim(r, full, rdKept(axes, len(full)))
}

// rdReduceRule lowers sum/prod/amax/amin/any/all: the input is converted to
// the result dtype (PyTorch's dtype= semantics), accumulated in float32 for
// half floats, reduced, and reshaped for keepdim.
func rdReduceRule(kind string, dimArg int) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		_, inDims, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		outDT, outDims := Out(n, 0)
		axes, err := rdAxes(n, dimArg, len(inDims))
		if err != nil {
			return nil, err
		}
		x := in[0]
		accDT := outDT
		if kind == ReduceSum || kind == ReduceMul {
			accDT = rdAccDType(outDT)
		}
		if kind == ReduceOr || kind == ReduceAnd {
			if x, err = ctx.rdToBool(x); err != nil {
				return nil, err
			}
		} else if x, err = ctx.ConvertTo(x, accDT); err != nil {
			return nil, err
		}
		r, err := ctx.rdReduce(x, accDT, kind, axes)
		if err != nil {
			return nil, err
		}
		if r, err = ctx.ConvertTo(r, outDT); err != nil {
			return nil, err
		}
		r, err = rdReshapeOut(r, outDims)
		return []*stablehlo.Value{r}, err
	}
}

// rdCompareType is the comparison type for values of XLA dtype d.
func rdCompareType(d stablehlo.ElementType) stablehlo.CompareType {
	switch {
	case d == stablehlo.Bool || d.IsUnsigned():
		return stablehlo.CompareUnsign
	case d.IsFloat():
		return stablehlo.CompareFloat
	}
	return stablehlo.CompareSigned
}

// rdToBool returns x != 0 (x itself when already bool).
func (ctx *Context) rdToBool(x *stablehlo.Value) (*stablehlo.Value, error) {
	d := x.Type().Elem
	if d == stablehlo.Bool {
		return x, nil
	}
	z, err := ctx.ScalarLike(x, 0)
	if err != nil {
		return nil, err
	}
	if z, err = z.Block().BroadcastInDim(z, x.Type().Dims, nil); err != nil {
		return nil, err
	}
	return x.Block().Compare(x, z, stablehlo.NE, rdCompareType(d))
}

// rdMeanRule lowers aten.mean: a sum in the accumulation dtype divided by
// the number of reduced elements (0/0 = NaN for an empty reduction, as in
// PyTorch).
func rdMeanRule(dimArg int) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		_, inDims, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		outDT, outDims := Out(n, 0)
		axes, err := rdAxes(n, dimArg, len(inDims))
		if err != nil {
			return nil, err
		}
		r, err := ctx.rdMean(in[0], inDims, rdAccDType(outDT), axes)
		if err != nil {
			return nil, err
		}
		if r, err = ctx.ConvertTo(r, outDT); err != nil {
			return nil, err
		}
		r, err = rdReshapeOut(r, outDims)
		return []*stablehlo.Value{r}, err
	}
}

// rdMean returns the mean of x over axes (kept dims only), computed in dt.
func (ctx *Context) rdMean(x *stablehlo.Value, dims []int64, dt tensor.DType, axes []int64) (*stablehlo.Value, error) {
	x, err := ctx.ConvertTo(x, dt)
	if err != nil {
		return nil, err
	}
	s, err := ctx.rdReduce(x, dt, ReduceSum, axes)
	if err != nil {
		return nil, err
	}
	return ctx.rdDivScalar(s, float64(rdCount(dims, axes)))
}

// rdCount is the number of elements axes of dims hold.
func rdCount(dims []int64, axes []int64) int64 {
	c := int64(1)
	for _, a := range axes {
		c *= dims[a]
	}
	return c
}

// rdDivScalar divides v by the constant c.
func (ctx *Context) rdDivScalar(v *stablehlo.Value, c float64) (*stablehlo.Value, error) {
	k, err := ctx.ScalarLike(v, c)
	if err != nil {
		return nil, err
	}
	if k, err = k.Block().BroadcastInDim(k, v.Type().Dims, nil); err != nil {
		return nil, err
	}
	return v.Block().Divide(v, k)
}

// rdFull returns a constant of v's dtype and shape holding c.
func (ctx *Context) rdFull(v *stablehlo.Value, c float64) (*stablehlo.Value, error) {
	k, err := ctx.ScalarLike(v, c)
	if err != nil {
		return nil, err
	}
	return k.Block().BroadcastInDim(k, v.Type().Dims, nil)
}

// rdArgRule lowers aten.max.dim / aten.min.dim (withValues: values and
// indices) and aten.argmax / aten.argmin (indices only) with one variadic
// reduce over (value, index) pairs. NaN counts as the largest (for max) or
// smallest (for min) value, and ties go to the first index, as in PyTorch.
func rdArgRule(kind string, withValues bool) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		inDT, inDims, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		idxDT, outDims := Out(n, len(n.Meta.Vals)-1)
		x := in[0]
		var axis int
		if n.ArgOr(1, "dim", nil) == nil {
			// argmax over the flattened input.
			total := tensor.NumElements(inDims)
			if x, err = x.Block().Reshape(x, total); err != nil {
				return nil, err
			}
			inDims = []int64{total}
		} else {
			axes, err := rdAxes(n, 1, len(inDims))
			if err != nil {
				return nil, err
			}
			if len(inDims) == 0 {
				if x, err = x.Block().Reshape(x, 1); err != nil {
					return nil, err
				}
				inDims = []int64{1}
				axes = []int64{0}
			}
			if len(axes) != 1 {
				return nil, fmt.Errorf("want one dim, got %v", axes)
			}
			axis = int(axes[0])
		}
		_, ixla, err := ctx.rdProgramDType(idxDT)
		if err != nil {
			return nil, err
		}
		iota, err := ctx.Fn.Block().Iota(stablehlo.TensorOf(ixla, inDims...), axis)
		if err != nil {
			return nil, err
		}
		vInit, err := ctx.rdInit(inDT, kind)
		if err != nil {
			return nil, err
		}
		iInit, err := ctx.rdInit(idxDT, ReduceSum)
		if err != nil {
			return nil, err
		}
		fn, err := ctx.rdArgReducer(kind, x.Type().Elem, ixla)
		if err != nil {
			return nil, err
		}
		res, err := x.Block().Reduce([]*stablehlo.Value{x, iota}, []*stablehlo.Value{vInit, iInit}, []int64{int64(axis)}, fn.Block())
		if err != nil {
			return nil, err
		}
		idx, err := rdReshapeOut(res[1], outDims)
		if err != nil {
			return nil, err
		}
		if !withValues {
			return []*stablehlo.Value{idx}, nil
		}
		vals, err := rdReshapeOut(res[0], outDims)
		return []*stablehlo.Value{vals, idx}, err
	}
}

// rdTopK lowers topk as a stable stablehlo.sort of (values, indices) along
// dim followed by a slice of the first k: the better value first, NaN
// counting as the best, ties in index order (the sort is stable). The
// results come out sorted, which sorted=false also allows.
func rdTopK(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	_, inDims, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	a, err := fxgraph.TopK(n, len(inDims))
	if err != nil {
		return nil, err
	}
	valDT, outDims := Out(n, 0)
	idxDT, _ := Out(n, 1)
	x := in[0]
	if len(inDims) == 0 {
		inDims = []int64{1}
		if x, err = x.Block().Reshape(x, 1); err != nil {
			return nil, err
		}
	}
	b := &nnB{chain: chain{ctx: ctx}}
	if a.K == 0 {
		vz, err := ctx.rdInit(valDT, ReduceSum)
		if err != nil {
			return nil, err
		}
		iz, err := ctx.rdInit(idxDT, ReduceSum)
		if err != nil {
			return nil, err
		}
		return b.out(b.bcast(vz, outDims), b.bcast(iz, outDims))
	}
	_, ixla, err := ctx.rdProgramDType(idxDT)
	if err != nil {
		return nil, err
	}
	idx := b.iota(stablehlo.TensorOf(ixla, inDims...), int64(a.Dim))
	if b.err != nil {
		return nil, b.err
	}
	cmp, err := sortComparator(ctx.Fn.Block(), x.Type().Elem, idx.Type().Elem, a.Largest, true, rdCompareType(x.Type().Elem))
	if err != nil {
		return nil, err
	}
	sorted, err := ctx.Fn.Block().Sort([]*stablehlo.Value{x, idx}, int64(a.Dim), true, cmp)
	if err != nil {
		return nil, err
	}
	start := make([]int64, len(inDims))
	limit := inDims
	limit[a.Dim] = a.K
	v := b.set(sorted[0].Block().Slice(sorted[0], start, limit, nil))
	i := b.set(sorted[1].Block().Slice(sorted[1], start, limit, nil))
	return b.out(b.reshape(v, outDims), b.reshape(i, outDims))
}

// sortComparator builds sort's comparator over (value, index) pairs: whether
// lhs's value goes first: the larger (smaller when !largest); a NaN goes
// before any number when nanFirst, after every number otherwise.
func sortComparator(b *stablehlo.Block, val, idx stablehlo.ElementType, largest, nanFirst bool, ct stablehlo.CompareType) (*stablehlo.Block, error) {
	r := b.Region(stablehlo.TensorOf(val), stablehlo.TensorOf(val), stablehlo.TensorOf(idx), stablehlo.TensorOf(idx))
	lhs, rhs := r.Arg(0), r.Arg(1)
	dir := stablehlo.GT
	if !largest {
		dir = stablehlo.LT
	}
	better, err := lhs.Block().Compare(lhs, rhs, dir, ct)
	if err != nil {
		return nil, err
	}
	if ct == stablehlo.CompareFloat {
		lnan, err := lhs.Block().Compare(lhs, lhs, stablehlo.NE, ct)
		if err != nil {
			return nil, err
		}
		rnan, err := rhs.Block().Compare(rhs, rhs, stablehlo.NE, ct)
		if err != nil {
			return nil, err
		}
		// nanFirst: lhs is NaN and rhs is not; else: rhs is NaN and lhs not.
		nan, num := lnan, rnan
		if !nanFirst {
			nan, num = rnan, lnan
		}
		if num, err = num.Block().Not(num); err != nil {
			return nil, err
		}
		nanOrder, err := nan.Block().And(nan, num)
		if err != nil {
			return nil, err
		}
		if better, err = nanOrder.Block().Or(nanOrder, better); err != nil {
			return nil, err
		}
	}
	return r, r.Return(better)
}

// rdSort lowers sort as a stable stablehlo.sort of (values, iota) along dim,
// as torch sorts: NaN counts as larger than every number (last ascending,
// first descending), ties keep their order.
func rdSort(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	_, inDims, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	dim, descending, err := fxgraph.Sort(n, len(inDims))
	if err != nil {
		return nil, err
	}
	_, outDims := Out(n, 0)
	idxDT, _ := Out(n, 1)
	x := in[0]
	b := &nnB{chain: chain{ctx: ctx}}
	if len(inDims) == 0 {
		inDims = []int64{1}
		x = b.reshape(x, inDims)
	}
	_, ixla, err := ctx.rdProgramDType(idxDT)
	if err != nil {
		return nil, err
	}
	idx := b.iota(stablehlo.TensorOf(ixla, inDims...), int64(dim))
	if b.err != nil {
		return nil, b.err
	}
	cmp, err := sortComparator(ctx.Fn.Block(), x.Type().Elem, idx.Type().Elem, descending, descending, rdCompareType(x.Type().Elem))
	if err != nil {
		return nil, err
	}
	sorted, err := ctx.Fn.Block().Sort([]*stablehlo.Value{x, idx}, int64(dim), true, cmp)
	if err != nil {
		return nil, err
	}
	return b.out(b.reshape(sorted[0], outDims), b.reshape(sorted[1], outDims))
}

// rdArgReducer builds the closure (v1, i1, v2, i2) -> the better pair:
// larger (max) or smaller (min) value, NaN winning, ties to the lower index.
func (ctx *Context) rdArgReducer(kind string, vd, id stablehlo.ElementType) (*Func, error) {
	fn := ctx.Fn.Closure()
	var ins [4]*stablehlo.Value
	for i, d := range []stablehlo.ElementType{vd, id, vd, id} {
		v, err := fn.Input(stablehlo.TensorOf(d))
		if err != nil {
			return nil, err
		}
		ins[i] = v
	}
	v1, i1, v2, i2 := ins[0], ins[1], ins[2], ins[3]
	ct := rdCompareType(vd)
	dir := stablehlo.GT
	if kind == ReduceMin {
		dir = stablehlo.LT
	}
	better, err := v1.Block().Compare(v1, v2, dir, ct)
	if err != nil {
		return nil, err
	}
	eq, err := v1.Block().Compare(v1, v2, stablehlo.EQ, ct)
	if err != nil {
		return nil, err
	}
	if vd.IsFloat() {
		nan1, err := v1.Block().Compare(v1, v1, stablehlo.NE, ct)
		if err != nil {
			return nil, err
		}
		nan2, err := v2.Block().Compare(v2, v2, stablehlo.NE, ct)
		if err != nil {
			return nil, err
		}
		not2, err := nan2.Block().Not(nan2)
		if err != nil {
			return nil, err
		}
		only1, err := nan1.Block().And(nan1, not2)
		if err != nil {
			return nil, err
		}
		if better, err = better.Block().Or(better, only1); err != nil {
			return nil, err
		}
		both, err := nan1.Block().And(nan1, nan2)
		if err != nil {
			return nil, err
		}
		if eq, err = eq.Block().Or(eq, both); err != nil {
			return nil, err
		}
	}
	first, err := i1.Block().Compare(i1, i2, stablehlo.LT, rdCompareType(id))
	if err != nil {
		return nil, err
	}
	tie, err := eq.Block().And(eq, first)
	if err != nil {
		return nil, err
	}
	pick, err := better.Block().Or(better, tie)
	if err != nil {
		return nil, err
	}
	v, err := pick.Block().Select(pick, v1, v2)
	if err != nil {
		return nil, err
	}
	i, err := pick.Block().Select(pick, i1, i2)
	if err != nil {
		return nil, err
	}
	if err := fn.Return(v, i); err != nil {
		return nil, err
	}
	return fn, nil
}

// rdScanWindowMax is the longest axis scanned with one reduce_window (a
// quadratic amount of work); longer axes use a logarithmic doubling scan.
const rdScanWindowMax = 256

// rdCumRule lowers aten.cumsum / aten.cumprod as an inclusive scan.
func rdCumRule(kind string) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		_, inDims, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		outDT, _ := Out(n, 0)
		accDT := rdAccDType(outDT)
		x, err := ctx.ConvertTo(in[0], accDT)
		if err != nil {
			return nil, err
		}
		if len(inDims) > 0 {
			d, err := n.IntArg(1, "dim", 0)
			if err != nil {
				return nil, err
			}
			axis, err := fxgraph.NormDim(d, len(inDims))
			if err != nil {
				return nil, err
			}
			if x, err = ctx.rdScan(x, accDT, kind, axis); err != nil {
				return nil, err
			}
		}
		x, err = ctx.ConvertTo(x, outDT)
		return []*stablehlo.Value{x}, err
	}
}

// rdScan computes the inclusive scan of x (IR dtype dt) along axis.
func (ctx *Context) rdScan(x *stablehlo.Value, dt tensor.DType, kind string, axis int) (*stablehlo.Value, error) {
	dims := x.Type().Dims
	size := dims[axis]
	if size <= 1 {
		return x, nil
	}
	rank := len(dims)
	if size <= rdScanWindowMax {
		init, err := ctx.rdInit(dt, kind)
		if err != nil {
			return nil, err
		}
		fn, err := ctx.ReduceFn(kind, x.Type().Elem)
		if err != nil {
			return nil, err
		}
		window := make([]int64, rank)
		strides := make([]int64, rank)
		pad := make([][2]int64, rank)
		for i := range window {
			window[i], strides[i] = 1, 1
		}
		window[axis] = size
		pad[axis] = [2]int64{size - 1, 0}
		out, err := x.Block().ReduceWindow([]*stablehlo.Value{x}, []*stablehlo.Value{init}, stablehlo.Window{Dims: window, Strides: strides, Padding: pad}, fn.Block())
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}
	// Hillis-Steele: y += shift(y, s) for s = 1, 2, 4, ...
	identity, err := ctx.rdInit(dt, kind)
	if err != nil {
		return nil, err
	}
	starts := make([]int64, rank)
	strides := make([]int64, rank)
	for i := range strides {
		strides[i] = 1
	}
	zeros := make([]int64, rank)
	for s := int64(1); s < size; s *= 2 {
		limits := append([]int64(nil), dims...)
		limits[axis] = size - s
		head, err := x.Block().Slice(x, starts, limits, strides)
		if err != nil {
			return nil, err
		}
		lo := make([]int64, rank)
		lo[axis] = s
		shifted, err := head.Block().Pad(head, identity, lo, zeros, zeros)
		if err != nil {
			return nil, err
		}
		if kind == ReduceMul {
			x, err = x.Block().Multiply(x, shifted)
		} else {
			x, err = x.Block().Add(x, shifted)
		}
		if err != nil {
			return nil, err
		}
	}
	return x, nil
}

// lowerLogSumExp lowers aten.logsumexp(self, dim, keepdim) stably:
// m + log(sum(exp(x - m))) with m the max, infinite maxes replaced by 0.
func lowerLogSumExp(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	_, inDims, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	outDT, outDims := Out(n, 0)
	axes, err := rdAxes(n, 1, len(inDims))
	if err != nil {
		return nil, err
	}
	accDT := rdAccDType(outDT)
	x, err := ctx.ConvertTo(in[0], accDT)
	if err != nil {
		return nil, err
	}
	m, err := ctx.rdReduce(x, accDT, ReduceMax, axes)
	if err != nil {
		return nil, err
	}
	fin, err := m.Block().IsFinite(m)
	if err != nil {
		return nil, err
	}
	zero, err := ctx.rdFull(m, 0)
	if err != nil {
		return nil, err
	}
	if m, err = fin.Block().Select(fin, m, zero); err != nil {
		return nil, err
	}
	mb, err := rdBroadcastBack(m, inDims, axes)
	if err != nil {
		return nil, err
	}
	d, err := x.Block().Subtract(x, mb)
	if err != nil {
		return nil, err
	}
	if d, err = d.Block().Exponential(d); err != nil {
		return nil, err
	}
	s, err := ctx.rdReduce(d, accDT, ReduceSum, axes)
	if err != nil {
		return nil, err
	}
	if s, err = s.Block().Log(s); err != nil {
		return nil, err
	}
	if s, err = s.Block().Add(s, m); err != nil {
		return nil, err
	}
	if s, err = ctx.ConvertTo(s, outDT); err != nil {
		return nil, err
	}
	s, err = rdReshapeOut(s, outDims)
	return []*stablehlo.Value{s}, err
}

// rdVarRule lowers aten.var.correction / aten.std.correction: the sum of
// squared deviations from the mean over max(N - correction, 0).
func rdVarRule(sqrt bool) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		_, inDims, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		outDT, outDims := Out(n, 0)
		if outDT.IsComplex() {
			return nil, fmt.Errorf("complex variance is not supported")
		}
		axes, err := rdAxes(n, 1, len(inDims))
		if err != nil {
			return nil, err
		}
		corr, err := n.ParamFloat("correction")
		if err != nil {
			return nil, err
		}
		accDT := rdAccDType(outDT)
		x, err := ctx.ConvertTo(in[0], accDT)
		if err != nil {
			return nil, err
		}
		mean, err := ctx.rdMean(x, inDims, accDT, axes)
		if err != nil {
			return nil, err
		}
		mb, err := rdBroadcastBack(mean, inDims, axes)
		if err != nil {
			return nil, err
		}
		d, err := x.Block().Subtract(x, mb)
		if err != nil {
			return nil, err
		}
		if d, err = d.Block().Multiply(d, d); err != nil {
			return nil, err
		}
		s, err := ctx.rdReduce(d, accDT, ReduceSum, axes)
		if err != nil {
			return nil, err
		}
		if s, err = ctx.rdDivScalar(s, math.Max(float64(rdCount(inDims, axes))-corr, 0)); err != nil {
			return nil, err
		}
		if sqrt {
			if s, err = s.Block().Sqrt(s); err != nil {
				return nil, err
			}
		}
		if s, err = ctx.ConvertTo(s, outDT); err != nil {
			return nil, err
		}
		s, err = rdReshapeOut(s, outDims)
		return []*stablehlo.Value{s}, err
	}
}

// lowerVectorNorm lowers aten.linalg_vector_norm(self, ord, dim, keepdim,
// dtype): max|x| for ord inf, min|x| for -inf, the count of non-zeros for 0,
// sqrt(sum x^2) for 2, and (sum |x|^p)^(1/p) otherwise.
func lowerVectorNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	_, inDims, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	outDT, outDims := Out(n, 0)
	if outDT.IsComplex() {
		return nil, fmt.Errorf("complex norms are not supported")
	}
	ord, err := n.ParamFloat("ord")
	if err != nil {
		return nil, err
	}
	axes, err := rdAxes(n, 2, len(inDims))
	if err != nil {
		return nil, err
	}
	accDT := rdAccDType(outDT)
	c := &chain{ctx: ctx}
	x := c.convert(in[0], accDT)
	r := rdNorm(c, x, ord, accDT, axes)
	return c.out(c.reshape(c.convert(r, outDT), outDims))
}

// rdNorm is the ord-norm of x (of IR dtype dt) over axes: max or min of
// |x| for +-inf, the count of non-zeros for 0, else (sum |x|^ord)^(1/ord).
func rdNorm(c *chain, x *stablehlo.Value, ord float64, dt tensor.DType, axes []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	a := c.un((*stablehlo.Block).Abs, x)
	if c.err != nil {
		return nil
	}
	switch {
	case math.IsInf(ord, 1):
		return c.reduceAs(a, dt, ReduceMax, axes)
	case math.IsInf(ord, -1):
		return c.reduceAs(a, dt, ReduceMin, axes)
	case ord == 0:
		nz := c.set(c.ctx.rdToBool(a))
		return c.reduceAs(c.set(nz.Block().Convert(nz, a.Type().Elem)), dt, ReduceSum, axes)
	case ord == 1:
		return c.reduceAs(a, dt, ReduceSum, axes)
	case ord == 2:
		return c.un((*stablehlo.Block).Sqrt, c.reduceAs(c.mul(x, x), dt, ReduceSum, axes))
	}
	pw := c.bin((*stablehlo.Block).Power, a, c.full(a, ord, a.Type().Dims))
	r := c.reduceAs(pw, dt, ReduceSum, axes)
	if c.err != nil {
		return nil
	}
	return c.bin((*stablehlo.Block).Power, r, c.full(r, 1/ord, r.Type().Dims))
}

// lowerNLLLoss lowers aten.nll_loss_forward(self, target, weight, reduction,
// ignore_index) for any input rank: the picked log-probability
// -self[n, target[n, ...], ...] * weight[target] is selected with a one-hot
// mask over the class dim (no gather), zeroed where target == ignore_index;
// mean divides the summed loss by the summed weights of the counted targets.
func lowerNLLLoss(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	_, inDims, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	outDT, outDims := Out(n, 0)
	red, err := n.ParamInt("reduction")
	if err != nil {
		return nil, err
	}
	if red < 0 || red > 2 {
		return nil, fmt.Errorf("reduction %d is not 0, 1 or 2", red)
	}
	ignore, err := n.ParamInt("ignore_index")
	if err != nil {
		return nil, err
	}
	accDT := rdAccDType(outDT)
	c := &chain{ctx: ctx}
	x := c.convert(in[0], accDT)
	classAxis := int64(0)
	if len(inDims) > 1 {
		classAxis = 1
	}
	t, td := in[1], in[1].Type().Elem
	iota := c.iota(stablehlo.TensorOf(td, inDims...), classAxis)
	hot := c.cmpAs(iota, c.bcastIn(t, inDims, rdKept([]int64{classAxis}, len(inDims))), stablehlo.EQ, rdCompareType(td))
	zeroX := c.full(x, 0, inDims)
	picked := c.reduceAs(c.sel(hot, x, zeroX), accDT, ReduceSum, []int64{classAxis})
	// Weight of each target: weight[target], or 1.
	var w *stablehlo.Value
	if n.Arg(2) != nil {
		wb := c.bcastIn(c.convert(in[2], accDT), inDims, []int64{classAxis})
		w = c.reduceAs(c.sel(hot, wb, zeroX), accDT, ReduceSum, []int64{classAxis})
	} else {
		w = c.full(picked, 1, t.Type().Dims)
	}
	if c.err != nil {
		return nil, c.err
	}
	ig := c.bcastIn(c.set(ctx.rdScalarOf(td, ignore)), t.Type().Dims, nil)
	valid := c.cmpAs(t, ig, stablehlo.NE, rdCompareType(td))
	zeroT := c.full(picked, 0, t.Type().Dims)
	w = c.sel(valid, w, zeroT)
	// Ignored targets give exactly 0 even when their input is inf or NaN.
	loss := c.sel(valid, c.un((*stablehlo.Block).Negate, c.mul(picked, w)), zeroT)
	all := nnRange(0, len(t.Type().Dims))
	total := c.reduceAs(w, accDT, ReduceSum, all)
	if red == 0 {
		total = c.full(total, 0, nil)
	} else {
		loss = c.reduceAs(loss, accDT, ReduceSum, all)
	}
	if red == 1 {
		loss = c.div(loss, total)
	}
	loss = c.reshape(c.convert(loss, outDT), outDims)
	return c.out(loss, c.convert(total, outDT))
}

// rdScalarOf returns a rank-0 constant of XLA dtype d holding the integer v.
func (ctx *Context) rdScalarOf(d stablehlo.ElementType, v int64) (*stablehlo.Value, error) {
	dt, err := DTypeOf(d)
	if err != nil {
		return nil, err
	}
	t := tensor.New(dt)
	t.SetInt64(0, v)
	return ctx.Constant(t)
}
