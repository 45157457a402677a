package cpu

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// qconv is the CPU's quantized convolution (fxgraph.XserveQLinearConv):
// QConvKernel, oneDNN's int8 convolution, for 1 to 3 spatial dims when the
// library is loaded; else declined (the integer arithmetic of package
// lower). The operands are convKernel's: the input and result
// channels-last, the weight [kernel..., in/groups, out] row-major; then
// the requantization scale [out] and, when there is one, the int32 bias
// (the kernel scales it: float32(bias) * scale, a few hundred products a
// call, where XLA ran a fusion of its own for each).
func qconv(ctx *lower.Context, x, w, bias, scale *stablehlo.Value, xd, wd, outDims []int64, p fxgraph.ConvParams, q fxgraph.QLinearConvParams) (*stablehlo.Value, error) {
	spatial := len(wd) - 2
	if !ctx.Options.HasKernel(QConvKernel) || spatial < 1 || spatial > 3 || tensor.NumElements(wd) == 0 || tensor.NumElements(outDims) == 0 {
		return nil, nil
	}
	rank := len(outDims)
	cl := channelsLast(rank)
	toHWIO := make([]int64, 0, rank)
	weights := make([]int64, rank)
	for j := range rank {
		weights[j] = int64(rank - 1 - j)
		if j >= 2 {
			toHWIO = append(toHWIO, int64(j))
		}
	}
	toHWIO = append(toHWIO, 1, 0)
	blk := x.Block()
	wHWIO, err := blk.Transpose(w, toHWIO...)
	if err != nil {
		return nil, err
	}
	elem := stablehlo.U8
	if q.Out == tensor.Int8 {
		elem = stablehlo.I8
	}
	call := stablehlo.FFICall{
		Target:   QConvKernel,
		Operands: []*stablehlo.Value{x, wHWIO, scale},
		Results:  []stablehlo.Type{stablehlo.TensorOf(elem, outDims...)},
		Attrs: []stablehlo.FFIAttr{
			{Name: "dilation", Ints: dilations(p.Dilation, spatial), Array: true},
			{Name: "groups", Int: max(p.Groups, 1)},
			{Name: "pad_hi", Ints: p.Padding[:spatial], Array: true},
			{Name: "pad_lo", Ints: p.Padding[:spatial], Array: true},
			{Name: "stride", Ints: p.Stride[:spatial], Array: true},
			{Name: "x_zero_point", Int: q.XZeroPoint},
			{Name: "y_zero_point", Int: q.YZeroPoint},
		},
		OperandLayouts: [][]int64{cl, weights, {0}},
		ResultLayouts:  [][]int64{cl},
	}
	hasBias := int64(0)
	if bias != nil {
		call.Operands = append(call.Operands, bias)
		call.OperandLayouts = append(call.OperandLayouts, []int64{0})
		hasBias = 1
	}
	call.Attrs = append(call.Attrs, stablehlo.FFIAttr{Name: "has_bias", Int: hasBias})
	out, err := blk.FFICall(kernelSite(call))
	if err != nil {
		return nil, err
	}
	return out[0], nil
}
