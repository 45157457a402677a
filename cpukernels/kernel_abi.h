/*
 * kernel_abi.h: the calling convention of xserve's CPU kernels, generated
 * from lower/cpu/abi.go (go test ./lower/cpu -run TestKernelABIHeader
 * -update rewrites it); edit that file, not this one.
 */
#ifndef XSERVE_CPUKERNELS_KERNEL_ABI_H_
#define XSERVE_CPUKERNELS_KERNEL_ABI_H_

/* The custom-call targets. */
#define KERNEL_CONV "xserve_conv_f32"
#define KERNEL_MATMUL "xserve_matmul_f32"
#define KERNEL_MAXPOOL "xserve_maxpool_f32"
#define KERNEL_AVGPOOL "xserve_avgpool_f32"
#define KERNEL_SOFTMAX "xserve_softmax_f32"
#define KERNEL_LAYERNORM "xserve_layernorm_f32"
#define KERNEL_QCONV "xserve_qconv_i8"

/* The activation attribute's values. */
enum {
	ACT_NONE = 0,
	ACT_RELU = 1,
	ACT_RELU6 = 2,
	ACT_SIGMOID = 3,
	ACT_SILU = 4,
	ACT_HARDSWISH = 5,
	ACT_TANH = 6,
	ACT_GELU = 7,
	ACT_GELU_TANH = 8,
	ACT_LEAKY_RELU = 9,
	ACT_LAST = ACT_LEAKY_RELU,
};

/* The attributes each kernel reads. */
/* xserve_conv_f32: activation, alpha, dilation, groups, has_bias, pad_hi, pad_lo, residual, stride */
/* xserve_matmul_f32: activation, alpha, has_bias, residual, trans_a, trans_b */
/* xserve_maxpool_f32: dilation, pad_hi, pad_lo, stride, window */
/* xserve_avgpool_f32: dilation, exclude_pad, pad_hi, pad_lo, stride, window */
/* xserve_softmax_f32: log */
/* xserve_layernorm_f32: eps */
/* xserve_qconv_i8: dilation, groups, has_bias, pad_hi, pad_lo, stride, x_zero_point, y_zero_point */

#endif /* XSERVE_CPUKERNELS_KERNEL_ABI_H_ */
