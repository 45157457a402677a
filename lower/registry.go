package lower

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// ErrNoRule is wrapped by the error for a node whose target has no rule.
var ErrNoRule = errors.New("lower: no lowering rule")

// Rule lowers one node. in[i] is the value of n.Args[i] when that argument is
// a tensor node, nil otherwise; values of nodes nested in lists or kwargs come
// from ctx.Value. A rule returns one value per entry of n.Meta.Vals.
type Rule func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error)

// Registry maps IR targets to lowering rules. Build it with NewRegistry; it
// is read-only afterwards and safe for concurrent use.
type Registry struct {
	rules map[string]Rule
}

// NewRegistry returns a registry holding every rule of the package.
func NewRegistry() *Registry {
	r := &Registry{rules: map[string]Rule{}}
	r.Register(fxgraph.GetItem, lowerGetItem)
	registerElementwise(r)
	registerShapeOps(r)
	registerNN(r)
	registerReductions(r)
	registerRNN(r)
	registerControlFlow(r)
	return r
}

// Register adds the rule for target; registering a target twice panics (a
// programming error).
func (r *Registry) Register(target string, rule Rule) {
	if _, dup := r.rules[target]; dup {
		panic("lower: rule registered twice: " + target)
	}
	r.rules[target] = rule
}

// Lookup returns the rule for target.
func (r *Registry) Lookup(target string) (Rule, bool) {
	rule, ok := r.rules[target]
	return rule, ok
}

// Targets returns every target with a rule, sorted.
func (r *Registry) Targets() []string {
	out := make([]string, 0, len(r.rules))
	for k := range r.rules {
		out = append(out, k)
	}
	sort.Strings(out)
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
