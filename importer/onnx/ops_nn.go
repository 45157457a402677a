package onnx

import (
	"fmt"
	"math"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerNN registers converters of convolution, pooling, normalization, matmul and softmax.
func registerNN(cs converters) {
	cs.add("Conv", nnConv)
	cs.add("ConvTranspose", nnConvTranspose)
	cs.add("Gemm", nnGemm)
	cs.add("MatMul", nnMatMul)
	for _, op := range []struct {
		name   string
		target *fxgraph.Op
	}{{"Softmax", fxgraph.Aten_Softmax}, {"LogSoftmax", fxgraph.Aten_LogSoftmax}, {"Hardmax", nil}} {
		cs.add(op.name, nnSoftmaxLike(op.target, false))
		cs.register("", op.name, 13, nnSoftmaxLike(op.target, true))
	}
	cs.add("BatchNormalization", nnBatchNormalization)
	cs.register("", "LayerNormalization", 17, nnLayerNormalization)
	cs.add("InstanceNormalization", nnInstanceNormalization)
	cs.add("MaxPool", nnMaxPool)
	cs.add("AveragePool", nnAveragePool)
	cs.add("GlobalAveragePool", nnGlobalPool(fxgraph.AtenMeanDim))
	cs.add("GlobalMaxPool", nnGlobalPool(fxgraph.AtenAmax))
	cs.register("", "Resize", 10, nnResize)
	cs.add("Upsample", nnUpsample)
	cs.add("LRN", nnLRN)
	cs.register("", "MeanVarianceNormalization", 9, nnMVN)
	cs.register("", "Einsum", 12, nnEinsum)
	cs.register("", "ConvInteger", 10, nnConvInteger)
	cs.register("", "MatMulInteger", 10, nnMatMulInteger)
	cs.register("", "QLinearConv", 10, nnQLinear(true))
	cs.register("", "QLinearMatMul", 10, nnQLinear(false))
	cs.register("", "MaxUnpool", 9, nnMaxUnpool)
	cs.register("", "GridSample", 16, nnGridSample)
	cs.register("", "RoiAlign", 10, nnRoiAlign)
}

// nnSpatialAttr returns an ints attribute with one value per spatial dim,
// def for each when absent.
func nnSpatialAttr(c *Ctx, name string, spatial int, def int64) ([]int64, error) {
	v := c.AttrInts(name, nil)
	if v == nil {
		v = make([]int64, spatial)
		for i := range v {
			v[i] = def
		}
	}
	if len(v) != spatial {
		return nil, fmt.Errorf("attribute %s has %d values, want %d", name, len(v), spatial)
	}
	return v, nil
}

// nnKernel returns kernel_shape, or the weight's spatial dims.
func nnKernel(c *Ctx, w *fxgraph.Node, spatial int) ([]int64, error) {
	if k := c.AttrInts("kernel_shape", nil); k != nil {
		if len(k) != spatial {
			return nil, fmt.Errorf("kernel_shape %v for %d spatial dims", k, spatial)
		}
		return k, nil
	}
	if w == nil {
		return nil, fmt.Errorf("kernel_shape is required")
	}
	ws := Meta(w).Shape
	k := make([]int64, spatial)
	for j := range k {
		d := ws[2+j]
		if !d.IsStatic() {
			return nil, Unsupported("weight %s has a symbolic kernel size and no kernel_shape", Meta(w))
		}
		k[j] = d.Size
	}
	return k, nil
}

// nnPads returns the begin and end padding of each spatial dim for a
// convolution or pooling with the given effective kernel sizes (dilation
// included), from auto_pad or pads.
func nnPads(c *Ctx, x fxgraph.TensorMeta, ek, strides []int64) (lo, hi []int64, err error) {
	spatial := len(ek)
	lo, hi = make([]int64, spatial), make([]int64, spatial)
	switch ap := c.AttrString("auto_pad", "NOTSET"); ap {
	case "NOTSET", "":
		pads := c.AttrInts("pads", nil)
		if pads == nil {
			return lo, hi, nil
		}
		if len(pads) != 2*spatial {
			return nil, nil, fmt.Errorf("pads %v for %d spatial dims", pads, spatial)
		}
		copy(lo, pads[:spatial])
		copy(hi, pads[spatial:])
		for j := range lo {
			if lo[j] < 0 || hi[j] < 0 {
				return nil, nil, Unsupported("negative pads %v", pads)
			}
		}
	case "VALID":
	case "SAME_UPPER", "SAME_LOWER":
		for j := 0; j < spatial; j++ {
			d := x.Shape[x.Rank()-spatial+j]
			if !d.IsStatic() {
				return nil, nil, Unsupported("auto_pad %s with symbolic input dim %s", ap, d)
			}
			out := (d.Size + strides[j] - 1) / strides[j]
			total := max(0, (out-1)*strides[j]+ek[j]-d.Size)
			if ap == "SAME_UPPER" {
				lo[j] = total / 2
			} else {
				lo[j] = total - total/2
			}
			hi[j] = total - lo[j]
		}
	default:
		return nil, nil, Unsupported("auto_pad %q", ap)
	}
	return lo, hi, nil
}

func nnSymmetric(lo, hi []int64) bool {
	for j := range lo {
		if lo[j] != hi[j] {
			return false
		}
	}
	return true
}

// nnPadList builds aten.constant_pad_nd's pad list (last dim first) adding
// lo-base / hi-base on each spatial dim.
func nnPadList(lo, hi, base []int64) []any {
	var out []any
	for j := len(lo) - 1; j >= 0; j-- {
		out = append(out, lo[j]-base[j], hi[j]-base[j])
	}
	return out
}

func nnMin(lo, hi []int64) []int64 {
	out := make([]int64, len(lo))
	for j := range lo {
		out[j] = min(lo[j], hi[j])
	}
	return out
}

func nnEffective(k, d []int64) []int64 {
	out := make([]int64, len(k))
	for j := range k {
		out[j] = d[j]*(k[j]-1) + 1
	}
	return out
}

func nnConvInputs(c *Ctx) (x, w, b *fxgraph.Node, spatial int, err error) {
	if x, err = c.Input(0); err != nil {
		return
	}
	if w, err = c.Input(1); err != nil {
		return
	}
	if b, err = c.OptInput(2); err != nil {
		return
	}
	xm, wm := Meta(x), Meta(w)
	spatial = wm.Rank() - 2
	if spatial < 1 || spatial > 3 || xm.Rank() != wm.Rank() {
		err = Unsupported("convolution of input %s with weight %s", xm, wm)
		return
	}
	if !xm.DType.IsFloat() {
		err = Unsupported("convolution of %s", xm.DType)
	}
	return
}

// nnConv converts Conv: aten.convolution with the symmetric part of the
// padding; asymmetric padding pads the input first.
func nnConv(c *Ctx, n *Node) error {
	x, w, b, spatial, err := nnConvInputs(c)
	if err != nil {
		return err
	}
	y, err := nnConvCore(c, x, w, b, spatial)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnConvCore emits the convolution of x with w (and bias b, or nil) per
// the node's Conv attributes.
func nnConvCore(c *Ctx, x, w, b *fxgraph.Node, spatial int) (*fxgraph.Node, error) {
	s, d, lo, hi, err := nnConvWindow(c, x, w, spatial)
	if err != nil {
		return nil, err
	}
	p := nnMin(lo, hi)
	if !nnSymmetric(lo, hi) {
		if x, err = c.Emit(fxgraph.AtenConstantPadNd, x, nnPadList(lo, hi, p), 0.0); err != nil {
			return nil, err
		}
	}
	var bias any
	if b != nil {
		bias = b
	}
	return c.Emit(fxgraph.AtenConvolution, x, w, bias, ints(s), ints(p), ints(d), false, ints(make([]int64, spatial)), c.AttrInt("group", 1))
}

// nnConvWindow reads a convolution's strides, dilations and begin/end
// padding (from pads or auto_pad) for input x and weight w.
func nnConvWindow(c *Ctx, x, w *fxgraph.Node, spatial int) (s, d, lo, hi []int64, err error) {
	k, err := nnKernel(c, w, spatial)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if s, err = nnSpatialAttr(c, "strides", spatial, 1); err != nil {
		return nil, nil, nil, nil, err
	}
	if d, err = nnSpatialAttr(c, "dilations", spatial, 1); err != nil {
		return nil, nil, nil, nil, err
	}
	lo, hi, err = nnPads(c, Meta(x), nnEffective(k, d), s)
	return s, d, lo, hi, err
}

// nnConvTranspose converts ConvTranspose. ONNX's begin/end pads (given,
// or derived from output_shape / auto_pad) map onto ATen's symmetric
// padding as padding=begin and output_padding=output_padding+begin-end.
func nnConvTranspose(c *Ctx, n *Node) error {
	x, w, b, spatial, err := nnConvInputs(c)
	if err != nil {
		return err
	}
	xm := Meta(x)
	k, err := nnKernel(c, w, spatial)
	if err != nil {
		return err
	}
	s, err := nnSpatialAttr(c, "strides", spatial, 1)
	if err != nil {
		return err
	}
	d, err := nnSpatialAttr(c, "dilations", spatial, 1)
	if err != nil {
		return err
	}
	op, err := nnSpatialAttr(c, "output_padding", spatial, 0)
	if err != nil {
		return err
	}
	lo, hi := make([]int64, spatial), make([]int64, spatial)
	outShape := c.AttrInts("output_shape", nil)
	if len(outShape) == spatial+2 {
		outShape = outShape[2:]
	}
	if outShape != nil && len(outShape) != spatial {
		return fmt.Errorf("output_shape %v for %d spatial dims", outShape, spatial)
	}
	ap := c.AttrString("auto_pad", "NOTSET")
	switch {
	case outShape != nil || ap == "SAME_UPPER" || ap == "SAME_LOWER":
		for j := 0; j < spatial; j++ {
			in := xm.Shape[2+j]
			if !in.IsStatic() {
				return Unsupported("ConvTranspose with output_shape/auto_pad and symbolic input dim %s", in)
			}
			out := in.Size * s[j]
			if outShape != nil {
				out = outShape[j]
			}
			total := s[j]*(in.Size-1) + op[j] + d[j]*(k[j]-1) + 1 - out
			switch {
			case total < 0:
				// A larger output than the full result: zeros (plus bias)
				// at the end, like extra output_padding.
				lo[j] = 0
			case ap == "SAME_UPPER":
				lo[j] = total / 2
			default:
				lo[j] = total - total/2
			}
			hi[j] = total - lo[j]
		}
	case ap == "VALID":
	case ap == "NOTSET" || ap == "":
		if pads := c.AttrInts("pads", nil); pads != nil {
			if len(pads) != 2*spatial {
				return fmt.Errorf("pads %v for %d spatial dims", pads, spatial)
			}
			copy(lo, pads[:spatial])
			copy(hi, pads[spatial:])
		}
	default:
		return Unsupported("auto_pad %q", ap)
	}
	aop := make([]int64, spatial)
	for j := range lo {
		if lo[j] < 0 {
			return Unsupported("ConvTranspose with negative begin padding %v", lo)
		}
		aop[j] = op[j] + lo[j] - hi[j]
	}
	var bias any
	if b != nil {
		bias = b
	}
	y, err := c.Emit(fxgraph.AtenConvolution, x, w, bias, ints(s), ints(lo), ints(d), true, ints(aop), c.AttrInt("group", 1))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnGemm converts Gemm to aten.addmm (aten.mm without C and alpha 1),
// transposing with aten.permute.
func nnGemm(c *Ctx, n *Node) error {
	a, err := c.Input(0)
	if err != nil {
		return err
	}
	b, err := c.Input(1)
	if err != nil {
		return err
	}
	cc, err := c.OptInput(2)
	if err != nil {
		return err
	}
	if Meta(a).Rank() != 2 || Meta(b).Rank() != 2 {
		return fmt.Errorf("Gemm wants 2-D A and B, got %s and %s", Meta(a), Meta(b))
	}
	if c.AttrInt("transA", 0) != 0 {
		if a, err = c.Emit(fxgraph.AtenPermute, a, []any{int64(1), int64(0)}); err != nil {
			return err
		}
	}
	if c.AttrInt("transB", 0) != 0 {
		if b, err = c.Emit(fxgraph.AtenPermute, b, []any{int64(1), int64(0)}); err != nil {
			return err
		}
	}
	alpha, beta := c.AttrFloat("alpha", 1), c.AttrFloat("beta", 1)
	dt := Meta(a).DType
	if !dt.IsFloat() && (alpha != math.Trunc(alpha) || beta != math.Trunc(beta)) {
		return Unsupported("Gemm of %s with non-integral alpha %v / beta %v", dt, alpha, beta)
	}
	var y *fxgraph.Node
	switch {
	case cc == nil && alpha == 1:
		y, err = c.Emit(fxgraph.AtenMm, a, b)
	default:
		if cc == nil {
			cc, beta = c.ScalarConst(dt, 0), 0
		}
		kw := map[string]any{}
		if beta != 1 {
			kw["beta"] = beta
		}
		if alpha != 1 {
			kw["alpha"] = alpha
		}
		y, err = c.EmitKw(fxgraph.AtenAddmm, []any{cc, a, b}, kw)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

func nnMatMul(c *Ctx, n *Node) error {
	a, err := c.Input(0)
	if err != nil {
		return err
	}
	b, err := c.Input(1)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenMatmul, a, b)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnSizeList returns x's dims as a size list for aten.view: ints, with
// aten.sym_size nodes for symbolic dims.
func nnSizeList(c *Ctx, x *fxgraph.Node) ([]any, error) {
	var out []any
	for i, d := range Meta(x).Shape {
		if d.IsStatic() {
			out = append(out, d.Size)
			continue
		}
		s, err := c.Emit(fxgraph.AtenSymSizeInt, x, int64(i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// nnStaticProd is the product of dims, and whether they are all static.
func nnStaticProd(s fxgraph.Shape) (int64, bool) {
	p := int64(1)
	for _, d := range s {
		if !d.IsStatic() {
			return 0, false
		}
		p *= d.Size
	}
	return p, true
}

// nnSoftmaxLike converts Softmax, LogSoftmax and Hardmax (target "").
// From opset 13 they act along one axis (default -1); before, the input is
// coerced to 2-D at axis (default 1) and they act along the flattened
// second dim.
func nnSoftmaxLike(target *fxgraph.Op, v13 bool) Converter {
	return func(c *Ctx, n *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		xm := Meta(x)
		r := xm.Rank()
		if !xm.DType.IsFloat() {
			return Unsupported("%s of %s", n.OpType, xm.DType)
		}
		apply := func(v *fxgraph.Node, axis int64) (*fxgraph.Node, error) {
			if target == nil {
				return nnHardmax(c, v, axis)
			}
			return c.Emit(target, v, axis, false)
		}
		var y *fxgraph.Node
		if v13 {
			y, err = apply(x, c.AttrInt("axis", -1))
		} else {
			axis, nerr := fxgraph.NormDim(c.AttrInt("axis", 1), max(r, 1))
			if nerr != nil {
				return nerr
			}
			if axis >= r-1 {
				y, err = apply(x, int64(axis))
			} else {
				left, lok := nnStaticProd(xm.Shape[:axis])
				right, rok := nnStaticProd(xm.Shape[axis:])
				var size []any
				switch {
				case rok:
					size = []any{int64(-1), right}
				case lok:
					size = []any{left, int64(-1)}
				default:
					return Unsupported("%s at axis %d of %s (symbolic dims on both sides)", n.OpType, axis, xm.Shape)
				}
				back, serr := nnSizeList(c, x)
				if serr != nil {
					return serr
				}
				flat, ferr := c.Emit(fxgraph.AtenView, x, size)
				if ferr != nil {
					return ferr
				}
				if y, err = apply(flat, 1); err == nil {
					y, err = c.Emit(fxgraph.AtenView, y, back)
				}
			}
		}
		if err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// nnHardmax is one-hot(argmax(x, axis)) in x's dtype, the first maximum
// winning: eq(arange(size) along axis, argmax keepdim).
func nnHardmax(c *Ctx, x *fxgraph.Node, axis int64) (*fxgraph.Node, error) {
	xm := Meta(x)
	a, err := fxgraph.NormDim(axis, xm.Rank())
	if err != nil {
		return nil, err
	}
	d := xm.Shape[a]
	if !d.IsStatic() {
		return nil, Unsupported("Hardmax along symbolic dim %s", d)
	}
	am, err := c.Emit(fxgraph.AtenArgmax, x, int64(a), true)
	if err != nil {
		return nil, err
	}
	shape := make([]int64, xm.Rank())
	for i := range shape {
		shape[i] = 1
	}
	shape[a] = d.Size
	io := tensor.New(tensor.Int64, shape...)
	for i := int64(0); i < d.Size; i++ {
		io.SetInt64(i, i)
	}
	eq, err := c.Emit(fxgraph.AtenEqTensor, c.Constant("hardmax_iota", io), am)
	if err != nil {
		return nil, err
	}
	return c.EmitKw(fxgraph.Aten_ToCopy, []any{eq}, map[string]any{"dtype": xm.DType})
}

// nnBatchNormalization converts inference-mode BatchNormalization.
func nnBatchNormalization(c *Ctx, n *Node) error {
	switch {
	case c.Opset < 7:
		if c.AttrInt("is_test", 0) == 0 {
			return Unsupported("BatchNormalization in training mode (is_test=0)")
		}
		if c.AttrInt("spatial", 1) != 1 {
			return Unsupported("BatchNormalization with spatial=0")
		}
	case c.Opset < 9:
		if c.AttrInt("spatial", 1) != 1 {
			return Unsupported("BatchNormalization with spatial=0")
		}
	case c.Opset >= 14:
		if c.AttrInt("training_mode", 0) != 0 {
			return nnBatchNormTraining(c)
		}
	}
	for i := 1; i < 5; i++ {
		if c.HasOutput(i) {
			return Unsupported("BatchNormalization training outputs (output %d)", i)
		}
	}
	var args []any
	for i := 0; i < 5; i++ {
		v, err := c.Input(i)
		if err != nil {
			return err
		}
		args = append(args, v)
	}
	if !Meta(args[0].(*fxgraph.Node)).DType.IsFloat() {
		return Unsupported("BatchNormalization of %s", Meta(args[0].(*fxgraph.Node)).DType)
	}
	y, err := nnBatchNormWith(c, args...)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnBatchNormWith normalizes args[0] with the per-channel scale, bias,
// mean and variance args[1:5].
func nnBatchNormWith(c *Ctx, args ...any) (*fxgraph.Node, error) {
	args = append(args, c.AttrFloat("momentum", 0.9), c.AttrFloat("epsilon", 1e-5))
	bn, err := c.Emit(fxgraph.Aten_NativeBatchNormLegitNoTraining, args...)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.GetItem, bn, int64(0))
}

// nnBatchNormTraining converts BatchNormalization with training_mode=1
// (opset 14+): Y is normalized with the batch mean and (population)
// variance; the running statistics are updated as
// running * momentum + batch * (1 - momentum).
func nnBatchNormTraining(c *Ctx) error {
	var in [5]*fxgraph.Node
	for i := range in {
		v, err := c.Input(i)
		if err != nil {
			return err
		}
		in[i] = v
	}
	xm := Meta(in[0])
	if !xm.DType.IsFloat() || xm.Rank() < 2 {
		return Unsupported("BatchNormalization of %s", xm)
	}
	var axes []any
	for i := 0; i < xm.Rank(); i++ {
		if i != 1 {
			axes = append(axes, int64(i))
		}
	}
	mean, err := c.Emit(fxgraph.AtenMeanDim, in[0], axes, false)
	if err != nil {
		return err
	}
	variance, err := c.EmitKw(fxgraph.AtenVarCorrection, []any{in[0], axes}, map[string]any{"correction": int64(0)})
	if err != nil {
		return err
	}
	y, err := nnBatchNormWith(c, in[0], in[1], in[2], mean, variance)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	momentum := c.AttrFloat("momentum", 0.9)
	for i, batch := range []*fxgraph.Node{mean, variance} {
		if !c.HasOutput(i + 1) {
			continue
		}
		run, err := c.Emit(fxgraph.AtenMulScalar, in[3+i], momentum)
		if err != nil {
			return err
		}
		cur, err := c.Emit(fxgraph.AtenMulScalar, batch, 1-momentum)
		if err != nil {
			return err
		}
		if cur, err = nnCast(c, cur, Meta(in[3+i]).DType); err != nil {
			return err
		}
		upd, err := c.Emit(fxgraph.AtenAddTensor, run, cur)
		if err != nil {
			return err
		}
		c.SetOutput(i+1, upd)
	}
	return nil
}

// nnCast converts v to dt with aten._to_copy (no-op when equal).
func nnCast(c *Ctx, v *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	if v == nil || Meta(v).DType == dt {
		return v, nil
	}
	return c.EmitKw(fxgraph.Aten_ToCopy, []any{v}, map[string]any{"dtype": dt})
}

// nnLayerNormalization converts LayerNormalization: native_layer_norm over
// the dims from axis on, computed in float32 (stash_type 1); Mean and
// InvStdDev keep the normalized dims as size 1, as ONNX's do.
func nnLayerNormalization(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, err := c.Input(1)
	if err != nil {
		return err
	}
	bias, err := c.OptInput(2)
	if err != nil {
		return err
	}
	xm := Meta(x)
	if !xm.DType.IsFloat() {
		return Unsupported("LayerNormalization of %s", xm.DType)
	}
	if st := c.AttrInt("stash_type", 1); st != 1 {
		return Unsupported("LayerNormalization stash_type %d", st)
	}
	axis, err := fxgraph.NormDim(c.AttrInt("axis", -1), xm.Rank())
	if err != nil {
		return err
	}
	var ns []any
	for _, d := range xm.Shape[axis:] {
		if !d.IsStatic() {
			return Unsupported("LayerNormalization over symbolic dim %s", d)
		}
		ns = append(ns, d.Size)
	}
	x32, err := nnCast(c, x, tensor.Float32)
	if err != nil {
		return err
	}
	s32, err := nnCast(c, scale, tensor.Float32)
	if err != nil {
		return err
	}
	b32, err := nnCast(c, bias, tensor.Float32)
	if err != nil {
		return err
	}
	var bArg any
	if b32 != nil {
		bArg = b32
	}
	ln, err := c.Emit(fxgraph.AtenNativeLayerNorm, x32, ns, s32, bArg, c.AttrFloat("epsilon", 1e-5))
	if err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		if !c.HasOutput(i) {
			continue
		}
		v, err := c.Emit(fxgraph.GetItem, ln, int64(i))
		if err != nil {
			return err
		}
		if i == 0 {
			if v, err = nnCast(c, v, xm.DType); err != nil {
				return err
			}
		}
		c.SetOutput(i, v)
	}
	return nil
}

// nnDimArg is dim i of x as an argument: an int when static, else an
// aten.sym_size node.
func nnDimArg(c *Ctx, x *fxgraph.Node, i int) (any, error) {
	d := Meta(x).Shape[i]
	if d.IsStatic() {
		return d.Size, nil
	}
	return c.Emit(fxgraph.AtenSymSizeInt, x, int64(i))
}

// nnInstanceNormalization converts InstanceNormalization to
// native_group_norm with one group per channel.
func nnInstanceNormalization(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, err := c.Input(1)
	if err != nil {
		return err
	}
	bias, err := c.Input(2)
	if err != nil {
		return err
	}
	xm := Meta(x)
	if xm.Rank() < 3 || !xm.DType.IsFloat() {
		return Unsupported("InstanceNormalization of %s", xm)
	}
	ch := xm.Shape[1]
	if !ch.IsStatic() {
		return Unsupported("InstanceNormalization with a symbolic channel dim")
	}
	nArg, err := nnDimArg(c, x, 0)
	if err != nil {
		return err
	}
	var hw any = int64(1)
	for i := 2; i < xm.Rank(); i++ {
		d, err := nnDimArg(c, x, i)
		if err != nil {
			return err
		}
		hs, hok := hw.(int64)
		ds, dok := d.(int64)
		switch {
		case hok && dok:
			hw = hs * ds
		default:
			l, r := hw, d
			if hok {
				l = c.ScalarConst(tensor.Int64, float64(hs))
			}
			if dok {
				r = c.ScalarConst(tensor.Int64, float64(ds))
			}
			if hw, err = c.Emit(fxgraph.AtenMulTensor, l, r); err != nil {
				return err
			}
		}
	}
	gn, err := c.Emit(fxgraph.AtenNativeGroupNorm, x, scale, bias, nArg, ch.Size, hw, ch.Size, c.AttrFloat("epsilon", 1e-5))
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.GetItem, gn, int64(0))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnPoolAttrs reads the attributes shared by MaxPool and AveragePool.
type nnPoolAttrs struct {
	k, s, d, lo, hi []int64
	ceil            bool
}

func nnReadPool(c *Ctx, x fxgraph.TensorMeta) (nnPoolAttrs, error) {
	var p nnPoolAttrs
	spatial := x.Rank() - 2
	if spatial < 1 || spatial > 3 {
		return p, Unsupported("%d-D pooling of %s", spatial, x)
	}
	var err error
	if p.k, err = nnKernel(c, nil, spatial); err != nil {
		return p, err
	}
	if p.s, err = nnSpatialAttr(c, "strides", spatial, 1); err != nil {
		return p, err
	}
	if p.d, err = nnSpatialAttr(c, "dilations", spatial, 1); err != nil {
		return p, err
	}
	p.ceil = c.AttrInt("ceil_mode", 0) != 0
	p.lo, p.hi, err = nnPads(c, x, nnEffective(p.k, p.d), p.s)
	return p, err
}

// nnPoolSize is ONNX's pooling output size along one dim: floor or ceil of
// (in + pads - effective kernel) / stride + 1, where ceil_mode drops a last
// window that would start in the right padding (as PyTorch does; the
// onnx 1.19 reference agrees).
func nnPoolSize(in, lo, hi, ek, s int64, ceil bool) int64 {
	span := in + lo + hi - ek
	if !ceil {
		return span/s + 1
	}
	out := (span+s-1)/s + 1
	if (out-1)*s >= in+lo {
		out--
	}
	return out
}

// nnCheckPoolShape verifies that the emitted pooling node has ONNX's output
// size (nnPoolSize).
func nnCheckPoolShape(y *fxgraph.Node, x fxgraph.TensorMeta, p nnPoolAttrs) error {
	spatial := len(p.k)
	ys := y.Meta.Vals[0].Shape
	ek := nnEffective(p.k, p.d)
	for j := 0; j < spatial; j++ {
		a := x.Rank() - spatial + j
		in := x.Shape[a]
		if !in.IsStatic() {
			continue
		}
		want := nnPoolSize(in.Size, p.lo[j], p.hi[j], ek[j], p.s[j], p.ceil)
		if got := ys[a]; !got.IsStatic() || got.Size != want {
			return Unsupported("pooling with ceil_mode whose last window starts in the padding (ONNX size %d, PyTorch's %s)", want, got)
		}
	}
	return nil
}

// nnPoolTarget returns aten.<kind>_pool<n>d (max_pool with indices but for
// one spatial dim without).
func nnPoolTarget(kind string, spatial int, indices bool) *fxgraph.Op {
	switch {
	case kind == "avg":
		return fxgraph.AvgPoolOp(spatial)
	case indices || spatial > 1:
		return fxgraph.MaxPoolWithIndicesOp(spatial)
	}
	return fxgraph.AtenMaxPool1d
}

// nnMaxPool converts MaxPool. Asymmetric padding pads the input with the
// dtype's lowest value first. The Indices output is flattened over the
// whole tensor (batch and channel included) and honours storage_order.
func nnMaxPool(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xm := Meta(x)
	p, err := nnReadPool(c, xm)
	if err != nil {
		return err
	}
	spatial := len(p.k)
	wantIdx := c.HasOutput(1)
	pad := nnMin(p.lo, p.hi)
	if !nnSymmetric(p.lo, p.hi) {
		if wantIdx {
			return Unsupported("MaxPool Indices output with asymmetric padding")
		}
		var lowest any = math.Inf(-1)
		if !xm.DType.IsFloat() {
			lowest, _, _ = xm.DType.IntRange()
		}
		if x, err = c.Emit(fxgraph.AtenConstantPadNd, x, nnPadList(p.lo, p.hi, pad), lowest); err != nil {
			return err
		}
	}
	target := nnPoolTarget("max", spatial, wantIdx)
	pool, err := c.Emit(target, x, ints(p.k), ints(p.s), ints(pad), ints(p.d), p.ceil)
	if err != nil {
		return err
	}
	if err := nnCheckPoolShape(pool, xm, p); err != nil {
		return err
	}
	y := pool
	if pool.Meta.Tuple {
		if y, err = c.Emit(fxgraph.GetItem, pool, int64(0)); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	if !wantIdx {
		return nil
	}
	idx, err := c.Emit(fxgraph.GetItem, pool, int64(1))
	if err != nil {
		return err
	}
	if idx, err = nnOnnxIndices(c, idx, xm, c.AttrInt("storage_order", 0) != 0); err != nil {
		return err
	}
	c.SetOutput(1, idx)
	return nil
}

// nnOnnxIndices turns PyTorch's max-pool indices (row-major within each
// spatial plane) into ONNX's: column-major within the plane when
// colMajor, plus the offset of the plane in the whole tensor.
func nnOnnxIndices(c *Ctx, idx *fxgraph.Node, xm fxgraph.TensorMeta, colMajor bool) (*fxgraph.Node, error) {
	dims, ok := xm.Shape.Static()
	if !ok {
		return nil, Unsupported("MaxPool Indices output with symbolic input shape %s", xm.Shape)
	}
	sp := dims[2:]
	plane := int64(1)
	for _, d := range sp {
		plane *= d
	}
	var err error
	if colMajor && len(sp) > 1 {
		var acc *fxgraph.Node
		rowStride, colStride := plane, int64(1)
		for j := range sp {
			rowStride /= sp[j]
			// i_j = (idx // rowStride) % sp[j]
			v := idx
			if rowStride != 1 {
				if v, err = c.EmitKw(fxgraph.AtenDivScalarMode, []any{v, rowStride}, map[string]any{"rounding_mode": "floor"}); err != nil {
					return nil, err
				}
			}
			if j > 0 {
				if v, err = c.Emit(fxgraph.AtenRemainderScalar, v, sp[j]); err != nil {
					return nil, err
				}
			}
			if colStride != 1 {
				if v, err = c.Emit(fxgraph.AtenMulScalar, v, colStride); err != nil {
					return nil, err
				}
			}
			if acc == nil {
				acc = v
			} else if acc, err = c.Emit(fxgraph.AtenAddTensor, acc, v); err != nil {
				return nil, err
			}
			colStride *= sp[j]
		}
		idx = acc
	}
	if dims[0]*dims[1] > 1 {
		shape := make([]int64, len(dims))
		for i := range shape {
			shape[i] = 1
		}
		shape[0], shape[1] = dims[0], dims[1]
		off := tensor.New(tensor.Int64, shape...)
		for i := int64(0); i < dims[0]*dims[1]; i++ {
			off.SetInt64(i, i*plane)
		}
		if idx, err = c.Emit(fxgraph.AtenAddTensor, idx, c.Constant("pool_offsets", off)); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// nnAveragePool converts AveragePool. Asymmetric padding pads the input
// with zeros first; without count_include_pad the average is then rescaled
// by (window size within the padded input) / (window size within the
// input), computed on the host.
func nnAveragePool(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xm := Meta(x)
	if !xm.DType.IsFloat() {
		return Unsupported("AveragePool of %s", xm.DType)
	}
	p, err := nnReadPool(c, xm)
	if err != nil {
		return err
	}
	spatial := len(p.k)
	cip := c.Opset >= 7 && c.AttrInt("count_include_pad", 0) != 0
	for _, d := range p.d {
		if d != 1 {
			y, err := nnDilatedAveragePool(c, x, p, cip)
			if err != nil {
				return err
			}
			c.SetOutput(0, y)
			return nil
		}
	}
	target := nnPoolTarget("avg", spatial, false)
	if nnSymmetric(p.lo, p.hi) {
		y, err := c.Emit(target, x, ints(p.k), ints(p.s), ints(p.lo), p.ceil, cip)
		if err != nil {
			return err
		}
		if err := nnCheckPoolShape(y, xm, p); err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
	zero := make([]int64, spatial)
	xp, err := c.Emit(fxgraph.AtenConstantPadNd, x, nnPadList(p.lo, p.hi, zero), 0.0)
	if err != nil {
		return err
	}
	y, err := c.Emit(target, xp, ints(p.k), ints(p.s), ints(zero), p.ceil, true)
	if err != nil {
		return err
	}
	if err := nnCheckPoolShape(y, xm, p); err != nil {
		return err
	}
	if !cip {
		ys := Meta(y).Shape
		outs := make([]int64, spatial)
		factors := make([][]float64, spatial)
		for j := 0; j < spatial; j++ {
			a := xm.Rank() - spatial + j
			in, o := xm.Shape[a], ys[a]
			if !in.IsStatic() || !o.IsStatic() {
				return Unsupported("AveragePool with asymmetric padding, count_include_pad=0 and symbolic dim %s", in)
			}
			outs[j] = o.Size
			lp := p.lo[j] + in.Size + p.hi[j]
			factors[j] = make([]float64, o.Size)
			for i := int64(0); i < o.Size; i++ {
				start := i * p.s[j]
				end := min(start+p.k[j], lp)
				valid := min(end, p.lo[j]+in.Size) - max(start, p.lo[j])
				factors[j][i] = float64(end-start) / float64(max(valid, 0))
			}
		}
		ratio := tensor.New(xm.DType, outs...)
		total := tensor.NumElements(outs)
		for i := int64(0); i < total; i++ {
			f, rem := 1.0, i
			for j := spatial - 1; j >= 0; j-- {
				f *= factors[j][rem%outs[j]]
				rem /= outs[j]
			}
			ratio.SetFloat64(i, f)
		}
		if y, err = c.Emit(fxgraph.AtenMulTensor, y, c.Constant("avgpool_ratio", ratio)); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	return nil
}

// nnGlobalPool converts GlobalAveragePool / GlobalMaxPool to a keepdim
// reduction over the spatial dims.
func nnGlobalPool(target *fxgraph.Op) Converter {
	return func(c *Ctx, n *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		xm := Meta(x)
		if xm.Rank() < 3 {
			return fmt.Errorf("%s wants rank >= 3, got %s", n.OpType, xm)
		}
		var dims []any
		for i := 2; i < xm.Rank(); i++ {
			dims = append(dims, int64(i))
		}
		y, err := c.Emit(target, x, dims, true)
		if err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// nnResizeInput returns optional Resize input i as an IR argument: nil when
// absent or empty, the values as a list when constant, the node when it is
// computed from shapes only (it folds to a constant once shapes are
// specialized), and a *NeedsValueError when it is computed from input values.
func nnResizeInput(c *Ctx, i int, isInt bool) (any, error) {
	v, err := c.OptInput(i)
	if err != nil || v == nil {
		return nil, err
	}
	if t := c.Const(i); t != nil {
		if t.NumElements() == 0 {
			return nil, nil
		}
		if isInt {
			return ints(t.Int64s()), nil
		}
		return nnFloatsAny(t.Float64s()), nil
	}
	if s, ok := Meta(v).Shape.Static(); ok && tensor.NumElements(s) == 0 {
		return nil, nil
	}
	if deps := c.valueInputsBehind(v); len(deps) > 0 {
		// The output shape depends on input values: they must be known at
		// compile time.
		return nil, &NeedsValueError{Inputs: deps, Operand: c.node.Inputs[i]}
	}
	return v, nil
}

func nnFloatsAny(v []float64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

// nnListFloats returns the values of a list argument (nil for a node).
func nnListFloats(a any) []float64 {
	l, ok := a.([]any)
	if !ok {
		return nil
	}
	out := make([]float64, len(l))
	for i, e := range l {
		out[i], _ = fxgraph.AsFloat(e)
	}
	return out
}

// nnResize converts Resize (opsets 10, 11, 13, 18) to xserve.resize.
func nnResize(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	rank := Meta(x).Rank()
	mode := c.AttrString("mode", "nearest")
	var scales, sizes, roi any
	coord, nearest := "asymmetric", "floor"
	if c.Opset < 11 {
		if scales, err = nnResizeInput(c, 1, false); err != nil {
			return err
		}
		if nearest, err = nnLegacyNearest(nnListFloats(scales)); err != nil {
			return err
		}
	} else {
		coord = c.AttrString("coordinate_transformation_mode", "half_pixel")
		nearest = c.AttrString("nearest_mode", "round_prefer_floor")
		if coord == "tf_crop_and_resize" {
			if roi, err = nnResizeInput(c, 1, false); err != nil {
				return err
			}
		}
		if scales, err = nnResizeInput(c, 2, false); err != nil {
			return err
		}
		if sizes, err = nnResizeInput(c, 3, true); err != nil {
			return err
		}
		if pol := c.AttrString("keep_aspect_ratio_policy", "stretch"); pol != "stretch" && sizes != nil {
			if sizes, scales, err = nnKeepAspect(x, pol, nnListFloats(sizes), c.AttrInts("axes", nil)); err != nil {
				return err
			}
			return nnEmitResize(c, x, sizes, scales, nil, mode, coord, nearest)
		}
		if axes := c.AttrInts("axes", nil); axes != nil {
			if scales, sizes, roi, err = nnResizeAxes(axes, rank, scales, sizes, roi); err != nil {
				return err
			}
		}
		if sizes != nil {
			scales = nil
		}
	}
	return nnEmitResize(c, x, sizes, scales, roi, mode, coord, nearest)
}

// nnKeepAspect applies Resize's keep_aspect_ratio_policy (not_larger,
// not_smaller) to constant sizes: one scale for all the axes (default all
// dims), the smallest (not_larger) or largest (not_smaller) of
// sizes/input, the output round_half_up(scale * input) along them. It
// returns the sizes and scales for xserve.resize, which transforms
// coordinates by that scale.
func nnKeepAspect(x *fxgraph.Node, policy string, sizes []float64, axes []int64) (any, any, error) {
	d, ok := Meta(x).Shape.Static()
	if !ok || sizes == nil {
		return nil, nil, Unsupported("Resize keep_aspect_ratio_policy with a symbolic input %s or sizes computed at run time", Meta(x).Shape)
	}
	if policy != "not_larger" && policy != "not_smaller" {
		return nil, nil, fmt.Errorf("Resize keep_aspect_ratio_policy %q, want stretch, not_larger or not_smaller", policy)
	}
	if axes == nil {
		for i := range d {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) != len(sizes) {
		return nil, nil, fmt.Errorf("Resize sizes %v for axes %v", sizes, axes)
	}
	scale := math.NaN()
	norm := make([]int, len(axes))
	for j, a := range axes {
		ax, err := fxgraph.NormDim(a, len(d))
		if err != nil {
			return nil, nil, err
		}
		norm[j] = ax
		r := sizes[j] / float64(d[ax])
		if math.IsNaN(scale) || policy == "not_larger" && r < scale || policy == "not_smaller" && r > scale {
			scale = r
		}
	}
	outSizes, outScales := make([]any, len(d)), make([]any, len(d))
	for i, v := range d {
		outSizes[i], outScales[i] = v, 1.0
	}
	for _, ax := range norm {
		outSizes[ax] = int64(scale*float64(d[ax]) + 0.5)
		outScales[ax] = scale
	}
	return outSizes, outScales, nil
}

// nnResizeAxes expands Resize-18's per-axis scales/sizes/roi (constants)
// to every dim: other dims keep scale 1, their size and the roi [0, 1].
func nnResizeAxes(axes []int64, rank int, scales, sizes, roi any) (any, any, any, error) {
	for _, a := range []any{scales, sizes, roi} {
		if _, isNode := a.(*fxgraph.Node); isNode {
			return nil, nil, nil, Unsupported("Resize axes with scales/sizes/roi computed at run time")
		}
	}
	var s2, z2, r2 []any
	sc, sz, ro := nnListFloats(scales), nnListFloats(sizes), nnListFloats(roi)
	if scales != nil {
		s2 = make([]any, rank)
		for i := range s2 {
			s2[i] = 1.0
		}
	}
	if sizes != nil {
		z2 = make([]any, rank)
		for i := range z2 {
			z2[i] = int64(-1)
		}
	}
	if roi != nil {
		r2 = make([]any, 2*rank)
		for i := 0; i < rank; i++ {
			r2[i], r2[rank+i] = 0.0, 1.0
		}
	}
	for j, a := range axes {
		ax, err := fxgraph.NormDim(a, rank)
		if err != nil {
			return nil, nil, nil, err
		}
		if s2 != nil && j < len(sc) {
			s2[ax] = sc[j]
		}
		if z2 != nil && j < len(sz) {
			z2[ax] = int64(sz[j])
		}
		if r2 != nil && j+len(axes) < len(ro) {
			r2[ax], r2[rank+ax] = ro[j], ro[len(axes)+j]
		}
	}
	var s3, z3, r3 any
	if s2 != nil {
		s3 = s2
	}
	if z2 != nil {
		z3 = z2
	}
	if r2 != nil {
		r3 = r2
	}
	return s3, z3, r3, nil
}

// nnLegacyNearest is the nearest rounding of Upsample and Resize-10
// (asymmetric coordinates): floor when upsampling, as ONNX's reference
// repeats pixels; ceil when downsampling, as onnxruntime does.
func nnLegacyNearest(scales []float64) (string, error) {
	up, down := false, false
	for _, s := range scales {
		if s > 1 {
			up = true
		}
		if s < 1 {
			down = true
		}
	}
	if up && down {
		return "", Unsupported("nearest Upsample/Resize-10 that both up- and downsamples")
	}
	if down {
		return "ceil", nil
	}
	return "floor", nil
}

func nnEmitResize(c *Ctx, x *fxgraph.Node, sizes, scales, roi any, mode, coord, nearest string) error {
	if sizes == nil && scales == nil {
		return fmt.Errorf("Resize needs scales or sizes")
	}
	if coord != "tf_crop_and_resize" {
		roi = nil
	}
	antialias := c.AttrInt("antialias", 0) != 0 && mode != "nearest" // the spec's filter is for linear and cubic
	y, err := c.Emit(fxgraph.XserveResize, x, sizes, scales, roi, mode, coord, nearest,
		c.AttrFloat("cubic_coeff_a", -0.75), c.AttrInt("exclude_outside", 0) != 0, c.AttrFloat("extrapolation_value", 0), antialias)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnUpsample converts Upsample (scales attribute before opset 9, input
// after): asymmetric coordinates, nearest or (bi)linear.
func nnUpsample(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	var scales any
	if c.Opset < 9 {
		var sc []any
		for _, s := range c.AttrFloats("scales", nil) {
			sc = append(sc, float64(s))
		}
		if sc == nil {
			// Opset 1: height_scale / width_scale on NCHW.
			sc = []any{1.0, 1.0, c.AttrFloat("height_scale", 1), c.AttrFloat("width_scale", 1)}
		}
		scales = sc
	} else if scales, err = nnResizeInput(c, 1, false); err != nil {
		return err
	}
	mode := c.AttrString("mode", "nearest")
	if mode == "bilinear" {
		mode = "linear"
	}
	nearest, err := nnLegacyNearest(nnListFloats(scales))
	if err != nil {
		return err
	}
	return nnEmitResize(c, x, nil, scales, nil, mode, "asymmetric", nearest)
}

// nnLRN converts LRN: x / (bias + alpha/size * sum of squares over a
// channel window)^beta, the windowed sum being an avg_pool (with padding
// counted) over the channel dim of the squares viewed as [N, 1, C, rest].
func nnLRN(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xm := Meta(x)
	if xm.Rank() < 3 || !xm.DType.IsFloat() {
		return Unsupported("LRN of %s", xm)
	}
	size := c.AttrInt("size", 0)
	if size < 1 {
		return fmt.Errorf("LRN size %d", size)
	}
	alpha, beta, bias := c.AttrFloat("alpha", 1e-4), c.AttrFloat("beta", 0.75), c.AttrFloat("bias", 1)
	lo, hi := (size-1)/2, size-1-(size-1)/2
	sq, err := c.Emit(fxgraph.AtenMulTensor, x, x)
	if err != nil {
		return err
	}
	rest, ok := nnStaticProd(xm.Shape[2:])
	if !ok {
		return Unsupported("LRN with symbolic spatial dims %s", xm.Shape)
	}
	ch := xm.Shape[1]
	if !ch.IsStatic() {
		return Unsupported("LRN with a symbolic channel dim")
	}
	v, err := c.Emit(fxgraph.AtenView, sq, []any{int64(-1), int64(1), ch.Size, rest})
	if err != nil {
		return err
	}
	pad := lo
	if lo != hi {
		if v, err = c.Emit(fxgraph.AtenConstantPadNd, v, []any{int64(0), int64(0), lo, hi}, 0.0); err != nil {
			return err
		}
		pad = 0
	}
	avg, err := c.Emit(fxgraph.AtenAvgPool2d, v, []any{size, int64(1)}, []any{int64(1), int64(1)}, []any{pad, int64(0)}, false, true)
	if err != nil {
		return err
	}
	back, err := nnSizeList(c, x)
	if err != nil {
		return err
	}
	if avg, err = c.Emit(fxgraph.AtenView, avg, back); err != nil {
		return err
	}
	// alpha/size * sum == alpha * avg
	den, err := c.Emit(fxgraph.AtenMulScalar, avg, alpha)
	if err != nil {
		return err
	}
	if den, err = c.Emit(fxgraph.AtenAddScalar, den, bias); err != nil {
		return err
	}
	if den, err = c.Emit(fxgraph.AtenPowTensorScalar, den, beta); err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenDivTensor, x, den)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnMVN converts MeanVarianceNormalization as its ONNX function body:
// (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9).
func nnMVN(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xm := Meta(x)
	if !xm.DType.IsFloat() {
		return Unsupported("MeanVarianceNormalization of %s", xm.DType)
	}
	axes := c.AttrInts("axes", []int64{0, 2, 3})
	dims := ints(axes)
	mean, err := c.Emit(fxgraph.AtenMeanDim, x, dims, true)
	if err != nil {
		return err
	}
	sq, err := c.Emit(fxgraph.AtenMulTensor, x, x)
	if err != nil {
		return err
	}
	meanSq, err := c.Emit(fxgraph.AtenMeanDim, sq, dims, true)
	if err != nil {
		return err
	}
	sqMean, err := c.Emit(fxgraph.AtenMulTensor, mean, mean)
	if err != nil {
		return err
	}
	variance, err := c.Emit(fxgraph.AtenSubTensor, meanSq, sqMean)
	if err != nil {
		return err
	}
	std, err := c.Emit(fxgraph.AtenSqrt, variance)
	if err != nil {
		return err
	}
	if std, err = c.Emit(fxgraph.AtenAddScalar, std, 1e-9); err != nil {
		return err
	}
	xc, err := c.Emit(fxgraph.AtenSubTensor, x, mean)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenDivTensor, xc, std)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnEinsumOperand is an operand of Einsum and the subscript letter of each
// of its dims.
type nnEinsumOperand struct {
	v       *fxgraph.Node
	letters []rune
}

// nnEllipsisBase is where the letters standing for "..." dims start.
const nnEllipsisBase = rune(0x2460)

// nnParseSubscripts splits one Einsum term into letters, "..." becoming
// ellipsis letters for the trailing ones of the ell ellipsis dims (the
// operand's rank minus its explicit letters; all ell for the output, whose
// rank is given as -1).
func nnParseSubscripts(term string, rank, ell int) ([]rune, error) {
	pre, post, dots := strings.Cut(term, "...")
	out := []rune(pre)
	if dots {
		n := ell
		if rank >= 0 {
			n = rank - len([]rune(pre)) - len([]rune(post))
		}
		if n < 0 || n > ell {
			return nil, fmt.Errorf("Einsum term %q does not fit rank %d", term, rank)
		}
		for k := ell - n; k < ell; k++ {
			out = append(out, nnEllipsisBase+rune(k))
		}
		out = append(out, []rune(post)...)
	}
	for _, r := range out {
		if r < nnEllipsisBase && !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return nil, fmt.Errorf("Einsum term %q: bad subscript %q", term, r)
		}
	}
	if rank >= 0 && len(out) != rank {
		return nil, fmt.Errorf("Einsum term %q has %d subscripts for rank %d", term, len(out), rank)
	}
	return out, nil
}

func nnRuneIndex(l []rune, r rune) int {
	for i, x := range l {
		if x == r {
			return i
		}
	}
	return -1
}

// nnEinsum converts Einsum: diagonals (a repeated subscript) are taken by
// masking with an identity and summing, subscripts used by no other
// operand nor the output are summed out, operands are contracted pairwise
// with aten.bmm (batch, free and contracted dims permuted and flattened),
// and the result is permuted to the output subscripts. Dims must be static.
func nnEinsum(c *Ctx, n *Node) error {
	eq := strings.ReplaceAll(c.AttrString("equation", ""), " ", "")
	lhs, rhs, arrow := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	ins, err := c.Inputs()
	if err != nil {
		return err
	}
	ell, err := nnEinsumEllipsis(eq, terms, ins)
	if err != nil {
		return err
	}
	ops, size, count, err := nnEinsumOperands(eq, terms, ins, ell)
	if err != nil {
		return err
	}
	out, err := nnEinsumOutput(eq, rhs, arrow, ell, size, count)
	if err != nil {
		return err
	}
	// needed reports whether letter r is used after operand i (or by the output).
	needed := func(r rune, from int) bool {
		return nnRuneIndex(out, r) >= 0 || nnOtherHas(ops[from:], r)
	}
	for i, o := range ops {
		if err := nnEinsumDiagonals(c, o, size); err != nil {
			return err
		}
		if err := nnEinsumSumOut(c, o, func(r rune) bool { return needed(r, i+1) || nnOtherHas(ops[:i], r) }); err != nil {
			return err
		}
	}
	cur := ops[0]
	for i := 1; i < len(ops); i++ {
		if cur, err = nnEinsumContract(c, cur, ops[i], size, func(r rune) bool { return needed(r, i+1) }); err != nil {
			return err
		}
	}
	if err := nnEinsumSumOut(c, cur, func(r rune) bool { return nnRuneIndex(out, r) >= 0 }); err != nil {
		return err
	}
	y, err := nnEinsumPermute(c, eq, cur, out)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnEinsumEllipsis checks Einsum's inputs against its terms (one each, one
// dtype, static dims) and returns how many dims "..." stands for.
func nnEinsumEllipsis(eq string, terms []string, ins []*fxgraph.Node) (int, error) {
	if len(terms) != len(ins) || len(ins) == 0 {
		return 0, fmt.Errorf("Einsum %q has %d terms for %d inputs", eq, len(terms), len(ins))
	}
	dt := Meta(ins[0]).DType
	ell := 0
	for i, t := range terms {
		m := Meta(ins[i])
		if m.DType != dt {
			return 0, fmt.Errorf("Einsum inputs of different dtypes %s and %s", dt, m.DType)
		}
		if _, ok := m.Shape.Static(); !ok {
			return 0, Unsupported("Einsum with symbolic dims %s", m.Shape)
		}
		if strings.Contains(t, "...") {
			ell = max(ell, m.Rank()-len([]rune(strings.ReplaceAll(t, "...", ""))))
		}
	}
	return ell, nil
}

// nnEinsumOperands parses each term into its operand's subscripts and
// returns each subscript's size (broadcast across "..." dims) and how many
// operands use it.
func nnEinsumOperands(eq string, terms []string, ins []*fxgraph.Node, ell int) ([]*nnEinsumOperand, map[rune]int64, map[rune]int, error) {
	size := map[rune]int64{}
	count := map[rune]int{}
	var ops []*nnEinsumOperand
	for i, t := range terms {
		m := Meta(ins[i])
		letters, err := nnParseSubscripts(t, m.Rank(), ell)
		if err != nil {
			return nil, nil, nil, err
		}
		for j, r := range letters {
			d := m.Shape[j].Size
			if s, ok := size[r]; ok && s != d {
				if r < nnEllipsisBase || (s != 1 && d != 1) {
					return nil, nil, nil, fmt.Errorf("Einsum %q: subscript %q has sizes %d and %d", eq, r, s, d)
				}
				d = max(d, s)
			}
			size[r] = d
			count[r]++
		}
		ops = append(ops, &nnEinsumOperand{ins[i], letters})
	}
	return ops, size, count, nil
}

// nnEinsumOutput returns the output subscripts: rhs's, or without an arrow
// the "..." dims then the subscripts used once, in order.
func nnEinsumOutput(eq, rhs string, arrow bool, ell int, size map[rune]int64, count map[rune]int) ([]rune, error) {
	var out []rune
	if arrow {
		var err error
		if out, err = nnParseSubscripts(rhs, -1, ell); err != nil {
			return nil, err
		}
	} else {
		for k := 0; k < ell; k++ {
			out = append(out, nnEllipsisBase+rune(k))
		}
		var once []rune
		for r, n := range count {
			if n == 1 && r < nnEllipsisBase {
				once = append(once, r)
			}
		}
		nnSortRunes(once)
		out = append(out, once...)
	}
	for _, r := range out {
		if _, ok := size[r]; !ok {
			return nil, fmt.Errorf("Einsum %q: output subscript %q is not an input subscript", eq, r)
		}
	}
	return out, nil
}

// nnEinsumPermute permutes the result cur to the output subscripts.
func nnEinsumPermute(c *Ctx, eq string, cur *nnEinsumOperand, out []rune) (*fxgraph.Node, error) {
	perm := make([]any, len(out))
	identity := len(out) == len(cur.letters)
	for i, r := range out {
		j := nnRuneIndex(cur.letters, r)
		if j < 0 {
			return nil, fmt.Errorf("Einsum %q: output subscript %q lost", eq, r)
		}
		perm[i] = int64(j)
		identity = identity && i == j
	}
	if identity {
		return cur.v, nil
	}
	return c.Emit(fxgraph.AtenPermute, cur.v, perm)
}

func nnOtherHas(ops []*nnEinsumOperand, r rune) bool {
	for _, o := range ops {
		if nnRuneIndex(o.letters, r) >= 0 {
			return true
		}
	}
	return false
}

func nnSortRunes(v []rune) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// nnEinsumDiagonals takes the diagonal of every repeated subscript.
func nnEinsumDiagonals(c *Ctx, o *nnEinsumOperand, size map[rune]int64) error {
	for {
		i, j := -1, -1
		for a := range o.letters {
			for b := a + 1; b < len(o.letters); b++ {
				if i < 0 && o.letters[a] == o.letters[b] {
					i, j = a, b
				}
			}
		}
		if i < 0 {
			return nil
		}
		d := size[o.letters[i]]
		shape := make([]int64, len(o.letters))
		for k := range shape {
			shape[k] = 1
		}
		shape[i], shape[j] = d, d
		eye := tensor.New(Meta(o.v).DType, shape...)
		for k := int64(0); k < d; k++ {
			eye.SetFloat64(k*d+k, 1)
		}
		m, err := c.Emit(fxgraph.AtenMulTensor, o.v, c.Constant("einsum_eye", eye))
		if err != nil {
			return err
		}
		if o.v, err = c.Emit(fxgraph.AtenSumDimIntList, m, []any{int64(j)}, false); err != nil {
			return err
		}
		o.letters = append(append([]rune(nil), o.letters[:j]...), o.letters[j+1:]...)
	}
}

// nnEinsumSumOut sums the dims whose subscript keep rejects.
func nnEinsumSumOut(c *Ctx, o *nnEinsumOperand, keep func(rune) bool) error {
	var dims []any
	var rest []rune
	for i, r := range o.letters {
		if keep(r) {
			rest = append(rest, r)
		} else {
			dims = append(dims, int64(i))
		}
	}
	if len(dims) == 0 {
		return nil
	}
	v, err := c.Emit(fxgraph.AtenSumDimIntList, o.v, dims, false)
	if err != nil {
		return err
	}
	o.v, o.letters = v, rest
	return nil
}

// nnEinsumContract multiplies a and b over their shared subscripts with
// aten.bmm; shared subscripts that keep accepts stay as batch dims.
func nnEinsumContract(c *Ctx, a, b *nnEinsumOperand, size map[rune]int64, keep func(rune) bool) (*nnEinsumOperand, error) {
	var batch, contr, aOnly, bOnly []rune
	for _, r := range a.letters {
		switch {
		case nnRuneIndex(b.letters, r) < 0:
			aOnly = append(aOnly, r)
		case keep(r):
			batch = append(batch, r)
		default:
			contr = append(contr, r)
		}
	}
	for _, r := range b.letters {
		if nnRuneIndex(a.letters, r) < 0 {
			bOnly = append(bOnly, r)
		}
	}
	prod := func(l []rune) int64 {
		p := int64(1)
		for _, r := range l {
			p *= size[r]
		}
		return p
	}
	arrange := func(o *nnEinsumOperand, order []rune, flat []int64) (*fxgraph.Node, error) {
		v := o.v
		perm := make([]any, len(order))
		identity := true
		for i, r := range order {
			j := nnRuneIndex(o.letters, r)
			perm[i] = int64(j)
			identity = identity && i == j
		}
		var err error
		if !identity {
			if v, err = c.Emit(fxgraph.AtenPermute, v, perm); err != nil {
				return nil, err
			}
		}
		// Broadcast size-1 ellipsis dims.
		full := make([]any, len(order))
		expand := false
		for i, r := range order {
			full[i] = size[r]
			if Meta(v).Shape[i].Size != size[r] {
				expand = true
			}
		}
		if expand {
			if v, err = c.Emit(fxgraph.AtenExpand, v, full); err != nil {
				return nil, err
			}
		}
		return c.Emit(fxgraph.AtenView, v, ints(flat))
	}
	av, err := arrange(a, append(append(append([]rune(nil), batch...), aOnly...), contr...), []int64{prod(batch), prod(aOnly), prod(contr)})
	if err != nil {
		return nil, err
	}
	bv, err := arrange(b, append(append(append([]rune(nil), batch...), contr...), bOnly...), []int64{prod(batch), prod(contr), prod(bOnly)})
	if err != nil {
		return nil, err
	}
	r, err := c.Emit(fxgraph.AtenBmm, av, bv)
	if err != nil {
		return nil, err
	}
	letters := append(append(append([]rune(nil), batch...), aOnly...), bOnly...)
	dims := make([]any, len(letters))
	for i, l := range letters {
		dims[i] = size[l]
	}
	if r, err = c.Emit(fxgraph.AtenView, r, dims); err != nil {
		return nil, err
	}
	return &nnEinsumOperand{r, letters}, nil
}

// nnIsQuant reports whether dt is an 8-bit quantized integer type.
func nnIsQuant(dt tensor.DType) bool { return dt == tensor.Uint8 || dt == tensor.Int8 }

// nnZeroShift returns v - zp in int32. A 1-D zero point of more than one
// element applies along axis (of a rank-rank result), e.g. per output
// channel of a weight.
func nnZeroShift(c *Ctx, v, zp *fxgraph.Node, axis, rank int) (*fxgraph.Node, error) {
	if !nnIsQuant(Meta(v).DType) {
		return nil, Unsupported("quantized operator input of %s", Meta(v).DType)
	}
	v32, err := nnCast(c, v, tensor.Int32)
	if err != nil || zp == nil {
		return v32, err
	}
	z32, err := nnCast(c, zp, tensor.Int32)
	if err != nil {
		return nil, err
	}
	if zm := Meta(zp); zm.Rank() == 1 && (!zm.Shape[0].IsStatic() || zm.Shape[0].Size != 1) {
		if z32, err = viewAlong(c, z32, rank, axis); err != nil {
			return nil, err
		}
	} else if zm.Rank() > 1 {
		return nil, Unsupported("zero point of shape %s", zm.Shape)
	}
	return c.Emit(fxgraph.AtenSubTensor, v32, z32)
}

// nnConvInteger converts ConvInteger: an int32 convolution of the
// zero-point-shifted inputs (padding then adds the zero point, as ONNX
// specifies).
func nnConvInteger(c *Ctx, n *Node) error {
	acc, err := nnQuantConv(c, 0, 2, 1, 3)
	if err != nil {
		return err
	}
	c.SetOutput(0, acc)
	return nil
}

// nnQuantConv is the int32 convolution of input xi (zero point xz) with
// weight wi (zero point wz, per output channel or scalar).
func nnQuantConv(c *Ctx, xi, xz, wi, wz int) (*fxgraph.Node, error) {
	x, err := c.Input(xi)
	if err != nil {
		return nil, err
	}
	w, err := c.Input(wi)
	if err != nil {
		return nil, err
	}
	xzp, err := c.OptInput(xz)
	if err != nil {
		return nil, err
	}
	wzp, err := c.OptInput(wz)
	if err != nil {
		return nil, err
	}
	rank := Meta(w).Rank()
	if rank < 3 || rank > 5 || Meta(x).Rank() != rank {
		return nil, Unsupported("quantized convolution of %s with %s", Meta(x), Meta(w))
	}
	if xzp != nil && Meta(xzp).Rank() > 0 && tensor.NumElements(nnStaticDims(Meta(xzp))) != 1 {
		return nil, Unsupported("per-channel input zero point %s", Meta(xzp))
	}
	xs, err := nnZeroShift(c, x, xzp, 1, rank)
	if err != nil {
		return nil, err
	}
	ws, err := nnZeroShift(c, w, wzp, 0, rank)
	if err != nil {
		return nil, err
	}
	return nnConvCore(c, xs, ws, nil, rank-2)
}

func nnStaticDims(m fxgraph.TensorMeta) []int64 {
	d, ok := m.Shape.Static()
	if !ok {
		return []int64{-1}
	}
	return d
}

// nnMatMulInteger converts MatMulInteger: an int32 matmul of the
// zero-point-shifted inputs (A's zero point per row, B's per column).
func nnMatMulInteger(c *Ctx, n *Node) error {
	acc, err := nnQuantMatMul(c, 0, 2, 1, 3)
	if err != nil {
		return err
	}
	c.SetOutput(0, acc)
	return nil
}

func nnQuantMatMul(c *Ctx, ai, az, bi, bz int) (*fxgraph.Node, error) {
	a, err := c.Input(ai)
	if err != nil {
		return nil, err
	}
	b, err := c.Input(bi)
	if err != nil {
		return nil, err
	}
	azp, err := c.OptInput(az)
	if err != nil {
		return nil, err
	}
	bzp, err := c.OptInput(bz)
	if err != nil {
		return nil, err
	}
	ra, rb := Meta(a).Rank(), Meta(b).Rank()
	if ra < 2 || rb < 2 {
		return nil, Unsupported("quantized matmul of %s and %s", Meta(a), Meta(b))
	}
	as, err := nnZeroShift(c, a, azp, ra-2, ra)
	if err != nil {
		return nil, err
	}
	bs, err := nnZeroShift(c, b, bzp, rb-1, rb)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenMatmul, as, bs)
}

// nnQLinear converts QLinearConv / QLinearMatMul: the int32 accumulation
// (plus QLinearConv's int32 bias) is scaled by a_scale*b_scale/y_scale in
// float32, rounded half to even, shifted by y_zero_point and saturated to
// the output type.
func nnQLinear(conv bool) Converter {
	return func(c *Ctx, n *Node) error {
		if conv {
			if done, err := qLinearConvFused(c); done || err != nil {
				return err
			}
		}
		acc, err := nnQLinearAcc(c, conv)
		if err != nil {
			return err
		}
		scale, err := nnQLinearScale(c, n, conv, Meta(acc).Rank())
		if err != nil {
			return err
		}
		accf, err := nnCast(c, acc, tensor.Float32)
		if err != nil {
			return err
		}
		y, err := c.Emit(fxgraph.AtenMulTensor, accf, scale)
		if err != nil {
			return err
		}
		if y, err = c.Emit(fxgraph.AtenRound, y); err != nil {
			return err
		}
		if y, err = nnQLinearRequantize(c, n, y); err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// nnQLinearAcc is the int32 accumulation of QLinearConv / QLinearMatMul,
// plus QLinearConv's int32 bias.
func nnQLinearAcc(c *Ctx, conv bool) (*fxgraph.Node, error) {
	if !conv {
		return nnQuantMatMul(c, 0, 2, 3, 5)
	}
	acc, err := nnQuantConv(c, 0, 2, 3, 5)
	if err != nil || !c.HasInput(8) {
		return acc, err
	}
	b, err := c.Input(8)
	if err != nil {
		return nil, err
	}
	if b, err = viewAlong(c, b, Meta(acc).Rank(), 1); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenAddTensor, acc, b)
}

// nnQLinearScale is a_scale*b_scale/y_scale in float32, b_scale per output
// channel (conv) or column (matmul) when it is a vector; rank is the
// accumulation's.
func nnQLinearScale(c *Ctx, n *Node, conv bool, rank int) (*fxgraph.Node, error) {
	var sc [3]*fxgraph.Node
	var err error
	for j, i := range []int{1, 4, 6} {
		if sc[j], err = c.Input(i); err != nil {
			return nil, err
		}
		if sc[j], err = nnCast(c, sc[j], tensor.Float32); err != nil {
			return nil, err
		}
		if j != 1 && tensor.NumElements(nnStaticDims(Meta(sc[j]))) != 1 {
			return nil, Unsupported("%s with a per-axis scale %s for input %d", n.OpType, Meta(sc[j]), i)
		}
	}
	// The second operand's scale may be per output channel (conv) or per
	// column (matmul).
	if m := Meta(sc[1]); m.Rank() == 1 && (!m.Shape[0].IsStatic() || m.Shape[0].Size != 1) {
		axis := rank - 1
		if conv {
			axis = 1
		}
		if sc[1], err = viewAlong(c, sc[1], rank, axis); err != nil {
			return nil, err
		}
	}
	scale, err := c.Emit(fxgraph.AtenMulTensor, sc[0], sc[1])
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenDivTensor, scale, sc[2])
}

// nnQLinearRequantize shifts the rounded y by y_zero_point (input 7) and
// saturates it to the output type (uint8 without a zero point).
func nnQLinearRequantize(c *Ctx, n *Node, y *fxgraph.Node) (*fxgraph.Node, error) {
	var ydt tensor.DType = tensor.Uint8
	if c.HasInput(7) {
		yz, err := c.Input(7)
		if err != nil {
			return nil, err
		}
		ydt = Meta(yz).DType
		yzf, err := nnCast(c, yz, tensor.Float32)
		if err != nil {
			return nil, err
		}
		if y, err = c.Emit(fxgraph.AtenAddTensor, y, yzf); err != nil {
			return nil, err
		}
	}
	if !nnIsQuant(ydt) {
		return nil, Unsupported("%s output of %s", n.OpType, ydt)
	}
	lo, hi := 0.0, 255.0
	if ydt == tensor.Int8 {
		lo, hi = -128, 127
	}
	y, err := c.Emit(fxgraph.AtenClamp, y, lo, hi)
	if err != nil {
		return nil, err
	}
	return nnCast(c, y, ydt)
}

// nnMaxUnpool converts MaxUnpool: the values scattered at their (whole
// tensor, flattened) indices into zeros of the output shape, which is
// output_shape or (in-1)*stride + kernel - pads.
func nnMaxUnpool(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	xm := Meta(x)
	spatial := xm.Rank() - 2
	if spatial < 1 {
		return fmt.Errorf("MaxUnpool of %s", xm)
	}
	k, err := nnKernel(c, nil, spatial)
	if err != nil {
		return err
	}
	s, err := nnSpatialAttr(c, "strides", spatial, 1)
	if err != nil {
		return err
	}
	pads := c.AttrInts("pads", make([]int64, 2*spatial))
	if len(pads) != 2*spatial {
		return fmt.Errorf("pads %v for %d spatial dims", pads, spatial)
	}
	// Indices address the default output shape; a given output_shape
	// extends it with zeros at the end of each spatial dim.
	size, err := nnSizeList(c, x)
	if err != nil {
		return err
	}
	for j := 0; j < spatial; j++ {
		d := xm.Shape[2+j]
		if !d.IsStatic() {
			return Unsupported("MaxUnpool with symbolic spatial dim %s", d)
		}
		size[2+j] = (d.Size-1)*s[j] + k[j] - pads[j] - pads[spatial+j]
	}
	var extra []any
	if c.HasInput(2) {
		os, err := c.ConstInts(2)
		if err != nil {
			return err
		}
		if len(os) != xm.Rank() {
			return fmt.Errorf("MaxUnpool output_shape %v for rank %d", os, xm.Rank())
		}
		for j := spatial - 1; j >= 0; j-- {
			e := os[2+j] - size[2+j].(int64)
			if e < 0 {
				return Unsupported("MaxUnpool output_shape %v smaller than the unpooled size", os)
			}
			extra = append(extra, int64(0), e)
		}
	}
	zeros, err := c.EmitKw(fxgraph.AtenFull, []any{size, 0.0}, map[string]any{"dtype": xm.DType})
	if err != nil {
		return err
	}
	flat := []any{int64(-1)}
	zf, err := c.Emit(fxgraph.AtenView, zeros, flat)
	if err != nil {
		return err
	}
	xf, err := c.Emit(fxgraph.AtenView, x, flat)
	if err != nil {
		return err
	}
	ixf, err := c.Emit(fxgraph.AtenView, idx, flat)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenScatterSrc, zf, int64(0), ixf, xf)
	if err != nil {
		return err
	}
	if y, err = c.Emit(fxgraph.AtenView, y, size); err != nil {
		return err
	}
	if extra != nil {
		if y, err = c.Emit(fxgraph.AtenConstantPadNd, y, extra, 0.0); err != nil {
			return err
		}
	}
	c.SetOutput(0, y)
	return nil
}

// nnGridSample converts GridSample (4-D input) to aten.grid_sampler_2d.
func nnGridSample(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	grid, err := c.Input(1)
	if err != nil {
		return err
	}
	if r := Meta(x).Rank(); r != 4 && r != 5 {
		return Unsupported("GridSample of rank %d (4-D or 5-D)", r)
	}
	// Opset 20 renamed bilinear/bicubic to linear/cubic.
	modes := map[string]int64{"bilinear": 0, "nearest": 1, "bicubic": 2}
	def := "bilinear"
	if c.Opset >= 20 {
		modes = map[string]int64{"linear": 0, "nearest": 1, "cubic": 2}
		def = "linear"
	}
	mode, ok := modes[c.AttrString("mode", def)]
	if !ok {
		return Unsupported("GridSample mode %q at opset %d", c.AttrString("mode", def), c.Opset)
	}
	pads := map[string]int64{"zeros": 0, "border": 1, "reflection": 2}
	pad, ok := pads[c.AttrString("padding_mode", "zeros")]
	if !ok {
		return Unsupported("GridSample padding_mode %q", c.AttrString("padding_mode", "zeros"))
	}
	if Meta(grid).DType != Meta(x).DType {
		if grid, err = nnCast(c, grid, Meta(x).DType); err != nil {
			return err
		}
	}
	var y *fxgraph.Node
	if Meta(x).Rank() == 5 {
		y, err = gridSample3D(c, x, grid, mode, pad, c.AttrInt("align_corners", 0) != 0)
	} else {
		y, err = c.Emit(fxgraph.AtenGridSampler2d, x, grid, mode, pad, c.AttrInt("align_corners", 0) != 0)
	}
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnRoiAlign converts RoiAlign (average mode with a fixed sampling_ratio)
// to xserve.roi_align.
func nnRoiAlign(c *Ctx, n *Node) error {
	var in [3]*fxgraph.Node
	for i := range in {
		v, err := c.Input(i)
		if err != nil {
			return err
		}
		in[i] = v
	}
	if m := c.AttrString("mode", "avg"); m != "avg" {
		return Unsupported("RoiAlign mode %q", m)
	}
	sr := c.AttrInt("sampling_ratio", 0)
	if sr <= 0 {
		return Unsupported("RoiAlign with adaptive sampling_ratio (samples per bin depend on roi sizes)")
	}
	halfPixel := false
	if c.Opset >= 16 {
		switch m := c.AttrString("coordinate_transformation_mode", "half_pixel"); m {
		case "half_pixel":
			halfPixel = true
		case "output_half_pixel":
		default:
			return Unsupported("RoiAlign coordinate_transformation_mode %q", m)
		}
	}
	rois := in[1]
	if Meta(rois).DType != Meta(in[0]).DType {
		var err error
		if rois, err = nnCast(c, rois, Meta(in[0]).DType); err != nil {
			return err
		}
	}
	y, err := c.Emit(fxgraph.XserveRoIAlign, in[0], rois, in[2], c.AttrInt("output_height", 1), c.AttrInt("output_width", 1), sr,
		c.AttrFloat("spatial_scale", 1), halfPixel)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}
