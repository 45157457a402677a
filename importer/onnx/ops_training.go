package onnx

import (
	"fmt"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// The optimizer operators of ai.onnx.preview.training (opset 1): Adagrad,
// Adam and Momentum, each one update step of n tensors from the learning
// rate R and the step count T (run-time scalars), pointwise; and Gradient,
// reverse-mode differentiation of the graph before it (trGradient).

const trainingDomain = "ai.onnx.preview.training"

func registerTraining(cs converters) {
	cs.register(trainingDomain, "Adagrad", 1, trAdagrad)
	cs.register(trainingDomain, "Adam", 1, trAdam)
	cs.register(trainingDomain, "Momentum", 1, trMomentum)
	cs.register(trainingDomain, "Gradient", 1, trGradient)
}

// trGroups returns R, T as float scalars of X's dtype and the per-tensor
// groups of the inputs after them: k groups (X..., G..., ...) of n tensors.
func trGroups(c *Ctx, k int) (r, t *fxgraph.Node, groups [][]*fxgraph.Node, err error) {
	ins, err := c.Inputs()
	if err != nil {
		return nil, nil, nil, err
	}
	if len(ins) < 2+k || (len(ins)-2)%k != 0 {
		return nil, nil, nil, fmt.Errorf("%d inputs, want R, T and %d groups of equally many tensors", len(ins), k)
	}
	n := (len(ins) - 2) / k
	dt := Meta(ins[2]).DType
	if !dt.IsFloat() {
		return nil, nil, nil, fmt.Errorf("optimizer of %s tensors, want floats", Meta(ins[2]))
	}
	if r, err = ewCastTo(c, ins[0], dt); err != nil {
		return nil, nil, nil, err
	}
	if t, err = ewCastTo(c, ins[1], dt); err != nil {
		return nil, nil, nil, err
	}
	for g := range k {
		groups = append(groups, ins[2+g*n:2+(g+1)*n])
	}
	return r, t, groups, nil
}

// trSetOutputs binds output group g's tensors.
func trSetOutputs(c *Ctx, outs ...[]*fxgraph.Node) {
	k := 0
	for _, group := range outs {
		for _, o := range group {
			c.SetOutput(k, o)
			k++
		}
	}
}

// trRegularized returns norm*X + G.
func trRegularized(e *sigEmitter, x, g *fxgraph.Node, norm float64) *fxgraph.Node {
	return e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulScalar, x, norm), g)
}

// trAdagrad: r = R / (1 + T*decay_factor); G' = norm*X + G; H' = H + G'^2;
// X' = X - r * G' / (sqrt(H') + epsilon).
func trAdagrad(c *Ctx, _ *Node) error {
	r, t, gr, err := trGroups(c, 3)
	if err != nil {
		return err
	}
	e := &sigEmitter{c: c}
	rate := e.op(fxgraph.AtenDivTensor, r, e.op(fxgraph.AtenAddScalar, e.op(fxgraph.AtenMulScalar, t, c.AttrFloat("decay_factor", 0)), 1.0))
	n := len(gr[0])
	xs, hs := make([]*fxgraph.Node, n), make([]*fxgraph.Node, n)
	for i := range n {
		g := trRegularized(e, gr[0][i], gr[1][i], c.AttrFloat("norm_coefficient", 0))
		hs[i] = e.op(fxgraph.AtenAddTensor, gr[2][i], e.op(fxgraph.AtenMulTensor, g, g))
		den := e.op(fxgraph.AtenAddScalar, e.op(fxgraph.AtenSqrt, hs[i]), c.AttrFloat("epsilon", 0))
		xs[i] = e.op(fxgraph.AtenSubTensor, gr[0][i], e.op(fxgraph.AtenMulTensor, rate, e.op(fxgraph.AtenDivTensor, g, den)))
	}
	if e.err != nil {
		return e.err
	}
	trSetOutputs(c, xs, hs)
	return nil
}

// trAdam: G' = norm*X + G; V' = alpha*V + (1-alpha)*G'; H' = beta*H +
// (1-beta)*G'^2; r = R*sqrt(1-beta^T)/(1-alpha^T) when T > 0, else R;
// X' = (1 - norm_post) * (X - r * V' / (sqrt(H') + epsilon)).
func trAdam(c *Ctx, _ *Node) error {
	r, t, gr, err := trGroups(c, 4)
	if err != nil {
		return err
	}
	alpha, beta := c.AttrFloat("alpha", 0.9), c.AttrFloat("beta", 0.999)
	dt := Meta(r).DType
	e := &sigEmitter{c: c}
	pow := func(base float64) *fxgraph.Node {
		return e.op(fxgraph.AtenPowTensorTensor, c.ScalarConst(dt, base), t)
	}
	corr := e.op(fxgraph.AtenDivTensor, e.op(fxgraph.AtenSqrt, e.op(fxgraph.AtenRsubScalar, pow(beta), 1.0)), e.op(fxgraph.AtenRsubScalar, pow(alpha), 1.0))
	rate := e.op(fxgraph.AtenWhereSelf, e.op(fxgraph.AtenGtScalar, t, 0.0), e.op(fxgraph.AtenMulTensor, r, corr), r)
	n := len(gr[0])
	xs, vs, hs := make([]*fxgraph.Node, n), make([]*fxgraph.Node, n), make([]*fxgraph.Node, n)
	for i := range n {
		g := trRegularized(e, gr[0][i], gr[1][i], c.AttrFloat("norm_coefficient", 0))
		vs[i] = e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulScalar, gr[2][i], alpha), e.op(fxgraph.AtenMulScalar, g, 1-alpha))
		hs[i] = e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulScalar, gr[3][i], beta), e.op(fxgraph.AtenMulScalar, e.op(fxgraph.AtenMulTensor, g, g), 1-beta))
		den := e.op(fxgraph.AtenAddScalar, e.op(fxgraph.AtenSqrt, hs[i]), c.AttrFloat("epsilon", 0))
		x := e.op(fxgraph.AtenSubTensor, gr[0][i], e.op(fxgraph.AtenMulTensor, rate, e.op(fxgraph.AtenDivTensor, vs[i], den)))
		xs[i] = e.op(fxgraph.AtenMulScalar, x, 1-c.AttrFloat("norm_coefficient_post", 0))
	}
	if e.err != nil {
		return e.err
	}
	trSetOutputs(c, xs, vs, hs)
	return nil
}

// trMomentum: G' = norm*X + G; V' = alpha*V + b*G' with b = beta when
// T > 0, else 1; standard X' = X - R*V', nesterov X' = X - R*(G' +
// alpha*V').
func trMomentum(c *Ctx, _ *Node) error {
	r, t, gr, err := trGroups(c, 3)
	if err != nil {
		return err
	}
	mode := c.AttrString("mode", "")
	if mode != "standard" && mode != "nesterov" {
		return fmt.Errorf("Momentum: mode %q, want standard or nesterov", mode)
	}
	alpha := c.AttrFloat("alpha", 0)
	dt := Meta(r).DType
	e := &sigEmitter{c: c}
	b := e.op(fxgraph.AtenWhereSelf, e.op(fxgraph.AtenGtScalar, t, 0.0), c.ScalarConst(dt, c.AttrFloat("beta", 0)), c.ScalarConst(dt, 1))
	n := len(gr[0])
	xs, vs := make([]*fxgraph.Node, n), make([]*fxgraph.Node, n)
	for i := range n {
		g := trRegularized(e, gr[0][i], gr[1][i], c.AttrFloat("norm_coefficient", 0))
		vs[i] = e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulScalar, gr[2][i], alpha), e.op(fxgraph.AtenMulTensor, b, g))
		step := vs[i]
		if mode == "nesterov" {
			step = e.op(fxgraph.AtenAddTensor, g, e.op(fxgraph.AtenMulScalar, vs[i], alpha))
		}
		xs[i] = e.op(fxgraph.AtenSubTensor, gr[0][i], e.op(fxgraph.AtenMulTensor, r, step))
	}
	if e.err != nil {
		return e.err
	}
	trSetOutputs(c, xs, vs)
	return nil
}

// trGradient converts Gradient(xs...) by reverse-mode differentiation of
// the nodes converted before it that lie between the inputs named by the
// xs attribute and the value named by y: the gradient of sum(y) with
// respect to each x. Add, Sub, Mul, Div, Neg and Identity (with
// broadcasting) are differentiated; any other operator on the path is
// unsupported. Shapes must be static.
func trGradient(c *Ctx, n *Node) error {
	xsA, yA := c.Attr("xs"), c.Attr("y")
	if xsA == nil || yA == nil {
		return fmt.Errorf("Gradient: attributes xs and y are required")
	}
	xs := make([]string, len(xsA.Strings))
	for i, b := range xsA.Strings {
		xs[i] = string(b)
	}
	if c.Attr("zs") != nil {
		return Unsupported("Gradient with zs")
	}
	yName := string(yA.S)
	y, ok := c.s.env[yName]
	if !ok || isStructured(y) {
		return fmt.Errorf("Gradient: y %q is not a tensor computed before it", yName)
	}
	ones, err := trFull(c, y, 1)
	if err != nil {
		return err
	}
	grads := map[string]*fxgraph.Node{yName: ones}
	path := c.s.converted[:len(c.s.converted)-1] // without the Gradient node
	// Only values computed from some x carry a gradient to the xs.
	fromX := map[string]bool{}
	for _, x := range xs {
		fromX[x] = true
	}
	for _, node := range path {
		for _, in := range node.Inputs {
			if fromX[in] {
				for _, o := range node.Outputs {
					fromX[o] = true
				}
			}
		}
	}
	for i := len(path) - 1; i >= 0; i-- {
		node := path[i]
		if len(node.Outputs) != 1 || grads[node.Outputs[0]] == nil || !fromX[node.Outputs[0]] {
			continue
		}
		if node.Domain != "" && node.Domain != "ai.onnx" {
			return Unsupported("Gradient through operator %s of domain %q", node.OpType, node.Domain)
		}
		if err := trBackward(c, node, grads); err != nil {
			return err
		}
	}
	for i, x := range xs {
		g := grads[x]
		if g == nil {
			xn, ok := c.s.env[x]
			if !ok || isStructured(xn) {
				return fmt.Errorf("Gradient: xs %q is not a tensor", x)
			}
			if g, err = trFull(c, xn, 0); err != nil {
				return err
			}
		}
		c.SetOutput(i, g)
	}
	return nil
}

// trFull returns a constant of v's static shape and dtype filled with f.
func trFull(c *Ctx, v *fxgraph.Node, f float64) (*fxgraph.Node, error) {
	m := Meta(v)
	dims, ok := m.Shape.Static()
	if !ok || !m.DType.IsFloat() {
		return nil, Unsupported("Gradient of %s (want a float tensor of static shape)", m)
	}
	t := tensor.New(m.DType, dims...)
	for i := range t.NumElements() {
		t.SetFloat64(i, f)
	}
	return c.Constant("grad_fill", t), nil
}

// trBackward adds the gradients of node's inputs, given its output's, to
// grads.
func trBackward(c *Ctx, node *Node, grads map[string]*fxgraph.Node) error {
	g := grads[node.Outputs[0]]
	ins := make([]*fxgraph.Node, len(node.Inputs))
	for i, name := range node.Inputs {
		v, ok := c.s.env[name]
		if !ok || isStructured(v) {
			return Unsupported("Gradient through %s with a non-tensor input %q", node.OpType, name)
		}
		ins[i] = v
	}
	e := &sigEmitter{c: c}
	var parts []*fxgraph.Node
	switch {
	case node.OpType == "Identity" && len(ins) == 1:
		parts = []*fxgraph.Node{g}
	case node.OpType == "Neg" && len(ins) == 1:
		parts = []*fxgraph.Node{e.op(fxgraph.AtenNeg, g)}
	case node.OpType == "Add" && len(ins) == 2:
		parts = []*fxgraph.Node{g, g}
	case node.OpType == "Sub" && len(ins) == 2:
		parts = []*fxgraph.Node{g, e.op(fxgraph.AtenNeg, g)}
	case node.OpType == "Mul" && len(ins) == 2:
		parts = []*fxgraph.Node{e.op(fxgraph.AtenMulTensor, g, ins[1]), e.op(fxgraph.AtenMulTensor, g, ins[0])}
	case node.OpType == "Div" && len(ins) == 2:
		ga := e.op(fxgraph.AtenDivTensor, g, ins[1])
		parts = []*fxgraph.Node{ga, e.op(fxgraph.AtenNeg, e.op(fxgraph.AtenDivTensor, e.op(fxgraph.AtenMulTensor, ga, ins[0]), ins[1]))}
	default:
		return Unsupported("Gradient through operator %s (node %q)", node.OpType, node.Name)
	}
	if e.err != nil {
		return e.err
	}
	for i, p := range parts {
		p, err := trUnbroadcast(c, p, ins[i])
		if err != nil {
			return err
		}
		name := node.Inputs[i]
		if prev := grads[name]; prev != nil {
			if p, err = c.Emit(fxgraph.AtenAddTensor, prev, p); err != nil {
				return err
			}
		}
		grads[name] = p
	}
	return nil
}

// trUnbroadcast sums gradient g over the dims that broadcasting added to
// or stretched in x, giving x's shape.
func trUnbroadcast(c *Ctx, g, x *fxgraph.Node) (*fxgraph.Node, error) {
	gd, ok1 := Meta(g).Shape.Static()
	xd, ok2 := Meta(x).Shape.Static()
	if !ok1 || !ok2 {
		return nil, Unsupported("Gradient through broadcasting of symbolic shapes")
	}
	if slices.Equal(gd, xd) {
		return g, nil
	}
	var axes []any
	off := len(gd) - len(xd)
	for i, d := range gd {
		if i < off || xd[i-off] == 1 && d != 1 {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) > 0 {
		var err error
		if g, err = c.Emit(fxgraph.AtenSumDimIntList, g, axes, true); err != nil {
			return nil, err
		}
	}
	return c.Emit(fxgraph.AtenView, g, ints(xd))
}
