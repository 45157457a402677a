package fxgraph

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// ErrInvalid is wrapped by every error Validate returns.
var ErrInvalid = errors.New("fxgraph: invalid graph")

// Graph is an ordered list of nodes plus the constant tensors and subgraphs
// they refer to. The zero value is not usable; call New.
type Graph struct {
	nodes []*Node
	names map[string]*Node
	// Attrs maps get_attr targets to constant tensors (weights, buffers,
	// folded constants).
	Attrs map[string]*tensor.Tensor
	// Subgraphs maps get_attr targets to graphs used by control-flow ops
	// (cond's branches, while_loop's condition and body).
	Subgraphs map[string]*Graph
	// OutputNames are the model's names for the returned values, in order
	// (ONNX graph output names); empty means the returned nodes' names.
	OutputNames []string
	// SymbolRanges bounds the sizes a symbolic dim may take (from
	// torch.export's range constraints); a symbol without an entry is
	// unbounded. Shape buckets outside a symbol's range are config errors.
	SymbolRanges map[string]SymbolRange

	insertAt int // index new call_function nodes are inserted at; -1 = before output
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
	return &Graph{names: map[string]*Node{}, Attrs: map[string]*tensor.Tensor{}, Subgraphs: map[string]*Graph{}, insertAt: -1}
}

// Nodes returns the nodes in order. The slice is a copy; the nodes are not.
func (g *Graph) Nodes() []*Node { return append([]*Node(nil), g.nodes...) }

// Len returns the number of nodes.
func (g *Graph) Len() int { return len(g.nodes) }

// Node returns the node with the given name, or nil.
func (g *Graph) Node(name string) *Node { return g.names[name] }

// Placeholders returns the input nodes in order.
func (g *Graph) Placeholders() []*Node {
	var out []*Node
	for _, n := range g.nodes {
		if n.Op == Placeholder {
			out = append(out, n)
		}
	}
	return out
}

// OutputNode returns the output node, or nil when none was set.
func (g *Graph) OutputNode() *Node {
	if len(g.nodes) > 0 && g.nodes[len(g.nodes)-1].Op == Output {
		return g.nodes[len(g.nodes)-1]
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

// uniqueName returns want (sanitized) if unused, else want_1, want_2, ...
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
	for i := 1; ; i++ {
		c := fmt.Sprintf("%s_%d", want, i)
		if _, ok := g.names[c]; !ok {
			return c
		}
	}
}

func (g *Graph) renumber() {
	for i, n := range g.nodes {
		n.index = i
	}
}

func (g *Graph) insert(n *Node, at int) *Node {
	if at < 0 || at > len(g.nodes) {
		at = len(g.nodes)
	}
	n.graph = g
	if g.insertAt >= 0 && at <= g.insertAt {
		g.insertAt++ // keep the insertion point on the same node
	}
	g.nodes = append(g.nodes, nil)
	copy(g.nodes[at+1:], g.nodes[at:])
	g.nodes[at] = n
	g.names[n.Name] = n
	g.renumber()
	for _, in := range n.InputNodes() {
		in.users = append(in.users, n)
	}
	return n
}

// lastOfKind returns the index after the last node of the given opcodes at the
// front of the graph (placeholders first, then get_attrs, as FX orders them).
func (g *Graph) frontEnd(ops ...Opcode) int {
	i := 0
	for i < len(g.nodes) {
		ok := false
		for _, op := range ops {
			if g.nodes[i].Op == op {
				ok = true
			}
		}
		if !ok {
			break
		}
		i++
	}
	return i
}

// AddPlaceholder adds a graph input after the existing inputs.
func (g *Graph) AddPlaceholder(name string, meta TensorMeta) *Node {
	n := &Node{Op: Placeholder, Name: g.uniqueName(name), Target: name, Meta: Meta{Vals: []TensorMeta{meta}}}
	return g.insert(n, g.frontEnd(Placeholder))
}

// AddConstant stores t in Attrs under a unique key derived from name and adds
// the get_attr node reading it, after the inputs and other get_attrs.
func (g *Graph) AddConstant(name string, t *tensor.Tensor) *Node {
	key := name
	for i := 1; ; i++ {
		if _, used := g.Attrs[key]; !used {
			break
		}
		key = fmt.Sprintf("%s_%d", name, i)
	}
	g.Attrs[key] = t
	meta := TensorMeta{DType: t.DType, Shape: StaticShape(t.Shape...)}
	n := &Node{Op: GetAttr, Name: g.uniqueName(key), Target: key, Meta: Meta{Vals: []TensorMeta{meta}}}
	return g.insert(n, g.frontEnd(Placeholder, GetAttr))
}

// AddSubgraph stores sub under a unique key derived from name and adds the
// get_attr node that control-flow ops take as an argument.
func (g *Graph) AddSubgraph(name string, sub *Graph) *Node {
	key := name
	for i := 1; ; i++ {
		if _, used := g.Subgraphs[key]; !used {
			break
		}
		key = fmt.Sprintf("%s_%d", name, i)
	}
	g.Subgraphs[key] = sub
	n := &Node{Op: GetAttr, Name: g.uniqueName(key), Target: key}
	return g.insert(n, g.frontEnd(Placeholder, GetAttr))
}

// SetInsertPoint makes AddCall insert new nodes just before ref; nil restores
// the default (append before the output node). It returns the previous point
// so callers can restore it.
func (g *Graph) SetInsertPoint(ref *Node) *Node {
	var prev *Node
	if g.insertAt >= 0 && g.insertAt < len(g.nodes) {
		prev = g.nodes[g.insertAt]
	}
	if ref == nil {
		g.insertAt = -1
	} else {
		g.insertAt = ref.index
	}
	return prev
}

// AddCall adds a call_function node. Its name derives from the target as in
// FX ("aten.add.Tensor" -> add, add_1, ...). Meta is left for the caller or
// shape propagation to fill.
func (g *Graph) AddCall(target string, args []any, kwargs map[string]any) *Node {
	return g.AddNamedCall("", target, args, kwargs)
}

// AddNamedCall is AddCall with a requested node name (made unique).
func (g *Graph) AddNamedCall(name, target string, args []any, kwargs map[string]any) *Node {
	if name == "" {
		name = baseName(target)
	}
	n := &Node{Op: CallFunction, Name: g.uniqueName(name), Target: target, Args: args, Kwargs: kwargs}
	at := g.insertAt
	if at < 0 {
		at = len(g.nodes)
		if out := g.OutputNode(); out != nil {
			at = out.index
		}
		return g.insert(n, at)
	}
	g.insert(n, at)
	g.insertAt = at + 1
	return n
}

// SetOutput adds (or replaces) the output node returning values.
func (g *Graph) SetOutput(values ...*Node) *Node {
	if old := g.OutputNode(); old != nil {
		g.unlink(old)
		g.nodes = g.nodes[:len(g.nodes)-1]
		delete(g.names, old.Name)
		old.graph = nil
	}
	list := make([]any, len(values))
	for i, v := range values {
		list[i] = v
	}
	n := &Node{Op: Output, Name: g.uniqueName("output"), Target: "output", Args: []any{list}}
	return g.insert(n, len(g.nodes))
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
	users := old.Users()
	for _, u := range users {
		swap := func(m *Node) any {
			if m == old {
				return repl
			}
			return m
		}
		args := make([]any, len(u.Args))
		for i, a := range u.Args {
			args[i] = mapNodes(a, swap)
		}
		var kw map[string]any
		if u.Kwargs != nil {
			kw = make(map[string]any, len(u.Kwargs))
			for k, v := range u.Kwargs {
				kw[k] = mapNodes(v, swap)
			}
		}
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
	g.unlink(n)
	g.nodes = append(g.nodes[:n.index], g.nodes[n.index+1:]...)
	if g.insertAt > n.index {
		g.insertAt--
	}
	delete(g.names, n.Name)
	if n.Op == GetAttr {
		if !g.attrUsedElsewhere(n) {
			delete(g.Attrs, n.Target)
			delete(g.Subgraphs, n.Target)
		}
	}
	n.graph = nil
	g.renumber()
	return nil
}

func (g *Graph) attrUsedElsewhere(n *Node) bool {
	for _, m := range g.nodes {
		if m != n && m.Op == GetAttr && m.Target == n.Target {
			return true
		}
	}
	return false
}

// Validate checks that every node belongs to g, names are unique, arguments
// refer only to earlier nodes of g, users lists agree with arguments, get_attr
// targets exist, and exactly one output node ends the graph. Its errors say
// what to fix and wrap ErrInvalid.
func (g *Graph) Validate() error {
	seen := map[*Node]bool{}
	names := map[string]bool{}
	for i, n := range g.nodes {
		if n.graph != g {
			return fmt.Errorf("%w: node %s belongs to another graph", ErrInvalid, n.Name)
		}
		if n.index != i {
			return fmt.Errorf("%w: node %s has a stale index", ErrInvalid, n.Name)
		}
		if names[n.Name] {
			return fmt.Errorf("%w: two nodes are named %q", ErrInvalid, n.Name)
		}
		names[n.Name] = true
		switch n.Op {
		case Placeholder, CallFunction:
		case GetAttr:
			_, isT := g.Attrs[n.Target]
			_, isG := g.Subgraphs[n.Target]
			if !isT && !isG {
				return fmt.Errorf("%w: get_attr %s reads %q, which the graph does not hold", ErrInvalid, n.Name, n.Target)
			}
		case Output:
			if i != len(g.nodes)-1 {
				return fmt.Errorf("%w: output node %s is not the last node", ErrInvalid, n.Name)
			}
		default:
			return fmt.Errorf("%w: node %s has unknown opcode %q", ErrInvalid, n.Name, n.Op)
		}
		for _, in := range n.InputNodes() {
			if in.graph != g {
				return fmt.Errorf("%w: node %s uses %s, which is not in this graph", ErrInvalid, n.Name, in.Name)
			}
			if !seen[in] {
				return fmt.Errorf("%w: node %s uses %s before it is defined (graph is not in topological order)", ErrInvalid, n.Name, in.Name)
			}
			found := false
			for _, u := range in.users {
				if u == n {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("%w: %s is missing user %s (edit nodes through Graph methods)", ErrInvalid, in.Name, n.Name)
			}
		}
		for _, u := range n.users {
			if u.graph != g {
				return fmt.Errorf("%w: node %s lists user %s, which is not in this graph", ErrInvalid, n.Name, u.Name)
			}
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

// Clone returns a deep copy of the graph structure. Constant tensors are
// shared (they are treated as immutable); subgraphs are cloned.
func (g *Graph) Clone() *Graph {
	c := New()
	c.OutputNames = append([]string(nil), g.OutputNames...)
	for k, v := range g.SymbolRanges {
		if c.SymbolRanges == nil {
			c.SymbolRanges = map[string]SymbolRange{}
		}
		c.SymbolRanges[k] = v
	}
	for k, v := range g.Attrs {
		c.Attrs[k] = v
	}
	for k, v := range g.Subgraphs {
		c.Subgraphs[k] = v.Clone()
	}
	m := map[*Node]*Node{}
	swap := func(n *Node) any { return m[n] }
	for _, n := range g.nodes {
		cn := &Node{Op: n.Op, Name: n.Name, Target: n.Target, Meta: cloneMeta(n.Meta)}
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
		c.insert(cn, len(c.nodes))
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
	for i := len(g.nodes) - 1; i >= 0; i-- {
		n := g.nodes[i]
		if (n.Op == CallFunction || n.Op == GetAttr) && len(n.users) == 0 {
			if err := g.Erase(n); err == nil {
				erased++
			}
		}
	}
	return erased
}
