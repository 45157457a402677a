package fxgraph

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// ErrUnsupported is wrapped by errors about operators the IR does not know.
var ErrUnsupported = errors.New("fxgraph: unsupported operator")

// ShapeFunc computes what a call_function node produces (dtype and shape of
// each value) from its arguments, whose Meta is already set. It must accept
// symbolic dims; where a dim cannot be derived it may use Unknown.
type ShapeFunc func(n *Node) (Meta, error)

// EvalFunc computes a call_function node on the host for constant folding.
// value returns the constant tensor of an input node (nil when the input is
// not constant, which only happens for ops marked ShapeOnly).
type EvalFunc func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error)

// Unknown is the dim shape propagation uses where a size cannot be derived
// before specialization (for example a reshape to a size computed at run time).
var Unknown = Dim{Sym: "?"}

// Registry indexes the operators of the IR by target name for the passes
// (shape propagation, folding, specialization). NewRegistry gives one over
// every Op of the IR; it is read-only and safe for concurrent use.
type Registry struct {
	ops map[string]*Op
}

// NewRegistry returns a registry holding every operator of the IR (Ops).
func NewRegistry() *Registry {
	return &Registry{ops: opTable}
}

// define gives op its shape rule and folding and adds it to the IR.
// Defining an op twice or without a shape rule is a programming error and
// panics.
func (r *Registry) define(op *Op, shape ShapeFunc, eval EvalFunc) *Op {
	if _, dup := r.ops[op.Name]; dup {
		panic("fxgraph: operator defined twice: " + op.Name)
	}
	if shape == nil {
		panic("fxgraph: operator defined without a shape function: " + op.Name)
	}
	if allOps[op.Name] != op {
		panic("fxgraph: operator " + op.Name + " is not the value OpByName returns")
	}
	op.Shape, op.Eval = shape, eval
	r.ops[op.Name] = op
	return op
}

// Lookup returns the operator of the IR called target.
func (r *Registry) Lookup(target string) (*Op, bool) {
	op, ok := r.ops[target]
	return op, ok
}

// Has reports whether op is an operator of this registry.
func (r *Registry) Has(op *Op) bool { return op != nil && r.ops[op.Name] == op }

// Targets returns every registered target, sorted.
func (r *Registry) Targets() []string {
	out := make([]string, 0, len(r.ops))
	for k := range r.ops {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Nearest returns up to k registered targets that look most like target, to
// suggest in "unsupported operator" errors.
func Nearest(target string, candidates []string, k int) []string {
	type scored struct {
		s string
		d int
	}
	var all []scored
	for _, c := range candidates {
		all = append(all, scored{c, editDistance(target, c)})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].d != all[j].d {
			return all[i].d < all[j].d
		}
		return all[i].s < all[j].s
	})
	var out []string
	for i := 0; i < len(all) && i < k; i++ {
		out = append(out, all[i].s)
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func (r *Registry) unsupported(n *Node) error {
	return fmt.Errorf("%w: node %s calls %s (nearest known: %s)", ErrUnsupported, n.Name, n.Target,
		strings.Join(Nearest(n.Target, r.Targets(), 3), ", "))
}

// PropagateShapes recomputes the Meta of every call_function node in order,
// from the placeholders' and constants' Meta. Errors name the node.
func (r *Registry) PropagateShapes(g *Graph) error {
	for n := g.head; n != nil; n = n.next {
		switch n.Opcode {
		case GetAttr:
			if t, ok := g.Attrs[n.Target]; ok {
				n.Meta = Meta{Vals: []TensorMeta{{DType: t.DType, Shape: StaticShape(t.Shape...)}}}
			}
		case CallFunction:
			if !r.Has(n.Op) {
				return r.unsupported(n)
			}
			if err := n.Op.CheckArgs(n); err != nil {
				return err
			}
			m, err := n.Op.Shape(n)
			if err != nil {
				return fmt.Errorf("shape of %s (%s): %w", n.Name, n.Target, err)
			}
			n.Meta = m
		}
	}
	return nil
}

// ConstValue returns the constant tensor a node holds (a get_attr of a
// tensor), or nil.
func (g *Graph) ConstValue(n *Node) *tensor.Tensor {
	if n == nil || n.Opcode != GetAttr || n.graph != g {
		return nil
	}
	return g.Attrs[n.Target]
}

// FoldConstants evaluates on the host every call_function node whose inputs
// are all constants (or, for ShapeOnly ops, have static shapes) and whose
// results have at most maxElements elements each, replaces it by get_attr
// nodes holding the results, and erases what became dead. It returns the
// number of nodes folded.
func (r *Registry) FoldConstants(g *Graph, maxElements int64) (int, error) {
	folded := 0
	for _, n := range g.Nodes() {
		if n.Opcode != CallFunction || n.graph != g {
			continue
		}
		info := n.Op
		if !r.Has(info) || info.Eval == nil || !foldable(g, n, info, maxElements) {
			continue
		}
		outs, err := info.Eval(n, g.ConstValue)
		if err != nil {
			return folded, fmt.Errorf("fold %s (%s): %w", n.Name, n.Target, err)
		}
		if outs == nil {
			continue // the op declined to fold this instance
		}
		if err := g.replaceWithConstants(n, outs); err != nil {
			return folded, err
		}
		folded++
	}
	g.EliminateDeadCode()
	return folded, nil
}

func foldable(g *Graph, n *Node, info *Op, maxElements int64) bool {
	for _, v := range n.Meta.Vals {
		dims, ok := v.Shape.Static()
		if !ok || tensor.NumElements(dims) > maxElements || v.DType == tensor.Invalid {
			return false
		}
	}
	for _, in := range n.InputNodes() {
		if info.ShapeOnly {
			if !in.Val().Shape.IsStatic() {
				return false
			}
			continue
		}
		if g.ConstValue(in) == nil {
			return false
		}
	}
	return len(n.Meta.Vals) > 0
}

// replaceWithConstants swaps n for constants: for a tuple node each getitem
// user is replaced by its element.
func (g *Graph) replaceWithConstants(n *Node, outs []*tensor.Tensor) error {
	if len(outs) != len(n.Meta.Vals) {
		return fmt.Errorf("fold %s: produced %d values, meta has %d", n.Name, len(outs), len(n.Meta.Vals))
	}
	for i, t := range outs {
		want := n.Meta.Vals[i]
		dims, _ := want.Shape.Static()
		if t.DType != want.DType || !slices.Equal(t.Shape, dims) {
			return fmt.Errorf("fold %s: value %d is %s, meta says %s", n.Name, i, t, want)
		}
	}
	prev := g.SetInsertPoint(nil)
	defer g.SetInsertPoint(prev)
	if !n.Meta.Tuple {
		c := g.AddConstant(n.Name+"_folded", outs[0])
		g.ReplaceAllUses(n, c)
		return nil
	}
	for _, u := range n.Users() {
		if u.Op != GetItem {
			return nil // used as a whole tuple: leave it
		}
	}
	for _, u := range n.Users() {
		idx, _ := AsInt(u.Arg(1))
		if idx < 0 || int(idx) >= len(outs) {
			return fmt.Errorf("fold %s: getitem %s index %d out of range", n.Name, u.Name, idx)
		}
		c := g.AddConstant(u.Name+"_folded", outs[idx])
		g.ReplaceAllUses(u, c)
	}
	return nil
}

// Specialize returns a copy of g with every symbolic dim of the inputs set
// from dims (symbol -> size), shapes propagated, and constants folded
// (maxFold elements at most per folded value), ready to lower for one shape
// bucket. A symbol without a size, or a shape still symbolic afterwards, is an
// error naming it.
func (r *Registry) Specialize(g *Graph, dims map[string]int64, maxFold int64) (*Graph, error) {
	s := g.Clone()
	for _, p := range s.Placeholders() {
		for vi, v := range p.Meta.Vals {
			for di, d := range v.Shape {
				if d.IsStatic() {
					continue
				}
				size, ok := dims[d.Sym]
				if !ok {
					return nil, fmt.Errorf("specialize: input %s dim %d is symbol %q, which has no size (give one, e.g. %s=8)", p.Name, di, d.Sym, d.Sym)
				}
				if size < 0 {
					return nil, fmt.Errorf("specialize: symbol %q has negative size %d", d.Sym, size)
				}
				p.Meta.Vals[vi].Shape[di] = D(size)
			}
		}
	}
	// Propagate and fold until nothing folds: a folded shape computation
	// (Shape -> Gather -> Concat) turns its consumer's size argument into a
	// constant, whose shape then needs propagating again.
	for round := 0; ; round++ {
		if err := r.PropagateShapes(s); err != nil {
			return nil, fmt.Errorf("specialize: %w", err)
		}
		folded, err := r.FoldConstants(s, maxFold)
		if err != nil {
			return nil, fmt.Errorf("specialize: %w", err)
		}
		if folded == 0 || round >= 64 {
			break
		}
	}
	for n := s.head; n != nil; n = n.next {
		for _, v := range n.Meta.Vals {
			if !v.Shape.IsStatic() {
				return nil, fmt.Errorf("specialize: node %s (%s) still has symbolic shape %s for dims %v", n.Name, n.Target, v.Shape, dims)
			}
		}
	}
	return s, nil
}

func getItemShape(n *Node) (Meta, error) {
	src, err := n.InputNode(0)
	if err != nil {
		return Meta{}, err
	}
	i, ok := AsInt(n.Arg(1))
	if !ok || i < 0 || int(i) >= len(src.Meta.Vals) {
		return Meta{}, fmt.Errorf("getitem index %s out of range for %s", FormatArg(n.Arg(1)), src.Meta)
	}
	return Meta{Vals: []TensorMeta{src.Meta.Vals[i]}}, nil
}
