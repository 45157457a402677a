package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// mlBuild emits the IR of an ai.onnx.ml converter: pointwise and shape ops
// on IR nodes, keeping the first error (later calls do nothing and return
// nil), so that a formula reads as one. err reports it.
type mlBuild struct {
	c   *Ctx
	err error
	// sub, when set, is the subgraph (a loop body) the ops go to instead of
	// the model's graph.
	subg *fxgraph.Emitter
}

// in returns a builder of the same converter emitting into subgraph g.
func (b *mlBuild) in(g *fxgraph.Graph) *mlBuild {
	return &mlBuild{c: b.c, subg: &fxgraph.Emitter{Graph: g, IR: b.c.s.im.ir}}
}

func (b *mlBuild) emit(target *fxgraph.Op, args ...any) *fxgraph.Node {
	return b.emitKw(target, args, nil)
}

func (b *mlBuild) emitKw(target *fxgraph.Op, args []any, kw map[string]any) *fxgraph.Node {
	if b.err != nil {
		return nil
	}
	for _, a := range args {
		if n, ok := a.(*fxgraph.Node); ok && n == nil {
			b.err = fmt.Errorf("onnx: %s of a value that was not built", target)
			return nil
		}
	}
	var n *fxgraph.Node
	var err error
	if b.subg != nil {
		n, err = b.subg.Emit("", target, args, kw)
	} else {
		n, err = b.c.EmitKw(target, args, kw)
	}
	if err != nil {
		b.err = err
	}
	return n
}

func (b *mlBuild) add(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenAddTensor, x, y) }
func (b *mlBuild) sub(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenSubTensor, x, y) }
func (b *mlBuild) mul(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenMulTensor, x, y) }
func (b *mlBuild) div(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenDivTensor, x, y) }
func (b *mlBuild) neg(x *fxgraph.Node) *fxgraph.Node    { return b.emit(fxgraph.AtenNeg, x) }
func (b *mlBuild) exp(x *fxgraph.Node) *fxgraph.Node    { return b.emit(fxgraph.AtenExp, x) }
func (b *mlBuild) log(x *fxgraph.Node) *fxgraph.Node    { return b.emit(fxgraph.AtenLog, x) }
func (b *mlBuild) sqrt(x *fxgraph.Node) *fxgraph.Node   { return b.emit(fxgraph.AtenSqrt, x) }
func (b *mlBuild) abs(x *fxgraph.Node) *fxgraph.Node    { return b.emit(fxgraph.AtenAbs, x) }
func (b *mlBuild) where(c, x, y *fxgraph.Node) *fxgraph.Node {
	return b.emit(fxgraph.AtenWhereSelf, c, x, y)
}
func (b *mlBuild) lt(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenLtTensor, x, y) }
func (b *mlBuild) gt(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenGtTensor, x, y) }
func (b *mlBuild) eq(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenEqTensor, x, y) }
func (b *mlBuild) and(x, y *fxgraph.Node) *fxgraph.Node {
	return b.emit(fxgraph.AtenLogicalAnd, x, y)
}
func (b *mlBuild) or(x, y *fxgraph.Node) *fxgraph.Node {
	return b.emit(fxgraph.AtenLogicalOr, x, y)
}
func (b *mlBuild) not(x *fxgraph.Node) *fxgraph.Node   { return b.emit(fxgraph.AtenLogicalNot, x) }
func (b *mlBuild) isnan(x *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenIsnan, x) }
func (b *mlBuild) mm(x, y *fxgraph.Node) *fxgraph.Node { return b.emit(fxgraph.AtenMm, x, y) }

// to converts x to dtype dt (nothing when it is dt already).
func (b *mlBuild) to(x *fxgraph.Node, dt tensor.DType) *fxgraph.Node {
	if x == nil || Meta(x).DType == dt {
		return x
	}
	return b.emitKw(fxgraph.Aten_ToCopy, []any{x}, map[string]any{"dtype": dt})
}

// scalar is a rank-0 constant of dtype dt.
func (b *mlBuild) scalar(dt tensor.DType, v float64) *fxgraph.Node {
	if b.subg != nil {
		return b.subg.Graph.AddConstant("scalar", tensor.Scalar(dt, v))
	}
	return b.c.ScalarConst(dt, v)
}

// constant adds tensor t to the graph being built.
func (b *mlBuild) constant(name string, t *tensor.Tensor) *fxgraph.Node {
	if b.subg != nil {
		return b.subg.Graph.AddConstant(name, t)
	}
	return b.c.Constant(name, t)
}

// column returns x[:, j:j+1] of a 2-D x.
func (b *mlBuild) column(x *fxgraph.Node, j int64) *fxgraph.Node {
	return b.emit(fxgraph.AtenSliceTensor, x, int64(1), j, j+1)
}

// cat concatenates along dim.
func (b *mlBuild) cat(dim int64, xs ...*fxgraph.Node) *fxgraph.Node {
	for _, x := range xs {
		if x == nil {
			return nil
		}
	}
	return b.emit(fxgraph.AtenCat, nodes(xs), dim)
}

// squeeze1 drops dim 1 of a [N, 1] value.
func (b *mlBuild) squeeze1(x *fxgraph.Node) *fxgraph.Node {
	return b.emit(fxgraph.AtenSqueezeDim, x, int64(1))
}

// rows reshapes x to 2-D [N, F]: a 1-D x is one row ([1, F]), higher ranks
// keep their first dim.
func (b *mlBuild) rows(x *fxgraph.Node) *fxgraph.Node {
	if x == nil {
		return nil
	}
	m := Meta(x)
	switch m.Rank() {
	case 2:
		return x
	case 0:
		return b.emit(fxgraph.AtenReshape, x, []any{int64(1), int64(1)})
	case 1:
		return b.emit(fxgraph.AtenUnsqueeze, x, int64(0))
	}
	inner := int64(1)
	for _, d := range m.Shape[1:] {
		if !d.IsStatic() {
			b.err = Unsupported("%s input with symbolic inner dims (want [N, F])", m)
			return nil
		}
		inner *= d.Size
	}
	return b.emit(fxgraph.AtenReshape, x, []any{int64(-1), inner})
}
