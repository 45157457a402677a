package lower

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerControlFlow registers the rules of the higher-order operators.
func registerControlFlow(r *Registry) {
	r.Register(fxgraph.Cond, lowerCond)
	r.Register(fxgraph.WhileLoop, lowerWhile)
}

// lowerWhile lowers while_loop to stablehlo.while, whose values are the
// carried values then the additional ones (passed through unchanged).
func lowerWhile(ctx *Context, n *fxgraph.Node, _ []*stablehlo.Value) ([]*stablehlo.Value, error) {
	var operands []*stablehlo.Value
	for _, arg := range []int{2, 3} {
		ops, err := n.ListNodes(arg)
		if err != nil {
			return nil, err
		}
		for _, o := range ops {
			v, err := ctx.Value(o)
			if err != nil {
				return nil, err
			}
			operands = append(operands, v)
		}
	}
	if len(operands) == 0 {
		return nil, fmt.Errorf("lower: while_loop without values")
	}
	nCarried := len(n.Meta.Vals)
	var regions [2]*stablehlo.Block
	for r := range 2 {
		sub, err := n.Subgraph(r)
		if err != nil {
			return nil, err
		}
		fn := ctx.Fn.Closure()
		args := make([]*stablehlo.Value, len(operands))
		for i, o := range operands {
			if args[i], err = fn.Block().AddArg(o.Type()); err != nil {
				return nil, err
			}
		}
		outs, err := ctx.lowerSubgraph(fn, sub, args)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", []string{"cond_graph", "body_graph"}[r], err)
		}
		if r == 0 {
			if outs[0], err = fn.Block().Reshape(outs[0]); err != nil { // to tensor<i1>
				return nil, err
			}
		} else {
			outs = append(outs, args[nCarried:]...)
		}
		if err := fn.Return(outs...); err != nil {
			return nil, err
		}
		regions[r] = fn.Block()
	}
	res, err := operands[0].Block().While(operands, regions[0], regions[1])
	if err != nil {
		return nil, err
	}
	return res[:nCarried], nil
}

// lowerCond lowers cond to stablehlo.if: each branch subgraph becomes a
// region that computes only when its branch is taken.
func lowerCond(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	if in[0] == nil {
		return nil, fmt.Errorf("lower: cond: pred has no value")
	}
	pred, err := in[0].Block().Reshape(in[0])
	if err != nil {
		return nil, err
	}
	ops, err := n.ListNodes(3)
	if err != nil {
		return nil, err
	}
	operands := make([]*stablehlo.Value, len(ops))
	for i, o := range ops {
		if operands[i], err = ctx.Value(o); err != nil {
			return nil, err
		}
	}
	var regions [2]*stablehlo.Block
	for b := range 2 {
		sub, err := n.Subgraph(1 + b)
		if err != nil {
			return nil, err
		}
		fn := ctx.Fn.Closure()
		outs, err := ctx.lowerSubgraph(fn, sub, operands)
		if err != nil {
			return nil, fmt.Errorf("branch %d: %w", b, err)
		}
		if err := fn.Return(outs...); err != nil {
			return nil, err
		}
		regions[b] = fn.Block()
	}
	return pred.Block().If(pred, regions[0], regions[1])
}

// subgraphConstant returns the value of constant t of a subgraph in region
// fn: a StableHLO constant up to Options.InlineConstantMax elements, else a
// weight parameter of the main function (one per tensor, shared with the
// main graph and other subgraphs) copied into the region.
func (ctx *Context) subgraphConstant(fn *Func, n *fxgraph.Node, t *tensor.Tensor) (*stablehlo.Value, error) {
	if t.NumElements() <= ctx.Options.InlineConstantMax || ctx.root == nil {
		return ctx.Constant(t)
	}
	w, ok := ctx.root.weights[t]
	if !ok {
		main := &Context{Fn: ctx.root.main, Options: ctx.Options}
		var err error
		if w, err = main.addParamAs(ctx.root.prog, n, n.Val(), Weight, t); err != nil {
			return nil, err
		}
		ctx.root.weights[t] = w
	}
	return fn.Block().Reshape(w, w.Type().Dims...)
}

// lowerSubgraph lowers sub into the region fn, its placeholders bound to
// operands (values of the enclosing block or the region's arguments), and
// returns its outputs as values of the region, for the caller to return. Each operand is first copied into the region (a reshape to
// its own shape), so that every op of the subgraph lands in the region:
// the emitter adds an op to the block of its first operand.
func (ctx *Context) lowerSubgraph(fn *Func, sub *fxgraph.Graph, operands []*stablehlo.Value) ([]*stablehlo.Value, error) {
	sc := &Context{Graph: sub, Fn: fn, Options: ctx.Options, Rules: ctx.Rules, values: map[*fxgraph.Node][]*stablehlo.Value{}, root: ctx.root}
	ph := sub.Placeholders()
	if len(ph) != len(operands) {
		return nil, fmt.Errorf("lower: subgraph takes %d inputs, given %d", len(ph), len(operands))
	}
	for i, p := range ph {
		v, err := fn.Block().Reshape(operands[i], operands[i].Type().Dims...)
		if err != nil {
			return nil, fmt.Errorf("lower: subgraph input %s: %w", p.Name, err)
		}
		sc.values[p] = []*stablehlo.Value{v}
	}
	for _, n := range sub.Nodes() {
		if n.Opcode != fxgraph.GetAttr {
			continue
		}
		t := sub.Attrs[n.Target]
		if t == nil {
			continue // a nested subgraph, lowered by its control-flow rule
		}
		v, err := sc.subgraphConstant(fn, n, t)
		if err != nil {
			return nil, fmt.Errorf("lower: constant %s: %w", n.Name, err)
		}
		sc.values[n] = []*stablehlo.Value{v}
	}
	if err := sc.lowerNodes(sub); err != nil {
		return nil, err
	}
	var results []*stablehlo.Value
	for i, o := range sub.Outputs() {
		v, err := sc.Value(o)
		if err != nil {
			return nil, fmt.Errorf("lower: subgraph output %d: %w", i, err)
		}
		if v.Block() != fn.Block() { // an output that is an input or constant of the enclosing block
			if v, err = fn.Block().Reshape(v, v.Type().Dims...); err != nil {
				return nil, err
			}
		}
		results = append(results, v)
	}
	return results, nil
}
