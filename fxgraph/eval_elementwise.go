package fxgraph

import (
	"encoding/binary"
	"math"

	"github.com/xserve/xserve/tensor"
)

// Host evaluation of the pointwise operators, used for constant folding.
// Integer and bool values are computed exactly in int64 and wrapped to the
// result dtype; floats are computed in float64 and rounded once to the result
// dtype. Cases without a clear host semantics (integer division by zero,
// negative integer powers, complex or uint64 values) are declined: the
// backend then computes them.

// ewPutInt stores v at element i of an integer or bool tensor, wrapping it
// to the dtype's width as C casts do.
func ewPutInt(t *tensor.Tensor, i int64, v int64) {
	switch t.DType {
	case tensor.Bool:
		t.Data[i] = byte(ewB(v != 0))
	case tensor.Int8, tensor.Uint8:
		t.Data[i] = byte(v)
	case tensor.Int16, tensor.Uint16:
		binary.LittleEndian.PutUint16(t.Data[2*i:], uint16(v))
	case tensor.Int32, tensor.Uint32:
		binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(v))
	case tensor.Int64, tensor.Uint64:
		binary.LittleEndian.PutUint64(t.Data[8*i:], uint64(v))
	default:
		t.SetFloat64(i, float64(v))
	}
}

func ewIntLike(dt tensor.DType) bool { return dt.IsInt() || dt == tensor.Bool }

// ewFoldable reports whether values of dt can be folded on the host.
func ewFoldable(dt tensor.DType) bool {
	return dt.IsFloat() || (ewIntLike(dt) && dt != tensor.Uint64)
}

// ewOperand reads one operand of a pointwise fold, broadcast to the result.
type ewOperand struct {
	t       *tensor.Tensor
	strides []int64 // per result dim; 0 where broadcast
	li      int64
	lf      float64
}

// ewEval folds a pointwise node: result element i is fi (integer path, when
// ct is an integer or bool dtype) or ff (float path) of the operands at i.
// ops are tensor nodes or Python numbers. It returns (nil, nil) to decline.
func ewEval(n *Node, value func(*Node) *tensor.Tensor, ops []any, ct tensor.DType,
	fi func([]int64) (int64, bool), ff func([]float64) float64) ([]*tensor.Tensor, error) {
	out := n.Val()
	dims, ok := out.Shape.Static()
	if !ok || !ewFoldable(ct) || !(ewFoldable(out.DType)) {
		return nil, nil
	}
	intPath := ewIntLike(ct)
	if (intPath && fi == nil) || (!intPath && ff == nil) {
		return nil, nil
	}
	if !intPath && ewIntLike(out.DType) && out.DType != tensor.Bool {
		return nil, nil // a float computation never yields an integer result here
	}
	operands, ok := ewFoldOperands(value, ops, dims, intPath)
	if !ok {
		return nil, nil
	}
	res := tensor.New(out.DType, dims...)
	total := res.NumElements()
	iv := make([]int64, len(ops))
	fv := make([]float64, len(ops))
	idx := make([]int64, len(dims))
	for i := int64(0); i < total; i++ {
		if i > 0 {
			ewNextIndex(idx, dims)
		}
		for k := range operands {
			operands[k].read(idx, intPath, &iv[k], &fv[k])
		}
		if intPath {
			v, ok := fi(iv)
			if !ok {
				return nil, nil
			}
			ewPutInt(res, i, v)
		} else {
			res.SetFloat64(i, ff(fv))
		}
	}
	return []*tensor.Tensor{res}, nil
}

// ewFoldOperands reads ops (tensor nodes or Python numbers) as operands of a
// result of shape dims; false declines the fold.
func ewFoldOperands(value func(*Node) *tensor.Tensor, ops []any, dims []int64, intPath bool) ([]ewOperand, bool) {
	operands := make([]ewOperand, len(ops))
	for k, a := range ops {
		if v, isNode := a.(*Node); isNode {
			t := value(v)
			if t == nil || !ewFoldable(t.DType) {
				return nil, false
			}
			st, ok := ewStrides(t.Shape, dims)
			if !ok {
				return nil, false
			}
			operands[k] = ewOperand{t: t, strides: st}
			continue
		}
		f, ok := AsFloat(a)
		if !ok {
			return nil, false
		}
		if intPath {
			iv, ok := AsInt(a)
			if !ok {
				return nil, false
			}
			operands[k].li = iv
		}
		operands[k].lf = f
	}
	return operands, true
}

// ewNextIndex advances idx, a row-major index into dims, by one element.
func ewNextIndex(idx, dims []int64) {
	for d := len(dims) - 1; d >= 0; d-- {
		idx[d]++
		if idx[d] < dims[d] {
			return
		}
		idx[d] = 0
	}
}

// read sets *iv (integer path) or *fv to the operand's element at the
// result index idx.
func (o *ewOperand) read(idx []int64, intPath bool, iv *int64, fv *float64) {
	if o.t == nil {
		*iv, *fv = o.li, o.lf
		return
	}
	off := int64(0)
	for d, s := range o.strides {
		off += idx[d] * s
	}
	if intPath {
		*iv = o.t.Int64At(off)
	} else {
		*fv = o.t.Float64At(off)
	}
}

// ewStrides returns, for each dim of the result dims, the element stride of
// a tensor of shape in broadcast to dims (0 for stretched dims).
func ewStrides(in, dims []int64) ([]int64, bool) {
	if len(in) > len(dims) {
		return nil, false
	}
	st := make([]int64, len(dims))
	off := len(dims) - len(in)
	s := int64(1)
	for j := len(in) - 1; j >= 0; j-- {
		switch {
		case in[j] == dims[off+j]:
			st[off+j] = s
		case in[j] == 1:
		default:
			return nil, false
		}
		s *= in[j]
	}
	return st, true
}

// ewEvalUnary folds a one-input node: fi on the integer path (nil declines),
// ff on the float path. Integer inputs of float-valued ops are computed as
// floats.
func ewEvalUnary(n *Node, value func(*Node) *tensor.Tensor,
	fi func(tensor.DType, int64) (int64, bool), ff func(float64) float64) ([]*tensor.Tensor, error) {
	x, err := n.InputNode(0)
	if err != nil {
		return nil, err
	}
	ct := n.Val().DType
	if ct == tensor.Bool {
		ct = x.Val().DType
	}
	var fiv func([]int64) (int64, bool)
	if fi != nil {
		fiv = func(v []int64) (int64, bool) { return fi(ct, v[0]) }
	}
	var ffv func([]float64) float64
	if ff != nil {
		ffv = func(v []float64) float64 { return ff(v[0]) }
	}
	return ewEval(n, value, []any{x}, ct, fiv, ffv)
}

// ewToCopyEval folds a dtype conversion.
func ewToCopyEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := n.InputNode(0)
	if err != nil {
		return nil, err
	}
	t := value(x)
	if t == nil {
		return nil, nil
	}
	dt := n.Val().DType
	if t.DType == dt {
		return []*tensor.Tensor{t.Clone()}, nil
	}
	if t.DType.IsComplex() || dt.IsComplex() || t.DType == tensor.String || dt == tensor.String {
		return nil, nil
	}
	out := tensor.New(dt, t.Shape...)
	total := t.NumElements()
	for i := int64(0); i < total; i++ {
		switch {
		case ewIntLike(t.DType) && ewIntLike(dt):
			ewPutInt(out, i, t.Int64At(i))
		case dt == tensor.Bool:
			out.SetFloat64(i, ewBf(t.Float64At(i) != 0 || math.IsNaN(t.Float64At(i))))
		case ewIntLike(dt):
			v := math.Trunc(t.Float64At(i))
			if math.IsNaN(v) || math.Abs(v) >= 1<<63 {
				return nil, nil // out of range: left to the backend
			}
			ewPutInt(out, i, int64(v))
		default:
			out.SetFloat64(i, t.Float64At(i))
		}
	}
	return []*tensor.Tensor{out}, nil
}
