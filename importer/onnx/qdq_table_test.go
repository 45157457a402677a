package onnx

import (
	"path/filepath"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestFuseQDQTables checks which DequantizeLinear -> elementwise ->
// QuantizeLinear chains of ORT-quantized models (testdata/ort/qconv_qdq_tables_*,
// whose outputs TestQConvKernelMatchesORT compares with ORT's) become
// table lookups: each HardSwish and HardSigmoid chain, unless a chain value
// is read elsewhere or a scale is not one value.
func TestFuseQDQTables(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		edit        func(*Graph)
		tables      int
	}{
		{"uint8", "qconv_qdq_tables_u8", nil, 2},
		{"int8", "qconv_qdq_tables_s8", nil, 2},
		{"a chain value read elsewhere", "qconv_qdq_tables_u8", func(g *Graph) {
			g.Outputs = append(g.Outputs, &ValueInfo{Name: nodeOf(g, "HardSwish").Outputs[0]})
		}, 1},
		{"no input zero point", "qconv_qdq_tables_u8", func(g *Graph) {
			for _, n := range g.Nodes {
				if n.OpType == "DequantizeLinear" && len(n.Outputs) == 1 && n.Outputs[0] == nodeOf(g, "HardSwish").Inputs[0] {
					n.Inputs[2] = ""
				}
			}
		}, 1},
		{"a scale of two values", "qconv_qdq_tables_u8", func(g *Graph) {
			q := g.Nodes[indexAfter(g, nodeOf(g, "HardSigmoid"))]
			g.Initializers = append(g.Initializers, &Initializer{Name: "two", Tensor: tensor.FromFloat32s([]float32{1, 1})})
			q.Inputs[1] = "two"
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ReadModelFile(filepath.Join("testdata", "ort", tc.model, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(m.Graph)
			}
			count := map[string]int{}
			for _, n := range fuseQDQTables(m.Graph, m.Graph.Nodes) {
				count[n.OpType]++
			}
			if count["Gather"] != tc.tables || count["HardSwish"]+count["HardSigmoid"] != 2 {
				t.Errorf("got %d lookups and %d HardSwish + %d HardSigmoid (each table holds one), want %d lookups",
					count["Gather"], count["HardSwish"], count["HardSigmoid"], tc.tables)
			}
		})
	}
}

// nodeOf is g's first node of type op.
func nodeOf(g *Graph, op string) *Node {
	for _, n := range g.Nodes {
		if n.OpType == op {
			return n
		}
	}
	return nil
}

// indexAfter is the index of the node after n in g.
func indexAfter(g *Graph, n *Node) int {
	for i, m := range g.Nodes {
		if m == n {
			return i + 1
		}
	}
	return -1
}
