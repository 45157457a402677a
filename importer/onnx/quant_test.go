package onnx_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/xserve/xserve/internal/conformance"
)

// TestQuantAndContribOps runs every single-operator case of
// testdata/quant (python/make_quant_fixtures.py: the QuantizeLinear
// family, integer matmul/conv, and ONNX Runtime's com.microsoft quantized,
// fused and transformer operators) on the PJRT plugin against ONNX
// Runtime 1.23.2's outputs: integers exactly, floats within 1e-5 + 1e-4|want|.
func TestQuantAndContribOps(t *testing.T) {
	runner := conformance.NewRunner(nnPlugin(t))
	runner.RTol, runner.ATol = 1e-4, 1e-5
	dir := filepath.Join("testdata", "quant")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (make quant-fixtures writes them)", err)
	}
	if len(entries) < 90 {
		t.Fatalf("%d cases in %s, want the fixture script's ~100", len(entries), dir)
	}
	for _, e := range entries {
		c := conformance.Case{Suite: "quant", Name: e.Name(), Dir: filepath.Join(dir, e.Name())}
		t.Run(e.Name(), func(t *testing.T) {
			res := runner.Run(context.Background(), c)
			if res.Status != conformance.Passed {
				t.Errorf("%s: %s", res.Status, res.Detail)
			}
		})
	}
}

// TestQuantizedModels runs whole models that ONNX Runtime's tools wrote
// (testdata/quantmodels, python/make_quant_fixtures.py --models): the
// zoo's reduced resnet18 quantized by quantize_static (QDQ signed per
// channel, QDQ unsigned, QOperator), by quantize_dynamic, and the QDQ
// model as ONNX Runtime's own graph optimizer rewrites it; and a BERT-like
// encoder fused by transformers.optimizer (EmbedLayerNormalization,
// Attention, SkipLayerNormalization, BiasGelu) and quantized by
// quantize_dynamic (also as ONNX Runtime's optimizer rewrites that:
// DynamicQuantizeMatMul, MatMulIntegerToFloat, FusedMatMul, Gelu).
// References are ONNX Runtime 1.23.2's outputs.
func TestQuantizedModels(t *testing.T) {
	client := nnPlugin(t)
	dir := filepath.Join("testdata", "quantmodels")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (make quant-fixtures writes them)", err)
	}
	if len(entries) != 8 {
		t.Fatalf("%d models in %s, want 8", len(entries), dir)
	}
	for _, e := range entries {
		c := conformance.Case{Suite: "quantmodels", Name: e.Name(), Dir: filepath.Join(dir, e.Name())}
		t.Run(e.Name(), func(t *testing.T) {
			runner := conformance.NewRunner(client)
			runner.RTol, runner.ATol = 1e-4, 1e-4
			res := runner.Run(context.Background(), c)
			if res.Status != conformance.Passed {
				t.Errorf("%s: %s", res.Status, res.Detail)
			}
		})
	}
}
