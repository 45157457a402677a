package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerQuant registers the default-domain (de)quantization operators.
// ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul are in ops_nn.go.
func registerQuant(cs converters) {
	cs.register("", "QuantizeLinear", 10, qQuantizeLinear)
	cs.register("", "DequantizeLinear", 10, qDequantizeLinear)
	cs.register("", "DynamicQuantizeLinear", 11, qDynamicQuantizeLinear)
}

// qRange returns the saturation range of integer quantized type dt.
func qRange(dt tensor.DType) (lo, hi float64, ok bool) {
	switch dt {
	case tensor.Int8:
		return -128, 127, true
	case tensor.Uint8:
		return 0, 255, true
	case tensor.Int16:
		return -32768, 32767, true
	case tensor.Uint16:
		return 0, 65535, true
	case tensor.Int4:
		return -8, 7, true
	case tensor.Uint4:
		return 0, 15, true
	}
	return 0, 0, false
}

// qOnnxDType maps an ONNX TensorProto data type number (an output_dtype
// attribute) to a numeric DType.
func qOnnxDType(code int64) (tensor.DType, bool) {
	dt, err := dtypeOf(int32(code))
	return dt, err == nil && dt != tensor.String
}

// qBroadcast shapes a scale or zero point p so that it broadcasts against
// x: a single value stays as it is, a 1-D one applies along axis, and one
// of x's rank (blocked quantization) repeats each value block times along
// axis.
func qBroadcast(c *Ctx, p, x *fxgraph.Node, axis, block int64) (*fxgraph.Node, error) {
	pm, xm := Meta(p), Meta(x)
	r := xm.Rank()
	if pm.Rank() == 0 {
		return p, nil
	}
	if r == 1 && block <= 0 {
		axis = 0 // ONNX Runtime applies a 1-D parameter of a 1-D input elementwise, whatever axis says
	}
	ax, err := fxgraph.NormDim(axis, max(r, 1))
	if err != nil {
		return nil, fmt.Errorf("axis %d: %w", axis, err)
	}
	if block <= 0 {
		if pm.Rank() != 1 {
			return nil, fmt.Errorf("scale or zero point of shape %s without block_size, want a scalar or 1-D", pm.Shape)
		}
		if pm.Shape[0].IsStatic() && pm.Shape[0].Size == 1 {
			return c.Emit(fxgraph.AtenView, p, []any{})
		}
		return viewAlong(c, p, r, ax)
	}
	pd, pok := pm.Shape.Static()
	xd, xok := xm.Shape.Static()
	if !pok || !xok || len(pd) != r {
		return nil, Unsupported("blocked quantization parameter %s for input %s (static shapes of equal rank only)", pm, xm)
	}
	if (xd[ax]+block-1)/block != pd[ax] {
		return nil, fmt.Errorf("blocked parameter %v: axis %d has %d blocks, input %v needs %d of size %d", pd, ax, pd[ax], xd, (xd[ax]+block-1)/block, block)
	}
	u, err := c.Emit(fxgraph.AtenUnsqueeze, p, int64(ax+1))
	if err != nil {
		return nil, err
	}
	var exp, merged []any
	for i, d := range pd {
		exp = append(exp, d)
		if i == ax {
			exp = append(exp, block)
			merged = append(merged, d*block)
			continue
		}
		merged = append(merged, d)
	}
	if u, err = c.Emit(fxgraph.AtenExpand, u, exp); err != nil {
		return nil, err
	}
	if u, err = c.Emit(fxgraph.AtenReshape, u, merged); err != nil {
		return nil, err
	}
	if pd[ax]*block != xd[ax] {
		return c.Emit(fxgraph.AtenSliceTensor, u, int64(ax), int64(0), xd[ax], int64(1))
	}
	return u, nil
}

// quantize computes saturate(round_half_even(x / scale) + zp) in float32
// and casts it to integer type dt; for the 8- and 4-bit float types, x /
// scale + zp converted as Cast converts (saturating unless the node's
// saturate attribute is 0). scale and zp (nil for zero) already broadcast.
func quantize(c *Ctx, x, scale, zp *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	lo, hi, ok := qRange(dt)
	if !ok && !dt.IsMinifloat() {
		return nil, Unsupported("quantization to %s", dt)
	}
	xf, err := nnCast(c, x, tensor.Float32)
	if err != nil {
		return nil, err
	}
	sf, err := nnCast(c, scale, tensor.Float32)
	if err != nil {
		return nil, err
	}
	y, err := ieeeDivide(c, xf, sf)
	if err != nil {
		return nil, err
	}
	if ok {
		if y, err = c.Emit(fxgraph.AtenRound, y); err != nil {
			return nil, err
		}
	}
	if zp != nil {
		zf, err := nnCast(c, zp, tensor.Float32)
		if err != nil {
			return nil, err
		}
		if y, err = c.Emit(fxgraph.AtenAddTensor, y, zf); err != nil {
			return nil, err
		}
	}
	if !ok {
		return ewCast(c, y, dt)
	}
	if y, err = c.Emit(fxgraph.AtenClamp, y, lo, hi); err != nil {
		return nil, err
	}
	return nnCast(c, y, dt)
}

// dequantize computes (x - zp) * scale: the difference in int32 (in
// float32 for the 8- and 4-bit float types), the product in float32, cast
// to dt. scale and zp (nil for zero) already broadcast.
func dequantize(c *Ctx, x, scale, zp *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	xdt := Meta(x).DType
	diff := tensor.Int32
	switch _, _, ok := qRange(xdt); {
	case xdt.IsMinifloat():
		diff = tensor.Float32
	case !ok && xdt != tensor.Int32:
		return nil, Unsupported("dequantization of %s", xdt)
	}
	v, err := nnCast(c, x, diff)
	if err != nil {
		return nil, err
	}
	if zp != nil {
		z, err := nnCast(c, zp, diff)
		if err != nil {
			return nil, err
		}
		if v, err = c.Emit(fxgraph.AtenSubTensor, v, z); err != nil {
			return nil, err
		}
	}
	if v, err = nnCast(c, v, tensor.Float32); err != nil {
		return nil, err
	}
	sf, err := nnCast(c, scale, tensor.Float32)
	if err != nil {
		return nil, err
	}
	y, err := c.Emit(fxgraph.AtenMulTensor, v, sf)
	if err != nil {
		return nil, err
	}
	return nnCast(c, y, dt)
}

// qParams reads the scale (input si) and optional zero point (input si+1)
// of a (de)quantization of x, shaped to broadcast against it per the
// node's axis and block_size.
func qParams(c *Ctx, x *fxgraph.Node, si int) (scale, zp *fxgraph.Node, err error) {
	if scale, err = c.Input(si); err != nil {
		return nil, nil, err
	}
	if zp, err = c.OptInput(si + 1); err != nil {
		return nil, nil, err
	}
	axis, block := int64(1), int64(0)
	if c.Opset >= 13 {
		axis = c.AttrInt("axis", 1)
	}
	if c.Opset >= 21 {
		block = c.AttrInt("block_size", 0)
	}
	if c.Opset < 13 && !qSingle(Meta(scale)) {
		return nil, nil, fmt.Errorf("scale of shape %s at opset %d, which has no per-axis quantization", Meta(scale).Shape, c.Opset)
	}
	if scale, err = qBroadcast(c, scale, x, axis, block); err != nil {
		return nil, nil, err
	}
	if zp != nil {
		if zp, err = qBroadcast(c, zp, x, axis, block); err != nil {
			return nil, nil, err
		}
	}
	return scale, zp, nil
}

// qQuantizeLinear converts QuantizeLinear: per tensor, per axis (opset 13)
// or per block (opset 21), to the zero point's type, output_dtype or uint8:
// 8-, 16- and 4-bit integers (opset 21) or the float8 (opset 19) and float4
// (opset 23) types.
func qQuantizeLinear(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, zp, err := qParams(c, x, 1)
	if err != nil {
		return err
	}
	dt := tensor.Uint8
	switch code := c.AttrInt("output_dtype", 0); {
	case zp != nil:
		dt = Meta(zp).DType
	case code != 0:
		d, ok := qOnnxDType(code)
		if !ok {
			return Unsupported("QuantizeLinear output_dtype %d", code)
		}
		dt = d
	}
	y, err := quantize(c, x, scale, zp, dt)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qDequantizeLinear converts DequantizeLinear: the result has the scale's
// type (or output_dtype, opset 23).
func qDequantizeLinear(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, zp, err := qParams(c, x, 1)
	if err != nil {
		return err
	}
	dt := Meta(scale).DType
	if code := c.AttrInt("output_dtype", 0); code != 0 {
		d, ok := qOnnxDType(code)
		if !ok {
			return Unsupported("DequantizeLinear output_dtype %d", code)
		}
		dt = d
	}
	y, err := dequantize(c, x, scale, zp, dt)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// dynamicQuantParams returns the uint8 (or int8 when signed, symmetric)
// scale and zero point ONNX Runtime picks for x: the range [min(x, 0),
// max(x, 0)] mapped onto [0, 255]. The zero point is float32 holding an
// integer.
func dynamicQuantParams(c *Ctx, x *fxgraph.Node) (scale, zp *fxgraph.Node, err error) {
	xf, err := nnCast(c, x, tensor.Float32)
	if err != nil {
		return nil, nil, err
	}
	zero := c.ScalarConst(tensor.Float32, 0)
	mn, err := c.Emit(fxgraph.AtenMin, xf)
	if err != nil {
		return nil, nil, err
	}
	if mn, err = c.Emit(fxgraph.AtenMinimum, mn, zero); err != nil {
		return nil, nil, err
	}
	mx, err := c.Emit(fxgraph.AtenMax, xf)
	if err != nil {
		return nil, nil, err
	}
	if mx, err = c.Emit(fxgraph.AtenMaximum, mx, zero); err != nil {
		return nil, nil, err
	}
	return rangeQuantParams(c, mn, mx)
}

// rangeQuantParams is the uint8 scale and (float32) zero point of the
// range [mn, mx], which includes 0: scale (mx - mn) / 255 (1 for an empty
// range) and zero point round_half_even(saturate(-mn / scale)).
func rangeQuantParams(c *Ctx, mn, mx *fxgraph.Node) (scale, zp *fxgraph.Node, err error) {
	rng, err := c.Emit(fxgraph.AtenSubTensor, mx, mn)
	if err != nil {
		return nil, nil, err
	}
	if scale, err = ieeeDivide(c, rng, c.ScalarConst(tensor.Float32, 255)); err != nil {
		return nil, nil, err
	}
	// An all-zero x gets scale 1, as in ONNX Runtime.
	isZero, err := c.Emit(fxgraph.AtenEqScalar, rng, 0.0)
	if err != nil {
		return nil, nil, err
	}
	if scale, err = c.Emit(fxgraph.AtenWhereScalarSelf, isZero, 1.0, scale); err != nil {
		return nil, nil, err
	}
	// zero point = round_half_even(saturate(-min / scale)).
	z, err := c.Emit(fxgraph.AtenNeg, mn)
	if err != nil {
		return nil, nil, err
	}
	if z, err = ieeeDivide(c, z, scale); err != nil {
		return nil, nil, err
	}
	if z, err = c.Emit(fxgraph.AtenClamp, z, 0.0, 255.0); err != nil {
		return nil, nil, err
	}
	if zp, err = c.Emit(fxgraph.AtenRound, z); err != nil {
		return nil, nil, err
	}
	return scale, zp, nil
}

// ieeeDivide divides the float32 a by b as IEEE division does (what ONNX
// Runtime's quantization does): in float64, rounded once to float32. XLA
// CPU compiles a float32 divide as a multiplication by the reciprocal,
// which differs in the last bit, and a quantized value one step off.
func ieeeDivide(c *Ctx, a, b *fxgraph.Node) (*fxgraph.Node, error) {
	a64, err := nnCast(c, a, tensor.Float64)
	if err != nil {
		return nil, err
	}
	b64, err := nnCast(c, b, tensor.Float64)
	if err != nil {
		return nil, err
	}
	q, err := c.Emit(fxgraph.AtenDivTensor, a64, b64)
	if err != nil {
		return nil, err
	}
	return nnCast(c, q, tensor.Float32)
}

// qDynamicQuantizeLinear converts DynamicQuantizeLinear: uint8 data, its
// float32 scale and uint8 zero point.
func qDynamicQuantizeLinear(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, zp, err := dynamicQuantParams(c, x)
	if err != nil {
		return err
	}
	y, err := quantize(c, x, scale, zp, tensor.Uint8)
	if err != nil {
		return err
	}
	zp8, err := nnCast(c, zp, tensor.Uint8)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	c.SetOutput(1, scale)
	c.SetOutput(2, zp8)
	return nil
}

// qSingle reports whether m holds a single value (a scalar or a 1-element
// vector).
func qSingle(m fxgraph.TensorMeta) bool {
	if m.Rank() == 0 {
		return true
	}
	d, ok := m.Shape.Static()
	return ok && tensor.NumElements(d) == 1
}

// msDomain is ONNX Runtime's contrib operator domain.
const msDomain = "com.microsoft"

// registerQuantContrib registers ONNX Runtime's quantized contrib
// operators (what its quantizer writes in QOperator format).
func registerQuantContrib(cs converters) {
	cs.register(msDomain, "QuantizeLinear", 1, qQuantizeLinear)
	cs.register(msDomain, "DequantizeLinear", 1, qDequantizeLinear)
	cs.register(msDomain, "QLinearAdd", 1, qBinary(false))
	cs.register(msDomain, "QLinearMul", 1, qBinary(true))
	cs.register(msDomain, "QLinearSigmoid", 1, qUnary("Sigmoid"))
	cs.register(msDomain, "QLinearLeakyRelu", 1, qUnary("LeakyRelu"))
	cs.register(msDomain, "QLinearAveragePool", 1, qAveragePool)
	cs.register(msDomain, "QLinearGlobalAveragePool", 1, qGlobalAveragePool)
	cs.register(msDomain, "QLinearConcat", 1, qConcat)
	cs.register(msDomain, "QGemm", 1, qGemm)
	cs.register(msDomain, "DynamicQuantizeMatMul", 1, qDynamicQuantizeMatMul)
	cs.register(msDomain, "MatMulIntegerToFloat", 1, qMatMulIntegerToFloat)
	cs.register(msDomain, "DynamicQuantizeLSTM", 1, qDynamicQuantizeLSTM)
	cs.register(msDomain, "MatMulNBits", 1, msMatMulNBits)
}

// qDequant dequantizes input xi with the per-tensor scale si and optional
// zero point zi to float32.
func qDequant(c *Ctx, xi, si, zi int) (*fxgraph.Node, error) {
	x, err := c.Input(xi)
	if err != nil {
		return nil, err
	}
	s, err := c.Input(si)
	if err != nil {
		return nil, err
	}
	z, err := c.OptInput(zi)
	if err != nil {
		return nil, err
	}
	if !qSingle(Meta(s)) || (z != nil && !qSingle(Meta(z))) {
		return nil, Unsupported("per-axis scale %s for input %d", Meta(s), xi)
	}
	return dequantize(c, x, s, z, tensor.Float32)
}

// qOutDType is the quantized output type: the output zero point's (input
// zi), or else input xi's.
func qOutDType(c *Ctx, zi, xi int) (tensor.DType, error) {
	ref := xi
	if c.HasInput(zi) {
		ref = zi
	}
	v, err := c.Input(ref)
	if err != nil {
		return tensor.Invalid, err
	}
	return Meta(v).DType, nil
}

// qRequant quantizes float32 y with the scale si and optional zero point
// zi to dt.
func qRequant(c *Ctx, y *fxgraph.Node, si, zi int, dt tensor.DType) (*fxgraph.Node, error) {
	s, err := c.Input(si)
	if err != nil {
		return nil, err
	}
	z, err := c.OptInput(zi)
	if err != nil {
		return nil, err
	}
	if !qSingle(Meta(s)) {
		return nil, Unsupported("per-axis output scale %s", Meta(s))
	}
	return quantize(c, y, s, z, dt)
}

// qBinaryInputs reads QLinearAdd's and QLinearMul's eight inputs, the zero
// points optional, the scales and zero points per tensor and cast to float.
func qBinaryInputs(c *Ctx, n *Node) (v [8]*fxgraph.Node, err error) {
	for i := range v {
		if i == 2 || i == 5 || i == 7 {
			if v[i], err = c.OptInput(i); err != nil {
				return v, err
			}
		} else if v[i], err = c.Input(i); err != nil {
			return v, err
		}
		if v[i] == nil || i == 0 || i == 3 {
			continue
		}
		if !qSingle(Meta(v[i])) {
			return v, Unsupported("%s with per-axis parameter %s (input %d)", n.OpType, Meta(v[i]), i)
		}
		if v[i], err = nnCast(c, v[i], tensor.Float32); err != nil {
			return v, err
		}
	}
	return v, nil
}

// qBinaryValue is QLinearAdd's or QLinearMul's result before rounding, in
// units of the output scale: (a-za)*(b-zb)*(sa*sb/sc) or
// (a-za)*(sa/sc) + (b-zb)*(sb/sc).
func qBinaryValue(c *Ctx, v [8]*fxgraph.Node, mul bool) (*fxgraph.Node, error) {
	shifted := func(x, z *fxgraph.Node) (*fxgraph.Node, error) {
		xf, err := nnCast(c, x, tensor.Float32)
		if err != nil || z == nil {
			return xf, err
		}
		return c.Emit(fxgraph.AtenSubTensor, xf, z)
	}
	a, err := shifted(v[0], v[2])
	if err != nil {
		return nil, err
	}
	b, err := shifted(v[3], v[5])
	if err != nil {
		return nil, err
	}
	if mul {
		ratio, err := c.Emit(fxgraph.AtenMulTensor, v[1], v[4])
		if err != nil {
			return nil, err
		}
		if ratio, err = c.Emit(fxgraph.AtenDivTensor, ratio, v[6]); err != nil {
			return nil, err
		}
		y, err := c.Emit(fxgraph.AtenMulTensor, a, b)
		if err != nil {
			return nil, err
		}
		return c.Emit(fxgraph.AtenMulTensor, y, ratio)
	}
	ra, err := c.Emit(fxgraph.AtenDivTensor, v[1], v[6])
	if err != nil {
		return nil, err
	}
	rb, err := c.Emit(fxgraph.AtenDivTensor, v[4], v[6])
	if err != nil {
		return nil, err
	}
	if a, err = c.Emit(fxgraph.AtenMulTensor, a, ra); err != nil {
		return nil, err
	}
	if b, err = c.Emit(fxgraph.AtenMulTensor, b, rb); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenAddTensor, a, b)
}

// qBinary converts QLinearAdd (A, A_scale, A_zp, B, B_scale, B_zp,
// C_scale, C_zp) and QLinearMul the way ONNX Runtime computes them: with
// the scale ratios folded, rounded half to even once.
func qBinary(mul bool) Converter {
	return func(c *Ctx, n *Node) error {
		dt, err := qOutDType(c, 7, 0)
		if err != nil {
			return err
		}
		v, err := qBinaryInputs(c, n)
		if err != nil {
			return err
		}
		y, err := qBinaryValue(c, v, mul)
		if err != nil {
			return err
		}
		if y, err = c.Emit(fxgraph.AtenRound, y); err != nil {
			return err
		}
		if v[7] != nil {
			if y, err = c.Emit(fxgraph.AtenAddTensor, y, v[7]); err != nil {
				return err
			}
		}
		lo, hi, ok := qRange(dt)
		if !ok {
			return Unsupported("%s output of %s", n.OpType, dt)
		}
		if y, err = c.Emit(fxgraph.AtenClamp, y, lo, hi); err != nil {
			return err
		}
		if y, err = nnCast(c, y, dt); err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// qUnary converts QLinearSigmoid / QLinearLeakyRelu (X, X_scale, X_zp,
// Y_scale, Y_zp): dequantize, apply op in float32, quantize (ONNX Runtime
// tabulates exactly this for each of the 256 inputs).
func qUnary(op string) Converter {
	return func(c *Ctx, n *Node) error {
		dt, err := qOutDType(c, 4, 0)
		if err != nil {
			return err
		}
		x, err := qDequant(c, 0, 1, 2)
		if err != nil {
			return err
		}
		y, err := c.Call1(op, 13, []*fxgraph.Node{x}, c.passAttrs("alpha")...)
		if err != nil {
			return err
		}
		if y, err = qRequant(c, y, 3, 4, dt); err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
}

// qChannelsFirst moves the channels of an NHWC tensor (channels_last=1)
// to axis 1, or back when back is set.
func qChannelsFirst(c *Ctx, x *fxgraph.Node, back bool) (*fxgraph.Node, error) {
	r := int64(Meta(x).Rank())
	perm := []int64{0}
	if back {
		for i := int64(2); i < r; i++ {
			perm = append(perm, i)
		}
		perm = append(perm, 1)
	} else {
		perm = append(perm, r-1)
		for i := int64(1); i < r-1; i++ {
			perm = append(perm, i)
		}
	}
	return c.Emit(fxgraph.AtenPermute, x, ints(perm))
}

// qAveragePool converts QLinearAveragePool: AveragePool of x - x_zp
// (exact integers in float32), scaled by x_scale / y_scale, plus y_zp,
// then rounded half to even (ONNX Runtime rounds after adding the zero
// point, which differs from rounding first on exact ties).
func qAveragePool(c *Ctx, n *Node) error {
	dt, err := qOutDType(c, 4, 0)
	if err != nil {
		return err
	}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	var p [5]*fxgraph.Node
	for i := 1; i < 5; i++ {
		if p[i], err = c.OptInput(i); err != nil {
			return err
		}
		if p[i] != nil && !qSingle(Meta(p[i])) {
			return Unsupported("QLinearAveragePool with per-axis parameter %s (input %d)", Meta(p[i]), i)
		}
	}
	if p[1] == nil || p[3] == nil {
		return fmt.Errorf("QLinearAveragePool needs x_scale and y_scale")
	}
	v, err := dequantize(c, x, c.ScalarConst(tensor.Float32, 1), p[2], tensor.Float32)
	if err != nil {
		return err
	}
	last := c.AttrInt("channels_last", 0) != 0
	if last {
		if v, err = qChannelsFirst(c, v, false); err != nil {
			return err
		}
	}
	y, err := c.Call1("AveragePool", 19, []*fxgraph.Node{v}, c.passAttrs("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")...)
	if err != nil {
		return err
	}
	if last {
		if y, err = qChannelsFirst(c, y, true); err != nil {
			return err
		}
	}
	xs, err := nnCast(c, p[1], tensor.Float32)
	if err != nil {
		return err
	}
	ys, err := nnCast(c, p[3], tensor.Float32)
	if err != nil {
		return err
	}
	if y, err = c.Emit(fxgraph.AtenMulTensor, y, xs); err != nil {
		return err
	}
	if y, err = c.Emit(fxgraph.AtenDivTensor, y, ys); err != nil {
		return err
	}
	if p[4] != nil {
		z, err := nnCast(c, p[4], tensor.Float32)
		if err != nil {
			return err
		}
		if y, err = c.Emit(fxgraph.AtenAddTensor, y, z); err != nil {
			return err
		}
	}
	if y, err = quantize(c, y, c.ScalarConst(tensor.Float32, 1), nil, dt); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qGlobalAveragePool converts QLinearGlobalAveragePool: the int32 sum of
// x - x_zp over the spatial dims, scaled by x_scale / (y_scale * count).
func qGlobalAveragePool(c *Ctx, n *Node) error {
	dt, err := qOutDType(c, 4, 0)
	if err != nil {
		return err
	}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	xz, err := c.OptInput(2)
	if err != nil {
		return err
	}
	last := c.AttrInt("channels_last", 0) != 0
	r := Meta(x).Rank()
	if r < 3 {
		return fmt.Errorf("QLinearGlobalAveragePool wants rank >= 3, got %s", Meta(x))
	}
	var dims []any
	count := int64(1)
	first, end := 2, r
	if last {
		first, end = 1, r-1
	}
	for i := first; i < end; i++ {
		d := Meta(x).Shape[i]
		if !d.IsStatic() {
			return Unsupported("QLinearGlobalAveragePool over symbolic dim %s", d)
		}
		count *= d.Size
		dims = append(dims, int64(i))
	}
	v, err := nnCast(c, x, tensor.Int32)
	if err != nil {
		return err
	}
	if xz != nil {
		z, err := nnCast(c, xz, tensor.Int32)
		if err != nil {
			return err
		}
		if v, err = c.Emit(fxgraph.AtenSubTensor, v, z); err != nil {
			return err
		}
	}
	if v, err = c.Emit(fxgraph.AtenSumDimIntList, v, dims, true); err != nil {
		return err
	}
	if v, err = nnCast(c, v, tensor.Float32); err != nil {
		return err
	}
	xs, err := c.Input(1)
	if err != nil {
		return err
	}
	ys, err := c.Input(3)
	if err != nil {
		return err
	}
	den, err := c.Emit(fxgraph.AtenMulScalar, ys, float64(count))
	if err != nil {
		return err
	}
	scale, err := c.Emit(fxgraph.AtenDivTensor, xs, den)
	if err != nil {
		return err
	}
	if v, err = c.Emit(fxgraph.AtenMulTensor, v, scale); err != nil {
		return err
	}
	one := c.ScalarConst(tensor.Float32, 1)
	var z *fxgraph.Node
	if c.HasInput(4) {
		if z, err = c.Input(4); err != nil {
			return err
		}
	}
	y, err := quantize(c, v, one, z, dt)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qConcat converts QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per
// input): each input requantized to the output's parameters, concatenated.
func qConcat(c *Ctx, n *Node) error {
	if (c.NumInputs()-2)%3 != 0 || c.NumInputs() < 5 {
		return fmt.Errorf("QLinearConcat has %d inputs, want 2 + 3 per tensor", c.NumInputs())
	}
	dt, err := qOutDType(c, 1, 2)
	if err != nil {
		return err
	}
	var parts []*fxgraph.Node
	for i := 2; i < c.NumInputs(); i += 3 {
		x, err := qDequant(c, i, i+1, i+2)
		if err != nil {
			return err
		}
		if x, err = qRequant(c, x, 0, 1, dt); err != nil {
			return err
		}
		parts = append(parts, x)
	}
	y, err := c.Emit(fxgraph.AtenCat, nodes(parts), c.AttrInt("axis", 0))
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qScaleAlong shapes a scale for an int32 matmul result of rank r: a
// per-column scale (1-D of more than one value) along the last axis.
func qScaleAlong(c *Ctx, s *fxgraph.Node, r int) (*fxgraph.Node, error) {
	s, err := nnCast(c, s, tensor.Float32)
	if err != nil {
		return nil, err
	}
	if qSingle(Meta(s)) {
		if Meta(s).Rank() == 0 {
			return s, nil
		}
		return c.Emit(fxgraph.AtenView, s, []any{})
	}
	if Meta(s).Rank() != 1 {
		return nil, Unsupported("scale of shape %s", Meta(s).Shape)
	}
	return viewAlong(c, s, r, r-1)
}

// qScaledAcc returns float32(acc) * (as * bs), bs per column or single,
// plus the optional float bias.
func qScaledAcc(c *Ctx, acc, as, bs, bias *fxgraph.Node) (*fxgraph.Node, error) {
	r := Meta(acc).Rank()
	as, err := qScaleAlong(c, as, r)
	if err != nil {
		return nil, err
	}
	if bs, err = qScaleAlong(c, bs, r); err != nil {
		return nil, err
	}
	scale, err := c.Emit(fxgraph.AtenMulTensor, as, bs)
	if err != nil {
		return nil, err
	}
	accf, err := nnCast(c, acc, tensor.Float32)
	if err != nil {
		return nil, err
	}
	y, err := c.Emit(fxgraph.AtenMulTensor, accf, scale)
	if err != nil || bias == nil {
		return y, err
	}
	return c.Emit(fxgraph.AtenAddTensor, y, bias)
}

// qMatMulIntegerToFloat converts MatMulIntegerToFloat (A, B, a_scale,
// b_scale, a_zp, b_zp, bias): the int32 matmul scaled to float32.
func qMatMulIntegerToFloat(c *Ctx, n *Node) error {
	acc, err := nnQuantMatMul(c, 0, 4, 1, 5)
	if err != nil {
		return err
	}
	as, err := c.Input(2)
	if err != nil {
		return err
	}
	bs, err := c.Input(3)
	if err != nil {
		return err
	}
	bias, err := c.OptInput(6)
	if err != nil {
		return err
	}
	y, err := qScaledAcc(c, acc, as, bs, bias)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qDynamicQuantizeMatMul converts DynamicQuantizeMatMul (A, B, b_scale,
// b_zp, bias): A quantized to uint8 as DynamicQuantizeLinear does, then
// MatMulIntegerToFloat.
func qDynamicQuantizeMatMul(c *Ctx, n *Node) error {
	a, err := c.Input(0)
	if err != nil {
		return err
	}
	b, err := c.Input(1)
	if err != nil {
		return err
	}
	bz, err := c.OptInput(3)
	if err != nil {
		return err
	}
	as, azf, err := dynamicQuantParams(c, a)
	if err != nil {
		return err
	}
	aq, err := quantize(c, a, as, azf, tensor.Uint8)
	if err != nil {
		return err
	}
	az, err := nnCast(c, azf, tensor.Uint8)
	if err != nil {
		return err
	}
	ra, rb := Meta(a).Rank(), Meta(b).Rank()
	if ra < 2 || rb < 2 {
		return Unsupported("DynamicQuantizeMatMul of %s and %s", Meta(a), Meta(b))
	}
	ash, err := nnZeroShift(c, aq, az, ra-2, ra)
	if err != nil {
		return err
	}
	bsh, err := nnZeroShift(c, b, bz, rb-1, rb)
	if err != nil {
		return err
	}
	acc, err := c.Emit(fxgraph.AtenMatmul, ash, bsh)
	if err != nil {
		return err
	}
	bs, err := c.Input(2)
	if err != nil {
		return err
	}
	bias, err := c.OptInput(4)
	if err != nil {
		return err
	}
	y, err := qScaledAcc(c, acc, as, bs, bias)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qGemm converts QGemm (A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale,
// y_zp): the int32 product of the zero-shifted operands plus the int32 C,
// scaled by alpha * a_scale * b_scale; quantized with y_scale and y_zp
// when y_scale is given, float32 otherwise.
func qGemm(c *Ctx, n *Node) error {
	acc, err := qGemmAcc(c)
	if err != nil {
		return err
	}
	as, err := c.Input(1)
	if err != nil {
		return err
	}
	bs, err := c.Input(4)
	if err != nil {
		return err
	}
	if as, err = nnCast(c, as, tensor.Float32); err != nil {
		return err
	}
	if alpha := c.AttrFloat("alpha", 1); alpha != 1 {
		if as, err = c.Emit(fxgraph.AtenMulScalar, as, alpha); err != nil {
			return err
		}
	}
	if !c.HasInput(7) {
		y, err := qScaledAcc(c, acc, as, bs, nil)
		if err != nil {
			return err
		}
		c.SetOutput(0, y)
		return nil
	}
	ys, err := c.Input(7)
	if err != nil {
		return err
	}
	if as, err = c.Emit(fxgraph.AtenDivTensor, as, ys); err != nil {
		return err
	}
	y, err := qScaledAcc(c, acc, as, bs, nil)
	if err != nil {
		return err
	}
	dt, err := qOutDType(c, 8, 0)
	if err != nil {
		return err
	}
	var yz *fxgraph.Node
	if c.HasInput(8) {
		if yz, err = c.Input(8); err != nil {
			return err
		}
	}
	if y, err = quantize(c, y, c.ScalarConst(tensor.Float32, 1), yz, dt); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// qGemmAcc is QGemm's int32 accumulator: the product of the zero-shifted
// A and B (each transposed as its attribute says) plus C.
func qGemmAcc(c *Ctx) (*fxgraph.Node, error) {
	a, err := c.Input(0)
	if err != nil {
		return nil, err
	}
	b, err := c.Input(3)
	if err != nil {
		return nil, err
	}
	az, err := c.OptInput(2)
	if err != nil {
		return nil, err
	}
	bz, err := c.OptInput(5)
	if err != nil {
		return nil, err
	}
	if Meta(a).Rank() != 2 || Meta(b).Rank() != 2 {
		return nil, fmt.Errorf("QGemm wants 2-D A and B, got %s and %s", Meta(a), Meta(b))
	}
	transB := c.AttrInt("transB", 0) != 0
	bAxis := 1
	if transB {
		bAxis = 0
	}
	ash, err := nnZeroShift(c, a, az, 0, 2)
	if err != nil {
		return nil, err
	}
	bsh, err := nnZeroShift(c, b, bz, bAxis, 2)
	if err != nil {
		return nil, err
	}
	perm := []any{int64(1), int64(0)}
	if c.AttrInt("transA", 0) != 0 {
		if ash, err = c.Emit(fxgraph.AtenPermute, ash, perm); err != nil {
			return nil, err
		}
	}
	if transB {
		if bsh, err = c.Emit(fxgraph.AtenPermute, bsh, perm); err != nil {
			return nil, err
		}
	}
	acc, err := c.Emit(fxgraph.AtenMm, ash, bsh)
	if err != nil {
		return nil, err
	}
	if c.HasInput(6) {
		cc, err := c.Input(6)
		if err != nil {
			return nil, err
		}
		if cc, err = nnCast(c, cc, tensor.Int32); err != nil {
			return nil, err
		}
		if acc, err = c.Emit(fxgraph.AtenAddTensor, acc, cc); err != nil {
			return nil, err
		}
	}
	return acc, nil
}
