package cpu

import (
	"fmt"
	"sort"
	"strings"
)

// The custom-call targets of xserve's CPU kernel library (cpukernels/), as
// pjrt.Client.Kernels lists them.
const (
	// ConvKernel is the convolution (cpukernels/conv.c): float32, 1 to 3
	// spatial dims, any groups, stride, padding and dilation, optional
	// bias, and optionally a residual added to the result and an activation
	// applied to it.
	ConvKernel = "xserve_conv_f32"
	// MatmulKernel is the matrix product (cpukernels/matmul.c): float32
	// [B, M, K] x [B, K, N], either operand possibly transposed, B possibly
	// absent, with the convolution's epilogue and a bias.
	MatmulKernel = "xserve_matmul_f32"
	// PoolKernel is max pooling (cpukernels/pool.c): float32, 1 to 3
	// spatial dims, channels-last, any window, stride, dilation and padding
	// under the window.
	PoolKernel = "xserve_maxpool_f32"
	// AvgPoolKernel is average pooling (cpukernels/pool.c): the max
	// pooling's operand, result and attributes, and "exclude_pad" (1:
	// divide by the window's elements inside the input).
	AvgPoolKernel = "xserve_avgpool_f32"
	// SoftmaxKernel is the softmax (cpukernels/norm.c): float32 [M, N]
	// along N, or the log-softmax ("log" 1).
	SoftmaxKernel = "xserve_softmax_f32"
	// LayerNormKernel is the layer normalization (cpukernels/norm.c):
	// float32 [M, N] along N, scaled and shifted by [N] operands, with
	// "eps".
	LayerNormKernel = "xserve_layernorm_f32"
	// QConvKernel is the int8 convolution (cpukernels/qconv.c): uint8 or
	// int8 input with a zero point, int8 weights (zero point 0), a float32
	// requantization scale per output channel and optional float32 bias
	// in the result's scale, uint8 or int8 result with a zero point; the
	// convolution's layouts and window attributes.
	QConvKernel = "xserve_qconv_i8"
)

// kernels are the targets in the order of cpukernels/kernels.c, with the
// macro names kernel_abi.h gives them.
var kernels = []struct{ macro, name string }{
	{"CONV", ConvKernel}, {"MATMUL", MatmulKernel}, {"MAXPOOL", PoolKernel}, {"AVGPOOL", AvgPoolKernel},
	{"SOFTMAX", SoftmaxKernel}, {"LAYERNORM", LayerNormKernel}, {"QCONV", QConvKernel},
}

// activations are the codes of the kernels' "activation" attribute (with
// "alpha", leaky relu's slope), by fxgraph.Activations name: oneDNN
// post-ops applied to the result.
var activations = map[string]int64{
	"":           0,
	"relu":       1,
	"relu6":      2,
	"sigmoid":    3,
	"silu":       4,
	"hardswish":  5,
	"tanh":       6,
	"gelu":       7,
	"gelu_tanh":  8,
	"leaky_relu": 9,
}

// kernelAttrs are the FFI attributes each kernel reads (all required; the
// lowering adds "site", see kernelSite).
var kernelAttrs = map[string][]string{
	ConvKernel:      {"activation", "alpha", "dilation", "groups", "has_bias", "pad_hi", "pad_lo", "residual", "stride"},
	MatmulKernel:    {"activation", "alpha", "has_bias", "residual", "trans_a", "trans_b"},
	PoolKernel:      {"dilation", "pad_hi", "pad_lo", "stride", "window"},
	AvgPoolKernel:   {"dilation", "exclude_pad", "pad_hi", "pad_lo", "stride", "window"},
	SoftmaxKernel:   {"log"},
	LayerNormKernel: {"eps"},
	QConvKernel:     {"dilation", "groups", "has_bias", "pad_hi", "pad_lo", "stride", "x_zero_point", "y_zero_point"},
}

// activationCode returns the kernels' code of activation act.
func activationCode(act string) (int64, error) {
	c, ok := activations[act]
	if !ok {
		return 0, fmt.Errorf("cpu: the kernels have no activation %q", act)
	}
	return c, nil
}

// ABIHeader is the C header cpukernels/kernel_abi.h, the kernels' side of
// this calling convention: generated from it (TestKernelABIHeader keeps the
// committed file equal to it).
func ABIHeader() string {
	var b strings.Builder
	b.WriteString(`/*
 * kernel_abi.h: the calling convention of xserve's CPU kernels, generated
 * from lower/cpu/abi.go (go test ./lower/cpu -run TestKernelABIHeader
 * -update rewrites it); edit that file, not this one.
 */
#ifndef XSERVE_CPUKERNELS_KERNEL_ABI_H_
#define XSERVE_CPUKERNELS_KERNEL_ABI_H_

/* The custom-call targets. */
`)
	for _, t := range kernels {
		fmt.Fprintf(&b, "#define KERNEL_%s %q\n", t.macro, t.name)
	}
	b.WriteString("\n/* The activation attribute's values. */\nenum {\n")
	names := make([]string, 0, len(activations))
	for n := range activations {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return activations[names[i]] < activations[names[j]] })
	for _, n := range names {
		macro := "ACT_" + strings.ToUpper(n)
		if n == "" {
			macro = "ACT_NONE"
		}
		fmt.Fprintf(&b, "\t%s = %d,\n", macro, activations[n])
	}
	fmt.Fprintf(&b, "\tACT_LAST = ACT_%s,\n};\n", strings.ToUpper(names[len(names)-1]))
	b.WriteString("\n/* The attributes each kernel reads. */\n")
	for _, t := range kernels {
		fmt.Fprintf(&b, "/* %s: %s */\n", t.name, strings.Join(kernelAttrs[t.name], ", "))
	}
	b.WriteString("\n#endif /* XSERVE_CPUKERNELS_KERNEL_ABI_H_ */\n")
	return b.String()
}
