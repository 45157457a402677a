package onnx_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
)

// convKernelCases are the Conv models of testdata/ort (gen_ort_cases.py
// conv_cases) with ONNX Runtime's outputs.
var convKernelCases = []string{
	"conv_2d_bias_pad1_batch2", "conv_2d_stride2_nobias", "conv_2d_asymmetric_pads", "conv_2d_same_upper_stride2",
	"conv_2d_dilation_2x3", "conv_2d_groups2", "conv_2d_depthwise_stride2", "conv_2d_depth_multiplier2",
	"conv_2d_1x1_stride2_batch3", "conv_2d_weights_input", "conv_2d_kernel_larger_than_input",
	"conv_2d_two_threads_relu", "conv_2d_relu6", "conv_2d_relu_output_used_twice",
	"conv_2d_sigmoid", "conv_2d_silu", "conv_2d_hardswish", "conv_2d_tanh", "conv_2d_leaky_relu", "conv_2d_gelu", "conv_2d_gelu_tanh",
	"conv_2d_residual_relu", "conv_2d_residual_first_operand",
	"conv_1d_stride2_pad1", "conv_3d_pad1", "conv_2d_residual_batch1", "conv_1d_batch1_dilation2",
}

// convBatchedCases are the convKernelCases of more than one image, which
// never run as bands.
var convBatchedCases = []string{
	"conv_2d_bias_pad1_batch2", "conv_2d_depthwise_stride2", "conv_2d_1x1_stride2_batch3", "conv_2d_residual_relu",
	"conv_2d_residual_first_operand", "conv_1d_stride2_pad1",
}

// matmulKernelCases are the MatMul and Gemm models of testdata/ort
// (gen_ort_cases.py matmul_cases, matvec_cases) with ONNX Runtime's
// outputs.
var matmulKernelCases = []string{
	"matmul_2d", "matmul_batched_3d", "matmul_attention_4d_transposed", "matmul_broadcast_weights_4d", "matmul_vector",
	"matmul_gemm_transb_bias", "matmul_gemm_transa", "matmul_inputs_only", "matmul_tiny_stays_xla",
	"matmul_bias", "matmul_bias_first_relu", "matmul_bias_gelu", "matmul_bias_residual", "matmul_gemm_bias_relu",
	"matmul_matvec_stays_xla", "matmul_tied_head_stays_xla", "matmul_transposed_weight",
}

// poolKernelCases are the MaxPool models of testdata/ort (gen_ort_cases.py
// pool_cases) with ONNX Runtime's outputs.
var poolKernelCases = []string{
	"maxpool_2d_3x3_stride2_pad1", "maxpool_2d_2x2_batch3", "maxpool_2d_ceil_mode", "maxpool_2d_asymmetric_pads",
	"maxpool_2d_same_upper", "maxpool_2d_dilation", "maxpool_2d_resnet_stem_batch2", "maxpool_2d_after_conv",
	"maxpool_2d_1x1_stride2", "maxpool_1d_stride2_pad1", "maxpool_3d_2x2x2",
}

// TestPoolKernelMatchesORT runs MaxPool models through the CPU max-pooling
// kernel (cpu.PoolKernel) and through XLA's reduce_window, both against
// ONNX Runtime.
func TestPoolKernelMatchesORT(t *testing.T) {
	runKernelCases(t, cpu.PoolKernel, poolKernelCases)
}

// TestConvKernelMatchesORT runs Conv models through the CPU convolution
// kernel (cpu.ConvKernel, oneDNN, loaded next to the plugin by `make
// pjrt`) and through XLA's own convolution (the kernels turned off), both
// against ONNX Runtime.
func TestConvKernelMatchesORT(t *testing.T) {
	runKernelCases(t, cpu.ConvKernel, convKernelCases)
}

// TestConvKernelBandsMatchORT runs TestConvKernelMatchesORT again in a
// process whose convolutions on one image all run as bands of output rows,
// three (two for a result of two rows) (XSERVE_CPU_KERNELS_BAND_MACS=0,
// XSERVE_CPU_KERNELS_BANDS=3: rows shared out unevenly, bands at the padded
// edges and inside, whatever the machine's processors), and checks that
// they did and matched ONNX Runtime.
func TestConvKernelBandsMatchORT(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestConvKernelMatchesORT$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "XSERVE_CPU_KERNELS_BAND_MACS=0", "XSERVE_CPU_KERNELS_BANDS=3", "XSERVE_CPU_KERNELS_VERBOSE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("TestConvKernelMatchesORT with bands: %v\n%s", err, out)
	}
	// The verbose lines of each case's first run ("kernel"), by case.
	banded := map[string]bool{}
	c := ""
	for _, line := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "=== RUN   TestConvKernelMatchesORT/kernel/"); ok {
			c = name
		} else if strings.HasPrefix(strings.TrimSpace(line), "=== RUN") {
			c = ""
		}
		if c != "" && strings.HasSuffix(line, " bands of output rows") {
			banded[c] = true
		}
	}
	for _, name := range convKernelCases {
		if want := !slices.Contains(convBatchedCases, name); banded[name] != want {
			t.Errorf("%s: ran as bands %v, want %v", name, banded[name], want)
		}
	}
	if t.Failed() {
		t.Logf("%s", out)
	}
}

// TestConvKernelOneDNNWeightsMatchORT reruns TestConvKernelMatchesORT in a
// child process with every convolution that oneDNN runs with a different
// kernel on weights in its own layout made that way
// (XSERVE_CPU_KERNELS_WEIGHTS=onednn: the weights reordered from XLA's
// layout on each call), which the timed choice (the default) takes where
// it is faster, and checks that some cases ran so.
func TestConvKernelOneDNNWeightsMatchORT(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestConvKernelMatchesORT$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "XSERVE_CPU_KERNELS_WEIGHTS=onednn", "XSERVE_CPU_KERNELS_VERBOSE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("TestConvKernelMatchesORT with weights in oneDNN's layout: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "weights in oneDNN's layout"); n == 0 {
		t.Errorf("no convolution ran on weights in oneDNN's layout\n%s", out)
	}
}

// TestMatmulKernelMatchesORT runs MatMul and Gemm models through the CPU
// matrix-product kernel (cpu.MatmulKernel) and through XLA's dot_general,
// both against ONNX Runtime.
func TestMatmulKernelMatchesORT(t *testing.T) {
	runKernelCases(t, cpu.MatmulKernel, matmulKernelCases)
}

// softmaxKernelCases are the Softmax and LogSoftmax models of testdata/ort
// (gen_ort_cases.py norm_cases) with ONNX Runtime's outputs.
var softmaxKernelCases = []string{
	"softmax_bert_heads_s12", "softmax_batch2_s32", "logsoftmax_classifier", "softmax_attention_scores",
	"softmax_masked_and_nan_rows", "softmax_axis1_stays_xla",
}

// layerNormKernelCases are the LayerNormalization models of testdata/ort
// (gen_ort_cases.py norm_cases) with ONNX Runtime's outputs.
var layerNormKernelCases = []string{
	"layernorm_bert_s12", "layernorm_batch2", "layernorm_two_axes_stays_xla", "layernorm_no_bias_stays_xla",
}

// avgPoolKernelCases are the AveragePool models of testdata/ort
// (gen_ort_cases.py avgpool_cases) with ONNX Runtime's outputs.
var avgPoolKernelCases = []string{
	"avgpool_3x3_s1_exclude_pad", "avgpool_3x3_s1_include_pad", "avgpool_2x2_s2_batch2",
	"avgpool_3x3_s2_ceil_exclude_pad", "avgpool_1d_k3_s2", "avgpool_ceil_include_pad_stays_xla",
}

// TestAvgPoolKernelMatchesORT runs AveragePool models through the CPU
// average-pooling kernel (cpu.AvgPoolKernel) and through XLA's
// reduce_window, both against ONNX Runtime.
func TestAvgPoolKernelMatchesORT(t *testing.T) {
	runKernelCases(t, cpu.AvgPoolKernel, avgPoolKernelCases)
}

// TestSoftmaxKernelMatchesORT runs Softmax and LogSoftmax models through the
// CPU softmax kernel (cpu.SoftmaxKernel) and through XLA's reductions, both
// against ONNX Runtime.
func TestSoftmaxKernelMatchesORT(t *testing.T) {
	runKernelCases(t, cpu.SoftmaxKernel, softmaxKernelCases)
}

// TestLayerNormKernelMatchesORT runs LayerNormalization models through the
// CPU layer norm kernel (cpu.LayerNormKernel) and through XLA's
// reductions, both against ONNX Runtime.
func TestLayerNormKernelMatchesORT(t *testing.T) {
	runKernelCases(t, cpu.LayerNormKernel, layerNormKernelCases)
}

// runKernelCases runs cases with the CPU kernels (twice: the second time
// every call's site is known to the kernels, which then skip reading its
// attributes) and without them. With the kernels, a case's program calls
// kernel unless the case's name ends in _stays_xla.
func runKernelCases(t *testing.T, kernel string, cases []string) {
	client := nnPlugin(t)
	if !slices.Contains(client.Kernels(), kernel) {
		t.Fatalf("the CPU kernel library is not loaded, or lacks %s (%v): run make pjrt", kernel, client.KernelsError())
	}
	for _, name := range []string{"kernel", "kernel again", "xla"} {
		r := conformance.NewRunner(client)
		if name == "xla" {
			r.Lowerer = lower.New(lower.Options{Platform: client.Platform(), Kernels: []string{}}, cpu.Platform())
		}
		t.Run(name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c, func(t *testing.T) {
					res := r.Run(context.Background(), conformance.Case{Suite: "ort", Name: c, Dir: filepath.Join("testdata", "ort", c)})
					if res.Status != conformance.Passed {
						t.Errorf("%s: %s", res.Status, res.Detail)
					}
					if want := name != "xla" && !strings.HasSuffix(c, "_stays_xla"); slices.Contains(res.CustomCalls, kernel) != want {
						t.Errorf("custom calls %v: want %s called %v", res.CustomCalls, kernel, want)
					}
				})
			}
		})
	}
}
