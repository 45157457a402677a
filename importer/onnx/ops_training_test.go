package onnx_test

import "testing"

// TestTrainingOptimizersMatchTorch runs one step of Adagrad, Momentum
// (standard and Nesterov) and Adam, on one and two tensors and at several
// step counts, against the matching torch.optim optimizer
// (testdata/gen_torch_optim_cases.py).
func TestTrainingOptimizersMatchTorch(t *testing.T) {
	runORTCases(t, []string{
		"optim_adagrad_t0", "optim_adagrad_t5_two", "optim_momentum_t3_two",
		"optim_nesterov_t2", "optim_adam_t1", "optim_adam_t7_two",
	})
}
