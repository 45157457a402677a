package onnx_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// qdqTableOps are the ops TestQDQTableEqualsChain puts between a
// DequantizeLinear and a QuantizeLinear, reading "d" and writing "h".
var qdqTableOps = []*onnx.Node{
	nnNode("HardSwish", []string{"d"}, []string{"h"}),
	nnNode("HardSigmoid", []string{"d"}, []string{"h"}, nnAF("alpha", 1.0/6), nnAF("beta", 0.5)),
	nnNode("HardSigmoid", []string{"d"}, []string{"h"}),
	nnNode("LeakyRelu", []string{"d"}, []string{"h"}, nnAF("alpha", 0.1)),
	nnNode("Clip", []string{"d", "lo", "hi"}, []string{"h"}),
}

// TestQDQTableEqualsChain runs DequantizeLinear -> op -> QuantizeLinear
// (qdqTableOps) on all 256 values of uint8 and int8 through PJRT twice: as
// the importer's table lookups, and with each op's result also a graph
// output, which keeps the chains as the generic lowering computes them.
// The quantized outputs must be equal bit for bit.
func TestQDQTableEqualsChain(t *testing.T) {
	client := nnPlugin(t)
	scales := [][2]float32{{0.05, 0.0371}, {0.0173, 0.011}, {0.1234, 0.0893}, {0.2, 0.025}}
	for _, dt := range []tensor.DType{tensor.Uint8, tensor.Int8} {
		for _, s := range scales {
			t.Run(fmt.Sprintf("%v_%v", dt, s), func(t *testing.T) {
				table := qdqChainRun(t, client, dt, s, false)
				chain := qdqChainRun(t, client, dt, s, true)
				for k, op := range qdqTableOps {
					for i := int64(0); i < 256; i++ {
						if a, b := table[k].Int64At(i), chain[k].Int64At(i); a != b {
							t.Errorf("%s, input byte %d: table %d, chain %d", op.OpType, i, a, b)
						}
					}
				}
			})
		}
	}
}

// qdqChainRun imports, lowers and runs x (the 256 values of dt) ->
// DequantizeLinear(scale s[0], zero point 7) -> each of qdqTableOps ->
// QuantizeLinear(scale s[1], zero point 100, or 3 for int8), each op's
// result also a graph output when keep, and returns the quantized outputs.
func qdqChainRun(t *testing.T, client *pjrt.Client, dt tensor.DType, s [2]float32, keep bool) []*tensor.Tensor {
	t.Helper()
	x := tensor.New(dt, 256)
	for i := range x.Data {
		x.Data[i] = byte(i)
	}
	yz := 100.0
	if dt == tensor.Int8 {
		yz = 3
	}
	g := &onnx.Graph{Name: "g", Inputs: []*onnx.ValueInfo{nnVI("x", dt, 256)},
		Nodes: []*onnx.Node{nnNode("DequantizeLinear", []string{"x", "xs", "xz"}, []string{"d"})},
		Initializers: []*onnx.Initializer{{Name: "xs", Tensor: tensor.FromFloat32s([]float32{s[0]})}, {Name: "xz", Tensor: tensor.Scalar(dt, 7)},
			{Name: "ys", Tensor: tensor.FromFloat32s([]float32{s[1]})}, {Name: "yz", Tensor: tensor.Scalar(dt, yz)},
			{Name: "lo", Tensor: tensor.FromFloat32s([]float32{-0.5})}, {Name: "hi", Tensor: tensor.FromFloat32s([]float32{2.5})}}}
	var hs []*onnx.ValueInfo
	for k, op := range qdqTableOps {
		h, y := "h"+strconv.Itoa(k), "y"+strconv.Itoa(k)
		n := *op
		n.Outputs = []string{h}
		g.Nodes = append(g.Nodes, &n, nnNode("QuantizeLinear", []string{h, "ys", "yz"}, []string{y}))
		g.Outputs = append(g.Outputs, &onnx.ValueInfo{Name: y})
		hs = append(hs, &onnx.ValueInfo{Name: h})
	}
	if keep {
		g.Outputs = append(g.Outputs, hs...)
	}
	m := &onnx.Model{IRVersion: 8, OpsetImports: []onnx.OpsetID{{Domain: "", Version: 14}}, Graph: g}
	fg, err := onnx.NewImporter().Import(m)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(fg, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	return got[:len(qdqTableOps)]
}
