package onnx

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// shVI describes a tensor input; a string dim is symbolic.
func shVI(name string, dt tensor.DType, dims ...any) *ValueInfo {
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

func shNode(op string, ins, outs []string, attrs ...*Attribute) *Node {
	return &Node{OpType: op, Inputs: ins, Outputs: outs, Attributes: attrs}
}

func shInts(name string, v ...int64) *Attribute {
	return &Attribute{Name: name, Type: AttrInts, Ints: v}
}

func shInt(name string, v int64) *Attribute { return &Attribute{Name: name, Type: AttrInt, I: v} }

func shStr(name, v string) *Attribute { return &Attribute{Name: name, Type: AttrString, S: []byte(v)} }

func shInit(name string, v ...int64) *Initializer {
	return &Initializer{Name: name, Tensor: tensor.FromInt64s(v)}
}

// shImport imports a model of the given nodes; outputs are the graph outputs.
func shImport(opset int64, nodes []*Node, inputs []*ValueInfo, inits []*Initializer, outputs ...string) (*fxgraph.Graph, error) {
	var outs []*ValueInfo
	for _, o := range outputs {
		outs = append(outs, &ValueInfo{Name: o})
	}
	m := &Model{
		IRVersion:    8,
		OpsetImports: []OpsetID{{Domain: "", Version: opset}},
		Graph:        &Graph{Name: "g", Nodes: nodes, Inputs: inputs, Initializers: inits, Outputs: outs},
	}
	return NewImporter().Import(m)
}

// shTargets lists the call_function targets of g in order, short names.
func shTargets(g *fxgraph.Graph) string {
	var out []string
	for _, n := range g.Nodes() {
		if n.Opcode == fxgraph.CallFunction {
			out = append(out, strings.TrimPrefix(n.Target, "aten."))
		}
	}
	return strings.Join(out, " ")
}

func shMetas(nodes []*fxgraph.Node) string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Meta.String())
	}
	return strings.Join(out, " ")
}

func TestShapeConverters(t *testing.T) {
	x := shVI("x", tensor.Float32, "N", 3, 4)
	xs := shVI("x", tensor.Float32, 2, 3, 4)
	cases := []struct {
		name    string
		opset   int64
		nodes   []*Node
		inputs  []*ValueInfo
		inits   []*Initializer
		outputs []string
		targets string // "" skips the check
		metas   string // output metas, before specialization
		dims    map[string]int64
		spec    string // output metas after specializing to dims
		err     string // "unsupported: ..." for ErrUnsupported, else a substring
	}{
		{name: "reshape 0 and -1 keep the symbol", opset: 14,
			nodes:  []*Node{shNode("Reshape", []string{"x", "s"}, []string{"y"})},
			inputs: []*ValueInfo{x}, inits: []*Initializer{shInit("s", 0, -1)}, outputs: []string{"y"},
			targets: "sym_size.int view.default", metas: "float32[N,12]", dims: map[string]int64{"N": 2}, spec: "float32[2,12]"},
		{name: "reshape allowzero", opset: 14,
			nodes:  []*Node{shNode("Reshape", []string{"x", "s"}, []string{"y"}, shInt("allowzero", 1))},
			inputs: []*ValueInfo{xs}, inits: []*Initializer{shInit("s", 0, -1)}, outputs: []string{"y"},
			err: "view"},
		{name: "reshape opset 1 attribute", opset: 1,
			nodes:  []*Node{shNode("Reshape", []string{"x"}, []string{"y"}, shInts("shape", 4, -1))},
			inputs: []*ValueInfo{xs}, outputs: []string{"y"}, targets: "view.default", metas: "float32[4,6]"},
		{name: "reshape to a computed shape", opset: 13,
			nodes: []*Node{
				shNode("Shape", []string{"x"}, []string{"s"}),
				shNode("Gather", []string{"s", "zero"}, []string{"n"}),
				shNode("Unsqueeze", []string{"n", "axes"}, []string{"n1"}),
				shNode("Concat", []string{"n1", "m1"}, []string{"shape"}, shInt("axis", 0)),
				shNode("Reshape", []string{"x", "shape"}, []string{"y"}),
			},
			inputs: []*ValueInfo{x},
			inits: []*Initializer{{Name: "zero", Tensor: tensor.FromInt64s([]int64{0}, []int64{}...)},
				shInit("axes", 0), shInit("m1", -1)},
			outputs: []string{"y"}, metas: "float32[?,?]", dims: map[string]int64{"N": 5}, spec: "float32[5,12]"},
		{name: "expand to a computed shape", opset: 13,
			nodes: []*Node{
				shNode("Shape", []string{"z"}, []string{"s"}),
				shNode("Expand", []string{"x1", "s"}, []string{"y"}),
			},
			inputs:  []*ValueInfo{shVI("x1", tensor.Float32, 3, 1), shVI("z", tensor.Float32, "B", 1, 5)},
			outputs: []string{"y"}, metas: "float32[?,3,?]", dims: map[string]int64{"B": 2}, spec: "float32[2,3,5]"},
		{name: "constantofshape of a symbolic shape", opset: 13,
			nodes: []*Node{
				shNode("Shape", []string{"x"}, []string{"s"}),
				shNode("ConstantOfShape", []string{"s"}, []string{"y"}, &Attribute{Name: "value", Type: AttrTensor, T: tensor.FromInt64s([]int64{3})}),
			},
			inputs: []*ValueInfo{x}, outputs: []string{"y"}, targets: "_shape_as_tensor.default full.default",
			metas: "int64[?,?,?]", dims: map[string]int64{"N": 2}, spec: "int64[2,3,4]"},
		{name: "expand numpy broadcast", opset: 13,
			nodes:  []*Node{shNode("Expand", []string{"x1", "s"}, []string{"y"})},
			inputs: []*ValueInfo{shVI("x1", tensor.Float32, 3, 1)}, inits: []*Initializer{shInit("s", 2, 1, 6)},
			outputs: []string{"y"}, targets: "expand.default", metas: "float32[2,3,6]"},
		{name: "flatten symbolic", opset: 13,
			nodes:  []*Node{shNode("Flatten", []string{"x"}, []string{"y"}, shInt("axis", -2))},
			inputs: []*ValueInfo{x}, outputs: []string{"y"}, targets: "view.default", metas: "float32[N,12]",
			dims: map[string]int64{"N": 2}, spec: "float32[2,12]"},
		{name: "flatten symbolic on both sides", opset: 13,
			nodes:  []*Node{shNode("Flatten", []string{"x"}, []string{"y"}, shInt("axis", 2))},
			inputs: []*ValueInfo{shVI("x", tensor.Float32, "N", "M", 4, "K")}, outputs: []string{"y"},
			err: "unsupported: Flatten"},
		{name: "split opset 18 uneven", opset: 18,
			nodes:  []*Node{shNode("Split", []string{"x"}, []string{"a", "b", "c"}, shInt("axis", 1), shInt("num_outputs", 3))},
			inputs: []*ValueInfo{shVI("x", tensor.Float32, 2, 7)}, outputs: []string{"a", "b", "c"},
			metas: "float32[2,3] float32[2,3] float32[2,1]"},
		{name: "split opset 13 uneven", opset: 13,
			nodes:  []*Node{shNode("Split", []string{"x"}, []string{"a", "b", "c"}, shInt("axis", 1))},
			inputs: []*ValueInfo{shVI("x", tensor.Float32, 2, 7)}, outputs: []string{"a", "b", "c"},
			err: "does not split evenly"},
		{name: "slice negative step", opset: 13,
			nodes:  []*Node{shNode("Slice", []string{"x", "st", "en", "ax", "sp"}, []string{"y"})},
			inputs: []*ValueInfo{x}, inits: []*Initializer{shInit("st", -1), shInit("en", -9223372036854775808), shInit("ax", 2), shInit("sp", -2)},
			outputs: []string{"y"}, targets: "flip.default slice.Tensor", metas: "float32[N,3,2]"},
		{name: "slice on a symbolic dim", opset: 13,
			nodes:  []*Node{shNode("Slice", []string{"x", "st", "en"}, []string{"y"})},
			inputs: []*ValueInfo{x}, inits: []*Initializer{shInit("st", 1), shInit("en", 9223372036854775807)},
			outputs: []string{"y"}, targets: "slice.Tensor", metas: "float32[?,3,4]", dims: map[string]int64{"N": 4}, spec: "float32[3,3,4]"},
		{name: "slice run-time starts", opset: 13,
			nodes:  []*Node{shNode("Slice", []string{"x", "st", "en"}, []string{"y"})},
			inputs: []*ValueInfo{x, shVI("st", tensor.Int64, 1)}, inits: []*Initializer{shInit("en", 2)},
			outputs: []string{"y"}, err: "needs: st"},
		{name: "reshape to a run-time shape", opset: 13,
			nodes:  []*Node{shNode("Reshape", []string{"x", "s"}, []string{"y"})},
			inputs: []*ValueInfo{x, shVI("s", tensor.Int64, 2)}, outputs: []string{"y"}, err: "needs: s"},
		{name: "range", opset: 11,
			nodes:  []*Node{shNode("Range", []string{"a", "b", "c"}, []string{"y"})},
			inputs: []*ValueInfo{shVI("c", tensor.Float32)},
			inits: []*Initializer{{Name: "a", Tensor: tensor.FromFloat32s([]float32{1}, []int64{}...)},
				{Name: "b", Tensor: tensor.FromFloat32s([]float32{2}, []int64{}...)}},
			outputs: []string{"y"}, err: "needs: c"},
		{name: "gather scalar index", opset: 13,
			nodes:  []*Node{shNode("Gather", []string{"x", "i"}, []string{"y"}, shInt("axis", 1))},
			inputs: []*ValueInfo{x, shVI("i", tensor.Int64)}, outputs: []string{"y"},
			targets: "index.Tensor", metas: "float32[N,4]"},
		{name: "gathernd batch dims", opset: 13,
			nodes:  []*Node{shNode("GatherND", []string{"x", "i"}, []string{"y"}, shInt("batch_dims", 1))},
			inputs: []*ValueInfo{xs, shVI("i", tensor.Int64, 2, 5, 1)}, outputs: []string{"y"},
			metas: "float32[2,5,4]"},
		{name: "squeeze a symbolic dim views", opset: 13,
			nodes:  []*Node{shNode("Squeeze", []string{"x", "ax"}, []string{"y"})},
			inputs: []*ValueInfo{shVI("x", tensor.Float32, "N", 1, 4)}, inits: []*Initializer{shInit("ax", 0, -2)},
			outputs: []string{"y"}, targets: "view.default", metas: "float32[4]"},
		{name: "unsqueeze unsorted axes", opset: 11,
			nodes:  []*Node{shNode("Unsqueeze", []string{"x"}, []string{"y"}, shInts("axes", 4, 0))},
			inputs: []*ValueInfo{x}, outputs: []string{"y"}, targets: "unsqueeze.default unsqueeze.default", metas: "float32[1,N,3,4,1]"},
		{name: "shape start end", opset: 15,
			nodes:  []*Node{shNode("Shape", []string{"x"}, []string{"y"}, shInt("start", -2))},
			inputs: []*ValueInfo{xs}, outputs: []string{"y"}, targets: "", metas: "int64[2]"},
		{name: "pad reflect trailing dim", opset: 13,
			nodes:  []*Node{shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "reflect"))},
			inputs: []*ValueInfo{x}, inits: []*Initializer{shInit("p", 0, 0, 2, 0, 0, 1)},
			outputs: []string{"y"}, targets: "reflection_pad1d.default", metas: "float32[N,3,7]"},
		{name: "pad edge crops then pads", opset: 13,
			nodes:  []*Node{shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "edge"))},
			inputs: []*ValueInfo{xs}, inits: []*Initializer{shInit("p", 1, 0, -1, 0, 0, 2)},
			outputs: []string{"y"}, targets: "slice.Tensor index_select.default index_select.default", metas: "float32[3,3,5]"},
		{name: "pad wrap", opset: 19,
			nodes:  []*Node{shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "wrap"))},
			inputs: []*ValueInfo{xs}, inits: []*Initializer{shInit("p", 0, 0, 1, 0, 0, 1)},
			outputs: []string{"y"}, targets: "index_select.default", metas: "float32[2,3,6]"},
		{name: "pad constant opset 2", opset: 2,
			nodes:  []*Node{shNode("Pad", []string{"x"}, []string{"y"}, shInts("pads", 0, 1, 0, 0, 0, -1))},
			inputs: []*ValueInfo{x}, outputs: []string{"y"}, targets: "constant_pad_nd.default", metas: "float32[N,4,3]"},
		{name: "pad unknown mode", opset: 13,
			nodes:  []*Node{shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "mirror"))},
			inputs: []*ValueInfo{x}, inits: []*Initializer{shInit("p", 0, 0, 0, 0, 0, 0)},
			outputs: []string{"y"}, err: "unsupported: Pad mode"},
		{name: "constant value_ints", opset: 13,
			nodes:   []*Node{shNode("Constant", nil, []string{"y"}, shInts("value_ints", 1, 2, 3))},
			outputs: []string{"y"}, targets: "", metas: "int64[3]"},
		{name: "constant sparse", opset: 13,
			nodes:   []*Node{shNode("Constant", nil, []string{"y"}, &Attribute{Name: "sparse_value", Type: AttrSparseTensor})},
			outputs: []string{"y"}, err: "unsupported: Constant with attribute sparse_value"},
		{name: "nonzero", opset: 13,
			nodes:  []*Node{shNode("NonZero", []string{"x"}, []string{"y"})},
			inputs: []*ValueInfo{x}, outputs: []string{"y"}, err: "unsupported: NonZero of float32[N,3,4] here: its output size is data-dependent"},
		{name: "onehot", opset: 11,
			nodes:   []*Node{shNode("OneHot", []string{"i", "d", "v"}, []string{"y"}, shInt("axis", 0))},
			inputs:  []*ValueInfo{shVI("i", tensor.Int64, "N")},
			inits:   []*Initializer{{Name: "d", Tensor: tensor.FromInt64s([]int64{5}, []int64{}...)}, {Name: "v", Tensor: tensor.FromFloat32s([]float32{0, 1})}},
			outputs: []string{"y"}, targets: "sym_size.int full.default unsqueeze.default scatter.value", metas: "float32[5,N]"},
		{name: "depthtospace dcr", opset: 13,
			nodes:  []*Node{shNode("DepthToSpace", []string{"x"}, []string{"y"}, shInt("blocksize", 2))},
			inputs: []*ValueInfo{shVI("x", tensor.Float32, "N", 8, 2, 3)}, outputs: []string{"y"},
			targets: "sym_size.int view.default permute.default view.default", metas: "float32[N,2,4,6]"},
		{name: "scatternd mul", opset: 16,
			nodes:  []*Node{shNode("ScatterND", []string{"x", "i", "u"}, []string{"y"}, shStr("reduction", "mul"))},
			inputs: []*ValueInfo{xs, shVI("i", tensor.Int64, 4, 2), shVI("u", tensor.Float32, 4, 4)}, outputs: []string{"y"},
			metas: "float32[2,3,4]"},
	}
	r := fxgraph.NewRegistry()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := shImport(c.opset, c.nodes, c.inputs, c.inits, c.outputs...)
			if c.err != "" {
				if err == nil {
					t.Fatalf("imported %s, want error %q", shTargets(g), c.err)
				}
				if want, ok := strings.CutPrefix(c.err, "needs: "); ok {
					var nv *NeedsValueError
					if !errors.As(err, &nv) || strings.Join(nv.Inputs, ",") != want {
						t.Errorf("error %v, want a NeedsValueError for %s", err, want)
					}
					return
				}
				if want, ok := strings.CutPrefix(c.err, "unsupported: "); ok {
					if !errors.Is(err, ErrUnsupported) {
						t.Errorf("error %v does not wrap ErrUnsupported", err)
					}
					c.err = want
				}
				if !strings.Contains(err.Error(), c.err) {
					t.Errorf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.targets != "" {
				if got := shTargets(g); got != c.targets {
					t.Errorf("targets = %q, want %q", got, c.targets)
				}
			}
			if got := shMetas(g.Outputs()); got != c.metas {
				t.Errorf("metas = %s, want %s", got, c.metas)
			}
			if c.spec != "" {
				sg, err := r.Specialize(g, c.dims, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				if got := shMetas(sg.Outputs()); got != c.spec {
					t.Errorf("specialized metas = %s, want %s", got, c.spec)
				}
			}
		})
	}
}

// TestShapeConvertersFold imports models whose input is an initializer, so
// the converters' compositions fold on the host, and checks the values
// against references written out here.
func TestShapeConvertersFold(t *testing.T) {
	// x[r][c] = 10r + c, shape [2,3].
	xt := tensor.New(tensor.Float32, 2, 3)
	for k := int64(0); k < 6; k++ {
		xt.SetFloat64(k, float64(10*(k/3)+k%3))
	}
	cases := []struct {
		name  string
		opset int64
		node  *Node
		inits []*Initializer
		want  string
	}{
		{"pad wrap", 19, shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "wrap")),
			[]*Initializer{shInit("p", 0, 1, 0, 2)}, "[2 6] [2 0 1 2 0 1 12 10 11 12 10 11]"},
		{"pad reflect leading dim", 13, shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "reflect")),
			[]*Initializer{shInit("p", 1, 0, 0, 0)}, "[3 3] [10 11 12 0 1 2 10 11 12]"},
		{"pad edge crop", 13, shNode("Pad", []string{"x", "p"}, []string{"y"}, shStr("mode", "edge")),
			[]*Initializer{shInit("p", 0, -1, 1, 1)}, "[3 3] [1 2 2 11 12 12 11 12 12]"},
		{"pad constant axes", 18, shNode("Pad", []string{"x", "p", "", "a"}, []string{"y"}),
			[]*Initializer{shInit("p", 1, -1), shInit("a", -1)}, "[2 3] [0 0 1 0 10 11]"},
		{"slice negative step", 13, shNode("Slice", []string{"x", "s", "e", "a", "st"}, []string{"y"}),
			[]*Initializer{shInit("s", -1), shInit("e", -100), shInit("a", 1), shInit("st", -2)}, "[2 2] [2 0 12 10]"},
		{"slice negative step to start", 13, shNode("Slice", []string{"x", "s", "e", "a", "st"}, []string{"y"}),
			[]*Initializer{shInit("s", 100), shInit("e", 0), shInit("a", 1), shInit("st", -1)}, "[2 2] [2 1 12 11]"},
		{"gather negative", 13, shNode("Gather", []string{"x", "i"}, []string{"y"}, shInt("axis", 1)),
			[]*Initializer{shInit("i", -1, 0)}, "[2 2] [2 0 12 10]"},
		{"tile", 13, shNode("Tile", []string{"x", "r"}, []string{"y"}),
			[]*Initializer{shInit("r", 2, 1)}, "[4 3] [0 1 2 10 11 12 0 1 2 10 11 12]"},
		{"trilu lower k", 14, shNode("Trilu", []string{"x", "k"}, []string{"y"}, shInt("upper", 0)),
			[]*Initializer{{Name: "k", Tensor: tensor.FromInt64s([]int64{1}, []int64{}...)}}, "[2 3] [0 1 0 10 11 12]"},
		{"scatternd max", 18, shNode("ScatterND", []string{"x", "i", "u"}, []string{"y"}, shStr("reduction", "max")),
			[]*Initializer{{Name: "i", Tensor: tensor.FromInt64s([]int64{1, -1, 0, 0}, 2, 2)},
				{Name: "u", Tensor: tensor.FromFloat32s([]float32{5, 50})}}, "[2 3] [50 1 2 10 11 12]"},
		{"onehot negative", 11, shNode("OneHot", []string{"i", "d", "v"}, []string{"y"}),
			[]*Initializer{shInit("i", -1, 1), {Name: "d", Tensor: tensor.FromInt64s([]int64{3}, []int64{}...)},
				{Name: "v", Tensor: tensor.FromFloat32s([]float32{-1, 7})}}, "[2 3] [-1 -1 7 -1 7 -1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inits := append([]*Initializer{{Name: "x", Tensor: xt}}, c.inits...)
			g, err := shImport(c.opset, []*Node{c.node}, nil, inits, "y")
			if err != nil {
				t.Fatal(err)
			}
			v := g.ConstValue(g.Outputs()[0])
			if v == nil {
				t.Fatalf("output did not fold: %s", shTargets(g))
			}
			var vals []string
			for _, f := range v.Float64s() {
				vals = append(vals, strings.TrimSuffix(fxgraph.FormatArg(f), ".0"))
			}
			got := strings.ReplaceAll(tensor.ShapeString(v.Shape), ",", " ") + " [" + strings.Join(vals, " ") + "]"
			if got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}
