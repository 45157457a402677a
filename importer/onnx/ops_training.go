package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
)

// The optimizer operators of ai.onnx.preview.training (opset 1): Adagrad,
// Adam and Momentum, each one update step of n tensors from the learning
// rate R and the step count T (run-time scalars), pointwise. Gradient
// (automatic differentiation) is unsupported.

const trainingDomain = "ai.onnx.preview.training"

func registerTraining(cs converters) {
	cs.register(trainingDomain, "Adagrad", 1, trAdagrad)
	cs.register(trainingDomain, "Adam", 1, trAdam)
	cs.register(trainingDomain, "Momentum", 1, trMomentum)
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
	return e.op("aten.add.Tensor", e.op("aten.mul.Scalar", x, norm), g)
}

// trAdagrad: r = R / (1 + T*decay_factor); G' = norm*X + G; H' = H + G'^2;
// X' = X - r * G' / (sqrt(H') + epsilon).
func trAdagrad(c *Ctx, _ *Node) error {
	r, t, gr, err := trGroups(c, 3)
	if err != nil {
		return err
	}
	e := &sigEmitter{c: c}
	rate := e.op("aten.div.Tensor", r, e.op("aten.add.Scalar", e.op("aten.mul.Scalar", t, c.AttrFloat("decay_factor", 0)), 1.0))
	n := len(gr[0])
	xs, hs := make([]*fxgraph.Node, n), make([]*fxgraph.Node, n)
	for i := range n {
		g := trRegularized(e, gr[0][i], gr[1][i], c.AttrFloat("norm_coefficient", 0))
		hs[i] = e.op("aten.add.Tensor", gr[2][i], e.op("aten.mul.Tensor", g, g))
		den := e.op("aten.add.Scalar", e.op("aten.sqrt.default", hs[i]), c.AttrFloat("epsilon", 0))
		xs[i] = e.op("aten.sub.Tensor", gr[0][i], e.op("aten.mul.Tensor", rate, e.op("aten.div.Tensor", g, den)))
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
		return e.op("aten.pow.Tensor_Tensor", c.ScalarConst(dt, base), t)
	}
	corr := e.op("aten.div.Tensor", e.op("aten.sqrt.default", e.op("aten.rsub.Scalar", pow(beta), 1.0)), e.op("aten.rsub.Scalar", pow(alpha), 1.0))
	rate := e.op("aten.where.self", e.op("aten.gt.Scalar", t, 0.0), e.op("aten.mul.Tensor", r, corr), r)
	n := len(gr[0])
	xs, vs, hs := make([]*fxgraph.Node, n), make([]*fxgraph.Node, n), make([]*fxgraph.Node, n)
	for i := range n {
		g := trRegularized(e, gr[0][i], gr[1][i], c.AttrFloat("norm_coefficient", 0))
		vs[i] = e.op("aten.add.Tensor", e.op("aten.mul.Scalar", gr[2][i], alpha), e.op("aten.mul.Scalar", g, 1-alpha))
		hs[i] = e.op("aten.add.Tensor", e.op("aten.mul.Scalar", gr[3][i], beta), e.op("aten.mul.Scalar", e.op("aten.mul.Tensor", g, g), 1-beta))
		den := e.op("aten.add.Scalar", e.op("aten.sqrt.default", hs[i]), c.AttrFloat("epsilon", 0))
		x := e.op("aten.sub.Tensor", gr[0][i], e.op("aten.mul.Tensor", rate, e.op("aten.div.Tensor", vs[i], den)))
		xs[i] = e.op("aten.mul.Scalar", x, 1-c.AttrFloat("norm_coefficient_post", 0))
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
	b := e.op("aten.where.self", e.op("aten.gt.Scalar", t, 0.0), c.ScalarConst(dt, c.AttrFloat("beta", 0)), c.ScalarConst(dt, 1))
	n := len(gr[0])
	xs, vs := make([]*fxgraph.Node, n), make([]*fxgraph.Node, n)
	for i := range n {
		g := trRegularized(e, gr[0][i], gr[1][i], c.AttrFloat("norm_coefficient", 0))
		vs[i] = e.op("aten.add.Tensor", e.op("aten.mul.Scalar", gr[2][i], alpha), e.op("aten.mul.Tensor", b, g))
		step := vs[i]
		if mode == "nesterov" {
			step = e.op("aten.add.Tensor", g, e.op("aten.mul.Scalar", vs[i], alpha))
		}
		xs[i] = e.op("aten.sub.Tensor", gr[0][i], e.op("aten.mul.Tensor", r, step))
	}
	if e.err != nil {
		return e.err
	}
	trSetOutputs(c, xs, vs)
	return nil
}
