package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// The fused operators FuseEpilogues makes: a convolution or matrix product
// with what its users computed on its result (its epilogue) folded in.
// Backends with a kernel that applies the epilogue while writing the
// product (oneDNN's post-ops on CPU) lower them to one call; elsewhere
// they lower as the product followed by the epilogue.
var (
	// XserveConvFused is aten.convolution (not transposed; its nine
	// arguments first) followed by residual (a tensor of the result's shape
	// added to it, or None) and then activation (Activations) with alpha:
	//
	//	xserve.conv_fused(input, weight, bias, stride, padding, dilation,
	//	                  transposed, output_padding, groups,
	//	                  residual, activation, alpha)
	XserveConvFused = &Op{Name: "xserve.conv_fused", Args: append(convSchema(), fusedEpilogueArgs(9)...)}
	// XserveMatmulFused is aten.matmul of input and other (other transposed
	// when transpose_other, a linear layer's weight), plus bias (a vector
	// over the result's last dim, or None), plus residual (a tensor of the
	// result's shape, or None), then activation with alpha:
	//
	//	xserve.matmul_fused(input, other, transpose_other, bias,
	//	                    residual, activation, alpha)
	XserveMatmulFused = &Op{Name: "xserve.matmul_fused", Args: append([]ArgSpec{
		{"input", 0, ArgTensor, nil, false}, {"other", 1, ArgTensor, nil, false},
		{"transpose_other", 2, ArgBool, false, true}, {"bias", 3, ArgTensor, nil, true},
	}, fusedEpilogueArgs(4)...)}
)

// Activations are the activation names of the fused operators'
// activation argument, each with what it computes of y ("" for none).
var Activations = map[string]string{
	"":           "y",
	"relu":       "max(y, 0)",
	"relu6":      "min(max(y, 0), 6)",
	"sigmoid":    "1 / (1 + exp(-y))",
	"silu":       "y * sigmoid(y)",
	"hardswish":  "y * min(max(y + 3, 0), 6) / 6",
	"tanh":       "tanh(y)",
	"gelu":       "y * (1 + erf(y / sqrt(2))) / 2",
	"gelu_tanh":  "gelu's tanh approximation",
	"leaky_relu": "y if y > 0 else alpha * y",
}

func convSchema() []ArgSpec {
	return append([]ArgSpec(nil), AtenConvolution.Args...)
}

func fusedEpilogueArgs(pos int) []ArgSpec {
	return []ArgSpec{
		{"residual", pos, ArgTensor, nil, true}, {"activation", pos + 1, ArgAny, "", true}, {"alpha", pos + 2, ArgFloat, 0.0, true},
	}
}

// Epilogue is what a fused operator applies to its product: a bias vector
// and a residual added, then an activation.
type Epilogue struct {
	Bias, Residual *Node // nil for none
	Activation     string
	Alpha          float64
}

// FusedEpilogue returns the epilogue of a fused node (XserveConvFused or
// XserveMatmulFused); its bias is that of a matrix product (a convolution's
// is its own argument 2).
func FusedEpilogue(n *Node) (Epilogue, error) {
	var e Epilogue
	i := 9
	if n.Op == XserveMatmulFused {
		i = 4
		e.Bias, _ = n.Arg(3).(*Node)
	}
	e.Residual, _ = n.Arg(i).(*Node)
	a, err := n.Param("activation")
	if err != nil {
		return e, err
	}
	act, ok := a.(string)
	if !ok && a != nil {
		return e, fmt.Errorf("node %s: activation %s is not a name", n.Name, FormatArg(a))
	}
	e.Activation = act
	if _, ok := Activations[e.Activation]; !ok {
		return e, fmt.Errorf("node %s: unknown activation %q", n.Name, e.Activation)
	}
	if e.Alpha, err = n.ParamFloat("alpha"); err != nil {
		return e, err
	}
	return e, nil
}

func convFusedShape(n *Node) (Meta, error) {
	m, err := nnConvolutionShape(n)
	if err != nil {
		return m, err
	}
	return m, fusedCheck(n, m)
}

func matmulFusedShape(n *Node) (Meta, error) {
	a, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	b, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	t, err := n.ParamBool("transpose_other")
	if err != nil {
		return Meta{}, err
	}
	bs := b.Shape
	if t {
		if b.Rank() != 2 {
			return Meta{}, fmt.Errorf("matmul_fused: transpose_other of %s, want a matrix", b)
		}
		bs = Shape{b.Shape[1], b.Shape[0]}
	}
	_, out, err := MatmulShapes(a.Shape, bs)
	if err != nil {
		return Meta{}, err
	}
	m := One(PromoteTypes(a.DType, b.DType), out)
	return m, fusedCheck(n, m)
}

// fusedCheck checks a fused node's epilogue against its product's meta m.
func fusedCheck(n *Node, m Meta) error {
	e, err := FusedEpilogue(n)
	if err != nil {
		return err
	}
	out := m.Vals[0]
	if e.Residual != nil && !e.Residual.Val().Shape.Equal(out.Shape) {
		return fmt.Errorf("%s: residual %s, want %s", n.Op.Name, e.Residual.Val(), out)
	}
	if e.Bias != nil {
		dims, ok := e.Bias.Val().Shape.Static()
		last := out.Shape[len(out.Shape)-1]
		if !ok || !last.IsStatic() || tensor.NumElements(dims) != last.Size {
			return fmt.Errorf("%s: bias %s is not a vector over the result's last dim (%s)", n.Op.Name, e.Bias.Val(), out)
		}
	}
	return nil
}

// fuseRoots are the products FuseEpilogues starts from, with the
// arguments their fused node takes (nil: the node does not fuse).
var fuseRoots = map[*Op]func(g *Graph, n *Node) (op *Op, args []any, bias *Node){
	AtenConvolution: fuseConvRoot,
	AtenLinear:      fuseLinearRoot,
	AtenAddmm:       fuseAddmmRoot,
	AtenMatmul:      fuseMatmulRoot,
}

func fuseConvRoot(_ *Graph, n *Node) (*Op, []any, *Node) {
	if transposed, ok := n.Arg(6).(bool); !ok || transposed || len(n.Args) != 9 {
		return nil, nil, nil
	}
	return XserveConvFused, append([]any(nil), n.Args...), nil
}

func fuseLinearRoot(_ *Graph, n *Node) (*Op, []any, *Node) {
	w, ok := n.Arg(1).(*Node)
	if !ok || w.Val().Rank() != 2 {
		return nil, nil, nil
	}
	bias, _ := n.Arg(2).(*Node)
	if bias != nil && bias.Val().Rank() != 1 {
		return nil, nil, nil
	}
	return XserveMatmulFused, []any{n.Arg(0), w, true}, bias
}

// fuseAddmmRoot takes addmm(bias, x, w) with unit alpha and beta and a
// bias over the output columns: a linear layer (torch.export's and the
// ONNX importer's Gemm).
func fuseAddmmRoot(_ *Graph, n *Node) (*Op, []any, *Node) {
	alpha, err1 := n.ParamFloat("alpha")
	beta, err2 := n.ParamFloat("beta")
	bias, ok := n.Arg(0).(*Node)
	if err1 != nil || err2 != nil || alpha != 1 || beta != 1 || !ok {
		return nil, nil, nil
	}
	bs, out := bias.Val().Shape, n.Val().Shape
	if len(out) != 2 || !(len(bs) == 1 || (len(bs) == 2 && bs[0] == D(1))) || bs[len(bs)-1] != out[1] {
		return nil, nil, nil
	}
	return XserveMatmulFused, []any{n.Arg(1), n.Arg(2), false}, bias
}

func fuseMatmulRoot(_ *Graph, n *Node) (*Op, []any, *Node) {
	a, okA := n.Arg(0).(*Node)
	b, okB := n.Arg(1).(*Node)
	if !okA || !okB || a.Val().Rank() < 2 || b.Val().Rank() < 2 {
		return nil, nil, nil
	}
	return XserveMatmulFused, []any{a, b, false}, nil
}

// FuseEpilogues replaces each floating-point convolution (not transposed) and
// matrix product (linear, addmm as a linear layer, matmul of matrices)
// whose users compute nothing else with it but an epilogue by one fused
// node (XserveConvFused, XserveMatmulFused): a bias vector its only user
// adds (products without a bias of their own), then a residual (a tensor
// of its shape) its only user adds, then an activation its users apply
// (relu, relu6 as clamp or hardtanh to [0, 6], clamp from 0, sigmoid, SiLU
// as aten.silu or x * sigmoid(x), hardswish, tanh, GELU exact or tanh,
// leaky relu). A product with nothing to fuse but its own bias stays. It
// returns the number of fused nodes made. Backends that have no fused
// kernel should not run it: the fused nodes lower as the product and the
// epilogue again.
func (g *Graph) FuseEpilogues() int {
	fused := 0
	for _, n := range g.Nodes() {
		if n.graph != g || n.Opcode != CallFunction || len(n.Meta.Vals) != 1 || !n.Val().DType.IsFloat() {
			continue
		}
		root, ok := fuseRoots[n.Op]
		if !ok {
			continue
		}
		op, args, bias := root(g, n)
		if op == nil {
			continue
		}
		if g.fuseEpilogue(n, op, args, bias) {
			fused++
		}
	}
	return fused
}

// fuseEpilogue replaces n and its epilogue users by a node of op (args:
// its product arguments) when there is an epilogue to fold in.
func (g *Graph) fuseEpilogue(n *Node, op *Op, args []any, bias *Node) bool {
	last := n
	var used []*Node // the nodes folded in, in order
	if op == XserveMatmulFused && bias == nil {
		if add, b := addUser(last, isBiasOf); add != nil {
			bias, last, used = b, add, append(used, add)
		}
	}
	var residual *Node
	if add, r := addUser(last, sameShape); add != nil {
		residual, last, used = r, add, append(used, add)
	}
	act, alpha, actNodes := activationUsers(g, last)
	if len(actNodes) > 0 {
		last, used = actNodes[len(actNodes)-1], append(used, actNodes...)
	}
	if len(used) == 0 {
		return false
	}
	if op == XserveMatmulFused {
		args = append(args, nodeOrNone(bias))
	}
	args = append(args, nodeOrNone(residual), act, alpha)
	prev := g.SetInsertPoint(last)
	f := g.AddNamedCall(n.Name+"_fused", op, args, nil)
	g.SetInsertPoint(prev)
	f.Meta = cloneMeta(last.Meta)
	g.ReplaceAllUses(last, f)
	for i := len(used) - 1; i >= 0; i-- {
		_ = g.Erase(used[i]) // used only by the next one, erased before
	}
	_ = g.Erase(n)
	return true
}

// nodeOrNone is n as an argument: None when nil.
func nodeOrNone(n *Node) any {
	if n == nil {
		return nil
	}
	return n
}

// addUser returns n's only user when it is aten.add.Tensor (alpha 1) of n
// and another node of n's dtype for which fits(n, other) holds, and that
// other node; else nil, nil. The other node must come before n, since the
// fused node replaces n.
func addUser(n *Node, fits func(n, other *Node) bool) (*Node, *Node) {
	if len(n.users) != 1 {
		return nil, nil
	}
	add := n.users[0]
	if add.Op != AtenAddTensor || len(add.Args) != 2 {
		return nil, nil
	}
	if alpha, err := add.ParamFloat("alpha"); err != nil || alpha != 1 {
		return nil, nil
	}
	var other *Node
	switch {
	case add.Args[0] == n:
		other, _ = add.Args[1].(*Node)
	case add.Args[1] == n:
		other, _ = add.Args[0].(*Node)
	}
	if other == nil || other == n || len(other.Meta.Vals) != 1 || other.Val().DType != n.Val().DType || !before(other, n) || !fits(n, other) {
		return nil, nil
	}
	return add, other
}

// isBiasOf reports whether other is a vector over n's last dim (every
// other dim 1).
func isBiasOf(n, other *Node) bool {
	nd, od := n.Val().Shape, other.Val().Shape
	if len(od) == 0 || len(od) > len(nd) || !nd[len(nd)-1].IsStatic() {
		return false
	}
	for i, d := range od {
		want := int64(1)
		if i == len(od)-1 {
			want = nd[len(nd)-1].Size
		}
		if !d.IsStatic() || d.Size != want {
			return false
		}
	}
	return true
}

// sameShape reports whether other has n's shape (the same dims, symbols
// included: equal in every bucket; no dim Unknown).
func sameShape(n, other *Node) bool {
	for _, d := range n.Val().Shape {
		if d == Unknown {
			return false
		}
	}
	return other.Val().Shape.Equal(n.Val().Shape)
}

// activationUsers returns the activation n's users apply to it when they
// do nothing else with it, and those users (the last one the activation's
// result); "" when none.
func activationUsers(g *Graph, n *Node) (string, float64, []*Node) {
	users := n.Users()
	for _, u := range users {
		if u.Opcode != CallFunction || len(u.Args) == 0 {
			return "", 0, nil
		}
	}
	if len(users) == 2 {
		return siluUsers(n, users)
	}
	if len(users) != 1 || users[0].Args[0] != n {
		return "", 0, nil
	}
	u := users[0]
	if act, alpha, ok := activationOf(g, u); ok {
		return act, alpha, []*Node{u}
	}
	return "", 0, nil
}

// plainActivations are the activation ops without parameters.
var plainActivations = map[*Op]string{
	AtenRelu: "relu", AtenSigmoid: "sigmoid", AtenSilu: "silu", AtenHardswish: "hardswish", AtenTanh: "tanh",
}

// activationOf returns the activation u applies to its first argument:
// the plain ones, and the ops whose parameters decide (clamp and hardtanh to
// [0, 6] or clamp from 0, GELU, leaky relu).
func activationOf(g *Graph, u *Node) (string, float64, bool) {
	if act, ok := plainActivations[u.Op]; ok {
		return act, 0, true
	}
	switch u.Op {
	case AtenClamp, AtenClampTensor:
		lo, okLo := scalarArg(g, u, 1)
		hi, okHi := scalarArg(g, u, 2)
		switch {
		case okLo && okHi && lo == 0 && hi == 6:
			return "relu6", 0, true
		case okLo && lo == 0 && u.Arg(2) == nil:
			return "relu", 0, true
		}
	case AtenHardtanh:
		lo, err1 := u.ParamFloat("min_val")
		hi, err2 := u.ParamFloat("max_val")
		if err1 == nil && err2 == nil && lo == 0 && hi == 6 {
			return "relu6", 0, true
		}
	case AtenGelu:
		switch a, _ := u.Param("approximate"); a {
		case "none", nil:
			return "gelu", 0, true
		case "tanh":
			return "gelu_tanh", 0, true
		}
	case AtenLeakyRelu:
		if slope, err := u.ParamFloat("negative_slope"); err == nil {
			return "leaky_relu", slope, true
		}
	}
	return "", 0, false
}

// scalarArg returns argument i of u as a number: a literal, or a
// one-element constant.
func scalarArg(g *Graph, u *Node, i int) (float64, bool) {
	switch a := u.Arg(i).(type) {
	case nil:
		return 0, false
	case *Node:
		if t := g.ConstValue(a); t != nil && t.NumElements() == 1 {
			return t.Float64At(0), true
		}
		return 0, false
	default:
		return AsFloat(a)
	}
}

// siluUsers matches x * sigmoid(x) over n (users: the sigmoid and the
// product, the sigmoid used by the product only).
func siluUsers(n *Node, users []*Node) (string, float64, []*Node) {
	sig, mul := users[0], users[1]
	if sig.Op != AtenSigmoid {
		sig, mul = mul, sig
	}
	if sig.Op != AtenSigmoid || sig.Args[0] != n || mul.Op != AtenMulTensor || len(mul.Args) != 2 {
		return "", 0, nil
	}
	if len(sig.users) != 1 || sig.users[0] != mul {
		return "", 0, nil
	}
	if !(mul.Args[0] == n && mul.Args[1] == sig) && !(mul.Args[0] == sig && mul.Args[1] == n) {
		return "", 0, nil
	}
	return "silu", 0, []*Node{sig, mul}
}
