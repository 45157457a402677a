package fxgraph

import (
	"math"

	"github.com/xserve/xserve/tensor"
)

// Host evaluation of reductions, for constant folding of small tensors.

// rdEvaluable reports whether the host evaluators handle dtype dt exactly
// (they accumulate in int64 or float64; uint64 and complex are left to the
// backend).
func rdEvaluable(dt tensor.DType) bool {
	return dt == tensor.Bool || (dt.IsInt() && dt != tensor.Uint64) || dt.IsFloat()
}

// rdIndexMap maps every flat index of a tensor of shape dims to the flat
// index of its reduction output (the non-reduced dims, row-major) and to its
// position inside the reduced sub-block (the reduced dims, row-major).
func rdIndexMap(dims []int64, reduced []bool) (outIdx, inner []int64, outN, innerN int64) {
	n := tensor.NumElements(dims)
	outIdx = make([]int64, n)
	inner = make([]int64, n)
	outN, innerN = 1, 1
	for i, d := range dims {
		if reduced[i] {
			innerN *= d
		} else {
			outN *= d
		}
	}
	coord := make([]int64, len(dims))
	for f := int64(0); f < n; f++ {
		var o, in int64
		for i, d := range dims {
			if reduced[i] {
				in = in*d + coord[i]
			} else {
				o = o*d + coord[i]
			}
		}
		outIdx[f], inner[f] = o, in
		for i := len(dims) - 1; i >= 0; i-- {
			coord[i]++
			if coord[i] < dims[i] {
				break
			}
			coord[i] = 0
		}
	}
	return outIdx, inner, outN, innerN
}

// rdStaticOut returns the static dims of the node's value i.
func rdStaticOut(n *Node, i int) ([]int64, bool) {
	if i >= len(n.Meta.Vals) {
		return nil, false
	}
	return n.Meta.Vals[i].Shape.Static()
}

// rdInput returns the constant input 0 of n when its dtype can be evaluated.
func rdInput(n *Node, value func(*Node) *tensor.Tensor) *tensor.Tensor {
	xn, err := n.InputNode(0)
	if err != nil {
		return nil
	}
	x := value(xn)
	if x == nil || !rdEvaluable(x.DType) {
		return nil
	}
	return x
}

// rdEvalReduce evaluates a single-result reduction of the given kind.
func rdEvalReduce(kind rdKind, dimArg, keepArg int) EvalFunc {
	return func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
		x := rdInput(n, value)
		if x == nil {
			return nil, nil
		}
		outDT := n.Val().DType
		outDims, ok := rdStaticOut(n, 0)
		if !ok || !rdEvaluable(outDT) {
			return nil, nil
		}
		s, err := rdReduceSpec(n, dimArg, keepArg, x.Rank())
		if err != nil {
			return nil, err
		}
		outIdx, _, outN, innerN := rdIndexMap(x.Shape, s.reduced)
		out := tensor.New(outDT, outDims...)
		if out.NumElements() != outN {
			return nil, nil
		}
		// Integer results accumulate exactly in int64, the rest in float64.
		if (outDT.IsInt() || outDT == tensor.Bool) && kind != rdAny && kind != rdAll && kind != rdMean {
			rdFoldInts(kind, x, outIdx, out)
		} else {
			rdFoldFloats(kind, x, outIdx, innerN, out)
		}
		return []*tensor.Tensor{out}, nil
	}
}

// rdFoldInts reduces the elements of x into out (element f into
// outIdx[f]) exactly, in int64.
func rdFoldInts(kind rdKind, x *tensor.Tensor, outIdx []int64, out *tensor.Tensor) {
	outN := out.NumElements()
	acc := make([]int64, outN)
	seen := make([]bool, outN)
	for f, o := range outIdx {
		v := x.Int64At(int64(f))
		if !seen[o] {
			acc[o], seen[o] = v, true
			continue
		}
		switch kind {
		case rdSum:
			acc[o] += v
		case rdProd:
			acc[o] *= v
		case rdMax:
			acc[o] = max(acc[o], v)
		case rdMin:
			acc[o] = min(acc[o], v)
		}
	}
	for o := int64(0); o < outN; o++ {
		if !seen[o] {
			acc[o] = rdIntIdentity(kind, out.DType)
		}
		out.SetInt64(o, acc[o])
	}
}

// rdFoldFloats reduces the elements of x into out in float64 (a mean
// divides by innerN, the elements per output).
func rdFoldFloats(kind rdKind, x *tensor.Tensor, outIdx []int64, innerN int64, out *tensor.Tensor) {
	acc := make([]float64, out.NumElements())
	for o := range acc {
		acc[o] = rdFloatIdentity(kind)
	}
	for f, o := range outIdx {
		acc[o] = rdFloatStep(kind, acc[o], x.Float64At(int64(f)))
	}
	for o, v := range acc {
		if kind == rdMean {
			v /= float64(innerN)
		}
		out.SetFloat64(int64(o), v)
	}
}

// rdFloatStep folds v into the accumulator a; NaN wins max and min.
func rdFloatStep(kind rdKind, a, v float64) float64 {
	switch kind {
	case rdSum, rdMean:
		return a + v
	case rdProd:
		return a * v
	case rdMax:
		if v > a || math.IsNaN(v) {
			return v
		}
	case rdMin:
		if v < a || math.IsNaN(v) {
			return v
		}
	case rdAny:
		if v != 0 {
			return 1
		}
	case rdAll:
		if v == 0 {
			return 0
		}
	}
	return a
}

// rdFloatIdentity is the identity element of a float reduction.
func rdFloatIdentity(kind rdKind) float64 {
	switch kind {
	case rdProd, rdAll:
		return 1
	case rdMax:
		return math.Inf(-1)
	case rdMin:
		return math.Inf(1)
	}
	return 0
}

// rdIntIdentity is the identity element of an integer reduction in dtype dt
// (the result of reducing an empty set).
func rdIntIdentity(kind rdKind, dt tensor.DType) int64 {
	lo, hi, _ := dt.IntRange()
	switch kind {
	case rdProd:
		return 1
	case rdMax:
		return lo
	case rdMin:
		return hi
	}
	return 0
}

// rdBetter reports whether a candidate value v at index i beats the current
// best b at index j for a max (or min) search, NaN counting as the extreme
// and ties going to the lower index.
func rdBetter(kind rdKind, v, b float64, i, j int64) bool {
	vn, bn := math.IsNaN(v), math.IsNaN(b)
	switch {
	case vn && bn:
		return i < j
	case vn:
		return true
	case bn:
		return false
	case v == b:
		return i < j
	case kind == rdMax:
		return v > b
	}
	return v < b
}

// rdArgSearch finds, for every output element, the best value and its
// position inside the reduced sub-block.
func rdArgSearch(kind rdKind, x *tensor.Tensor, reduced []bool) (best []float64, bestI []int64, bestInt []int64, outN int64) {
	outIdx, inner, outN, _ := rdIndexMap(x.Shape, reduced)
	best = make([]float64, outN)
	bestI = make([]int64, outN)
	isInt := x.DType.IsInt() || x.DType == tensor.Bool
	if isInt {
		bestInt = make([]int64, outN)
	}
	seen := make([]bool, outN)
	for f, o := range outIdx {
		i := inner[f]
		if isInt {
			v := x.Int64At(int64(f))
			if !seen[o] || (kind == rdMax && v > bestInt[o]) || (kind == rdMin && v < bestInt[o]) || (v == bestInt[o] && i < bestI[o]) {
				bestInt[o], bestI[o], seen[o] = v, i, true
			}
			continue
		}
		v := x.Float64At(int64(f))
		if !seen[o] || rdBetter(kind, v, best[o], i, bestI[o]) {
			best[o], bestI[o], seen[o] = v, i, true
		}
	}
	return best, bestI, bestInt, outN
}

// rdEvalMaxDim evaluates aten.max.dim / aten.min.dim.
func rdEvalMaxDim(kind rdKind) EvalFunc {
	return func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
		x := rdInput(n, value)
		if x == nil || x.NumElements() == 0 {
			return nil, nil
		}
		s, err := rdReduceSpec(n, 1, 2, x.Rank())
		if err != nil {
			return nil, err
		}
		outDims, ok := rdStaticOut(n, 0)
		if !ok {
			return nil, nil
		}
		best, bestI, bestInt, outN := rdArgSearch(kind, x, s.reduced)
		vals := tensor.New(x.DType, outDims...)
		idx := tensor.New(tensor.Int64, outDims...)
		for o := int64(0); o < outN; o++ {
			if bestInt != nil {
				vals.SetInt64(o, bestInt[o])
			} else {
				vals.SetFloat64(o, best[o])
			}
			idx.SetInt64(o, bestI[o])
		}
		return []*tensor.Tensor{vals, idx}, nil
	}
}

// rdEvalArg evaluates aten.argmax / aten.argmin.
func rdEvalArg(kind rdKind) EvalFunc {
	return func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
		x := rdInput(n, value)
		if x == nil || x.NumElements() == 0 {
			return nil, nil
		}
		s, err := rdArgSpec(n, x.Rank())
		if err != nil {
			return nil, err
		}
		outDims, ok := rdStaticOut(n, 0)
		if !ok {
			return nil, nil
		}
		_, bestI, _, outN := rdArgSearch(kind, x, s.reduced)
		idx := tensor.New(tensor.Int64, outDims...)
		for o := int64(0); o < outN; o++ {
			idx.SetInt64(o, bestI[o])
		}
		return []*tensor.Tensor{idx}, nil
	}
}

// rdEvalCum evaluates aten.cumsum / aten.cumprod.
func rdEvalCum(kind rdKind) EvalFunc {
	return func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
		x := rdInput(n, value)
		outDT := n.Val().DType
		if x == nil || !rdEvaluable(outDT) {
			return nil, nil
		}
		axis, err := rdOneDim(n, x.Rank())
		if err != nil {
			return nil, err
		}
		out := tensor.New(outDT, x.Shape...)
		if x.Rank() == 0 {
			if outDT.IsFloat() {
				out.SetFloat64(0, x.Float64At(0))
			} else {
				out.SetInt64(0, x.Int64At(0))
			}
			return []*tensor.Tensor{out}, nil
		}
		size := x.Shape[axis]
		stride := int64(1)
		for _, d := range x.Shape[axis+1:] {
			stride *= d
		}
		total := x.NumElements()
		isInt := outDT.IsInt() || outDT == tensor.Bool
		for f := int64(0); f < total; f++ {
			pos := (f / stride) % size
			if pos != 0 {
				continue
			}
			// f starts a line along axis.
			var ai int64
			var af float64
			for k := int64(0); k < size; k++ {
				e := f + k*stride
				if isInt {
					v := x.Int64At(e)
					switch {
					case k == 0:
						ai = v
					case kind == rdProd:
						ai *= v
					default:
						ai += v
					}
					out.SetInt64(e, ai)
					continue
				}
				v := x.Float64At(e)
				switch {
				case k == 0:
					af = v
				case kind == rdProd:
					af *= v
				default:
					af += v
				}
				out.SetFloat64(e, af)
			}
		}
		return []*tensor.Tensor{out}, nil
	}
}
