package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// registerFold registers aten.col2im (torch.nn.functional.fold; ONNX's
// Col2Im).
func registerFold(r *Registry) {
	r.define(AtenCol2im, foldCol2imShape, nil)
}

// Col2imParams are the arguments of aten.col2im.default:
//
//	aten.col2im(self [N, C*prod(kernel_size), L], output_size, kernel_size,
//	            dilation, padding, stride) -> [N, C, *output_size]
//
// PyTorch's schema takes two spatial dims; the IR takes any number, each
// list as long as output_size (ONNX's Col2Im is N-D). padding is symmetric,
// per dim. L must be the number of blocks, the product over dims of
// (output + 2*padding - dilation*(kernel-1) - 1) / stride + 1.
type Col2imParams struct {
	Output, Kernel, Dilation, Padding, Stride []int64
}

// Col2im reads and checks the arguments of an aten.col2im node.
func Col2im(n *Node) (Col2imParams, error) {
	var p Col2imParams
	lists := []*[]int64{&p.Output, &p.Kernel, &p.Dilation, &p.Padding, &p.Stride}
	names := []string{"output_size", "kernel_size", "dilation", "padding", "stride"}
	for i, l := range lists {
		v, err := n.IntsArg(i+1, names[i], nil)
		if err != nil {
			return p, err
		}
		if len(v) == 0 || i > 0 && len(v) != len(p.Output) {
			return p, fmt.Errorf("col2im: %s %v for output_size %v", names[i], v, p.Output)
		}
		*l = v
	}
	for j := range p.Output {
		if p.Output[j] < 1 || p.Kernel[j] < 1 || p.Dilation[j] < 1 || p.Stride[j] < 1 || p.Padding[j] < 0 {
			return p, fmt.Errorf("col2im: output_size %v, kernel_size %v, dilation %v, padding %v, stride %v: want positive sizes and non-negative padding", p.Output, p.Kernel, p.Dilation, p.Padding, p.Stride)
		}
	}
	return p, nil
}

// Blocks returns the number of blocks along each dim.
func (p Col2imParams) Blocks() []int64 {
	out := make([]int64, len(p.Output))
	for j := range out {
		out[j] = (p.Output[j]+2*p.Padding[j]-p.Dilation[j]*(p.Kernel[j]-1)-1)/p.Stride[j] + 1
	}
	return out
}

func foldCol2imShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	p, err := Col2im(n)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() != 3 {
		return Meta{}, fmt.Errorf("col2im: input %s, want [N, C*prod(kernel_size), L]", x)
	}
	k := tensor.NumElements(p.Kernel)
	l := tensor.NumElements(p.Blocks())
	cs, ls := x.Shape[1], x.Shape[2]
	if !cs.IsStatic() || !ls.IsStatic() || cs.Size%k != 0 || ls.Size != l {
		return Meta{}, fmt.Errorf("col2im: input %s for kernel_size %v and %d blocks: want [N, C*%d, %d]", x, p.Kernel, l, k, l)
	}
	out := Shape{x.Shape[0], D(cs.Size / k)}
	for _, d := range p.Output {
		out = append(out, D(d))
	}
	return One(x.DType, out), nil
}
