package lower

import (
	"fmt"

	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// Out returns the static meta of value i of n (dims as []int64).
func Out(n *fxgraph.Node, i int) (tensor.DType, []int64) {
	m := n.Meta.Vals[i]
	dims, _ := m.Shape.Static()
	return m.DType, dims
}

// InMeta returns the static dtype and dims of argument i of n.
func InMeta(n *fxgraph.Node, i int) (tensor.DType, []int64, error) {
	m, err := n.InputMeta(i)
	if err != nil {
		return tensor.Invalid, nil, err
	}
	dims, ok := m.Shape.Static()
	if !ok {
		return tensor.Invalid, nil, fmt.Errorf("argument %d has symbolic shape %s", i, m.Shape)
	}
	return m.DType, dims, nil
}

// ConvertTo converts v to the program dtype of IR dtype dt (no-op when equal).
func (ctx *Context) ConvertTo(v *stablehlo.Value, dt tensor.DType) (*stablehlo.Value, error) {
	x, err := ctx.Elem(dt)
	if err != nil {
		return nil, err
	}
	if v.Type().Elem == x {
		return v, nil
	}
	return v.Block().Convert(v, x)
}

// BroadcastTo broadcasts v to dims with NumPy rules (trailing dims aligned,
// size-1 dims stretched).
func (ctx *Context) BroadcastTo(v *stablehlo.Value, dims []int64) (*stablehlo.Value, error) {
	s := v.Type()
	if slices.Equal(s.Dims, dims) {
		return v, nil
	}
	rank := len(dims)
	if s.Rank() > rank {
		return nil, fmt.Errorf("cannot broadcast %s to %v", s, dims)
	}
	// Drop size-1 dims that need stretching via reshape, then broadcast_in_dim.
	off := rank - s.Rank()
	var keep, axes []int64
	for i, d := range s.Dims {
		switch od := dims[off+i]; {
		case d == od:
			keep = append(keep, d)
			axes = append(axes, int64(off+i))
		case d == 1:
		default:
			return nil, fmt.Errorf("cannot broadcast %s to %v (dim %d)", s, dims, i)
		}
	}
	if len(keep) != s.Rank() {
		var err error
		if v, err = v.Block().Reshape(v, keep...); err != nil {
			return nil, err
		}
	}
	return v.Block().BroadcastInDim(v, dims, axes)
}

// Operands converts each value to dt and broadcasts it to dims: the usual
// preparation of the inputs of a pointwise op.
func (ctx *Context) Operands(dt tensor.DType, dims []int64, vals ...*stablehlo.Value) ([]*stablehlo.Value, error) {
	out := make([]*stablehlo.Value, len(vals))
	for i, v := range vals {
		c, err := ctx.ConvertTo(v, dt)
		if err != nil {
			return nil, err
		}
		if out[i], err = ctx.BroadcastTo(c, dims); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Full returns a constant of the program dtype of dt, broadcast to dims.
func (ctx *Context) Full(dt tensor.DType, v float64, dims []int64) (*stablehlo.Value, error) {
	s, err := ctx.Scalar(dt, v)
	if err != nil {
		return nil, err
	}
	return ctx.BroadcastTo(s, dims)
}

// ScalarLike returns a rank-0 constant of v's dtype holding x.
func (ctx *Context) ScalarLike(v *stablehlo.Value, x float64) (*stablehlo.Value, error) {
	dt, err := DTypeOf(v.Type().Elem)
	if err != nil {
		return nil, err
	}
	return ctx.Constant(tensor.Scalar(dt, x))
}

// Reducer kinds for ReduceFn.
const (
	ReduceSum = "sum"
	ReduceMax = "max"
	ReduceMin = "min"
	ReduceMul = "prod"
	ReduceAnd = "and"
	ReduceOr  = "or"
)

// ReduceFn builds the scalar closure (lhs, rhs) -> op(lhs, rhs) that reduce
// and reduce_window take, for values of dtype d.
func (ctx *Context) ReduceFn(kind string, d stablehlo.ElementType) (*Func, error) {
	fn := ctx.Fn.Closure()
	a, err := fn.Input(stablehlo.TensorOf(d))
	if err != nil {
		return nil, err
	}
	b, err := fn.Input(stablehlo.TensorOf(d))
	if err != nil {
		return nil, err
	}
	var r *stablehlo.Value
	blk := fn.Block()
	switch kind {
	case ReduceSum:
		r, err = blk.Add(a, b)
	case ReduceMax:
		r, err = MaxNaN(blk, a, b)
	case ReduceMin:
		r, err = MinNaN(blk, a, b)
	case ReduceMul:
		r, err = blk.Multiply(a, b)
	case ReduceAnd:
		r, err = blk.And(a, b)
	case ReduceOr:
		r, err = blk.Or(a, b)
	default:
		return nil, fmt.Errorf("lower: unknown reducer %q", kind)
	}
	if err != nil {
		return nil, err
	}
	if err := fn.Return(r); err != nil {
		return nil, err
	}
	return fn, nil
}

// MaxNaN is stablehlo.maximum that propagates NaN for floats, as PyTorch's
// maximum/amax/max_pool and numpy do: XLA CPU's maximum drops NaN. It
// adds its ops to blk.
func MaxNaN(blk *stablehlo.Block, a, b *stablehlo.Value) (*stablehlo.Value, error) {
	r, err := blk.Maximum(a, b)
	if err != nil {
		return nil, err
	}
	return propagateNaN(blk, r, a, b)
}

// MinNaN is stablehlo.minimum that propagates NaN for floats.
func MinNaN(blk *stablehlo.Block, a, b *stablehlo.Value) (*stablehlo.Value, error) {
	r, err := blk.Minimum(a, b)
	if err != nil {
		return nil, err
	}
	return propagateNaN(blk, r, a, b)
}

// propagateNaN returns r where neither a nor b is NaN, else the NaN operand.
func propagateNaN(blk *stablehlo.Block, r, a, b *stablehlo.Value) (*stablehlo.Value, error) {
	if !a.Type().Elem.IsFloat() {
		return r, nil
	}
	for _, v := range []*stablehlo.Value{b, a} {
		nan, err := blk.Compare(v, v, stablehlo.NE, stablehlo.CompareFloat)
		if err != nil {
			return nil, err
		}
		if r, err = blk.Select(nan, v, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Precision is the dot/conv precision to request: highest unless
// Options.DefaultPrecision.
func (ctx *Context) Precision() stablehlo.Precision {
	if ctx.Options.DefaultPrecision {
		return stablehlo.PrecisionDefault
	}
	return stablehlo.PrecisionHighest
}

// ComputeDType is the dtype dot and convolution of dt inputs compute in:
// float32 for float16/bfloat16 when Options.HalfInF32 (XLA CPU is very slow
// on half-precision dot/conv), dt otherwise.
func (ctx *Context) ComputeDType(dt tensor.DType) tensor.DType {
	if (dt == tensor.Float16 || dt == tensor.BFloat16) && ctx.Options.HalfInF32 != nil && *ctx.Options.HalfInF32 {
		return tensor.Float32
	}
	return dt
}
