package fxgraph

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
)

// String prints the graph in FX's code form, one node a line:
//
//	graph():
//	    %x : float32[batch,3] [num_users=1] = placeholder[target=x]
//	    %relu : float32[batch,3] [num_users=1] = call_function[target=aten.relu.default](args = (%x,), kwargs = {})
//	    return (relu,)
func (g *Graph) String() string {
	var b strings.Builder
	b.WriteString("graph():\n")
	for n := g.head; n != nil; n = n.next {
		b.WriteString("    ")
		switch n.Opcode {
		case Placeholder, GetAttr:
			fmt.Fprintf(&b, "%%%s : %s [num_users=%d] = %s[target=%s]\n", n.Name, n.Meta, len(n.users), n.Opcode, n.Target)
		case Output:
			names := make([]string, 0)
			for _, o := range g.Outputs() {
				names = append(names, o.Name)
			}
			fmt.Fprintf(&b, "return (%s,)\n", strings.Join(names, ", "))
		default:
			fmt.Fprintf(&b, "%%%s : %s [num_users=%d] = %s[target=%s](args = %s, kwargs = %s)\n",
				n.Name, n.Meta, len(n.users), n.Opcode, n.Target, FormatArgs(n.Args), FormatKwargs(n.Kwargs))
		}
	}
	for _, name := range g.subgraphNames() {
		fmt.Fprintf(&b, "\nsubgraph %s:\n", name)
		for _, line := range strings.Split(strings.TrimRight(g.Subgraphs[name].String(), "\n"), "\n") {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}

func (g *Graph) subgraphNames() []string {
	names := make([]string, 0, len(g.Subgraphs))
	for k := range g.Subgraphs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Table prints the graph as FX's print_tabular does: one row a node with
// opcode, name, target, args and kwargs, plus the meta of each value.
func (g *Graph) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "opcode\tname\ttarget\targs\tkwargs\tmeta")
	fmt.Fprintln(w, "------\t----\t------\t----\t------\t----")
	for n := g.head; n != nil; n = n.next {
		args := FormatArgs(n.Args)
		if n.Opcode == Placeholder || n.Opcode == GetAttr {
			args = "()"
		}
		meta := n.Meta.String()
		if n.Opcode == Output {
			meta = ""
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Opcode, n.Name, n.Target, args, FormatKwargs(n.Kwargs), meta)
	}
	w.Flush()
	for _, name := range g.subgraphNames() {
		fmt.Fprintf(&b, "\nsubgraph %s:\n%s", name, g.Subgraphs[name].Table())
	}
	return b.String()
}
