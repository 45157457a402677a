package onnx

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Sizes computed from counts (docs/DATA-DEPENDENT.md).
//
// The run-time shape of a bounded value (Shape of it) holds its count, so
// the sizes a model computes from it (Gather, Concat, Mul, Min, ... of that
// shape: torchvision's reshape(boxes.shape), expand_as(scores),
// zeros(scores.shape)) are run-time values, not constants. An operator that
// takes such a size (Reshape, Expand, ConstantOfShape) is converted at the
// padded size, which the size takes with every count at its bound, and its
// result is bounded along the one axis whose size follows a count.

// maxCountEvalNodes bounds the nodes one evaluation with substituted counts
// visits: size computations are small, and an evaluation that reaches the
// data fails.
const maxCountEvalNodes = 4096

// countEval evaluates values computed from counts with every count
// replaced by a size derived from its bound.
type countEval struct {
	s       *scope
	bounds  map[*fxgraph.Node]int64 // count node -> its bound
	size    func(bound int64) int64
	memo    map[*fxgraph.Node][]*tensor.Tensor
	visited int
	used    map[*fxgraph.Node]int64 // the counts the evaluation read, with their bounds
}

// countBounds maps every count of a bounded value to its bound (the
// padded size).
func (s *scope) countBounds() map[*fxgraph.Node]int64 {
	out := map[*fxgraph.Node]int64{}
	if s.bounded == nil {
		return out
	}
	for _, b := range *s.bounded {
		if b.shape {
			continue
		}
		if d := Meta(b.value).Shape[b.axis]; d.IsStatic() {
			if _, ok := out[b.count]; !ok {
				out[b.count] = d.Size
			}
		}
	}
	return out
}

// eval returns n's value, or nil when it depends on something other than
// constants and counts.
func (e *countEval) eval(n *fxgraph.Node) []*tensor.Tensor {
	if v, ok := e.memo[n]; ok {
		return v
	}
	e.memo[n] = nil // a cycle or a failure
	e.visited++
	if e.visited > maxCountEvalNodes {
		return nil
	}
	var out []*tensor.Tensor
	if t := e.s.g.ConstValue(n); t != nil {
		out = []*tensor.Tensor{t}
	} else if bound, ok := e.bounds[n]; ok {
		m := Meta(n)
		dims, _ := m.Shape.Static()
		if tensor.NumElements(dims) != 1 {
			return nil
		}
		t := tensor.New(m.DType, dims...)
		t.SetInt64(0, e.size(bound))
		out = []*tensor.Tensor{t}
		if e.used != nil {
			e.used[n] = bound
		}
	} else {
		out = e.call(n)
	}
	e.memo[n] = out
	return out
}

// call evaluates a call_function node from its inputs' values.
func (e *countEval) call(n *fxgraph.Node) []*tensor.Tensor {
	if n.Opcode != fxgraph.CallFunction {
		return nil
	}
	if n.Op == fxgraph.GetItem {
		src, ok := argNode(n, 0)
		i, iok := n.Args[1].(int64)
		if !ok || !iok {
			return nil
		}
		vals := e.eval(src)
		if i < 0 || int(i) >= len(vals) {
			return nil
		}
		return vals[i : i+1]
	}
	if n.Op == nil || n.Op.Eval == nil || n.Op.ShapeOnly {
		return nil
	}
	for _, in := range n.InputNodes() {
		if v := e.eval(in); len(v) != 1 {
			return nil
		}
	}
	outs, err := n.Op.Eval(n, func(m *fxgraph.Node) *tensor.Tensor {
		if v := e.memo[m]; len(v) == 1 {
			return v[0]
		}
		return nil
	})
	if err != nil {
		return nil
	}
	return outs
}

// maxInvariantBound is the largest bound countInvariant tries every count
// up to.
const maxInvariantBound = 4096

// countInvariant returns the value of n when it is computed from constants
// and a single count and is the same for every value of that count, 0 to
// its bound (tried one by one): a static size read from the run-time shape
// of a bounded value (torchvision's arange(class_logits.shape[-1]) after
// the boxes' head). nil otherwise.
func (s *scope) countInvariant(n *fxgraph.Node) *tensor.Tensor {
	if s.bounded == nil || len(*s.bounded) == 0 {
		return nil
	}
	bounds := s.countBounds()
	first := &countEval{s: s, bounds: bounds, size: func(b int64) int64 { return b },
		memo: map[*fxgraph.Node][]*tensor.Tensor{}, used: map[*fxgraph.Node]int64{}}
	v := first.eval(n)
	if len(v) != 1 || len(first.used) != 1 {
		return nil
	}
	var bound int64
	for _, b := range first.used {
		bound = b
	}
	if bound > maxInvariantBound {
		return nil
	}
	for k := range bound {
		e := &countEval{s: s, bounds: bounds, size: func(int64) int64 { return k }, memo: map[*fxgraph.Node][]*tensor.Tensor{}}
		w := e.eval(n)
		if len(w) != 1 || w[0].DType != v[0].DType || !slices.Equal(w[0].Shape, v[0].Shape) || !bytes.Equal(w[0].Data, v[0].Data) {
			return nil
		}
	}
	return v[0]
}

// countSizes is an integer value computed from counts: its value with
// every count at its bound (the padded size), and which of its elements
// follow a count.
type countSizes struct {
	padded  []int64
	varying []bool
}

// sizesFromCounts evaluates the 1-D (or scalar) integer value n, computed
// from the counts of bounded values, with every count at its bound, at 0
// and at 1; the elements that change follow a count. ok is false when n
// depends on anything else (or on no count at all).
func (s *scope) sizesFromCounts(n *fxgraph.Node) (countSizes, bool) {
	if s.bounded == nil || len(*s.bounded) == 0 || s.g.ConstValue(n) != nil || !Meta(n).DType.IsInt() || Meta(n).Rank() > 1 {
		return countSizes{}, false
	}
	bounds := s.countBounds()
	var vals [3][]int64
	for k, size := range []func(int64) int64{
		func(b int64) int64 { return b },
		func(int64) int64 { return 0 },
		func(int64) int64 { return 1 },
	} {
		e := &countEval{s: s, bounds: bounds, size: size, memo: map[*fxgraph.Node][]*tensor.Tensor{}}
		v := e.eval(n)
		if len(v) != 1 {
			return countSizes{}, false
		}
		vals[k] = v[0].Int64s()
	}
	cs := countSizes{padded: vals[0], varying: make([]bool, len(vals[0]))}
	any := false
	for i := range cs.padded {
		cs.varying[i] = vals[1][i] != cs.padded[i] || vals[2][i] != cs.padded[i]
		any = any || cs.varying[i]
	}
	return cs, any
}

// countInput returns the sizes of input i when it is computed from counts.
func (c *Ctx) countInput(i int) (countSizes, bool) {
	if !c.HasInput(i) {
		return countSizes{}, false
	}
	v, ok := c.s.env[c.node.Inputs[i]]
	if !ok {
		return countSizes{}, false
	}
	return c.s.sizesFromCounts(v)
}

// takesCountSizes reports whether node is an operator with a size operand
// computed from counts (boundSizeInputs).
func (s *scope) takesCountSizes(node *Node) bool {
	for _, i := range boundSizeInputs[node.OpType] {
		if i >= len(node.Inputs) || node.Inputs[i] == "" {
			continue
		}
		if v, ok := s.env[node.Inputs[i]]; ok {
			if _, ok := s.sizesFromCounts(v); ok {
				return true
			}
		}
	}
	return false
}

// boundSizeInputs are the operators (with their size operands) converted
// at padded sizes when such an operand is computed from counts.
var boundSizeInputs = map[string][]int{"Reshape": {1}, "Expand": {1}, "ConstantOfShape": {0}, "Slice": {1, 2}, "Range": {1}}

// oneVarying returns the index of the single element of cs that follows a
// count; ok is false for none or several.
func (cs countSizes) oneVarying() (int, bool) {
	j := -1
	for i, v := range cs.varying {
		if !v {
			continue
		}
		if j >= 0 {
			return -1, false
		}
		j = i
	}
	return j, j >= 0
}

// sizeCount returns the run-time value of element j of the 1-D size
// value v as an int64 scalar count: the count node itself when the element
// is one (through the views, casts and concatenations of Shape), so that
// values sized by it compare equal to the bounded value's (sameCount).
func (c *Ctx) sizeCount(v *fxgraph.Node, j int) (*fxgraph.Node, error) {
	if n := c.s.countBehind(v, int64(j), 0); n != nil {
		return n, nil
	}
	if Meta(v).Rank() == 0 {
		return ewCastTo(c, v, tensor.Int64)
	}
	el, err := c.Emit(fxgraph.AtenSelectInt, v, int64(0), int64(j))
	if err != nil {
		return nil, err
	}
	return ewCastTo(c, el, tensor.Int64)
}

// countBehind follows element j of v back through views, int casts,
// concatenations, constant selections and wheres whose condition does not
// follow a count to a count node, or returns nil.
func (s *scope) countBehind(v *fxgraph.Node, j int64, depth int) *fxgraph.Node {
	if depth > 64 || v == nil || j < 0 {
		return nil
	}
	if _, ok := s.countBounds()[v]; ok && Meta(v).DType == tensor.Int64 && j == 0 {
		return v
	}
	arg0, _ := argNode(v, 0)
	switch v.Op {
	case fxgraph.AtenView, fxgraph.AtenReshape, fxgraph.AtenUnsqueeze, fxgraph.AtenSqueezeDim, fxgraph.AtenSqueezeDims,
		fxgraph.AtenSqueeze, fxgraph.AtenClone:
		return s.countBehind(arg0, j, depth+1)
	case fxgraph.Aten_ToCopy:
		if Meta(v).DType.IsInt() {
			return s.countBehind(arg0, j, depth+1)
		}
	case fxgraph.AtenCat:
		return s.countBehindCat(v, j, depth)
	case fxgraph.AtenSelectInt, fxgraph.AtenIndexSelect, fxgraph.AtenIndexTensor:
		return s.countBehind(arg0, selectedIndex(v, j), depth+1)
	case fxgraph.AtenWhereSelf:
		return s.countBehindWhere(v, j, depth)
	}
	return nil
}

// countBehindCat follows element j of a 1-D concatenation into its piece.
func (s *scope) countBehindCat(v *fxgraph.Node, j int64, depth int) *fxgraph.Node {
	list, ok := v.Args[0].([]any)
	if !ok || Meta(v).Rank() != 1 {
		return nil
	}
	for _, a := range list {
		p, ok := a.(*fxgraph.Node)
		if !ok || Meta(p).Rank() != 1 || !Meta(p).Shape[0].IsStatic() {
			return nil
		}
		if size := Meta(p).Shape[0].Size; j >= size {
			j -= size
			continue
		}
		return s.countBehind(p, j, depth+1)
	}
	return nil
}

// countBehindWhere follows element j of where(cond, x, y) into the operand
// cond selects there, when cond does not follow a count (torch.onnx's
// expand sizes: where(size == -1, 1, size)).
func (s *scope) countBehindWhere(v *fxgraph.Node, j int64, depth int) *fxgraph.Node {
	cond, _ := argNode(v, 0)
	if cond == nil || Meta(cond).Rank() > 1 {
		return nil
	}
	at := func(n *fxgraph.Node) int64 {
		if Meta(n).Rank() == 0 || Meta(n).Shape[0].IsStatic() && Meta(n).Shape[0].Size == 1 {
			return 0
		}
		return j
	}
	var pick *bool
	if t := s.g.ConstValue(cond); t != nil {
		b := t.Int64At(at(cond)) != 0
		pick = &b
	} else if cs, ok := s.sizesFromCounts(cond); ok && !cs.varying[at(cond)] {
		b := cs.padded[at(cond)] != 0
		pick = &b
	}
	if pick == nil {
		return nil
	}
	src, _ := argNode(v, 2)
	if *pick {
		src, _ = argNode(v, 1)
	}
	if src == nil {
		return nil
	}
	return s.countBehind(src, at(src), depth+1)
}

// selectedIndex returns the index of arg 0 that element j of a select or
// index_select along axis 0 with a constant index reads, or -1.
func selectedIndex(v *fxgraph.Node, j int64) int64 {
	if v.Op == fxgraph.AtenIndexTensor {
		list, ok := v.Args[1].([]any)
		if !ok || len(list) != 1 {
			return -1
		}
		idx, ok := list[0].(*fxgraph.Node)
		if t := v.Graph().ConstValue(idx); ok && t != nil && j < t.NumElements() {
			return t.Int64s()[j]
		}
		return -1
	}
	if dim, ok := v.Args[1].(int64); !ok || dim != 0 {
		return -1
	}
	switch idx := v.Args[2].(type) {
	case int64:
		return idx
	case *fxgraph.Node:
		t := v.Graph().ConstValue(idx)
		if t == nil || j >= int64(t.NumElements()) {
			return -1
		}
		return t.Int64s()[j]
	}
	return -1
}

// reshapeAxis returns the axis of a reshape's output (padded dims out) that
// holds the input's bounded axis a (padded dims in), and the factor its
// count grows by: the same axis when the sizes before it keep their
// product (factor 1), or the axis merged with the whole sizes after it
// (factor their product). ok is false when the valid entries would not
// stay first along one axis.
func reshapeAxis(in, out []int64, a int) (axis int, factor int64, ok bool) {
	pre := int64(1)
	for _, d := range in[:a] {
		pre *= d
	}
	p := int64(1)
	for j, d := range out {
		if p == pre {
			switch {
			case d == in[a]:
				return j, 1, true
			case in[a] > 0 && d%in[a] == 0:
				// Merged with the sizes after a, whole ones only.
				f, k := d/in[a], a+1
				for rest := f; rest > 1 && k < len(in); k++ {
					if rest%in[k] != 0 {
						return 0, 0, false
					}
					rest /= in[k]
				}
				return j, f, true
			}
		}
		if p > pre || d == 0 {
			break
		}
		p *= d
	}
	return 0, 0, false
}

// boundReshape converts a Reshape of a bounded value, or to a size computed
// from counts, at the padded size; the result is bounded along the axis
// that keeps the valid entries first.
func boundReshape(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	if _, ok := in[1]; ok {
		return unsupportedBound(node, in[1], "only its data may be padded")
	}
	cs, sized := c.countInput(1)
	convert := func() error { return conv(c, node) }
	if sized {
		convert = func() error {
			return withInput(c, 1, c.IntsConst(cs.padded), func() error { return conv(c, node) })
		}
	}
	if err := convert(); err != nil {
		return err
	}
	return boundReshaped(c, node, in, cs, sized)
}

// boundReshaped sets the bound of a reshaped value (Reshape, Flatten).
func boundReshaped(c *Ctx, node *Node, in map[int]boundedValue, cs countSizes, sized bool) error {
	b, bok := in[0]
	if !bok {
		return Unsupported("%s of a value of static size to sizes computed from data-dependent counts", node.OpType)
	}
	out := c.s.env[node.Outputs[0]]
	od, ok := Meta(out).Shape.Static()
	if !ok {
		return unsupportedBound(node, b, fmt.Sprintf("its result %s is not static", Meta(out)))
	}
	id, _ := Meta(c.s.env[node.Inputs[0]]).Shape.Static()
	axis, factor, ok := reshapeAxis(id, od, b.axis)
	if !ok {
		return unsupportedBound(node, b, fmt.Sprintf("reshaping %v (padded along %d) to %v would interleave the padding", id, b.axis, od))
	}
	if sized {
		if j, one := cs.oneVarying(); !one || j != axis {
			return unsupportedBound(node, b, fmt.Sprintf("the size %v does not follow the count along axis %d alone", cs.padded, axis))
		}
	}
	count := b.count
	if factor != 1 {
		var err error
		if count, err = c.Emit(fxgraph.AtenMulTensor, b.count, c.ScalarConst(tensor.Int64, float64(factor))); err != nil {
			return err
		}
	}
	c.setBound(0, axis, boundedValue{count: count, op: b.op})
	return nil
}

// boundFlatten: Flatten of a value bounded along an axis before Flatten's
// axis whose leading sizes are 1 (or along the first axis after it).
func boundFlatten(c *Ctx, node *Node, in map[int]boundedValue) error {
	return boundReshaped(c, node, in, countSizes{}, false)
}

// boundExpand converts an Expand of a bounded value, or to a size computed
// from counts, at the padded size: the result is bounded along the input's
// bounded axis or the one whose size follows a count (the same one when
// both).
func boundExpand(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	if b, ok := in[1]; ok {
		return unsupportedBound(node, b, "only its data may be padded")
	}
	cs, sized := c.countInput(1)
	if sized {
		if err := withInput(c, 1, c.IntsConst(cs.padded), func() error { return conv(c, node) }); err != nil {
			return err
		}
	} else if err := conv(c, node); err != nil {
		return err
	}
	x := Meta(c.s.env[node.Inputs[0]])
	om := Meta(c.s.env[node.Outputs[0]])
	b, bok := in[0]
	if bok {
		shift := om.Rank() - x.Rank()
		if d := om.Shape[b.axis+shift]; !d.IsStatic() || d != x.Shape[b.axis] {
			return unsupportedBound(node, b, "it expands the padded axis")
		}
		b.axis += shift
	}
	if sized {
		j, one := cs.oneVarying()
		if !one {
			return Unsupported("Expand to %v: more than one size follows a data-dependent count", cs.padded)
		}
		shape, _ := c.Input(1)
		count, err := c.sizeCount(shape, j)
		if err != nil {
			return err
		}
		j += om.Rank() - len(cs.padded)
		switch {
		case bok && b.axis != j:
			return unsupportedBound(node, b, fmt.Sprintf("the value is padded along %d, the size follows a count along %d", b.axis, j))
		case !bok:
			b = boundedValue{count: count, axis: j, op: c.s.countOrigin(count)}
		}
	}
	c.setBound(0, b.axis, b)
	return nil
}

// countOrigin names the data-dependent op behind a count.
func (s *scope) countOrigin(count *fxgraph.Node) string {
	for _, b := range *s.bounded {
		if b.count == count {
			return b.op
		}
	}
	return "a data-dependent operator"
}

// boundSizedConstantOfShape: ConstantOfShape of a size computed from
// counts (the run-time shape of a bounded value, or sizes derived from it):
// a tensor of the padded size, bounded along the axis that follows a count.
func boundSizedConstantOfShape(c *Ctx, node *Node, _ map[int]boundedValue, conv Converter) error {
	cs, ok := c.countInput(0)
	if !ok {
		return conv(c, node)
	}
	j, one := cs.oneVarying()
	if !one {
		return Unsupported("ConstantOfShape of %v: more than one size follows a data-dependent count", cs.padded)
	}
	if err := withInput(c, 0, c.IntsConst(cs.padded), func() error { return conv(c, node) }); err != nil {
		return err
	}
	shape, _ := c.Input(0)
	count, err := c.sizeCount(shape, j)
	if err != nil {
		return err
	}
	c.setBound(0, j, boundedValue{count: count, op: c.s.countOrigin(count)})
	return nil
}

// boundNonZero: NonZero of a bounded value sees its padding as zeros; the
// result is a new bounded value (the padded input's indices, the valid ones
// first). Two NonZeros of the same bounded value share one.
func boundNonZero(c *Ctx, node *Node, in map[int]boundedValue, _ Converter) error {
	x := c.s.env[node.Inputs[0]]
	for _, b := range *c.s.bounded {
		if b.op == "NonZero" && b.src == x && b.value.Graph() == c.Graph() {
			c.SetOutput(0, b.value)
			return nil
		}
	}
	xf, err := fillPadding(c, x, in[0], 0)
	if err != nil {
		return err
	}
	if err := withInput(c, 0, xf, func() error { return shNonZero(c, node) }); err != nil {
		return err
	}
	b := &(*c.s.bounded)[len(*c.s.bounded)-1]
	if b.op != "NonZero" || b.src != xf {
		return fmt.Errorf("NonZero of a bounded value: no result recorded")
	}
	b.src = x
	return nil
}

// sliceArgs are a Slice's starts, ends, axes and steps (opset 10 on,
// inputs 1-4; attributes before), each start or end that follows a count
// at its padded value, and its run-time value (ends only).
type sliceArgs struct {
	starts, ends, axes, steps []int64
	endVaries, startVaries    []bool
	endNode                   *fxgraph.Node
}

func readSliceArgs(c *Ctx, rank int) (sliceArgs, error) {
	var a sliceArgs
	if c.Opset < 10 {
		a.starts, a.ends, a.axes = c.AttrInts("starts", nil), c.AttrInts("ends", nil), c.AttrInts("axes", nil)
	} else {
		var err error
		for i, dst := range []*[]int64{&a.starts, &a.ends} {
			vary := &a.startVaries
			if i == 1 {
				vary = &a.endVaries
			}
			if cs, ok := c.countInput(1 + i); ok {
				*dst, *vary = cs.padded, cs.varying
				if i == 1 {
					a.endNode, _ = c.Input(2)
				}
			} else if *dst, err = c.ConstInts(1 + i); err != nil {
				return a, err
			}
		}
		if c.HasInput(3) {
			if a.axes, err = c.ConstInts(3); err != nil {
				return a, err
			}
		}
		if c.HasInput(4) {
			if a.steps, err = c.ConstInts(4); err != nil {
				return a, err
			}
		}
	}
	for i := range a.starts {
		ax := int64(i)
		if a.axes != nil {
			ax = a.axes[i]
		}
		n, err := shNormAxis(ax, rank)
		if err != nil {
			return a, err
		}
		if a.axes == nil {
			a.axes = make([]int64, len(a.starts))
			for k := range a.axes {
				a.axes[k] = int64(k)
			}
		}
		a.axes[i] = int64(n)
	}
	return a, nil
}

func (a sliceArgs) step(i int) int64 {
	if a.steps == nil {
		return 1
	}
	return a.steps[i]
}

// boundSlice converts a Slice of a bounded value, or to ends computed from
// counts, at the padded sizes. Slicing another axis than the padded one
// keeps the bound; the padded axis may be sliced from 0 with step 1 to an
// end >= 0: the count becomes min(count, end). A static axis sliced from 0
// to an end that follows a count becomes the bounded axis, counted by that
// end (clamped to the size).
func boundSlice(c *Ctx, node *Node, in map[int]boundedValue, conv Converter) error {
	b, bok := in[0]
	if len(in) > 1 || len(in) == 1 && !bok {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its data may be padded")
	}
	x := c.s.env[node.Inputs[0]]
	xm := Meta(x)
	a, err := readSliceArgs(c, xm.Rank())
	if err != nil {
		return err
	}
	convert := func() error { return conv(c, node) }
	if a.endVaries != nil || a.startVaries != nil {
		padded := []*fxgraph.Node{c.IntsConst(a.starts), c.IntsConst(a.ends)}
		convert = func() error {
			return withInput(c, 1, padded[0], func() error {
				return withInput(c, 2, padded[1], func() error { return conv(c, node) })
			})
		}
	}
	if err := convert(); err != nil {
		return err
	}
	count, axis := (*fxgraph.Node)(nil), -1
	if bok {
		count, axis = b.count, b.axis
	}
	if count, axis, err = slicedCount(c, node, a, xm, sliceBound{count: count, axis: axis, b: b, bounded: bok}); err != nil {
		return err
	}
	if axis < 0 {
		return nil
	}
	op := "a data-dependent operator"
	if bok {
		op = b.op
	} else if count != nil {
		op = c.s.countOrigin(count)
	}
	c.setBound(0, axis, boundedValue{count: count, op: op})
	return nil
}

// sliceBound is the bound a Slice's result has so far: count along axis
// (-1: none), and the input's bound b when bounded.
type sliceBound struct {
	count   *fxgraph.Node
	axis    int
	b       boundedValue
	bounded bool
}

// slicedCount applies each slice of a to the bound sb of the input (of
// meta xm): the padded axis sliced to an end, or a static axis sliced to an
// end that follows a count. It returns the result's count and axis.
func slicedCount(c *Ctx, node *Node, a sliceArgs, xm fxgraph.TensorMeta, sb sliceBound) (*fxgraph.Node, int, error) {
	count, axis := sb.count, sb.axis
	for i := range a.starts {
		ax := int(a.axes[i])
		varies := a.endVaries != nil && a.endVaries[i]
		if a.startVaries != nil && a.startVaries[i] {
			return nil, 0, Unsupported("Slice from a start computed from a data-dependent count")
		}
		if ax != axis && !varies {
			continue
		}
		if a.starts[i] != 0 || a.step(i) != 1 || a.ends[i] < 0 {
			why := fmt.Sprintf("it slices the padded axis %d:%d:%d (supported: from 0, step 1, to an end >= 0)", a.starts[i], a.ends[i], a.step(i))
			if !sb.bounded {
				return nil, 0, Unsupported("Slice to an end computed from a data-dependent count: %s", why)
			}
			return nil, 0, unsupportedBound(node, sb.b, why)
		}
		if ax != axis && axis >= 0 {
			return nil, 0, unsupportedBound(node, sb.b, fmt.Sprintf("it slices axis %d to a data-dependent end, the value is padded along %d", ax, axis))
		}
		if d := xm.Shape[ax]; !varies && d.IsStatic() && a.ends[i] >= d.Size {
			continue // the whole axis: the count stays the same node (sameCount)
		}
		end, err := sliceEnd(c, a, i, xm.Shape[ax])
		if err != nil {
			return nil, 0, err
		}
		switch {
		case count == nil:
			count, axis = end, ax
		case count != end:
			if count, err = c.Emit(fxgraph.AtenMinimum, count, end); err != nil {
				return nil, 0, err
			}
		}
	}
	return count, axis, nil
}

// sliceEnd returns the run-time end of slice i (along an axis of size
// size) as an int64 scalar: the constant, or the value that follows a
// count clamped to [0, size].
func sliceEnd(c *Ctx, a sliceArgs, i int, size fxgraph.Dim) (*fxgraph.Node, error) {
	if a.endVaries == nil || !a.endVaries[i] {
		if size.IsStatic() && a.ends[i] >= size.Size {
			return c.ScalarConst(tensor.Int64, float64(size.Size)), nil
		}
		return c.ScalarConst(tensor.Int64, float64(a.ends[i])), nil
	}
	end, err := c.sizeCount(a.endNode, i)
	if err != nil {
		return nil, err
	}
	if bound, ok := c.s.countBounds()[end]; ok && size.IsStatic() && bound <= size.Size {
		return end, nil // a count: never negative
	}
	if !size.IsStatic() {
		return nil, Unsupported("Slice of a symbolic axis to a data-dependent end")
	}
	if end, err = c.Emit(fxgraph.AtenMaximum, end, c.ScalarConst(tensor.Int64, 0)); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenMinimum, end, c.ScalarConst(tensor.Int64, float64(size.Size)))
}

// boundRange: Range from 0 by 1 to a limit that follows a count
// (torchvision's arange(num_masks)): the positions up to the padded limit,
// bounded along 0 and counted by the limit.
func boundRange(c *Ctx, node *Node, _ map[int]boundedValue, conv Converter) error {
	cs, ok := c.countInput(1)
	if !ok {
		return conv(c, node)
	}
	start, err := c.ConstInts(0)
	if err != nil {
		return err
	}
	delta, err := c.ConstInts(2)
	if err != nil {
		return err
	}
	if len(start) != 1 || len(delta) != 1 || start[0] != 0 || delta[0] != 1 {
		return Unsupported("Range to a limit computed from a data-dependent count: only from 0 by 1 (got %v by %v)", start, delta)
	}
	if err := withInput(c, 1, c.ScalarConst(Meta(c.s.env[node.Inputs[1]]).DType, float64(cs.padded[0])), func() error { return conv(c, node) }); err != nil {
		return err
	}
	limit, _ := c.Input(1)
	count, err := c.sizeCount(limit, 0)
	if err != nil {
		return err
	}
	if _, isCount := c.s.countBounds()[count]; !isCount {
		if count, err = c.Emit(fxgraph.AtenMaximum, count, c.ScalarConst(tensor.Int64, 0)); err != nil {
			return err
		}
	}
	c.setBound(0, 0, boundedValue{count: count, op: c.s.countOrigin(count)})
	return nil
}
