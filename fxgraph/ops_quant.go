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
	if err := qlinearConvRequant(n, w); err != nil {
		return Meta{}, err
	}
	q, err := QLinearConvArgs(n)
	if err != nil {
		return Meta{}, err
	}
	if err := zeroPointFits("x_zero_point", q.XZeroPoint, x.DType); err != nil {
		return Meta{}, err
	}
	if err := zeroPointFits("y_zero_point", q.YZeroPoint, q.Out); err != nil {
		return Meta{}, err
	}
	return One(q.Out, m.Vals[0].Shape), nil
}

// qlinearConvRequant checks the bias (int32 or None) and the scale (float32,
// one per output channel of weight w) of XserveQLinearConv node n.
func qlinearConvRequant(n *Node, w TensorMeta) error {
	if _, ok := n.Arg(2).(*Node); ok {
		if b, _ := n.InputMeta(2); b.DType != tensor.Int32 {
			return fmt.Errorf("qlinear_conv: bias %s, want int32", b)
		}
	}
	s, err := n.InputMeta(9)
	if err != nil {
		return fmt.Errorf("qlinear_conv: scale: %w", err)
	}
	if s.DType != tensor.Float32 || s.Rank() != 1 || !s.Shape[0].IsStatic() || !w.Shape[0].IsStatic() || s.Shape[0].Size != w.Shape[0].Size {
		return fmt.Errorf("qlinear_conv: scale %s, want float32 [%s] (one per output channel)", s, w.Shape[0])
	}
	return nil
}

// zeroPointFits checks that zero point zp (argument name) is a value of
// the 8-bit type dt.
func zeroPointFits(name string, zp int64, dt tensor.DType) error {
	lo, hi := int64(0), int64(255)
	if dt == tensor.Int8 {
		lo, hi = -128, 127
	}
	if zp < lo || zp > hi {
		return fmt.Errorf("qlinear_conv: %s %d outside %s", name, zp, dt)
	}
	return nil
}
