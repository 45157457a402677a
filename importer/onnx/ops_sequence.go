package onnx

import (
	"errors"
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Sequences and optionals whose structure is known at import.
//
// The IR has tensors only. A sequence whose length the importer knows (built
// by SequenceConstruct, SequenceInsert, SplitToSequence of a static dim, an
// unrolled Loop, or a graph input whose length is given in ImportOptions) is
// held during the import as a list of IR tensor nodes; an optional as "none"
// or its content. Each is a detached marker node (in no graph) bound to the
// ONNX value name, read by the sequence and optional operators; Identity,
// If with a condition known at import and unrolled Loops pass them through.
// Positions (SequenceAt, SequenceInsert, SequenceErase) must be known at
// import too. Where a sequence's length or an optional's presence would
// depend on run-time values, the import fails with ErrUnsupported, or with a
// *NeedsValueError when the value deciding it (an If condition, a Loop trip
// count) is a graph input that can be given at compile time.
//
// Graph inputs and outputs of sequence and optional type are laid out as
// tensors (Value.Flatten): a sequence as its elements in order, an optional
// as its content or nothing. A sequence input "x" of length 2 becomes the
// placeholders x[0] and x[1] (Target "x[0]", "x[1]"); a sequence output "y"
// the outputs y[0], y[1], ... (Graph.OutputNames). An element's dims that the
// model gives as numbers stay static; the others get a symbol per element
// (elements of one sequence may differ in shape).

const (
	seqMarker = "onnx.sequence"
	optMarker = "onnx.optional"
)

// errStructured reports a sequence or optional where the IR needs tensors:
// the operand of a higher-order op (stablehlo.if, stablehlo.while).
var errStructured = errors.New("a sequence or optional value crosses a run-time control-flow boundary")

// ImportOptions are what a caller knows about the graph inputs at compile
// time.
type ImportOptions struct {
	// Values are graph inputs whose values are known (see NeedsValueError).
	Values map[string]*tensor.Tensor
	// Structured gives, per sequence or optional graph input, a value of
	// its structure: the number of elements of each sequence and whether
	// each optional holds a value (the tensors are not read; they give an
	// element's rank when the model does not).
	Structured map[string]*Value
}

// ImportWithOptions is Import with compile-time knowledge of the graph
// inputs: values operands need, and the structure of sequence and optional
// inputs.
//
// A model whose conversion needs values computed from symbolic input sizes
// (see shapeDependentError) imports as a deferred graph
// (fxgraph.Graph.IsDeferred): ImportAt imports it again with the same
// options once the sizes are known, per shape bucket.
func (im *Importer) ImportWithOptions(m *Model, o ImportOptions) (*fxgraph.Graph, error) {
	g, err := im.importModel(m, o, nil)
	var sd *shapeDependentError
	if err != nil && errors.As(err, &sd) && m.Graph != nil {
		return im.deferredGraph(m, o, err)
	}
	return g, err
}

func newSeqMarker(elems []*fxgraph.Node, dt tensor.DType) *fxgraph.Node {
	return &fxgraph.Node{Opcode: fxgraph.CallFunction, Name: "sequence", Target: seqMarker, Args: nodes(elems), Kwargs: map[string]any{"dtype": dt}}
}

// newOptMarker returns an optional holding elem, or none when elem is nil.
func newOptMarker(elem *fxgraph.Node) *fxgraph.Node {
	var args []any
	if elem != nil {
		args = []any{elem}
	}
	return &fxgraph.Node{Opcode: fxgraph.CallFunction, Name: "optional", Target: optMarker, Args: args}
}

// isStructured reports whether n is a sequence or optional marker.
func isStructured(n *fxgraph.Node) bool {
	return n != nil && n.Graph() == nil && (n.Target == seqMarker || n.Target == optMarker)
}

// hasStructured reports whether args (IR call arguments, lists nested)
// hold a sequence or optional marker.
func hasStructured(args []any) bool {
	for _, a := range args {
		switch v := a.(type) {
		case *fxgraph.Node:
			if isStructured(v) {
				return true
			}
		case []any:
			if hasStructured(v) {
				return true
			}
		}
	}
	return false
}

func markerElems(n *fxgraph.Node) []*fxgraph.Node {
	out := make([]*fxgraph.Node, len(n.Args))
	for i, a := range n.Args {
		out[i] = a.(*fxgraph.Node)
	}
	return out
}

// seqDType is the element dtype of sequence marker n.
func seqDType(n *fxgraph.Node) tensor.DType {
	dt, _ := n.Kwargs["dtype"].(tensor.DType)
	return dt
}

// flattenMarker returns the tensors n stands for, in Value.Flatten order.
func flattenMarker(n *fxgraph.Node) []*fxgraph.Node {
	if !isStructured(n) {
		return []*fxgraph.Node{n}
	}
	var out []*fxgraph.Node
	for _, e := range markerElems(n) {
		out = append(out, flattenMarker(e)...)
	}
	return out
}

// AnyInput returns input i, which may be a sequence or an optional.
func (c *Ctx) AnyInput(i int) (*fxgraph.Node, error) {
	if !c.HasInput(i) {
		return nil, fmt.Errorf("input %d is required", i)
	}
	n, ok := c.s.env[c.node.Inputs[i]]
	if !ok {
		return nil, fmt.Errorf("input %d (%q) is not defined by any earlier node, input or initializer", i, c.node.Inputs[i])
	}
	return n, nil
}

// SeqInput returns the elements of sequence input i and their dtype.
func (c *Ctx) SeqInput(i int) ([]*fxgraph.Node, tensor.DType, error) {
	n, err := c.AnyInput(i)
	if err != nil {
		return nil, 0, err
	}
	if !isStructured(n) || n.Target != seqMarker {
		return nil, 0, fmt.Errorf("input %d (%q) is not a sequence", i, c.node.Inputs[i])
	}
	return markerElems(n), seqDType(n), nil
}

// needsValues is the error for an operand that must be known at import:
// the NeedsValueError naming the graph inputs input i depends on.
func (c *Ctx) needsValues(i int) error {
	n, err := c.AnyInput(i)
	if err != nil {
		return err
	}
	return &NeedsValueError{Inputs: c.valueInputsBehind(n), Operand: c.node.Inputs[i]}
}

// structuredInput binds graph input vi of sequence or optional type to a
// marker over new placeholders, laid out by v.
func (s *scope) structuredInput(vi *ValueInfo, v *Value) error {
	if v == nil {
		return fmt.Errorf("%w: input type %v: its structure (sequence length, optional presence) must be given at compile time", ErrUnsupported, vi.Type.Kind)
	}
	n, err := s.markerFor(vi.Name, vi.Type, v, new(int))
	if err != nil {
		return err
	}
	s.env[vi.Name] = n
	return nil
}

// markerFor adds the placeholders of value v of type t, named after name
// and numbered by *k.
func (s *scope) markerFor(name string, t *TypeInfo, v *Value, k *int) (*fxgraph.Node, error) {
	if t == nil || v == nil || v.Kind != t.Kind {
		return nil, fmt.Errorf("%w: value of input %q does not match its type", ErrUnsupported, name)
	}
	switch t.Kind {
	case TypeTensor:
		meta := fxgraph.TensorMeta{DType: t.Elem}
		if t.Elem == tensor.Invalid || t.Elem == tensor.String {
			return nil, fmt.Errorf("%w: sequence of %s elements", ErrUnsupported, onnxTypeName(t.ElemCode))
		}
		rank := len(t.Dims)
		if !t.HasShape {
			rank = v.Tensor.Rank()
		}
		for j := range rank {
			if t.HasShape && t.Dims[j].Known {
				meta.Shape = append(meta.Shape, fxgraph.D(t.Dims[j].Value))
			} else {
				meta.Shape = append(meta.Shape, fxgraph.S(fmt.Sprintf("%s_%d_dim%d", sanitize(name), *k, j)))
			}
		}
		target := fmt.Sprintf("%s[%d]", name, *k)
		*k++
		p := s.g.AddPlaceholder(sanitize(target), meta)
		p.Target = target
		return p, nil
	case TypeSequence:
		et := t.ElemType
		if et == nil || et.Kind != TypeTensor {
			return nil, fmt.Errorf("%w: sequence input %q whose elements are not tensors", ErrUnsupported, name)
		}
		elems := make([]*fxgraph.Node, len(v.Elems))
		for i, e := range v.Elems {
			n, err := s.markerFor(name, et, e, k)
			if err != nil {
				return nil, err
			}
			elems[i] = n
		}
		return newSeqMarker(elems, et.Elem), nil
	case TypeOptional:
		if v.Elem == nil {
			return newOptMarker(nil), nil
		}
		if t.ElemType != nil && t.ElemType.Kind == TypeTensor {
			p, err := s.markerFor(name, t.ElemType, v.Elem, k)
			if err != nil {
				return nil, err
			}
			p.Target = name
			return newOptMarker(p), nil
		}
		e, err := s.markerFor(name, t.ElemType, v.Elem, k)
		if err != nil {
			return nil, err
		}
		return newOptMarker(e), nil
	}
	return nil, fmt.Errorf("%w: input type %v", ErrUnsupported, t.Kind)
}

func registerSequence(cs converters) {
	cs.register("", "SequenceEmpty", 11, seqEmpty)
	cs.register("", "SequenceConstruct", 11, seqConstruct)
	cs.register("", "SequenceAt", 11, seqAt)
	cs.register("", "SequenceInsert", 11, seqInsert)
	cs.register("", "SequenceErase", 11, seqErase)
	cs.register("", "SequenceLength", 11, seqLength)
	cs.register("", "ConcatFromSequence", 11, seqConcat)
	cs.register("", "SplitToSequence", 11, seqSplit)
	cs.register("", "SequenceMap", 17, seqMap)
	cs.register("", "Optional", 15, optOptional)
	cs.register("", "OptionalHasElement", 15, optHasElement)
	cs.register("", "OptionalGetElement", 15, optGetElement)
}

func seqEmpty(c *Ctx, _ *Node) error {
	dt, err := shONNXDType(c.AttrInt("dtype", 1))
	if err != nil {
		return err
	}
	c.SetOutput(0, newSeqMarker(nil, dt))
	return nil
}

func seqConstruct(c *Ctx, _ *Node) error {
	elems, err := c.Inputs()
	if err != nil {
		return err
	}
	if len(elems) == 0 {
		return fmt.Errorf("SequenceConstruct needs at least one input")
	}
	dt := Meta(elems[0]).DType
	for i, e := range elems {
		if Meta(e).DType != dt {
			return fmt.Errorf("SequenceConstruct: input %d is %s, input 0 %s", i, Meta(e), Meta(elems[0]))
		}
	}
	c.SetOutput(0, newSeqMarker(elems, dt))
	return nil
}

// seqPosition reads position input i (default def) for a sequence of n
// elements; negative positions count from the end. hi is the largest
// position allowed (n-1, or n for an insertion).
func seqPosition(c *Ctx, i int, def, n, hi int64) (int64, error) {
	if !c.HasInput(i) {
		return def, nil
	}
	v, err := c.ConstInts(i)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("position has %d values, want 1", len(v))
	}
	p := v[0]
	if p < 0 {
		p += n
	}
	if p < 0 || p > hi {
		return 0, fmt.Errorf("position %d out of range for a sequence of %d elements", v[0], n)
	}
	return p, nil
}

func seqAt(c *Ctx, _ *Node) error {
	elems, _, err := c.SeqInput(0)
	if err != nil {
		return err
	}
	n := int64(len(elems))
	p, err := seqPosition(c, 1, 0, n, n-1)
	if err != nil {
		return err
	}
	c.SetOutput(0, elems[p])
	return nil
}

func seqInsert(c *Ctx, _ *Node) error {
	elems, dt, err := c.SeqInput(0)
	if err != nil {
		return err
	}
	x, err := c.Input(1)
	if err != nil {
		return err
	}
	if Meta(x).DType != dt {
		return fmt.Errorf("SequenceInsert of %s into a sequence of %s", Meta(x), dt)
	}
	n := int64(len(elems))
	p, err := seqPosition(c, 2, n, n, n)
	if err != nil {
		return err
	}
	out := append(append(append([]*fxgraph.Node{}, elems[:p]...), x), elems[p:]...)
	c.SetOutput(0, newSeqMarker(out, dt))
	return nil
}

func seqErase(c *Ctx, _ *Node) error {
	elems, dt, err := c.SeqInput(0)
	if err != nil {
		return err
	}
	n := int64(len(elems))
	if n == 0 {
		return fmt.Errorf("SequenceErase of an empty sequence")
	}
	p, err := seqPosition(c, 1, n-1, n, n-1)
	if err != nil {
		return err
	}
	out := append(append([]*fxgraph.Node{}, elems[:p]...), elems[p+1:]...)
	c.SetOutput(0, newSeqMarker(out, dt))
	return nil
}

func seqLength(c *Ctx, _ *Node) error {
	elems, _, err := c.SeqInput(0)
	if err != nil {
		return err
	}
	c.SetOutput(0, c.ScalarConst(tensor.Int64, float64(len(elems))))
	return nil
}

func seqConcat(c *Ctx, _ *Node) error {
	elems, _, err := c.SeqInput(0)
	if err != nil {
		return err
	}
	if len(elems) == 0 {
		return fmt.Errorf("ConcatFromSequence of an empty sequence")
	}
	a := c.Attr("axis")
	if a == nil {
		return fmt.Errorf("ConcatFromSequence: attribute axis is required")
	}
	axis := a.I
	newAxis := c.AttrInt("new_axis", 0) != 0
	rank := int64(Meta(elems[0]).Rank())
	if newAxis {
		rank++
	}
	if axis < -rank || axis >= rank {
		return fmt.Errorf("ConcatFromSequence: axis %d out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += rank
	}
	parts := elems
	if newAxis {
		parts = make([]*fxgraph.Node, len(elems))
		for i, e := range elems {
			if parts[i], err = c.Emit(fxgraph.AtenUnsqueeze, e, axis); err != nil {
				return err
			}
		}
	}
	out, err := c.Emit(fxgraph.AtenCat, nodes(parts), axis)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// seqSplitSizes returns the sizes SplitToSequence cuts dim d into. A
// symbolic d is cut only by a split of explicit sizes (the sequence length
// is theirs).
func seqSplitSizes(c *Ctx, d fxgraph.Dim) (sizes []int64, keepDims bool, err error) {
	n := d.Size
	symbolic := Unsupported("SplitToSequence along a dim of symbolic size without explicit split sizes (the sequence length would be known only at run time)")
	if !c.HasInput(1) {
		if !d.IsStatic() {
			return nil, false, symbolic
		}
		for range n {
			sizes = append(sizes, 1)
		}
		return sizes, c.AttrInt("keepdims", 1) != 0, nil
	}
	t, err := c.ConstValue(1)
	if err != nil {
		return nil, false, err
	}
	v := t.Int64s()
	if t.Rank() == 0 {
		if !d.IsStatic() {
			return nil, false, symbolic
		}
		if v[0] <= 0 {
			return nil, false, fmt.Errorf("SplitToSequence: split %d, want > 0", v[0])
		}
		for at := int64(0); at < n; at += v[0] {
			sizes = append(sizes, min(v[0], n-at))
		}
		return sizes, true, nil
	}
	sum := int64(0)
	for _, s := range v {
		if s < 0 {
			return nil, false, fmt.Errorf("SplitToSequence: negative split %v", v)
		}
		sum += s
	}
	if d.IsStatic() && sum != n {
		return nil, false, fmt.Errorf("SplitToSequence: split %v sums to %d, the dim is %d", v, sum, n)
	}
	return v, true, nil
}

func seqSplit(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	axis := c.AttrInt("axis", 0)
	rank := int64(m.Rank())
	if axis < -rank || axis >= rank {
		return fmt.Errorf("SplitToSequence: axis %d out of range for %s", axis, m)
	}
	if axis < 0 {
		axis += rank
	}
	sizes, keep, err := seqSplitSizes(c, m.Shape[axis])
	if err != nil {
		return err
	}
	elems := make([]*fxgraph.Node, len(sizes))
	at := int64(0)
	for i, s := range sizes {
		e, err := c.Emit(fxgraph.AtenSliceTensor, x, axis, at, at+s, int64(1))
		if err != nil {
			return err
		}
		if !keep {
			if e, err = c.Emit(fxgraph.AtenSqueezeDims, e, []any{axis}); err != nil {
				return err
			}
		}
		elems[i] = e
		at += s
	}
	c.SetOutput(0, newSeqMarker(elems, m.DType))
	return nil
}

// seqMap unrolls SequenceMap: the body runs once per element of the
// sequence inputs (all of one length), with the other inputs whole; each
// body output collects into an output sequence.
func seqMap(c *Ctx, n *Node) error {
	a := c.Attr("body")
	if a == nil || a.Type != AttrGraph || a.G == nil {
		return fmt.Errorf("SequenceMap: attribute body (a graph) is required")
	}
	body := a.G
	if len(body.Inputs) != c.NumInputs() {
		return fmt.Errorf("SequenceMap: %d inputs, the body takes %d", c.NumInputs(), len(body.Inputs))
	}
	args := make([]*fxgraph.Node, c.NumInputs())
	length := -1
	for i := range args {
		v, err := c.AnyInput(i)
		if err != nil {
			return err
		}
		args[i] = v
		if isStructured(v) && v.Target == seqMarker {
			k := len(v.Args)
			if length >= 0 && k != length {
				return fmt.Errorf("SequenceMap: input %d has %d elements, an earlier one %d", i, k, length)
			}
			length = k
		}
	}
	if length < 0 {
		return fmt.Errorf("SequenceMap: input 0 must be a sequence")
	}
	outs := make([][]*fxgraph.Node, len(body.Outputs))
	for j := range length {
		bind := map[string]*fxgraph.Node{}
		for i, v := range args {
			if isStructured(v) && v.Target == seqMarker {
				v = markerElems(v)[j]
			}
			bind[body.Inputs[i].Name] = v
		}
		res, err := c.s.inlineBody(body, bind)
		if err != nil {
			return err
		}
		for k, r := range res {
			if isStructured(r) {
				return Unsupported("SequenceMap whose body gives a sequence or optional")
			}
			outs[k] = append(outs[k], r)
		}
	}
	for k, o := range outs {
		dt := tensor.Float32
		if len(o) > 0 {
			dt = Meta(o[0]).DType
		} else if t := body.Outputs[k].Type; t != nil && t.Kind == TypeTensor && t.Elem != tensor.Invalid {
			dt = t.Elem
		}
		c.SetOutput(k, newSeqMarker(o, dt))
	}
	return nil
}

func optOptional(c *Ctx, _ *Node) error {
	if !c.HasInput(0) {
		c.SetOutput(0, newOptMarker(nil))
		return nil
	}
	v, err := c.AnyInput(0)
	if err != nil {
		return err
	}
	c.SetOutput(0, newOptMarker(v))
	return nil
}

func optHasElement(c *Ctx, _ *Node) error {
	has := 0.0
	if c.HasInput(0) {
		v, err := c.AnyInput(0)
		if err != nil {
			return err
		}
		if !isStructured(v) || v.Target != optMarker || len(v.Args) > 0 {
			has = 1
		}
	}
	c.SetOutput(0, c.ScalarConst(tensor.Bool, has))
	return nil
}

func optGetElement(c *Ctx, _ *Node) error {
	v, err := c.AnyInput(0)
	if err != nil {
		return err
	}
	if isStructured(v) && v.Target == optMarker {
		if len(v.Args) == 0 {
			return fmt.Errorf("OptionalGetElement of an optional that holds no value")
		}
		v = v.Args[0].(*fxgraph.Node)
	}
	c.SetOutput(0, v)
	return nil
}
