package fxgraph

import (
	"math"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// Host evaluation of the shape and indexing operators. They only move
// bytes (or, for scatter reductions and arange, compute in int64 or float64
// by dtype), so they work for every dtype and keep int64 exact.

// shStrides returns row-major strides of shape.
func shStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// shForEach calls f for every element of shape in row-major order with its
// flat position and multi-index (reused between calls).
func shForEach(shape []int64, f func(flat int64, idx []int64)) {
	total := tensor.NumElements(shape)
	if total <= 0 {
		return
	}
	idx := make([]int64, len(shape))
	for flat := int64(0); flat < total; flat++ {
		f(flat, idx)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// shFlat returns the flat position of idx under strides st.
func shFlat(idx, st []int64) int64 {
	var p int64
	for i, x := range idx {
		p += x * st[i]
	}
	return p
}

// shCopyElem copies element si of src to element di of dst (same dtype).
func shCopyElem(dst *tensor.Tensor, di int64, src *tensor.Tensor, si int64) {
	sz := int64(dst.DType.Size())
	copy(dst.Data[di*sz:(di+1)*sz], src.Data[si*sz:(si+1)*sz])
}

// shOut allocates output i of n from its static meta.
func shOut(n *Node, i int) (*tensor.Tensor, error) {
	if i >= len(n.Meta.Vals) {
		return nil, shErr(n, "no output %d", i)
	}
	m := n.Meta.Vals[i]
	dims, ok := m.Shape.Static()
	if !ok {
		return nil, shErr(n, "output shape %s is not static", m.Shape)
	}
	if m.DType == tensor.String || m.DType == tensor.Invalid {
		return nil, shErr(n, "cannot evaluate dtype %s", m.DType)
	}
	return tensor.New(m.DType, dims...), nil
}

// shArg returns the constant value of argument i, converted to dt when dt
// is valid.
func shArg(n *Node, i int, value func(*Node) *tensor.Tensor, dt tensor.DType) (*tensor.Tensor, error) {
	m, err := n.InputNode(i)
	if err != nil {
		return nil, err
	}
	t := value(m)
	if t == nil {
		return nil, shErr(n, "argument %d (%s) is not a constant", i, m.Name)
	}
	if t.DType == tensor.String {
		return nil, shErr(n, "cannot evaluate string tensors")
	}
	if dt != tensor.Invalid && t.DType != dt {
		t = t.Convert(dt)
	}
	return t, nil
}

// shMap fills out from src: element idx of out takes element at(idx) of
// src, or stays zero when at returns -1.
func shMap(out, src *tensor.Tensor, at func(idx []int64) int64) {
	shForEach(out.Shape, func(flat int64, idx []int64) {
		if p := at(idx); p >= 0 {
			shCopyElem(out, flat, src, p)
		}
	})
}

// shEvalView covers ops that keep the elements in order: view, reshape,
// unsqueeze, squeeze, alias.
func shEvalView(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	if x.NumElements() != out.NumElements() {
		return nil, shErr(n, "input has %d elements, output %d", x.NumElements(), out.NumElements())
	}
	copy(out.Data, x.Data)
	return []*tensor.Tensor{out}, nil
}

func shEvalPermute(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	perm, err := shPerm(n, x.Rank())
	if err != nil {
		return nil, err
	}
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for k, d := range perm {
			p += idx[k] * st[d]
		}
		return p
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalExpand(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	st := shStrides(x.Shape)
	off := out.Rank() - x.Rank()
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for i, d := range x.Shape {
			if d != 1 {
				p += idx[i+off] * st[i]
			}
		}
		return p
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalCat(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	ins, dim, _, err := shCatInputs(n)
	if err != nil {
		return nil, err
	}
	var srcs []*tensor.Tensor
	var starts []int64
	var at int64
	for _, m := range ins {
		t := value(m)
		if t == nil {
			return nil, shErr(n, "input %s is not a constant", m.Name)
		}
		if t.DType != out.DType {
			t = t.Convert(out.DType)
		}
		srcs = append(srcs, t)
		starts = append(starts, at)
		at += t.Shape[dim]
	}
	sub := make([]int64, out.Rank())
	shForEach(out.Shape, func(flat int64, idx []int64) {
		k := len(srcs) - 1
		for k > 0 && idx[dim] < starts[k] {
			k--
		}
		copy(sub, idx)
		sub[dim] -= starts[k]
		shCopyElem(out, flat, srcs[k], shFlat(sub, shStrides(srcs[k].Shape)))
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalSplit(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := shArg(n, 0, value, tensor.Invalid)
	if err != nil {
		return nil, err
	}
	m, err := n.InputMeta(0)
	if err != nil {
		return nil, err
	}
	dim, sizes, err := shSplitSizes(n, m.Shape)
	if err != nil {
		return nil, err
	}
	st := shStrides(x.Shape)
	var outs []*tensor.Tensor
	var off int64
	for i := range sizes {
		out, err := shOut(n, i)
		if err != nil {
			return nil, err
		}
		o := off
		shMap(out, x, func(idx []int64) int64 {
			return shFlat(idx, st) + o*st[dim]
		})
		outs = append(outs, out)
		off += sizes[i]
	}
	return outs, nil
}

func shEvalSlice(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	dim, start, end, step, err := shSliceArgs(n, x.Rank())
	if err != nil {
		return nil, err
	}
	s, _ := shSliceBounds(start, end, x.Shape[dim])
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		return shFlat(idx, st) + (s+idx[dim]*(step-1))*st[dim]
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalSelect(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	d, _ := n.IntArg(1, "dim", 0)
	dim, err := NormDim(d, x.Rank())
	if err != nil {
		return nil, shErr(n, "%v", err)
	}
	i, _ := n.IntArg(2, "index", 0)
	if i < 0 {
		i += x.Shape[dim]
	}
	if i < 0 || i >= x.Shape[dim] {
		return nil, shErr(n, "index out of range")
	}
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for k, v := range idx {
			if k >= dim {
				k++
			}
			p += v * st[k]
		}
		return p + i*st[dim]
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalFlip(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	dims, err := n.IntsArg(1, "dims", nil)
	if err != nil {
		return nil, err
	}
	flip := make([]bool, x.Rank())
	for _, d := range dims {
		k, err := NormDim(d, x.Rank())
		if err != nil {
			return nil, shErr(n, "%v", err)
		}
		flip[k] = true
	}
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for k, v := range idx {
			if flip[k] {
				v = x.Shape[k] - 1 - v
			}
			p += v * st[k]
		}
		return p
	})
	return []*tensor.Tensor{out}, nil
}

// shWrap maps a possibly negative index into [0, size), or returns an error.
func shWrap(n *Node, i, size int64) (int64, error) {
	if i < 0 {
		i += size
	}
	if i < 0 || i >= size {
		return 0, shErr(n, "index %d out of range for size %d", i, size)
	}
	return i, nil
}

func shEvalIndexSelect(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	index, err := shArg(n, 2, value, tensor.Invalid)
	if err != nil {
		return nil, err
	}
	if x.Rank() == 0 {
		if _, err := shWrap(n, index.Int64At(0), 1); err != nil {
			return nil, err
		}
		copy(out.Data, x.Data)
		return []*tensor.Tensor{out}, nil
	}
	d, _ := n.IntArg(1, "dim", 0)
	dim, err := NormDim(d, x.Rank())
	if err != nil {
		return nil, shErr(n, "%v", err)
	}
	pos := make([]int64, index.NumElements())
	for j := range pos {
		if pos[j], err = shWrap(n, index.Int64At(int64(j)), x.Shape[dim]); err != nil {
			return nil, err
		}
	}
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		return shFlat(idx, st) + (pos[idx[dim]]-idx[dim])*st[dim]
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalGather(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	index, err := shArg(n, 2, value, tensor.Invalid)
	if err != nil {
		return nil, err
	}
	xs := x.Shape
	if len(xs) == 0 {
		xs = []int64{1}
	}
	d, _ := n.IntArg(1, "dim", 0)
	dim, err := NormDim(d, len(xs))
	if err != nil {
		return nil, shErr(n, "%v", err)
	}
	st := shStrides(xs)
	var bad error
	shForEach(out.Shape, func(flat int64, idx []int64) {
		if bad != nil {
			return
		}
		full := idx
		if len(idx) == 0 {
			full = []int64{0}
		}
		p, err := shIndexedOffset(n, full, dim, index.Int64At(flat), xs, st, index.Shape, x.Shape)
		if err != nil {
			bad = err
			return
		}
		shCopyElem(out, flat, x, p)
	})
	if bad != nil {
		return nil, bad
	}
	return []*tensor.Tensor{out}, nil
}

// shIndexPlan evaluates the index tensors of index.Tensor/index_put: for
// every element of the indexed result shape it yields the input position.
type shIndexPlan struct {
	a      shAdvanced
	idx    []*tensor.Tensor
	bshape []int64
	rshape []int64
}

func shNewIndexPlan(n *Node, x *tensor.Tensor, value func(*Node) *tensor.Tensor) (*shIndexPlan, error) {
	m, err := n.InputMeta(0)
	if err != nil {
		return nil, err
	}
	a, err := shAdvancedIndices(n, m)
	if err != nil {
		return nil, err
	}
	p := &shIndexPlan{a: a}
	var ok bool
	if p.bshape, ok = a.bshape.Static(); !ok {
		return nil, shErr(n, "index shape %s is not static", a.bshape)
	}
	if p.rshape, ok = a.resultShape(StaticShape(x.Shape...)).Static(); !ok {
		return nil, shErr(n, "result shape is not static")
	}
	for _, in := range a.idx {
		t := value(in)
		if t == nil {
			return nil, shErr(n, "index %s is not a constant", in.Name)
		}
		p.idx = append(p.idx, t)
	}
	return p, nil
}

// source returns the flat input position for result multi-index r.
func (p *shIndexPlan) source(n *Node, x []int64, st []int64, r []int64) (int64, error) {
	nb := len(p.bshape)
	var bidx, rest []int64
	if p.a.adjacent {
		p0 := p.a.pos[0]
		bidx = r[p0 : p0+nb]
		rest = append(append([]int64(nil), r[:p0]...), r[p0+nb:]...)
	} else {
		bidx = r[:nb]
		rest = r[nb:]
	}
	full := make([]int64, len(x))
	indexed := map[int]int{}
	for k, d := range p.a.pos {
		indexed[d] = k
	}
	ri := 0
	for d := range x {
		k, ok := indexed[d]
		if !ok {
			full[d] = rest[ri]
			ri++
			continue
		}
		t := p.idx[k]
		// Broadcast bidx onto t's shape (trailing alignment).
		off := nb - t.Rank()
		var q int64
		tst := shStrides(t.Shape)
		for j := 0; j < t.Rank(); j++ {
			if t.Shape[j] != 1 {
				q += bidx[off+j] * tst[j]
			}
		}
		v, err := shWrap(n, t.Int64At(q), x[d])
		if err != nil {
			return 0, err
		}
		full[d] = v
	}
	return shFlat(full, st), nil
}

func shEvalIndex(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	p, err := shNewIndexPlan(n, x, value)
	if err != nil {
		return nil, err
	}
	st := shStrides(x.Shape)
	var bad error
	shForEach(out.Shape, func(flat int64, idx []int64) {
		if bad != nil {
			return
		}
		s, err := p.source(n, x.Shape, st, idx)
		if err != nil {
			bad = err
			return
		}
		shCopyElem(out, flat, x, s)
	})
	if bad != nil {
		return nil, bad
	}
	return []*tensor.Tensor{out}, nil
}

// shCombine applies reduction red ("" replaces) to element i of dst with
// element j of src (same dtype).
func shCombine(dst *tensor.Tensor, i int64, src *tensor.Tensor, j int64, red string) {
	if red == "" {
		shCopyElem(dst, i, src, j)
		return
	}
	dt := dst.DType
	if dt.IsInt() || dt == tensor.Bool {
		a, b := dst.Int64At(i), src.Int64At(j)
		var r int64
		switch red {
		case "sum":
			r = a + b
		case "prod":
			r = a * b
		case "amax":
			r = max(a, b)
		case "amin":
			r = min(a, b)
		}
		if dt == tensor.Bool && r != 0 {
			r = 1
		}
		dst.SetInt64(i, r)
		return
	}
	a, b := dst.Float64At(i), src.Float64At(j)
	var r float64
	switch red {
	case "sum":
		r = a + b
	case "prod":
		r = a * b
	case "amax":
		r = math.Max(a, b)
		if math.IsNaN(a) || math.IsNaN(b) {
			r = math.NaN()
		}
	case "amin":
		r = math.Min(a, b)
		if math.IsNaN(a) || math.IsNaN(b) {
			r = math.NaN()
		}
	}
	dst.SetFloat64(i, r)
}

func shEvalScatter(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	copy(out.Data, x.Data)
	index, err := shArg(n, 2, value, tensor.Invalid)
	if err != nil {
		return nil, err
	}
	var src *tensor.Tensor
	if n.Op == AtenScatterValue {
		v, ok := AsFloat(n.ArgOr(3, "value", nil))
		if !ok {
			return nil, shErr(n, "value is %s, want a number", FormatArg(n.Arg(3)))
		}
		src = tensor.New(out.DType)
		if iv, ok := n.ArgOr(3, "value", nil).(int64); ok {
			src.SetInt64(0, iv)
		} else {
			src.SetFloat64(0, v)
		}
	} else if src, err = shArg(n, 3, value, out.DType); err != nil {
		return nil, err
	}
	red := ""
	if n.Op == AtenScatterReduceTwo {
		v, _ := n.Param("reduce")
		red, _ = v.(string)
	}
	xs := x.Shape
	if len(xs) == 0 {
		xs = []int64{1}
	}
	d, _ := n.IntArg(1, "dim", 0)
	dim, err := NormDim(d, len(xs))
	if err != nil {
		return nil, shErr(n, "%v", err)
	}
	is := index.Shape
	if len(is) == 0 {
		is = []int64{1}
	}
	ss := src.Shape
	if len(ss) == 0 {
		ss = []int64{1}
	}
	st, sst := shStrides(xs), shStrides(ss)
	scalar := src.NumElements() == 1 && n.Op == AtenScatterValue
	var bad error
	shForEach(is, func(flat int64, idx []int64) {
		if bad != nil {
			return
		}
		p, err := shIndexedOffset(n, idx, dim, index.Int64At(flat), xs, st, index.Shape, x.Shape)
		if err != nil {
			bad = err
			return
		}
		var q int64
		if !scalar {
			for k, v := range idx {
				if v >= ss[k] {
					bad = shErr(n, "index shape %v exceeds src shape %v", index.Shape, src.Shape)
					return
				}
			}
			q = shFlat(idx, sst)
		}
		shCombine(out, p, src, q, red)
	})
	if bad != nil {
		return nil, bad
	}
	return []*tensor.Tensor{out}, nil
}

func shEvalIndexPut(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	copy(out.Data, x.Data)
	vals, err := shArg(n, 2, value, out.DType)
	if err != nil {
		return nil, err
	}
	acc, err := n.ParamBool("accumulate")
	if err != nil {
		return nil, err
	}
	red := ""
	if acc {
		red = "sum"
	}
	p, err := shNewIndexPlan(n, x, value)
	if err != nil {
		return nil, err
	}
	st := shStrides(x.Shape)
	vst := shStrides(vals.Shape)
	off := len(p.rshape) - vals.Rank()
	var bad error
	shForEach(p.rshape, func(flat int64, idx []int64) {
		if bad != nil {
			return
		}
		d, err := p.source(n, x.Shape, st, idx)
		if err != nil {
			bad = err
			return
		}
		var q int64
		for j, s := range vals.Shape {
			if s != 1 {
				q += idx[off+j] * vst[j]
			}
		}
		shCombine(out, d, vals, q, red)
	})
	if bad != nil {
		return nil, bad
	}
	return []*tensor.Tensor{out}, nil
}

// shPadSource maps an output coordinate of a padded dim to the input one
// (-1 for constant padding).
func shPadSource(mode string, o, before, size int64) int64 {
	i := o - before
	if i >= 0 && i < size {
		return i
	}
	switch mode {
	case "reflection":
		if size == 1 {
			return 0
		}
		period := 2 * (size - 1)
		i = ((i % period) + period) % period
		if i >= size {
			i = period - i
		}
		return i
	case "replication":
		return min(max(i, 0), size-1)
	}
	return -1
}

func shEvalPad(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	pads, err := shPadAmounts(n, x.Rank())
	if err != nil {
		return nil, err
	}
	mode := "constant"
	switch {
	case n.Op == AtenConstantPadNd:
		fill, err := n.Param("value")
		if err != nil {
			return nil, err
		}
		if iv, ok := fill.(int64); ok && (out.DType.IsInt()) {
			for i := int64(0); i < out.NumElements(); i++ {
				out.SetInt64(i, iv)
			}
		} else if v, ok := AsFloat(fill); ok {
			if v != 0 {
				for i := int64(0); i < out.NumElements(); i++ {
					out.SetFloat64(i, v)
				}
			}
		} else {
			return nil, shErr(n, "value is %s, want a number", FormatArg(fill))
		}
	case strings.HasPrefix(n.Target, "aten.reflection"):
		mode = "reflection"
	default:
		mode = "replication"
	}
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for k, v := range idx {
			s := shPadSource(mode, v, pads[k][0], x.Shape[k])
			if s < 0 {
				return -1
			}
			p += s * st[k]
		}
		return p
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalFull(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	fill := n.ArgOr(1, "fill_value", nil)
	k := out.NumElements()
	if iv, ok := fill.(int64); ok {
		for i := int64(0); i < k; i++ {
			out.SetInt64(i, iv)
		}
		return []*tensor.Tensor{out}, nil
	}
	v, ok := AsFloat(fill)
	if !ok {
		return nil, shErr(n, "fill_value is %s, want a number", FormatArg(fill))
	}
	one := tensor.New(out.DType)
	one.SetFloat64(0, v)
	for i := int64(0); i < k; i++ {
		shCopyElem(out, i, one, 0)
	}
	return []*tensor.Tensor{out}, nil
}

func shEvalArange(n *Node, _ func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	start, _, step, err := shArangeArgs(n)
	if err != nil {
		return nil, err
	}
	if shArangeDeferred(start, step) {
		return nil, nil // bounds not folded yet: decline
	}
	k := out.NumElements()
	si, ok1 := start.(int64)
	sti, ok2 := step.(int64)
	if ok1 && ok2 && (out.DType.IsInt()) {
		for i := int64(0); i < k; i++ {
			out.SetInt64(i, si+i*sti)
		}
		return []*tensor.Tensor{out}, nil
	}
	s, _ := AsFloat(start)
	st, _ := AsFloat(step)
	for i := int64(0); i < k; i++ {
		out.SetFloat64(i, s+float64(i)*st)
	}
	return []*tensor.Tensor{out}, nil
}

func shEvalRepeat(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	st := shStrides(x.Shape)
	off := out.Rank() - x.Rank()
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for i, d := range x.Shape {
			p += (idx[i+off] % d) * st[i]
		}
		return p
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalTri(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	k, err := n.ParamInt("diagonal")
	if err != nil {
		return nil, err
	}
	upper := n.Op == AtenTriu
	r := x.Rank()
	st := shStrides(x.Shape)
	shMap(out, x, func(idx []int64) int64 {
		d := idx[r-1] - idx[r-2]
		if (upper && d >= k) || (!upper && d <= k) {
			return shFlat(idx, st)
		}
		return -1
	})
	return []*tensor.Tensor{out}, nil
}

func shEvalPixel(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	out, err := shOut(n, 0)
	if err != nil {
		return nil, err
	}
	x, err := shArg(n, 0, value, out.DType)
	if err != nil {
		return nil, err
	}
	f, _ := PixelFactor(n)
	k := x.Rank()
	st := shStrides(x.Shape)
	up := n.Op == AtenPixelShuffle
	shMap(out, x, func(idx []int64) int64 {
		var p int64
		for i := 0; i < k-3; i++ {
			p += idx[i] * st[i]
		}
		c, h, w := idx[k-3], idx[k-2], idx[k-1]
		var ic, ih, iw int64
		if up {
			// out[c, h*f+i, w*f+j] = in[c*f*f + i*f + j, h, w]
			ic, ih, iw = c*f*f+(h%f)*f+(w%f), h/f, w/f
		} else {
			// out[c*f*f + i*f + j, h, w] = in[c, h*f+i, w*f+j]
			ff := f * f
			ic, ih, iw = c/ff, h*f+(c%ff)/f, w*f+c%f
		}
		return p + ic*st[k-3] + ih*st[k-2] + iw*st[k-1]
	})
	return []*tensor.Tensor{out}, nil
}

// shEvalShapeOf evaluates _shape_as_tensor, sym_size and numel from the
// input's (static) shape.
func shEvalShapeOf(n *Node, _ func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return nil, err
	}
	dims, ok := x.Shape.Static()
	if !ok {
		return nil, nil
	}
	switch n.Op {
	case Aten_ShapeAsTensor:
		return []*tensor.Tensor{tensor.FromInt64s(append([]int64{}, dims...))}, nil
	case AtenSymSizeInt:
		d, _ := n.IntArg(1, "dim", 0)
		k, err := NormDim(d, len(dims))
		if err != nil {
			return nil, shErr(n, "%v", err)
		}
		return []*tensor.Tensor{shScalarInt64(dims[k])}, nil
	}
	return []*tensor.Tensor{shScalarInt64(tensor.NumElements(dims))}, nil
}

// shScalarInt64 returns a rank-0 int64 tensor holding v.
func shScalarInt64(v int64) *tensor.Tensor {
	t := tensor.New(tensor.Int64)
	t.SetInt64(0, v)
	return t
}

// shIndexedOffset is the flat offset into a tensor of shape xs (strides st)
// that gather and scatter address at position idx: idx itself, except along
// dim, where the index value i (wrapped when negative) is used.
func shIndexedOffset(n *Node, idx []int64, dim int, i int64, xs, st, indexShape, xShape []int64) (int64, error) {
	var p int64
	for k, v := range idx {
		if k == dim {
			w, err := shWrap(n, i, xs[dim])
			if err != nil {
				return 0, err
			}
			v = w
		} else if v >= xs[k] {
			return 0, shErr(n, "index shape %v exceeds input shape %v", indexShape, xShape)
		}
		p += v * st[k]
	}
	return p, nil
}
