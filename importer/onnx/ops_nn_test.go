package onnx_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// nnVI describes a tensor input; a string dim is symbolic.
func nnVI(name string, dt tensor.DType, dims ...any) *onnx.ValueInfo {
	ti := &onnx.TypeInfo{Kind: onnx.TypeTensor, Elem: dt, HasShape: true}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			ti.Dims = append(ti.Dims, onnx.Dim{Value: int64(v), Known: true})
		case string:
			ti.Dims = append(ti.Dims, onnx.Dim{Param: v})
		}
	}
	return &onnx.ValueInfo{Name: name, Type: ti}
}

func nnAI(name string, v int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
}

func nnAF(name string, v float32) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrFloat, F: v}
}

func nnAS(name, v string) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrString, S: []byte(v)}
}

func nnAInts(name string, v ...int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
}

func nnNode(op string, ins, outs []string, attrs ...*onnx.Attribute) *onnx.Node {
	return &onnx.Node{OpType: op, Inputs: ins, Outputs: outs, Attributes: attrs}
}

func nnImport(opset int64, node *onnx.Node, inputs []*onnx.ValueInfo, inits []*onnx.Initializer, outputs []string) (*fxgraph.Graph, error) {
	var outs []*onnx.ValueInfo
	for _, o := range outputs {
		outs = append(outs, &onnx.ValueInfo{Name: o})
	}
	m := &onnx.Model{
		IRVersion:    8,
		OpsetImports: []onnx.OpsetID{{Domain: "", Version: opset}},
		Graph:        &onnx.Graph{Name: "g", Nodes: []*onnx.Node{node}, Inputs: inputs, Initializers: inits, Outputs: outs},
	}
	return onnx.NewImporter().Import(m)
}

// nnOutputMetas lists the metas of g's outputs, space-separated.
func nnOutputMetas(g *fxgraph.Graph) string {
	var metas []string
	for _, o := range g.Outputs() {
		metas = append(metas, o.Val().String())
	}
	return strings.Join(metas, " ")
}

// nnTargets lists the call_function targets of g in order, short names.
func nnTargets(g *fxgraph.Graph) string {
	var out []string
	for _, n := range g.Nodes() {
		if n.Opcode == fxgraph.CallFunction {
			out = append(out, strings.TrimPrefix(n.Target, "aten."))
		}
	}
	return strings.Join(out, " ")
}

func TestNNConverters(t *testing.T) {
	f32 := tensor.Float32
	img := nnVI("x", f32, "N", 2, 7, 5)
	w := nnVI("w", f32, 4, 2, 3, 3)
	cases := []struct {
		name    string
		opset   int64
		node    *onnx.Node
		inputs  []*onnx.ValueInfo
		inits   []*onnx.Initializer
		outputs []string
		targets string
		metas   string // output metas, space separated
		err     string // "unsupported: ..." for onnx.ErrUnsupported, else a substring
	}{
		{name: "Conv symmetric", opset: 11, node: nnNode("Conv", []string{"x", "w"}, []string{"y"}, nnAInts("pads", 1, 1, 1, 1), nnAInts("strides", 2, 2)),
			inputs: []*onnx.ValueInfo{img, w}, targets: "convolution.default", metas: "float32[N,4,4,3]"},
		{name: "Conv asymmetric pads", opset: 11, node: nnNode("Conv", []string{"x", "w"}, []string{"y"}, nnAInts("pads", 1, 0, 1, 0), nnAInts("strides", 2, 2)),
			inputs: []*onnx.ValueInfo{img, w}, targets: "convolution.default", metas: "float32[N,4,4,2]"},
		{name: "Conv SAME_UPPER", opset: 11, node: nnNode("Conv", []string{"x", "w"}, []string{"y"}, nnAS("auto_pad", "SAME_UPPER"), nnAInts("strides", 2, 2)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, 1, 2, 6, 6), w}, targets: "constant_pad_nd.default convolution.default", metas: "float32[1,4,3,3]"},
		{name: "Conv groups bias", opset: 11, node: nnNode("Conv", []string{"x", "w", "b"}, []string{"y"}, nnAI("group", 2)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, 1, 4, 5, 5), nnVI("w", f32, 6, 2, 3, 3), nnVI("b", f32, 6)}, targets: "convolution.default", metas: "float32[1,6,3,3]"},
		{name: "Conv of ints", opset: 11, node: nnNode("Conv", []string{"x", "w"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{nnVI("x", tensor.Int32, 1, 2, 5, 5), nnVI("w", tensor.Int32, 4, 2, 3, 3)}, err: "unsupported: convolution of int32"},
		{name: "ConvTranspose output_shape", opset: 11, node: nnNode("ConvTranspose", []string{"x", "w"}, []string{"y"}, nnAInts("output_shape", 10, 8), nnAInts("strides", 3, 2)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, 1, 1, 3, 3), nnVI("w", f32, 1, 2, 3, 3)}, targets: "convolution.default", metas: "float32[1,2,10,8]"},
		{name: "ConvTranspose asymmetric pads", opset: 11, node: nnNode("ConvTranspose", []string{"x", "w"}, []string{"y"}, nnAInts("pads", 1, 2, 0, 1), nnAInts("strides", 3, 2)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, 1, 1, 3, 3), nnVI("w", f32, 1, 2, 3, 3)}, targets: "convolution.default", metas: "float32[1,2,8,4]"},
		{name: "Gemm transA with C", opset: 13, node: nnNode("Gemm", []string{"a", "b", "c"}, []string{"y"}, nnAI("transA", 1), nnAF("beta", 0.5)),
			inputs:  []*onnx.ValueInfo{nnVI("a", f32, 6, 3), nnVI("b", f32, 6, 4), nnVI("c", f32, 1, 4)},
			targets: "permute.default addmm.default", metas: "float32[3,4]"},
		{name: "Gemm no C alpha", opset: 13, node: nnNode("Gemm", []string{"a", "b"}, []string{"y"}, nnAI("transB", 1), nnAF("alpha", 2)),
			inputs: []*onnx.ValueInfo{nnVI("a", f32, "M", 3), nnVI("b", f32, 4, 3)}, targets: "permute.default addmm.default", metas: "float32[M,4]"},
		{name: "Gemm plain", opset: 13, node: nnNode("Gemm", []string{"a", "b"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{nnVI("a", f32, "M", 3), nnVI("b", f32, 3, 4)}, targets: "mm.default", metas: "float32[M,4]"},
		{name: "MatMul batched vector", opset: 13, node: nnNode("MatMul", []string{"a", "b"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{nnVI("a", f32, "B", 2, 3), nnVI("b", f32, 3)}, targets: "matmul.default", metas: "float32[B,2]"},
		{name: "Softmax 13", opset: 13, node: nnNode("Softmax", []string{"x"}, []string{"y"}, nnAI("axis", 1)),
			inputs: []*onnx.ValueInfo{img}, targets: "_softmax.default", metas: "float32[N,2,7,5]"},
		{name: "Softmax 11 coerces to 2-D", opset: 11, node: nnNode("Softmax", []string{"x"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{img}, targets: "sym_size.int view.default _softmax.default view.default", metas: "float32[N,2,7,5]"},
		{name: "LogSoftmax 11 last axis", opset: 11, node: nnNode("LogSoftmax", []string{"x"}, []string{"y"}, nnAI("axis", -1)),
			inputs: []*onnx.ValueInfo{img}, targets: "_log_softmax.default", metas: "float32[N,2,7,5]"},
		{name: "Hardmax 13", opset: 13, node: nnNode("Hardmax", []string{"x"}, []string{"y"}, nnAI("axis", 2)),
			inputs: []*onnx.ValueInfo{img}, targets: "argmax.default eq.Tensor _to_copy.default", metas: "float32[N,2,7,5]"},
		{name: "BatchNormalization", opset: 15, node: nnNode("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y"}, nnAF("epsilon", 1e-3)),
			inputs:  []*onnx.ValueInfo{img, nnVI("s", f32, 2), nnVI("b", f32, 2), nnVI("m", f32, 2), nnVI("v", f32, 2)},
			targets: "_native_batch_norm_legit_no_training.default getitem", metas: "float32[N,2,7,5]"},
		{name: "BatchNormalization training", opset: 15, node: nnNode("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y"}, nnAI("training_mode", 1)),
			inputs:  []*onnx.ValueInfo{img, nnVI("s", f32, 2), nnVI("b", f32, 2), nnVI("m", f32, 2), nnVI("v", f32, 2)},
			targets: "mean.dim var.correction _native_batch_norm_legit_no_training.default getitem", metas: "float32[N,2,7,5]"},
		{name: "BatchNormalization training stats", opset: 15, node: nnNode("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y", "rm", "rv"}, nnAI("training_mode", 1)),
			inputs: []*onnx.ValueInfo{img, nnVI("s", f32, 2), nnVI("b", f32, 2), nnVI("m", f32, 2), nnVI("v", f32, 2)}, outputs: []string{"y", "rm", "rv"},
			targets: "mean.dim var.correction _native_batch_norm_legit_no_training.default getitem mul.Scalar mul.Scalar add.Tensor mul.Scalar mul.Scalar add.Tensor",
			metas:   "float32[N,2,7,5] float32[2] float32[2]"},
		{name: "BatchNormalization is_test=0", opset: 6, node: nnNode("BatchNormalization", []string{"x", "s", "b", "m", "v"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{img, nnVI("s", f32, 2), nnVI("b", f32, 2), nnVI("m", f32, 2), nnVI("v", f32, 2)},
			err:    "unsupported: training mode"},
		{name: "LayerNormalization all outputs", opset: 17, node: nnNode("LayerNormalization", []string{"x", "s", "b"}, []string{"y", "mean", "inv"}, nnAI("axis", 2)),
			inputs: []*onnx.ValueInfo{img, nnVI("s", f32, 7, 5), nnVI("b", f32, 7, 5)}, outputs: []string{"y", "mean", "inv"},
			targets: "native_layer_norm.default getitem getitem getitem", metas: "float32[N,2,7,5] float32[N,2,1,1] float32[N,2,1,1]"},
		{name: "LayerNormalization f16 stashes in f32", opset: 17, node: nnNode("LayerNormalization", []string{"x", "s"}, []string{"y"}),
			inputs:  []*onnx.ValueInfo{nnVI("x", tensor.Float16, "N", 8), nnVI("s", tensor.Float16, 8)},
			targets: "_to_copy.default _to_copy.default native_layer_norm.default getitem _to_copy.default", metas: "float16[N,8]"},
		{name: "InstanceNormalization symbolic batch", opset: 6, node: nnNode("InstanceNormalization", []string{"x", "s", "b"}, []string{"y"}),
			inputs:  []*onnx.ValueInfo{img, nnVI("s", f32, 2), nnVI("b", f32, 2)},
			targets: "sym_size.int native_group_norm.default getitem", metas: "float32[N,2,7,5]"},
		{name: "MaxPool with indices", opset: 12, node: nnNode("MaxPool", []string{"x"}, []string{"y", "i"}, nnAInts("kernel_shape", 2, 2), nnAInts("strides", 2, 2), nnAI("storage_order", 1)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, 2, 3, 4, 6)}, outputs: []string{"y", "i"},
			targets: "max_pool2d_with_indices.default getitem getitem div.Scalar_mode remainder.Scalar mul.Scalar add.Tensor add.Tensor",
			metas:   "float32[2,3,2,3] int64[2,3,2,3]"},
		{name: "MaxPool same_upper", opset: 12, node: nnNode("MaxPool", []string{"x"}, []string{"y"}, nnAInts("kernel_shape", 2, 2), nnAS("auto_pad", "SAME_UPPER")),
			inputs: []*onnx.ValueInfo{nnVI("x", tensor.Uint8, "N", 3, 4, 6)}, targets: "constant_pad_nd.default max_pool2d_with_indices.default getitem", metas: "uint8[N,3,4,6]"},
		{name: "MaxPool 1d", opset: 12, node: nnNode("MaxPool", []string{"x"}, []string{"y"}, nnAInts("kernel_shape", 3), nnAInts("dilations", 2)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, "N", 3, 10)}, targets: "max_pool1d.default", metas: "float32[N,3,6]"},
		{name: "MaxPool ceil window in padding", opset: 12, node: nnNode("MaxPool", []string{"x"}, []string{"y"}, nnAInts("kernel_shape", 2), nnAInts("strides", 2), nnAInts("pads", 1, 1), nnAI("ceil_mode", 1)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, 1, 1, 5)}, targets: "max_pool1d.default", metas: "float32[1,1,3]"}, // the last window, starting in the padding, is dropped
		{name: "AveragePool asymmetric exclude pad", opset: 11, node: nnNode("AveragePool", []string{"x"}, []string{"y"}, nnAInts("kernel_shape", 3, 3), nnAInts("pads", 0, 1, 1, 2)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, "N", 3, 5, 5)}, targets: "constant_pad_nd.default avg_pool2d.default mul.Tensor", metas: "float32[N,3,4,6]"},
		{name: "AveragePool count_include_pad", opset: 11, node: nnNode("AveragePool", []string{"x"}, []string{"y"}, nnAInts("kernel_shape", 3), nnAInts("pads", 1, 1), nnAI("count_include_pad", 1)),
			inputs: []*onnx.ValueInfo{nnVI("x", f32, "N", 3, 5)}, targets: "avg_pool1d.default", metas: "float32[N,3,5]"},
		{name: "GlobalAveragePool", opset: 1, node: nnNode("GlobalAveragePool", []string{"x"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{img}, targets: "mean.dim", metas: "float32[N,2,1,1]"},
		{name: "GlobalMaxPool", opset: 1, node: nnNode("GlobalMaxPool", []string{"x"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{img}, targets: "amax.default", metas: "float32[N,2,1,1]"},
		{name: "Resize constant scales", opset: 13, node: nnNode("Resize", []string{"x", "", "sc"}, []string{"y"}, nnAS("mode", "linear")),
			inputs: []*onnx.ValueInfo{img}, inits: []*onnx.Initializer{{Name: "sc", Tensor: tensor.FromFloat32s([]float32{1, 1, 2, 0.5})}},
			targets: "xserve.resize", metas: "float32[N,2,14,2]"},
		{name: "Resize sizes from input values", opset: 13, node: nnNode("Resize", []string{"x", "", "", "sz"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{img, nnVI("sz", tensor.Int64, 4)}, err: `unsupported: operand "sz" must be a constant but is computed from graph inputs sz`},
		{name: "Resize antialias", opset: 18, node: nnNode("Resize", []string{"x", "", "sc"}, []string{"y"}, nnAI("antialias", 1)),
			inputs: []*onnx.ValueInfo{img}, inits: []*onnx.Initializer{{Name: "sc", Tensor: tensor.FromFloat32s([]float32{1, 1, 2, 2})}},
			targets: "xserve.resize", metas: "float32[N,2,14,10]"},
		{name: "Resize 18 axes", opset: 18, node: nnNode("Resize", []string{"x", "", "", "sz"}, []string{"y"}, nnAInts("axes", 3, 2)),
			inputs: []*onnx.ValueInfo{img}, inits: []*onnx.Initializer{{Name: "sz", Tensor: tensor.FromInt64s([]int64{10, 3})}},
			targets: "xserve.resize", metas: "float32[N,2,3,10]"},
		{name: "Upsample 7", opset: 7, node: nnNode("Upsample", []string{"x"}, []string{"y"}, &onnx.Attribute{Name: "scales", Type: onnx.AttrFloats, Floats: []float32{1, 1, 2, 3}}),
			inputs: []*onnx.ValueInfo{img}, targets: "xserve.resize", metas: "float32[N,2,14,15]"},
		{name: "LRN", opset: 13, node: nnNode("LRN", []string{"x"}, []string{"y"}, nnAI("size", 2)),
			inputs:  []*onnx.ValueInfo{img},
			targets: "mul.Tensor view.default constant_pad_nd.default avg_pool2d.default sym_size.int view.default mul.Scalar add.Scalar pow.Tensor_Scalar div.Tensor",
			metas:   "float32[N,2,7,5]"},
		{name: "Einsum batch matmul", opset: 12, node: nnNode("Einsum", []string{"a", "b"}, []string{"y"}, nnAS("equation", "bij,bjk->bik")),
			inputs:  []*onnx.ValueInfo{nnVI("a", f32, 2, 3, 4), nnVI("b", f32, 2, 4, 5)},
			targets: "view.default view.default bmm.default view.default", metas: "float32[2,3,5]"},
		{name: "Einsum symbolic", opset: 12, node: nnNode("Einsum", []string{"a"}, []string{"y"}, nnAS("equation", "ij->ji")),
			inputs: []*onnx.ValueInfo{nnVI("a", f32, "N", 4)}, err: "unsupported: Einsum with symbolic dims"},
		{name: "ConvInteger", opset: 10, node: nnNode("ConvInteger", []string{"x", "w", "xz"}, []string{"y"}, nnAInts("pads", 1, 1, 1, 1)),
			inputs:  []*onnx.ValueInfo{nnVI("x", tensor.Uint8, 1, 1, 3, 3), nnVI("w", tensor.Uint8, 1, 1, 2, 2), nnVI("xz", tensor.Uint8)},
			targets: "_to_copy.default _to_copy.default sub.Tensor _to_copy.default convolution.default", metas: "int32[1,1,4,4]"},
		{name: "QLinearMatMul", opset: 10, node: nnNode("QLinearMatMul", []string{"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{nnVI("a", tensor.Int8, 2, 4), nnVI("as", f32), nnVI("az", tensor.Int8), nnVI("b", tensor.Int8, 4, 3),
				nnVI("bs", f32, 3), nnVI("bz", tensor.Int8, 3), nnVI("ys", f32), nnVI("yz", tensor.Int8)},
			targets: "_to_copy.default _to_copy.default sub.Tensor _to_copy.default _to_copy.default view.default sub.Tensor matmul.default " +
				"view.default mul.Tensor div.Tensor _to_copy.default mul.Tensor round.default _to_copy.default add.Tensor clamp.default _to_copy.default",
			metas: "int8[2,3]"},
		{name: "MaxUnpool", opset: 11, node: nnNode("MaxUnpool", []string{"x", "i"}, []string{"y"}, nnAInts("kernel_shape", 2, 2), nnAInts("strides", 2, 2)),
			inputs:  []*onnx.ValueInfo{nnVI("x", f32, "N", 1, 2, 2), nnVI("i", tensor.Int64, "N", 1, 2, 2)},
			targets: "sym_size.int full.default view.default view.default view.default scatter.src view.default", metas: "float32[N,1,4,4]"},
		{name: "GridSample", opset: 16, node: nnNode("GridSample", []string{"x", "g"}, []string{"y"}, nnAS("mode", "bicubic"), nnAS("padding_mode", "border")),
			inputs: []*onnx.ValueInfo{img, nnVI("g", f32, "N", 3, 4, 2)}, targets: "grid_sampler_2d.default", metas: "float32[N,2,3,4]"},
		{name: "GridSample opset 20 name", opset: 20, node: nnNode("GridSample", []string{"x", "g"}, []string{"y"}, nnAS("mode", "bicubic")),
			inputs: []*onnx.ValueInfo{img, nnVI("g", f32, "N", 3, 4, 2)}, err: `unsupported: GridSample mode "bicubic" at opset 20`},
		{name: "RoiAlign", opset: 16, node: nnNode("RoiAlign", []string{"x", "r", "i"}, []string{"y"}, nnAI("sampling_ratio", 2), nnAI("output_height", 3)),
			inputs:  []*onnx.ValueInfo{img, nnVI("r", f32, "R", 4), nnVI("i", tensor.Int64, "R")},
			targets: "xserve.roi_align", metas: "float32[R,2,3,1]"},
		{name: "RoiAlign adaptive sampling", opset: 16, node: nnNode("RoiAlign", []string{"x", "r", "i"}, []string{"y"}),
			inputs: []*onnx.ValueInfo{img, nnVI("r", f32, "R", 4), nnVI("i", tensor.Int64, "R")}, err: "unsupported: RoiAlign with adaptive sampling_ratio"},
		{name: "MeanVarianceNormalization", opset: 13, node: nnNode("MeanVarianceNormalization", []string{"x"}, []string{"y"}),
			inputs:  []*onnx.ValueInfo{img},
			targets: "mean.dim mul.Tensor mean.dim mul.Tensor sub.Tensor sqrt.default add.Scalar sub.Tensor div.Tensor", metas: "float32[N,2,7,5]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outs := tc.outputs
			if outs == nil {
				outs = []string{"y"}
			}
			g, err := nnImport(tc.opset, tc.node, tc.inputs, tc.inits, outs)
			if tc.err != "" {
				if err == nil {
					t.Fatalf("imported; want error %q", tc.err)
				}
				want, unsup := strings.CutPrefix(tc.err, "unsupported: ")
				if unsup && !errors.Is(err, onnx.ErrUnsupported) {
					t.Errorf("error %v does not wrap onnx.ErrUnsupported", err)
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want it to contain %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := nnTargets(g); got != tc.targets {
				t.Errorf("targets %q, want %q", got, tc.targets)
			}
			if got := nnOutputMetas(g); got != tc.metas {
				t.Errorf("output metas %q, want %q", got, tc.metas)
			}
		})
	}
}

// TestNNResizeFoldsShapeSizes checks that Resize sizes computed from the
// input's shape stay a node at import and become constants when the graph
// is specialized.
func TestNNResizeFoldsShapeSizes(t *testing.T) {
	m := &onnx.Model{
		IRVersion:    8,
		OpsetImports: []onnx.OpsetID{{Domain: "", Version: 13}},
		Graph: &onnx.Graph{Name: "g",
			Nodes: []*onnx.Node{
				nnNode("Shape", []string{"x"}, []string{"s"}),
				nnNode("Mul", []string{"s", "two"}, []string{"sz"}),
				nnNode("Resize", []string{"x", "", "", "sz"}, []string{"y"}),
			},
			Inputs:       []*onnx.ValueInfo{nnVI("x", tensor.Float32, "N", 2, 3, 4)},
			Initializers: []*onnx.Initializer{{Name: "two", Tensor: tensor.FromInt64s([]int64{1, 1, 2, 2})}},
			Outputs:      []*onnx.ValueInfo{{Name: "y"}},
		},
	}
	g, err := onnx.NewImporter().Import(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Outputs()[0].Val().String(); got != "float32[?,?,?,?]" {
		t.Errorf("imported meta %s, want unknown dims", got)
	}
	s, err := lower.New(lower.Options{}).IR().Specialize(g, map[string]int64{"N": 5}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Outputs()[0].Val().String(); got != "float32[5,2,6,8]" {
		t.Errorf("specialized meta %s, want float32[5,2,6,8]", got)
	}
}

func nnPlugin(t *testing.T) *pjrt.Client {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
	if err != nil {
		t.Fatalf("no PJRT plugin (run make pjrt): %v", err)
	}
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nnSeq returns n reproducible values, distinct enough to have no ties.
func nnSeq(n int64, seed float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Round(math.Sin(float64(i)*1.7+seed)*1000) / 256
	}
	return out
}

func nnT(dt tensor.DType, vals []float64, dims ...int64) *tensor.Tensor {
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return t
}

// TestNNRun imports one-node models, runs them on the PJRT plugin and
// compares with references computed here in float64.
func TestNNRun(t *testing.T) {
	client := nnPlugin(t)
	f32 := tensor.Float32
	a := nnSeq(2*3, 0.1)
	b := nnSeq(3*4, 0.2)
	c := nnSeq(4*2, 0.3)
	sq := nnSeq(3*3, 0.4)
	x4 := nnSeq(2*3*5*4, 0.5)
	cases := []struct {
		name   string
		opset  int64
		node   *onnx.Node
		inputs []*tensor.Tensor
		outs   []string
		want   func() [][]float64
		tol    float64
	}{
		{"Einsum chain", 12, nnNode("Einsum", []string{"a", "b", "c"}, []string{"y"}, nnAS("equation", "ij,jk,kl->il")),
			[]*tensor.Tensor{nnT(f32, a, 2, 3), nnT(f32, b, 3, 4), nnT(f32, c, 4, 2)}, nil,
			func() [][]float64 {
				var out []float64
				for i := 0; i < 2; i++ {
					for l := 0; l < 2; l++ {
						s := 0.0
						for j := 0; j < 3; j++ {
							for k := 0; k < 4; k++ {
								s += a[i*3+j] * b[j*4+k] * c[k*2+l]
							}
						}
						out = append(out, s)
					}
				}
				return [][]float64{out}
			}, 1e-5},
		{"Einsum broadcast ellipsis", 12, nnNode("Einsum", []string{"a", "b"}, []string{"y"}, nnAS("equation", "...ij,...jk->...ik")),
			[]*tensor.Tensor{nnT(f32, a, 1, 2, 3), nnT(f32, nnSeq(2*3*4, 0.6), 2, 3, 4)}, nil,
			func() [][]float64 {
				bb := nnSeq(2*3*4, 0.6)
				var out []float64
				for n := 0; n < 2; n++ {
					for i := 0; i < 2; i++ {
						for k := 0; k < 4; k++ {
							s := 0.0
							for j := 0; j < 3; j++ {
								s += a[i*3+j] * bb[(n*3+j)*4+k]
							}
							out = append(out, s)
						}
					}
				}
				return [][]float64{out}
			}, 1e-5},
		{"Einsum trace", 12, nnNode("Einsum", []string{"a"}, []string{"y"}, nnAS("equation", "ii")),
			[]*tensor.Tensor{nnT(f32, sq, 3, 3)}, nil,
			func() [][]float64 { return [][]float64{{sq[0] + sq[4] + sq[8]}} }, 1e-6},
		{"Einsum outer transposed", 12, nnNode("Einsum", []string{"a", "b"}, []string{"y"}, nnAS("equation", "i,j->ji")),
			[]*tensor.Tensor{nnT(f32, a[:2], 2), nnT(f32, b[:3], 3)}, nil,
			func() [][]float64 {
				var out []float64
				for j := 0; j < 3; j++ {
					for i := 0; i < 2; i++ {
						out = append(out, a[i]*b[j])
					}
				}
				return [][]float64{out}
			}, 1e-6},
		{"Softmax opset 11 flattens", 11, nnNode("Softmax", []string{"x"}, []string{"y"}, nnAI("axis", 1)),
			[]*tensor.Tensor{nnT(f32, x4, 2, 3, 5, 4)}, nil,
			func() [][]float64 {
				out := make([]float64, len(x4))
				for n := 0; n < 2; n++ {
					row := x4[n*60 : (n+1)*60]
					s := 0.0
					for _, v := range row {
						s += math.Exp(v)
					}
					for i, v := range row {
						out[n*60+i] = math.Exp(v) / s
					}
				}
				return [][]float64{out}
			}, 1e-5},
		{"Hardmax first maximum", 13, nnNode("Hardmax", []string{"x"}, []string{"y"}, nnAI("axis", 0)),
			[]*tensor.Tensor{nnT(f32, []float64{1, 5, 3, 5, 5, 0}, 3, 2)}, nil,
			func() [][]float64 { return [][]float64{{0, 1, 0, 0, 1, 0}} }, 0},
		{"MaxPool indices column-major", 12, nnNode("MaxPool", []string{"x"}, []string{"y", "i"}, nnAInts("kernel_shape", 2, 2), nnAInts("strides", 2, 1), nnAI("storage_order", 1)),
			[]*tensor.Tensor{nnT(f32, x4, 2, 3, 5, 4)}, []string{"y", "i"},
			func() [][]float64 {
				var vals, idx []float64
				for nc := 0; nc < 6; nc++ {
					for oh := 0; oh < 2; oh++ {
						for ow := 0; ow < 3; ow++ {
							best, bi := math.Inf(-1), 0
							for kh := 0; kh < 2; kh++ {
								for kw := 0; kw < 2; kw++ {
									h, w := oh*2+kh, ow+kw
									if v := x4[nc*20+h*4+w]; v > best {
										best, bi = v, nc*20+w*5+h
									}
								}
							}
							vals, idx = append(vals, best), append(idx, float64(bi))
						}
					}
				}
				return [][]float64{vals, idx}
			}, 0},
		{"AveragePool asymmetric pads exclude pad", 11, nnNode("AveragePool", []string{"x"}, []string{"y"}, nnAInts("kernel_shape", 3, 2), nnAInts("pads", 0, 1, 2, 0), nnAInts("strides", 2, 1)),
			[]*tensor.Tensor{nnT(f32, x4, 2, 3, 5, 4)}, nil,
			func() [][]float64 {
				var out []float64
				for nc := 0; nc < 6; nc++ {
					for oh := 0; oh < 3; oh++ { // (5+0+2-3)/2+1
						for ow := 0; ow < 4; ow++ { // (4+1+0-2)/1+1
							s, n := 0.0, 0
							for kh := 0; kh < 3; kh++ {
								for kw := 0; kw < 2; kw++ {
									h, w := oh*2+kh, ow+kw-1
									if h < 5 && w >= 0 && w < 4 {
										s += x4[nc*20+h*4+w]
										n++
									}
								}
							}
							out = append(out, s/float64(n))
						}
					}
				}
				return [][]float64{out}
			}, 1e-5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ins []*onnx.ValueInfo
			for i, x := range tc.inputs {
				dims := make([]any, len(x.Shape))
				for j, d := range x.Shape {
					dims[j] = int(d)
				}
				ins = append(ins, nnVI(tc.node.Inputs[i], x.DType, dims...))
			}
			outs := tc.outs
			if outs == nil {
				outs = []string{"y"}
			}
			g, err := nnImport(tc.opset, tc.node, ins, nil, outs)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, tc.inputs)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want()
			for i := range want {
				if got[i].NumElements() != int64(len(want[i])) {
					t.Fatalf("output %d has %d elements (%v), want %d", i, got[i].NumElements(), got[i].Shape, len(want[i]))
				}
				for j, w := range want[i] {
					if g := got[i].Float64At(int64(j)); math.Abs(g-w) > tc.tol*(1+math.Abs(w)) {
						t.Fatalf("output %d element %d = %v, want %v", i, j, g, w)
					}
				}
			}
		})
	}
}
