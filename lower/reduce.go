package lower

import (
	"fmt"
	"math"

	"github.com/gomlx/go-xla/pkg/types"
	"github.com/gomlx/go-xla/pkg/types/dtypes"
	"github.com/gomlx/go-xla/pkg/types/shapes"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/internal/hlo"
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
func rdAxes(n *fxgraph.Node, dimArg, rank int) ([]int, error) {
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
	var out []int
	for i, r := range reduced {
		if r {
			out = append(out, i)
		}
	}
	return out, nil
}

// rdKept returns the dims of a rank-rank tensor that axes does not reduce.
func rdKept(axes []int, rank int) []int {
	red := make([]bool, rank)
	for _, a := range axes {
		red[a] = true
	}
	var out []int
	for i := 0; i < rank; i++ {
		if !red[i] {
			out = append(out, i)
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
func (ctx *Context) rdProgramDType(dt tensor.DType) (tensor.DType, dtypes.DType, error) {
	x, err := ctx.XLADType(dt)
	if err != nil {
		return tensor.Invalid, dtypes.InvalidDType, err
	}
	pdt, err := tensorDType(x)
	return pdt, x, err
}

// rdLimits returns the smallest and largest value of an integer dtype
// (false and true for bool) as int64 bit patterns.
func rdLimits(dt tensor.DType) (lo, hi int64) {
	switch dt {
	case tensor.Bool:
		return 0, 1
	case tensor.Int8:
		return math.MinInt8, math.MaxInt8
	case tensor.Int16:
		return math.MinInt16, math.MaxInt16
	case tensor.Int32:
		return math.MinInt32, math.MaxInt32
	case tensor.Uint8:
		return 0, math.MaxUint8
	case tensor.Uint16:
		return 0, math.MaxUint16
	case tensor.Uint32:
		return 0, math.MaxUint32
	case tensor.Uint64:
		return 0, -1
	}
	return math.MinInt64, math.MaxInt64
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
	isInt := pdt.IsInt() || pdt == tensor.Bool
	lo, hi := rdLimits(pdt)
	switch kind {
	case ReduceSum, ReduceOr:
		// zero
	case ReduceMul, ReduceAnd:
		t.SetInt64(0, 1)
	case ReduceMax:
		if isInt {
			t.SetInt64(0, lo)
		} else {
			t.SetFloat64(0, math.Inf(-1))
		}
	case ReduceMin:
		if isInt {
			t.SetInt64(0, hi)
		} else {
			t.SetFloat64(0, math.Inf(1))
		}
	default:
		return nil, fmt.Errorf("unknown reducer %q", kind)
	}
	return ctx.Constant(t)
}

// rdReduce reduces x (of IR dtype dt) over axes with reducer kind.
func (ctx *Context) rdReduce(x *stablehlo.Value, dt tensor.DType, kind string, axes []int) (*stablehlo.Value, error) {
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
	fn, err := ctx.ReduceFn(kind, hlo.ShapeOf(x).DType)
	if err != nil {
		return nil, err
	}
	return hlo.Reduce(x, init, fn, axes...)
}

// rdReshapeOut reshapes v to the node's output dims when they differ (the
// size-1 dims of keepdim).
func rdReshapeOut(v *stablehlo.Value, dims []int64) (*stablehlo.Value, error) {
	if equalDims(hlo.ShapeOf(v).Dimensions, dims) {
		return v, nil
	}
	return hlo.Reshape(v, shapes.Make(hlo.ShapeOf(v).DType, intsOf(dims)...))
}

// rdBroadcastBack broadcasts a reduced value r (the kept dims of a tensor of
// dims full) back to full.
func rdBroadcastBack(r *stablehlo.Value, full []int64, axes []int) (*stablehlo.Value, error) {
	return hlo.BroadcastInDim(r, shapes.Make(hlo.ShapeOf(r).DType, intsOf(full)...), rdKept(axes, len(full)))
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
func rdCompareType(d dtypes.DType) types.ComparisonType {
	switch {
	case d == dtypes.Bool || d.IsUnsigned():
		return types.CompareUnsigned
	case d.IsFloat():
		return types.CompareFloat
	}
	return types.CompareSigned
}

// rdToBool returns x != 0 (x itself when already bool).
func (ctx *Context) rdToBool(x *stablehlo.Value) (*stablehlo.Value, error) {
	d := hlo.ShapeOf(x).DType
	if d == dtypes.Bool {
		return x, nil
	}
	z, err := ctx.ScalarLike(x, 0)
	if err != nil {
		return nil, err
	}
	if z, err = hlo.BroadcastInDim(z, hlo.ShapeOf(x), nil); err != nil {
		return nil, err
	}
	return hlo.Compare(x, z, types.CompareNE, rdCompareType(d))
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
func (ctx *Context) rdMean(x *stablehlo.Value, dims []int64, dt tensor.DType, axes []int) (*stablehlo.Value, error) {
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
func rdCount(dims []int64, axes []int) int64 {
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
	if k, err = hlo.BroadcastInDim(k, hlo.ShapeOf(v), nil); err != nil {
		return nil, err
	}
	return hlo.Divide(v, k)
}

// rdFull returns a constant of v's dtype and shape holding c.
func (ctx *Context) rdFull(v *stablehlo.Value, c float64) (*stablehlo.Value, error) {
	k, err := ctx.ScalarLike(v, c)
	if err != nil {
		return nil, err
	}
	return hlo.BroadcastInDim(k, hlo.ShapeOf(v), nil)
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
			if x, err = hlo.Reshape(x, shapes.Make(hlo.ShapeOf(x).DType, int(total))); err != nil {
				return nil, err
			}
			inDims = []int64{total}
		} else {
			axes, err := rdAxes(n, 1, len(inDims))
			if err != nil {
				return nil, err
			}
			if len(inDims) == 0 {
				if x, err = hlo.Reshape(x, shapes.Make(hlo.ShapeOf(x).DType, 1)); err != nil {
					return nil, err
				}
				inDims = []int64{1}
				axes = []int{0}
			}
			if len(axes) != 1 {
				return nil, fmt.Errorf("want one dim, got %v", axes)
			}
			axis = axes[0]
		}
		_, ixla, err := ctx.rdProgramDType(idxDT)
		if err != nil {
			return nil, err
		}
		iota, err := ctx.Fn.Iota(shapes.Make(ixla, intsOf(inDims)...), axis)
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
		fn, err := ctx.rdArgReducer(kind, hlo.ShapeOf(x).DType, ixla)
		if err != nil {
			return nil, err
		}
		res, err := hlo.MultiReduce([]*stablehlo.Value{x, iota}, []*stablehlo.Value{vInit, iInit}, fn, axis)
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
		if x, err = hlo.Reshape(x, shapes.Make(hlo.ShapeOf(x).DType, 1)); err != nil {
			return nil, err
		}
	}
	b := &nnB{ctx: ctx}
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
	idx := b.set(ctx.Fn.Iota(shapes.Make(ixla, intsOf(inDims)...), a.Dim))
	if b.err != nil {
		return nil, b.err
	}
	cmp, err := sortComparator(ctx.Fn.Block(), x.Type().Elem, idx.Type().Elem, a.Largest, true, rdCompareType(hlo.ShapeOf(x).DType))
	if err != nil {
		return nil, err
	}
	sorted, err := ctx.Fn.Block().Sort([]*stablehlo.Value{x, idx}, int64(a.Dim), true, cmp)
	if err != nil {
		return nil, err
	}
	start := make([]int, len(inDims))
	limit := intsOf(inDims)
	limit[a.Dim] = int(a.K)
	v := b.set(hlo.Slice(sorted[0], start, limit, nil))
	i := b.set(hlo.Slice(sorted[1], start, limit, nil))
	return b.out(b.reshape(v, outDims), b.reshape(i, outDims))
}

// sortComparator builds sort's comparator over (value, index) pairs: whether
// lhs's value goes first: the larger (smaller when !largest); a NaN goes
// before any number when nanFirst, after every number otherwise.
func sortComparator(b *stablehlo.Block, val, idx stablehlo.ElementType, largest, nanFirst bool, ct types.ComparisonType) (*stablehlo.Block, error) {
	r := b.Region(stablehlo.TensorOf(val), stablehlo.TensorOf(val), stablehlo.TensorOf(idx), stablehlo.TensorOf(idx))
	lhs, rhs := r.Arg(0), r.Arg(1)
	dir := types.CompareGT
	if !largest {
		dir = types.CompareLT
	}
	better, err := hlo.Compare(lhs, rhs, dir, ct)
	if err != nil {
		return nil, err
	}
	if ct == types.CompareFloat {
		lnan, err := hlo.Compare(lhs, lhs, types.CompareNE, ct)
		if err != nil {
			return nil, err
		}
		rnan, err := hlo.Compare(rhs, rhs, types.CompareNE, ct)
		if err != nil {
			return nil, err
		}
		// nanFirst: lhs is NaN and rhs is not; else: rhs is NaN and lhs not.
		nan, num := lnan, rnan
		if !nanFirst {
			nan, num = rnan, lnan
		}
		if num, err = hlo.Not(num); err != nil {
			return nil, err
		}
		nanOrder, err := hlo.And(nan, num)
		if err != nil {
			return nil, err
		}
		if better, err = hlo.Or(nanOrder, better); err != nil {
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
	b := &nnB{ctx: ctx}
	if len(inDims) == 0 {
		inDims = []int64{1}
		x = b.reshape(x, inDims)
	}
	_, ixla, err := ctx.rdProgramDType(idxDT)
	if err != nil {
		return nil, err
	}
	idx := b.set(ctx.Fn.Iota(shapes.Make(ixla, intsOf(inDims)...), dim))
	if b.err != nil {
		return nil, b.err
	}
	cmp, err := sortComparator(ctx.Fn.Block(), x.Type().Elem, idx.Type().Elem, descending, descending, rdCompareType(hlo.ShapeOf(x).DType))
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
func (ctx *Context) rdArgReducer(kind string, vd, id dtypes.DType) (*hlo.Function, error) {
	fn := ctx.Fn.Closure()
	var ins [4]*stablehlo.Value
	for i, d := range []dtypes.DType{vd, id, vd, id} {
		v, err := fn.Input(shapes.Make(d))
		if err != nil {
			return nil, err
		}
		ins[i] = v
	}
	v1, i1, v2, i2 := ins[0], ins[1], ins[2], ins[3]
	ct := rdCompareType(vd)
	dir := types.CompareGT
	if kind == ReduceMin {
		dir = types.CompareLT
	}
	better, err := hlo.Compare(v1, v2, dir, ct)
	if err != nil {
		return nil, err
	}
	eq, err := hlo.Compare(v1, v2, types.CompareEQ, ct)
	if err != nil {
		return nil, err
	}
	if vd.IsFloat() {
		nan1, err := hlo.Compare(v1, v1, types.CompareNE, ct)
		if err != nil {
			return nil, err
		}
		nan2, err := hlo.Compare(v2, v2, types.CompareNE, ct)
		if err != nil {
			return nil, err
		}
		not2, err := hlo.Not(nan2)
		if err != nil {
			return nil, err
		}
		only1, err := hlo.And(nan1, not2)
		if err != nil {
			return nil, err
		}
		if better, err = hlo.Or(better, only1); err != nil {
			return nil, err
		}
		both, err := hlo.And(nan1, nan2)
		if err != nil {
			return nil, err
		}
		if eq, err = hlo.Or(eq, both); err != nil {
			return nil, err
		}
	}
	first, err := hlo.Compare(i1, i2, types.CompareLT, rdCompareType(id))
	if err != nil {
		return nil, err
	}
	tie, err := hlo.And(eq, first)
	if err != nil {
		return nil, err
	}
	pick, err := hlo.Or(better, tie)
	if err != nil {
		return nil, err
	}
	v, err := hlo.Select(pick, v1, v2)
	if err != nil {
		return nil, err
	}
	i, err := hlo.Select(pick, i1, i2)
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
	dims := hlo.ShapeOf(x).Dimensions
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
		fn, err := ctx.ReduceFn(kind, hlo.ShapeOf(x).DType)
		if err != nil {
			return nil, err
		}
		window := make([]int, rank)
		strides := make([]int, rank)
		pad := make([][2]int, rank)
		for i := range window {
			window[i], strides[i] = 1, 1
		}
		window[axis] = size
		pad[axis] = [2]int{size - 1, 0}
		return hlo.ReduceWindow(x, init, fn, window, strides, nil, nil, pad)
	}
	// Hillis-Steele: y += shift(y, s) for s = 1, 2, 4, ...
	identity, err := ctx.rdInit(dt, kind)
	if err != nil {
		return nil, err
	}
	starts := make([]int, rank)
	strides := make([]int, rank)
	for i := range strides {
		strides[i] = 1
	}
	zeros := make([]int, rank)
	for s := 1; s < size; s *= 2 {
		limits := append([]int(nil), dims...)
		limits[axis] = size - s
		head, err := hlo.Slice(x, starts, limits, strides)
		if err != nil {
			return nil, err
		}
		lo := make([]int, rank)
		lo[axis] = s
		shifted, err := hlo.Pad(head, identity, lo, zeros, zeros)
		if err != nil {
			return nil, err
		}
		if kind == ReduceMul {
			x, err = hlo.Multiply(x, shifted)
		} else {
			x, err = hlo.Add(x, shifted)
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
	fin, err := hlo.IsFinite(m)
	if err != nil {
		return nil, err
	}
	zero, err := ctx.rdFull(m, 0)
	if err != nil {
		return nil, err
	}
	if m, err = hlo.Select(fin, m, zero); err != nil {
		return nil, err
	}
	mb, err := rdBroadcastBack(m, inDims, axes)
	if err != nil {
		return nil, err
	}
	d, err := hlo.Subtract(x, mb)
	if err != nil {
		return nil, err
	}
	if d, err = hlo.Exponential(d); err != nil {
		return nil, err
	}
	s, err := ctx.rdReduce(d, accDT, ReduceSum, axes)
	if err != nil {
		return nil, err
	}
	if s, err = hlo.Log(s); err != nil {
		return nil, err
	}
	if s, err = hlo.Add(s, m); err != nil {
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
		d, err := hlo.Subtract(x, mb)
		if err != nil {
			return nil, err
		}
		if d, err = hlo.Multiply(d, d); err != nil {
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
			if s, err = hlo.Sqrt(s); err != nil {
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
	x, err := ctx.ConvertTo(in[0], accDT)
	if err != nil {
		return nil, err
	}
	a, err := hlo.Abs(x)
	if err != nil {
		return nil, err
	}
	var r *stablehlo.Value
	switch {
	case math.IsInf(ord, 1):
		r, err = ctx.rdReduce(a, accDT, ReduceMax, axes)
	case math.IsInf(ord, -1):
		r, err = ctx.rdReduce(a, accDT, ReduceMin, axes)
	case ord == 0:
		var nz *stablehlo.Value
		if nz, err = ctx.rdToBool(a); err == nil {
			if nz, err = hlo.Convert(nz, hlo.ShapeOf(a).DType); err == nil {
				r, err = ctx.rdReduce(nz, accDT, ReduceSum, axes)
			}
		}
	case ord == 1:
		r, err = ctx.rdReduce(a, accDT, ReduceSum, axes)
	case ord == 2:
		var sq *stablehlo.Value
		if sq, err = hlo.Multiply(x, x); err == nil {
			if r, err = ctx.rdReduce(sq, accDT, ReduceSum, axes); err == nil {
				r, err = hlo.Sqrt(r)
			}
		}
	default:
		var p, ip, pw *stablehlo.Value
		if p, err = ctx.rdFull(a, ord); err != nil {
			return nil, err
		}
		if pw, err = hlo.Power(a, p); err != nil {
			return nil, err
		}
		if r, err = ctx.rdReduce(pw, accDT, ReduceSum, axes); err != nil {
			return nil, err
		}
		if ip, err = ctx.rdFull(r, 1/ord); err != nil {
			return nil, err
		}
		r, err = hlo.Power(r, ip)
	}
	if err != nil {
		return nil, err
	}
	if r, err = ctx.ConvertTo(r, outDT); err != nil {
		return nil, err
	}
	r, err = rdReshapeOut(r, outDims)
	return []*stablehlo.Value{r}, err
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
	ignore, err := n.ParamInt("ignore_index")
	if err != nil {
		return nil, err
	}
	accDT := rdAccDType(outDT)
	x, err := ctx.ConvertTo(in[0], accDT)
	if err != nil {
		return nil, err
	}
	rank := len(inDims)
	classAxis := 0
	if rank > 1 {
		classAxis = 1
	}
	others := rdKept([]int{classAxis}, rank)
	t := in[1]
	td := hlo.ShapeOf(t).DType
	full := shapes.Make(td, intsOf(inDims)...)
	iota, err := ctx.Fn.Iota(full, classAxis)
	if err != nil {
		return nil, err
	}
	tb, err := hlo.BroadcastInDim(t, full, others)
	if err != nil {
		return nil, err
	}
	hot, err := hlo.Compare(iota, tb, types.CompareEQ, rdCompareType(td))
	if err != nil {
		return nil, err
	}
	zeroX, err := ctx.rdFull(x, 0)
	if err != nil {
		return nil, err
	}
	pickedX, err := hlo.Select(hot, x, zeroX)
	if err != nil {
		return nil, err
	}
	picked, err := ctx.rdReduce(pickedX, accDT, ReduceSum, []int{classAxis})
	if err != nil {
		return nil, err
	}
	// Weight of each target: weight[target], or 1.
	var w *stablehlo.Value
	if n.Arg(2) != nil {
		wv := in[2]
		if wv, err = ctx.ConvertTo(wv, accDT); err != nil {
			return nil, err
		}
		wb, err := hlo.BroadcastInDim(wv, hlo.ShapeOf(x), []int{classAxis})
		if err != nil {
			return nil, err
		}
		if wb, err = hlo.Select(hot, wb, zeroX); err != nil {
			return nil, err
		}
		if w, err = ctx.rdReduce(wb, accDT, ReduceSum, []int{classAxis}); err != nil {
			return nil, err
		}
	} else if w, err = ctx.rdFull(picked, 1); err != nil {
		return nil, err
	}
	ig, err := ctx.rdScalarOf(td, ignore)
	if err != nil {
		return nil, err
	}
	if ig, err = hlo.BroadcastInDim(ig, hlo.ShapeOf(t), nil); err != nil {
		return nil, err
	}
	valid, err := hlo.Compare(t, ig, types.CompareNE, rdCompareType(td))
	if err != nil {
		return nil, err
	}
	zeroT, err := ctx.rdFull(picked, 0)
	if err != nil {
		return nil, err
	}
	if w, err = hlo.Select(valid, w, zeroT); err != nil {
		return nil, err
	}
	loss, err := hlo.Multiply(picked, w)
	if err != nil {
		return nil, err
	}
	if loss, err = hlo.Negate(loss); err != nil {
		return nil, err
	}
	// Ignored targets give exactly 0 even when their input is inf or NaN.
	if loss, err = hlo.Select(valid, loss, zeroT); err != nil {
		return nil, err
	}
	all := make([]int, hlo.ShapeOf(picked).Rank())
	for i := range all {
		all[i] = i
	}
	total, err := ctx.rdReduce(w, accDT, ReduceSum, all)
	if err != nil {
		return nil, err
	}
	switch red {
	case 0:
		if total, err = ctx.rdFull(total, 0); err != nil {
			return nil, err
		}
	case 1, 2:
		if loss, err = ctx.rdReduce(loss, accDT, ReduceSum, all); err != nil {
			return nil, err
		}
		if red == 1 {
			if loss, err = hlo.Divide(loss, total); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("reduction %d is not 0, 1 or 2", red)
	}
	if loss, err = ctx.ConvertTo(loss, outDT); err != nil {
		return nil, err
	}
	if loss, err = rdReshapeOut(loss, outDims); err != nil {
		return nil, err
	}
	if total, err = ctx.ConvertTo(total, outDT); err != nil {
		return nil, err
	}
	return []*stablehlo.Value{loss, total}, nil
}

// rdScalarOf returns a rank-0 constant of XLA dtype d holding the integer v.
func (ctx *Context) rdScalarOf(d dtypes.DType, v int64) (*stablehlo.Value, error) {
	dt, err := tensorDType(d)
	if err != nil {
		return nil, err
	}
	t := tensor.New(dt)
	t.SetInt64(0, v)
	return ctx.Constant(t)
}
