package onnx

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// rdValueInfo describes a tensor input or output; a string dim is symbolic.
func rdValueInfo(name string, dt tensor.DType, dims ...any) *ValueInfo {
	ti := &TypeInfo{Kind: TypeTensor, Elem: dt, HasShape: true}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			ti.Dims = append(ti.Dims, Dim{Value: int64(v), Known: true})
		case string:
			ti.Dims = append(ti.Dims, Dim{Param: v})
		}
	}
	return &ValueInfo{Name: name, Type: ti}
}

func rdIntAttr(name string, v int64) *Attribute { return &Attribute{Name: name, Type: AttrInt, I: v} }

func rdIntsAttr(name string, v ...int64) *Attribute {
	return &Attribute{Name: name, Type: AttrInts, Ints: v}
}

func rdStrAttr(name, v string) *Attribute {
	return &Attribute{Name: name, Type: AttrString, S: []byte(v)}
}

// rdModel is a one-node model.
func rdModel(opset int64, node *Node, inputs []*ValueInfo, inits []*Initializer, outputs ...string) *Model {
	var outs []*ValueInfo
	for _, o := range outputs {
		outs = append(outs, &ValueInfo{Name: o})
	}
	return &Model{
		IRVersion:    8,
		OpsetImports: []OpsetID{{Domain: "", Version: opset}},
		Graph:        &Graph{Name: "g", Nodes: []*Node{node}, Inputs: inputs, Initializers: inits, Outputs: outs},
	}
}

func TestReductionConverters(t *testing.T) {
	x := rdValueInfo("x", tensor.Float32, "N", 3, 4)
	xi := rdValueInfo("x", tensor.Int32, "N", 3, 4)
	axes := func(v ...int64) []*Initializer { return []*Initializer{{Name: "axes", Tensor: tensor.FromInt64s(v)}} }
	cases := []struct {
		name    string
		opset   int64
		node    *Node
		inputs  []*ValueInfo
		inits   []*Initializer
		outputs []string
		targets string // the call_function targets, in order
		metas   string // the outputs' metas
		err     string // "unsupported" for ErrUnsupported, else a substring
	}{
		{name: "ReduceSum axes input", opset: 13,
			node:   &Node{OpType: "ReduceSum", Inputs: []string{"x", "axes"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{x}, inits: axes(-1), outputs: []string{"y"},
			targets: "aten.sum.dim_IntList", metas: "float32[N,3]"},
		{name: "ReduceSum axes attribute", opset: 11,
			node:   &Node{OpType: "ReduceSum", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 0, 2)}},
			inputs: []*ValueInfo{xi}, outputs: []string{"y"},
			targets: "aten.sum.dim_IntList", metas: "int32[1,3,1]"},
		{name: "ReduceSum all", opset: 13,
			node:   &Node{OpType: "ReduceSum", Inputs: []string{"x"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.sum.dim_IntList", metas: "float32[1,1,1]"},
		{name: "ReduceSum noop", opset: 13,
			node:   &Node{OpType: "ReduceSum", Inputs: []string{"x", "axes"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("noop_with_empty_axes", 1)}},
			inputs: []*ValueInfo{x, rdValueInfo("axes", tensor.Int64, 0)}, outputs: []string{"y"},
			targets: "", metas: "float32[N,3,4]"},
		{name: "ReduceSum run-time axes", opset: 13,
			node:   &Node{OpType: "ReduceSum", Inputs: []string{"x", "axes"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{x, rdValueInfo("axes", tensor.Int64, 1)}, outputs: []string{"y"},
			err: "unsupported"},
		{name: "ReduceSum bad axis", opset: 13,
			node:   &Node{OpType: "ReduceSum", Inputs: []string{"x", "axes"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{x}, inits: axes(3), outputs: []string{"y"},
			err: "out of range"},
		{name: "ReduceSum of a constant folds", opset: 13,
			node:  &Node{OpType: "ReduceSum", Inputs: []string{"c", "axes"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("keepdims", 0)}},
			inits: append(axes(0), &Initializer{Name: "c", Tensor: tensor.FromInt64s([]int64{1, 2, 3, 4}, 2, 2)}), outputs: []string{"y"},
			targets: "", metas: "int64[2]"},
		{name: "ReduceMean float", opset: 13,
			node:   &Node{OpType: "ReduceMean", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 1)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.mean.dim", metas: "float32[N,1,4]"},
		{name: "ReduceMean int", opset: 13,
			node:   &Node{OpType: "ReduceMean", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 1), rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{xi}, outputs: []string{"y"},
			targets: "aten._to_copy.default aten.mean.dim aten._to_copy.default", metas: "int32[N,4]"},
		{name: "ReduceMax opset 18 axes input", opset: 18,
			node:   &Node{OpType: "ReduceMax", Inputs: []string{"x", "axes"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{x}, inits: axes(0), outputs: []string{"y"},
			targets: "aten.amax.default", metas: "float32[3,4]"},
		{name: "ReduceMin", opset: 13,
			node:   &Node{OpType: "ReduceMin", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", -2)}},
			inputs: []*ValueInfo{xi}, outputs: []string{"y"},
			targets: "aten.amin.default", metas: "int32[N,1,4]"},
		{name: "ReduceProd two axes", opset: 13,
			node:   &Node{OpType: "ReduceProd", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 0, 2), rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{xi}, outputs: []string{"y"},
			targets: "aten.prod.dim_int aten.prod.dim_int", metas: "int32[3]"},
		{name: "ReduceProd all", opset: 13,
			node:   &Node{OpType: "ReduceProd", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.prod.default", metas: "float32[]"},
		{name: "ReduceL1", opset: 13,
			node:   &Node{OpType: "ReduceL1", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 2)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.linalg_vector_norm.default", metas: "float32[N,3,1]"},
		{name: "ReduceL2 int", opset: 13,
			node:   &Node{OpType: "ReduceL2", Inputs: []string{"x"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{xi}, outputs: []string{"y"},
			err: "unsupported"},
		{name: "ReduceSumSquare", opset: 13,
			node:   &Node{OpType: "ReduceSumSquare", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 1), rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.mul.Tensor aten.sum.dim_IntList", metas: "float32[N,4]"},
		{name: "ReduceLogSum", opset: 13,
			node:   &Node{OpType: "ReduceLogSum", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntsAttr("axes", 2, 1), rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.sum.dim_IntList aten.log.default", metas: "float32[N]"},
		{name: "ReduceLogSumExp", opset: 13,
			node:   &Node{OpType: "ReduceLogSumExp", Inputs: []string{"x"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.logsumexp.default", metas: "float32[1,1,1]"},
		{name: "ReduceLogSumExp noop", opset: 18,
			node:   &Node{OpType: "ReduceLogSumExp", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("noop_with_empty_axes", 1)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			err: "unsupported"},
		{name: "TopK K input", opset: 11,
			node:   &Node{OpType: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"v", "i"}, Attributes: []*Attribute{rdIntAttr("axis", 1), rdIntAttr("largest", 0)}},
			inputs: []*ValueInfo{x}, inits: []*Initializer{{Name: "k", Tensor: tensor.FromInt64s([]int64{2})}}, outputs: []string{"v", "i"},
			targets: "aten.topk.default getitem getitem", metas: "float32[N,2,4] int64[N,2,4]"},
		{name: "TopK k attribute, indices only", opset: 1,
			node:   &Node{OpType: "TopK", Inputs: []string{"x"}, Outputs: []string{"", "i"}, Attributes: []*Attribute{rdIntAttr("k", 4)}},
			inputs: []*ValueInfo{xi}, outputs: []string{"i"},
			targets: "aten.topk.default getitem", metas: "int64[N,3,4]"},
		{name: "TopK k too large", opset: 11,
			node:   &Node{OpType: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"v", "i"}},
			inputs: []*ValueInfo{x}, inits: []*Initializer{{Name: "k", Tensor: tensor.FromInt64s([]int64{5})}}, outputs: []string{"v", "i"},
			err: "k 5 is larger than dim 2 of size 4"},
		{name: "TopK run-time K", opset: 11,
			node:   &Node{OpType: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"v", "i"}},
			inputs: []*ValueInfo{x, rdValueInfo("k", tensor.Int64, 1)}, outputs: []string{"v", "i"},
			targets: "aten.topk.default aten.view.default aten.clamp.default getitem getitem", metas: "float32[N,3,4] int64[N,3,4] int64[] int64[]"}, // bounded: the whole axis sorted, K clamped to it is the valid count
		{name: "TopK run-time K over a symbolic axis", opset: 11,
			node:   &Node{OpType: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"v", "i"}, Attributes: []*Attribute{rdIntAttr("axis", 0)}},
			inputs: []*ValueInfo{x, rdValueInfo("k", tensor.Int64, 1)}, outputs: []string{"v", "i"},
			err: "unsupported"},
		{name: "ArgMax", opset: 13,
			node:   &Node{OpType: "ArgMax", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("axis", -1), rdIntAttr("keepdims", 0)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.argmax.default", metas: "int64[N,3]"},
		{name: "ArgMin select_last_index", opset: 13,
			node:   &Node{OpType: "ArgMin", Inputs: []string{"x"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("axis", 1), rdIntAttr("select_last_index", 1)}},
			inputs: []*ValueInfo{x}, outputs: []string{"y"},
			targets: "aten.flip.default aten.argmin.default aten.sub.Tensor", metas: "int64[N,1,4]"},
		{name: "CumSum", opset: 14,
			node:   &Node{OpType: "CumSum", Inputs: []string{"x", "axis"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{xi}, inits: []*Initializer{{Name: "axis", Tensor: tensor.Scalar(tensor.Int32, -1)}}, outputs: []string{"y"},
			targets: "aten.cumsum.default", metas: "int32[N,3,4]"},
		{name: "CumSum exclusive reverse", opset: 14,
			node:   &Node{OpType: "CumSum", Inputs: []string{"x", "axis"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdIntAttr("exclusive", 1), rdIntAttr("reverse", 1)}},
			inputs: []*ValueInfo{x}, inits: []*Initializer{{Name: "axis", Tensor: tensor.Scalar(tensor.Int64, 1)}}, outputs: []string{"y"},
			targets: "aten.flip.default aten.slice.Tensor aten.constant_pad_nd.default aten.cumsum.default aten.flip.default", metas: "float32[N,3,4]"},
		{name: "CumSum run-time axis", opset: 14,
			node:   &Node{OpType: "CumSum", Inputs: []string{"x", "axis"}, Outputs: []string{"y"}},
			inputs: []*ValueInfo{rdValueInfo("x", tensor.Float64, 2, 3), rdValueInfo("axis", tensor.Int32)}, outputs: []string{"y"},
			targets: "aten.cumsum.default aten.cumsum.default aten.eq.Scalar aten.eq.Scalar aten.logical_or.default aten.where.self", metas: "float64[2,3]"},
		{name: "NLL", opset: 13,
			node: &Node{OpType: "NegativeLogLikelihoodLoss", Inputs: []string{"x", "t", "w"}, Outputs: []string{"y"},
				Attributes: []*Attribute{rdStrAttr("reduction", "none"), rdIntAttr("ignore_index", 2)}},
			inputs:  []*ValueInfo{x, rdValueInfo("t", tensor.Int64, "N", 4), rdValueInfo("w", tensor.Float32, 3)},
			outputs: []string{"y"},
			targets: "aten.nll_loss_forward.default getitem", metas: "float32[N,4]"},
		{name: "NLL bad reduction", opset: 13,
			node:   &Node{OpType: "NegativeLogLikelihoodLoss", Inputs: []string{"x", "t"}, Outputs: []string{"y"}, Attributes: []*Attribute{rdStrAttr("reduction", "max")}},
			inputs: []*ValueInfo{x, rdValueInfo("t", tensor.Int64, "N", 4)}, outputs: []string{"y"},
			err: "unsupported"},
		{name: "SoftmaxCrossEntropyLoss", opset: 13,
			node:    &Node{OpType: "SoftmaxCrossEntropyLoss", Inputs: []string{"x", "t"}, Outputs: []string{"y", "logp"}},
			inputs:  []*ValueInfo{x, rdValueInfo("t", tensor.Int32, "N", 4)},
			outputs: []string{"y", "logp"},
			targets: "aten._log_softmax.default aten.nll_loss_forward.default getitem", metas: "float32[] float32[N,3,4]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := NewImporter().Import(rdModel(c.opset, c.node, c.inputs, c.inits, c.outputs...))
			if c.err != "" {
				switch {
				case err == nil:
					t.Fatalf("imported; want error %q", c.err)
				case c.err == "unsupported":
					if !errors.Is(err, ErrUnsupported) {
						t.Fatalf("error %v does not wrap ErrUnsupported", err)
					}
				case !strings.Contains(err.Error(), c.err):
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var targets, metas []string
			for _, n := range g.Nodes() {
				if n.Opcode == fxgraph.CallFunction {
					targets = append(targets, n.Target)
				}
			}
			for _, o := range g.Outputs() {
				metas = append(metas, o.Meta.String())
			}
			if got := strings.Join(targets, " "); got != c.targets {
				t.Errorf("targets = %q, want %q", got, c.targets)
			}
			if got := strings.Join(metas, " "); got != c.metas {
				t.Errorf("output metas = %q, want %q", got, c.metas)
			}
		})
	}
}
