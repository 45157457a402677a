package fxgraph

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// Opcode is what kind of node a Node is. The set is closed.
type Opcode string

// The four opcodes of the IR, as in torch.fx.
const (
	// Placeholder is a graph input. Target is the input name.
	Placeholder Opcode = "placeholder"
	// GetAttr reads a constant tensor of the graph. Target is its key in Graph.Attrs.
	GetAttr Opcode = "get_attr"
	// CallFunction applies the operator Op (Target is its name) to Args and
	// Kwargs.
	CallFunction Opcode = "call_function"
	// Output returns Args[0] (a []any of nodes) from the graph.
	Output Opcode = "output"
)

// Node is one operation of a Graph. Edit a node that belongs to a graph only
// through Graph methods (SetArgs, ReplaceAllUses, Erase) so its users stay right.
//
// Opcode says what kind of node it is (placeholder, get_attr,
// call_function, output, as in torch.fx). A call_function node holds its
// operator in Op (torch.fx's node holds the OpOverload); Target is then
// Op.Name, kept for printing. For the other opcodes Op is nil and Target is
// the input name (placeholder), the key in Graph.Attrs or Graph.Subgraphs
// (get_attr) or "output".
type Node struct {
	Opcode Opcode
	Op     *Op
	Name   string
	Target string
	Args   []any
	Kwargs map[string]any
	Meta   Meta

	graph      *Graph
	users      []*Node
	prev, next *Node // neighbours in the graph's node list
	sect       uint8 // the graph section: 0 placeholders, 1 get_attrs, 2 the rest
	key        int64 // order within the section, kept by Graph.link
}

// Users returns the nodes that use n as an argument, in graph order.
func (n *Node) Users() []*Node {
	out := append([]*Node(nil), n.users...)
	sort.Slice(out, func(i, j int) bool { return before(out[i], out[j]) })
	return out
}

// OutputUsed reports whether value i of n's tuple is used: by a getitem
// taking value i, or by a user that takes the whole tuple.
func (n *Node) OutputUsed(i int) bool {
	for _, u := range n.users {
		if u.Op != GetItem {
			return true
		}
		if j, _ := AsInt(u.Arg(1)); int(j) == i {
			return true
		}
	}
	return false
}

// Graph returns the graph n belongs to (nil once erased).
func (n *Node) Graph() *Graph { return n.graph }

// String prints the node in FX's code form, e.g.
// "%add : float32[2,3] = call_function[target=aten.add.Tensor](args = (%x, %y), kwargs = {})".
func (n *Node) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%%%s : %s = %s[target=%s](args = %s, kwargs = %s)",
		n.Name, n.Meta, n.Opcode, n.Target, FormatArgs(n.Args), FormatKwargs(n.Kwargs))
	return b.String()
}

// InputNodes returns the nodes among n's args and kwargs (recursively through
// lists), in order and with repetitions removed.
func (n *Node) InputNodes() []*Node {
	var out []*Node
	var seen map[*Node]bool // only for long argument lists
	visit := func(a any) {
		walkNodes(a, func(m *Node) {
			if seen != nil {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
				return
			}
			for _, o := range out {
				if o == m {
					return
				}
			}
			out = append(out, m)
			if len(out) > 16 {
				seen = make(map[*Node]bool, 2*len(out))
				for _, o := range out {
					seen[o] = true
				}
			}
		})
	}
	for _, a := range n.Args {
		visit(a)
	}
	for _, k := range sortedKeys(n.Kwargs) {
		visit(n.Kwargs[k])
	}
	return out
}

func walkNodes(a any, f func(*Node)) {
	switch v := a.(type) {
	case *Node:
		f(v)
	case []any:
		for _, e := range v {
			walkNodes(e, f)
		}
	}
}

func mapNodes(a any, f func(*Node) any) any {
	switch v := a.(type) {
	case *Node:
		return f(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = mapNodes(e, f)
		}
		return out
	}
	return a
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FormatArg prints one argument the way FX does: nodes as %name, lists in
// brackets, None for nil.
func FormatArg(a any) string {
	switch v := a.(type) {
	case nil:
		return "None"
	case *Node:
		return "%" + v.Name
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case float64:
		switch {
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		case math.IsNaN(v):
			return "nan"
		case v == math.Trunc(v) && math.Abs(v) < 1e15:
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		return strconv.Quote(v)
	case tensor.DType:
		return "torch." + v.String()
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = FormatArg(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%v", a)
}

// FormatArgs prints an args tuple: "(%x, 1, [2, 3])".
func FormatArgs(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = FormatArg(a)
	}
	if len(args) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// FormatKwargs prints kwargs sorted by key: "{dim: 1, keepdim: True}".
func FormatKwargs(kw map[string]any) string {
	keys := sortedKeys(kw)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + FormatArg(kw[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Arg returns Args[i], or nil when there are fewer args.
func (n *Node) Arg(i int) any {
	if i < len(n.Args) {
		return n.Args[i]
	}
	return nil
}

// ArgOr returns Args[i], or the kwarg name, or def when neither is set (or the
// arg is None).
func (n *Node) ArgOr(i int, name string, def any) any {
	if i < len(n.Args) && n.Args[i] != nil {
		return n.Args[i]
	}
	if v, ok := n.Kwargs[name]; ok && v != nil {
		return v
	}
	return def
}

// InputNode returns Args[i] as a node, or an error naming n when it is not one.
func (n *Node) InputNode(i int) (*Node, error) {
	if m, ok := n.Arg(i).(*Node); ok {
		return m, nil
	}
	return nil, fmt.Errorf("fxgraph: node %s (%s): argument %d is %s, want a tensor", n.Name, n.Target, i, FormatArg(n.Arg(i)))
}

// AsInt converts an int-like literal (int64, int, bool, integral float64).
func AsInt(a any) (int64, bool) {
	switch v := a.(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case float64:
		if v == math.Trunc(v) {
			return int64(v), true
		}
	}
	return 0, false
}

// AsFloat converts a numeric literal to float64.
func AsFloat(a any) (float64, bool) {
	switch v := a.(type) {
	case float64:
		return v, true
	case int64:
		return float64(v), true
	case int:
		return float64(v), true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// AsInts converts a list literal of ints (or a single int) to []int64.
func AsInts(a any) ([]int64, bool) {
	switch v := a.(type) {
	case []any:
		out := make([]int64, len(v))
		for i, e := range v {
			x, ok := AsInt(e)
			if !ok {
				return nil, false
			}
			out[i] = x
		}
		return out, true
	case []int64:
		return v, true
	}
	if x, ok := AsInt(a); ok {
		return []int64{x}, true
	}
	return nil, false
}

// IntArg returns argument i (or kwarg name, or def) as an int.
func (n *Node) IntArg(i int, name string, def int64) (int64, error) {
	a := n.ArgOr(i, name, def)
	v, ok := AsInt(a)
	if !ok {
		return 0, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want an int", n.Name, n.Target, name, FormatArg(a))
	}
	return v, nil
}

// FloatArg returns argument i (or kwarg name, or def) as a float.
func (n *Node) FloatArg(i int, name string, def float64) (float64, error) {
	a := n.ArgOr(i, name, def)
	v, ok := AsFloat(a)
	if !ok {
		return 0, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a number", n.Name, n.Target, name, FormatArg(a))
	}
	return v, nil
}

// BoolArg returns argument i (or kwarg name, or def) as a bool.
func (n *Node) BoolArg(i int, name string, def bool) (bool, error) {
	a := n.ArgOr(i, name, def)
	v, ok := AsInt(a)
	if !ok {
		return false, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a bool", n.Name, n.Target, name, FormatArg(a))
	}
	return v != 0, nil
}

// IntsArg returns argument i (or kwarg name, or def) as a list of ints. A
// single int is taken as a one-element list.
func (n *Node) IntsArg(i int, name string, def []int64) ([]int64, error) {
	a := n.ArgOr(i, name, nil)
	if a == nil {
		return def, nil
	}
	v, ok := AsInts(a)
	if !ok {
		return nil, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a list of ints", n.Name, n.Target, name, FormatArg(a))
	}
	return v, nil
}

// Val is the single TensorMeta of a non-tuple node.
func (n *Node) Val() TensorMeta { return n.Meta.Val() }
