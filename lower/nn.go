package lower

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/gomlx/go-xla/pkg/types"
	"github.com/gomlx/go-xla/pkg/types/dtypes"
	"github.com/gomlx/go-xla/pkg/types/shapes"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/internal/hlo"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerNN registers the rules of convolution, pooling, normalization, matmul and softmax.
func registerNN(r *Registry) {
	r.Register(fxgraph.AtenConvolution, nnConvolution)
	r.Register(fxgraph.AtenMm, nnMM)
	r.Register(fxgraph.AtenBmm, nnBMM)
	r.Register(fxgraph.AtenAddmm, nnAddmm)
	r.Register(fxgraph.AtenMatmul, nnMatmul)
	r.Register(fxgraph.AtenLinear, nnLinear)
	r.Register(fxgraph.AtenMaxPool1d, nnMaxPoolRule(1, false))
	r.Register(fxgraph.AtenMaxPool1dWithIndices, nnMaxPoolRule(1, true))
	r.Register(fxgraph.AtenMaxPool2dWithIndices, nnMaxPoolRule(2, true))
	r.Register(fxgraph.AtenMaxPool3dWithIndices, nnMaxPoolRule(3, true))
	r.Register(fxgraph.AtenAvgPool1d, nnAvgPoolRule(1))
	r.Register(fxgraph.AtenAvgPool2d, nnAvgPoolRule(2))
	r.Register(fxgraph.AtenAvgPool3d, nnAvgPoolRule(3))
	r.Register(fxgraph.Aten_AdaptiveAvgPool2d, nnAdaptiveAvgPoolRule(2))
	r.Register(fxgraph.Aten_NativeBatchNormLegitNoTraining, nnBatchNorm)
	r.Register(fxgraph.AtenNativeLayerNorm, nnLayerNorm)
	r.Register(fxgraph.AtenNativeGroupNorm, nnGroupNorm)
	r.Register(fxgraph.Aten_Softmax, nnSoftmaxRule(false))
	r.Register(fxgraph.Aten_LogSoftmax, nnSoftmaxRule(true))
	r.Register(fxgraph.XserveResize, nnResize)
	r.Register(fxgraph.AtenGridSampler2d, nnGridSampler)
	r.Register(fxgraph.XserveRoIAlign, nnRoiAlign)
}

// nnB chains StableHLO builder calls, keeping the first error: once an
// error is set every method returns nil without building anything.
type nnB struct {
	ctx *Context
	err error
	// epi, when set, is what the next matrix product may compute besides
	// the product (nnMatmulEpilogue); the kernel sets epiUsed if it did.
	epi     *nnEpilogue
	epiUsed bool
}

func (b *nnB) set(v *stablehlo.Value, err error) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	if err != nil {
		b.err = err
		return nil
	}
	return v
}

func (b *nnB) bin(op func(x, y *stablehlo.Value) (*stablehlo.Value, error), x, y *stablehlo.Value) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(op(x, y))
}

func (b *nnB) un(op func(x *stablehlo.Value) (*stablehlo.Value, error), x *stablehlo.Value) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(op(x))
}

// convert converts x to the program dtype of IR dtype dt.
func (b *nnB) convert(x *stablehlo.Value, dt tensor.DType) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(b.ctx.ConvertTo(x, dt))
}

func (b *nnB) reshape(x *stablehlo.Value, dims []int64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	if equalDims(hlo.ShapeOf(x).Dimensions, dims) {
		return x
	}
	return b.set(hlo.Reshape(x, shapes.Make(hlo.ShapeOf(x).DType, intsOf(dims)...)))
}

// bcastIn broadcasts x to dims, x's axis i going to axes[i].
func (b *nnB) bcastIn(x *stablehlo.Value, dims []int64, axes []int) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(hlo.BroadcastInDim(x, shapes.Make(hlo.ShapeOf(x).DType, intsOf(dims)...), axes))
}

// bcast broadcasts x to dims with NumPy rules.
func (b *nnB) bcast(x *stablehlo.Value, dims []int64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(b.ctx.BroadcastTo(x, dims))
}

func (b *nnB) transpose(x *stablehlo.Value, perm []int) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(hlo.Transpose(x, perm...))
}

func (b *nnB) slice(x *stablehlo.Value, starts, limits, strides []int) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(hlo.Slice(x, starts, limits, strides))
}

// scalar is a rank-0 constant of x's dtype.
func (b *nnB) scalar(like *stablehlo.Value, v float64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(b.ctx.ScalarLike(like, v))
}

// full is a constant of x's dtype broadcast to dims.
func (b *nnB) full(like *stablehlo.Value, v float64, dims []int64) *stablehlo.Value {
	return b.bcastIn(b.scalar(like, v), dims, nil)
}

// consts is a constant of like's dtype holding vals with the given dims.
func (b *nnB) consts(like *stablehlo.Value, vals []float64, dims []int64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	dt, err := tensorDType(hlo.ShapeOf(like).DType)
	if err != nil {
		b.err = err
		return nil
	}
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return b.set(b.ctx.Constant(t))
}

func (b *nnB) reduce(x *stablehlo.Value, kind string, init float64, axes []int) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	fn, err := b.ctx.ReduceFn(kind, hlo.ShapeOf(x).DType)
	if err != nil {
		b.err = err
		return nil
	}
	return b.set(hlo.Reduce(x, b.scalar(x, init), fn, axes...))
}

// dot is a dot_general with the context's precision for float operands.
func (b *nnB) dot(x *stablehlo.Value, xc, xb []int, y *stablehlo.Value, yc, yb []int) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	if b.ctx.Options.hasKernel(MatmulKernel) {
		if form, ok := nnMatmulForm(x, xc, xb, y, yc, yb); ok {
			epi := b.epi
			b.epi = nil
			if epi != nil && epi.bias != nil && nnDimsOf(epi.bias)[0] != form.n {
				epi = nil
			}
			if epi != nil && epi.residual != nil && !slices.Equal(nnDimsOf(epi.residual), form.out) {
				epi = nil
			}
			b.epiUsed = epi != nil
			return nnMatmulKernel(b, x, y, form, epi)
		}
	}
	b.epi = nil
	d := hlo.DotGeneral(x, xc, xb, y, yc, yb)
	if hlo.ShapeOf(x).DType.IsFloat() {
		d = d.Precision(b.ctx.Precision(), b.ctx.Precision())
	}
	return b.set(d.Done())
}

func (b *nnB) out(vals ...*stablehlo.Value) ([]*stablehlo.Value, error) {
	if b.err != nil {
		return nil, b.err
	}
	return vals, nil
}

// nnFloatCompute is the dtype floating-point normalization, pooling and
// softmax math of dt runs in: float32 for half floats, dt otherwise.
func nnFloatCompute(dt tensor.DType) tensor.DType {
	if dt == tensor.Float16 || dt == tensor.BFloat16 {
		return tensor.Float32
	}
	return dt
}

func nnRange(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func nnInts(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

func nnProd(v []int64) int64 {
	p := int64(1)
	for _, x := range v {
		p *= x
	}
	return p
}

// nnAllBut returns the axes of [0, rank) other than skip.
func nnAllBut(rank int, skip ...int) []int {
	var out []int
	for i := 0; i < rank; i++ {
		keep := true
		for _, s := range skip {
			if s == i {
				keep = false
			}
		}
		if keep {
			out = append(out, i)
		}
	}
	return out
}

// nnConvolution lowers aten.convolution.default. A transposed convolution
// is the convolution of the input dilated by the stride with the spatially
// flipped kernel, whose in/out feature dims are swapped within each group,
// padded by dilation*(k-1)-padding on both sides plus output_padding on the
// high side (negative paddings crop the result).
func nnConvolution(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, wd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	spatial := len(wd) - 2
	p, err := fxgraph.ConvArgs(n, spatial)
	if err != nil {
		return nil, err
	}
	cdt := ctx.ComputeDType(dt)
	b := &nnB{ctx: ctx}
	x, w := b.convert(in[0], cdt), b.convert(in[1], cdt)
	sp := nnRange(2, 2+spatial)
	prec := ctx.Precision()
	var y *stablehlo.Value
	_, xd, xerr := InMeta(n, 0)
	// oneDNN has no convolution of zero channels (XLA's own gives zeros).
	if xerr == nil && !p.Transposed && cdt == tensor.Float32 && spatial >= 1 && spatial <= 3 && ctx.Options.hasKernel(ConvKernel) &&
		tensor.NumElements(wd) > 0 {
		var bias *stablehlo.Value
		if in[2] != nil {
			bias = b.convert(in[2], cdt)
		}
		epi := nnConvEpilogue(b, n, cdt)
		y := b.convert(nnConvKernel(b, x, w, bias, outDims, p, epi), dt)
		if b.err == nil {
			for _, u := range epi.fused {
				ctx.Fuse(u, y) // a SiLU's sigmoid, used only by the product, gets a value never read
			}
		}
		return b.out(y)
	}
	if xerr == nil && !p.Transposed && *ctx.Options.DepthwiseMulAdd && nnIsDepthwise(xd, wd, p.Groups) {
		y = nnDepthwise(b, x, w, xd, wd, outDims, p)
	} else if xerr == nil && !p.Transposed && *ctx.Options.ConvAsDot && nnConvAsDotFits(xd, wd, outDims, p.Groups) {
		y = nnConvAsDot(b, x, w, wd, outDims, p)
	} else if !p.Transposed {
		pads := make([][2]int, spatial)
		for j := range pads {
			pads[j] = [2]int{int(p.Padding[j]), int(p.Padding[j])}
		}
		if b.err == nil {
			y = b.set(hlo.Convolution(x, w, nnInts(p.Stride), pads, nil, nnInts(p.Dilation),
				0, 1, sp, 1, 0, sp, 0, 1, sp, int(p.Groups), 1, prec, prec))
		}
	} else {
		g := p.Groups
		if b.err == nil {
			w = b.set(hlo.Reverse(w, nnRange(2, 2+spatial)...))
		}
		kin, kout := 0, 1
		if g > 1 {
			cin, coutg := wd[0], wd[1]
			w = b.reshape(w, append([]int64{g, cin / g, coutg}, wd[2:]...))
			perm := append([]int{0, 2, 1}, nnRange(3, 3+spatial)...)
			w = b.transpose(w, perm)
			w = b.reshape(w, append([]int64{g * coutg, cin / g}, wd[2:]...))
			kin, kout = 1, 0
		}
		pads := make([][2]int, spatial)
		crop := false
		starts, limits := make([]int, len(outDims)), make([]int, len(outDims))
		for i, d := range outDims {
			limits[i] = int(d)
		}
		for j := 0; j < spatial; j++ {
			ek := p.Dilation[j] * (wd[2+j] - 1)
			lo := ek - p.Padding[j]
			hi := ek - p.Padding[j] + p.OutputPadding[j]
			pads[j] = [2]int{int(max(lo, 0)), int(max(hi, 0))}
			if lo < 0 {
				crop = true
				starts[2+j] = int(-lo)
				limits[2+j] += int(-lo)
			}
			if hi < 0 {
				crop = true
			}
		}
		if b.err == nil {
			y = b.set(hlo.Convolution(x, w, nil, pads, nnInts(p.Stride), nnInts(p.Dilation),
				0, 1, sp, kin, kout, sp, 0, 1, sp, int(g), 1, prec, prec))
		}
		if crop {
			y = b.slice(y, starts, limits, nil)
		}
	}
	if in[2] != nil {
		bias := b.convert(in[2], cdt)
		y = b.bin(hlo.Add, y, b.bcastIn(bias, outDims, []int{1}))
	}
	return b.out(b.convert(y, dt))
}

// ConvKernel is the custom-call target of xserve's CPU convolution kernel
// (cpukernels/conv.c): float32, 1 to 3 spatial dims, any groups, stride,
// padding and dilation, optional bias, and optionally a residual added to
// the result and an activation applied to it (what the convolution's users
// compute, fused: nnConvEpilogue).
const ConvKernel = "xserve_conv_f32"

// nnChannelsLast is the minor-to-major layout that stores a logical
// [N, C, S...] tensor of rank dims as [N, S..., C], as the CPU kernels read
// and write activations.
func nnChannelsLast(rank int) []int64 {
	layout := []int64{1}
	for j := rank - 1; j >= 2; j-- {
		layout = append(layout, int64(j))
	}
	return append(layout, 0)
}

// nnDilations is the first n of d with 0 (none given) read as 1, as the
// CPU kernels' dilation attribute wants them.
func nnDilations(d []int64, n int) []int64 {
	out := make([]int64, n)
	for j := range out {
		out[j] = max(d[j], 1)
	}
	return out
}

// nnConvKernel computes a convolution with ConvKernel. The kernel reads the
// input and writes the result channels-last, which the operand and result
// layouts ask XLA for, so the logical program stays NCHW and XLA places any
// transposes itself. The weight operand is logically [kernel..., in/groups,
// out], row-major (XLA's own convolution layout, which
// Options.ConvWeightsHWIO uploads weights in): its transpose of w composes
// with the one that reads an HWIO-uploaded weight back as OIHW into no op
// at all, where the same weight passed as OIHW with an HWIO operand layout
// cost a copy per weight per call (XLA did not see that copy was a
// bitcast).
func nnConvKernel(b *nnB, x, w, bias *stablehlo.Value, outDims []int64, p fxgraph.ConvParams, epi nnEpilogue) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	rank := len(outDims)
	spatial := rank - 2
	channelsLast := nnChannelsLast(rank)
	toHWIO := make([]int, 0, rank) // [kernel..., in/groups, out] from [out, in/groups, kernel...]
	weights := make([]int64, rank) // row-major
	for j := range rank {
		weights[j] = int64(rank - 1 - j)
		if j >= 2 {
			toHWIO = append(toHWIO, j)
		}
	}
	toHWIO = append(toHWIO, 1, 0)
	wHWIO := b.transpose(w, toHWIO)
	if b.err != nil {
		return nil
	}
	dilation := nnDilations(p.Dilation, spatial)
	groups := max(p.Groups, 1)
	call := stablehlo.FFICall{
		Target:   ConvKernel,
		Operands: []*stablehlo.Value{x, wHWIO},
		Results:  []stablehlo.Type{stablehlo.TensorOf(x.Type().Elem, outDims...)},
		Attrs: []stablehlo.FFIAttr{
			{Name: "activation", Int: epi.act.kind},
			{Name: "alpha", Float: float32(epi.act.alpha), IsFloat: true},
			{Name: "dilation", Ints: dilation, Array: true},
			{Name: "groups", Int: groups},
			{Name: "pad_hi", Ints: p.Padding[:spatial], Array: true},
			{Name: "pad_lo", Ints: p.Padding[:spatial], Array: true},
			{Name: "stride", Ints: p.Stride[:spatial], Array: true},
		},
		OperandLayouts: [][]int64{channelsLast, weights},
		ResultLayouts:  [][]int64{channelsLast},
	}
	hasBias, residual := int64(0), int64(0)
	if bias != nil {
		call.Operands = append(call.Operands, bias)
		call.OperandLayouts = append(call.OperandLayouts, []int64{0})
		hasBias = 1
	}
	if epi.residual != nil {
		call.Operands = append(call.Operands, epi.residual)
		call.OperandLayouts = append(call.OperandLayouts, channelsLast)
		residual = 1
	}
	call.Attrs = append(call.Attrs, stablehlo.FFIAttr{Name: "has_bias", Int: hasBias}, stablehlo.FFIAttr{Name: "residual", Int: residual})
	out, err := x.Block().FFICall(kernelSite(call))
	if err != nil {
		b.err = err
		return nil
	}
	return out[0]
}

// Activations ConvKernel applies to its result (its "activation"
// attribute, with "alpha" for leaky relu), as oneDNN post-ops.
const (
	convActNone      = 0
	convActReLU      = 1 // max(y, 0)
	convActReLU6     = 2 // min(max(y, 0), 6)
	convActSigmoid   = 3 // 1 / (1 + exp(-y))
	convActSiLU      = 4 // y * sigmoid(y)
	convActHardSwish = 5 // y * min(max(y + 3, 0), 6) / 6
	convActTanh      = 6
	convActGELU      = 7 // y * (1 + erf(y / sqrt 2)) / 2
	convActGELUTanh  = 8 // gelu's tanh approximation
	convActLeakyReLU = 9 // y if y > 0 else alpha * y
)

// convAct is an activation the convolution kernel applies and the nodes it
// replaces: the last is the activation's result, the others (a SiLU's
// sigmoid) are only used within it.
type convAct struct {
	kind  int64
	alpha float64
	nodes []*fxgraph.Node
}

// nnConvEpilogue returns what the users of the convolution n compute that
// the kernel can instead: a residual its only user adds (a tensor of its
// shape), then an activation.
func nnConvEpilogue(b *nnB, n *fxgraph.Node, cdt tensor.DType) nnEpilogue {
	var e nnEpilogue
	last := n
	if add, res := nnResidualUser(b.ctx, n); add != nil {
		e.residual = b.convert(res, cdt)
		e.fused = append(e.fused, add)
		last = add
	}
	e.act = nnConvActivation(b.ctx, last)
	e.fused = append(e.fused, e.act.nodes...)
	return e
}

// nnConvActivation returns the activation that the users of the
// convolution (or product) n apply to it, if they do nothing else with it
// and the kernel can apply it instead: relu, relu6 (clamp or hardtanh to
// [0, 6]), sigmoid, SiLU (aten.silu, or x * sigmoid(x)), hardswish, tanh,
// GELU (exact or tanh) and leaky relu.
func nnConvActivation(ctx *Context, n *fxgraph.Node) convAct {
	users := n.Users()
	for _, u := range users {
		if u.Opcode != fxgraph.CallFunction || len(u.Args) == 0 {
			return convAct{}
		}
	}
	if len(users) == 2 {
		return nnConvSiLU(n, users)
	}
	if len(users) != 1 || users[0].Args[0] != n {
		return convAct{}
	}
	u := users[0]
	if kind, ok := nnPlainActivations[u.Op]; ok {
		return convAct{kind: kind, nodes: []*fxgraph.Node{u}}
	}
	act := nnParamActivation(ctx, u)
	if act.kind != convActNone {
		act.nodes = []*fxgraph.Node{u}
	}
	return act
}

// nnPlainActivations are the activations without parameters the kernels
// apply, by op.
var nnPlainActivations = map[*fxgraph.Op]int64{
	fxgraph.AtenRelu:      convActReLU,
	fxgraph.AtenSigmoid:   convActSigmoid,
	fxgraph.AtenSilu:      convActSiLU,
	fxgraph.AtenHardswish: convActHardSwish,
	fxgraph.AtenTanh:      convActTanh,
}

// nnParamActivation returns the activation u applies, for the ops whose
// parameters decide whether the kernels can: clamp and hardtanh to [0, 6]
// (relu6) or clamp from 0 (relu), GELU and leaky relu.
func nnParamActivation(ctx *Context, u *fxgraph.Node) convAct {
	switch u.Op {
	case fxgraph.AtenClamp, fxgraph.AtenClampTensor:
		lo, okLo := nnScalarArg(ctx, u, 1)
		hi, okHi := nnScalarArg(ctx, u, 2)
		switch {
		case okLo && okHi && lo == 0 && hi == 6:
			return convAct{kind: convActReLU6}
		case okLo && lo == 0 && (len(u.Args) < 3 || u.Args[2] == nil):
			return convAct{kind: convActReLU}
		}
	case fxgraph.AtenHardtanh:
		lo, err1 := u.ParamFloat("min_val")
		hi, err2 := u.ParamFloat("max_val")
		if err1 == nil && err2 == nil && lo == 0 && hi == 6 {
			return convAct{kind: convActReLU6}
		}
	case fxgraph.AtenGelu:
		switch a, _ := u.Param("approximate"); a {
		case "none", nil:
			return convAct{kind: convActGELU}
		case "tanh":
			return convAct{kind: convActGELUTanh}
		}
	case fxgraph.AtenLeakyRelu:
		if slope, err := u.ParamFloat("negative_slope"); err == nil {
			return convAct{kind: convActLeakyReLU, alpha: slope}
		}
	}
	return convAct{}
}

// nnScalarArg returns argument i of u as a number: a literal, or a
// one-element constant.
func nnScalarArg(ctx *Context, u *fxgraph.Node, i int) (float64, bool) {
	if i >= len(u.Args) {
		return 0, false
	}
	switch a := u.Args[i].(type) {
	case *fxgraph.Node:
		if t := ctx.Graph.ConstValue(a); t != nil && t.NumElements() == 1 {
			return t.Float64s()[0], true
		}
		return 0, false
	default:
		return fxgraph.AsFloat(a)
	}
}

// nnConvSiLU matches x * sigmoid(x) over the convolution n (users: the
// sigmoid and the product, the sigmoid used by the product only).
func nnConvSiLU(n *fxgraph.Node, users []*fxgraph.Node) convAct {
	sig, mul := users[0], users[1]
	if sig.Op != fxgraph.AtenSigmoid {
		sig, mul = mul, sig
	}
	if sig.Op != fxgraph.AtenSigmoid || sig.Args[0] != n || mul.Op != fxgraph.AtenMulTensor || len(mul.Args) != 2 {
		return convAct{}
	}
	if su := sig.Users(); len(su) != 1 || su[0] != mul {
		return convAct{}
	}
	if !(mul.Args[0] == n && mul.Args[1] == sig) && !(mul.Args[0] == sig && mul.Args[1] == n) {
		return convAct{}
	}
	return convAct{kind: convActSiLU, nodes: []*fxgraph.Node{sig, mul}}
}

// MatmulKernel is the custom-call target of xserve's CPU matrix-product
// kernel (cpukernels/matmul.c): float32 [B, M, K] x [B, K, N], either
// operand possibly transposed, B possibly absent.
const MatmulKernel = "xserve_matmul_f32"

// nnMatmulMinMACs is the size below which a product stays XLA's own
// dot_general: a custom call costs a few microseconds, which a tiny
// product does not repay.
const nnMatmulMinMACs = 1 << 14

// nnMatmulShape describes a dot_general as the kernel's batched matrix product.
type nnMatmulShape struct {
	batch, m, k, n int64
	transA, transB bool
	rank           int     // 2 without batch dims, else 3
	out            []int64 // the dot_general's result dims
}

// nnMatmulForm reports whether the float32 dot_general of x and y (one
// contracting dim each; batch dims, if any, leading and in order) is a
// matrix product the kernel takes without moving data: x is [batch...,
// free..., K] or [batch..., K, M], y is [batch..., K, N], [batch..., N, K] or
// [batch..., K], so that reshapes (free in XLA) make [B, M, K] and [B, K,
// N].
func nnMatmulForm(x *stablehlo.Value, xc, xb []int, y *stablehlo.Value, yc, yb []int) (nnMatmulShape, bool) {
	xt, yt := x.Type(), y.Type()
	if xt.Elem != stablehlo.F32 || yt.Elem != stablehlo.F32 || len(xc) != 1 || len(yc) != 1 || len(xb) != len(yb) {
		return nnMatmulShape{}, false
	}
	xd, yd := xt.Dims, yt.Dims
	nb := len(xb)
	f := nnMatmulShape{batch: 1, rank: 2}
	for i := range xb {
		if xb[i] != i || yb[i] != i || xd[i] != yd[i] {
			return nnMatmulShape{}, false
		}
		f.batch *= xd[i]
		f.out = append(f.out, xd[i])
	}
	if nb > 0 {
		f.rank = 3
	}
	rx, cx := len(xd)-nb, xc[0]-nb
	switch {
	case rx >= 2 && cx == rx-1:
		f.m = 1
		for _, d := range xd[nb : len(xd)-1] {
			f.m *= d
		}
		f.out = append(f.out, xd[nb:len(xd)-1]...)
	case rx == 2 && cx == 0:
		f.m, f.transA = xd[nb+1], true
		f.out = append(f.out, f.m)
	default:
		return nnMatmulShape{}, false
	}
	f.k = xd[xc[0]]
	ry, cy := len(yd)-nb, yc[0]-nb
	switch {
	case ry == 1 && cy == 0:
		f.n = 1
	case ry == 2 && cy == 0:
		f.n = yd[nb+1]
		f.out = append(f.out, f.n)
	case ry == 2 && cy == 1:
		f.n, f.transB = yd[nb], true
		f.out = append(f.out, f.n)
	default:
		return nnMatmulShape{}, false
	}
	if f.batch*f.m*f.n*f.k < nnMatmulMinMACs || f.m == 0 || f.n == 0 || f.k == 0 {
		return nnMatmulShape{}, false
	}
	return f, true
}

// nnMatmulKernel computes the product f describes with MatmulKernel.
func nnMatmulKernel(b *nnB, x, y *stablehlo.Value, f nnMatmulShape, epi *nnEpilogue) *stablehlo.Value {
	shape := func(rows, cols int64, trans bool) []int64 {
		if trans {
			rows, cols = cols, rows
		}
		if f.rank == 2 {
			return []int64{rows, cols}
		}
		return []int64{f.batch, rows, cols}
	}
	a := b.reshape(x, shape(f.m, f.k, f.transA))
	w := b.reshape(y, shape(f.k, f.n, f.transB))
	if b.err != nil {
		return nil
	}
	rowMajor := []int64{1, 0}
	if f.rank == 3 {
		rowMajor = []int64{2, 1, 0}
	}
	flag := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	call := stablehlo.FFICall{
		Target:   MatmulKernel,
		Operands: []*stablehlo.Value{a, w},
		Results:  []stablehlo.Type{stablehlo.TensorOf(stablehlo.F32, shape(f.m, f.n, false)...)},
		Attrs: []stablehlo.FFIAttr{
			{Name: "activation", Int: convActNone},
			{Name: "alpha", IsFloat: true},
			{Name: "trans_a", Int: flag(f.transA)},
			{Name: "trans_b", Int: flag(f.transB)},
		},
		OperandLayouts: [][]int64{rowMajor, rowMajor},
		ResultLayouts:  [][]int64{rowMajor},
	}
	hasBias, residual := int64(0), int64(0)
	if epi != nil {
		call.Attrs[0].Int, call.Attrs[1].Float = epi.act.kind, float32(epi.act.alpha)
		if epi.bias != nil {
			call.Operands = append(call.Operands, epi.bias)
			call.OperandLayouts = append(call.OperandLayouts, []int64{0})
			hasBias = 1
		}
		if epi.residual != nil {
			call.Operands = append(call.Operands, b.reshape(epi.residual, shape(f.m, f.n, false)))
			call.OperandLayouts = append(call.OperandLayouts, rowMajor)
			residual = 1
		}
	}
	call.Attrs = append(call.Attrs, stablehlo.FFIAttr{Name: "has_bias", Int: hasBias}, stablehlo.FFIAttr{Name: "residual", Int: residual})
	if b.err != nil {
		return nil
	}
	out, err := a.Block().FFICall(kernelSite(call))
	if err != nil {
		b.err = err
		return nil
	}
	return b.reshape(out[0], f.out)
}

// nnEpilogue is what a matrix product's kernel computes besides the
// product: a bias added to every row and an activation; fused are the
// graph nodes that computed them, which get the kernel's result.
type nnEpilogue struct {
	bias     *stablehlo.Value // [N] in the compute dtype, or nil
	residual *stablehlo.Value // of the product's result shape, compute dtype, or nil
	act      convAct
	fused    []*fxgraph.Node
}

// nnMatmulEpilogue returns the epilogue of the matrix product n, whose
// result's last dim is the product's N: its own bias (own, [N], or nil) or
// else a [N] vector its only user adds to it, then the activation the next
// users apply (nnConvActivation). nil when there is nothing to fuse.
func nnMatmulEpilogue(b *nnB, n *fxgraph.Node, own *stablehlo.Value, cdt tensor.DType) *nnEpilogue {
	if b.err != nil || !b.ctx.Options.hasKernel(MatmulKernel) || cdt != tensor.Float32 {
		return nil
	}
	e := &nnEpilogue{bias: own}
	last := n
	if own == nil {
		if add, bias := nnBiasUser(b.ctx, n); add != nil {
			e.bias = b.reshape(b.convert(bias, cdt), []int64{nnDimsOf(bias)[len(nnDimsOf(bias))-1]})
			e.fused = append(e.fused, add)
			last = add
		}
	}
	if add, res := nnResidualUser(b.ctx, last); add != nil {
		e.residual = b.convert(res, cdt)
		e.fused = append(e.fused, add)
		last = add
	}
	if act := nnConvActivation(b.ctx, last); act.kind != convActNone {
		e.act = act
		e.fused = append(e.fused, act.nodes...)
	}
	if e.bias == nil && len(e.fused) == 0 {
		return nil
	}
	return e
}

// nnBiasUser returns n's only user when it adds (alpha 1) a vector over
// n's last dim, already lowered, and that vector's value; else nil, nil.
func nnBiasUser(ctx *Context, n *fxgraph.Node) (*fxgraph.Node, *stablehlo.Value) {
	return nnAddUser(ctx, n, func(nd, od fxgraph.Shape) bool {
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
	})
}

// nnResidualUser returns n's only user when it adds (alpha 1) a tensor of
// n's own static shape, already lowered (a residual connection), and that
// tensor's value; else nil, nil.
func nnResidualUser(ctx *Context, n *fxgraph.Node) (*fxgraph.Node, *stablehlo.Value) {
	return nnAddUser(ctx, n, func(nd, od fxgraph.Shape) bool {
		if len(od) != len(nd) {
			return false
		}
		for i := range od {
			if !od[i].IsStatic() || od[i] != nd[i] {
				return false
			}
		}
		return true
	})
}

// nnAddUser returns n's only user when it is aten.add.Tensor (alpha 1) of
// n and another node of n's dtype whose shape fits (shapeOK(n's, its)) and
// that is lowered already, and the other node's value.
func nnAddUser(ctx *Context, n *fxgraph.Node, shapeOK func(nd, od fxgraph.Shape) bool) (*fxgraph.Node, *stablehlo.Value) {
	users := n.Users()
	if len(users) != 1 || users[0].Opcode != fxgraph.CallFunction || users[0].Op != fxgraph.AtenAddTensor || len(users[0].Args) < 2 {
		return nil, nil
	}
	add := users[0]
	if alpha, err := add.ParamFloat("alpha"); err != nil || alpha != 1 {
		return nil, nil
	}
	other, _ := add.Args[1].(*fxgraph.Node)
	if add.Args[0] != n {
		other, _ = add.Args[0].(*fxgraph.Node)
		if add.Args[1] != n {
			return nil, nil
		}
	}
	if other == nil || other == n || len(n.Meta.Vals) != 1 || len(other.Meta.Vals) != 1 {
		return nil, nil
	}
	if other.Meta.Vals[0].DType != n.Meta.Vals[0].DType || !shapeOK(n.Meta.Vals[0].Shape, other.Meta.Vals[0].Shape) {
		return nil, nil
	}
	v := ctx.values[other]
	if len(v) == 0 {
		return nil, nil
	}
	return add, v[0]
}

// fuseEpilogue gives the nodes of the epilogue the kernel computed the
// rule's final value y.
func (b *nnB) fuseEpilogue(epi *nnEpilogue, y *stablehlo.Value) {
	if b.err != nil || epi == nil || !b.epiUsed {
		return
	}
	for _, u := range epi.fused {
		b.ctx.Fuse(u, y)
	}
}

// nnIsDepthwise reports whether a convolution of x [N, C, spatial...] with
// weight w [out, in/groups, kernel...] is depthwise with one output channel
// per input channel.
func nnIsDepthwise(xd, wd []int64, groups int64) bool {
	return len(xd) == len(wd) && groups > 1 && xd[1] == groups && wd[0] == groups && wd[1] == 1
}

// nnDepthwise computes a depthwise convolution (see nnIsDepthwise) as
// sum over kernel taps k of slice(pad(x), k*dilation, stride) * w[:, 0, k],
// the per-channel weight broadcast along the channel axis. Padding is
// symmetric, as ConvParams has it.
func nnDepthwise(b *nnB, x, w *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams) *stablehlo.Value {
	rank := len(xd)
	spatial := rank - 2
	lo, zero := make([]int, rank), make([]int, rank)
	for j := range spatial {
		lo[2+j] = int(p.Padding[j])
	}
	if b.err == nil {
		x = b.set(hlo.Pad(x, b.scalar(x, 0), lo, lo, zero))
	}
	strides := make([]int, rank)
	strides[0], strides[1] = 1, 1
	for j := range spatial {
		strides[2+j] = int(p.Stride[j])
	}
	var acc *stablehlo.Value
	tap := make([]int64, spatial) // the kernel position, odometer order
	for {
		xs, xl := make([]int, rank), make([]int, rank)
		ws, wl := make([]int, rank), make([]int, rank)
		xl[0], xl[1] = int(xd[0]), int(xd[1])
		wl[0], wl[1] = int(wd[0]), 1
		for j := range spatial {
			xs[2+j] = int(tap[j] * p.Dilation[j])
			xl[2+j] = xs[2+j] + int((outDims[2+j]-1)*p.Stride[j]) + 1
			ws[2+j], wl[2+j] = int(tap[j]), int(tap[j])+1
		}
		wt := b.reshape(b.slice(w, ws, wl, nil), []int64{wd[0]})
		term := b.bin(hlo.Multiply, b.slice(x, xs, xl, strides), b.bcastIn(wt, outDims, []int{1}))
		if acc == nil {
			acc = term
		} else {
			acc = b.bin(hlo.Add, acc, term)
		}
		j := spatial - 1
		for ; j >= 0; j-- {
			if tap[j]++; tap[j] < wd[2+j] {
				break
			}
			tap[j] = 0
		}
		if j < 0 {
			return acc
		}
	}
}

func nnMM(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, _ := Out(n, 0)
	b := &nnB{ctx: ctx}
	cdt := ctx.ComputeDType(dt)
	y := b.dot(b.convert(in[0], cdt), []int{1}, nil, b.convert(in[1], cdt), []int{0}, nil)
	return b.out(b.convert(y, dt))
}

func nnBMM(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, _ := Out(n, 0)
	b := &nnB{ctx: ctx}
	cdt := ctx.ComputeDType(dt)
	y := b.dot(b.convert(in[0], cdt), []int{2}, []int{0}, b.convert(in[1], cdt), []int{1}, []int{0})
	return b.out(b.convert(y, dt))
}

// nnScaleBy multiplies y by the number arg (no-op for 1); integer results
// need an integral factor.
func nnScaleBy(b *nnB, y *stablehlo.Value, f float64) *stablehlo.Value {
	if f == 1 || b.err != nil {
		return y
	}
	if !hlo.ShapeOf(y).DType.IsFloat() && f != math.Trunc(f) {
		b.err = fmt.Errorf("non-integral factor %v for an integer result", f)
		return nil
	}
	return b.bin(hlo.Multiply, y, b.full(y, f, nnDimsOf(y)))
}

func nnDimsOf(v *stablehlo.Value) []int64 {
	d := hlo.ShapeOf(v).Dimensions
	out := make([]int64, len(d))
	for i, x := range d {
		out[i] = int64(x)
	}
	return out
}

// nnAddmm lowers beta*self + alpha*(mat1 @ mat2); self is ignored when beta
// is 0, as in PyTorch.
func nnAddmm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	beta, err := n.ParamFloat("beta")
	if err != nil {
		return nil, err
	}
	alpha, err := n.ParamFloat("alpha")
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := ctx.ComputeDType(dt)
	// addmm(bias, x, w) with unit alpha and beta and a bias over the output
	// columns is a linear layer (torch.export's and the ONNX importer's
	// Gemm): the matrix kernel adds the bias, and the activation after it,
	// as for aten.linear.
	var own *stablehlo.Value
	if alpha == 1 && beta == 1 && len(outDims) == 2 {
		if _, bd, err := InMeta(n, 0); err == nil && tensor.NumElements(bd) == outDims[1] && (len(bd) == 1 || (len(bd) == 2 && bd[0] == 1)) {
			own = b.reshape(b.convert(in[0], cdt), []int64{outDims[1]})
		}
	}
	epi := nnMatmulEpilogue(b, n, own, cdt)
	b.epi = epi
	y := b.dot(b.convert(in[1], cdt), []int{1}, nil, b.convert(in[2], cdt), []int{0}, nil)
	y = nnScaleBy(b, y, alpha)
	if beta != 0 && !(b.epiUsed && own != nil) {
		c := b.bcast(b.convert(in[0], cdt), outDims)
		c = nnScaleBy(b, c, beta)
		y = b.bin(hlo.Add, y, c)
	}
	y = b.convert(y, dt)
	b.fuseEpilogue(epi, y)
	return b.out(y)
}

// nnMatmul lowers NumPy matmul: 1-D operands get a unit dim (removed from
// the result), batch dims broadcast; a 2-D right operand contracts without
// broadcasting.
func nnMatmul(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, ad, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	_, bd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := ctx.ComputeDType(dt)
	var epi *nnEpilogue
	if len(ad) >= 2 && len(bd) >= 2 {
		epi = nnMatmulEpilogue(b, n, nil, cdt)
		b.epi = epi
	}
	x, y := b.convert(in[0], cdt), b.convert(in[1], cdt)
	if len(ad) == 1 {
		ad = []int64{1, ad[0]}
		x = b.reshape(x, ad)
	}
	if len(bd) == 1 {
		bd = []int64{bd[0], 1}
		y = b.reshape(y, bd)
	}
	var r *stablehlo.Value
	if len(bd) == 2 {
		r = b.dot(x, []int{len(ad) - 1}, nil, y, []int{0}, nil)
	} else {
		nb := max(len(ad), len(bd)) - 2
		batch := make([]int64, nb)
		for i := range batch {
			batch[i] = 1
		}
		for _, s := range [][]int64{ad[:len(ad)-2], bd[:len(bd)-2]} {
			off := nb - len(s)
			for i, d := range s {
				if d != 1 {
					batch[off+i] = d
				}
			}
		}
		x = b.bcast(x, append(append([]int64(nil), batch...), ad[len(ad)-2:]...))
		y = b.bcast(y, append(append([]int64(nil), batch...), bd[len(bd)-2:]...))
		ba := nnRange(0, nb)
		r = b.dot(x, []int{nb + 1}, ba, y, []int{nb}, ba)
	}
	r = b.convert(b.reshape(r, outDims), dt)
	b.fuseEpilogue(epi, r)
	return b.out(r)
}

// nnLinear lowers input @ weight.T + bias.
func nnLinear(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	_, wd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := ctx.ComputeDType(dt)
	var own *stablehlo.Value
	if len(in) > 2 && in[2] != nil && len(wd) == 2 {
		if _, bd, err := InMeta(n, 2); err == nil && len(bd) == 1 && bd[0] == wd[0] {
			own = b.convert(in[2], cdt)
		}
	}
	epi := nnMatmulEpilogue(b, n, own, cdt)
	b.epi = epi
	y := b.dot(b.convert(in[0], cdt), []int{len(xd) - 1}, nil, b.convert(in[1], cdt), []int{len(wd) - 1}, nil)
	y = b.reshape(y, outDims)
	if len(in) > 2 && in[2] != nil && !(b.epiUsed && own != nil) {
		y = b.bin(hlo.Add, y, b.bcast(b.convert(in[2], cdt), outDims))
	}
	y = b.convert(y, dt)
	b.fuseEpilogue(epi, y)
	return b.out(y)
}

// nnLowest is the smallest value of x's program dtype (-inf for floats).
func nnLowest(b *nnB, like *stablehlo.Value) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	dt, err := tensorDType(hlo.ShapeOf(like).DType)
	if err != nil {
		b.err = err
		return nil
	}
	return b.set(b.ctx.Constant(nnExtreme(dt, false)))
}

// nnExtreme is the scalar holding the lowest (or highest) value of dt.
func nnExtreme(dt tensor.DType, highest bool) *tensor.Tensor {
	t := tensor.New(dt)
	switch {
	case dt.IsFloat():
		if highest {
			t.SetFloat64(0, math.Inf(1))
		} else {
			t.SetFloat64(0, math.Inf(-1))
		}
	case dt == tensor.Bool:
		if highest {
			t.Data[0] = 1
		}
	default:
		bits := uint(dt.Size() * 8)
		if dt.IsUnsigned() {
			if highest {
				t.SetInt64(0, int64(uint64(1)<<bits-1))
			}
		} else if highest {
			t.SetInt64(0, int64(uint64(1)<<(bits-1)-1))
		} else {
			t.SetInt64(0, -int64(uint64(1)<<(bits-1)))
		}
	}
	return t
}

// nnWindowReduce reduces windows of the inputs (all of the same shape dims)
// over the given axes with kernel k, stride s, dilation d and padding lo/hi
// (the pad value is each input's init), producing outs windows per axis.
// Window dilation is done by folding each axis into [m, d] (the go-xla
// builder cannot emit window dilations without base dilations): a window of
// k taps at dilation d is then a contiguous window over m, and the strided
// windows are picked by a strided slice of the unfolded result.
func nnWindowReduce(b *nnB, inputs, inits []*stablehlo.Value, fn *hlo.Function, dims []int64, axes []int, k, s, d, lo, hi, outs []int64) []*stablehlo.Value {
	if b.err != nil {
		return nil
	}
	rank := len(dims)
	dilated := false
	for _, x := range d {
		if x != 1 {
			dilated = true
		}
	}
	if !dilated {
		window, strides := make([]int, rank), make([]int, rank)
		pads := make([][2]int, rank)
		for i := range window {
			window[i], strides[i] = 1, 1
		}
		for j, a := range axes {
			window[a], strides[a] = int(k[j]), int(s[j])
			pads[a] = [2]int{int(lo[j]), int(hi[j])}
		}
		rs, err := hlo.MultiReduceWindow(inputs, inits, fn, window, strides, nil, nil, pads)
		if err != nil {
			b.err = err
			return nil
		}
		return append([]*stablehlo.Value(nil), rs...)
	}
	padLo, padHi := make([]int, rank), make([]int, rank)
	m := make([]int64, len(axes))
	for j, a := range axes {
		L := lo[j] + dims[a] + hi[j]
		m[j] = (L + d[j] - 1) / d[j]
		padLo[a], padHi[a] = int(lo[j]), int(hi[j]+m[j]*d[j]-L)
	}
	// An axis whose stride is a multiple of its dilation only needs the
	// first of each group of d positions, reduced at stride s/d.
	aligned := make([]bool, len(axes))
	var folded, window, wstrides, sliceD, unfolded []int64
	spatialAt := map[int]int{}
	for j, a := range axes {
		spatialAt[a] = j
		aligned[j] = s[j]%d[j] == 0
	}
	for a := 0; a < rank; a++ {
		j, ok := spatialAt[a]
		switch {
		case !ok:
			folded = append(folded, dims[a])
			sliceD = append(sliceD, dims[a])
			window = append(window, 1)
			wstrides = append(wstrides, 1)
			unfolded = append(unfolded, dims[a])
		case aligned[j]:
			st := s[j] / d[j]
			folded = append(folded, m[j], d[j])
			sliceD = append(sliceD, m[j], 1)
			window = append(window, k[j], 1)
			wstrides = append(wstrides, st, 1)
			cnt := (m[j]-k[j])/st + 1
			unfolded = append(unfolded, cnt)
		default:
			folded = append(folded, m[j], d[j])
			sliceD = append(sliceD, m[j], d[j])
			window = append(window, k[j], 1)
			wstrides = append(wstrides, 1, 1)
			unfolded = append(unfolded, (m[j]-k[j]+1)*d[j])
		}
	}
	zeros := make([]int, len(folded))
	xs := make([]*stablehlo.Value, len(inputs))
	for i, x := range inputs {
		if b.err == nil {
			xs[i] = b.set(hlo.Pad(x, inits[i], padLo, padHi, nil))
		}
		xs[i] = b.reshape(xs[i], folded)
		if !nnEqualInt64s(folded, sliceD) {
			xs[i] = b.slice(xs[i], zeros, nnInts(sliceD), nil)
		}
	}
	if b.err != nil {
		return nil
	}
	red, err := hlo.MultiReduceWindow(xs, inits, fn, nnInts(window), nnInts(wstrides), nil, nil, nil)
	if err != nil {
		b.err = err
		return nil
	}
	rs := append([]*stablehlo.Value(nil), red...) // not the statement's own slice
	starts, limits, strides := make([]int, rank), make([]int, rank), make([]int, rank)
	for a := 0; a < rank; a++ {
		limits[a], strides[a] = int(unfolded[a]), 1
		if j, ok := spatialAt[a]; ok {
			if aligned[j] {
				limits[a] = int(outs[j])
			} else {
				limits[a], strides[a] = int((outs[j]-1)*s[j]+1), int(s[j])
			}
		}
	}
	for i := range rs {
		rs[i] = b.slice(b.reshape(rs[i], unfolded), starts, limits, strides)
	}
	return rs
}

func nnEqualInt64s(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// nnPoolGeometry returns the spatial axes and the low/high padding that
// make reduce_window produce outDims windows (the high side is extended for
// ceil_mode).
func nnPoolGeometry(xd, outDims []int64, p fxgraph.PoolParams) (axes []int, lo, hi, outs []int64) {
	spatial := len(p.Kernel)
	a0 := len(xd) - spatial
	for j := 0; j < spatial; j++ {
		a := a0 + j
		axes = append(axes, a)
		ek := p.Dilation[j]*(p.Kernel[j]-1) + 1
		need := (outDims[a]-1)*p.Stride[j] + ek
		lo = append(lo, p.Padding[j])
		hi = append(hi, max(p.Padding[j], need-xd[a]-p.Padding[j]))
		outs = append(outs, outDims[a])
	}
	return
}

// nnArgMaxReducer is the closure (v1, i1, v2, i2) -> the pair with the
// larger value (NaN largest), ties going to the lower index.
func nnArgMaxReducer(b *nnB, vd, id dtypes.DType) *hlo.Function {
	if b.err != nil {
		return nil
	}
	fn := b.ctx.Fn.Closure()
	var ins [4]*stablehlo.Value
	for i, d := range []dtypes.DType{vd, id, vd, id} {
		ins[i] = b.set(fn.Input(shapes.Make(d)))
	}
	if b.err != nil {
		return nil
	}
	v1, i1, v2, i2 := ins[0], ins[1], ins[2], ins[3]
	ct := types.CompareFloat
	switch {
	case vd == dtypes.Bool || vd.IsUnsigned():
		ct = types.CompareUnsigned
	case vd.IsInt():
		ct = types.CompareSigned
	}
	idt := types.CompareSigned
	if id.IsUnsigned() {
		idt = types.CompareUnsigned
	}
	cmp := func(x, y *stablehlo.Value, dir types.ComparisonDirection, t types.ComparisonType) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		return b.set(hlo.Compare(x, y, dir, t))
	}
	gt := cmp(v1, v2, types.CompareGT, ct)
	eq := cmp(v1, v2, types.CompareEQ, ct)
	first := cmp(i1, i2, types.CompareLT, idt)
	pick := b.bin(hlo.Or, gt, b.bin(hlo.And, eq, first))
	if vd.IsFloat() {
		nan1 := cmp(v1, v1, types.CompareNE, ct)
		nan2 := cmp(v2, v2, types.CompareNE, ct)
		// v1 NaN wins unless v2 is a NaN with a lower index.
		nanPick := b.bin(hlo.And, nan1, b.bin(hlo.Or, b.un(hlo.Not, nan2), first))
		pick = b.bin(hlo.Or, b.bin(hlo.And, pick, b.un(hlo.Not, nan2)), nanPick)
	}
	if b.err != nil {
		return nil
	}
	v := b.set(hlo.Select(pick, v1, v2))
	i := b.set(hlo.Select(pick, i1, i2))
	if b.err != nil {
		return nil
	}
	if err := fn.Return(v, i); err != nil {
		b.err = err
		return nil
	}
	return fn
}

// nnMaxPoolRule lowers max_pool{1,2,3}d[_with_indices]: a max reduce_window
// padded with the dtype's lowest value; with indices, a variadic
// reduce_window over (value, flat index within the spatial plane), ties to
// the first index as in PyTorch.
func nnMaxPoolRule(spatial int, indices bool) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		_, outDims := Out(n, 0)
		_, xd, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		p, err := fxgraph.PoolArgs(n, spatial, false)
		if err != nil {
			return nil, err
		}
		axes, lo, hi, outs := nnPoolGeometry(xd, outDims, p)
		b := &nnB{ctx: ctx}
		x := in[0]
		if !indices || !n.OutputUsed(1) {
			// Without a user of the indices (the common case: ONNX MaxPool
			// with one output), the variadic reduce_window would still
			// compute them on every call: XLA cannot drop one of its
			// results. The unused index output is a broadcast XLA removes.
			var rs []*stablehlo.Value
			if nnMaxPoolKernelFits(ctx, hlo.ShapeOf(x).DType, p, lo, hi) {
				rs = []*stablehlo.Value{nnMaxPoolKernel(b, x, outDims, p, lo, hi)}
			} else {
				fn, err := ctx.ReduceFn(ReduceMax, hlo.ShapeOf(x).DType)
				if err != nil {
					return nil, err
				}
				rs = nnWindowReduce(b, []*stablehlo.Value{x}, []*stablehlo.Value{nnLowest(b, x)}, fn, xd, axes, p.Kernel, p.Stride, p.Dilation, lo, hi, outs)
			}
			if indices {
				_, idims := Out(n, 1)
				rs = append(rs, b.bcast(b.set(ctx.Constant(tensor.New(tensor.Int64))), idims))
			}
			if b.err != nil {
				return nil, b.err
			}
			return rs, nil
		}
		init := nnLowest(b, x)
		idt, err := ctx.XLADType(tensor.Int64)
		if err != nil {
			return nil, err
		}
		ishape := shapes.Make(idt, intsOf(xd)...)
		var idx *stablehlo.Value
		stride := int64(1)
		for j := len(axes) - 1; j >= 0; j-- {
			io := b.set(ctx.Fn.Iota(ishape, axes[j]))
			io = nnScaleBy(b, io, float64(stride))
			if idx == nil {
				idx = io
			} else {
				idx = b.bin(hlo.Add, idx, io)
			}
			stride *= xd[axes[j]]
		}
		pdt, err := tensorDType(idt)
		if err != nil {
			return nil, err
		}
		iinit := b.set(ctx.Constant(nnExtreme(pdt, true)))
		fn := nnArgMaxReducer(b, hlo.ShapeOf(x).DType, idt)
		rs := nnWindowReduce(b, []*stablehlo.Value{x, idx}, []*stablehlo.Value{init, iinit}, fn, xd, axes, p.Kernel, p.Stride, p.Dilation, lo, hi, outs)
		if b.err != nil {
			return nil, b.err
		}
		return rs, nil
	}
}

// PoolKernel is the custom-call target of xserve's CPU max-pooling kernel
// (cpukernels/pool.c): float32, 1 to 3 spatial dims, channels-last, any
// window, stride, dilation and padding under the window.
const PoolKernel = "xserve_maxpool_f32"

// nnMaxPoolKernelFits reports whether a max pooling of dt with parameters
// p and padding lo/hi (nnPoolGeometry) runs in PoolKernel: the kernel is
// loaded, dt is float32, and every window overlaps the input (XLA's own
// reduce_window gives the lowest value for a window of padding only).
func nnMaxPoolKernelFits(ctx *Context, dt dtypes.DType, p fxgraph.PoolParams, lo, hi []int64) bool {
	if !ctx.Options.hasKernel(PoolKernel) || dt != dtypes.Float32 || len(p.Kernel) < 1 || len(p.Kernel) > 3 {
		return false
	}
	for j, k := range p.Kernel {
		ek := max(p.Dilation[j], 1)*(k-1) + 1
		if lo[j] >= ek || hi[j] >= ek {
			return false
		}
	}
	return true
}

// nnMaxPoolKernel computes a max pooling with PoolKernel, channels-last in
// and out like ConvKernel, so that XLA keeps a CNN channels-last through
// it.
func nnMaxPoolKernel(b *nnB, x *stablehlo.Value, outDims []int64, p fxgraph.PoolParams, lo, hi []int64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	channelsLast := nnChannelsLast(len(outDims))
	dilation := nnDilations(p.Dilation, len(p.Kernel))
	call := stablehlo.FFICall{
		Target:   PoolKernel,
		Operands: []*stablehlo.Value{x},
		Results:  []stablehlo.Type{stablehlo.TensorOf(x.Type().Elem, outDims...)},
		Attrs: []stablehlo.FFIAttr{
			{Name: "dilation", Ints: dilation, Array: true},
			{Name: "pad_hi", Ints: hi, Array: true},
			{Name: "pad_lo", Ints: lo, Array: true},
			{Name: "stride", Ints: p.Stride, Array: true},
			{Name: "window", Ints: p.Kernel, Array: true},
		},
		OperandLayouts: [][]int64{channelsLast},
		ResultLayouts:  [][]int64{channelsLast},
	}
	out, err := x.Block().FFICall(kernelSite(call))
	if err != nil {
		b.err = err
		return nil
	}
	return out[0]
}

// nnAvgPoolRule lowers avg_pool{1,2,3}d: a sum reduce_window divided by
// PyTorch's divisor (divisor_override, or the window size clipped to the
// padded input, or to the input when count_include_pad is false).
func nnAvgPoolRule(spatial int) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		dt, outDims := Out(n, 0)
		if !dt.IsFloat() {
			return nil, fmt.Errorf("avg_pool of %s is not supported", dt)
		}
		_, xd, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		p, err := fxgraph.PoolArgs(n, spatial, true)
		if err != nil {
			return nil, err
		}
		axes, lo, hi, outs := nnPoolGeometry(xd, outDims, p)
		b := &nnB{ctx: ctx}
		x := b.convert(in[0], nnFloatCompute(dt))
		if b.err != nil {
			return nil, b.err
		}
		fn, err := ctx.ReduceFn(ReduceSum, hlo.ShapeOf(x).DType)
		if err != nil {
			return nil, err
		}
		sum := nnWindowReduce(b, []*stablehlo.Value{x}, []*stablehlo.Value{b.scalar(x, 0)}, fn, xd, axes, p.Kernel, p.Stride, p.Dilation, lo, hi, outs)
		if b.err != nil {
			return nil, b.err
		}
		y := sum[0]
		if p.DivisorOverride != 0 {
			y = b.bin(hlo.Divide, y, b.full(y, float64(p.DivisorOverride), outDims))
			return b.out(b.convert(y, dt))
		}
		var div *stablehlo.Value
		uniform := 1.0
		for j, a := range axes {
			f := make([]float64, outs[j])
			same := true
			for o := range f {
				start := int64(o)*p.Stride[j] - p.Padding[j]
				end := min(start+p.Kernel[j], xd[a]+p.Padding[j])
				size := end - start
				if !p.CountIncludePad {
					size = min(end, xd[a]) - max(start, 0)
				}
				f[o] = float64(size)
				if f[o] != f[0] {
					same = false
				}
			}
			if same {
				uniform *= f[0]
				continue
			}
			fv := b.bcastIn(b.consts(y, f, []int64{outs[j]}), outDims, []int{a})
			if div == nil {
				div = fv
			} else {
				div = b.bin(hlo.Multiply, div, fv)
			}
		}
		if div == nil {
			div = b.full(y, uniform, outDims)
		} else if uniform != 1 {
			div = nnScaleBy(b, div, uniform)
		}
		y = b.bin(hlo.Divide, y, div)
		return b.out(b.convert(y, dt))
	}
}

// nnAdaptiveAvgPoolRule lowers _adaptive_avg_pool{n}d: PyTorch's windows
// [floor(i*in/out), ceil((i+1)*in/out)) are summed per axis (a reduce_window
// when in is a multiple of out, else a 0/1 matrix product) and divided by
// the window sizes.
func nnAdaptiveAvgPoolRule(spatial int) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		dt, outDims := Out(n, 0)
		if !dt.IsFloat() {
			return nil, fmt.Errorf("adaptive_avg_pool of %s is not supported", dt)
		}
		_, xd, err := InMeta(n, 0)
		if err != nil {
			return nil, err
		}
		b := &nnB{ctx: ctx}
		y := b.convert(in[0], nnFloatCompute(dt))
		cur := append([]int64(nil), xd...)
		var div *stablehlo.Value
		rank := len(xd)
		for a := rank - spatial; a < rank; a++ {
			isz, osz := xd[a], outDims[a]
			if isz == osz {
				continue
			}
			counts := make([]float64, osz)
			if osz > 0 && isz%osz == 0 {
				k := isz / osz
				window, strides := make([]int, rank), make([]int, rank)
				for i := range window {
					window[i], strides[i] = 1, 1
				}
				window[a], strides[a] = int(k), int(k)
				if b.err == nil {
					fn, err := ctx.ReduceFn(ReduceSum, hlo.ShapeOf(y).DType)
					if err != nil {
						return nil, err
					}
					y = b.set(hlo.ReduceWindow(y, b.scalar(y, 0), fn, window, strides, nil, nil, nil))
				}
				for i := range counts {
					counts[i] = float64(k)
				}
			} else {
				mat := make([]float64, osz*isz)
				for o := int64(0); o < osz; o++ {
					start := (o * isz) / osz
					end := ((o+1)*isz + osz - 1) / osz
					for i := start; i < end; i++ {
						mat[o*isz+i] = 1
					}
					counts[o] = float64(end - start)
				}
				m := b.consts(y, mat, []int64{osz, isz})
				y = b.dot(y, []int{a}, nil, m, []int{1}, nil)
				perm := append(append(nnRange(0, a), rank-1), nnRange(a, rank-1)...)
				y = b.transpose(y, perm)
			}
			cur[a] = osz
			cv := b.bcastIn(b.consts(y, counts, []int64{osz}), outDims, []int{a})
			if div == nil {
				div = cv
			} else {
				div = b.bin(hlo.Multiply, div, cv)
			}
		}
		if div != nil {
			y = b.bin(hlo.Divide, y, div)
		}
		return b.out(b.convert(y, dt))
	}
}

// nnChannelVec returns argument i (a per-channel vector) in dtype like's,
// or a constant def when it is None.
func nnChannelVec(b *nnB, in []*stablehlo.Value, i int, like *stablehlo.Value, c int64, def float64) *stablehlo.Value {
	if i < len(in) && in[i] != nil {
		dt, err := tensorDType(hlo.ShapeOf(like).DType)
		if err != nil {
			b.err = err
			return nil
		}
		return b.convert(in[i], dt)
	}
	return b.full(like, def, []int64{c})
}

// nnBatchNorm lowers _native_batch_norm_legit_no_training:
// (x - mean) * (weight / sqrt(var + eps)) + bias, with empty saved stats.
func nnBatchNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, xd := Out(n, 0)
	eps, err := n.ParamFloat("eps")
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	x := b.convert(in[0], nnFloatCompute(dt))
	if b.err != nil {
		return nil, b.err
	}
	c := xd[1]
	w := nnChannelVec(b, in, 1, x, c, 1)
	bias := nnChannelVec(b, in, 2, x, c, 0)
	mean := nnChannelVec(b, in, 3, x, c, 0)
	variance := nnChannelVec(b, in, 4, x, c, 1)
	inv := b.un(hlo.Sqrt, b.bin(hlo.Add, variance, b.full(x, eps, []int64{c})))
	scale := b.bin(hlo.Divide, w, inv)
	bc := func(v *stablehlo.Value) *stablehlo.Value { return b.bcastIn(v, xd, []int{1}) }
	y := b.bin(hlo.Subtract, x, bc(mean))
	y = b.bin(hlo.Multiply, y, bc(scale))
	y = b.bin(hlo.Add, y, bc(bias))
	y = b.convert(y, dt)
	empty := b.full(y, 0, []int64{0})
	return b.out(y, empty, empty)
}

// nnNormalize returns (x - mean) * rstd over the given axes of x, with mean
// and rstd (reduced over axes).
func nnNormalize(b *nnB, x *stablehlo.Value, dims []int64, axes []int, eps float64) (y, mean, rstd *stablehlo.Value) {
	count := int64(1)
	for _, a := range axes {
		count *= dims[a]
	}
	keep := nnAllBut(len(dims), axes...)
	var kdims []int64
	for _, a := range keep {
		kdims = append(kdims, dims[a])
	}
	mean = b.reduce(x, ReduceSum, 0, axes)
	mean = b.bin(hlo.Divide, mean, b.full(x, float64(count), kdims))
	xc := b.bin(hlo.Subtract, x, b.bcastIn(mean, dims, keep))
	v := b.reduce(b.bin(hlo.Multiply, xc, xc), ReduceSum, 0, axes)
	v = b.bin(hlo.Divide, v, b.full(x, float64(count), kdims))
	v = b.bin(hlo.Add, v, b.full(x, eps, kdims))
	rstd = b.bin(hlo.Divide, b.full(x, 1, kdims), b.un(hlo.Sqrt, v))
	y = b.bin(hlo.Multiply, xc, b.bcastIn(rstd, dims, keep))
	return y, mean, rstd
}

// nnLayerNorm lowers native_layer_norm over the trailing normalized dims;
// mean and rstd keep the normalized dims as size 1.
func nnLayerNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, xd := Out(n, 0)
	_, statDims := Out(n, 1)
	ns, err := n.IntsArg(1, "normalized_shape", nil)
	if err != nil {
		return nil, err
	}
	eps, err := n.ParamFloat("eps")
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	y, mean, rstd := nnNormalize(b, x, xd, nnRange(len(xd)-len(ns), len(xd)), eps)
	if len(in) > 2 && in[2] != nil {
		y = b.bin(hlo.Multiply, y, b.bcast(b.convert(in[2], cdt), xd))
	}
	if len(in) > 3 && in[3] != nil {
		y = b.bin(hlo.Add, y, b.bcast(b.convert(in[3], cdt), xd))
	}
	mean = b.convert(b.reshape(mean, statDims), dt)
	rstd = b.convert(b.reshape(rstd, statDims), dt)
	return b.out(b.convert(y, dt), mean, rstd)
}

// nnGroupNorm lowers native_group_norm: x viewed as [N, G, C/G * HxW] is
// normalized over its last dim, then scaled and shifted per channel.
func nnGroupNorm(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, xd := Out(n, 0)
	_, statDims := Out(n, 1)
	g, err := n.ParamInt("group")
	if err != nil {
		return nil, err
	}
	eps, err := n.ParamFloat("eps")
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	gd := []int64{xd[0], g, nnProd(xd[1:]) / g}
	y, mean, rstd := nnNormalize(b, b.reshape(x, gd), gd, []int{2}, eps)
	y = b.reshape(y, xd)
	if in[1] != nil {
		y = b.bin(hlo.Multiply, y, b.bcastIn(b.convert(in[1], cdt), xd, []int{1}))
	}
	if in[2] != nil {
		y = b.bin(hlo.Add, y, b.bcastIn(b.convert(in[2], cdt), xd, []int{1}))
	}
	mean = b.convert(b.reshape(mean, statDims), dt)
	rstd = b.convert(b.reshape(rstd, statDims), dt)
	return b.out(b.convert(y, dt), mean, rstd)
}

// nnSoftmaxRule lowers _softmax / _log_softmax along one dim, subtracting
// the max first; half floats compute in float32.
func nnSoftmaxRule(logSoftmax bool) Rule {
	return func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
		dt, outDims := Out(n, 0)
		d, err := n.IntArg(1, "dim", -1)
		if err != nil {
			return nil, err
		}
		b := &nnB{ctx: ctx}
		x := b.convert(in[0], nnFloatCompute(dt))
		dims := outDims
		if len(dims) == 0 {
			dims = []int64{1}
			x = b.reshape(x, dims)
			d = 0
		}
		axis, err := fxgraph.NormDim(d, len(dims))
		if err != nil {
			return nil, err
		}
		keep := nnAllBut(len(dims), axis)
		m := b.bcastIn(b.reduce(x, ReduceMax, math.Inf(-1), []int{axis}), dims, keep)
		z := b.bin(hlo.Subtract, x, m)
		e := b.un(hlo.Exponential, z)
		s := b.bcastIn(b.reduce(e, ReduceSum, 0, []int{axis}), dims, keep)
		var y *stablehlo.Value
		if logSoftmax {
			y = b.bin(hlo.Subtract, z, b.un(hlo.Log, s))
		} else {
			y = b.bin(hlo.Divide, e, s)
		}
		y = b.reshape(y, outDims)
		return b.out(b.convert(y, dt))
	}
}

// nnResizeAxis computes, for one axis of an xserve.resize, the input index
// and weight of each tap of each output position, following ONNX's
// reference implementation exactly (neighbours chosen in the edge-padded
// input, ties to the lower index, taps outside the input clamped to the
// edge or, with exclude_outside, dropped and the weights renormalized).
// inb[o] is false where tf_crop_and_resize extrapolates.
func nnResizeAxis(p fxgraph.ResizeParams, axis, rank int, in, out int64) (idx [][]int, w [][]float64, inb []bool, err error) {
	var scale, owf float64
	if p.Scales == nil || p.Sizes != nil && p.Sizes[axis] >= 0 && p.Scales[axis] <= 0 {
		if in == 0 {
			return nil, nil, nil, fmt.Errorf("resize: empty input axis %d", axis)
		}
		scale = float64(out) / float64(in)
		owf = scale * float64(in)
	} else {
		scale = p.Scales[axis]
		// The reference multiplies a float32 scale by the int input size in float32.
		owf = float64(float32(scale) * float32(in))
	}
	if scale <= 0 {
		return nil, nil, nil, fmt.Errorf("resize: scale %v on axis %d", scale, axis)
	}
	roi0, roi1 := 0.0, 1.0
	if p.ROI != nil {
		roi0, roi1 = p.ROI[axis], p.ROI[rank+axis]
	}
	taps := len(nnResizeCoeffs(p, 0.5, scale))
	pad := int64((taps + 1) / 2)
	idx = make([][]int, out)
	w = make([][]float64, out)
	inb = make([]bool, out)
	fin := float64(in)
	for o := int64(0); o < out; o++ {
		x := float64(o)
		var xo float64
		switch p.Coord {
		case "align_corners":
			if owf == 1 {
				xo = 0
			} else {
				xo = x * (fin - 1) / (owf - 1)
			}
		case "asymmetric":
			xo = x / scale
		case "tf_half_pixel_for_nn":
			xo = (x + 0.5) / scale
		case "tf_crop_and_resize":
			if owf == 1 {
				xo = (roi1 - roi0) * (fin - 1) / 2
			} else {
				xo = x * (roi1 - roi0) * (fin - 1) / (owf - 1)
			}
			xo += roi0 * (fin - 1)
			if xo < 0 || xo > fin-1 {
				idx[o] = make([]int, taps)
				w[o] = make([]float64, taps)
				continue
			}
		case "pytorch_half_pixel":
			if owf == 1 {
				xo = -0.5
			} else {
				xo = (x+0.5)/scale - 0.5
			}
		case "half_pixel":
			xo = (x+0.5)/scale - 0.5
		case "half_pixel_symmetric":
			adj := float64(out) / owf
			center := fin / 2
			xo = center*(1-adj) + (x+0.5)/scale - 0.5
		default:
			return nil, nil, nil, fmt.Errorf("%w: resize coordinate_transformation_mode %q", fxgraph.ErrUnsupported, p.Coord)
		}
		inb[o] = true
		ratio := 1.0
		if xo != math.Floor(xo) {
			ratio = xo - math.Floor(xo)
		}
		coeffs := nnResizeCoeffs(p, ratio, scale)
		// The taps nearest to xo among the edge-padded positions [0, in+2*pad).
		xp := xo + float64(pad)
		limit := in + 2*pad
		cands := []int64{}
		base := int64(math.Floor(xp))
		for c := base - int64(taps) - 1; c <= base+int64(taps)+1; c++ {
			if c >= 0 && c < limit {
				cands = append(cands, c)
			}
		}
		sort.SliceStable(cands, func(i, j int) bool {
			di, dj := math.Abs(xp-float64(cands[i])), math.Abs(xp-float64(cands[j]))
			if di != dj {
				return di < dj
			}
			return cands[i] < cands[j]
		})
		if len(cands) < taps {
			return nil, nil, nil, fmt.Errorf("resize: axis %d: too few input positions", axis)
		}
		sel := append([]int64(nil), cands[:taps]...)
		sort.Slice(sel, func(i, j int) bool { return sel[i] < sel[j] })
		ii := make([]int, taps)
		ww := make([]float64, taps)
		sum := 0.0
		for t, c := range sel {
			orig := c - pad
			ww[t] = coeffs[t]
			if p.ExcludeOutside && (orig < 0 || orig >= in) {
				ww[t] = 0
			}
			sum += ww[t]
			ii[t] = int(min(max(orig, 0), in-1))
		}
		if p.ExcludeOutside {
			for t := range ww {
				ww[t] /= sum
			}
		}
		idx[o], w[o] = ii, ww
	}
	return idx, w, inb, nil
}

// nnResizeCoeffs are the weights of the taps around fractional position
// ratio (in (0, 1]): nearest, linear or cubic, antialiased when asked
// (linear and cubic only).
func nnResizeCoeffs(p fxgraph.ResizeParams, ratio, scale float64) []float64 {
	switch {
	case p.Antialias && p.Mode != "nearest":
		return nnAntialiasCoeffs(p.Mode, ratio, scale, p.CubicA)
	case p.Mode == "nearest":
		return nnNearestCoeffs(ratio, p.Nearest)
	case p.Mode == "cubic":
		return nnCubicCoeffs(ratio, p.CubicA)
	}
	return []float64{1 - ratio, ratio}
}

// nnAntialiasCoeffs are ONNX's antialiased linear or cubic weights at
// fractional position ratio for scale: the filter stretched by 1/scale
// when downsampling (scale < 1), as many taps as it then covers,
// normalized to sum to 1.
func nnAntialiasCoeffs(mode string, ratio, scale, a float64) []float64 {
	scale = min(scale, 1)
	var start, end int
	kernel := func(x float64) float64 { return math.Max(0, 1-math.Abs(x)) }
	if mode == "cubic" {
		start = int(math.Floor(-2/scale)) + 1
		end = 2 - start
		kernel = func(x float64) float64 {
			x = math.Abs(x)
			switch {
			case x <= 1:
				return ((a+2)*x-(a+3))*x*x + 1
			case x < 2:
				return ((a*x-5*a)*x+8*a)*x - 4*a
			}
			return 0
		}
	} else {
		start = int(math.Floor(-1/scale)) + 1
		end = start + 2 - 2*start
	}
	out := make([]float64, 0, end-start)
	sum := 0.0
	for i := start; i < end; i++ {
		v := kernel(scale * (float64(i) - ratio))
		out = append(out, v)
		sum += v
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func nnNearestCoeffs(ratio float64, mode string) []float64 {
	if ratio == math.Floor(ratio) {
		return []float64{0, 1}
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	switch mode {
	case "round_prefer_ceil":
		return []float64{b(ratio < 0.5), b(ratio >= 0.5)}
	case "floor":
		return []float64{1, 0}
	case "ceil":
		return []float64{0, 1}
	}
	return []float64{b(ratio <= 0.5), b(ratio > 0.5)}
}

func nnCubicCoeffs(r, a float64) []float64 {
	s := 1 - r
	return []float64{
		((a*(r+1)-5*a)*(r+1)+8*a)*(r+1) - 4*a,
		((a+2)*r-(a+3))*r*r + 1,
		((a+2)*s-(a+3))*s*s + 1,
		((a*(s+1)-5*a)*(s+1)+8*a)*(s+1) - 4*a,
	}
}

// nnGatherAxis takes x's elements at positions idx along axis.
func nnGatherAxis(b *nnB, x *stablehlo.Value, axis int, idx []int) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	vals := make([]int32, len(idx))
	sorted := true
	for i, v := range idx {
		vals[i] = int32(v)
		if i > 0 && idx[i] < idx[i-1] {
			sorted = false
		}
	}
	ind := b.set(b.ctx.Fn.ConstantFromFlatAndDimensions(vals, len(idx), 1))
	if b.err != nil {
		return nil
	}
	rank := hlo.ShapeOf(x).Rank()
	sizes := append([]int(nil), hlo.ShapeOf(x).Dimensions...)
	sizes[axis] = 1
	return b.set(hlo.Gather(x, ind, 1, nnAllBut(rank, axis), []int{axis}, nil, nil, []int{axis}, sizes, sorted))
}

// nnResize lowers xserve.resize axis by axis: nearest is one gather of the
// chosen taps (exact for every dtype); linear and cubic sum the gathered
// taps times their weights, computed on the host. Positions that
// tf_crop_and_resize extrapolates get extrapolation_value.
func nnResize(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	rank := len(xd)
	p, known, err := fxgraph.ResizeArgs(n, rank)
	if err != nil {
		return nil, err
	}
	if !known {
		return nil, fmt.Errorf("resize: sizes/scales/roi are not constants after specialization")
	}
	b := &nnB{ctx: ctx}
	x := in[0]
	if p.Mode != "nearest" {
		x = b.convert(x, nnFloatCompute(dt))
	}
	cur := append([]int64(nil), xd...)
	var mask *stablehlo.Value
	for a := 0; a < rank; a++ {
		idx, w, inb, err := nnResizeAxis(p, a, rank, xd[a], outDims[a])
		if err != nil {
			return nil, err
		}
		identity := xd[a] == outDims[a]
		allIn := true
		for o := range idx {
			if !inb[o] {
				allIn, identity = false, false
				continue
			}
			for t := range idx[o] {
				if w[o][t] != 0 && (idx[o][t] != o || w[o][t] != 1) {
					identity = false
				}
			}
		}
		cur[a] = outDims[a]
		if !identity {
			if p.Mode == "nearest" {
				pick := make([]int, len(idx))
				for o := range idx {
					for t := range idx[o] {
						if w[o][t] != 0 {
							pick[o] = idx[o][t]
						}
					}
				}
				x = nnGatherAxis(b, x, a, pick)
			} else {
				var acc *stablehlo.Value
				taps := 0
				if len(idx) > 0 {
					taps = len(idx[0])
				}
				for t := 0; t < taps; t++ {
					ti := make([]int, len(idx))
					tw := make([]float64, len(idx))
					zero := true
					for o := range idx {
						ti[o], tw[o] = idx[o][t], w[o][t]
						if tw[o] != 0 {
							zero = false
						}
					}
					if zero {
						continue
					}
					g := nnGatherAxis(b, x, a, ti)
					g = b.bin(hlo.Multiply, g, b.bcastIn(b.consts(g, tw, []int64{int64(len(tw))}), cur, []int{a}))
					if acc == nil {
						acc = g
					} else {
						acc = b.bin(hlo.Add, acc, g)
					}
				}
				if acc == nil {
					acc = b.full(x, 0, cur)
				}
				x = acc
			}
		}
		if !allIn {
			vals := make([]bool, len(inb))
			copy(vals, inb)
			mv := b.set(ctx.Fn.ConstantFromFlatAndDimensions(vals, len(vals)))
			mv = b.bcastIn(mv, outDims, []int{a})
			if mask == nil {
				mask = mv
			} else {
				mask = b.bin(hlo.And, mask, mv)
			}
		}
	}
	if mask != nil {
		x = b.bcast(x, outDims)
		if b.err == nil {
			x = b.set(hlo.Select(mask, x, b.full(x, p.Extrapolation, outDims)))
		}
	}
	x = b.reshape(x, outDims)
	return b.out(b.convert(x, dt))
}

// cmp compares x and y elementwise (float operands).
func (b *nnB) cmp(x, y *stablehlo.Value, dir types.ComparisonDirection) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(hlo.Compare(x, y, dir, types.CompareFloat))
}

func (b *nnB) sel(p, x, y *stablehlo.Value) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.set(hlo.Select(p, x, y))
}

// nnGridSampler lowers grid_sampler_2d as PyTorch computes it: the grid's
// normalized (x, y) are unnormalized to input pixel coordinates, clipped
// or reflected per padding_mode, and every tap (1 nearest, 4 bilinear, 16
// bicubic) is gathered from the input with its batch index, zero outside
// the input.
func nnGridSampler(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	mode, err := n.ParamInt("interpolation_mode")
	if err != nil {
		return nil, err
	}
	padMode, err := n.ParamInt("padding_mode")
	if err != nil {
		return nil, err
	}
	align, err := n.ParamBool("align_corners")
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	grid := b.convert(in[1], cdt)
	N, C, H, W := xd[0], xd[1], xd[2], xd[3]
	Ho, Wo := outDims[2], outDims[3]
	pd := []int64{N, Ho, Wo}
	k := func(v float64) *stablehlo.Value { return b.full(grid, v, pd) }
	coord := func(i int) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		c := b.slice(grid, []int{0, 0, 0, i}, []int{int(N), int(Ho), int(Wo), i + 1}, nil)
		return b.reshape(c, pd)
	}
	unnorm := func(c *stablehlo.Value, size int64) *stablehlo.Value {
		fs := float64(size)
		if align {
			// ((c + 1) / 2) * (size - 1)
			return b.bin(hlo.Multiply, b.bin(hlo.Divide, b.bin(hlo.Add, c, k(1)), k(2)), k(fs-1))
		}
		// ((c + 1) * size - 1) / 2
		return b.bin(hlo.Divide, b.bin(hlo.Subtract, b.bin(hlo.Multiply, b.bin(hlo.Add, c, k(1)), k(fs)), k(1)), k(2))
	}
	clip := func(c *stablehlo.Value, size int64) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		return b.set(hlo.Clamp(b.scalar(c, 0), c, b.scalar(c, float64(size-1))))
	}
	reflect := func(c *stablehlo.Value, twiceLow, twiceHigh float64) *stablehlo.Value {
		if twiceLow == twiceHigh {
			return k(0)
		}
		lo, span := twiceLow/2, (twiceHigh-twiceLow)/2
		v := b.un(hlo.Abs, b.bin(hlo.Subtract, c, k(lo)))
		extra := b.bin(hlo.Remainder, v, k(span))
		flips := b.un(hlo.Floor, b.bin(hlo.Divide, v, k(span)))
		even := b.cmp(b.bin(hlo.Remainder, flips, k(2)), k(0), types.CompareEQ)
		return b.sel(even, b.bin(hlo.Add, extra, k(lo)), b.bin(hlo.Add, b.bin(hlo.Subtract, k(span), extra), k(lo)))
	}
	// pad applies padding_mode to a coordinate along an axis of the given size.
	pad := func(c *stablehlo.Value, size int64) *stablehlo.Value {
		switch padMode {
		case 1:
			return clip(c, size)
		case 2:
			if align {
				c = reflect(c, 0, 2*float64(size-1))
			} else {
				c = reflect(c, -1, 2*float64(size)-1)
			}
			return clip(c, size)
		}
		return c
	}
	ix, iy := unnorm(coord(0), W), unnorm(coord(1), H)
	if mode != 2 {
		ix, iy = pad(ix, W), pad(iy, H)
	}
	// Batch index of every output position, for the gather.
	nIdx := b.set(ctx.Fn.Iota(shapes.Make(dtypes.Int32, int(N), int(Ho), int(Wo), 1), 0))
	full := []int64{N, C, Ho, Wo}
	// tap gathers input[n, :, ty, tx] (zero outside) times weight w.
	tap := func(tx, ty, w *stablehlo.Value) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		valid := b.bin(hlo.And,
			b.bin(hlo.And, b.cmp(tx, k(0), types.CompareGE), b.cmp(tx, k(float64(W-1)), types.CompareLE)),
			b.bin(hlo.And, b.cmp(ty, k(0), types.CompareGE), b.cmp(ty, k(float64(H-1)), types.CompareLE)))
		toIdx := func(c *stablehlo.Value, size int64) *stablehlo.Value {
			c = clip(c, size)
			if b.err != nil {
				return nil
			}
			return b.reshape(b.set(hlo.Convert(c, dtypes.Int32)), []int64{N, Ho, Wo, 1})
		}
		jy, jx := toIdx(ty, H), toIdx(tx, W)
		if b.err != nil {
			return nil
		}
		idx := b.set(hlo.Concatenate(3, nIdx, jy, jx))
		if b.err != nil {
			return nil
		}
		g := b.set(hlo.Gather(x, idx, 3, []int{3}, []int{0, 2, 3}, nil, nil, []int{0, 2, 3}, []int{1, int(C), 1, 1}, false))
		g = b.transpose(g, []int{0, 3, 1, 2})
		g = b.sel(b.bcastIn(valid, full, []int{0, 2, 3}), g, b.full(g, 0, full))
		return b.bin(hlo.Multiply, g, b.bcastIn(w, full, []int{0, 2, 3}))
	}
	var y *stablehlo.Value
	add := func(v *stablehlo.Value) {
		if y == nil {
			y = v
		} else {
			y = b.bin(hlo.Add, y, v)
		}
	}
	switch mode {
	case 0: // bilinear
		x0, y0 := b.un(hlo.Floor, ix), b.un(hlo.Floor, iy)
		x1, y1 := b.bin(hlo.Add, x0, k(1)), b.bin(hlo.Add, y0, k(1))
		dx1, dx0 := b.bin(hlo.Subtract, x1, ix), b.bin(hlo.Subtract, ix, x0)
		dy1, dy0 := b.bin(hlo.Subtract, y1, iy), b.bin(hlo.Subtract, iy, y0)
		add(tap(x0, y0, b.bin(hlo.Multiply, dx1, dy1)))
		add(tap(x1, y0, b.bin(hlo.Multiply, dx0, dy1)))
		add(tap(x0, y1, b.bin(hlo.Multiply, dx1, dy0)))
		add(tap(x1, y1, b.bin(hlo.Multiply, dx0, dy0)))
	case 1: // nearest, rounding half to even
		add(tap(b.un(hlo.RoundNearestEven, ix), b.un(hlo.RoundNearestEven, iy), k(1)))
	case 2: // bicubic, A = -0.75, padding applied per tap
		const a = -0.75
		x0, y0 := b.un(hlo.Floor, ix), b.un(hlo.Floor, iy)
		tx, ty := b.bin(hlo.Subtract, ix, x0), b.bin(hlo.Subtract, iy, y0)
		conv1 := func(t *stablehlo.Value) *stablehlo.Value { // ((a+2)t - (a+3)) t t + 1
			v := b.bin(hlo.Subtract, b.bin(hlo.Multiply, k(a+2), t), k(a+3))
			return b.bin(hlo.Add, b.bin(hlo.Multiply, b.bin(hlo.Multiply, v, t), t), k(1))
		}
		conv2 := func(t *stablehlo.Value) *stablehlo.Value { // ((a t - 5a) t + 8a) t - 4a
			v := b.bin(hlo.Subtract, b.bin(hlo.Multiply, k(a), t), k(5*a))
			v = b.bin(hlo.Add, b.bin(hlo.Multiply, v, t), k(8*a))
			return b.bin(hlo.Subtract, b.bin(hlo.Multiply, v, t), k(4*a))
		}
		coeffs := func(t *stablehlo.Value) [4]*stablehlo.Value {
			u := b.bin(hlo.Subtract, k(1), t)
			return [4]*stablehlo.Value{conv2(b.bin(hlo.Add, t, k(1))), conv1(t), conv1(u), conv2(b.bin(hlo.Add, u, k(1)))}
		}
		wx, wy := coeffs(tx), coeffs(ty)
		for i := 0; i < 4; i++ {
			cy := pad(b.bin(hlo.Add, y0, k(float64(i-1))), H)
			for j := 0; j < 4; j++ {
				cx := pad(b.bin(hlo.Add, x0, k(float64(j-1))), W)
				// PyTorch truncates the padded coordinate; it is integral or,
				// after clipping, non-negative, so floor is the same.
				add(tap(b.un(hlo.Floor, cx), b.un(hlo.Floor, cy), b.bin(hlo.Multiply, wx[j], wy[i])))
			}
		}
	}
	return b.out(b.convert(y, dt))
}

// nnRoiAlign lowers xserve.roi_align as ONNX's reference computes it: per
// roi, axis-wise sample coordinates (bin start plus (i+0.5)/sampling_ratio of
// a bin), the reference's clamping, bilinear weights of the four corners
// gathered from the roi's batch image, and the average of each bin's
// samples.
func nnRoiAlign(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	var sz [3]int64
	for i, name := range []string{"output_height", "output_width", "sampling_ratio"} {
		if sz[i], err = n.IntArg(3+i, name, 1); err != nil {
			return nil, err
		}
	}
	oh, ow, sr := sz[0], sz[1], sz[2]
	scale, err := n.ParamFloat("spatial_scale")
	if err != nil {
		return nil, err
	}
	halfPixel, err := n.ParamBool("half_pixel")
	if err != nil {
		return nil, err
	}
	b := &nnB{ctx: ctx}
	cdt := nnFloatCompute(dt)
	x := b.convert(in[0], cdt)
	rois := b.convert(in[1], cdt)
	C, H, W := xd[1], xd[2], xd[3]
	R := outDims[0]
	offset := 0.0
	if halfPixel {
		offset = 0.5
	}
	col := func(i int) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		c := b.slice(rois, []int{0, i}, []int{int(R), i + 1}, nil)
		c = b.reshape(c, []int64{R})
		return b.bin(hlo.Subtract, b.bin(hlo.Multiply, c, b.full(c, scale, []int64{R})), b.full(c, offset, []int64{R}))
	}
	// axis computes, along one axis (roi columns lo/hi, pooled size p,
	// input size size), the low and high corner indices, their weights and
	// the validity of each of the p*sr samples: [R, p*sr] each.
	axis := func(lo, hi int, p, size int64) (low, high, wl, wh, valid *stablehlo.Value) {
		start, end := col(lo), col(hi)
		length := b.bin(hlo.Subtract, end, start)
		if !halfPixel {
			length = b.bin(hlo.Maximum, length, b.full(length, 1, []int64{R}))
		}
		bin := b.bin(hlo.Divide, length, b.full(length, float64(p), []int64{R}))
		// Sample offsets in bins: ph + (i + 0.5) / sr.
		q := p * sr
		offs := make([]float64, q)
		for ph := int64(0); ph < p; ph++ {
			for i := int64(0); i < sr; i++ {
				offs[ph*sr+i] = float64(ph) + (float64(i)+0.5)/float64(sr)
			}
		}
		sd := []int64{R, q}
		pos := b.bin(hlo.Multiply, b.bcastIn(b.consts(length, offs, []int64{q}), sd, []int{1}), b.bcastIn(bin, sd, []int{0}))
		pos = b.bin(hlo.Add, pos, b.bcastIn(start, sd, []int{0}))
		k := func(v float64) *stablehlo.Value { return b.full(pos, v, sd) }
		valid = b.bin(hlo.And, b.cmp(pos, k(-1), types.CompareGE), b.cmp(pos, k(float64(size)), types.CompareLE))
		pos = b.bin(hlo.Maximum, pos, k(0))
		low = b.un(hlo.Floor, pos)
		edge := b.cmp(low, k(float64(size-1)), types.CompareGE)
		low = b.sel(edge, k(float64(size-1)), low)
		pos = b.sel(edge, low, pos)
		high = b.sel(edge, low, b.bin(hlo.Add, low, k(1)))
		wh = b.bin(hlo.Subtract, pos, low)
		wl = b.bin(hlo.Subtract, k(1), wh)
		return low, high, wl, wh, valid
	}
	yl, yh, wyl, wyh, vy := axis(1, 3, oh, H)
	xl, xh, wxl, wxh, vx := axis(0, 2, ow, W)
	P, Q := oh*sr, ow*sr
	grid := []int64{R, P, Q}
	bY := func(v *stablehlo.Value) *stablehlo.Value { return b.bcastIn(v, grid, []int{0, 1}) }
	bX := func(v *stablehlo.Value) *stablehlo.Value { return b.bcastIn(v, grid, []int{0, 2}) }
	valid := b.bin(hlo.And, bY(vy), bX(vx))
	var batch *stablehlo.Value
	if b.err == nil {
		bi := b.set(hlo.Convert(in[2], dtypes.Int32))
		batch = b.reshape(b.bcastIn(bi, grid, []int{0}), []int64{R, P, Q, 1})
	}
	idx := func(v *stablehlo.Value, bc func(*stablehlo.Value) *stablehlo.Value) *stablehlo.Value {
		if b.err != nil {
			return nil
		}
		return b.reshape(bc(b.set(hlo.Convert(v, dtypes.Int32))), []int64{R, P, Q, 1})
	}
	full := []int64{R, P, Q, C}
	var acc *stablehlo.Value
	for _, corner := range []struct{ y, x, wy, wx *stablehlo.Value }{{yl, xl, wyl, wxl}, {yl, xh, wyl, wxh}, {yh, xl, wyh, wxl}, {yh, xh, wyh, wxh}} {
		if b.err != nil {
			break
		}
		ind := b.set(hlo.Concatenate(3, batch, idx(corner.y, bY), idx(corner.x, bX)))
		if b.err != nil {
			break
		}
		g := b.set(hlo.Gather(x, ind, 3, []int{3}, []int{0, 2, 3}, nil, nil, []int{0, 2, 3}, []int{1, int(C), 1, 1}, false))
		w := b.bin(hlo.Multiply, bY(corner.wy), bX(corner.wx))
		g = b.bin(hlo.Multiply, g, b.bcastIn(w, full, []int{0, 1, 2}))
		if acc == nil {
			acc = g
		} else {
			acc = b.bin(hlo.Add, acc, g)
		}
	}
	acc = b.sel(b.bcastIn(valid, full, []int{0, 1, 2}), acc, b.full(acc, 0, full))
	// [R, oh, sr, ow, sr, C] -> sum the samples of each bin.
	acc = b.reshape(acc, []int64{R, oh, sr, ow, sr, C})
	acc = b.reduce(acc, ReduceSum, 0, []int{2, 4})
	acc = b.bin(hlo.Divide, acc, b.full(acc, float64(sr*sr), []int64{R, oh, ow, C}))
	acc = b.transpose(acc, []int{0, 3, 1, 2})
	return b.out(b.convert(acc, dt))
}

// nnConvAsDotMaxPatches bounds the patch matrix of a convolution computed as
// a matrix product (Options.ConvAsDot), in elements: above it (large images
// in large batch buckets) the memory the patches take costs more than XLA's
// own convolution loses.
const nnConvAsDotMaxPatches = 1 << 23

// nnConvAsDotFits reports whether a convolution of x [N, C, spatial...] with
// weight w [out, in/groups, kernel...] giving outDims is computed as a
// matrix product: one group, one to three spatial dims, static sizes, a
// kernel window with more taps than the input has positions (XLA CPU swaps
// the operands of such a convolution into a form it runs in plain loops;
// elsewhere its own convolution measured faster than the matrix product)
// and a patch matrix of at most nnConvAsDotMaxPatches elements.
func nnConvAsDotFits(xd, wd, outDims []int64, groups int64) bool {
	spatial := len(wd) - 2
	if groups != 1 || spatial < 1 || spatial > 3 || len(xd) != len(wd) || len(outDims) != len(wd) {
		return false
	}
	for _, d := range append(append(append([]int64{}, xd...), wd...), outDims...) {
		if d <= 0 {
			return false
		}
	}
	if nnProd(wd[2:]) <= nnProd(xd[2:]) {
		return false
	}
	rows := outDims[0]
	for _, d := range outDims[2:] {
		rows *= d
	}
	return rows*nnProd(wd[1:]) <= nnConvAsDotMaxPatches
}

// nnConvAsDot computes a convolution with one group as one matrix product
// (im2col): the input, channels last and padded, is cut into one strided
// slice per kernel tap, the slices are concatenated along the channels into
// patches [N, out spatial..., taps*C] (tap-major), and multiplied by the
// kernel taken as [taps*C, O], which with Options.ConvWeightsHWIO is its
// parameter's own layout. XLA CPU runs the product in its matrix
// multiplication kernels; its algebraic simplifier swaps the operands of a
// convolution whose window has more taps than its input has positions (3x3
// kernels on the 2x2 maps at the end of a ResNet on small images), and its
// fast convolution kernels do not take the swapped form, which then runs in
// plain loops.
func nnConvAsDot(b *nnB, x, w *stablehlo.Value, wd, outDims []int64, p fxgraph.ConvParams) *stablehlo.Value {
	spatial := len(wd) - 2
	rank := spatial + 2
	toLast := append(append([]int{0}, nnRange(2, rank)...), 1) // NC... -> N...C
	xl := b.transpose(x, toLast)
	lo, hi := make([]int, rank), make([]int, rank)
	padded := false
	for j := 0; j < spatial; j++ {
		lo[1+j], hi[1+j] = int(p.Padding[j]), int(p.Padding[j])
		padded = padded || p.Padding[j] != 0
	}
	if padded && b.err == nil {
		xl = b.set(hlo.Pad(xl, b.scalar(xl, 0), lo, hi, nil))
	}
	c := int(wd[1])
	taps := []*stablehlo.Value{}
	tap := make([]int, spatial)
	for {
		starts, limits, strides := make([]int, rank), make([]int, rank), make([]int, rank)
		limits[0], strides[0] = int(outDims[0]), 1
		limits[rank-1], strides[rank-1] = c, 1
		for j := 0; j < spatial; j++ {
			starts[1+j] = tap[j] * int(p.Dilation[j])
			limits[1+j] = starts[1+j] + (int(outDims[2+j])-1)*int(p.Stride[j]) + 1
			strides[1+j] = int(p.Stride[j])
		}
		taps = append(taps, b.slice(xl, starts, limits, strides))
		j := spatial - 1
		for ; j >= 0; j-- {
			if tap[j]++; tap[j] < int(wd[2+j]) {
				break
			}
			tap[j] = 0
		}
		if j < 0 {
			break
		}
	}
	patches := taps[0]
	if len(taps) > 1 && b.err == nil {
		patches = b.set(hlo.Concatenate(rank-1, taps...))
	}
	kernel := b.transpose(w, append(nnRange(2, rank), 1, 0)) // [kernel..., in, out]
	kernel = b.reshape(kernel, []int64{nnProd(wd[1:]), wd[0]})
	y := b.dot(patches, []int{rank - 1}, nil, kernel, []int{0}, nil)
	return b.transpose(y, append([]int{0, rank - 1}, nnRange(1, rank-1)...))
}

// kernelSite returns call with the attribute "site" added: the first 8
// bytes of a SHA-256 of its target, operand and result types, layouts and
// other attributes, never 0. The CPU kernels key the primitive they made
// for a call by it, so that a call seen before skips reading its
// attributes and building, hashing and comparing its key (about 0.2 µs of
// its 1.5; cpukernels/common.h, "Call sites"). They still check the
// operands' shapes against the primitive's; the cryptographic hash keeps
// calls with different attributes, even from another model loaded in the
// same process, from sharing a site.
func kernelSite(call stablehlo.FFICall) stablehlo.FFICall {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%v|%v|%v|%v|", call.Target, typesOf(call.Operands), call.Results, call.OperandLayouts, call.ResultLayouts)
	for _, a := range call.Attrs {
		fmt.Fprintf(h, "%s=%d,%v,%t,%v,%t;", a.Name, a.Int, a.Ints, a.Array, math.Float32bits(a.Float), a.IsFloat)
	}
	site := int64(binary.LittleEndian.Uint64(h.Sum(nil)))
	if site == 0 {
		site = 1
	}
	call.Attrs = append(slices.Clone(call.Attrs), stablehlo.FFIAttr{Name: "site", Int: site})
	return call
}

// typesOf returns the types of vs.
func typesOf(vs []*stablehlo.Value) []stablehlo.Type {
	ts := make([]stablehlo.Type, len(vs))
	for i, v := range vs {
		ts[i] = v.Type()
	}
	return ts
}
