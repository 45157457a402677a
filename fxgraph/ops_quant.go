package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// XserveQLinearConv is a quantized convolution as ONNX Runtime computes
// QLinearConv (and the DequantizeLinear -> Conv -> QuantizeLinear groups it
// fuses into one): aten.convolution's nine arguments (input uint8 or int8,
// weight int8 with zero point 0, bias int32 or None), then the per output
// channel requantization scale (float32 [out]: input scale * weight scale
// / output scale, rounded to float32 as ORT rounds it), the input's and the
// output's zero points and whether the output is int8 (else uint8):
//
//	xserve.qlinear_conv(input, weight, bias, stride, padding, dilation,
//	                    transposed, output_padding, groups,
//	                    scale, x_zero_point, y_zero_point, signed_output)
//
// It computes, with int32 accumulation,
//
//	acc = conv(input - x_zero_point, weight) + bias
//	y   = saturate(round_half_even(float32(acc) * scale[c]) + y_zero_point)
//
// Platforms with an int8 convolution kernel (lower/cpu: oneDNN) compute it
// there; elsewhere it lowers as that integer arithmetic.
var XserveQLinearConv = &Op{Name: "xserve.qlinear_conv", Args: append(convSchema(),
	ArgSpec{"scale", 9, ArgTensor, nil, false}, ArgSpec{"x_zero_point", 10, ArgInt, int64(0), true},
	ArgSpec{"y_zero_point", 11, ArgInt, int64(0), true}, ArgSpec{"signed_output", 12, ArgBool, false, true},
)}

// registerQuant registers the quantized operators.
func registerQuant(r *Registry) {
	r.define(XserveQLinearConv, qlinearConvShape, nil)
}

// QLinearConvParams are XserveQLinearConv's quantization arguments.
type QLinearConvParams struct {
	XZeroPoint, YZeroPoint int64
	// Out is the result's type: tensor.Int8 or tensor.Uint8.
	Out tensor.DType
}

// QLinearConvArgs reads n's quantization arguments (n an
// XserveQLinearConv node).
func QLinearConvArgs(n *Node) (QLinearConvParams, error) {
	var q QLinearConvParams
	var err error
	if q.XZeroPoint, err = n.ParamInt("x_zero_point"); err != nil {
		return q, err
	}
	if q.YZeroPoint, err = n.ParamInt("y_zero_point"); err != nil {
		return q, err
	}
	signed, err := n.ParamBool("signed_output")
	if err != nil {
		return q, err
	}
	q.Out = tensor.Uint8
	if signed {
		q.Out = tensor.Int8
	}
	return q, nil
}

// qlinearConvShape is XserveQLinearConv's shape: the convolution's, of
// the output type; it checks the operand types and the scale's length.
func qlinearConvShape(n *Node) (Meta, error) {
	m, err := nnConvolutionShape(n)
	if err != nil {
		return m, fmt.Errorf("qlinear_conv: %w", err)
	}
	x, _ := n.InputMeta(0)
	w, _ := n.InputMeta(1)
	if (x.DType != tensor.Uint8 && x.DType != tensor.Int8) || w.DType != tensor.Int8 {
		return Meta{}, fmt.Errorf("qlinear_conv: input %s and weight %s, want uint8 or int8 and int8", x, w)
	}
	if t, err := n.ParamBool("transposed"); err != nil || t {
		return Meta{}, fmt.Errorf("qlinear_conv: transposed convolutions are not quantized here")
	}
	if _, ok := n.Arg(2).(*Node); ok {
		if b, _ := n.InputMeta(2); b.DType != tensor.Int32 {
			return Meta{}, fmt.Errorf("qlinear_conv: bias %s, want int32", b)
		}
	}
	s, err := n.InputMeta(9)
	if err != nil {
		return Meta{}, fmt.Errorf("qlinear_conv: scale: %w", err)
	}
	if s.DType != tensor.Float32 || s.Rank() != 1 || !s.Shape[0].IsStatic() || !w.Shape[0].IsStatic() || s.Shape[0].Size != w.Shape[0].Size {
		return Meta{}, fmt.Errorf("qlinear_conv: scale %s, want float32 [%s] (one per output channel)", s, w.Shape[0])
	}
	q, err := QLinearConvArgs(n)
	if err != nil {
		return Meta{}, err
	}
	lo, hi := int64(0), int64(255)
	if x.DType == tensor.Int8 {
		lo, hi = -128, 127
	}
	if q.XZeroPoint < lo || q.XZeroPoint > hi {
		return Meta{}, fmt.Errorf("qlinear_conv: x_zero_point %d outside %s", q.XZeroPoint, x.DType)
	}
	lo, hi = 0, 255
	if q.Out == tensor.Int8 {
		lo, hi = -128, 127
	}
	if q.YZeroPoint < lo || q.YZeroPoint > hi {
		return Meta{}, fmt.Errorf("qlinear_conv: y_zero_point %d outside %s", q.YZeroPoint, q.Out)
	}
	return One(q.Out, m.Vals[0].Shape), nil
}
