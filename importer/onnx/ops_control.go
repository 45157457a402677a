package onnx

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerControlFlow registers the converters of If, Loop and Scan. An If
// whose condition is known only at run time becomes the IR's cond (lowered
// to stablehlo.if); the rest is inlined at import (see convertIf,
// convertLoop and convertScan): loops whose trip count or condition are
// run-time values, loops with scan outputs and a run-time trip count, and
// Scan-8 with sequence_lens shorter than the sequence are unsupported.
func registerControlFlow(cs converters) {
	cs.add("If", convertIf)
	cs.add("Loop", convertLoop)
	cs.register("", "Scan", 8, convertScan8)
	cs.register("", "Scan", 9, convertScan)
}

// MaxLoopUnroll is the most iterations of a Loop or Scan the importer
// unrolls.
const MaxLoopUnroll = 1024

// convertIf converts If in one of two ways:
//   - a condition known at import (a constant, or computed from constants
//     and shapes): only the branch it selects is inlined;
//   - a condition known only at run time: the IR's higher-order op cond
//     (fxgraph.Cond), each branch a subgraph that takes the values it
//     captures from the enclosing scopes as operands. Lowering emits
//     stablehlo.if, which computes only the branch taken. Its branches must
//     give outputs of the same dtypes and shapes.
func convertIf(c *Ctx, _ *Node) error {
	cond, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(cond)
	if dims, ok := m.Shape.Static(); m.DType != tensor.Bool || !ok || tensor.NumElements(dims) != 1 {
		return fmt.Errorf("If: cond is %s, want a bool tensor with one element", m)
	}
	var branches [2]*Graph
	for i, name := range []string{"then_branch", "else_branch"} {
		a := c.Attr(name)
		if a == nil || a.Type != AttrGraph || a.G == nil {
			return fmt.Errorf("If: attribute %s (a graph) is required", name)
		}
		if len(a.G.Inputs) > 0 {
			return fmt.Errorf("If: %s %q has %d inputs, want none", name, a.G.Name, len(a.G.Inputs))
		}
		branches[i] = a.G
	}
	if t := c.Graph().ConstValue(cond); t != nil {
		taken := branches[1]
		if t.Data[0] != 0 {
			taken = branches[0]
		}
		outs, err := c.s.inlineBranch(taken)
		if err != nil {
			return err
		}
		return bindIfOutputs(c, outs)
	}
	captured := c.s.captures(branches[0], branches[1])
	for _, name := range captured {
		if _, ok := c.s.boundOf(c.s.env[name]); ok {
			return ifBounded(c, cond, branches)
		}
	}
	var graphs [2]*fxgraph.Graph
	var errs [2]error
	for i, br := range branches {
		if graphs[i], errs[i] = c.s.subgraph(br, captured); errors.Is(errs[i], errStructured) {
			// A branch gives or uses a sequence or optional, which only
			// the import can hold: the condition must be known.
			return c.needsValues(0)
		}
	}
	if errs[0] != nil || errs[1] != nil {
		return guardedIf(c, cond, branches, errs)
	}
	thenOuts, elseOuts := graphs[0].Outputs(), graphs[1].Outputs()
	if len(thenOuts) != len(elseOuts) {
		return fmt.Errorf("If: then_branch has %d outputs, else_branch %d", len(thenOuts), len(elseOuts))
	}
	for i := range thenOuts {
		tm, em := Meta(thenOuts[i]), Meta(elseOuts[i])
		if tm.DType != em.DType || !tm.Shape.Equal(em.Shape) {
			return Unsupported("If with a run-time condition whose branches give output %d as %s and %s (stablehlo.if needs both branches to give the same types)", i, tm, em)
		}
	}
	var subs [2]*fxgraph.Node
	for i, name := range []string{"true_graph", "false_graph"} {
		subs[i] = c.Graph().AddSubgraph(name, graphs[i])
	}
	operands := make([]*fxgraph.Node, len(captured))
	for i, name := range captured {
		operands[i] = c.s.env[name]
	}
	n, err := c.Emit(fxgraph.Cond, cond, subs[0], subs[1], nodes(operands))
	if err != nil {
		return err
	}
	outs := make([]*fxgraph.Node, len(n.Meta.Vals))
	for i := range outs {
		if outs[i], err = c.Emit(fxgraph.GetItem, n, int64(i)); err != nil {
			return err
		}
	}
	return bindIfOutputs(c, outs)
}

// captures returns the names, sorted, that the subgraphs use from the
// enclosing scopes (and that s binds to non-constant values): the operands
// a higher-order op passes them. Constants are not captured; subgraph
// copies them (see subgraph).
func (s *scope) captures(grs ...*Graph) []string {
	seen := map[string]bool{}
	var out []string
	for _, gr := range grs {
		for _, name := range freeNames(gr) {
			n, ok := s.env[name]
			if !ok || seen[name] || s.g.ConstValue(n) != nil {
				continue
			}
			seen[name] = true
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// freeNames returns the value names gr (and the subgraphs of its nodes)
// reads without defining them.
func freeNames(gr *Graph) []string {
	defined := map[string]bool{"": true}
	for _, in := range gr.Inputs {
		defined[in.Name] = true
	}
	for _, in := range gr.Initializers {
		defined[in.Name] = true
	}
	seen := map[string]bool{}
	var out []string
	use := func(name string) {
		if !defined[name] && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, node := range gr.Nodes {
		for _, in := range node.Inputs {
			use(in)
		}
		for _, a := range node.Attributes {
			for _, sub := range append([]*Graph{a.G}, a.Graphs...) {
				if sub != nil {
					for _, name := range freeNames(sub) {
						use(name)
					}
				}
			}
		}
		for _, o := range node.Outputs {
			defined[o] = true
		}
	}
	for _, o := range gr.Outputs {
		use(o.Name)
	}
	return out
}

// subgraph converts gr (a branch without inputs) into a graph of its own:
// one placeholder per captured name (in order), the constants of the
// enclosing scopes it uses copied in, and gr's outputs as its outputs.
func (s *scope) subgraph(gr *Graph, captured []string) (*fxgraph.Graph, error) {
	g := fxgraph.New()
	inner, err := s.subScope(gr, g, captured)
	if err != nil {
		return nil, err
	}
	outs, err := inner.convertBody(gr)
	if err != nil {
		return nil, err
	}
	for _, o := range outs {
		if isStructured(o) {
			return nil, fmt.Errorf("%w: %w (subgraph %q)", ErrUnsupported, errStructured, gr.Name)
		}
	}
	g.SetOutput(outs...)
	g.EliminateDeadCode()
	return g, nil
}

// subScope returns the scope that converts gr into graph g: it adds a
// placeholder of g per captured name (after those g has) and copies into g
// the constants of the enclosing scopes gr uses and gr's initializers.
func (s *scope) subScope(gr *Graph, g *fxgraph.Graph, captured []string) (*scope, error) {
	return s.subScopeRows(gr, g, captured, nil)
}

// subScopeRows is subScope where the captured bounded values named in rows
// are passed padded (the body reads only their valid rows: rowCaptures).
func (s *scope) subScopeRows(gr *Graph, g *fxgraph.Graph, captured []string, rows map[string]bool) (*scope, error) {
	if s.depth > 32 {
		return nil, fmt.Errorf("onnx: subgraph %q nested too deep", gr.Name)
	}
	inner := &scope{im: s.im, g: g, opsets: s.opsets, funcs: s.funcs, env: map[string]*fxgraph.Node{}, depth: s.depth + 1, values: s.values, subConsts: map[*tensor.Tensor]*fxgraph.Node{}}
	for _, name := range captured {
		if isStructured(s.env[name]) {
			return nil, fmt.Errorf("%w: %w (%q in subgraph %q)", ErrUnsupported, errStructured, name, gr.Name)
		}
		if b, ok := s.boundOf(s.env[name]); ok && !rows[name] {
			return nil, Unsupported("subgraph %q uses %q, the data-dependent result of %s (padded, with a count): not supported inside subgraphs", gr.Name, name, b.op)
		}
		inner.env[name] = g.AddPlaceholder(sanitize(name), Meta(s.env[name]))
	}
	for _, name := range freeNames(gr) {
		if n, ok := s.env[name]; ok {
			if t := s.g.ConstValue(n); t != nil {
				inner.env[name] = inner.modelConstant(name, t)
			}
		}
	}
	for _, in := range gr.Initializers {
		inner.env[in.Name] = inner.modelConstant(in.Name, in.Tensor)
	}
	return inner, nil
}

// convertWhileLoop converts Loop(M, cond, v...) without scan outputs to
// the IR's while_loop (lowered to stablehlo.while), for a trip count or a
// condition known only at run time. The loop carries (i, cond, M, v...):
// cond_graph is cond && i < M, body_graph the ONNX body with i+1 appended.
// The values the body captures from enclosing scopes are the while_loop's
// additional inputs.
//
// With scan outputs, the trip count needs a static upper bound (M a
// constant, or computed with one: upperBound): each scan output is carried
// as a buffer of that many slices, the body writing its value at slice i,
// and the loop also stops at the bound. The scan outputs are then bounded
// values (docs/DATA-DEPENDENT.md) along their first axis, counted by the
// iterations run. A loop-carried value that starts empty and that the body
// only grows by one row (see growingStates) is carried the same way, and
// a bounded value the body reads only at row i (see rowCaptures) is
// captured padded.
func convertWhileLoop(c *Ctx, body *Graph, nState int) error {
	w := whileSpec{body: body, nState: nState}
	grown, err := growingStates(c, body, nState)
	if err != nil {
		return err
	}
	if grown != nil {
		if w.bound, err = tripBound(c); err != nil {
			return err
		}
		w.grown = grown
	}
	return convertWhileLoopScan(c, w)
}

// whileSpec describes the while_loop a Loop becomes: its body, numbers of
// loop-carried values and scan outputs, the static bound of its trip count
// (for scan outputs and grown values) and, per loop-carried value, the
// body value that grows it by one row ("" for a value carried as is).
type whileSpec struct {
	body          *Graph
	nState, nScan int
	bound         int64
	grown         []string
	// guarded: the loop carries a last bool, true once a window the body
	// made a tensor fell short of its bound (see window.go).
	guarded bool
}

// isGrown reports whether loop-carried value j grows by a row per
// iteration.
func (w whileSpec) isGrown(j int) bool { return w.grown != nil && w.grown[j] != "" }

// convertWhileLoopScan converts the Loop described by w to a while_loop.
func convertWhileLoopScan(c *Ctx, w whileSpec) error {
	captured := c.s.captures(w.body)
	rows, err := rowCaptures(c, w.body, captured)
	if err != nil {
		return err
	}
	if len(rows) > 0 && w.bound == 0 {
		if w.bound, err = tripBound(c); err != nil {
			return err
		}
	}
	carried, err := whileCarried(c, w, rows)
	if err != nil {
		return err
	}
	if w.guarded = mayMakeWindows(w.body); w.guarded {
		carried = append(carried, c.Constant("window_short", tensor.Scalar(tensor.Bool, 0)))
	}
	extra := make([]*fxgraph.Node, len(captured))
	for i, name := range captured {
		extra[i] = c.s.env[name]
	}
	condG, err := whileCondGraph(c, carried, captured)
	if err != nil {
		return err
	}
	bodyG, guards, err := whileBodyGraph(c, w, carried, captured, rows)
	if err != nil {
		return err
	}
	loop, err := c.Emit(fxgraph.WhileLoop, c.Graph().AddSubgraph("cond_graph", condG), c.Graph().AddSubgraph("body_graph", bodyG), nodes(carried), nodes(extra))
	if err != nil {
		return err
	}
	if len(guards) > 0 {
		short, err := c.Emit(fxgraph.GetItem, loop, int64(len(carried)-1))
		if err != nil {
			return err
		}
		if err := c.s.addWindowGuard(short, fmt.Sprintf("in the body of Loop node %q: %s", c.node.Name, guards[0].message)); err != nil {
			return err
		}
	}
	return bindWhileOutputs(c, loop, w)
}

// whileCarried returns the values a Loop's while_loop carries: (iter,
// cond, trip_count, v..., one [bound, ...] buffer per scan output). A
// grown value is carried as a [bound, ...] buffer too. With scan outputs
// or grown values the trip count is also capped at bound (the buffers'
// size).
func whileCarried(c *Ctx, w whileSpec, rows map[string]bool) ([]*fxgraph.Node, error) {
	trip, err := loopScalar(c, 0, tensor.Int64, tensor.FromInt64s([]int64{math.MaxInt64}, []int64{}...))
	if err != nil {
		return nil, err
	}
	cond, err := loopScalar(c, 1, tensor.Bool, tensor.Scalar(tensor.Bool, 1))
	if err != nil {
		return nil, err
	}
	if w.bound > 0 {
		if trip, err = c.Emit(fxgraph.AtenMinimum, trip, c.ScalarConst(tensor.Int64, float64(w.bound))); err != nil {
			return nil, err
		}
	}
	carried := []*fxgraph.Node{c.ScalarConst(tensor.Int64, 0), cond, trip}
	for j := range w.nState {
		v, err := c.Input(2 + j)
		if err != nil {
			return nil, err
		}
		carried = append(carried, v)
	}
	if w.nScan == 0 && w.grown == nil {
		return carried, nil
	}
	scanMetas, grownMetas, err := c.s.bodyRowMetas(w, carried[3:], rows)
	if err != nil {
		return nil, err
	}
	buffer := func(m fxgraph.TensorMeta) (*fxgraph.Node, error) {
		dims, _ := m.Shape.Static()
		return c.EmitKw(fxgraph.AtenFull, []any{ints(append([]int64{w.bound}, dims...)), 0.0}, map[string]any{"dtype": m.DType})
	}
	for j, m := range grownMetas {
		if w.isGrown(j) {
			if carried[3+j], err = buffer(m); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range scanMetas {
		buf, err := buffer(m)
		if err != nil {
			return nil, err
		}
		carried = append(carried, buf)
	}
	return carried, nil
}

// loopScalar returns Loop input i (M or cond) as a scalar of dtype dt, or
// def where the input is absent.
func loopScalar(c *Ctx, i int, dt tensor.DType, def *tensor.Tensor) (*fxgraph.Node, error) {
	if !c.HasInput(i) {
		return c.Constant("loop_default", def), nil
	}
	v, err := c.Input(i)
	if err != nil {
		return nil, err
	}
	if m := Meta(v); m.DType != dt || m.Shape.IsStatic() && tensorElems(m) != 1 {
		return nil, fmt.Errorf("Loop: input %d is %s, want %s with one element", i, m, dt)
	}
	return c.Emit(fxgraph.AtenView, v, ints(nil))
}

// addCarriedPlaceholders adds one placeholder of g per carried value.
func addCarriedPlaceholders(g *fxgraph.Graph, carried []*fxgraph.Node) []*fxgraph.Node {
	ph := make([]*fxgraph.Node, len(carried))
	for i, v := range carried {
		ph[i] = g.AddPlaceholder([]string{"iter", "cond", "trip_count"}[min(i, 2)], Meta(v))
	}
	return ph
}

// whileCondGraph returns the while_loop's cond_graph: cond && iter <
// trip_count (the captured values are its trailing placeholders).
func whileCondGraph(c *Ctx, carried []*fxgraph.Node, captured []string) (*fxgraph.Graph, error) {
	condG := fxgraph.New()
	ph := addCarriedPlaceholders(condG, carried)
	for _, name := range captured {
		condG.AddPlaceholder(sanitize(name), Meta(c.s.env[name]))
	}
	e := fxgraph.Emitter{Graph: condG, IR: c.s.im.ir}
	lt, err := e.Emit("", fxgraph.AtenLtTensor, []any{ph[0], ph[2]}, nil)
	if err != nil {
		return nil, err
	}
	and, err := e.Emit("", fxgraph.AtenLogicalAnd, []any{ph[1], lt}, nil)
	if err != nil {
		return nil, err
	}
	condG.SetOutput(and)
	return condG, nil
}

// whileBodyGraph returns the while_loop's body_graph: the ONNX body, iter +
// 1, trip_count unchanged, each scan output (and each grown value's new
// row) written at slice iter of its buffer.
func whileBodyGraph(c *Ctx, w whileSpec, carried []*fxgraph.Node, captured []string, rows map[string]bool) (*fxgraph.Graph, []guardValue, error) {
	bodyG := fxgraph.New()
	ph := addCarriedPlaceholders(bodyG, carried)
	inner, err := c.s.subScopeRows(w.body, bodyG, captured, rows)
	if err != nil {
		return nil, nil, err
	}
	inner.carriesGuards = w.guarded
	newOuts, err := whileBodyOutputs(c, w, inner, bodyG, ph)
	if err != nil {
		return nil, nil, err
	}
	if w.guarded {
		short, err := orGuards(fxgraph.Emitter{Graph: bodyG, IR: c.s.im.ir}, ph[len(ph)-1], inner.windowGuards)
		if err != nil {
			return nil, nil, err
		}
		newOuts = append(newOuts, short)
	}
	bodyG.SetOutput(newOuts...)
	bodyG.EliminateDeadCode()
	return bodyG, inner.windowGuards, nil
}

// whileBodyOutputs converts the Loop body into the while_loop's body graph
// and returns its outputs (without the window guard flag).
func whileBodyOutputs(c *Ctx, w whileSpec, inner *scope, bodyG *fxgraph.Graph, ph []*fxgraph.Node) ([]*fxgraph.Node, error) {
	for i, in := range w.body.Inputs { // (iter, cond, v...): trip_count is not the body's
		inner.env[in.Name] = ph[i+min(i/2, 1)]
	}
	outs, err := inner.convertBody(w.body)
	if err != nil {
		return nil, err
	}
	if hasStructured(nodes(outs)) {
		return nil, Unsupported("Loop with a run-time trip count or condition whose body gives a sequence or optional")
	}
	e := fxgraph.Emitter{Graph: bodyG, IR: c.s.im.ir}
	next, err := e.Emit("", fxgraph.AtenAddTensor, []any{ph[0], bodyG.AddConstant("one", tensor.Scalar(tensor.Int64, 1))}, nil)
	if err != nil {
		return nil, err
	}
	keep, err := e.Emit("", fxgraph.AtenView, []any{outs[0], ints(nil)}, nil)
	if err != nil {
		return nil, err
	}
	newOuts := append([]*fxgraph.Node{next, keep, ph[2]}, outs[1:1+w.nState]...)
	for j := range w.nState {
		if w.isGrown(j) {
			row := inner.env[w.grown[j]]
			if win := windowOf(row); win != nil {
				if row, err = inner.windowTensor(win, w.grown[j]); err != nil {
					return nil, fmt.Errorf("onnx: Loop body: the row %q has a run-time size: %w", w.grown[j], err)
				}
			}
			if newOuts[3+j], err = writeRow(e, ph[3+j], row, ph[0], w.bound); err != nil {
				return nil, err
			}
		}
	}
	for k := range w.nScan {
		upd, err := writeSlice(e, ph[3+w.nState+k], outs[1+w.nState+k], ph[0], w.bound)
		if err != nil {
			return nil, err
		}
		newOuts = append(newOuts, upd)
	}
	return newOuts, nil
}

// bindWhileOutputs binds the Loop's outputs to the while_loop loop's
// results: the final loop-carried values, then the scan buffers. Scan
// buffers and grown values are bounded values counted by the iterations
// run.
func bindWhileOutputs(c *Ctx, loop *fxgraph.Node, w whileSpec) error {
	var iters *fxgraph.Node
	bounded := func(v *fxgraph.Node) error {
		if c.s.bounded == nil {
			return Unsupported("Loop with scan outputs or a grown value and a run-time trip count or condition inside a subgraph (its outputs have a data-dependent size)")
		}
		if iters == nil {
			var err error
			if iters, err = c.Emit(fxgraph.GetItem, loop, int64(0)); err != nil {
				return err
			}
		}
		*c.s.bounded = append(*c.s.bounded, boundedValue{value: v, count: iters, axis: 0, op: "Loop"})
		return nil
	}
	for j := range w.nState + w.nScan {
		if !c.HasOutput(j) {
			continue
		}
		v, err := c.Emit(fxgraph.GetItem, loop, int64(3+j))
		if err != nil {
			return err
		}
		c.SetOutput(j, v)
		if j >= w.nState || w.isGrown(j) {
			if err := bounded(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeSlice returns buf [bound, ...] with slice i replaced by v [...]
// (elementwise: positions == i select v).
func writeSlice(e fxgraph.Emitter, buf, v, i *fxgraph.Node, bound int64) (*fxgraph.Node, error) {
	m := Meta(buf)
	shape := make([]int64, m.Rank())
	for k := range shape {
		shape[k] = 1
	}
	shape[0] = bound
	pos := tensor.New(tensor.Int64, shape...)
	for k := range bound {
		pos.SetInt64(k, k)
	}
	at, err := e.Emit("", fxgraph.AtenEqTensor, []any{e.Graph.AddConstant("scan_positions", pos), i}, nil)
	if err != nil {
		return nil, err
	}
	row, err := e.Emit("", fxgraph.AtenUnsqueeze, []any{v, int64(0)}, nil)
	if err != nil {
		return nil, err
	}
	return e.Emit("", fxgraph.AtenWhereSelf, []any{at, row, buf}, nil)
}

// bodyRowMetas returns the types of the scan outputs of a Loop body and,
// per loop-carried value, of the row a grown one is appended (static
// shapes required), found by converting the body once into a scratch graph
// with placeholders for its inputs.
func (s *scope) bodyRowMetas(w whileSpec, state []*fxgraph.Node, rows map[string]bool) (scans, grown []fxgraph.TensorMeta, err error) {
	g := fxgraph.New()
	body := w.body
	inner, err := s.subScopeRows(body, g, s.captures(body), rows)
	if err != nil {
		return nil, nil, err
	}
	inner.carriesGuards = mayMakeWindows(body) // checked in the loop built after (whileBodyGraph)
	inner.env[body.Inputs[0].Name] = g.AddPlaceholder("iter", fxgraph.TensorMeta{DType: tensor.Int64})
	inner.env[body.Inputs[1].Name] = g.AddPlaceholder("cond", fxgraph.TensorMeta{DType: tensor.Bool})
	for j := range w.nState {
		inner.env[body.Inputs[2+j].Name] = g.AddPlaceholder("state", Meta(state[j]))
	}
	outs, err := inner.convertBody(body)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range outs[1+w.nState:] {
		m := Meta(o)
		if !m.Shape.IsStatic() {
			return nil, nil, Unsupported("Loop scan output of %s (run-time trip count: static per-iteration shapes only)", m)
		}
		scans = append(scans, m)
	}
	grown = make([]fxgraph.TensorMeta, w.nState)
	for j := range w.nState {
		if !w.isGrown(j) {
			continue
		}
		m := Meta(inner.env[w.grown[j]])
		if !m.Shape.IsStatic() || m.Rank() == 0 || m.Shape[0].Size != 1 {
			return nil, nil, Unsupported("Loop value %q grown by %s each iteration (one row of a static shape only)", body.Inputs[2+j].Name, m)
		}
		grown[j] = fxgraph.TensorMeta{DType: m.DType, Shape: m.Shape[1:]}
	}
	return scans, grown, nil
}

func tensorElems(m fxgraph.TensorMeta) int64 {
	dims, _ := m.Shape.Static()
	return tensor.NumElements(dims)
}

// constInput reports whether optional input i is absent or a constant.
func constInput(c *Ctx, i int) bool {
	if !c.HasInput(i) {
		return true
	}
	n, err := c.Input(i)
	return err == nil && c.Graph().ConstValue(n) != nil
}

func bindIfOutputs(c *Ctx, outs []*fxgraph.Node) error {
	if n := len(c.node.Outputs); n > len(outs) {
		return fmt.Errorf("If: %d outputs, the branches give %d", n, len(outs))
	}
	for i, o := range outs {
		if c.HasOutput(i) {
			c.SetOutput(i, o)
		}
	}
	return nil
}

// inlineBranch converts the nodes of an If branch (a subgraph without
// inputs) into s's graph and returns the branch's outputs.
func (s *scope) inlineBranch(gr *Graph) ([]*fxgraph.Node, error) {
	if len(gr.Inputs) > 0 {
		return nil, fmt.Errorf("onnx: If branch %q has %d inputs, want none", gr.Name, len(gr.Inputs))
	}
	return s.inlineBody(gr, nil)
}

// inlineBody converts the nodes of subgraph gr into s's graph, with its
// inputs bound to the given nodes by name, and returns its outputs. The
// subgraph sees every value of s by name (ONNX subgraphs are lexically
// scoped); its own names stay inside it.
func (s *scope) inlineBody(gr *Graph, inputs map[string]*fxgraph.Node) ([]*fxgraph.Node, error) {
	if s.depth > 32 {
		return nil, fmt.Errorf("onnx: subgraph %q nested too deep", gr.Name)
	}
	inner := &scope{im: s.im, g: s.g, opsets: s.opsets, funcs: s.funcs, env: maps.Clone(s.env), depth: s.depth + 1, values: s.values, subConsts: s.subConsts, bounded: s.bounded, guards: s.guards}
	maps.Copy(inner.env, inputs)
	for _, in := range gr.Initializers {
		inner.env[in.Name] = s.modelConstant(in.Name, in.Tensor)
	}
	return inner.convertBody(gr)
}

// convertBody converts the nodes of subgraph gr in s (whose env binds gr's
// inputs, initializers and captured names) and returns gr's outputs.
func (s *scope) convertBody(gr *Graph) ([]*fxgraph.Node, error) {
	for i, node := range gr.Nodes {
		if err := s.convertNode(node); err != nil {
			return nil, fmt.Errorf("%w (subgraph %q, node %d)", err, gr.Name, i)
		}
	}
	outs := make([]*fxgraph.Node, len(gr.Outputs))
	for i, vi := range gr.Outputs {
		n, ok := s.env[vi.Name]
		if !ok {
			return nil, fmt.Errorf("onnx: subgraph %q: output %q is not produced by any node", gr.Name, vi.Name)
		}
		if w := windowOf(n); w != nil {
			var err error
			if n, err = s.windowTensor(w, vi.Name); err != nil {
				return nil, fmt.Errorf("onnx: subgraph %q: output %q has a run-time size: %w", gr.Name, vi.Name, err)
			}
		}
		outs[i] = n
	}
	return outs, nil
}

// convertLoop unrolls Loop(M, cond, v...) at import: the trip count M must
// be known at compile time (a constant, or a graph input whose value is
// given, see NeedsValueError) and the condition must stay known: the initial
// cond and every iteration's cond output must fold to constants. Each
// iteration inlines the body with its iteration number and condition as
// constants and the loop-carried values of the previous one; the scan
// outputs are stacked along a new first axis. At most MaxLoopUnroll
// iterations.
func convertLoop(c *Ctx, _ *Node) error {
	a := c.Attr("body")
	if a == nil || a.Type != AttrGraph || a.G == nil {
		return fmt.Errorf("Loop: attribute body (a graph) is required")
	}
	body := a.G
	nState := c.NumInputs() - 2
	if nState < 0 {
		return fmt.Errorf("Loop: %d inputs, want M, cond and the loop-carried values", c.NumInputs())
	}
	nScan := len(body.Outputs) - 1 - nState
	if len(body.Inputs) != 2+nState || nScan < 0 {
		return fmt.Errorf("Loop: body %q has %d inputs and %d outputs for %d loop-carried values", body.Name, len(body.Inputs), len(body.Outputs), nState)
	}
	if nScan == 0 && (!constInput(c, 0) || !constInput(c, 1)) {
		return convertRunTimeLoop(c, body, nState)
	}
	if m, err := c.Input(0); err == nil && !constInput(c, 0) {
		if _, ok := c.s.upperBound(m); ok {
			return convertScanLoop(c, body, nState, nScan)
		}
		// Else M's value is needed at compile time (a NeedsValueError below).
	}
	return unrollLoop(c, body, nState, nScan)
}

// convertRunTimeLoop converts a Loop without scan outputs whose trip count
// or condition is a run-time value to a while_loop, unless it carries a
// sequence or optional (which only an unrolled loop can hold: then the
// trip count and condition must be known at compile time).
func convertRunTimeLoop(c *Ctx, body *Graph, nState int) error {
	for j := range nState {
		if v, err := c.AnyInput(2 + j); err == nil && isStructured(v) {
			if !constInput(c, 0) {
				return c.needsValues(0)
			}
			return c.needsValues(1)
		}
	}
	return convertWhileLoop(c, body, nState)
}

// loopStart returns a Loop's trip count (-1 for none: run while the
// condition holds) and initial condition, both known at compile time.
func loopStart(c *Ctx) (trip int64, keep bool, err error) {
	trip, keep = -1, true
	if c.HasInput(0) {
		ks, err := c.ConstInts(0)
		if err != nil {
			return 0, false, err
		}
		if len(ks) != 1 {
			return 0, false, fmt.Errorf("Loop: M has %d values, want 1", len(ks))
		}
		trip = ks[0]
	}
	if c.HasInput(1) {
		t, err := c.ConstValue(1)
		if err != nil {
			return 0, false, err
		}
		keep = t.NumElements() == 1 && t.Data[0] != 0
	}
	return trip, keep, nil
}

// unrollLoop inlines a Loop's body once per iteration (see convertLoop),
// falling back to a while_loop when an iteration's condition turns out to
// be a run-time value.
func unrollLoop(c *Ctx, body *Graph, nState, nScan int) error {
	trip, keep, err := loopStart(c)
	if err != nil {
		return err
	}
	state := make([]*fxgraph.Node, nState)
	for j := range state {
		v, err := c.AnyInput(2 + j) // sequences and optionals are carried too
		if err != nil {
			return err
		}
		state[j] = v
	}
	scans := make([][]*fxgraph.Node, nScan)
	for i := int64(0); keep && (trip < 0 || i < trip); i++ {
		if i >= MaxLoopUnroll {
			return Unsupported("Loop of more than %d iterations (loops are unrolled at import)", MaxLoopUnroll)
		}
		bind := map[string]*fxgraph.Node{
			body.Inputs[0].Name: c.ScalarConst(tensor.Int64, float64(i)),
			body.Inputs[1].Name: c.ScalarConst(tensor.Bool, 1), // the loop runs: cond holds
		}
		for j, v := range state {
			bind[body.Inputs[2+j].Name] = v
		}
		outs, err := c.s.inlineBody(body, bind)
		if err != nil {
			return err
		}
		t := c.Graph().ConstValue(outs[0])
		if t == nil && nScan == 0 {
			return convertWhileLoop(c, body, nState) // the unrolled iterations are dead code
		}
		if t == nil {
			return convertScanLoop(c, body, nState, nScan) // the unrolled iterations are dead code
		}
		keep = t.NumElements() == 1 && t.Data[0] != 0
		copy(state, outs[1:1+nState])
		for k := range scans {
			scans[k] = append(scans[k], outs[1+nState+k])
		}
	}
	return setUnrolledOutputs(c, state, scans, make([]int64, len(scans)), make([]int64, len(scans)))
}

// convertScanLoop converts a Loop with scan outputs whose trip count or
// condition is a run-time value to a while_loop, when its trip count has a
// static upper bound.
func convertScanLoop(c *Ctx, body *Graph, nState, nScan int) error {
	bound, err := tripBound(c)
	if err != nil {
		return err
	}
	grown, err := growingStates(c, body, nState)
	if err != nil {
		return err
	}
	return convertWhileLoopScan(c, whileSpec{body: body, nState: nState, nScan: nScan, bound: bound, grown: grown})
}

// setUnrolledOutputs binds the outputs of an unrolled Loop or Scan: the
// final loop-carried values, then each scan output's per-iteration values
// stacked along a new axis axes[k] (in reverse order where dirs[k] is 1).
func setUnrolledOutputs(c *Ctx, state []*fxgraph.Node, scans [][]*fxgraph.Node, axes, dirs []int64) error {
	for j, v := range state {
		if c.HasOutput(j) {
			c.SetOutput(j, v)
		}
	}
	for k, parts := range scans {
		if !c.HasOutput(len(state) + k) {
			continue
		}
		out, err := stackParts(c, parts, axes[k], dirs[k] != 0)
		if err != nil {
			return err
		}
		c.SetOutput(len(state)+k, out)
	}
	return nil
}

// stackParts stacks the per-iteration values parts along a new axis
// (negative counts from the end), in reverse order when reverse is set.
func stackParts(c *Ctx, parts []*fxgraph.Node, axis int64, reverse bool) (*fxgraph.Node, error) {
	if len(parts) == 0 {
		return nil, Unsupported("a loop that runs no iteration, with scan outputs (their shape is unknown)")
	}
	if r := int64(Meta(parts[0]).Rank()) + 1; axis < 0 {
		axis += r
	}
	if reverse {
		parts = slices.Clone(parts)
		slices.Reverse(parts)
	}
	stacked := make([]*fxgraph.Node, len(parts))
	for i, p := range parts {
		u, err := c.Emit(fxgraph.AtenUnsqueeze, p, axis)
		if err != nil {
			return nil, err
		}
		stacked[i] = u
	}
	return c.Emit(fxgraph.AtenCat, nodes(stacked), axis)
}

// convertScan unrolls Scan (opset 9+): the scan length is the size of the
// scan inputs along their scan axes, which must be static at import. Each
// iteration inlines the body with the state of the previous one and the
// scan inputs' elements at that position (from the end for reverse
// directions); the scan outputs are stacked along their scan axes (in
// reverse for prepending directions).
func convertScan(c *Ctx, _ *Node) error {
	a := c.Attr("body")
	if a == nil || a.Type != AttrGraph || a.G == nil {
		return fmt.Errorf("Scan: attribute body (a graph) is required")
	}
	body := a.G
	m := int(c.AttrInt("num_scan_inputs", 0))
	nState := c.NumInputs() - m
	nScanOut := len(body.Outputs) - nState
	if m < 1 || nState < 0 || len(body.Inputs) != nState+m || nScanOut < 0 {
		return fmt.Errorf("Scan: %d inputs with num_scan_inputs %d, body %q with %d inputs and %d outputs", c.NumInputs(), m, body.Name, len(body.Inputs), len(body.Outputs))
	}
	inAxes := c.AttrInts("scan_input_axes", make([]int64, m))
	inDirs := c.AttrInts("scan_input_directions", make([]int64, m))
	outAxes := c.AttrInts("scan_output_axes", make([]int64, nScanOut))
	outDirs := c.AttrInts("scan_output_directions", make([]int64, nScanOut))
	if len(inAxes) != m || len(inDirs) != m || len(outAxes) != nScanOut || len(outDirs) != nScanOut {
		return fmt.Errorf("Scan: scan_input_axes/directions need %d values and scan_output_axes/directions %d", m, nScanOut)
	}
	state := make([]*fxgraph.Node, nState)
	for j := range state {
		v, err := c.Input(j)
		if err != nil {
			return err
		}
		state[j] = v
	}
	xs := make([]*fxgraph.Node, m)
	length := int64(-1)
	for j := range xs {
		x, err := c.Input(nState + j)
		if err != nil {
			return err
		}
		xm := Meta(x)
		axis := inAxes[j]
		if axis < 0 {
			axis += int64(xm.Rank())
		}
		if axis < 0 || axis >= int64(xm.Rank()) {
			return fmt.Errorf("Scan: scan_input_axes[%d] = %d is out of range for %s", j, inAxes[j], xm)
		}
		d := xm.Shape[axis]
		if !d.IsStatic() {
			return Unsupported("Scan over a dim of run-time size (%s, axis %d; scans are unrolled at import)", xm, axis)
		}
		if length >= 0 && d.Size != length {
			return fmt.Errorf("Scan: scan input %d has %d elements along its axis, input 0 has %d", j, d.Size, length)
		}
		length, inAxes[j], xs[j] = d.Size, axis, x
	}
	state, scans, err := unrollScan(c, body, state, xs, length, inAxes, inDirs, nScanOut)
	if err != nil {
		return err
	}
	return setUnrolledOutputs(c, state, scans, outAxes, outDirs)
}

// convertScan8 converts Scan of opsets 8 (batched: every state and scan
// input has a leading batch axis, the scan axis is axis 1) by unrolling the
// opset 9 scan of each batch entry and stacking the results. sequence_lens
// must be absent or a constant equal to the sequence length.
func convertScan8(c *Ctx, _ *Node) error {
	a := c.Attr("body")
	if a == nil || a.Type != AttrGraph || a.G == nil {
		return fmt.Errorf("Scan: attribute body (a graph) is required")
	}
	body := a.G
	m := int(c.AttrInt("num_scan_inputs", 0))
	nState := c.NumInputs() - 1 - m
	nScanOut := len(body.Outputs) - nState
	if m < 1 || nState < 0 || len(body.Inputs) != nState+m || nScanOut < 0 {
		return fmt.Errorf("Scan: %d inputs with num_scan_inputs %d, body %q with %d inputs and %d outputs", c.NumInputs(), m, body.Name, len(body.Inputs), len(body.Outputs))
	}
	dirs := c.AttrInts("directions", make([]int64, m))
	if len(dirs) != m {
		return fmt.Errorf("Scan: directions has %d values, want %d", len(dirs), m)
	}
	ins := make([]*fxgraph.Node, nState+m)
	for j := range ins {
		v, err := c.Input(1 + j)
		if err != nil {
			return err
		}
		if r := Meta(v).Rank(); r < 1 || j >= nState && r < 2 {
			return fmt.Errorf("Scan: input %d is %s, want a batch axis (and a scan axis for scan inputs)", 1+j, Meta(v))
		}
		ins[j] = v
	}
	batch, length := Meta(ins[0]).Shape[0], Meta(ins[nState]).Shape[1]
	if !batch.IsStatic() || !length.IsStatic() {
		return Unsupported("Scan (opset 8) over a batch or sequence of run-time size (scans are unrolled at import)")
	}
	if c.HasInput(0) {
		lens, err := c.ConstInts(0)
		if err != nil {
			return err
		}
		for _, l := range lens {
			if l != length.Size {
				return Unsupported("Scan (opset 8) with sequence_lens %v shorter than the sequence (%d)", lens, length.Size)
			}
		}
	}
	outs := make([][]*fxgraph.Node, nState+nScanOut) // per output, per batch entry
	for b := range batch.Size {
		per := make([]*fxgraph.Node, len(ins))
		for j, v := range ins {
			el, err := c.Emit(fxgraph.AtenSelectInt, v, int64(0), b)
			if err != nil {
				return err
			}
			per[j] = el
		}
		state, scans, err := unrollScan(c, body, per[:nState], per[nState:], length.Size, make([]int64, m), dirs, nScanOut)
		if err != nil {
			return err
		}
		for j, v := range state {
			outs[j] = append(outs[j], v)
		}
		for k, parts := range scans {
			v, err := stackParts(c, parts, 0, false)
			if err != nil {
				return err
			}
			outs[nState+k] = append(outs[nState+k], v)
		}
	}
	for j, parts := range outs {
		if !c.HasOutput(j) {
			continue
		}
		v, err := stackParts(c, parts, 0, false)
		if err != nil {
			return err
		}
		c.SetOutput(j, v)
	}
	return nil
}

// unrollScan inlines body once per element of the scan inputs xs (length
// elements along inAxes, walked backwards where inDirs is set), threading
// state, and returns the last state and each scan output's per-iteration
// values.
func unrollScan(c *Ctx, body *Graph, state, xs []*fxgraph.Node, length int64, inAxes, inDirs []int64, nScanOut int) ([]*fxgraph.Node, [][]*fxgraph.Node, error) {
	nState := len(state)
	state = slices.Clone(state)
	if length > MaxLoopUnroll {
		return nil, nil, Unsupported("Scan of more than %d iterations (scans are unrolled at import)", MaxLoopUnroll)
	}
	scans := make([][]*fxgraph.Node, nScanOut)
	for t := range length {
		bind := map[string]*fxgraph.Node{}
		for j, v := range state {
			bind[body.Inputs[j].Name] = v
		}
		for j, x := range xs {
			pos := t
			if inDirs[j] != 0 {
				pos = length - 1 - t
			}
			el, err := c.Emit(fxgraph.AtenSelectInt, x, inAxes[j], pos)
			if err != nil {
				return nil, nil, err
			}
			bind[body.Inputs[nState+j].Name] = el
		}
		outs, err := c.s.inlineBody(body, bind)
		if err != nil {
			return nil, nil, err
		}
		copy(state, outs[:nState])
		for k := range scans {
			scans[k] = append(scans[k], outs[nState+k])
		}
	}
	return state, scans, nil
}
