package onnx

import (
	"fmt"
	"slices"

	"github.com/xserve/xserve/fxgraph"
)

// Values computed from a bounded value (docs/DATA-DEPENDENT.md).
//
// A bounded value (NonZero, Compress, Unique, NonMaxSuppression) is a static
// tensor padded along one axis, with an int64 scalar count of the valid
// entries there. An operator that consumes one runs on the padded tensor as
// on any other; boundRules says, per ONNX operator, which of its outputs are
// bounded in turn, along which axis and with which count. An operator with
// no rule, or whose rule does not accept the way it uses the value, is an
// unsupported-operator error naming it: it would see the padding.

// boundRule records the bounds of node's outputs, once its converter has
// run; in maps the node's bounded inputs (by input index) to their bounds.
type boundRule func(c *Ctx, node *Node, in map[int]boundedValue) error

// boundRules are the operators that accept bounded inputs.
var boundRules = map[string]boundRule{}

func init() {
	for _, op := range []string{
		"Identity", "Cast", "CastLike", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid",
		"Relu", "Tanh", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "Clip", "HardSigmoid",
		"LeakyRelu", "Elu", "Selu", "Gelu", "Softplus", "HardSwish", "Erf", "Sin", "Cos",
		"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Sum", "Mean",
		"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Where",
	} {
		boundRules[op] = boundElementwise
	}
	boundRules["Transpose"] = boundTranspose
	boundRules["Gather"] = boundGather
	boundRules["GatherND"] = boundGatherND
	boundRules["Unsqueeze"] = boundUnsqueeze
	boundRules["Squeeze"] = boundSqueeze
	boundRules["Flatten"] = boundFlatten
	boundRules["RoiAlign"] = boundRoiAlign
	boundRules["Pad"] = boundPad
	for _, op := range []string{"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
		"BatchNormalization", "InstanceNormalization"} {
		boundRules[op] = boundBatchOp
	}
	boundRules["Gemm"] = boundGemm
	boundRules["MatMul"] = boundMatMul
	boundRules["Softmax"] = boundAlongAxis(-1)
	boundRules["LogSoftmax"] = boundAlongAxis(-1)
}

// boundOf returns the bound of v when v is a bounded value.
func (s *scope) boundOf(v *fxgraph.Node) (boundedValue, bool) {
	if s.bounded == nil {
		return boundedValue{}, false
	}
	for _, b := range *s.bounded {
		if b.value == v && !b.shape {
			return b, true
		}
	}
	return boundedValue{}, false
}

// boundedInputs returns node's inputs that are bounded values, by index.
func (s *scope) boundedInputs(node *Node) map[int]boundedValue {
	if s.bounded == nil || len(*s.bounded) == 0 {
		return nil
	}
	var in map[int]boundedValue
	for i, name := range node.Inputs {
		v, ok := s.env[name]
		if name == "" || !ok {
			continue
		}
		if b, ok := s.boundOf(v); ok {
			if in == nil {
				in = map[int]boundedValue{}
			}
			in[i] = b
		}
	}
	return in
}

// setBound records output i of the node (when it is produced) as bounded
// along axis with the count and origin of b.
func (c *Ctx) setBound(i, axis int, b boundedValue) {
	if !c.HasOutput(i) {
		return
	}
	v, ok := c.s.env[c.node.Outputs[i]]
	if !ok {
		return
	}
	if _, done := c.s.boundOf(v); done {
		return // the converter returned a bounded input as is
	}
	*c.s.bounded = append(*c.s.bounded, boundedValue{value: v, count: b.count, axis: axis, op: b.op})
}

// sameCount reports whether two count nodes compute the same value: the
// same node, or the same operation on the same counts and constants
// (Concat builds one sum per concatenation).
func sameCount(a, b *fxgraph.Node, depth int) bool {
	if a == b {
		return true
	}
	if depth > 4096 || a == nil || b == nil || a.Op != b.Op || a.Target != b.Target || len(a.Args) != len(b.Args) || a.Opcode != fxgraph.CallFunction {
		return false
	}
	ca, cb := a.Graph().ConstValue(a), b.Graph().ConstValue(b)
	if ca != nil || cb != nil {
		return ca != nil && cb != nil && ca.DType == cb.DType && slices.Equal(ca.Shape, cb.Shape) && slices.Equal(ca.Data, cb.Data)
	}
	for i := range a.Args {
		na, aok := a.Args[i].(*fxgraph.Node)
		nb, bok := b.Args[i].(*fxgraph.Node)
		switch {
		case aok != bok:
			return false
		case aok:
			if !sameCount(na, nb, depth+1) {
				return false
			}
		case fmt.Sprint(a.Args[i]) != fmt.Sprint(b.Args[i]):
			return false
		}
	}
	return true
}

// unsupportedBound is the error for a use of a bounded value xserve cannot
// follow.
func unsupportedBound(node *Node, b boundedValue, why string) error {
	return Unsupported("%s consumes the data-dependent result of %s (padded, with a count): %s", node.OpType, b.op, why)
}

// anyBound returns one of in's bounds (the lowest input index).
func anyBound(in map[int]boundedValue) (int, boundedValue) {
	best := -1
	for i := range in {
		if best < 0 || i < best {
			best = i
		}
	}
	return best, in[best]
}

// boundElementwise: outputs broadcast from the inputs are bounded along the
// bounded inputs' axis (right-aligned). Every bounded input must share one
// count and axis; every other input must have size 1 there (or not reach
// it), since a full-size operand would pair valid entries with padding.
func boundElementwise(c *Ctx, node *Node, in map[int]boundedValue) error {
	out, ok := c.s.env[node.Outputs[0]]
	if !ok {
		return nil
	}
	orank := Meta(out).Rank()
	axis := -1
	_, ref := anyBound(in)
	for i, b := range in {
		v := c.s.env[node.Inputs[i]]
		ax := b.axis + orank - Meta(v).Rank()
		if axis >= 0 && ax != axis || !sameCount(b.count, ref.count, 0) {
			return unsupportedBound(node, b, "its operands are padded differently (two data-dependent sizes)")
		}
		axis = ax
	}
	for i, name := range node.Inputs {
		if _, ok := in[i]; ok || name == "" {
			continue
		}
		v, ok := c.s.env[name]
		if !ok {
			continue
		}
		m := Meta(v)
		d := axis - (orank - m.Rank())
		if d >= 0 && !(m.Shape[d].IsStatic() && m.Shape[d].Size == 1) {
			return unsupportedBound(node, ref, fmt.Sprintf("operand %d has size %s along the data-dependent axis (only 1 broadcasts)", i, m.Shape[d]))
		}
	}
	for j := range node.Outputs {
		c.setBound(j, axis, ref)
	}
	return nil
}

func boundTranspose(c *Ctx, node *Node, in map[int]boundedValue) error {
	b := in[0]
	rank := Meta(c.s.env[node.Inputs[0]]).Rank()
	perm := c.AttrInts("perm", nil)
	if perm == nil {
		for i := rank - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	j := slices.Index(perm, int64(b.axis))
	if j < 0 {
		return unsupportedBound(node, b, fmt.Sprintf("perm %v", perm))
	}
	c.setBound(0, j, b)
	return nil
}

// boundGather: indices bounded along k (data not, or padded along the
// gathered axis): the output is bounded along axis+k. Data bounded along a, not along the gathered axis: bounded
// along a (shifted by the indices' rank when after it).
func boundGather(c *Ctx, node *Node, in map[int]boundedValue) error {
	data := Meta(c.s.env[node.Inputs[0]])
	irank := Meta(c.s.env[node.Inputs[1]]).Rank()
	axis, err := shNormAxis(c.AttrInt("axis", 0), data.Rank())
	if err != nil {
		return err
	}
	bd, dataB := in[0]
	bi, idxB := in[1]
	switch {
	case dataB && idxB && bd.axis != axis:
		return unsupportedBound(node, bd, "the data is padded along another axis than the one gathered by padded indices")
	case idxB:
		// Padded data gathered along its padded axis by padded indices: the
		// valid indices (data-dependent results: NonZero, TopK, NMS, never
		// negative) address valid entries.
		c.setBound(0, axis+bi.axis, bi)
	case bd.axis == axis:
		return unsupportedBound(node, bd, "it gathers along the padded axis (indices could address the padding)")
	case bd.axis < axis:
		c.setBound(0, bd.axis, bd)
	default:
		c.setBound(0, bd.axis+irank-1, bd)
	}
	return nil
}

// boundGatherND: indices [..., k] bounded along an axis before the last,
// data not, batch_dims 0: the output is bounded along that axis.
func boundGatherND(c *Ctx, node *Node, in map[int]boundedValue) error {
	bi, idxB := in[1]
	if _, dataB := in[0]; dataB || !idxB {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its indices may be padded")
	}
	irank := Meta(c.s.env[node.Inputs[1]]).Rank()
	if c.AttrInt("batch_dims", 0) != 0 || bi.axis >= irank-1 {
		return unsupportedBound(node, bi, "the indices must be padded along a batch axis, with batch_dims 0")
	}
	c.setBound(0, bi.axis, bi)
	return nil
}

// unsqueezeAxes returns the axes of Unsqueeze/Squeeze (attribute before
// opset 13, input 1 since), normalized to rank.
func unsqueezeAxes(c *Ctx, rank int) ([]int, error) {
	var axes []int64
	var err error
	if c.Opset < 13 {
		axes = c.AttrInts("axes", nil)
	} else if c.HasInput(1) {
		if axes, err = c.ConstInts(1); err != nil {
			return nil, err
		}
	}
	out := make([]int, len(axes))
	for i, a := range axes {
		if out[i], err = shNormAxis(a, rank); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func boundUnsqueeze(c *Ctx, node *Node, in map[int]boundedValue) error {
	b, ok := in[0]
	if !ok {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its data may be padded")
	}
	out := Meta(c.s.env[node.Outputs[0]])
	axes, err := unsqueezeAxes(c, out.Rank())
	if err != nil {
		return err
	}
	// The input's axes keep their order among the output's.
	j, seen := 0, 0
	for ; j < out.Rank(); j++ {
		if slices.Contains(axes, j) {
			continue
		}
		if seen == b.axis {
			break
		}
		seen++
	}
	c.setBound(0, j, b)
	return nil
}

func boundSqueeze(c *Ctx, node *Node, in map[int]boundedValue) error {
	b, ok := in[0]
	if !ok {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its data may be padded")
	}
	m := Meta(c.s.env[node.Inputs[0]])
	axes, err := unsqueezeAxes(c, m.Rank())
	if err != nil {
		return err
	}
	if len(axes) == 0 { // every size-1 axis
		for i, d := range m.Shape {
			if d.IsStatic() && d.Size == 1 {
				axes = append(axes, i)
			}
		}
	}
	if slices.Contains(axes, b.axis) {
		return unsupportedBound(node, b, "it squeezes the padded axis")
	}
	removed := 0
	for _, a := range axes {
		if a < b.axis {
			removed++
		}
	}
	c.setBound(0, b.axis-removed, b)
	return nil
}

// boundRoiAlign: padded regions (rois and batch_indices along their first
// axis, padded alike) give padded pooled features along the first axis.
func boundRoiAlign(c *Ctx, node *Node, in map[int]boundedValue) error {
	if b, ok := in[0]; ok {
		return unsupportedBound(node, b, "only its rois and batch_indices may be padded")
	}
	_, ref := anyBound(in)
	for _, b := range in {
		if b.axis != 0 || !sameCount(b.count, ref.count, 0) {
			return unsupportedBound(node, b, "rois and batch_indices must be padded alike along the regions")
		}
	}
	c.setBound(0, 0, ref)
	return nil
}

// boundBatchOp: an operator that treats axis 0 of its input as a batch of
// independent entries (Conv, pooling, normalization in inference) keeps a
// bound along it; only that input may be padded.
func boundBatchOp(c *Ctx, node *Node, in map[int]boundedValue) error {
	b, ok := in[0]
	if !ok || len(in) > 1 || b.axis != 0 {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its input's first (batch) axis may be padded")
	}
	for j := range node.Outputs {
		c.setBound(j, 0, b)
	}
	return nil
}

// boundGemm: rows of A padded give rows of the result padded.
func boundGemm(c *Ctx, node *Node, in map[int]boundedValue) error {
	b, ok := in[0]
	row := int(c.AttrInt("transA", 0))
	if !ok || len(in) > 1 || b.axis != row {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only the rows of A may be padded")
	}
	c.setBound(0, 0, b)
	return nil
}

// boundMatMul: A padded along an axis other than the one contracted gives
// the result padded along it (right-aligned with the broadcast batch axes).
func boundMatMul(c *Ctx, node *Node, in map[int]boundedValue) error {
	b, ok := in[0]
	ar := Meta(c.s.env[node.Inputs[0]]).Rank()
	if !ok || len(in) > 1 || ar < 2 || b.axis == ar-1 {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only A may be padded, along an axis it does not contract")
	}
	orank := Meta(c.s.env[node.Outputs[0]]).Rank()
	c.setBound(0, b.axis+orank-ar, b)
	return nil
}

// boundAlongAxis: an operator that computes along one axis (attribute
// axis, default def) of independent slices keeps a bound along another.
func boundAlongAxis(def int64) boundRule {
	return func(c *Ctx, node *Node, in map[int]boundedValue) error {
		b, ok := in[0]
		rank := Meta(c.s.env[node.Inputs[0]]).Rank()
		axis, err := shNormAxis(c.AttrInt("axis", def), rank)
		if err != nil {
			return err
		}
		if !ok || len(in) > 1 || axis == b.axis {
			_, b := anyBound(in)
			return unsupportedBound(node, b, "only its input may be padded, along another axis than the one it computes along")
		}
		c.setBound(0, b.axis, b)
		return nil
	}
}

// boundPad: padding the value along other axes than its padded one keeps
// the bound.
func boundPad(c *Ctx, node *Node, in map[int]boundedValue) error {
	b, ok := in[0]
	if !ok || len(in) > 1 {
		_, b := anyBound(in)
		return unsupportedBound(node, b, "only its data may be padded")
	}
	rank := Meta(c.s.env[node.Inputs[0]]).Rank()
	pads := c.AttrInts("pads", c.AttrInts("paddings", nil))
	if c.Opset >= 11 {
		var err error
		if pads, err = c.ConstInts(1); err != nil {
			return err
		}
	}
	axes, err := padAxes(c, rank)
	if err != nil {
		return err
	}
	for i, a := range axes {
		if a != b.axis || i+len(axes) >= len(pads) {
			continue
		}
		if pads[i] != 0 || pads[i+len(axes)] != 0 {
			return unsupportedBound(node, b, fmt.Sprintf("it pads the padded axis %d by %d and %d", a, pads[i], pads[i+len(axes)]))
		}
	}
	c.setBound(0, b.axis, b)
	return nil
}
