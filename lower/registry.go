package lower

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// ErrNoRule is wrapped by the error for a node whose op has no rule.
var ErrNoRule = errors.New("lower: no lowering rule")

// Rule lowers one node. in[i] is the value of n.Args[i] when that argument is
// a tensor node, nil otherwise; values of nodes nested in lists or kwargs come
// from ctx.Value. A rule returns one value per entry of n.Meta.Vals.
type Rule func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error)

// Registry maps IR operators (fxgraph.Op values) to lowering rules. Build it
// with NewRegistry; it is read-only afterwards and safe for concurrent use.
type Registry struct {
	rules map[*fxgraph.Op]Rule
	prims Primitives
}

// NewRegistry returns a registry holding every rule of the package.
func NewRegistry() *Registry {
	r := &Registry{rules: map[*fxgraph.Op]Rule{}}
	r.Register(fxgraph.GetItem, lowerGetItem)
	registerElementwise(r)
	registerShapeOps(r)
	registerNN(r)
	registerQuant(r)
	registerFold(r)
	registerReductions(r)
	registerRNN(r)
	registerControlFlow(r)
	registerTrees(r)
	return r
}

// Register adds the rule for op; registering an op twice, or a nil op,
// panics (a programming error).
func (r *Registry) Register(op *fxgraph.Op, rule Rule) {
	if op == nil {
		panic("lower: rule registered for a nil op")
	}
	if _, dup := r.rules[op]; dup {
		panic("lower: rule registered twice: " + op.Name)
	}
	r.rules[op] = rule
}

// Override replaces the rule for op, which must have one, and returns the
// rule it replaced: how a platform (Platform.Register) computes an op its
// own way, falling back to the generic rule where it declines.
func (r *Registry) Override(op *fxgraph.Op, rule Rule) Rule {
	prev, ok := r.rules[op]
	if !ok {
		panic("lower: override of an op without a rule: " + op.Name)
	}
	r.rules[op] = rule
	return prev
}

// SetPrimitives sets the platform's primitives (see Primitives).
func (r *Registry) SetPrimitives(p Primitives) { r.prims = p }

// Lookup returns the rule for op.
func (r *Registry) Lookup(op *fxgraph.Op) (Rule, bool) {
	rule, ok := r.rules[op]
	return rule, ok
}

// Ops returns every op with a rule, sorted by name.
func (r *Registry) Ops() []*fxgraph.Op {
	out := make([]*fxgraph.Op, 0, len(r.rules))
	for op := range r.rules {
		out = append(out, op)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Targets returns the name of every op with a rule, sorted.
func (r *Registry) Targets() []string {
	ops := r.Ops()
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.Name
	}
	return out
}

func (r *Registry) missing(n *fxgraph.Node) error {
	return fmt.Errorf("%w for %s (node %s); nearest targets with rules: %s", ErrNoRule, n.Target, n.Name,
		strings.Join(fxgraph.Nearest(n.Target, r.Targets(), 3), ", "))
}

func lowerGetItem(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	src, err := n.InputNode(0)
	if err != nil {
		return nil, err
	}
	i, _ := fxgraph.AsInt(n.Arg(1))
	vals, ok := ctx.values[src]
	if !ok || int(i) >= len(vals) || i < 0 {
		return nil, fmt.Errorf("getitem %d of %s: no such value", i, src.Name)
	}
	return []*stablehlo.Value{vals[i]}, nil
}
