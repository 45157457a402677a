package decomp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// The errors a decomposition returns wrap one of these.
var (
	// ErrUnsupported: the call is valid, but the decomposition does not
	// handle these arguments (a random dropout, a symbolic size where it
	// needs a number).
	ErrUnsupported = errors.New("decomp: unsupported")
	// ErrFormat: the call breaks the operator's schema (a missing or
	// ill-typed argument, more outputs than the operator has).
	ErrFormat = errors.New("decomp: invalid call")
)

// Call is one call of an ATen operator the IR does not have, for its
// decomposition to convert into IR operators.
type Call struct {
	// Op is the operator called (an ATen op value of package fxgraph).
	Op *fxgraph.Op
	// Args holds the arguments given, by schema name; a missing one takes
	// its schema default.
	Args map[string]any
	// Pos and Kw are the same arguments placed by the schema: positional
	// ones at their position (gaps filled with defaults), keyword-only ones
	// by name. A decomposition that renames the call passes them on.
	Pos []any
	Kw  map[string]any
	// Outs names the call's outputs, as many as torch lists ("" for one
	// with no name); decompositions name their result nodes after them.
	Outs []string
	// Used reports whether output i is read; nil means every named one is.
	Used func(i int) bool
	// Emitter builds the IR nodes (shape rules at once, constant folding).
	Emitter *fxgraph.Emitter
	// NodeName, when set, turns a requested node name into the one to
	// give (an importer's naming): for a node of op ("" for none: after the
	// op), or for a constant (op nil). Nil keeps it.
	NodeName func(name string, op *fxgraph.Op) string
	// Dim, when set, returns dim i of x as an IR size (an int, or a node
	// computing it), so that an importer can share one aten.sym_size node
	// per dim; nil emits one per use.
	Dim func(x *fxgraph.Node, i int) (any, error)

	results []*fxgraph.Node
}

// NewCall returns a call of op with the arguments args (positional) and kw
// placed by op's schema.
func NewCall(op *fxgraph.Op, args []any, kw map[string]any, e *fxgraph.Emitter) *Call {
	c := &Call{Op: op, Args: map[string]any{}, Pos: args, Kw: kw, Emitter: e}
	for i, a := range op.Args {
		if a.Pos != fxgraph.KwOnly && i < len(args) {
			c.Args[a.Name] = args[i]
		}
	}
	for k, v := range kw {
		c.Args[k] = v
	}
	return c
}

// Results returns the nodes the decomposition bound to the call's
// outputs (nil where it bound none).
func (c *Call) Results() []*fxgraph.Node { return c.results }

// errorf formats an error about the call.
func (c *Call) errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// used reports whether output i is read.
func (c *Call) used(i int) bool {
	if c.Used == nil {
		return i < len(c.Outs) && c.Outs[i] != ""
	}
	return c.Used(i)
}

// emit adds an IR node.
func (c *Call) emit(name string, op *fxgraph.Op, args []any, kw map[string]any) (*fxgraph.Node, error) {
	if c.NodeName != nil {
		name = c.NodeName(name, op)
	}
	n, err := c.Emitter.Emit(name, op, args, kw)
	if err != nil {
		return nil, c.errorf(ErrUnsupported, "%v", trimSentinel(err))
	}
	return n, nil
}

// one emits op(args, kw) named after output 0 and binds it.
func (c *Call) one(op *fxgraph.Op, args []any, kw map[string]any) error {
	n, err := c.emit(c.outName(0), op, args, kw)
	if err != nil {
		return err
	}
	return c.bind(0, n)
}

// item emits op, a tuple, and binds its element i as output 0.
func (c *Call) item(op *fxgraph.Op, args []any, kw map[string]any, i int64) error {
	t, err := c.emit("", op, args, kw)
	if err != nil {
		return err
	}
	n, err := c.emit(c.outName(0), fxgraph.GetItem, []any{t, i}, nil)
	if err != nil {
		return err
	}
	return c.bind(0, n)
}

// alias binds output 0 to x itself (an identity).
func (c *Call) alias(x *fxgraph.Node) error { return c.bind(0, x) }

// bind binds output i of the call to n.
func (c *Call) bind(i int, n *fxgraph.Node) error {
	if i >= len(c.Outs) {
		return c.errorf(ErrFormat, "torch lists %d outputs, the conversion produces more", len(c.Outs))
	}
	for len(c.results) <= i {
		c.results = append(c.results, nil)
	}
	c.results[i] = n
	return nil
}

// bindTuple binds each used output i to element i of the tuple node t.
func (c *Call) bindTuple(t *fxgraph.Node) error {
	for i := range c.Outs {
		if !c.used(i) {
			continue
		}
		item, err := c.emit(c.Outs[i], fxgraph.GetItem, []any{t, int64(i)}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, item); err != nil {
			return err
		}
	}
	return nil
}

// outName returns the name of output i ("" when there is none).
func (c *Call) outName(i int) string {
	if i < len(c.Outs) {
		return c.Outs[i]
	}
	return ""
}

// arg returns the argument called name, or its schema default.
func (c *Call) arg(name string) any {
	if v, ok := c.Args[name]; ok {
		return v
	}
	if a, ok := c.Op.Arg(name); ok {
		return a.Default
	}
	return nil
}

// tensor returns a tensor argument.
func (c *Call) tensor(name string) (*fxgraph.Node, error) {
	n, ok := c.arg(name).(*fxgraph.Node)
	if !ok {
		return nil, c.errorf(ErrFormat, "argument %s is %s, want a tensor", name, fxgraph.FormatArg(c.arg(name)))
	}
	return n, nil
}

// optTensor returns an optional tensor argument (nil for None).
func (c *Call) optTensor(name string) (*fxgraph.Node, error) {
	if c.arg(name) == nil {
		return nil, nil
	}
	return c.tensor(name)
}

// intArg returns an int argument.
func (c *Call) intArg(name string) (int64, error) {
	v, ok := fxgraph.AsInt(c.arg(name))
	if !ok {
		return 0, c.errorf(ErrUnsupported, "argument %s is %s, want an int", name, fxgraph.FormatArg(c.arg(name)))
	}
	return v, nil
}

// floatArg returns a number argument.
func (c *Call) floatArg(name string) (float64, error) {
	v, ok := fxgraph.AsFloat(c.arg(name))
	if !ok {
		return 0, c.errorf(ErrUnsupported, "argument %s is %s, want a number", name, fxgraph.FormatArg(c.arg(name)))
	}
	return v, nil
}

// boolArg returns a bool argument.
func (c *Call) boolArg(name string) (bool, error) {
	v, ok := fxgraph.AsInt(c.arg(name))
	if !ok {
		return false, c.errorf(ErrUnsupported, "argument %s is %s, want a bool", name, fxgraph.FormatArg(c.arg(name)))
	}
	return v != 0, nil
}

// ints returns an int list argument; a single int (or one-element list)
// stands for n copies when n > 0.
func (c *Call) ints(name string, n int) ([]int64, error) {
	v, ok := fxgraph.AsInts(c.arg(name))
	if !ok {
		return nil, c.errorf(ErrUnsupported, "argument %s is %s, want a list of ints", name, fxgraph.FormatArg(c.arg(name)))
	}
	if len(v) == 1 && n > 1 {
		x := v[0]
		v = make([]int64, n)
		for i := range v {
			v[i] = x
		}
	}
	if n > 0 && len(v) != n {
		return nil, c.errorf(ErrUnsupported, "argument %s has %d values, want %d", name, len(v), n)
	}
	return v, nil
}

// dim returns dim i of x: an int when the IR knows it statically, else a
// node computing it (aten.sym_size.int, which specialization folds to the
// bucket's size).
func (c *Call) dim(x *fxgraph.Node, i int) (any, error) {
	if c.Dim != nil {
		return c.Dim(x, i)
	}
	if d := x.Val().Shape[i]; d.IsStatic() {
		return d.Size, nil
	}
	return c.emit("", fxgraph.AtenSymSizeInt, []any{x, int64(i)}, nil)
}

// dims returns every dim of x as dim does.
func (c *Call) dims(x *fxgraph.Node) ([]any, error) {
	out := make([]any, x.Val().Rank())
	for i := range out {
		d, err := c.dim(x, i)
		if err != nil {
			return nil, c.errorf(errSentinel(err), "%s", trimSentinel(err))
		}
		out[i] = d
	}
	return out, nil
}

// constant adds a constant of the graph, named after name.
func (c *Call) constant(name string, t *tensor.Tensor) *fxgraph.Node {
	if c.NodeName != nil {
		name = c.NodeName(name, nil)
	}
	return c.Emitter.Graph.AddConstant(name, t)
}

// scalarConst adds a rank-0 constant of dtype dt.
func (c *Call) scalarConst(dt tensor.DType, v float64) *fxgraph.Node {
	return c.constant("scalar", tensor.Scalar(dt, v))
}

// errSentinel returns the package sentinel err wraps (ErrFormat by default).
func errSentinel(err error) error {
	if errors.Is(err, ErrUnsupported) {
		return ErrUnsupported
	}
	return ErrFormat
}

// trimSentinel drops a leading sentinel message from err's text, so that
// wrapping it again does not repeat it.
func trimSentinel(err error) string {
	s := err.Error()
	for _, p := range []string{ErrUnsupported.Error() + ": ", ErrFormat.Error() + ": ", fxgraph.ErrUnsupported.Error() + ": "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// anyList converts a typed list into an IR list argument.
func anyList[T any](list []T) []any {
	out := make([]any, len(list))
	for i, v := range list {
		out[i] = v
	}
	return out
}

// fmtUnsupported is the error for an op with neither an IR operator nor a
// decomposition.
func fmtUnsupported(op *fxgraph.Op) error {
	return fmt.Errorf("%w: %s is neither an IR operator nor decomposed", ErrUnsupported, op)
}
