package lower

import (
	"fmt"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// nnLowest is the smallest value of x's program dtype (-inf for floats).
func nnLowest(b *nnB, like *stablehlo.Value) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	dt, err := DTypeOf(like.Type().Elem)
	if err != nil {
		b.err = err
		return nil
	}
	return b.set(b.ctx.Constant(tensor.Lowest(dt)))
}

// nnWindowReduce reduces windows of the inputs (all of the same shape dims)
// over the given axes with kernel k, stride s, dilation d and padding lo/hi
// (the pad value is each input's init), producing outs windows per axis.
// Window dilation is done by folding each axis into [m, d] rather than by
// reduce_window's window dilations: a window of k taps at dilation d is then
// a contiguous window over m, and the strided windows are picked by a
// strided slice of the unfolded result.
func nnWindowReduce(b *nnB, inputs, inits []*stablehlo.Value, fn *Func, dims []int64, axes []int64, k, s, d, lo, hi, outs []int64) []*stablehlo.Value {
	if b.err != nil {
		return nil
	}
	rank := len(dims)
	if slices.ContainsFunc(d, func(x int64) bool { return x != 1 }) {
		return nnDilatedWindowReduce(b, inputs, inits, fn, dims, axes, k, s, d, lo, hi, outs)
	}
	window, strides := make([]int64, rank), make([]int64, rank)
	pads := make([][2]int64, rank)
	for i := range window {
		window[i], strides[i] = 1, 1
	}
	for j, a := range axes {
		window[a], strides[a] = k[j], s[j]
		pads[a] = [2]int64{lo[j], hi[j]}
	}
	rs := b.reduceWindow(inputs, inits, fn, stablehlo.Window{Dims: window, Strides: strides, Padding: pads})
	if b.err != nil {
		return nil
	}
	return append([]*stablehlo.Value(nil), rs...)
}

// nnDilatedWindowReduce is nnWindowReduce with window dilations d: each
// reduced axis, padded to m*d positions, is folded into [m, d], a window
// of k over m, and the strided windows picked by a strided slice of the
// unfolded result.
func nnDilatedWindowReduce(b *nnB, inputs, inits []*stablehlo.Value, fn *Func, dims []int64, axes []int64, k, s, d, lo, hi, outs []int64) []*stablehlo.Value {
	rank := len(dims)
	g := nnFoldWindows(dims, axes, k, s, d, lo, hi)
	zeros := make([]int64, len(g.folded))
	xs := make([]*stablehlo.Value, len(inputs))
	for i, x := range inputs {
		if b.err == nil {
			xs[i] = b.set(x.Block().Pad(x, inits[i], g.padLo, g.padHi, nil))
		}
		xs[i] = b.reshape(xs[i], g.folded)
		if !slices.Equal(g.folded, g.sliceD) {
			xs[i] = b.slice(xs[i], zeros, slices.Clone(g.sliceD), nil)
		}
	}
	if b.err != nil {
		return nil
	}
	red := b.reduceWindow(xs, inits, fn, stablehlo.Window{Dims: g.window, Strides: g.wstrides})
	if b.err != nil {
		return nil
	}
	rs := append([]*stablehlo.Value(nil), red...) // not the statement's own slice
	starts, limits, strides := make([]int64, rank), make([]int64, rank), make([]int64, rank)
	for a := 0; a < rank; a++ {
		limits[a], strides[a] = g.unfolded[a], 1
		if j := slices.Index(axes, int64(a)); j >= 0 {
			if g.aligned[j] {
				limits[a] = outs[j]
			} else {
				limits[a], strides[a] = (outs[j]-1)*s[j]+1, s[j]
			}
		}
	}
	for i := range rs {
		rs[i] = b.slice(b.reshape(rs[i], g.unfolded), starts, limits, strides)
	}
	return rs
}

// nnFolded is the geometry of a dilated window reduction's folded form.
type nnFolded struct {
	padLo, padHi                               []int64
	folded, window, wstrides, sliceD, unfolded []int64
	aligned                                    []bool // per reduced axis: stride a multiple of the dilation
}

// nnFoldWindows computes the folded geometry (nnDilatedWindowReduce).
func nnFoldWindows(dims, axes, k, s, d, lo, hi []int64) nnFolded {
	rank := len(dims)
	g := nnFolded{padLo: make([]int64, rank), padHi: make([]int64, rank), aligned: make([]bool, len(axes))}
	m := make([]int64, len(axes))
	for j, a := range axes {
		L := lo[j] + dims[a] + hi[j]
		m[j] = (L + d[j] - 1) / d[j]
		g.padLo[a], g.padHi[a] = lo[j], hi[j]+m[j]*d[j]-L
		// An axis whose stride is a multiple of its dilation only needs the
		// first of each group of d positions, reduced at stride s/d.
		g.aligned[j] = s[j]%d[j] == 0
	}
	for a := 0; a < rank; a++ {
		j := slices.Index(axes, int64(a))
		switch {
		case j < 0:
			g.folded = append(g.folded, dims[a])
			g.sliceD = append(g.sliceD, dims[a])
			g.window = append(g.window, 1)
			g.wstrides = append(g.wstrides, 1)
			g.unfolded = append(g.unfolded, dims[a])
		case g.aligned[j]:
			st := s[j] / d[j]
			g.folded = append(g.folded, m[j], d[j])
			g.sliceD = append(g.sliceD, m[j], 1)
			g.window = append(g.window, k[j], 1)
			g.wstrides = append(g.wstrides, st, 1)
			g.unfolded = append(g.unfolded, (m[j]-k[j])/st+1)
		default:
			g.folded = append(g.folded, m[j], d[j])
			g.sliceD = append(g.sliceD, m[j], d[j])
			g.window = append(g.window, k[j], 1)
			g.wstrides = append(g.wstrides, 1, 1)
			g.unfolded = append(g.unfolded, (m[j]-k[j]+1)*d[j])
		}
	}
	return g
}

// nnPoolGeometry returns the spatial axes and the low/high padding that
// make reduce_window produce outDims windows (the high side is extended for
// ceil_mode).
func nnPoolGeometry(xd, outDims []int64, p fxgraph.PoolParams) (axes []int64, lo, hi, outs []int64) {
	spatial := len(p.Kernel)
	a0 := len(xd) - spatial
	for j := 0; j < spatial; j++ {
		a := a0 + j
		axes = append(axes, int64(a))
		ek := p.Dilation[j]*(p.Kernel[j]-1) + 1
		need := (outDims[a]-1)*p.Stride[j] + ek
		lo = append(lo, p.Padding[j])
		hi = append(hi, max(p.Padding[j], need-xd[a]-p.Padding[j]))
		outs = append(outs, outDims[a])
	}
	return
}

// nnArgMaxReducer is the closure (v1, i1, v2, i2) -> the pair with the
// larger value (NaN largest), ties going to the lower index.
func nnArgMaxReducer(b *nnB, vd, id stablehlo.ElementType) *Func {
	if b.err != nil {
		return nil
	}
	fn := b.ctx.Fn.Closure()
	var ins [4]*stablehlo.Value
	for i, d := range []stablehlo.ElementType{vd, id, vd, id} {
		ins[i] = b.set(fn.Input(stablehlo.TensorOf(d)))
	}
	if b.err != nil {
		return nil
	}
	v1, i1, v2, i2 := ins[0], ins[1], ins[2], ins[3]
	ct := stablehlo.CompareFloat
	switch {
	case vd == stablehlo.Bool || vd.IsUnsigned():
		ct = stablehlo.CompareUnsign
	case vd.IsInt():
		ct = stablehlo.CompareSigned
	}
	idt := stablehlo.CompareSigned
	if id.IsUnsigned() {
		idt = stablehlo.CompareUnsign
	}
	cmp := func(x, y *stablehlo.Value, dir stablehlo.Direction, t stablehlo.CompareType) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		return b.set(x.Block().Compare(x, y, dir, t))
	}
	gt := cmp(v1, v2, stablehlo.GT, ct)
	eq := cmp(v1, v2, stablehlo.EQ, ct)
	first := cmp(i1, i2, stablehlo.LT, idt)
	pick := b.or(gt, b.and(eq, first))
	if vd.IsFloat() {
		nan1 := cmp(v1, v1, stablehlo.NE, ct)
		nan2 := cmp(v2, v2, stablehlo.NE, ct)
		// v1 NaN wins unless v2 is a NaN with a lower index.
		nanPick := b.and(nan1, b.or(b.un((*stablehlo.Block).Not, nan2), first))
		pick = b.or(b.and(pick, b.un((*stablehlo.Block).Not, nan2)), nanPick)
	}
	if b.err != nil {
		return nil
	}
	v := b.set(pick.Block().Select(pick, v1, v2))
	i := b.set(pick.Block().Select(pick, i1, i2))
	if b.err != nil {
		return nil
	}
	if err := fn.Return(v, i); err != nil {
		b.err = err
		return nil
	}
	return fn
}

// nnMaxPoolRule lowers max_pool{1,2,3}d[_with_indices]: a max reduce_window
// padded with the dtype's lowest value; with indices, a variadic
// reduce_window over (value, flat index within the spatial plane), ties to
// the first index as in PyTorch.
func nnMaxPoolRule(spatial int, indices bool) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		_, outDims := Out(n, 0)
		_, xd, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		p, err := fxgraph.PoolArgs(n, spatial, false)
		if err != nil {
			return nil, err
		}
		axes, lo, hi, outs := nnPoolGeometry(xd, outDims, p)
		b := &nnB{chain: chain{ctx: ctx}}
		x := in[0]
		if !indices || !n.OutputUsed(1) {
			// Without a user of the indices (the common case: ONNX MaxPool
			// with one output), the variadic reduce_window would still
			// compute them on every call: XLA cannot drop one of its
			// results. The unused index output is a broadcast XLA removes.
			var rs []*stablehlo.Value
			if pool := ctx.Primitives().MaxPool; pool != nil {
				v, err := pool(ctx, x, outDims, p, lo, hi)
				if err != nil {
					return nil, err
				}
				if v != nil {
					rs = []*stablehlo.Value{v}
				}
			}
			if rs == nil {
				fn, err := ctx.ReduceFn(ReduceMax, x.Type().Elem)
				if err != nil {
					return nil, err
				}
				rs = nnWindowReduce(b, []*stablehlo.Value{x}, []*stablehlo.Value{nnLowest(b, x)}, fn, xd, axes, p.Kernel, p.Stride, p.Dilation, lo, hi, outs)
			}
			if indices {
				_, idims := Out(n, 1)
				rs = append(rs, b.bcast(b.set(ctx.Constant(tensor.New(tensor.Int64))), idims))
			}
			if b.err != nil {
				return nil, b.err
			}
			return rs, nil
		}
		init := nnLowest(b, x)
		idt, err := ctx.Elem(tensor.Int64)
		if err != nil {
			return nil, err
		}
		ishape := stablehlo.TensorOf(idt, xd...)
		var idx *stablehlo.Value
		stride := int64(1)
		for j := len(axes) - 1; j >= 0; j-- {
			io := b.iota(ishape, axes[j])
			io = nnScaleBy(b, io, float64(stride))
			if idx == nil {
				idx = io
			} else {
				idx = b.add(idx, io)
			}
			stride *= xd[axes[j]]
		}
		pdt, err := DTypeOf(idt)
		if err != nil {
			return nil, err
		}
		iinit := b.set(ctx.Constant(tensor.Highest(pdt)))
		fn := nnArgMaxReducer(b, x.Type().Elem, idt)
		rs := nnWindowReduce(b, []*stablehlo.Value{x, idx}, []*stablehlo.Value{init, iinit}, fn, xd, axes, p.Kernel, p.Stride, p.Dilation, lo, hi, outs)
		if b.err != nil {
			return nil, b.err
		}
		return rs, nil
	}
}

// nnAvgPoolRule lowers avg_pool{1,2,3}d: a sum reduce_window divided by
// PyTorch's divisor (divisor_override, or the window size clipped to the
// padded input, or to the input when count_include_pad is false).
func nnAvgPoolRule(spatial int) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		dt, outDims := Out(n, 0)
		if !dt.IsFloat() {
			return nil, fmt.Errorf("avg_pool of %s is not supported", dt)
		}
		_, xd, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		p, err := fxgraph.PoolArgs(n, spatial, true)
		if err != nil {
			return nil, err
		}
		axes, lo, hi, outs := nnPoolGeometry(xd, outDims, p)
		b := &nnB{chain: chain{ctx: ctx}}
		x := b.convert(in[0], nnFloatCompute(dt))
		if b.err != nil {
			return nil, b.err
		}
		if pool := ctx.Primitives().AvgPool; pool != nil {
			y, err := pool(ctx, x, outDims, p, lo, hi)
			if err != nil {
				return nil, err
			}
			if y != nil {
				return b.out(b.convert(y, dt))
			}
		}
		fn, err := ctx.ReduceFn(ReduceSum, x.Type().Elem)
		if err != nil {
			return nil, err
		}
		sum := nnWindowReduce(b, []*stablehlo.Value{x}, []*stablehlo.Value{b.scalar(x, 0)}, fn, xd, axes, p.Kernel, p.Stride, p.Dilation, lo, hi, outs)
		if b.err != nil {
			return nil, b.err
		}
		y := sum[0]
		if p.DivisorOverride != 0 {
			y = b.div(y, b.full(y, float64(p.DivisorOverride), outDims))
			return b.out(b.convert(y, dt))
		}
		div := nnAvgDivisor(b, y, xd, outDims, axes, outs, p)
		y = b.div(y, div)
		return b.out(b.convert(y, dt))
	}
}

// nnAvgDivisor is the divisor of each of an average pooling's window sums
// y (of outDims, over x's axes of dims xd, outs windows each): the window's
// size, or with p.CountIncludePad off the number of its elements inside x.
func nnAvgDivisor(b *nnB, y *stablehlo.Value, xd, outDims, axes, outs []int64, p fxgraph.PoolParams) *stablehlo.Value {
	var div *stablehlo.Value
	uniform := 1.0
	for j, a := range axes {
		f := make([]float64, outs[j])
		same := true
		for o := range f {
			start := int64(o)*p.Stride[j] - p.Padding[j]
			end := min(start+p.Kernel[j], xd[a]+p.Padding[j])
			size := end - start
			if !p.CountIncludePad {
				size = min(end, xd[a]) - max(start, 0)
			}
			f[o] = float64(size)
			if f[o] != f[0] {
				same = false
			}
		}
		if same {
			uniform *= f[0]
			continue
		}
		fv := b.bcastIn(b.consts(y, f, []int64{outs[j]}), outDims, []int64{a})
		if div == nil {
			div = fv
		} else {
			div = b.mul(div, fv)
		}
	}
	if div == nil {
		return b.full(y, uniform, outDims)
	}
	if uniform != 1 {
		return nnScaleBy(b, div, uniform)
	}
	return div
}

// nnAdaptiveAvgPoolRule lowers _adaptive_avg_pool{n}d: PyTorch's windows
// [floor(i*in/out), ceil((i+1)*in/out)) are summed per axis (a reduce_window
// when in is a multiple of out, else a 0/1 matrix product) and divided by
// the window sizes.
func nnAdaptiveAvgPoolRule(spatial int) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		dt, outDims := Out(n, 0)
		if !dt.IsFloat() {
			return nil, fmt.Errorf("adaptive_avg_pool of %s is not supported", dt)
		}
		_, xd, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		b := &nnB{chain: chain{ctx: ctx}}
		y := b.convert(in[0], nnFloatCompute(dt))
		cur := append([]int64(nil), xd...)
		var div *stablehlo.Value
		rank := len(xd)
		for a := rank - spatial; a < rank; a++ {
			isz, osz := xd[a], outDims[a]
			if isz == osz {
				continue
			}
			counts := make([]float64, osz)
			if osz > 0 && isz%osz == 0 {
				k := isz / osz
				window, strides := make([]int64, rank), make([]int64, rank)
				for i := range window {
					window[i], strides[i] = 1, 1
				}
				window[a], strides[a] = k, k
				if b.err == nil {
					fn, err := ctx.ReduceFn(ReduceSum, y.Type().Elem)
					if err != nil {
						return nil, err
					}
					y = b.reduceWindow([]*stablehlo.Value{y}, []*stablehlo.Value{b.scalar(y, 0)}, fn, stablehlo.Window{Dims: window, Strides: strides})[0]
				}
				for i := range counts {
					counts[i] = float64(k)
				}
			} else {
				mat := make([]float64, osz*isz)
				for o := int64(0); o < osz; o++ {
					start := (o * isz) / osz
					end := ((o+1)*isz + osz - 1) / osz
					for i := start; i < end; i++ {
						mat[o*isz+i] = 1
					}
					counts[o] = float64(end - start)
				}
				m := b.consts(y, mat, []int64{osz, isz})
				y = b.dot(y, []int64{int64(a)}, nil, m, []int64{1}, nil)
				perm := append(append(nnRange(0, a), int64(rank-1)), nnRange(a, rank-1)...)
				y = b.transpose(y, perm)
			}
			cur[a] = osz
			cv := b.bcastIn(b.consts(y, counts, []int64{osz}), outDims, []int64{int64(a)})
			if div == nil {
				div = cv
			} else {
				div = b.mul(div, cv)
			}
		}
		if div != nil {
			y = b.div(y, div)
		}
		return b.out(b.convert(y, dt))
	}
}
