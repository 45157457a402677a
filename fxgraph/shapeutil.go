package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// InputMeta returns the TensorMeta of argument i, which must be a node.
func (n *Node) InputMeta(i int) (TensorMeta, error) {
	m, err := n.InputNode(i)
	if err != nil {
		return TensorMeta{}, err
	}
	if len(m.Meta.Vals) != 1 || m.Meta.Tuple {
		return TensorMeta{}, fmt.Errorf("fxgraph: node %s (%s): argument %d (%s) has meta %s, want one tensor", n.Name, n.Target, i, m.Name, m.Meta)
	}
	return m.Meta.Vals[0], nil
}

// ConstInts returns the integer values of an argument that is either an int
// list literal or a node holding a constant integer tensor (a folded shape
// computation). known is false when the argument is a node whose value is not
// a constant yet (before specialization).
func (n *Node) ConstInts(i int, name string) (vals []int64, known bool, err error) {
	a := n.ArgOr(i, name, nil)
	if m, ok := a.(*Node); ok {
		if m.graph == nil {
			return nil, false, nil
		}
		t := m.graph.ConstValue(m)
		if t == nil {
			return nil, false, nil
		}
		if !(t.DType.IsInt() || t.DType == tensor.Bool) || t.Rank() > 1 {
			return nil, false, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a 1-D integer tensor", n.Name, n.Target, name, t)
		}
		return t.Int64s(), true, nil
	}
	if list, ok := a.([]any); ok {
		// A list may mix ints and scalar nodes (symbolic sizes).
		out := make([]int64, len(list))
		for j, e := range list {
			if m, ok := e.(*Node); ok {
				t := m.graph.ConstValue(m)
				if t == nil || t.NumElements() != 1 {
					return nil, false, nil
				}
				out[j] = t.Int64At(0)
				continue
			}
			v, ok := AsInt(e)
			if !ok {
				return nil, false, fmt.Errorf("fxgraph: node %s (%s): argument %s element %d is %s, want an int", n.Name, n.Target, name, j, FormatArg(e))
			}
			out[j] = v
		}
		return out, true, nil
	}
	if a == nil {
		return nil, true, nil
	}
	v, ok := AsInts(a)
	if !ok {
		return nil, false, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a list of ints", n.Name, n.Target, name, FormatArg(a))
	}
	return v, true, nil
}

// NormDim maps a possibly negative dim index into [0, rank).
func NormDim(d int64, rank int) (int, error) {
	if d < 0 {
		d += int64(rank)
	}
	if d < 0 || d >= int64(rank) {
		return 0, fmt.Errorf("dim %d out of range for rank %d", d, rank)
	}
	return int(d), nil
}

// BroadcastShapes applies NumPy/PyTorch broadcasting to shapes. Symbolic dims
// broadcast with 1 and with the same symbol; a symbol against a concrete size
// other than 1 takes the concrete size.
func BroadcastShapes(shapes ...Shape) (Shape, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make(Shape, rank)
	for i := range out {
		out[i] = D(1)
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case d == D(1):
			case o == D(1):
				out[off+i] = d
			case d == o:
			case !d.IsStatic() && o.IsStatic():
				// symbol must equal the concrete size
			case d.IsStatic() && !o.IsStatic():
				out[off+i] = d
			case !d.IsStatic() && !o.IsStatic():
				out[off+i] = Unknown
			default:
				return nil, fmt.Errorf("shapes %v do not broadcast (dim %d: %s vs %s)", shapes, off+i, o, d)
			}
		}
	}
	return out, nil
}

// typeCategory orders dtypes for PyTorch's type promotion: bool < int < float < complex.
func typeCategory(d tensor.DType) int {
	switch {
	case d == tensor.Bool:
		return 0
	case d.IsInt():
		return 1
	case d.IsFloat():
		return 2
	case d.IsComplex():
		return 3
	}
	return -1
}

// PromoteTypes returns the dtype PyTorch computes a binary op of two tensors
// in (torch.promote_types).
func PromoteTypes(a, b tensor.DType) tensor.DType {
	if a == b {
		return a
	}
	ca, cb := typeCategory(a), typeCategory(b)
	if ca != cb {
		if ca > cb {
			if ca == 3 && b == tensor.Float64 {
				return tensor.Complex128
			}
			return a
		}
		if cb == 3 && a == tensor.Float64 {
			return tensor.Complex128
		}
		return b
	}
	switch ca {
	case 1:
		return promoteInts(a, b)
	case 2:
		if (a == tensor.Float16 && b == tensor.BFloat16) || (a == tensor.BFloat16 && b == tensor.Float16) {
			return tensor.Float32
		}
		if a.Size() >= b.Size() {
			return a
		}
		return b
	case 3:
		if a == tensor.Complex128 || b == tensor.Complex128 {
			return tensor.Complex128
		}
		return tensor.Complex64
	}
	return a
}

func promoteInts(a, b tensor.DType) tensor.DType {
	if a.IsUnsigned() == b.IsUnsigned() {
		if a.Size() >= b.Size() {
			return a
		}
		return b
	}
	u, s := a, b
	if b.IsUnsigned() {
		u, s = b, a
	}
	if s.Size() > u.Size() {
		return s
	}
	switch u.Size() {
	case 1:
		return tensor.Int16
	case 2:
		return tensor.Int32
	}
	return tensor.Int64
}
