package lower

import (
	"encoding/binary"
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// registerFold registers col2im.
func registerFold(r *Registry) {
	r.Register(fxgraph.AtenCol2im, foldCol2im)
}

// foldCol2im lowers aten.col2im (any number of spatial dims): every
// column value [n, c*K + k, l] is added into the padded image at block l's
// origin plus kernel tap k's offset, one scatter-add over a table of those
// positions computed here, then the padding is sliced off.
func foldCol2im(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	p, err := fxgraph.Col2im(n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	xt := x.Type()
	b := x.Block()
	_, outDims := Out(n, 0)
	batch, ch := outDims[0], outDims[1]
	k := tensor.NumElements(p.Kernel)
	blocks := p.Blocks()
	l := tensor.NumElements(blocks)
	padded := make([]int64, len(p.Output))
	for j := range padded {
		padded[j] = p.Output[j] + 2*p.Padding[j]
	}
	updates, err := b.Reshape(x, batch, ch, k*l)
	if err != nil {
		return nil, err
	}
	idx, err := b.Constant(stablehlo.TensorOf(stablehlo.I32, k*l, 1), col2imPositions(p, blocks, padded))
	if err != nil {
		return nil, err
	}
	zero, err := b.ScalarConstant(xt.Elem, 0)
	if err != nil {
		return nil, err
	}
	total := tensor.NumElements(padded)
	acc, err := b.BroadcastInDim(zero, []int64{batch, ch, total}, nil)
	if err != nil {
		return nil, err
	}
	add := b.Region(stablehlo.TensorOf(xt.Elem), stablehlo.TensorOf(xt.Elem))
	sum, err := add.Add(add.Arg(0), add.Arg(1))
	if err != nil {
		return nil, err
	}
	if err := add.Return(sum); err != nil {
		return nil, err
	}
	d := stablehlo.ScatterDims{UpdateWindowDims: []int64{0, 1}, InsertedWindowDims: []int64{2}, ScatterDimsToOperandDims: []int64{2}, IndexVectorDim: 1}
	res, err := b.Scatter([]*stablehlo.Value{acc}, idx, []*stablehlo.Value{updates}, d, add, false, false)
	if err != nil {
		return nil, fmt.Errorf("col2im: %w", err)
	}
	img, err := b.Reshape(res[0], append([]int64{batch, ch}, padded...)...)
	if err != nil {
		return nil, err
	}
	start, limit, strides := []int64{0, 0}, []int64{batch, ch}, []int64{1, 1}
	for j := range padded {
		start = append(start, p.Padding[j])
		limit = append(limit, p.Padding[j]+p.Output[j])
		strides = append(strides, 1)
	}
	y, err := b.Slice(img, start, limit, strides)
	if err != nil {
		return nil, err
	}
	return []*stablehlo.Value{y}, nil
}

// col2imPositions returns, as int32 data of shape [K*L, 1], the flat
// position in the padded image of kernel tap k of block l (row k*L + l).
func col2imPositions(p fxgraph.Col2imParams, blocks, padded []int64) []byte {
	dims := len(p.Output)
	k, l := tensor.NumElements(p.Kernel), tensor.NumElements(blocks)
	out := make([]byte, 0, 4*k*l)
	kk := make([]int64, dims)
	for range k {
		bb := make([]int64, dims)
		for range l {
			flat := int64(0)
			for j := range dims {
				flat = flat*padded[j] + bb[j]*p.Stride[j] + kk[j]*p.Dilation[j]
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(flat))
			nextIndex(bb, blocks)
		}
		nextIndex(kk, p.Kernel)
	}
	return out
}

// nextIndex advances the row-major multi-index idx within dims; it
// returns false when idx wraps around to all zeros (it was the last).
func nextIndex(idx, dims []int64) bool {
	for j := len(idx) - 1; j >= 0; j-- {
		if idx[j]++; idx[j] < dims[j] {
			return true
		}
		idx[j] = 0
	}
	return false
}
