package lower_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/tensor"
)

// chainModel generates an ONNX model of about n nodes: blocks of
// Add/Mul/Relu with per-block weights, a Shape -> Reshape the importer folds,
// a transposed weight it folds, a MatMul, a Tanh, and a dead Sigmoid that
// dead-code elimination removes.
func chainModel(n int) *onnx.Model {
	const width = 16
	vi := func(name string, dims ...int64) *onnx.ValueInfo {
		ti := &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: tensor.Float32, HasShape: true}
		for _, d := range dims {
			ti.Dims = append(ti.Dims, onnx.Dim{Value: d, Known: true})
		}
		return &onnx.ValueInfo{Name: name, Type: ti}
	}
	node := func(op string, ins []string, outs ...string) *onnx.Node {
		return &onnx.Node{OpType: op, Inputs: ins, Outputs: outs}
	}
	gr := &onnx.Graph{Name: "chain", Inputs: []*onnx.ValueInfo{vi("x", 4, width)}}
	h := "x"
	for b := 0; len(gr.Nodes) < n; b++ {
		w := tensor.New(tensor.Float32, width)
		m := tensor.New(tensor.Float32, width, width)
		for i := range int64(width) {
			w.SetFloat64(i, float64(b%7)*0.01)
			m.SetFloat64(i*width+i, 1)
		}
		p := func(s string) string { return fmt.Sprintf("%s%d", s, b) }
		gr.Initializers = append(gr.Initializers, &onnx.Initializer{Name: p("w"), Tensor: w}, &onnx.Initializer{Name: p("m"), Tensor: m})
		gr.Nodes = append(gr.Nodes,
			node("Add", []string{h, p("w")}, p("add")),
			node("Mul", []string{p("add"), p("w")}, p("mul")),
			node("Relu", []string{p("mul")}, p("relu")),
			node("Shape", []string{p("relu")}, p("shape")),
			node("Reshape", []string{p("relu"), p("shape")}, p("reshape")),
			node("Transpose", []string{p("m")}, p("mt")),
			node("MatMul", []string{p("reshape"), p("mt")}, p("mm")),
			node("Tanh", []string{p("mm")}, p("tanh")),
			node("Sigmoid", []string{p("tanh")}, p("dead")),
		)
		h = p("tanh")
	}
	gr.Outputs = []*onnx.ValueInfo{{Name: h}}
	return &onnx.Model{IRVersion: 8, OpsetImports: []onnx.OpsetID{{Domain: "", Version: 17}}, Graph: gr}
}

// BenchmarkBuildLower measures importing (IR building, naming, folding,
// DCE) plus lowering a generated graph of 1k to 64k ONNX nodes. The
// ns/node metric should stay roughly constant as the graph grows.
//
//	go test ./lower -run '^$' -bench BuildLower -benchtime 1x
func BenchmarkBuildLower(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 12, 1 << 14, 1 << 16} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			m := chainModel(n)
			l := lower.New(lower.Options{}, cpu.Platform())
			b.ResetTimer()
			for range b.N {
				g, err := onnx.NewImporter().Import(m)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := l.Lower(g, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(m.Graph.Nodes)), "ns/node")
		})
	}
}

// BenchmarkLowerCompileZoo times lowering (ms/lower) and compiling on the
// PJRT CPU plugin (ms/compile) the ONNX models of the committed zoo fixtures
// at batch 3, sequence 16.
//
//	go test ./lower -run '^$' -bench LowerCompileZoo -benchtime 5x
func BenchmarkLowerCompileZoo(b *testing.B) {
	client := benchClient(b)
	defer client.Close()
	for _, m := range []string{"bert", "mobilenet_v2", "resnet18", "vit_b_16"} {
		b.Run(m, func(b *testing.B) {
			g, err := onnx.ImportFile(filepath.Join("..", "testdata", "zoo", m, "model.onnx"))
			if err != nil {
				b.Fatal(err)
			}
			dims := map[string]int64{"batch": 3, "sequence": 16}
			l := lower.New(lower.Options{}, cpu.Platform())
			var lowerT, compileT time.Duration
			for range b.N {
				t0 := time.Now()
				p, err := l.Lower(g, dims)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				exe, err := client.Compile(context.Background(), p.Module, nil)
				if err != nil {
					b.Fatal(err)
				}
				compileT += time.Since(t1)
				lowerT += t1.Sub(t0)
				exe.Close()
			}
			b.ReportMetric(float64(lowerT.Microseconds())/1000/float64(b.N), "ms/lower")
			b.ReportMetric(float64(compileT.Microseconds())/1000/float64(b.N), "ms/compile")
		})
	}
}
