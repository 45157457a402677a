package onnx_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
)

// runORTCases runs the named cases of testdata/ort (gen_ort_cases.py: one
// small model each, expected outputs from ONNX Runtime) through the
// conformance runner: import, lower, compile and run on PJRT, compare.
func runORTCases(t *testing.T, names []string) {
	t.Helper()
	r := conformance.NewRunner(nnPlugin(t))
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			res := r.Run(context.Background(), conformance.Case{Suite: "ort", Name: name, Dir: filepath.Join("testdata", "ort", name)})
			if res.Status != conformance.Passed {
				t.Errorf("%s: %s", res.Status, res.Detail)
			}
		})
	}
}

// TestSignalOpsMatchORT covers the window ops (periodic and symmetric,
// float and double), MelWeightMatrix, DFT in both opsets (axis attribute or
// input, real and complex, onesided, inverse, zero-padded dft_length), STFT
// (window or frame_length, onesided or not) and Det (batched, singular,
// needing row swaps) against ONNX Runtime.
func TestSignalOpsMatchORT(t *testing.T) {
	runORTCases(t, []string{
		"hannwindow_10", "hammingwindow_7", "blackmanwindow_16",
		"melweightmatrix_10x33",
		"dft17_real_axis1", "dft17_negative_axis", "dft17_onesided_len12", "dft17_complex_inverse", "dft20_axis_input", "dft20_default_axis_len4",
		"stft_window", "stft_frame_length_twosided",
		"det_4x4", "det_batched_5x5", "det_singular_and_pivot", "det_9x9",
	})
}
