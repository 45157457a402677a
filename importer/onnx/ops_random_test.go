package onnx_test

import (
	"context"
	"math"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// rndRun imports one random node with the given inputs, lowers it and runs
// it on PJRT. (The generator depends on nothing but the seed and the shape,
// so lowering folds it into a constant of the program.)
func rndRun(t *testing.T, client *pjrt.Client, node *onnx.Node, inputs []*onnx.ValueInfo, feeds []*tensor.Tensor) *tensor.Tensor {
	t.Helper()
	g, err := nnImport(15, node, inputs, nil, []string{"y"})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := conformance.Execute(context.Background(), client, prog, feeds)
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// rndStats returns the mean and standard deviation of t's elements.
func rndStats(t *tensor.Tensor) (mean, std float64) {
	n := float64(t.NumElements())
	for _, v := range t.Float64s() {
		mean += v
	}
	mean /= n
	for _, v := range t.Float64s() {
		std += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(std / n)
}

// TestRandomOpsDistributions checks the samples of the random operators by
// their distributions (the samples of no other implementation are
// reproducible): 90000 samples each, with bounds several standard errors
// wide; the generator is deterministic, so the test cannot flake.
func TestRandomOpsDistributions(t *testing.T) {
	client := nnPlugin(t)
	p := tensor.New(tensor.Float32, 300, 300)
	for i := range p.NumElements() {
		p.SetFloat64(i, 0.3)
	}
	for _, c := range []struct {
		name               string
		node               *onnx.Node
		inputs             []*onnx.ValueInfo
		feeds              []*tensor.Tensor
		lo, hi             float64 // every sample in [lo, hi)
		mean, std, tolMean float64
	}{
		{"uniform", nnNode("RandomUniform", nil, []string{"y"}, nnAInts("shape", 300, 300), nnAF("low", -2), nnAF("high", 3), nnAF("seed", 1)),
			nil, nil, -2, 3, 0.5, 5 / math.Sqrt(12), 0.05},
		{"normal", nnNode("RandomNormal", nil, []string{"y"}, nnAInts("shape", 300, 300), nnAF("mean", 1), nnAF("scale", 2)),
			nil, nil, -20, 20, 1, 2, 0.05},
		{"uniform like, double", nnNode("RandomUniformLike", []string{"x"}, []string{"y"}, nnAI("dtype", 11)),
			[]*onnx.ValueInfo{nnVI("x", tensor.Float32, 300, 300)}, []*tensor.Tensor{tensor.New(tensor.Float32, 300, 300)}, 0, 1, 0.5, 1 / math.Sqrt(12), 0.01},
		{"normal like", nnNode("RandomNormalLike", []string{"x"}, []string{"y"}, nnAF("seed", 3)),
			[]*onnx.ValueInfo{nnVI("x", tensor.Float32, 300, 300)}, []*tensor.Tensor{tensor.New(tensor.Float32, 300, 300)}, -10, 10, 0, 1, 0.02},
		{"bernoulli", nnNode("Bernoulli", []string{"x"}, []string{"y"}),
			[]*onnx.ValueInfo{nnVI("x", tensor.Float32, 300, 300)}, []*tensor.Tensor{p}, 0, 1.5, 0.3, math.Sqrt(0.3 * 0.7), 0.01},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := rndRun(t, client, c.node, c.inputs, c.feeds)
			for i, v := range y.Float64s() {
				if v < c.lo || v >= c.hi {
					t.Fatalf("sample %d is %v, want in [%v, %v)", i, v, c.lo, c.hi)
				}
			}
			mean, std := rndStats(y)
			if math.Abs(mean-c.mean) > c.tolMean || math.Abs(std-c.std) > 0.02*c.std {
				t.Errorf("mean %.4f, std %.4f; want %.4f, %.4f", mean, std, c.mean, c.std)
			}
		})
	}
}

// TestRandomSeeds checks that a seed fixes the samples, that seeds differ,
// and that the generator is counter-based: a small tensor's samples are the
// first samples of a large one with the same seed.
func TestRandomSeeds(t *testing.T) {
	client := nnPlugin(t)
	uniform := func(seed float32, dims ...int64) *tensor.Tensor {
		y := rndRun(t, client, nnNode("RandomUniform", nil, []string{"y"}, nnAInts("shape", dims...), nnAF("seed", seed)), nil, nil)
		return y
	}
	big, again, other, small := uniform(7, 300, 300), uniform(7, 300, 300), uniform(8, 300, 300), uniform(7, 10)
	if err := conformance.Compare(again, big, 0, 0); err != nil {
		t.Errorf("same seed, different samples: %v", err)
	}
	if err := conformance.Compare(other, big, 0, 0); err == nil {
		t.Errorf("seeds 7 and 8 give the same samples")
	}
	for i := range small.NumElements() {
		if small.Float64At(i) != big.Float64At(i) {
			t.Fatalf("sample %d of 10 is %v, of 90000 %v", i, small.Float64At(i), big.Float64At(i))
		}
	}
}

// TestDropoutRuntimeModeMatchesORT runs Dropout whose training_mode and
// ratio are graph inputs at the settings where its outputs are
// deterministic, against ONNX Runtime.
func TestDropoutRuntimeModeMatchesORT(t *testing.T) {
	runORTCases(t, []string{"dropout_runtime_training_off", "dropout_runtime_training_ratio0"})
}
