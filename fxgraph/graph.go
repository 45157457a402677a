package fxgraph

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// ErrInvalid is wrapped by every error Validate returns.
var ErrInvalid = errors.New("fxgraph: invalid graph")

// Graph is an ordered list of nodes plus the constant tensors and subgraphs
// they refer to. The zero value is not usable; call New.
//
// Nodes form a doubly linked list in three sections, as FX orders them:
// placeholders, then get_attrs, then call_functions ending with the output
// node. Every edit (adding, naming, erasing a node) takes constant time
// (amortized), so building, folding and DCE are linear in the graph's size.
type Graph struct {
	head, tail *Node
	count      int
	secLast    [2]*Node // last placeholder, last get_attr (nil when none)
	names      map[string]*Node
	suffix     map[string]int // per requested name, the last suffix handed out
	attrSuffix map[string]int // the same for Attrs/Subgraphs keys
	attrRefs   map[string]int // get_attr nodes per target
	// Attrs maps get_attr targets to constant tensors (weights, buffers,
	// folded constants).
	Attrs map[string]*tensor.Tensor
	// Subgraphs maps get_attr targets to graphs used by control-flow ops
	// (cond's branches, while_loop's condition and body).
	Subgraphs map[string]*Graph
	// OutputNames are the model's names for the returned values, in order
	// (ONNX graph output names); empty means the returned nodes' names.
	OutputNames []string
	// Bounded lists the outputs whose size along one axis depends on the
	// values computed (ONNX NonZero): see BoundedOutput.
	Bounded []BoundedOutput
	// Guards lists the outputs that say a part of the model xserve could
	// not build was reached at run time: see GuardOutput.
	Guards []GuardOutput
	// SymbolRanges bounds the sizes a symbolic dim may take (from
	// torch.export's range constraints); a symbol without an entry is
	// unbounded. Shape buckets outside a symbol's range are config errors.
	SymbolRanges map[string]SymbolRange
	// SymbolExprs maps a derived symbol, one an input dim carries that is
	// an expression of other symbols (torch.export's "s49 + 1"), to that
	// expression. A caller binds the plain symbols and evaluates the derived
	// ones (BindDerived); they are never free.
	SymbolExprs map[string]*SymExpr

	insertBefore *Node // AddCall inserts before this node; nil = before output
}

// SymbolRange is the inclusive range of sizes a symbol may take. Max < 0
// means no upper bound.
type SymbolRange struct {
	Min, Max int64
}

// Contains reports whether size is within the range.
func (r SymbolRange) Contains(size int64) bool {
	return size >= r.Min && (r.Max < 0 || size <= r.Max)
}

// String prints "[1, 64]" or "[2, inf]".
func (r SymbolRange) String() string {
	if r.Max < 0 {
		return fmt.Sprintf("[%d, inf]", r.Min)
	}
	return fmt.Sprintf("[%d, %d]", r.Min, r.Max)
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{
		names: map[string]*Node{}, suffix: map[string]int{}, attrSuffix: map[string]int{}, attrRefs: map[string]int{},
		Attrs: map[string]*tensor.Tensor{}, Subgraphs: map[string]*Graph{},
	}
}

// Nodes returns the nodes in order. The slice is a copy; the nodes are not.
func (g *Graph) Nodes() []*Node {
	out := make([]*Node, 0, g.count)
	for n := g.head; n != nil; n = n.next {
		out = append(out, n)
	}
	return out
}

// Len returns the number of nodes.
func (g *Graph) Len() int { return g.count }

// Node returns the node with the given name, or nil.
func (g *Graph) Node(name string) *Node { return g.names[name] }

// Placeholders returns the input nodes in order.
func (g *Graph) Placeholders() []*Node {
	var out []*Node
	for n := g.head; n != nil && n.sect == 0; n = n.next {
		out = append(out, n)
	}
	return out
}

// OutputNode returns the output node, or nil when none was set.
func (g *Graph) OutputNode() *Node {
	if g.tail != nil && g.tail.Opcode == Output {
		return g.tail
	}
	return nil
}

// OutputName returns the model's name for returned value i.
func (g *Graph) OutputName(i int) string {
	if i < len(g.OutputNames) && g.OutputNames[i] != "" {
		return g.OutputNames[i]
	}
	if outs := g.Outputs(); i < len(outs) {
		return outs[i].Name
	}
	return fmt.Sprintf("output_%d", i)
}

// Outputs returns the nodes the graph returns.
func (g *Graph) Outputs() []*Node {
	out := g.OutputNode()
	if out == nil || len(out.Args) == 0 {
		return nil
	}
	var res []*Node
	walkNodes(out.Args[0], func(n *Node) { res = append(res, n) })
	return res
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// baseName derives FX's default node name from a target:
// "aten.convolution.default" -> "convolution".
func baseName(target string) string {
	parts := strings.Split(target, ".")
	name := target
	if len(parts) >= 2 && (parts[0] == "aten" || parts[0] == "prims" || parts[0] == "xserve") {
		name = parts[1]
	}
	name = nonIdent.ReplaceAllString(name, "_")
	name = strings.Trim(name, "_")
	if name == "" {
		name = "node"
	}
	if name[0] >= '0' && name[0] <= '9' {
		name = "_" + name
	}
	return name
}

// uniqueName returns want (sanitized) if unused, else want_1, want_2, ...:
// the first free one after the last suffix handed out for want, so naming n
// nodes alike takes O(n) in all.
func (g *Graph) uniqueName(want string) string {
	want = nonIdent.ReplaceAllString(want, "_")
	if want == "" {
		want = "node"
	}
	if want[0] >= '0' && want[0] <= '9' {
		want = "_" + want
	}
	if _, ok := g.names[want]; !ok {
		return want
	}
	for i := g.suffix[want] + 1; ; i++ {
		c := want + "_" + strconv.Itoa(i)
		if _, ok := g.names[c]; !ok {
			g.suffix[want] = i
			return c
		}
	}
}

// attrKey returns a key derived from name that neither Attrs nor Subgraphs
// holds, the same way.
func (g *Graph) attrKey(name string) string {
	used := func(k string) bool {
		_, t := g.Attrs[k]
		_, s := g.Subgraphs[k]
		return t || s
	}
	if !used(name) {
		return name
	}
	for i := g.attrSuffix[name] + 1; ; i++ {
		c := name + "_" + strconv.Itoa(i)
		if !used(c) {
			g.attrSuffix[name] = i
			return c
		}
	}
}

// keyGap spaces the order keys of nodes appended to a section, leaving room
// for nodes inserted between them later.
const keyGap = 1 << 20

// section returns which part of the graph n belongs in: 0 placeholders,
// 1 get_attrs, 2 call_functions and the output.
func section(op Opcode) uint8 {
	switch op {
	case Placeholder:
		return 0
	case GetAttr:
		return 1
	}
	return 2
}

// before reports whether a comes before b in the graph.
func before(a, b *Node) bool {
	if a.sect != b.sect {
		return a.sect < b.sect
	}
	return a.key < b.key
}

// sectionFirst returns the first node of section s, or nil.
func (g *Graph) sectionFirst(s uint8) *Node {
	for n := g.head; n != nil; {
		if n.sect >= s {
			if n.sect == s {
				return n
			}
			return nil
		}
		// jump to the end of n's section
		if last := g.secLast[n.sect]; last != nil {
			n = last.next
		} else {
			n = n.next
		}
	}
	return nil
}

// link puts n into the list after prev (nil: at the head) and gives it an
// order key between its neighbours in its section, relabelling the section
// when there is no room left.
func (g *Graph) link(n, prev *Node) *Node {
	n.graph = g
	n.sect = section(n.Opcode)
	n.prev = prev
	if prev == nil {
		n.next = g.head
		g.head = n
	} else {
		n.next = prev.next
		prev.next = n
	}
	if n.next == nil {
		g.tail = n
	} else {
		n.next.prev = n
	}
	g.count++
	if n.sect < 2 && (g.secLast[n.sect] == nil || g.secLast[n.sect] == prev) {
		g.secLast[n.sect] = n
	}
	var lo int64
	if prev != nil && prev.sect == n.sect {
		lo = prev.key
	}
	switch next := n.next; {
	case n.Opcode == Output:
		n.key = math.MaxInt64
	case next == nil || next.sect != n.sect || next.Opcode == Output:
		if lo > math.MaxInt64/2 {
			g.relabel(n.sect)
		} else {
			n.key = lo + keyGap
		}
	case next.key-lo >= 2:
		n.key = lo + (next.key-lo)/2
	default:
		g.relabel(n.sect)
	}
	g.names[n.Name] = n
	if n.Opcode == GetAttr {
		g.attrRefs[n.Target]++
	}
	for _, in := range n.InputNodes() {
		in.users = append(in.users, n)
	}
	return n
}

// relabel spaces the order keys of section s evenly again.
func (g *Graph) relabel(s uint8) {
	var k int64
	for n := g.sectionFirst(s); n != nil && n.sect == s; n = n.next {
		if n.Opcode == Output {
			n.key = math.MaxInt64
			continue
		}
		k += keyGap
		n.key = k
	}
}

// insert adds n at the end of its section (call_functions: before the
// output node, or before the insert point when one is set).
func (g *Graph) insert(n *Node) *Node {
	switch section(n.Opcode) {
	case 0:
		return g.link(n, g.secLast[0])
	case 1:
		prev := g.secLast[1]
		if prev == nil {
			prev = g.secLast[0]
		}
		return g.link(n, prev)
	}
	if n.Opcode != Output {
		if at := g.insertBefore; at != nil && at.graph == g {
			return g.link(n, at.prev)
		}
		if out := g.OutputNode(); out != nil {
			return g.link(n, out.prev)
		}
	}
	return g.link(n, g.tail)
}

// AddPlaceholder adds a graph input after the existing inputs.
func (g *Graph) AddPlaceholder(name string, meta TensorMeta) *Node {
	n := &Node{Opcode: Placeholder, Name: g.uniqueName(name), Target: name, Meta: Meta{Vals: []TensorMeta{meta}}}
	return g.insert(n)
}

// AddConstant stores t in Attrs under a unique key derived from name and adds
// the get_attr node reading it, after the inputs and other get_attrs.
func (g *Graph) AddConstant(name string, t *tensor.Tensor) *Node {
	key := g.attrKey(name)
	g.Attrs[key] = t
	meta := TensorMeta{DType: t.DType, Shape: StaticShape(t.Shape...)}
	n := &Node{Opcode: GetAttr, Name: g.uniqueName(key), Target: key, Meta: Meta{Vals: []TensorMeta{meta}}}
	return g.insert(n)
}

// AddSubgraph stores sub under a unique key derived from name and adds the
// get_attr node that control-flow ops take as an argument.
func (g *Graph) AddSubgraph(name string, sub *Graph) *Node {
	key := g.attrKey(name)
	g.Subgraphs[key] = sub
	n := &Node{Opcode: GetAttr, Name: g.uniqueName(key), Target: key}
	return g.insert(n)
}

// SetInsertPoint makes AddCall insert new nodes just before ref; nil restores
// the default (append before the output node). It returns the previous point
// so callers can restore it.
func (g *Graph) SetInsertPoint(ref *Node) *Node {
	prev := g.insertBefore
	if prev != nil && prev.graph != g {
		prev = nil
	}
	g.insertBefore = ref
	return prev
}

// AddCall adds a call_function node of op. Its name derives from the op's
// name as in FX ("aten.add.Tensor" -> add, add_1, ...). Meta is left for the
// caller or shape propagation to fill.
func (g *Graph) AddCall(op *Op, args []any, kwargs map[string]any) *Node {
	return g.AddNamedCall("", op, args, kwargs)
}

// AddNamedCall is AddCall with a requested node name (made unique).
func (g *Graph) AddNamedCall(name string, op *Op, args []any, kwargs map[string]any) *Node {
	if name == "" {
		name = baseName(op.Name)
	}
	n := &Node{Opcode: CallFunction, Op: op, Name: g.uniqueName(name), Target: op.Name, Args: args, Kwargs: kwargs}
	return g.insert(n)
}

// SetOutput adds (or replaces) the output node returning values.
func (g *Graph) SetOutput(values ...*Node) *Node {
	if old := g.OutputNode(); old != nil {
		g.remove(old)
	}
	list := make([]any, len(values))
	for i, v := range values {
		list[i] = v
	}
	n := &Node{Opcode: Output, Name: g.uniqueName("output"), Target: "output", Args: []any{list}}
	return g.insert(n)
}

// remove unlinks n from the list and from its inputs' users.
func (g *Graph) remove(n *Node) {
	g.unlink(n)
	if n.prev == nil {
		g.head = n.next
	} else {
		n.prev.next = n.next
	}
	if n.next == nil {
		g.tail = n.prev
	} else {
		n.next.prev = n.prev
	}
	if n.sect < 2 && g.secLast[n.sect] == n {
		g.secLast[n.sect] = nil
		if n.prev != nil && n.prev.sect == n.sect {
			g.secLast[n.sect] = n.prev
		}
	}
	if g.insertBefore == n {
		g.insertBefore = n.next
	}
	if n.Opcode == GetAttr {
		g.attrRefs[n.Target]--
	}
	delete(g.names, n.Name)
	g.count--
	n.graph, n.prev, n.next = nil, nil, nil
}

func (g *Graph) unlink(n *Node) {
	for _, in := range n.InputNodes() {
		in.users = removeNode(in.users, n)
	}
}

func removeNode(list []*Node, n *Node) []*Node {
	out := list[:0]
	for _, m := range list {
		if m != n {
			out = append(out, m)
		}
	}
	return out
}

// SetArgs replaces n's args and kwargs, keeping users right.
func (g *Graph) SetArgs(n *Node, args []any, kwargs map[string]any) {
	g.unlink(n)
	n.Args, n.Kwargs = args, kwargs
	for _, in := range n.InputNodes() {
		in.users = append(in.users, n)
	}
}

// ReplaceAllUses makes every user of old use repl instead and returns the
// number of users changed.
func (g *Graph) ReplaceAllUses(old, repl *Node) int {
	users := append([]*Node(nil), old.users...)
	for _, u := range users {
		swap := func(m *Node) any {
			if m == old {
				return repl
			}
			return m
		}
		args, kw := mapArgs(u, swap)
		g.SetArgs(u, args, kw)
	}
	return len(users)
}

// Erase removes n from the graph. It is an error to erase a node that still
// has users.
func (g *Graph) Erase(n *Node) error {
	if n.graph != g {
		return fmt.Errorf("fxgraph: erase %s: node is not in this graph", n.Name)
	}
	if len(n.users) > 0 {
		names := make([]string, len(n.users))
		for i, u := range n.Users() {
			names[i] = u.Name
		}
		return fmt.Errorf("fxgraph: erase %s: still used by %s", n.Name, strings.Join(names, ", "))
	}
	g.remove(n)
	if n.Opcode == GetAttr && g.attrRefs[n.Target] <= 0 {
		delete(g.attrRefs, n.Target)
		delete(g.Attrs, n.Target)
		delete(g.Subgraphs, n.Target)
	}
	return nil
}

// Validate checks that every node belongs to g, names are unique, arguments
// refer only to earlier nodes of g, users lists agree with arguments, get_attr
// targets exist, and exactly one output node ends the graph. Its errors say
// what to fix and wrap ErrInvalid.
func (g *Graph) Validate() error {
	seen := make(map[*Node]bool, g.count)
	names := make(map[string]bool, g.count)
	var prev *Node
	for n := g.head; n != nil; prev, n = n, n.next {
		if n.graph != g {
			return fmt.Errorf("%w: node %s belongs to another graph", ErrInvalid, n.Name)
		}
		if n.prev != prev || (prev != nil && !before(prev, n)) || n.sect != section(n.Opcode) {
			return fmt.Errorf("%w: node %s is out of place in the node list (edit nodes through Graph methods)", ErrInvalid, n.Name)
		}
		if names[n.Name] {
			return fmt.Errorf("%w: two nodes are named %q", ErrInvalid, n.Name)
		}
		names[n.Name] = true
		if err := g.validateOpcode(n); err != nil {
			return err
		}
		if err := g.validateEdges(n, seen); err != nil {
			return err
		}
		seen[n] = true
	}
	if g.OutputNode() == nil {
		return fmt.Errorf("%w: no output node (call SetOutput)", ErrInvalid)
	}
	for name, sub := range g.Subgraphs {
		if err := sub.Validate(); err != nil {
			return fmt.Errorf("subgraph %s: %w", name, err)
		}
	}
	return nil
}

// validateOpcode checks what n's opcode asks of it.
func (g *Graph) validateOpcode(n *Node) error {
	switch n.Opcode {
	case Placeholder:
	case CallFunction:
		if n.Op == nil || n.Target != n.Op.Name {
			return fmt.Errorf("%w: call_function %s calls %q but holds no such operator (build call nodes with AddCall)", ErrInvalid, n.Name, n.Target)
		}
	case GetAttr:
		_, isT := g.Attrs[n.Target]
		_, isG := g.Subgraphs[n.Target]
		if !isT && !isG {
			return fmt.Errorf("%w: get_attr %s reads %q, which the graph does not hold", ErrInvalid, n.Name, n.Target)
		}
	case Output:
		if n != g.tail {
			return fmt.Errorf("%w: output node %s is not the last node", ErrInvalid, n.Name)
		}
	default:
		return fmt.Errorf("%w: node %s has unknown opcode %q", ErrInvalid, n.Name, n.Opcode)
	}
	return nil
}

// validateEdges checks that n's inputs are in g, defined before it (seen)
// and list n as a user, and that its users are in g.
func (g *Graph) validateEdges(n *Node, seen map[*Node]bool) error {
	for _, in := range n.InputNodes() {
		if in.graph != g {
			return fmt.Errorf("%w: node %s uses %s, which is not in this graph", ErrInvalid, n.Name, in.Name)
		}
		if !seen[in] {
			return fmt.Errorf("%w: node %s uses %s before it is defined (graph is not in topological order)", ErrInvalid, n.Name, in.Name)
		}
		if !slices.Contains(in.users, n) {
			return fmt.Errorf("%w: %s is missing user %s (edit nodes through Graph methods)", ErrInvalid, in.Name, n.Name)
		}
	}
	for _, u := range n.users {
		if u.graph != g {
			return fmt.Errorf("%w: node %s lists user %s, which is not in this graph", ErrInvalid, n.Name, u.Name)
		}
	}
	return nil
}

// Clone returns a deep copy of the graph structure. Constant tensors are
// shared (they are treated as immutable); subgraphs are cloned.
func (g *Graph) Clone() *Graph {
	c := New()
	c.OutputNames = append([]string(nil), g.OutputNames...)
	c.Bounded = append([]BoundedOutput(nil), g.Bounded...)
	c.Guards = append([]GuardOutput(nil), g.Guards...)
	for k, v := range g.SymbolRanges {
		if c.SymbolRanges == nil {
			c.SymbolRanges = map[string]SymbolRange{}
		}
		c.SymbolRanges[k] = v
	}
	for k, v := range g.SymbolExprs {
		if c.SymbolExprs == nil {
			c.SymbolExprs = map[string]*SymExpr{}
		}
		c.SymbolExprs[k] = v
	}
	for k, v := range g.Attrs {
		c.Attrs[k] = v
	}
	for k, v := range g.Subgraphs {
		c.Subgraphs[k] = v.Clone()
	}
	m := map[*Node]*Node{}
	swap := func(n *Node) any { return m[n] }
	for n := g.head; n != nil; n = n.next {
		cn := &Node{Opcode: n.Opcode, Op: n.Op, Name: n.Name, Target: n.Target, Meta: cloneMeta(n.Meta)}
		cn.Args = make([]any, len(n.Args))
		for i, a := range n.Args {
			cn.Args[i] = mapNodes(a, swap)
		}
		if n.Kwargs != nil {
			cn.Kwargs = map[string]any{}
			for k, v := range n.Kwargs {
				cn.Kwargs[k] = mapNodes(v, swap)
			}
		}
		m[n] = cn
		c.insert(cn)
	}
	return c
}

func cloneMeta(m Meta) Meta {
	out := Meta{Tuple: m.Tuple, Vals: make([]TensorMeta, len(m.Vals))}
	for i, v := range m.Vals {
		out.Vals[i] = TensorMeta{DType: v.DType, Shape: v.Shape.Clone()}
	}
	return out
}

// EliminateDeadCode erases call_function and get_attr nodes whose results
// nothing uses, and returns how many it erased. Placeholders stay: they are
// the graph's signature.
func (g *Graph) EliminateDeadCode() int {
	erased := 0
	for n := g.tail; n != nil; {
		prev := n.prev // erasing n may make earlier nodes dead, never later ones
		if (n.Opcode == CallFunction || n.Opcode == GetAttr) && len(n.users) == 0 {
			if err := g.Erase(n); err == nil {
				erased++
			}
		}
		n = prev
	}
	return erased
}

// GuardOutput describes a bool scalar graph output that is true when the run
// reached a part of the model the importer could not build (the branch of
// an If with a run-time condition that cannot be converted at these input
// sizes, which the program replaces by the other branch). Guard outputs
// come last, after the count outputs of BoundedOutput; the host checks and
// drops them (lower.Program.CheckGuards), failing the run with Message when
// one is true, so a result computed in place of the missing part is never
// returned.
type GuardOutput struct {
	Output  int
	Message string
}

// ModelOutputs returns the number of g's outputs that are not guards.
func (g *Graph) ModelOutputs() int { return len(g.Outputs()) - len(g.Guards) }

// DeclaredOutputs returns the number of the model's own outputs: neither
// the counts of bounded outputs nor guards.
func (g *Graph) DeclaredOutputs() int { return g.ModelOutputs() - len(g.Bounded) }

// BoundedOutput describes a graph output whose size along Axis is known only
// at run time. The program returns it padded to a static upper bound (its
// Meta's size along Axis) and returns its valid size as the int64 scalar
// output Count, which the graph appends after the model's own outputs; the
// host slices output Output to its first Count entries along Axis and drops
// the count outputs (lower.Program.Trim). What the padding holds is
// unspecified.
type BoundedOutput struct {
	Output, Axis, Count int
}
