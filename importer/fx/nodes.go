package fx

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/decomp"
	"github.com/xserve/xserve/tensor"
)

// skipTargets are the runtime checks torch.export inserts; they compute
// nothing and the importer drops them.
var skipTargets = map[string]bool{
	"torch.ops.aten._assert_scalar.default":               true,
	"torch.ops.aten._assert_tensor_metadata.default":      true,
	"torch.ops.aten.sym_constrain_range.default":          true,
	"torch.ops.aten.sym_constrain_range_for_size.default": true,
	"torch.ops.aten._assert_async.default":                true,
	"torch.ops.aten._assert_async.msg":                    true,
}

// viewTargets are the operators whose result shares memory with their first
// input in eager PyTorch.
var viewTargets = map[*fxgraph.Op]bool{
	fxgraph.AtenView: true, fxgraph.Aten_UnsafeView: true, fxgraph.AtenReshape: true,
	fxgraph.AtenTransposeInt: true, fxgraph.AtenPermute: true, fxgraph.AtenT: true,
	fxgraph.AtenSliceTensor: true, fxgraph.AtenSelectInt: true, fxgraph.AtenExpand: true,
	fxgraph.AtenUnsqueeze: true, fxgraph.AtenSqueeze: true, fxgraph.AtenSqueezeDim: true,
	fxgraph.AtenSqueezeDims: true, fxgraph.AtenAlias: true, fxgraph.AtenAsStrided: true,
	fxgraph.AtenSplitTensor: true, fxgraph.AtenSplitWithSizes: true, fxgraph.AtenChunk: true,
	fxgraph.AtenUnbindInt: true, fxgraph.AtenNarrow: true, fxgraph.AtenDiagonal: true,
	fxgraph.AtenDetach: true, fxgraph.AtenFlattenUsingInts: true, fxgraph.AtenUnflattenInt: true,
	fxgraph.AtenViewAs: true, fxgraph.AtenExpandAs: true, fxgraph.AtenReshapeAs: true,
	fxgraph.AtenContiguous: true, fxgraph.AtenToDtype: true, fxgraph.AtenToDtypeLayout: true,
	fxgraph.AtenToDevice: true, fxgraph.AtenToOther: true, fxgraph.AtenTypeAs: true,
	fxgraph.AtenDropout: true, fxgraph.AtenFeatureDropout: true,
	fxgraph.AtenAlphaDropout: true, fxgraph.AtenFeatureAlphaDropout: true,
	fxgraph.AtenViewDtype: true, fxgraph.AtenUnfold: true, fxgraph.AtenMovedimInt: true,
	fxgraph.AtenMovedimIntlist: true, fxgraph.AtenMoveaxisInt: true, fxgraph.AtenMoveaxisIntlist: true,
	fxgraph.AtenSwapaxes: true, fxgraph.AtenSwapdims: true,
	fxgraph.AtenTensorSplitIndices: true, fxgraph.AtenTensorSplitSections: true,
}

// call is one serialized node being converted.
type call struct {
	b      *builder
	n      *node
	name   string // the node's name, for errors and the IR node
	target string // the functional ATen target, "aten.conv2d.default"
	// op is the operator of that target (fxgraph.OpByName), nil when
	// neither the IR nor torch's generated ATen table has it.
	op     *fxgraph.Op
	schema []fxgraph.ArgSpec
	pos    []any
	kw     map[string]any
	byName map[string]any
	// refs maps argument names to the archive value names they read.
	refs map[string]string
	outs []string // output names in order; "" for outputs torch returns as None
	// firstArg is the serialized name of the first argument when it may
	// differ from the functional schema's ("self" of an in-place variant).
	firstArg string
}

// selfArg returns the functional schema's name of the first argument.
func (c *call) selfArg() string {
	if len(c.schema) > 0 {
		return c.schema[0].Name
	}
	return "self"
}

// convertNode converts one serialized node.
func (b *builder) convertNode(n *node) error {
	target := n.Target
	name := ""
	if n.Name != nil {
		name = *n.Name
	}
	outs, err := outputNames(n)
	if err != nil {
		return b.nodeErr(name, target, ErrFormat, "outputs: %v", err)
	}
	if name == "" && len(outs) > 0 {
		name = outs[0]
	}
	switch {
	case skipTargets[target]:
		return nil
	case target == "torch.ops.higher_order.cond":
		return b.convertCond(n, name, outs)
	case target == "torch.ops.higher_order.while_loop":
		return b.convertWhileLoop(n, name, outs)
	case target == "torch.ops.higher_order.map_impl":
		return b.convertMap(n, name, outs)
	case wrapTargets[target] > 0:
		return b.convertWrap(n, name, outs)
	case strings.HasPrefix(target, "torch.ops.higher_order."):
		return b.nodeErr(name, target, ErrUnsupported, "higher-order operator %s (control flow, wrapped subgraphs) is not supported",
			strings.TrimPrefix(target, "torch.ops.higher_order."))
	case strings.HasPrefix(target, "torch.ops.aten."):
		return b.convertATen(n, name, strings.TrimPrefix(target, "torch.ops."), outs)
	case symOps[target] != nil:
		return b.convertSymOp(n, name, target, outs)
	}
	return b.nodeErr(name, target, ErrUnsupported, "operator %s is not an ATen operator the importer knows (custom operators are not supported)", target)
}

// nodeErr formats an error about a node.
func (b *builder) nodeErr(name, target string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s: node %s (%s): %s", sentinel, b.entry, name, target, fmt.Sprintf(format, args...))
}

// outputNames lists a node's output value names ("" for None outputs).
func outputNames(n *node) ([]string, error) {
	if len(n.Outputs) == 1 && n.Outputs[0].Kind == "as_tensors" {
		var list []tensorArgument
		if err := n.Outputs[0].decode(&list); err != nil {
			return nil, err
		}
		out := make([]string, len(list))
		for i, t := range list {
			out[i] = t.Name
		}
		return out, nil
	}
	out := make([]string, len(n.Outputs))
	for i, u := range n.Outputs {
		switch u.Kind {
		case "as_none":
		case "as_tensor":
			var t tensorArgument
			if err := u.decode(&t); err != nil {
				return nil, err
			}
			out[i] = t.Name
		case "as_sym_int", "as_sym_float", "as_sym_bool":
			var s struct {
				AsName string `json:"as_name"`
			}
			if err := u.decode(&s); err != nil {
				return nil, err
			}
			out[i] = s.AsName
		default:
			return nil, fmt.Errorf("%w: output %d is %s", ErrUnsupported, i, u.Kind)
		}
	}
	return out, nil
}

// convertATen converts a call of an ATen operator: through the IR operator of
// the same name, or the importer's decomposition of it. In-place variants
// (relu_, add_) are converted as their functional form and the mutated
// input's name is rebound to the result.
func (b *builder) convertATen(n *node, name, target string, outs []string) error {
	functional, inplace := functionalTarget(target)
	op, _ := fxgraph.OpByName(functional)
	c := &call{b: b, n: n, name: name, target: functional, op: op, outs: outs, byName: map[string]any{}, refs: map[string]string{}}
	if inplace {
		// The in-place schema names its first argument self; the
		// functional one may call it input (dropout_ and dropout).
		c.firstArg = "self"
	}
	if err := c.collectArgs(); err != nil {
		return err
	}
	selfName := ""
	var later []string // other names of the written memory read later
	if inplace {
		selfName = c.refs[c.selfArg()]
		if selfName == "" {
			return c.errorf(ErrUnsupported, "in-place operator on a non-tensor self")
		}
		if self, ok := b.env[selfName].(*fxgraph.Node); ok && b.state[self] {
			return c.errorf(ErrUnsupported, "in-place %s writes %s (%s); xserve serves stateless programs: export without state updates", target, self.Target, selfName)
		}
		if len(outs) != 1 {
			return c.errorf(ErrUnsupported, "in-place operator with %d outputs", len(outs))
		}
		later = b.readAllAfter(selfName)
	}
	var err error
	if b.ir.Has(op) {
		err = c.emitResult()
		if d, ok := decomp.Fallback(op); ok && err != nil && slices.ContainsFunc(c.pos, isNode) {
			// Sizes computed from the input shape where the IR operator
			// wants ints (x.repeat(batch, 1, 1), arange(x.size(1))).
			err = c.decompose(d)
		}
	} else if d, ok := decomp.Lookup(op); ok {
		err = c.decompose(d)
	} else {
		return c.unknownTarget(target)
	}
	if err != nil {
		return err
	}
	if op == fxgraph.AtenSliceTensor || op == fxgraph.AtenSelectInt {
		c.recordView()
	}
	if viewTargets[op] {
		if src := c.firstTensorRef(); src != "" {
			b.addAliases(append([]string{src}, outs...)...)
		}
	}
	if inplace {
		res, ok := b.env[outs[0]].(*fxgraph.Node)
		if !ok {
			return c.errorf(ErrFormat, "in-place operator produced no tensor")
		}
		if len(later) > 0 {
			// Another name of the written memory is read later: write the
			// result back into the view's base (or refuse).
			if err := c.writeBack(selfName, res, later); err != nil {
				return err
			}
		} else {
			b.rebind(selfName, res)
		}
		if _, ok := b.aliasClass[selfName]; ok {
			b.addAliases(selfName, outs[0])
		}
	}
	return nil
}

// functionalTarget maps "aten.relu_.default" to "aten.relu.default".
func functionalTarget(target string) (string, bool) {
	parts := strings.Split(target, ".")
	if len(parts) != 3 {
		return target, false
	}
	op := parts[1]
	if strings.HasPrefix(op, "__i") && strings.HasSuffix(op, "__") && len(op) > 5 {
		// Python's augmented operators: __iand__ is the in-place __and__.
		return parts[0] + ".__" + op[3:] + "." + parts[2], true
	}
	if strings.HasSuffix(op, "_") && !strings.HasPrefix(op, "_") && len(op) > 1 {
		return parts[0] + "." + strings.TrimSuffix(op, "_") + "." + parts[2], true
	}
	return target, false
}

// errorf formats an error about the call.
func (c *call) errorf(sentinel error, format string, args ...any) error {
	return c.b.nodeErr(c.name, c.target, sentinel, format, args...)
}

// unknownTarget is the error for an operator nobody handles.
func (c *call) unknownTarget(target string) error {
	known := c.b.ir.Targets()
	for _, op := range decomp.Ops() {
		known = append(known, op.Name)
	}
	sort.Strings(known)
	return fmt.Errorf("%w: %s: node %s calls %s, which neither the IR nor the importer's decompositions support (nearest known: %s)",
		ErrUnsupported, c.b.entry, c.name, target, strings.Join(fxgraph.Nearest(target, known, 3), ", "))
}

// collectArgs converts the node's named arguments into positional args and
// kwargs in ATen schema order: keyword-only arguments go to kwargs by name,
// the others to their schema position (gaps filled with schema defaults).
// Without a schema (an operator the generated table does not cover) the
// serialized argument kinds decide.
func (c *call) collectArgs() error {
	var sch []fxgraph.ArgSpec
	ok := c.op != nil && strings.HasPrefix(c.op.Name, "aten.")
	if ok {
		sch = c.op.Args
	}
	c.schema = sch
	pos := map[int]any{}
	maxPos := -1
	for i, na := range c.n.Inputs {
		v, err := c.b.convertArg(na.Arg)
		if err != nil {
			return c.errorf(errSentinel(err), "argument %s: %v", na.Name, trimSentinel(err))
		}
		if i == 0 && ok && na.Name == c.firstArg && len(sch) > 0 && schemaIndex(sch, na.Name) < 0 {
			na.Name = sch[0].Name
		}
		if refs := argRefs(na.Arg); len(refs) == 1 && (na.Arg.Kind == "as_tensor" || na.Arg.Kind == "as_optional_tensor") {
			c.refs[na.Name] = refs[0]
		}
		if _, dup := c.byName[na.Name]; dup {
			return c.errorf(ErrFormat, "argument %s given twice", na.Name)
		}
		c.byName[na.Name] = v
		if ok {
			idx := schemaIndex(sch, na.Name)
			if idx < 0 {
				return c.errorf(ErrUnsupported, "argument %s is not in torch 2.14's schema of %s", na.Name, c.target)
			}
			if sch[idx].Pos == fxgraph.KwOnly {
				if v != nil {
					c.kwarg(na.Name, v)
				}
				continue
			}
			pos[idx] = v
			maxPos = max(maxPos, idx)
			continue
		}
		if na.Kind != nil && *na.Kind == kindKeyword {
			if v != nil {
				c.kwarg(na.Name, v)
			}
			continue
		}
		pos[len(pos)] = v
		maxPos = len(pos) - 1
	}
	c.pos = make([]any, maxPos+1)
	for i := range c.pos {
		v, set := pos[i]
		if !set {
			if !ok {
				return c.errorf(ErrFormat, "positional argument %d is missing", i)
			}
			if !sch[i].HasDefault {
				return c.errorf(ErrFormat, "required argument %s is missing", sch[i].Name)
			}
			v = sch[i].Default
		}
		c.pos[i] = v
	}
	return nil
}

// kwarg sets a keyword argument.
func (c *call) kwarg(name string, v any) {
	if c.kw == nil {
		c.kw = map[string]any{}
	}
	c.kw[name] = v
}

// schemaIndex returns the position of argument name in sch, or -1.
func schemaIndex(sch []fxgraph.ArgSpec, name string) int {
	for i, a := range sch {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// errSentinel returns the package sentinel err stands for (ErrFormat by
// default): ErrUnsupported for this package's, the decompositions' and
// the IR's.
func errSentinel(err error) error {
	if errors.Is(err, ErrUnsupported) || errors.Is(err, decomp.ErrUnsupported) || errors.Is(err, fxgraph.ErrUnsupported) {
		return ErrUnsupported
	}
	return ErrFormat
}

// trimSentinel drops leading sentinel messages from err's text, so that
// wrapping it again does not repeat "fx: unsupported".
func trimSentinel(err error) string {
	s := err.Error()
	for {
		t := s
		for _, p := range []string{ErrUnsupported.Error() + ": ", ErrFormat.Error() + ": ", decomp.ErrUnsupported.Error() + ": ", decomp.ErrFormat.Error() + ": "} {
			t = strings.TrimPrefix(t, p)
		}
		if t == s {
			return s
		}
		s = t
	}
}

// isNode reports whether an argument is a node.
func isNode(a any) bool {
	_, ok := a.(*fxgraph.Node)
	return ok
}

// decompose converts the call by decomposition d (package decomp) and
// binds the outputs it produced.
func (c *call) decompose(d decomp.Func) error {
	dc := decomp.NewCall(c.op, c.pos, c.kw, &fxgraph.Emitter{Graph: c.b.g, IR: c.b.ir})
	for k, v := range c.byName {
		dc.Args[k] = v
	}
	dc.Outs = c.outs
	dc.Used = func(i int) bool { return i < len(c.outs) && c.outs[i] != "" && c.b.uses[c.outs[i]] > 0 }
	dc.NodeName = c.b.nodeName
	dc.Dim = c.b.dim
	if err := d(dc); err != nil {
		return c.errorf(errSentinel(err), "%s", trimSentinel(err))
	}
	for i, n := range dc.Results() {
		if n == nil {
			continue
		}
		if err := c.bind(i, n); err != nil {
			return err
		}
	}
	return nil
}

// firstTensorRef returns the archive name of the first tensor argument.
func (c *call) firstTensorRef() string {
	for _, na := range c.n.Inputs {
		if r, ok := c.refs[na.Name]; ok {
			return r
		}
	}
	return ""
}

// convertArg converts a serialized Argument into an IR argument: nodes for
// tensors and symbolic values, literals for the rest. Memory formats,
// layouts and devices carry nothing for the IR and become nil.
func (b *builder) convertArg(u union) (any, error) {
	switch u.Kind {
	case "as_none", "as_memory_format", "as_layout", "as_device":
		return nil, nil
	case "as_tensor":
		var t tensorArgument
		if err := u.decode(&t); err != nil {
			return nil, err
		}
		return b.lookupTensor(t.Name)
	case "as_tensors":
		return decodeList(u, func(t tensorArgument) (any, error) { return b.lookupTensor(t.Name) })
	case "as_optional_tensor":
		var o union
		if err := u.decode(&o); err != nil {
			return nil, err
		}
		return b.optionalTensor(o)
	case "as_optional_tensors":
		return decodeList(u, b.optionalTensor)
	case "as_sym_int", "as_sym_float", "as_sym_bool":
		var s union
		if err := u.decode(&s); err != nil {
			return nil, err
		}
		return b.symArg(s)
	case "as_sym_ints", "as_sym_floats", "as_sym_bools":
		return decodeList(u, b.symArg)
	}
	return convertLiteral(u)
}

// convertLiteral converts an Argument holding literals: numbers, booleans,
// strings, lists of them, or a scalar type.
func convertLiteral(u union) (any, error) {
	switch u.Kind {
	case "as_int":
		return decodeInt(u.Raw)
	case "as_ints":
		return decodeList(u, literal[int64])
	case "as_float":
		var f jnum
		if err := u.decode(&f); err != nil {
			return nil, err
		}
		return float64(f), nil
	case "as_floats":
		return decodeList(u, func(f jnum) (any, error) { return float64(f), nil })
	case "as_bool":
		var v bool
		err := u.decode(&v)
		return v, err
	case "as_bools":
		return decodeList(u, literal[bool])
	case "as_string":
		var s string
		err := u.decode(&s)
		return s, err
	case "as_strings":
		return decodeList(u, literal[string])
	case "as_scalar_type":
		st, err := decodeInt(u.Raw)
		if err != nil {
			return nil, err
		}
		return dtypeOf(st)
	}
	return nil, fmt.Errorf("%w: argument kind %s", ErrUnsupported, u.Kind)
}

// decodeList decodes a list Argument of T and converts each element into
// the IR list argument it returns.
func decodeList[T any](u union, conv func(T) (any, error)) (any, error) {
	var list []T
	if err := u.decode(&list); err != nil {
		return nil, err
	}
	out := make([]any, len(list))
	for i, v := range list {
		x, err := conv(v)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// literal is an element of a list of literals as it is.
func literal[T any](v T) (any, error) { return v, nil }

// lookupTensor returns the node bound to a tensor name.
func (b *builder) lookupTensor(name string) (*fxgraph.Node, error) {
	v, ok := b.env[name]
	if !ok {
		return nil, fmt.Errorf("%w: uses %s, which no earlier node or input defines", ErrFormat, name)
	}
	n, ok := v.(*fxgraph.Node)
	if !ok {
		return nil, fmt.Errorf("%w: uses %s as a tensor, but it is the constant %s", ErrFormat, name, fxgraph.FormatArg(v))
	}
	return n, nil
}

// optionalTensor reads an OptionalTensorArgument.
func (b *builder) optionalTensor(o union) (any, error) {
	switch o.Kind {
	case "as_none":
		return nil, nil
	case "as_tensor":
		var t tensorArgument
		if err := o.decode(&t); err != nil {
			return nil, err
		}
		return b.lookupTensor(t.Name)
	}
	return nil, fmt.Errorf("%w: optional tensor kind %s", ErrFormat, o.Kind)
}

// symArg reads a SymInt/SymFloat/SymBoolArgument: a name bound to a node
// (or constant input), or a literal.
func (b *builder) symArg(s union) (any, error) {
	switch s.Kind {
	case "as_name":
		var name string
		if err := s.decode(&name); err != nil {
			return nil, err
		}
		v, ok := b.env[name]
		if !ok {
			return nil, fmt.Errorf("%w: uses symbolic value %s, which no earlier node defines", ErrFormat, name)
		}
		return v, nil
	case "as_int":
		return decodeInt(s.Raw)
	case "as_float":
		var f jnum
		err := s.decode(&f)
		return float64(f), err
	case "as_bool":
		var v bool
		err := s.decode(&v)
		return v, err
	}
	return nil, fmt.Errorf("%w: symbolic argument kind %s", ErrFormat, s.Kind)
}

// emit adds a call_function node through the importers' shared
// fxgraph.Emitter: its Meta is computed at once, so that later conversions
// can read it, and it folds into a constant when its inputs are constants.
func (b *builder) emit(name string, target *fxgraph.Op, args []any, kw map[string]any) (*fxgraph.Node, error) {
	if !b.ir.Has(target) {
		return nil, fmt.Errorf("%w: the importer emits %s, which the IR does not know", ErrUnsupported, target)
	}
	if name == "" {
		name = b.freshName(target.Name)
	} else {
		name = sanitize(name)
	}
	e := fxgraph.Emitter{Graph: b.g, IR: b.ir}
	n, err := e.Emit(name, target, args, kw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	return n, nil
}

// emit adds an IR node on behalf of the call; errors name the call.
func (c *call) emit(name string, target *fxgraph.Op, args []any, kw map[string]any) (*fxgraph.Node, error) {
	n, err := c.b.emit(name, target, args, kw)
	if err != nil {
		return nil, c.errorf(errSentinel(err), "%s", trimSentinel(err))
	}
	return n, nil
}

// emitResult emits the call as the IR operator of the same target and binds
// its outputs.
func (c *call) emitResult() error {
	name := c.name
	if len(c.outs) == 1 && c.outs[0] != "" {
		name = c.outs[0]
	}
	n, err := c.emit(name, c.op, c.pos, c.kw)
	if err != nil {
		return err
	}
	return c.bindResult(n)
}

// bindResult binds the call's outputs to n: n itself for one output, or
// getitem nodes of the tuple n for the outputs something reads.
func (c *call) bindResult(n *fxgraph.Node) error {
	if !n.Meta.Tuple {
		if len(c.outs) != 1 {
			return c.errorf(ErrFormat, "torch lists %d outputs, the IR operator has one", len(c.outs))
		}
		return c.bind(0, n)
	}
	if len(c.outs) > len(n.Meta.Vals) {
		return c.errorf(ErrFormat, "torch lists %d outputs, the IR operator has %d", len(c.outs), len(n.Meta.Vals))
	}
	for i, name := range c.outs {
		if name == "" || c.b.uses[name] == 0 {
			continue
		}
		item, err := c.emit(name, fxgraph.GetItem, []any{n, int64(i)}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, item); err != nil {
			return err
		}
	}
	return nil
}

// bind binds output i of the call to n.
func (c *call) bind(i int, n *fxgraph.Node) error {
	if i >= len(c.outs) {
		return c.errorf(ErrFormat, "torch lists %d outputs, the conversion produces more", len(c.outs))
	}
	if c.outs[i] == "" {
		return nil
	}
	if err := c.b.bindValue(c.outs[i], n); err != nil {
		return c.errorf(ErrFormat, "%s", trimSentinel(err))
	}
	return nil
}

// outName returns the name of output i ("" when there is none).
func (c *call) outName(i int) string {
	if i < len(c.outs) {
		return c.outs[i]
	}
	return ""
}

// arg returns the argument called name, or its schema default.
func (c *call) arg(name string) any {
	if v, ok := c.byName[name]; ok {
		return v
	}
	if i := schemaIndex(c.schema, name); i >= 0 {
		return c.schema[i].Default
	}
	return nil
}

// tensor returns a tensor argument.
func (c *call) tensor(name string) (*fxgraph.Node, error) {
	n, ok := c.arg(name).(*fxgraph.Node)
	if !ok {
		return nil, c.errorf(ErrFormat, "argument %s is %s, want a tensor", name, fxgraph.FormatArg(c.arg(name)))
	}
	return n, nil
}

// dim returns dim i of x: an int when the IR knows it statically, else an
// aten.sym_size.int node (which specialization folds to the bucket's size).
func (b *builder) dim(x *fxgraph.Node, i int) (any, error) {
	d := x.Val().Shape[i]
	if d.IsStatic() {
		return d.Size, nil
	}
	k := symKey{x, i}
	if n, ok := b.symSize[k]; ok && n.Graph() == b.g {
		return n, nil
	}
	n, err := b.emit("", fxgraph.AtenSymSizeInt, []any{x, int64(i)}, nil)
	if err != nil {
		return nil, err
	}
	b.symSize[k] = n
	return n, nil
}

// scalarConst adds a rank-0 constant of dtype dt.
func (b *builder) scalarConst(dt tensor.DType, v float64) *fxgraph.Node {
	return b.g.AddConstant(b.freshName("scalar"), tensor.Scalar(dt, v))
}

// symOps maps the Python operators torch.export records on symbolic ints
// (sizes computed from sym_size) to IR operators on rank-0 tensors.
var symOps = map[string]*fxgraph.Op{
	"_operator.add":      fxgraph.AtenAddTensor,
	"_operator.sub":      fxgraph.AtenSubTensor,
	"_operator.mul":      fxgraph.AtenMulTensor,
	"_operator.floordiv": fxgraph.AtenDivTensorMode,
	"_operator.truediv":  fxgraph.AtenDivTensor,
	"_operator.mod":      fxgraph.AtenRemainderTensor,
	"_operator.pow":      fxgraph.AtenPowTensorTensor,
	"_operator.neg":      fxgraph.AtenNeg,
	"_operator.eq":       fxgraph.AtenEqTensor,
	"_operator.ne":       fxgraph.AtenNeTensor,
	"_operator.lt":       fxgraph.AtenLtTensor,
	"_operator.le":       fxgraph.AtenLeTensor,
	"_operator.gt":       fxgraph.AtenGtTensor,
	"_operator.ge":       fxgraph.AtenGeTensor,
	"_operator.and_":     fxgraph.AtenLogicalAnd,
	"_operator.or_":      fxgraph.AtenLogicalOr,
	"torch.sym_max":      fxgraph.AtenMaximum,
	"torch.sym_min":      fxgraph.AtenMinimum,
	"torch.sym_not":      fxgraph.AtenLogicalNot,
	"torch.sym_float":    fxgraph.Aten_ToCopy,
	"torch.sym_int":      fxgraph.AtenTrunc,
}

// convertSymOp converts an operator on symbolic values. Literal operands
// become rank-0 constants, so every IR operand is a tensor.
func (b *builder) convertSymOp(n *node, name, target string, outs []string) error {
	irTarget := symOps[target]
	var args []any
	for _, na := range n.Inputs {
		v, err := b.convertArg(na.Arg)
		if err != nil {
			return b.nodeErr(name, target, errSentinel(err), "argument %s: %v", na.Name, trimSentinel(err))
		}
		switch x := v.(type) {
		case *fxgraph.Node:
			args = append(args, x)
		case int64:
			args = append(args, b.scalarConst(tensor.Int64, float64(x)))
		case float64:
			args = append(args, b.scalarConst(tensor.Float64, x))
		case bool:
			f := 0.0
			if x {
				f = 1
			}
			args = append(args, b.scalarConst(tensor.Bool, f))
		default:
			return b.nodeErr(name, target, ErrUnsupported, "argument %s is %s", na.Name, fxgraph.FormatArg(v))
		}
	}
	if len(outs) != 1 || outs[0] == "" {
		return b.nodeErr(name, target, ErrFormat, "%d outputs, want 1", len(outs))
	}
	var kw map[string]any
	switch target {
	case "_operator.floordiv":
		kw = map[string]any{"rounding_mode": "floor"}
	case "torch.sym_float":
		kw = map[string]any{"dtype": tensor.Float64}
	}
	want := 2
	switch irTarget {
	case fxgraph.AtenNeg, fxgraph.AtenLogicalNot, fxgraph.Aten_ToCopy, fxgraph.AtenTrunc:
		want = 1
	}
	if len(args) != want {
		return b.nodeErr(name, target, ErrFormat, "%d arguments, want %d", len(args), want)
	}
	res, err := b.emit(outs[0], irTarget, args, kw)
	if err != nil {
		return b.nodeErr(name, target, errSentinel(err), "%s", trimSentinel(err))
	}
	if target == "torch.sym_int" {
		if res, err = b.emit(outs[0], fxgraph.Aten_ToCopy, []any{res}, map[string]any{"dtype": tensor.Int64}); err != nil {
			return b.nodeErr(name, target, errSentinel(err), "%s", trimSentinel(err))
		}
	}
	return b.bindValue(outs[0], res)
}
