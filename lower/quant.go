package lower

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerQuant registers the rules of the quantized operators.
func registerQuant(r *Registry) {
	r.Register(fxgraph.XserveQLinearConv, nnQLinearConv)
}

// nnQLinearConv lowers xserve.qlinear_conv: the platform's int8
// convolution (Primitives.QConv) where it takes it, else the integer
// arithmetic ONNX Runtime's reference computes: the int32 convolution of
// the zero-shifted input with the weight, plus the int32 bias, times the
// float32 scale of each output channel, rounded half to even, shifted by
// the output's zero point and saturated.
func nnQLinearConv(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	dt, outDims := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	_, wd, err := InMeta(n, 1)
	if err != nil {
		return nil, err
	}
	p, err := fxgraph.ConvArgs(n, len(wd)-2)
	if err != nil {
		return nil, err
	}
	q, err := fxgraph.QLinearConvArgs(n)
	if err != nil {
		return nil, err
	}
	if xd == nil || outDims == nil {
		return nil, fmt.Errorf("qlinear_conv: symbolic shapes reach lowering")
	}
	if qconv := ctx.Primitives().QConv; qconv != nil {
		y, err := qconv(ctx, in[0], in[1], in[2], in[9], xd, wd, outDims, p, q)
		if err != nil || y != nil {
			return []*stablehlo.Value{y}, err
		}
	}
	b := &nnB{chain: chain{ctx: ctx}}
	x := b.convert(in[0], tensor.Int32)
	if q.XZeroPoint != 0 {
		x = b.sub(x, b.full(x, float64(q.XZeroPoint), xd))
	}
	acc := nnConvProduct(b, x, b.convert(in[1], tensor.Int32), wd, outDims, p)
	if in[2] != nil {
		acc = b.add(acc, b.bcastIn(in[2], outDims, []int64{1}))
	}
	y := b.mul(b.convert(acc, tensor.Float32), b.bcastIn(in[9], outDims, []int64{1}))
	if b.err == nil {
		y = b.set(y.Block().RoundNearestEven(y))
	}
	if q.YZeroPoint != 0 {
		y = b.add(y, b.full(y, float64(q.YZeroPoint), outDims))
	}
	lo, hi := 0.0, 255.0
	if dt == tensor.Int8 {
		lo, hi = -128, 127
	}
	y = b.max(b.min(y, b.full(y, hi, outDims)), b.full(y, lo, outDims))
	return b.out(b.convert(y, dt))
}
