package onnx_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
)

// qconvKernelCases are the int8 convolution models of testdata/ort
// (gen_quant_cases.py) with ONNX Runtime's outputs, counted in
// quantization steps: QLinearConv in several shapes and types, and a model
// ORT's quantize_static wrote in QDQ format.
var qconvKernelCases = []string{
	"qconv_u8_per_channel_bias_pad1", "qconv_u8_batch2_stride2_per_tensor", "qconv_u8_depthwise_stride2",
	"qconv_u8_groups2_dilation2", "qconv_s8_input_and_output", "qconv_u8_zero_points_0",
	"qconv_u8_asymmetric_pads_stays_xla", "qconv_qdq_quantize_static", "qconv_qdq_tables_u8", "qconv_qdq_tables_s8",
}

// TestQConvKernelMatchesORT runs int8 convolution models through the CPU
// int8 convolution kernel (cpu.QConvKernel, oneDNN), where each output may
// be ORT's or one quantization step beside it (the kernel rounds
// acc*scale+bias*scale where ORT rounds (acc+bias)*scale), and through
// the integer arithmetic of the generic lowering (the kernels off), which
// must equal ORT's bit for bit.
func TestQConvKernelMatchesORT(t *testing.T) {
	client := nnPlugin(t)
	if !slices.Contains(client.Kernels(), cpu.QConvKernel) {
		t.Fatalf("the CPU kernel library is not loaded, or lacks %s (%v): run make pjrt", cpu.QConvKernel, client.KernelsError())
	}
	for _, run := range []struct {
		name    string
		kernels bool
		steps   float64
	}{{"kernel", true, 1}, {"xla", false, 0}} {
		r := conformance.NewRunner(client)
		r.RTol, r.ATol = 0, run.steps
		if !run.kernels {
			r.Lowerer = lower.New(lower.Options{Platform: client.Platform(), Kernels: []string{}}, cpu.Platform())
		}
		t.Run(run.name, func(t *testing.T) {
			for _, c := range qconvKernelCases {
				t.Run(c, func(t *testing.T) {
					res := r.Run(context.Background(), conformance.Case{Suite: "ort", Name: c, Dir: filepath.Join("testdata", "ort", c)})
					if res.Status != conformance.Passed {
						t.Errorf("%s: %s", res.Status, res.Detail)
					}
					if want := run.kernels && !strings.HasSuffix(c, "_stays_xla"); slices.Contains(res.CustomCalls, cpu.QConvKernel) != want {
						t.Errorf("custom calls %v: want %s called %v", res.CustomCalls, cpu.QConvKernel, want)
					}
				})
			}
		})
	}
}
