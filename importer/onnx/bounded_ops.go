package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Operators that convert differently when an input is bounded (they replace
// the operator's converter; boundRules only annotate its result).

// boundConverter converts node, some of whose inputs (in) are bounded.
type boundConverter func(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error

var boundConverters = map[string]boundConverter{
	"Shape":             boundShape,
	"TopK":              boundTopK,
	"Concat":            boundConcat,
	"ReduceMax":         boundReduce(math.Inf(-1)),
	"ReduceMin":         boundReduce(math.Inf(1)),
	"Split":             boundSplit,
	"ConstantOfShape":   boundSizedConstantOfShape,
	"NonMaxSuppression": boundNMS,
	"NonZero":           boundNonZero,
	"Reshape":           boundReshape,
	"Expand":            boundExpand,
	"ScatterElements":   boundScatterElements,
	"Slice":             boundSlice,
	"Range":             boundRange,
}

// boundedShapes are the values Shape gave for bounded values: the run-time
// shape, with the count along the padded axis. They are kept in
// scope.bounded with shape set.

// shapeEntry returns the bounded-shape entry of v.
func (s *scope) shapeEntry(v *fxgraph.Node) (boundedValue, bool) {
	if s.bounded == nil {
		return boundedValue{}, false
	}
	for _, b := range *s.bounded {
		if b.shape && b.value == v {
			return b, true
		}
	}
	return boundedValue{}, false
}

// withInput runs conv with input i of the node bound to v.
func withInput(c *Ctx, i int, v *fxgraph.Node, conv func() error) error {
	name := c.node.Inputs[i]
	old := c.s.env[name]
	c.s.env[name] = v
	err := conv()
	c.s.env[name] = old
	return err
}

// positions returns an int64 constant 0..size-1 shaped to broadcast along
// axis of a rank-rank tensor.
func positions(c *Ctx, size int64, axis, rank int) *fxgraph.Node {
	shape := make([]int64, rank)
	for i := range shape {
		shape[i] = 1
	}
	shape[axis] = size
	t := tensor.New(tensor.Int64, shape...)
	for i := range size {
		t.SetInt64(i, i)
	}
	return c.Constant("positions", t)
}

// validMask returns a bool tensor broadcasting along b's axis of v: true for
// the valid entries.
func validMask(c *Ctx, v *fxgraph.Node, b boundedValue) (*fxgraph.Node, error) {
	m := Meta(v)
	size := m.Shape[b.axis]
	if !size.IsStatic() {
		return nil, fmt.Errorf("bounded value %s has a symbolic padded axis", m)
	}
	return c.Emit(fxgraph.AtenLtTensor, positions(c, size.Size, b.axis, m.Rank()), b.count)
}

// fillPadding returns v with its padding replaced by fill (clamped to the
// dtype's range for integers).
func fillPadding(c *Ctx, v *fxgraph.Node, b boundedValue, fill float64) (*fxgraph.Node, error) {
	valid, err := validMask(c, v, b)
	if err != nil {
		return nil, err
	}
	dt := Meta(v).DType
	if !dt.IsFloat() {
		switch {
		case math.IsInf(fill, 1):
			fill = float64(math.MaxInt32)
		case math.IsInf(fill, -1):
			fill = float64(math.MinInt32)
		}
	}
	return c.Emit(fxgraph.AtenWhereSelf, valid, v, c.ScalarConst(dt, fill))
}

// boundShape: the run-time shape of a bounded value, its count in place of
// the padded size.
func boundShape(c *Ctx, node *Node, in map[int]boundedValue, _ Converter) error {
	b := in[0]
	m := Meta(c.s.env[node.Inputs[0]])
	dims, ok := m.Shape.Static()
	r := int64(len(dims))
	if !ok || c.Opset >= 15 && (shClamp(c.AttrInt("start", 0), 0, r, r) != 0 || shClamp(c.AttrInt("end", r), 0, r, r) != r) {
		return unsupportedBound(node, b, "only the whole shape of a static padded value")
	}
	cnt, err := c.Emit(fxgraph.AtenView, b.count, ints([]int64{1}))
	if err != nil {
		return err
	}
	var parts []*fxgraph.Node
	if b.axis > 0 {
		parts = append(parts, c.IntsConst(dims[:b.axis]))
	}
	parts = append(parts, cnt)
	if b.axis+1 < len(dims) {
		parts = append(parts, c.IntsConst(dims[b.axis+1:]))
	}
	out := cnt
	if len(parts) > 1 {
		if out, err = c.Emit(fxgraph.AtenCat, nodes(parts), int64(0)); err != nil {
			return err
		}
	}
	c.SetOutput(0, out)
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: b.count, axis: b.axis, op: b.op, shape: true, dims: dims})
	return nil
}

// upperBound returns a static upper bound of the integer values of n, when
// one follows from constants and the counts of bounded values through
// reshapes, min, max and concatenation.
func (s *scope) upperBound(n *fxgraph.Node) (int64, bool) {
	if t := s.g.ConstValue(n); t != nil && t.DType.IsInt() && t.NumElements() > 0 {
		hi := int64(math.MinInt64)
		for _, v := range t.Int64s() {
			hi = max(hi, v)
		}
		return hi, true
	}
	if s.bounded != nil {
		for _, b := range *s.bounded {
			if b.count == n && !b.shape {
				if d := Meta(b.value).Shape[b.axis]; d.IsStatic() {
					return d.Size, true
				}
			}
		}
	}
	arg0, _ := argNode(n, 0)
	switch n.Op {
	case fxgraph.AtenView, fxgraph.AtenReshape, fxgraph.AtenUnsqueeze, fxgraph.AtenSqueezeDim, fxgraph.AtenSqueezeDims,
		fxgraph.AtenSqueeze, fxgraph.AtenSelectInt, fxgraph.AtenIndexSelect, fxgraph.AtenClone, fxgraph.Aten_ToCopy:
		if arg0 != nil {
			return s.upperBound(arg0)
		}
	case fxgraph.AtenMinimum:
		return s.minBound(n.Args[:min(2, len(n.Args))])
	case fxgraph.AtenAmin, fxgraph.AtenMin: // a reduction: any element bounds it
		if arg0 != nil && arg0.Op == fxgraph.AtenCat {
			if list, ok := arg0.Args[0].([]any); ok {
				return s.minBound(list)
			}
		}
		if arg0 != nil {
			return s.upperBound(arg0)
		}
	case fxgraph.AtenCat:
		if list, ok := n.Args[0].([]any); ok {
			return s.maxBound(list)
		}
	}
	return 0, false
}

// argNode returns argument i of n when it is a node.
func argNode(n *fxgraph.Node, i int) (*fxgraph.Node, bool) {
	if i < len(n.Args) {
		a, ok := n.Args[i].(*fxgraph.Node)
		return a, ok
	}
	return nil, false
}

// minBound bounds the minimum of vals: the least bound among those known.
func (s *scope) minBound(vals []any) (int64, bool) {
	lo, found := int64(math.MaxInt64), false
	for _, v := range vals {
		if n, ok := v.(*fxgraph.Node); ok {
			if hi, ok := s.upperBound(n); ok {
				lo, found = min(lo, hi), true
			}
		}
	}
	return lo, found
}

// maxBound bounds the maximum of vals: the greatest bound, if all are known.
func (s *scope) maxBound(vals []any) (int64, bool) {
	hi := int64(math.MinInt64)
	for _, v := range vals {
		n, ok := v.(*fxgraph.Node)
		if !ok {
			return 0, false
		}
		b, ok := s.upperBound(n)
		if !ok {
			return 0, false
		}
		hi = max(hi, b)
	}
	return hi, len(vals) > 0
}

// boundTopK: TopK along a bounded axis sorts the padding last (filled with
// the worst value) and keeps k = min(K, count) entries; a run-time K needs
// a static upper bound (upperBound), the padded size of the result.
func boundTopK(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	b, ok := in[0]
	if !ok || len(in) > 1 {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its input X may be padded")
	}
	x := c.s.env[node.Inputs[0]]
	m := Meta(x)
	axis, err := shNormAxis(c.AttrInt("axis", -1), m.Rank())
	if err != nil {
		return err
	}
	if axis != b.axis {
		if err := conv(c, node); err != nil {
			return err
		}
		c.setBound(0, b.axis, b)
		c.setBound(1, b.axis, b)
		return nil
	}
	largest := c.AttrInt("largest", 1) != 0
	size := m.Shape[axis].Size
	var k *fxgraph.Node
	var kmax int64
	if c.Opset < 10 {
		kmax = c.AttrInt("k", -1)
		k = c.ScalarConst(tensor.Int64, float64(kmax))
	} else {
		kin := c.s.env[node.Inputs[1]]
		hi, ok := c.s.upperBound(kin)
		if !ok {
			return unsupportedBound(node, b, "its K is a run-time value without a static upper bound")
		}
		kmax = hi
		if k, err = c.Emit(fxgraph.AtenView, kin, ints(nil)); err != nil {
			return err
		}
	}
	kmax = min(max(kmax, 0), size)
	fill := math.Inf(-1)
	if !largest {
		fill = math.Inf(1)
	}
	xf, err := fillPadding(c, x, b, fill)
	if err != nil {
		return err
	}
	top, err := c.Emit(fxgraph.AtenTopk, xf, kmax, int64(axis), largest, c.AttrInt("sorted", 1) != 0)
	if err != nil {
		return err
	}
	count, err := c.Emit(fxgraph.AtenMinimum, k, b.count)
	if err != nil {
		return err
	}
	for i := range 2 {
		if !c.HasOutput(i) {
			continue
		}
		out, err := c.Emit(fxgraph.GetItem, top, int64(i))
		if err != nil {
			return err
		}
		c.SetOutput(i, out)
		c.setBound(i, axis, boundedValue{count: count, op: b.op})
	}
	return nil
}

// boundConcat: along the padded axis, the inputs' valid entries are moved
// first, in order (a stable sort of "is padding" over the concatenation),
// and the counts add up; along another axis, every input must be padded
// alike.
func boundConcat(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	if err := conv(c, node); err != nil {
		return err
	}
	out := c.s.env[node.Outputs[0]]
	rank := Meta(out).Rank()
	axis, err := shNormAxis(c.AttrInt("axis", 0), rank)
	if err != nil {
		return err
	}
	_, ref := anyBound(in)
	if ref.axis != axis {
		for i, name := range node.Inputs {
			if b, ok := in[i]; !ok || !sameCount(b.count, ref.count, 0) || b.axis != ref.axis {
				return unsupportedBound(node, ref, fmt.Sprintf("input %q is not padded like the others", name))
			}
		}
		c.setBound(0, ref.axis, ref)
		return nil
	}
	var masks []*fxgraph.Node
	var count *fxgraph.Node
	for i, name := range node.Inputs {
		v := c.s.env[name]
		d := Meta(v).Shape[axis]
		if !d.IsStatic() {
			return unsupportedBound(node, ref, "an input has a symbolic size along the axis")
		}
		b, ok := in[i]
		if !ok {
			b = boundedValue{count: c.ScalarConst(tensor.Int64, float64(d.Size))}
		}
		mask, err := c.Emit(fxgraph.AtenLtTensor, positions(c, d.Size, 0, 1), b.count)
		if err != nil {
			return err
		}
		masks = append(masks, mask)
		if count == nil {
			count = b.count
		} else if count, err = c.Emit(fxgraph.AtenAddTensor, count, b.count); err != nil {
			return err
		}
	}
	mask, err := c.Emit(fxgraph.AtenCat, nodes(masks), int64(0))
	if err != nil {
		return err
	}
	idx, _, err := selectedFirst(c, mask)
	if err != nil {
		return err
	}
	packed, err := c.Emit(fxgraph.AtenIndexSelect, out, int64(axis), idx)
	if err != nil {
		return err
	}
	c.SetOutput(0, packed)
	c.setBound(0, axis, boundedValue{count: count, op: ref.op})
	return nil
}

// boundReduce: a reduction over the padded axis sees the padding filled
// with fill (the identity of max or min); over other axes it keeps the
// bound.
func boundReduce(fill float64) boundConverter {
	return func(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
		b, ok := in[0]
		if !ok || len(in) > 1 {
			_, b := anyBound(in)
			return unsupportedBound(node, b, "only its data may be padded")
		}
		x := c.s.env[node.Inputs[0]]
		rank := Meta(x).Rank()
		var axes []int64
		var err error
		if a := c.Attr("axes"); a != nil {
			axes = a.Ints
		} else if c.HasInput(1) {
			if axes, err = c.ConstInts(1); err != nil {
				return err
			}
		}
		reduced := len(axes) == 0 && c.AttrInt("noop_with_empty_axes", 0) == 0
		removed := 0
		for _, a := range axes {
			ax, err := shNormAxis(a, rank)
			if err != nil {
				return err
			}
			if ax == b.axis {
				reduced = true
			} else if ax < b.axis {
				removed++
			}
		}
		if !reduced {
			if err := conv(c, node); err != nil {
				return err
			}
			if c.AttrInt("keepdims", 1) != 0 {
				removed = 0
			}
			c.setBound(0, b.axis-removed, b)
			return nil
		}
		xf, err := fillPadding(c, x, b, fill)
		if err != nil {
			return err
		}
		return withInput(c, 0, xf, func() error { return conv(c, node) })
	}
}

// boundSplit: splitting another axis keeps the bound on every part.
func boundSplit(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	b, ok := in[0]
	if !ok || len(in) > 1 {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its data may be padded")
	}
	rank := Meta(c.s.env[node.Inputs[0]]).Rank()
	axis, err := shNormAxis(c.AttrInt("axis", 0), rank)
	if err != nil {
		return err
	}
	if axis == b.axis {
		return unsupportedBound(node, b, "it splits the padded axis")
	}
	if err := conv(c, node); err != nil {
		return err
	}
	for j := range node.Outputs {
		c.setBound(j, b.axis, b)
	}
	return nil
}

// ifBounded converts an If with a run-time condition whose branches use
// bounded values: stablehlo.if cannot return values padded differently, so
// both branches are computed (inlined; they have no side effects) and each
// output selected by the condition. An output one branch gives empty along
// an axis and the other bounded along it (torchvision's "if there are no
// boxes, return none") is the bounded one with count 0 when the empty
// branch is taken; outputs of equal static type are selected elementwise,
// counts too when both are bounded alike.
func ifBounded(c *Ctx, cond *fxgraph.Node, branches [2]*Graph) error {
	var outs [2][]*fxgraph.Node
	for i, br := range branches {
		o, err := c.s.inlineBranch(br)
		if err != nil {
			return err
		}
		outs[i] = o
	}
	if len(outs[0]) != len(outs[1]) {
		return fmt.Errorf("If: then_branch has %d outputs, else_branch %d", len(outs[0]), len(outs[1]))
	}
	pred, err := c.Emit(fxgraph.AtenView, cond, ints(nil))
	if err != nil {
		return err
	}
	for j := range outs[0] {
		out, bound, err := mergeIfOutput(c, pred, j, outs[0][j], outs[1][j])
		if err != nil {
			return err
		}
		if !c.HasOutput(j) {
			continue
		}
		if bound != nil {
			// A new node, so that its count is its own.
			if out, err = c.Emit(fxgraph.AtenClone, out); err != nil {
				return err
			}
		}
		c.SetOutput(j, out)
		if bound != nil {
			c.setBound(j, bound.axis, *bound)
		}
	}
	return nil
}

// mergeIfOutput returns output j of an If computed both ways (t, e) and
// selected by pred, and its bound when it is bounded.
func mergeIfOutput(c *Ctx, pred *fxgraph.Node, j int, t, e *fxgraph.Node) (*fxgraph.Node, *boundedValue, error) {
	tb, tok := c.s.boundOf(t)
	eb, eok := c.s.boundOf(e)
	tm, em := Meta(t), Meta(e)
	zero := c.ScalarConst(tensor.Int64, 0)
	selected := func(v *fxgraph.Node, b boundedValue, tc, ec *fxgraph.Node) (*fxgraph.Node, *boundedValue, error) {
		cnt, err := c.Emit(fxgraph.AtenWhereSelf, pred, tc, ec)
		if err != nil {
			return nil, nil, err
		}
		return v, &boundedValue{count: cnt, axis: b.axis, op: b.op}, nil
	}
	switch {
	case eok && !tok && emptyAlong(tm, eb.axis):
		return selected(e, eb, zero, eb.count)
	case tok && !eok && emptyAlong(em, tb.axis):
		return selected(t, tb, tb.count, zero)
	case tm.DType == em.DType && tm.Shape.Equal(em.Shape) && (!tok && !eok || tok && eok && tb.axis == eb.axis):
		out, err := c.Emit(fxgraph.AtenWhereSelf, pred, t, e)
		if err != nil || !tok {
			return out, nil, err
		}
		return selected(out, tb, tb.count, eb.count)
	}
	return nil, nil, Unsupported("If with a run-time condition over data-dependent values whose branches give output %d as %s and %s", j, tm, em)
}

// emptyAlong reports whether m has rank > axis and static size 0 along it.
func emptyAlong(m fxgraph.TensorMeta, axis int) bool {
	return axis < m.Rank() && m.Shape[axis].IsStatic() && m.Shape[axis].Size == 0
}

// boundNMS: NonMaxSuppression of padded boxes [B,N,4] (along N) and scores
// [B,C,N] (along N, padded alike): the padding's scores are -inf, so that
// it is never selected; the selection is bounded as for static inputs.
func boundNMS(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	bs, sok := in[1]
	for i, b := range in {
		switch {
		case i > 1:
			return unsupportedBound(node, b, "only its boxes and scores may be padded")
		case i == 0 && b.axis != 1, i == 1 && b.axis != 2:
			return unsupportedBound(node, b, "boxes and scores must be padded along the boxes")
		case sok && !sameCount(b.count, bs.count, 0):
			return unsupportedBound(node, b, "boxes and scores are padded differently")
		}
	}
	if !sok {
		return unsupportedBound(node, in[0], "padded boxes need padded scores")
	}
	scores := c.s.env[node.Inputs[1]]
	filled, err := fillPadding(c, scores, bs, math.Inf(-1))
	if err != nil {
		return err
	}
	return withInput(c, 1, filled, func() error { return conv(c, node) })
}

// boundScatterElements: padded indices (with their updates, padded alike)
// write nothing: their padding is redirected past the end of the scatter
// axis, which the scatter skips. A padded data keeps its bound (valid
// indices, data-dependent results, address its valid entries).
func boundScatterElements(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	bi, iok := in[1]
	bu, uok := in[2]
	if iok != uok || iok && (bi.axis != bu.axis || !sameCount(bi.count, bu.count, 0)) {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "its indices and updates must be padded alike")
	}
	convert := func() error { return conv(c, node) }
	if iok {
		data := Meta(c.s.env[node.Inputs[0]])
		axis, err := shNormAxis(c.AttrInt("axis", 0), data.Rank())
		if err != nil {
			return err
		}
		if !data.Shape[axis].IsStatic() {
			return unsupportedBound(node, bi, "the scatter axis is symbolic")
		}
		idx := c.s.env[node.Inputs[1]]
		valid, err := validMask(c, idx, bi)
		if err != nil {
			return err
		}
		past, err := c.Emit(fxgraph.AtenWhereSelf, valid, idx, c.ScalarConst(Meta(idx).DType, float64(data.Shape[axis].Size)))
		if err != nil {
			return err
		}
		convert = func() error { return withInput(c, 1, past, func() error { return conv(c, node) }) }
	}
	if err := convert(); err != nil {
		return err
	}
	if b, ok := in[0]; ok {
		c.setBound(0, b.axis, b)
	}
	return nil
}
