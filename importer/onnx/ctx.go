package onnx

import (
	"fmt"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Ctx is what a converter uses to read its ONNX node and emit IR nodes.
type Ctx struct {
	s    *scope
	node *Node
	// Opset is the opset version of the node's domain.
	Opset int64
	// calls counts the operators run through Call, to name their values.
	calls int
}

// Graph returns the IR graph being built.
func (c *Ctx) Graph() *fxgraph.Graph { return c.s.g }

// NumInputs returns the number of inputs the node lists (trailing empty
// optional inputs included).
func (c *Ctx) NumInputs() int { return len(c.node.Inputs) }

// HasInput reports whether optional input i is given.
func (c *Ctx) HasInput(i int) bool { return i < len(c.node.Inputs) && c.node.Inputs[i] != "" }

// Input returns the IR node bound to input i, or an error when it is missing.
func (c *Ctx) Input(i int) (*fxgraph.Node, error) {
	if !c.HasInput(i) {
		return nil, fmt.Errorf("input %d is required", i)
	}
	name := c.node.Inputs[i]
	n, ok := c.s.env[name]
	if !ok {
		return nil, fmt.Errorf("input %d (%q) is not defined by any earlier node, input or initializer", i, name)
	}
	if w := windowOf(n); w != nil {
		t, err := c.windowTensor(w)
		if err != nil {
			return nil, fmt.Errorf("input %d (%q) has a run-time size that the operator cannot take: %w", i, name, err)
		}
		return t, nil
	}
	if isStructured(n) {
		return nil, fmt.Errorf("%w: input %d (%q) is a %s, the operator takes a tensor there", ErrUnsupported, i, name, strings.TrimPrefix(n.Target, "onnx."))
	}
	return n, nil
}

// OptInput returns input i, or nil when it is not given.
func (c *Ctx) OptInput(i int) (*fxgraph.Node, error) {
	if !c.HasInput(i) {
		return nil, nil
	}
	return c.Input(i)
}

// Inputs returns all given inputs (used by variadic ops like Sum, Concat).
func (c *Ctx) Inputs() ([]*fxgraph.Node, error) {
	var out []*fxgraph.Node
	for i := range c.node.Inputs {
		if !c.HasInput(i) {
			continue
		}
		n, err := c.Input(i)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Const returns the constant value of input i (an initializer, a Constant
// node's value or a folded computation), or nil when it is not constant.
func (c *Ctx) Const(i int) *tensor.Tensor {
	n, err := c.Input(i)
	if err != nil {
		return nil
	}
	if t := c.s.g.ConstValue(n); t != nil {
		return t
	}
	return c.s.countInvariant(n)
}

// ConstInts returns the values of constant integer input i. When the input
// is not a constant, the error is a *NeedsValueError naming the graph inputs
// it is computed from: the operator needs their values at compile time.
func (c *Ctx) ConstInts(i int) ([]int64, error) {
	t, err := c.ConstValue(i)
	if err != nil {
		return nil, err
	}
	if !(t.DType.IsInt() || t.DType == tensor.Bool) {
		return nil, fmt.Errorf("input %d is %s, want an integer tensor", i, t)
	}
	return t.Int64s(), nil
}

// ConstValue returns the constant value of input i, or a *NeedsValueError
// naming the graph inputs it depends on when it is not a constant.
func (c *Ctx) ConstValue(i int) (*tensor.Tensor, error) {
	n, err := c.Input(i)
	if err != nil {
		return nil, err
	}
	if t := c.s.g.ConstValue(n); t != nil {
		return t, nil
	}
	if t := c.s.countInvariant(n); t != nil {
		return t, nil
	}
	return nil, &NeedsValueError{Inputs: c.valueInputsBehind(n), Operand: c.node.Inputs[i]}
}

// valueInputsBehind returns the graph inputs whose values n is computed
// from, by name. The walk stops at ShapeOnly ops (Shape, Size): they depend
// on their input's shape, not its values.
func (c *Ctx) valueInputsBehind(n *fxgraph.Node) []string {
	var out []string
	seen := map[*fxgraph.Node]bool{}
	var walk func(m *fxgraph.Node)
	walk = func(m *fxgraph.Node) {
		if seen[m] {
			return
		}
		seen[m] = true
		if m.Opcode == fxgraph.Placeholder {
			out = append(out, m.Target)
			return
		}
		if info, ok := c.s.im.ir.Lookup(m.Target); ok && info.ShapeOnly {
			return
		}
		for _, in := range m.InputNodes() {
			walk(in)
		}
	}
	walk(n)
	sort.Strings(out)
	return out
}

// NeedsValueError reports an operand (a shape, axes, pads, ...) that must be
// known when the model is compiled but is computed from graph inputs. It
// wraps ErrUnsupported; callers that can supply those inputs' values at
// compile time import again with Importer.ImportWithValues, so the program
// is specialized for them (like a static argument in JAX).
type NeedsValueError struct {
	// Inputs are the graph inputs the operand depends on.
	Inputs []string
	// Operand is the ONNX value name of the operand.
	Operand string
}

// Error describes the operand and the inputs it depends on.
func (e *NeedsValueError) Error() string {
	return fmt.Sprintf("%v: operand %q must be a constant but is computed from graph inputs %s; give their values at compile time",
		ErrUnsupported, e.Operand, strings.Join(e.Inputs, ", "))
}

// Unwrap makes the error match ErrUnsupported.
func (e *NeedsValueError) Unwrap() error { return ErrUnsupported }

// Attr returns the attribute name, or nil.
func (c *Ctx) Attr(name string) *Attribute { return c.node.Attr(name) }

// AttrInt returns an int attribute or def.
func (c *Ctx) AttrInt(name string, def int64) int64 {
	if a := c.node.Attr(name); a != nil {
		return a.I
	}
	return def
}

// AttrFloat returns a float attribute or def.
func (c *Ctx) AttrFloat(name string, def float64) float64 {
	if a := c.node.Attr(name); a != nil {
		return float64(a.F)
	}
	return def
}

// AttrString returns a string attribute or def.
func (c *Ctx) AttrString(name, def string) string {
	if a := c.node.Attr(name); a != nil {
		return string(a.S)
	}
	return def
}

// AttrInts returns an ints attribute or def.
func (c *Ctx) AttrInts(name string, def []int64) []int64 {
	if a := c.node.Attr(name); a != nil {
		return a.Ints
	}
	return def
}

// AttrFloats returns a floats attribute or def.
func (c *Ctx) AttrFloats(name string, def []float32) []float32 {
	if a := c.node.Attr(name); a != nil {
		return a.Floats
	}
	return def
}

// Emitter returns the emitter converters build the graph with (for the
// shared decompositions, package decomp).
func (c *Ctx) Emitter() *fxgraph.Emitter {
	return &fxgraph.Emitter{Graph: c.s.g, IR: c.s.im.ir}
}

// Emit adds a call_function node for target, computes its Meta right away
// (so later converters can read dtypes and shapes), and folds it into a
// constant when its inputs are constants. It returns the node standing for
// the result.
func (c *Ctx) Emit(target *fxgraph.Op, args ...any) (*fxgraph.Node, error) {
	return c.EmitKw(target, args, nil)
}

// EmitKw is Emit with kwargs.
func (c *Ctx) EmitKw(target *fxgraph.Op, args []any, kwargs map[string]any) (*fxgraph.Node, error) {
	name := ""
	if len(c.node.Outputs) > 0 {
		name = sanitize(c.node.Outputs[0])
	}
	if hasStructured(args) {
		return nil, fmt.Errorf("%w: %s of a sequence or optional value (only their elements are tensors)", ErrUnsupported, target)
	}
	e := fxgraph.Emitter{Graph: c.s.g, IR: c.s.im.ir}
	n, err := e.Emit(name, target, args, kwargs)
	if err != nil {
		return nil, fmt.Errorf("converter emits %s: %w", target, err)
	}
	return n, nil
}

// SetOutput binds output i of the ONNX node to n.
func (c *Ctx) SetOutput(i int, n *fxgraph.Node) {
	if i < len(c.node.Outputs) && c.node.Outputs[i] != "" {
		c.s.env[c.node.Outputs[i]] = n
	}
}

// HasOutput reports whether output i is requested.
func (c *Ctx) HasOutput(i int) bool { return i < len(c.node.Outputs) && c.node.Outputs[i] != "" }

// Constant adds a constant tensor to the graph.
func (c *Ctx) Constant(name string, t *tensor.Tensor) *fxgraph.Node {
	return c.s.g.AddConstant(sanitize(name), t)
}

// modelConstant returns the constant node of t, a tensor of the model itself
// (an initializer or a Constant's value), adding it on first use: a Loop
// body inlined once per iteration then shares its constants.
func (s *scope) modelConstant(name string, t *tensor.Tensor) *fxgraph.Node {
	if c, ok := s.subConsts[t]; ok && c.Graph() == s.g {
		return c
	}
	c := s.g.AddConstant(sanitize(name), t)
	s.subConsts[t] = c
	return c
}

// ScalarConst adds a rank-0 constant of dtype dt.
func (c *Ctx) ScalarConst(dt tensor.DType, v float64) *fxgraph.Node {
	return c.Constant("scalar", tensor.Scalar(dt, v))
}

// IntsConst adds a 1-D int64 constant.
func (c *Ctx) IntsConst(v []int64) *fxgraph.Node {
	return c.Constant("ints", tensor.FromInt64s(v))
}

// Meta returns the single TensorMeta of an IR node.
func Meta(n *fxgraph.Node) fxgraph.TensorMeta { return n.Val() }

// Unsupported returns an error wrapping ErrUnsupported that names what.
func Unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// ints converts []int64 to the []any form of IR list arguments.
// someInputs returns inputs 0 to n-1: the first required ones must be
// given, the others are nil when absent.
func (c *Ctx) someInputs(n, required int) ([]*fxgraph.Node, error) {
	out := make([]*fxgraph.Node, n)
	for i := range out {
		var err error
		if i < required {
			out[i], err = c.Input(i)
		} else {
			out[i], err = c.OptInput(i)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// viewAlong views the 1-D v as rank dims, all of size 1 but axis, so that
// it broadcasts along that axis.
func viewAlong(c *Ctx, v *fxgraph.Node, rank, axis int) (*fxgraph.Node, error) {
	dims := make([]any, rank)
	for i := range dims {
		dims[i] = int64(1)
	}
	dims[axis] = int64(-1)
	return c.Emit(fxgraph.AtenView, v, dims)
}

func ints(v []int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

// nodes converts IR nodes to a []any list argument.
func nodes(v []*fxgraph.Node) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}
