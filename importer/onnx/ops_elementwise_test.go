package onnx

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// ewVI describes a tensor input; a string dim is symbolic.
func ewVI(name string, dt tensor.DType, dims ...any) *ValueInfo {
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

func ewAttrI(name string, v int64) *Attribute { return &Attribute{Name: name, Type: AttrInt, I: v} }

func ewAttrF(name string, v float32) *Attribute {
	return &Attribute{Name: name, Type: AttrFloat, F: v}
}

func ewAttrS(name, v string) *Attribute {
	return &Attribute{Name: name, Type: AttrString, S: []byte(v)}
}

func ewOneNode(op string, ins []string, outs []string, attrs ...*Attribute) *Node {
	return &Node{OpType: op, Inputs: ins, Outputs: outs, Attributes: attrs}
}

// ewImport imports a one-node model.
func ewImport(opset int64, node *Node, inputs []*ValueInfo, inits []*Initializer, outputs ...string) (*fxgraph.Graph, error) {
	var outs []*ValueInfo
	for _, o := range outputs {
		outs = append(outs, &ValueInfo{Name: o})
	}
	m := &Model{
		IRVersion:    8,
		OpsetImports: []OpsetID{{Domain: "", Version: opset}},
		Graph:        &Graph{Name: "g", Nodes: []*Node{node}, Inputs: inputs, Initializers: inits, Outputs: outs},
	}
	return NewImporter().Import(m)
}

// ewTargets lists the call_function targets of g in order, short names.
func ewTargets(g *fxgraph.Graph) string {
	var out []string
	for _, n := range g.Nodes() {
		if n.Opcode == fxgraph.CallFunction {
			out = append(out, strings.TrimPrefix(n.Target, "aten."))
		}
	}
	return strings.Join(out, " ")
}

func TestElementwiseConverters(t *testing.T) {
	xf := ewVI("x", tensor.Float32, "N", 3)
	yf := ewVI("y", tensor.Float32, 3)
	xi := ewVI("x", tensor.Int32, "N", 3)
	yi := ewVI("y", tensor.Int32, "N", 3)
	cases := []struct {
		name    string
		opset   int64
		node    *Node
		inputs  []*ValueInfo
		inits   []*Initializer
		outputs []string
		targets string
		metas   string // output metas, space separated
		err     string // "unsupported: ..." for ErrUnsupported, else a substring
	}{
		{name: "Add broadcast symbolic", opset: 13, node: ewOneNode("Add", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xf, yf},
			targets: "add.Tensor", metas: "float32[N,3]"},
		{name: "legacy Add broadcast axis", opset: 6, node: ewOneNode("Add", []string{"x", "y"}, []string{"z"}, ewAttrI("broadcast", 1), ewAttrI("axis", 0)),
			inputs: []*ValueInfo{ewVI("x", tensor.Float64, 2, 3), ewVI("y", tensor.Float64, 2)}, targets: "unsqueeze.default add.Tensor", metas: "float64[2,3]"},
		{name: "Div float", opset: 13, node: ewOneNode("Div", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xf, yf},
			targets: "div.Tensor", metas: "float32[N,3]"},
		{name: "Div int truncates", opset: 13, node: ewOneNode("Div", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xi, yi},
			targets: "div.Tensor_mode", metas: "int32[N,3]"},
		{name: "Pow int base float exponent", opset: 15, node: ewOneNode("Pow", []string{"x", "y"}, []string{"z"}),
			inputs:  []*ValueInfo{xi, ewVI("y", tensor.Float32, "N", 3)},
			targets: "_to_copy.default pow.Tensor_Tensor _to_copy.default", metas: "int32[N,3]"},
		{name: "Pow float base int exponent", opset: 15, node: ewOneNode("Pow", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xf, ewVI("y", tensor.Int64, 3)},
			targets: "pow.Tensor_Tensor", metas: "float32[N,3]"},
		{name: "Mod floor", opset: 13, node: ewOneNode("Mod", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xi, yi},
			targets: "remainder.Tensor", metas: "int32[N,3]"},
		{name: "Mod fmod", opset: 13, node: ewOneNode("Mod", []string{"x", "y"}, []string{"z"}, ewAttrI("fmod", 1)), inputs: []*ValueInfo{xf, yf},
			targets: "fmod.Tensor", metas: "float32[N,3]"},
		{name: "Erf of ints casts back", opset: 13, node: ewOneNode("Erf", []string{"x"}, []string{"z"}), inputs: []*ValueInfo{xi},
			targets: "erf.default _to_copy.default", metas: "int32[N,3]"},
		{name: "HardSigmoid composed", opset: 6, node: ewOneNode("HardSigmoid", []string{"x"}, []string{"z"}, ewAttrF("alpha", 0.5)), inputs: []*ValueInfo{xf},
			targets: "mul.Scalar add.Scalar clamp.default", metas: "float32[N,3]"},
		{name: "Clip attrs", opset: 6, node: ewOneNode("Clip", []string{"x"}, []string{"z"}, ewAttrF("min", -1)), inputs: []*ValueInfo{xf},
			targets: "clamp.default", metas: "float32[N,3]"},
		{name: "Clip int8 min input", opset: 13, node: ewOneNode("Clip", []string{"x", "lo"}, []string{"z"}),
			inputs:  []*ValueInfo{ewVI("x", tensor.Int8, "N"), ewVI("lo", tensor.Int8)},
			targets: "clamp.Tensor", metas: "int8[N]"},
		{name: "Clip no bounds", opset: 13, node: ewOneNode("Clip", []string{"x", "", ""}, []string{"z"}), inputs: []*ValueInfo{xf},
			targets: "", metas: "float32[N,3]"},
		{name: "Equal", opset: 13, node: ewOneNode("Equal", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xi, yi},
			targets: "eq.Tensor", metas: "bool[N,3]"},
		{name: "Where", opset: 16, node: ewOneNode("Where", []string{"c", "x", "y"}, []string{"z"}),
			inputs:  []*ValueInfo{ewVI("c", tensor.Bool, "N", 1), xf, yf},
			targets: "where.self", metas: "float32[N,3]"},
		{name: "Max variadic", opset: 13, node: ewOneNode("Max", []string{"x", "y", "x"}, []string{"z"}), inputs: []*ValueInfo{xf, yf},
			targets: "maximum.default maximum.default", metas: "float32[N,3]"},
		{name: "Mean", opset: 13, node: ewOneNode("Mean", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xf, yf},
			targets: "add.Tensor div.Scalar", metas: "float32[N,3]"},
		{name: "Sum one input", opset: 13, node: ewOneNode("Sum", []string{"x"}, []string{"z"}), inputs: []*ValueInfo{xf},
			targets: "", metas: "float32[N,3]"},
		{name: "Cast to bf16", opset: 13, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 16)), inputs: []*ValueInfo{xf},
			targets: "_to_copy.default", metas: "bfloat16[N,3]"},
		{name: "Cast to f16", opset: 13, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 10)), inputs: []*ValueInfo{xf},
			targets: "_to_copy.default", metas: "float16[N,3]"},
		{name: "Cast to string", opset: 13, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 8)), inputs: []*ValueInfo{xf},
			targets: "xserve.string_format", metas: "string[N,3]"},
		{name: "Cast to float8 saturates", opset: 19, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 17)), inputs: []*ValueInfo{xf},
			targets: "clamp.default _to_copy.default", metas: "float8_e4m3fn[N,3]"},
		{name: "Cast to float8 without saturation", opset: 19, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 19), ewAttrI("saturate", 0)), inputs: []*ValueInfo{xf},
			targets: "_to_copy.default", metas: "float8_e5m2[N,3]"},
		{name: "Cast to int4 wraps through int32", opset: 21, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 22)), inputs: []*ValueInfo{xf},
			targets: "_to_copy.default _to_copy.default", metas: "int4[N,3]"},
		{name: "Cast to 2-bit int", opset: 25, node: ewOneNode("Cast", []string{"x"}, []string{"z"}, ewAttrI("to", 26)), inputs: []*ValueInfo{xf},
			err: "unsupported: cast to INT2"},
		{name: "CastLike", opset: 15, node: ewOneNode("CastLike", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xf, ewVI("y", tensor.Int64, 1)},
			targets: "_to_copy.default", metas: "int64[N,3]"},
		{name: "Dropout mask static", opset: 13, node: ewOneNode("Dropout", []string{"x"}, []string{"y", "m"}),
			inputs: []*ValueInfo{ewVI("x", tensor.Float32, 2, 3)}, outputs: []string{"y", "m"}, targets: "", metas: "float32[2,3] bool[2,3]"},
		{name: "Dropout mask symbolic", opset: 13, node: ewOneNode("Dropout", []string{"x"}, []string{"y", "m"}),
			inputs: []*ValueInfo{xf}, outputs: []string{"y", "m"}, targets: "_to_copy.default eq.Tensor", metas: "float32[N,3] bool[N,3]"},
		{name: "Dropout old mask dtype", opset: 7, node: ewOneNode("Dropout", []string{"x"}, []string{"y", "m"}),
			inputs: []*ValueInfo{ewVI("x", tensor.Float32, 2)}, outputs: []string{"y", "m"}, targets: "", metas: "float32[2] float32[2]"},
		{name: "Dropout training", opset: 13, node: ewOneNode("Dropout", []string{"x", "", "t"}, []string{"y"}), inputs: []*ValueInfo{xf},
			inits: []*Initializer{{Name: "t", Tensor: tensor.Scalar(tensor.Bool, 1)}}, err: "unsupported: Dropout in training mode"},
		{name: "IsInf positive", opset: 10, node: ewOneNode("IsInf", []string{"x"}, []string{"z"}, ewAttrI("detect_negative", 0)), inputs: []*ValueInfo{xf},
			targets: "eq.Scalar", metas: "bool[N,3]"},
		{name: "PRelu", opset: 16, node: ewOneNode("PRelu", []string{"x", "y"}, []string{"z"}), inputs: []*ValueInfo{xf, yf},
			targets: "lt.Scalar mul.Tensor where.self", metas: "float32[N,3]"},
		{name: "Selu", opset: 6, node: ewOneNode("Selu", []string{"x"}, []string{"z"}), inputs: []*ValueInfo{xf},
			targets: "elu.default", metas: "float32[N,3]"},
		{name: "Gelu tanh", opset: 20, node: ewOneNode("Gelu", []string{"x"}, []string{"z"}, ewAttrS("approximate", "tanh")), inputs: []*ValueInfo{xf},
			targets: "gelu.default", metas: "float32[N,3]"},
		{name: "Shrink int", opset: 9, node: ewOneNode("Shrink", []string{"x"}, []string{"z"}, ewAttrF("bias", 1), ewAttrF("lambd", 1.5)), inputs: []*ValueInfo{xi},
			targets: "lt.Scalar gt.Scalar add.Scalar sub.Scalar where.self where.self", metas: "int32[N,3]"},
		{name: "BitShift", opset: 11, node: ewOneNode("BitShift", []string{"x", "y"}, []string{"z"}, ewAttrS("direction", "RIGHT")),
			inputs:  []*ValueInfo{ewVI("x", tensor.Uint8, 4), ewVI("y", tensor.Uint8, 4)},
			targets: "bitwise_right_shift.Tensor", metas: "uint8[4]"},
		{name: "Identity", opset: 13, node: ewOneNode("Identity", []string{"x"}, []string{"z"}), inputs: []*ValueInfo{xf},
			targets: "", metas: "float32[N,3]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outs := tc.outputs
			if outs == nil {
				outs = []string{"z"}
			}
			g, err := ewImport(tc.opset, tc.node, tc.inputs, tc.inits, outs...)
			if tc.err != "" {
				if err == nil {
					t.Fatalf("imported; want error %q", tc.err)
				}
				want, unsup := strings.CutPrefix(tc.err, "unsupported: ")
				if unsup && !errors.Is(err, ErrUnsupported) {
					t.Errorf("error %v does not wrap ErrUnsupported", err)
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want it to contain %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ewTargets(g); got != tc.targets {
				t.Errorf("targets %q, want %q", got, tc.targets)
			}
			var metas []string
			for _, o := range g.Outputs() {
				metas = append(metas, o.Val().String())
			}
			if got := strings.Join(metas, " "); got != tc.metas {
				t.Errorf("output metas %q, want %q", got, tc.metas)
			}
		})
	}
}

// TestElementwiseFoldsConstants checks that pointwise ops on initializers
// become constants at import time (how shape arithmetic resolves).
func TestElementwiseFoldsConstants(t *testing.T) {
	a := tensor.FromInt64s([]int64{7, -7, 9})
	b := tensor.FromInt64s([]int64{2, 2, -4})
	g, err := ewImport(13, ewOneNode("Div", []string{"a", "b"}, []string{"z"}), nil,
		[]*Initializer{{Name: "a", Tensor: a}, {Name: "b", Tensor: b}}, "z")
	if err != nil {
		t.Fatal(err)
	}
	out := g.Outputs()[0]
	v := g.ConstValue(out)
	if v == nil {
		t.Fatalf("Div of constants was not folded: %s", ewTargets(g))
	}
	want := []int64{3, -3, -2}
	for i, w := range want {
		if got := v.Int64At(int64(i)); got != w || v.DType != tensor.Int64 {
			t.Errorf("element %d = %s %d, want int64 %d", i, v.DType, got, w)
		}
	}

	// Cast float -> bfloat16 of a constant rounds to nearest even, as the
	// ONNX reference of the pinned onnx release does (0x3ef5ef.. rounds up).
	f := tensor.FromFloat32s([]float32{0.48033666610717773, float32(math.Inf(-1))})
	g, err = ewImport(13, ewOneNode("Cast", []string{"f"}, []string{"z"}, ewAttrI("to", 16)), nil,
		[]*Initializer{{Name: "f", Tensor: f}}, "z")
	if err != nil {
		t.Fatal(err)
	}
	v = g.ConstValue(g.Outputs()[0])
	if v == nil || v.DType != tensor.BFloat16 {
		t.Fatalf("Cast to bfloat16 of a constant: %v (%s)", v, ewTargets(g))
	}
	if got := []uint16{uint16(v.Data[0]) | uint16(v.Data[1])<<8, uint16(v.Data[2]) | uint16(v.Data[3])<<8}; got[0] != 0x3ef6 || got[1] != 0xff80 {
		t.Errorf("bfloat16 bits %#x, want [0x3ef6 0xff80]", got)
	}
}
