package lower

import (
	"errors"
	"slices"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// binOp and unOp are the emitter's elementwise ops as method expressions
// ((*stablehlo.Block).Atan2), for chain.bin and chain.un.
type (
	binOp = func(*stablehlo.Block, *stablehlo.Value, *stablehlo.Value) (*stablehlo.Value, error)
	unOp  = func(*stablehlo.Block, *stablehlo.Value) (*stablehlo.Value, error)
)

// chain builds ops one after another and keeps the first error: once it is
// set, every method returns nil without building anything, and out or err
// report it. It keeps long formulas readable. An op is added to the block
// of its first operand, so that a chain works alike in the main function
// and in a region (a reduction body) whose arguments it is given.
type chain struct {
	ctx *Context
	err error
}

// set records err, or returns v.
func (c *chain) set(v *stablehlo.Value, err error) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	if err != nil {
		c.err = err
		return nil
	}
	return v
}

// bin applies a binary op.
func (c *chain) bin(op binOp, x, y *stablehlo.Value) *stablehlo.Value {
	if c.err != nil || x == nil || y == nil {
		return c.set(nil, c.nilOperand())
	}
	return c.set(op(x.Block(), x, y))
}

// un applies a unary op.
func (c *chain) un(op unOp, x *stablehlo.Value) *stablehlo.Value {
	if c.err != nil || x == nil {
		return c.set(nil, c.nilOperand())
	}
	return c.set(op(x.Block(), x))
}

// errNilOperand is the error of a chain step given a nil operand while no
// error was set: a programming error in a rule.
var errNilOperand = errors.New("lower: nil operand")

// nilOperand is the error for an operand that is nil without an error set
// (a programming error in a rule).
func (c *chain) nilOperand() error {
	if c.err != nil {
		return c.err
	}
	return errNilOperand
}

// add is stablehlo.add.
func (c *chain) add(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Add, x, y)
}

// sub is stablehlo.subtract.
func (c *chain) sub(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Subtract, x, y)
}

// mul is stablehlo.multiply.
func (c *chain) mul(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Multiply, x, y)
}

// div is stablehlo.divide.
func (c *chain) div(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Divide, x, y)
}

// max is stablehlo.maximum.
func (c *chain) max(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Maximum, x, y)
}

// min is stablehlo.minimum.
func (c *chain) min(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Minimum, x, y)
}

// and is stablehlo.and.
func (c *chain) and(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).And, x, y)
}

// or is stablehlo.or.
func (c *chain) or(x, y *stablehlo.Value) *stablehlo.Value {
	return c.bin((*stablehlo.Block).Or, x, y)
}

// cmp compares with the comparison type of x's element type.
func (c *chain) cmp(x, y *stablehlo.Value, dir stablehlo.Direction) *stablehlo.Value {
	if c.err != nil || x == nil || y == nil {
		return c.set(nil, c.nilOperand())
	}
	return c.set(ewCompare(x, y, dir))
}

// sel is select(p, x, y).
func (c *chain) sel(p, x, y *stablehlo.Value) *stablehlo.Value {
	if c.err != nil || p == nil || x == nil || y == nil {
		return c.set(nil, c.nilOperand())
	}
	return c.set(x.Block().Select(p, x, y))
}

// k is a constant of like's dtype and shape holding x.
func (c *chain) k(like *stablehlo.Value, x float64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(ewFull(c.ctx, like, x))
}

// convert converts x to the program dtype of IR dtype dt.
func (c *chain) convert(x *stablehlo.Value, dt tensor.DType) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(c.ctx.ConvertTo(x, dt))
}

// reshape gives x the dims (nothing when it has them).
func (c *chain) reshape(x *stablehlo.Value, dims []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	if slices.Equal(x.Type().Dims, dims) {
		return x
	}
	return c.set(x.Block().Reshape(x, dims...))
}

// bcastIn broadcasts x to dims, x's axis i going to axes[i].
func (c *chain) bcastIn(x *stablehlo.Value, dims, axes []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(x.Block().BroadcastInDim(x, dims, axes))
}

// bcast broadcasts x to dims with NumPy rules.
func (c *chain) bcast(x *stablehlo.Value, dims []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(c.ctx.BroadcastTo(x, dims))
}

// transpose permutes x's dims.
func (c *chain) transpose(x *stablehlo.Value, perm []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(x.Block().Transpose(x, perm...))
}

// slice takes x[starts:limits:strides] (nil strides: 1).
func (c *chain) slice(x *stablehlo.Value, starts, limits, strides []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(x.Block().Slice(x, starts, limits, strides))
}

// scalar is a rank-0 constant of like's dtype.
func (c *chain) scalar(like *stablehlo.Value, v float64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(c.ctx.ScalarLike(like, v))
}

// full is a constant of like's dtype broadcast to dims.
func (c *chain) full(like *stablehlo.Value, v float64, dims []int64) *stablehlo.Value {
	return c.bcastIn(c.scalar(like, v), dims, nil)
}

// consts is a constant of like's dtype holding vals with the given dims.
func (c *chain) consts(like *stablehlo.Value, vals []float64, dims []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	dt, err := DTypeOf(like.Type().Elem)
	if err != nil {
		return c.set(nil, err)
	}
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return c.set(c.ctx.Constant(t))
}

// reduce reduces x over axes with the reducer kind (ReduceSum, ...)
// starting from init.
func (c *chain) reduce(x *stablehlo.Value, kind string, init float64, axes []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	fn, err := c.ctx.ReduceFn(kind, x.Type().Elem)
	if err != nil {
		return c.set(nil, err)
	}
	out, err := x.Block().Reduce([]*stablehlo.Value{x}, []*stablehlo.Value{c.scalar(x, init)}, axes, fn.Block())
	if err != nil {
		return c.set(nil, err)
	}
	return out[0]
}

// out returns vals, or the chain's error.
func (c *chain) out(vals ...*stablehlo.Value) ([]*stablehlo.Value, error) {
	if c.err != nil {
		return nil, c.err
	}
	return vals, nil
}

// concat joins vs along axis.
func (c *chain) concat(axis int, vs ...*stablehlo.Value) *stablehlo.Value {
	if c.err != nil || len(vs) == 0 {
		return c.set(nil, c.nilOperand())
	}
	return c.set(vs[0].Block().Concatenate(axis, vs...))
}

// iota is a tensor of type t counting along dim, in the context's block.
func (c *chain) iota(t stablehlo.Type, dim int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(c.ctx.Fn.Block().Iota(t, int(dim)))
}

// gather is stablehlo.gather of x at indices.
func (c *chain) gather(x, indices *stablehlo.Value, d stablehlo.GatherDims, sizes []int64, sorted bool) *stablehlo.Value {
	if c.err != nil || x == nil || indices == nil {
		return c.set(nil, c.nilOperand())
	}
	return c.set(x.Block().Gather(x, indices, d, sizes, sorted))
}

// reduceWindow reduces the windows w of inputs together with fn.
func (c *chain) reduceWindow(inputs, inits []*stablehlo.Value, fn *Func, w stablehlo.Window) []*stablehlo.Value {
	if c.err != nil {
		return nil
	}
	out, err := inputs[0].Block().ReduceWindow(inputs, inits, w, fn.Block())
	if err != nil {
		c.err = err
		return nil
	}
	return out
}

// constOf is a constant of IR dtype dt holding vals (int64 or bool
// values) with the given dims.
func (c *chain) constOf(dt tensor.DType, vals []int64, dims ...int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetInt64(int64(i), v)
	}
	return c.set(c.ctx.Constant(t))
}

// reduceAs reduces x (values of IR dtype dt) over axes with reducer kind
// (Context.rdReduce: bool reductions as or/and).
func (c *chain) reduceAs(x *stablehlo.Value, dt tensor.DType, kind string, axes []int64) *stablehlo.Value {
	if c.err != nil {
		return nil
	}
	return c.set(c.ctx.rdReduce(x, dt, kind, axes))
}

// cmpAs compares with comparison type ct.
func (c *chain) cmpAs(x, y *stablehlo.Value, dir stablehlo.Direction, ct stablehlo.CompareType) *stablehlo.Value {
	if c.err != nil || x == nil || y == nil {
		return c.set(nil, c.nilOperand())
	}
	return c.set(x.Block().Compare(x, y, dir, ct))
}
