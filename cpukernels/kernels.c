/*
 * kernels.c: the table of FFI handlers this library provides, read by the
 * pjrt package when it opens an XLA CPU client (pjrt.Client.Kernels).
 */
#include <stddef.h>

#include "kernel_abi.h"
#include "xla_ffi.h"

XLA_FFI_Error *xserve_conv_f32(XLA_FFI_CallFrame *f);
XLA_FFI_Error *xserve_matmul_f32(XLA_FFI_CallFrame *f);
XLA_FFI_Error *xserve_maxpool_f32(XLA_FFI_CallFrame *f);
XLA_FFI_Error *xserve_avgpool_f32(XLA_FFI_CallFrame *f);
XLA_FFI_Error *xserve_softmax_f32(XLA_FFI_CallFrame *f);
XLA_FFI_Error *xserve_layernorm_f32(XLA_FFI_CallFrame *f);
XLA_FFI_Error *xserve_qconv_i8(XLA_FFI_CallFrame *f);

/* xserve_cpu_kernel is one custom-call target and its handler. */
typedef struct xserve_cpu_kernel {
	const char *name;
	XLA_FFI_Handler *handler;
} xserve_cpu_kernel;

static const xserve_cpu_kernel kernels[] = {
    {KERNEL_CONV, xserve_conv_f32},
    {KERNEL_MATMUL, xserve_matmul_f32},
    {KERNEL_MAXPOOL, xserve_maxpool_f32},
    {KERNEL_AVGPOOL, xserve_avgpool_f32},
    {KERNEL_SOFTMAX, xserve_softmax_f32},
    {KERNEL_LAYERNORM, xserve_layernorm_f32},
    {KERNEL_QCONV, xserve_qconv_i8},
};

/* XSERVE_CPU_KERNELS_ABI numbers the kernels' calling convention (targets,
 * operands, attributes, and the library's other exports: ABI 7 added
 * xserve_cpu_kernels_thread_limit, common.h; ABI 8 the softmax, layer
 * norm and average pooling; ABI 9 the int8 convolution). Bump it with every change to one, together with
 * cpuKernelsABI in pjrt/kernels.go: a library of another ABI is not loaded,
 * so that a binary and a kernel library built from different sources never
 * meet at run time. */
#define XSERVE_CPU_KERNELS_ABI 9

int xserve_cpu_kernels_abi(void) { return XSERVE_CPU_KERNELS_ABI; }

/* xserve_cpu_kernels returns the table and stores its length in *n. */
const xserve_cpu_kernel *xserve_cpu_kernels(int *n) {
	*n = (int)(sizeof kernels / sizeof kernels[0]);
	return kernels;
}
