package onnx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xserve/xserve/internal/onnxtestdata"
	"github.com/xserve/xserve/tensor"
)

// backendDirs are the suites of the ONNX backend test data whose cases have
// a model.onnx.
var backendDirs = []string{"node", "pytorch-converted", "pytorch-operator", "simple"}

// unsupportedModels lists backend cases whose model.onnx must fail to decode,
// with the reason.
var unsupportedModels = map[string]string{}

// backendDataRoot returns the onnx wheel's backend test data directory
// (make venv installs it), failing the test when it is missing.
func backendDataRoot(t testing.TB) string {
	t.Helper()
	dir, err := onnxtestdata.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// backendCase reads the model of a backend case such as "node/test_if".
func backendCase(t *testing.T, name string) *Model {
	t.Helper()
	m, err := ReadModelFile(filepath.Join(backendDataRoot(t), name, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// backendTensor reads test_data_set_0/<file> of a backend case.
func backendTensor(t *testing.T, name, file string) *tensor.Tensor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(backendDataRoot(t), name, "test_data_set_0", file))
	if err != nil {
		t.Fatal(err)
	}
	tt, _, err := DecodeTensor(b)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

func TestDecodeBackendModels(t *testing.T) {
	root := backendDataRoot(t)
	total := 0
	for _, dir := range backendDirs {
		paths, err := filepath.Glob(filepath.Join(root, dir, "*", "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			total++
			caseName := dir + "/" + filepath.Base(filepath.Dir(p))
			m, err := ReadModelFile(p)
			if reason, ok := unsupportedModels[caseName]; ok {
				if err == nil {
					t.Errorf("%s: decoded, but listed as unsupported (%s)", caseName, reason)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", caseName, err)
				continue
			}
			if m.Graph == nil || len(m.Graph.Nodes) == 0 || len(m.OpsetImports) == 0 {
				t.Errorf("%s: empty graph or no opset imports: %+v", caseName, m)
			}
			checkDecodeMatchesRead(t, caseName, p, m)
		}
	}
	if total < 1000 {
		t.Errorf("decoded only %d backend models, want more than 1000", total)
	}
}

// checkDecodeMatchesRead decodes p's bytes with Decode and compares the
// result's outline with m, from ReadModelFile.
func checkDecodeMatchesRead(t *testing.T, caseName, p string, m *Model) {
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Decode(data, DecodeOptions{})
	if err != nil {
		t.Errorf("%s: Decode: %v", caseName, err)
		return
	}
	if len(m2.Graph.Nodes) != len(m.Graph.Nodes) || len(m2.Graph.Initializers) != len(m.Graph.Initializers) {
		t.Errorf("%s: Decode and ReadModelFile disagree", caseName)
	}
}

// TestDecodeBackendTensors decodes every input_N.pb and output_N.pb whose
// graph input or output is a tensor and checks it against the declared type.
func TestDecodeBackendTensors(t *testing.T) {
	root := backendDataRoot(t)
	var decoded, skipped int
	for _, dir := range backendDirs {
		cases, _ := filepath.Glob(filepath.Join(root, dir, "*", "model.onnx"))
		for _, p := range cases {
			m, err := ReadModelFile(p)
			if err != nil {
				continue // reported by TestDecodeBackendModels
			}
			d, s := checkCaseTensors(t, filepath.Dir(p), m)
			decoded += d
			skipped += s
		}
	}
	t.Logf("decoded %d tensors, skipped %d sequence/optional values", decoded, skipped)
	if decoded < 2500 {
		t.Errorf("decoded only %d backend tensors", decoded)
	}
}

func checkCaseTensors(t *testing.T, caseDir string, m *Model) (decoded, skipped int) {
	files, _ := filepath.Glob(filepath.Join(caseDir, "test_data_set_*", "*put_*.pb"))
	for _, f := range files {
		var vi *ValueInfo
		var idx int
		base := filepath.Base(f)
		if n, _ := fmt.Sscanf(base, "input_%d.pb", &idx); n == 1 && idx < len(m.Graph.Inputs) {
			vi = m.Graph.Inputs[idx]
		} else if n, _ := fmt.Sscanf(base, "output_%d.pb", &idx); n == 1 && idx < len(m.Graph.Outputs) {
			vi = m.Graph.Outputs[idx]
		} else {
			t.Errorf("%s: no graph input or output for it", f)
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if vi.Type == nil || vi.Type.Kind != TypeTensor {
			DecodeTensor(data) // a SequenceProto or OptionalProto: must not panic
			skipped++
			continue
		}
		tt, _, err := DecodeTensor(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := checkAgainstType(tt, vi.Type, shapeQuirks[filepath.Base(caseDir)+"/"+base]); err != "" {
			t.Errorf("%s (%s %s): %s", f, vi.Name, tt, err)
		}
		decoded++
	}
	return decoded, skipped
}

// shapeQuirks are backend test tensors whose shape differs from the model's
// declaration upstream: the CastLike tests declare "like" as [3,4] but store
// a [1] tensor.
var shapeQuirks = map[string]bool{
	"test_castlike_BFLOAT16_to_FLOAT/input_1.pb":          true,
	"test_castlike_BFLOAT16_to_FLOAT_expanded/input_1.pb": true,
	"test_castlike_FLOAT_to_BFLOAT16/input_1.pb":          true,
	"test_castlike_FLOAT_to_BFLOAT16_expanded/input_1.pb": true,
}

// checkAgainstType compares a decoded tensor with its declared type, leaving
// out the shape when skipShape is set.
func checkAgainstType(tt *tensor.Tensor, ti *TypeInfo, skipShape bool) string {
	n := tt.NumElements()
	if tt.DType == tensor.String {
		if int64(len(tt.Strings)) != n {
			return "string count does not match dims"
		}
	} else if int64(len(tt.Data)) != n*int64(tt.DType.Size()) {
		return "byte size does not match dims"
	}
	// ONNX 1.12 stored the bfloat16 test data as UINT16 bit patterns.
	if tt.DType != ti.Elem && !(ti.Elem == tensor.BFloat16 && tt.DType == tensor.Uint16) {
		return "dtype differs from the declared " + ti.Elem.String()
	}
	if !ti.HasShape || skipShape {
		return ""
	}
	if len(ti.Dims) != len(tt.Shape) {
		return "rank differs from the declared type"
	}
	for i, d := range ti.Dims {
		if d.Known && d.Value != tt.Shape[i] {
			return "shape differs from the declared type"
		}
	}
	return ""
}

func TestConvWithStridesPadding(t *testing.T) {
	const name = "node/test_conv_with_strides_padding"
	m := backendCase(t, name)
	if len(m.OpsetImports) != 1 || m.OpsetImports[0] != (OpsetID{Version: 22}) {
		t.Errorf("opset imports = %+v, want [{\"\" 22}]", m.OpsetImports)
	}
	if m.IRVersion != 10 || m.ProducerName != "backend-test" {
		t.Errorf("ir_version %d producer %q", m.IRVersion, m.ProducerName)
	}
	g := m.Graph
	if g.Name != "test_conv_with_strides_padding" || len(g.Inputs) != 2 || len(g.Outputs) != 1 {
		t.Fatalf("graph %q inputs %d outputs %d", g.Name, len(g.Inputs), len(g.Outputs))
	}
	x := g.Inputs[0]
	if x.Name != "x" || x.Type.Kind != TypeTensor || x.Type.Elem != tensor.Float32 || !x.Type.HasShape {
		t.Fatalf("input 0 = %+v", x)
	}
	if !slices.Equal(x.Type.Dims, []Dim{{1, "", true}, {1, "", true}, {7, "", true}, {5, "", true}}) {
		t.Errorf("x dims = %+v, want [1 1 7 5]", x.Type.Dims)
	}
	if len(g.Nodes) != 1 {
		t.Fatalf("%d nodes", len(g.Nodes))
	}
	n := g.Nodes[0]
	if n.OpType != "Conv" || !slices.Equal(n.Inputs, []string{"x", "W"}) || !slices.Equal(n.Outputs, []string{"y"}) {
		t.Errorf("node = %+v", n)
	}
	for attr, want := range map[string][]int64{"kernel_shape": {3, 3}, "pads": {1, 1, 1, 1}, "strides": {2, 2}} {
		a := n.Attr(attr)
		if a == nil || a.Type != AttrInts || !slices.Equal(a.Ints, want) {
			t.Errorf("attribute %s = %+v, want INTS %v", attr, a, want)
		}
	}
	if n.Attr("dilations") != nil {
		t.Error("Attr(dilations) should be nil")
	}
	in := backendTensor(t, name, "input_0.pb")
	if in.DType != tensor.Float32 || !slices.Equal(in.Shape, []int64{1, 1, 7, 5}) {
		t.Fatalf("input_0 = %v", in)
	}
	for i := int64(0); i < 35; i++ { // x is arange(35)
		if in.Float64At(i) != float64(i) {
			t.Fatalf("x[%d] = %v", i, in.Float64At(i))
		}
	}
}

func TestCastFloat16(t *testing.T) {
	const name = "node/test_cast_FLOAT_to_FLOAT16"
	m := backendCase(t, name)
	if e := m.Graph.Outputs[0].Type.Elem; e != tensor.Float16 {
		t.Errorf("output elem = %v, want float16", e)
	}
	if a := m.Graph.Nodes[0].Attr("to"); a == nil || a.Type != AttrInt || a.I != 10 {
		t.Errorf("Cast to = %+v, want INT 10", a)
	}
	in, out := backendTensor(t, name, "input_0.pb"), backendTensor(t, name, "output_0.pb")
	if out.DType != tensor.Float16 || !slices.Equal(out.Shape, []int64{3, 4}) {
		t.Fatalf("output = %v, want float16[3,4]", out)
	}
	for i := range in.NumElements() {
		x, y := in.Float64At(i), out.Float64At(i)
		if math.Abs(x-y) > 1e-3*math.Max(1, math.Abs(x)) {
			t.Errorf("element %d: float32 %v cast to float16 %v", i, x, y)
		}
	}
}

func TestCastBFloat16(t *testing.T) {
	const name = "node/test_cast_FLOAT_to_BFLOAT16"
	m := backendCase(t, name)
	if e := m.Graph.Outputs[0].Type; e.Elem != tensor.BFloat16 || e.ElemCode != 16 {
		t.Errorf("output type = %+v, want bfloat16 (16)", e)
	}
	in, out := backendTensor(t, name, "input_0.pb"), backendTensor(t, name, "output_0.pb")
	if out.DType != tensor.BFloat16 {
		t.Fatalf("output_0.pb = %v, want bfloat16", out)
	}
	for i := range in.NumElements() {
		x, y := in.Float64At(i), out.Float64At(i)
		if !math.IsNaN(x) && !math.IsInf(x, 0) && math.Abs(x-y) > 1e-2*math.Max(1, math.Abs(x)) {
			t.Errorf("element %d: float32 %v cast to bfloat16 %v", i, x, y)
		}
	}
}

func TestSmallIntTypes(t *testing.T) {
	const deq = "node/test_dequantizelinear"
	m := backendCase(t, deq)
	if e := m.Graph.Inputs[0].Type.Elem; e != tensor.Uint8 {
		t.Errorf("x elem = %v, want uint8", e)
	}
	x := backendTensor(t, deq, "input_0.pb")
	if x.DType != tensor.Uint8 || !bytes.Equal(x.Data, []byte{0, 3, 128, 255}) {
		t.Errorf("x = %v %v, want uint8 [0 3 128 255]", x, x.Data)
	}
	zp := backendTensor(t, deq, "input_2.pb")
	if zp.DType != tensor.Uint8 || len(zp.Shape) != 0 || !bytes.Equal(zp.Data, []byte{128}) {
		t.Errorf("zero point = %v %v, want uint8 scalar 128", zp, zp.Data)
	}

	// Clip(x, min) for int8: y = max(x, min) elementwise, negatives included.
	const clip = "node/test_clip_default_int8_min"
	xi, lo, y := backendTensor(t, clip, "input_0.pb"), backendTensor(t, clip, "input_1.pb"), backendTensor(t, clip, "output_0.pb")
	if xi.DType != tensor.Int8 || !slices.Equal(xi.Shape, []int64{3, 4, 5}) {
		t.Fatalf("x = %v", xi)
	}
	negative := false
	for i := range xi.NumElements() {
		negative = negative || xi.Int64At(i) < 0
		if want := max(xi.Int64At(i), lo.Int64At(0)); y.Int64At(i) != want {
			t.Errorf("y[%d] = %d, want %d", i, y.Int64At(i), want)
		}
	}
	if !negative {
		t.Error("expected negative int8 inputs")
	}

	const and = "node/test_and2d"
	a, b, c := backendTensor(t, and, "input_0.pb"), backendTensor(t, and, "input_1.pb"), backendTensor(t, and, "output_0.pb")
	if a.DType != tensor.Bool || c.DType != tensor.Bool {
		t.Fatalf("And operands %v %v", a, c)
	}
	for i := range a.Data {
		if c.Data[i] != a.Data[i]&b.Data[i] || a.Data[i] > 1 {
			t.Errorf("and[%d]: %d & %d = %d", i, a.Data[i], b.Data[i], c.Data[i])
		}
	}
}

func TestStrings(t *testing.T) {
	const name = "node/test_strnormalizer_export_monday_casesensintive_upper"
	m := backendCase(t, name)
	n := m.Graph.Nodes[0]
	if n.OpType != "StringNormalizer" {
		t.Fatalf("op %s", n.OpType)
	}
	if a := n.Attr("case_change_action"); a == nil || a.Type != AttrString || string(a.S) != "UPPER" {
		t.Errorf("case_change_action = %+v", a)
	}
	if a := n.Attr("stopwords"); a == nil || a.Type != AttrStrings || len(a.Strings) != 1 || string(a.Strings[0]) != "monday" {
		t.Errorf("stopwords = %+v", a)
	}
	if a := n.Attr("is_case_sensitive"); a == nil || a.Type != AttrInt || a.I != 1 {
		t.Errorf("is_case_sensitive = %+v", a)
	}
	if e := m.Graph.Inputs[0].Type.Elem; e != tensor.String {
		t.Errorf("input elem %v", e)
	}
	in, out := backendTensor(t, name, "input_0.pb"), backendTensor(t, name, "output_0.pb")
	if got := tensorStrings(in); !slices.Equal(got, []string{"monday", "tuesday", "wednesday", "thursday"}) || in.DType != tensor.String {
		t.Errorf("input = %v %q", in, got)
	}
	if got := tensorStrings(out); !slices.Equal(got, []string{"TUESDAY", "WEDNESDAY", "THURSDAY"}) {
		t.Errorf("output = %q", got)
	}
}

func tensorStrings(t *tensor.Tensor) []string {
	var out []string
	for _, s := range t.Strings {
		out = append(out, string(s))
	}
	return out
}

func TestIfSubgraphs(t *testing.T) {
	m := backendCase(t, "node/test_if")
	n := m.Graph.Nodes[0]
	if n.OpType != "If" || !slices.Equal(n.Inputs, []string{"cond"}) {
		t.Fatalf("node = %+v", n)
	}
	for attr, want := range map[string][]float64{"then_branch": {1, 2, 3, 4, 5}, "else_branch": {5, 4, 3, 2, 1}} {
		a := n.Attr(attr)
		if a == nil || a.Type != AttrGraph || a.G == nil {
			t.Fatalf("%s = %+v", attr, a)
		}
		g := a.G
		if len(g.Nodes) != 1 || g.Nodes[0].OpType != "Constant" || len(g.Outputs) != 1 {
			t.Fatalf("%s graph %q: %d nodes", attr, g.Name, len(g.Nodes))
		}
		v := g.Nodes[0].Attr("value")
		if v == nil || v.Type != AttrTensor || v.T.DType != tensor.Float32 || !slices.Equal(v.T.Float64s(), want) {
			t.Errorf("%s constant = %+v", attr, v)
		}
	}
	if cond := m.Graph.Inputs[0].Type; cond.Elem != tensor.Bool || !cond.HasShape || len(cond.Dims) != 0 {
		t.Errorf("cond type = %+v, want bool scalar", cond)
	}
}

func TestLoopBody(t *testing.T) {
	m := backendCase(t, "node/test_loop11")
	n := m.Graph.Nodes[0]
	body := n.Attr("body")
	if n.OpType != "Loop" || body == nil || body.Type != AttrGraph {
		t.Fatalf("node = %+v", n)
	}
	g := body.G
	if g.Name != "loop_body" || len(g.Inputs) != 3 || len(g.Outputs) != 3 || len(g.Nodes) != 9 {
		t.Fatalf("body %q: %d inputs %d outputs %d nodes", g.Name, len(g.Inputs), len(g.Outputs), len(g.Nodes))
	}
	var ops []string
	for _, bn := range g.Nodes {
		ops = append(ops, bn.OpType)
	}
	want := []string{"Identity", "Constant", "Constant", "Add", "Unsqueeze", "Unsqueeze", "Slice", "Add", "Identity"}
	if !slices.Equal(ops, want) {
		t.Errorf("body ops = %v, want %v", ops, want)
	}
	one := g.Nodes[2].Attr("value").T
	if one.DType != tensor.Int64 || len(one.Shape) != 0 || one.Int64At(0) != 1 {
		t.Errorf("constant one = %v", one)
	}
	if a := g.Nodes[4].Attr("axes"); a == nil || !slices.Equal(a.Ints, []int64{0}) {
		t.Errorf("Unsqueeze axes = %+v", a)
	}
	scan := backendTensor(t, "node/test_loop11", "output_1.pb")
	if !slices.Equal(scan.Float64s(), []float64{-1, 1, 4, 8, 13}) {
		t.Errorf("res_scan = %v", scan.Float64s())
	}
}

func TestSymbolicDimsAndSequences(t *testing.T) {
	m := backendCase(t, "node/test_sequence_map_add_1_sequence_1_tensor")
	x0, x1 := m.Graph.Inputs[0].Type, m.Graph.Inputs[1].Type
	if x0.Kind != TypeSequence || x0.ElemType == nil || x0.ElemType.Kind != TypeTensor || x0.ElemType.Elem != tensor.Float32 {
		t.Errorf("x0 = %+v", x0)
	} else if !slices.Equal(x0.ElemType.Dims, []Dim{{Param: "N"}}) {
		t.Errorf("x0 element dims = %+v, want [N]", x0.ElemType.Dims)
	}
	if x1.Kind != TypeTensor || !slices.Equal(x1.Dims, []Dim{{Param: "N"}}) {
		t.Errorf("x1 = %+v, want float32[N]", x1)
	}
	body := m.Graph.Nodes[0].Attr("body").G
	if body == nil || !slices.Equal(body.Inputs[0].Type.Dims, []Dim{{Param: "N"}}) {
		t.Errorf("body input dims wrong: %+v", body)
	}

	// An unknown dim: neither dim_value nor dim_param.
	out := backendCase(t, "simple/test_sequence_model1").Graph.Outputs[0].Type
	if !slices.Equal(out.Dims, []Dim{{}, {3, "", true}, {4, "", true}}) {
		t.Errorf("test_sequence_model1 output dims = %+v, want [?,3,4]", out.Dims)
	}

	opt := backendCase(t, "node/test_optional_get_element_optional_sequence").Graph.Inputs[0].Type
	if opt.Kind != TypeOptional || opt.ElemType == nil || opt.ElemType.Kind != TypeSequence || opt.ElemType.ElemType.Elem != tensor.Int32 {
		t.Errorf("optional(sequence(int32)) = %+v", opt)
	}
}

func TestTypeProtoAttribute(t *testing.T) {
	// The then_branch of test_if_opt has Optional(type=seq(tensor(float)[5])).
	m := backendCase(t, "node/test_if_opt")
	var found *Attribute
	walkAttrs(m.Graph, func(n *Node, a *Attribute) {
		if a.Type == AttrTypeProto && n.OpType == "Optional" {
			found = a
		}
	})
	if found == nil || found.TP == nil {
		t.Fatal("no TYPE_PROTO attribute found")
	}
	tp := found.TP
	if found.Name != "type" || tp.Kind != TypeSequence || tp.ElemType == nil || tp.ElemType.Kind != TypeTensor ||
		tp.ElemType.Elem != tensor.Float32 || !slices.Equal(tp.ElemType.Dims, []Dim{{5, "", true}}) {
		t.Errorf("type attribute = %+v (elem %+v)", tp, tp.ElemType)
	}
}

func walkAttrs(g *Graph, fn func(*Node, *Attribute)) {
	for _, n := range g.Nodes {
		for _, a := range n.Attributes {
			fn(n, a)
			if a.G != nil {
				walkAttrs(a.G, fn)
			}
			for _, sub := range a.Graphs {
				walkAttrs(sub, fn)
			}
		}
	}
}

func TestOpsetImportsAndInitializers(t *testing.T) {
	m := backendCase(t, "simple/test_gradient_of_add")
	want := []OpsetID{{"", 12}, {"ai.onnx.preview.training", 1}}
	if !slices.Equal(m.OpsetImports, want) {
		t.Errorf("opset imports = %+v, want %+v", m.OpsetImports, want)
	}
	m = backendCase(t, "pytorch-converted/test_ConvTranspose2d")
	if len(m.Graph.Initializers) == 0 {
		t.Fatal("no initializers")
	}
	for _, in := range m.Graph.Initializers {
		if in.Name == "" || in.Tensor.DType != tensor.Float32 || int64(len(in.Tensor.Data)) != 4*in.Tensor.NumElements() {
			t.Errorf("initializer %q = %v", in.Name, in.Tensor)
		}
	}
}

// ---- hand-encoded protobuf ----

// wmsg builds protobuf messages for tests.
type wmsg []byte

func (m wmsg) varint(num protowire.Number, v uint64) wmsg {
	return protowire.AppendVarint(protowire.AppendTag(m, num, protowire.VarintType), v)
}

func (m wmsg) int(num protowire.Number, v int64) wmsg { return m.varint(num, uint64(v)) }

func (m wmsg) bytes(num protowire.Number, b []byte) wmsg {
	return protowire.AppendBytes(protowire.AppendTag(m, num, protowire.BytesType), b)
}

func (m wmsg) str(num protowire.Number, s string) wmsg { return m.bytes(num, []byte(s)) }

func (m wmsg) fixed32(num protowire.Number, v uint32) wmsg {
	return protowire.AppendFixed32(protowire.AppendTag(m, num, protowire.Fixed32Type), v)
}

func (m wmsg) fixed64(num protowire.Number, v uint64) wmsg {
	return protowire.AppendFixed64(protowire.AppendTag(m, num, protowire.Fixed64Type), v)
}

// packedVarints returns the packed encoding of varints.
func packedVarints(vals ...int64) []byte {
	var b []byte
	for _, v := range vals {
		b = protowire.AppendVarint(b, uint64(v))
	}
	return b
}

func packedFloats(vals ...float32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func packedDoubles(vals ...float64) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// tensorPB starts a TensorProto with a name, data type and packed dims.
func tensorPB(name string, dataType int32, dims ...int64) wmsg {
	m := wmsg{}.str(8, name).int(2, int64(dataType))
	if len(dims) > 0 {
		m = m.bytes(1, packedVarints(dims...))
	}
	return m
}

func attrPB(name string, typ AttrType) wmsg { return wmsg{}.str(1, name).int(20, int64(typ)) }

func nodePB(name, op string, inputs, outputs []string, attrs ...wmsg) wmsg {
	m := wmsg{}.str(3, name).str(4, op)
	for _, in := range inputs {
		m = m.str(1, in)
	}
	for _, out := range outputs {
		m = m.str(2, out)
	}
	for _, a := range attrs {
		m = m.bytes(5, a)
	}
	return m
}

// tensorTypePB is a TypeProto for a float32 tensor with the given dims;
// a negative dim is written as dim_param "n".
func tensorTypePB(elem int32, dims ...int64) wmsg {
	var shape wmsg
	for _, d := range dims {
		if d < 0 {
			shape = shape.bytes(1, wmsg{}.str(2, "n"))
		} else {
			shape = shape.bytes(1, wmsg{}.int(1, d))
		}
	}
	return wmsg{}.bytes(1, wmsg{}.int(1, int64(elem)).bytes(2, shape))
}

func valueInfoPB(name string, typ wmsg) wmsg { return wmsg{}.str(1, name).bytes(2, typ) }

// modelPB wraps a graph in a ModelProto importing opset 17.
func modelPB(graph wmsg) wmsg {
	return wmsg{}.int(1, 8).bytes(8, wmsg{}.str(1, "").int(2, 17)).str(2, "test").bytes(7, graph)
}

// simpleGraphPB is a graph "main" computing y = Relu(x) + w with an
// initializer w.
func simpleGraphPB() wmsg {
	w := tensorPB("w", 1, 2).bytes(9, packedFloats(0.5, -1))
	return wmsg{}.str(2, "main").
		bytes(11, valueInfoPB("x", tensorTypePB(1, -1, 2))).
		bytes(12, valueInfoPB("y", tensorTypePB(1, -1, 2))).
		bytes(5, w).
		bytes(1, nodePB("relu", "Relu", []string{"x"}, []string{"r"})).
		bytes(1, nodePB("add", "Add", []string{"r", "w"}, []string{"y"}))
}

func u16LE(vals ...uint16) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func u32LE(vals ...uint32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func u64LE(vals ...uint64) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func twos(v int64) uint64 { return uint64(v) }

func TestDecodeTensorTypedFields(t *testing.T) {
	tests := []struct {
		name  string
		msg   wmsg
		dt    tensor.DType
		shape []int64
		data  []byte
	}{
		{"float packed", tensorPB("a", 1, 2).bytes(4, packedFloats(1.5, -2)), tensor.Float32, []int64{2}, packedFloats(1.5, -2)},
		{"float unpacked", tensorPB("a", 1, 2).fixed32(4, math.Float32bits(1.5)).fixed32(4, math.Float32bits(-2)), tensor.Float32, []int64{2}, packedFloats(1.5, -2)},
		{"float mixed", tensorPB("a", 1, 3).fixed32(4, math.Float32bits(1)).bytes(4, packedFloats(2, 3)), tensor.Float32, []int64{3}, packedFloats(1, 2, 3)},
		{"float scalar", tensorPB("a", 1).bytes(4, packedFloats(7)), tensor.Float32, []int64{}, packedFloats(7)},
		{"float unpacked dims", wmsg{}.int(2, 1).int(1, 1).int(1, 2).bytes(4, packedFloats(1, 2)), tensor.Float32, []int64{1, 2}, packedFloats(1, 2)},
		{"complex64", tensorPB("a", 14, 1).bytes(4, packedFloats(1, -1)), tensor.Complex64, []int64{1}, packedFloats(1, -1)},
		{"double", tensorPB("a", 11, 2).bytes(10, packedDoubles(0.25, -3)), tensor.Float64, []int64{2}, packedDoubles(0.25, -3)},
		{"double unpacked", tensorPB("a", 11, 1).fixed64(10, math.Float64bits(0.25)), tensor.Float64, []int64{1}, packedDoubles(0.25)},
		{"complex128", tensorPB("a", 15, 1).bytes(10, packedDoubles(2, 3)), tensor.Complex128, []int64{1}, packedDoubles(2, 3)},
		{"int32", tensorPB("a", 6, 3).bytes(5, packedVarints(-1, 7, math.MaxInt32)), tensor.Int32, []int64{3}, u32LE(math.MaxUint32, 7, math.MaxInt32)},
		{"int32 unpacked", tensorPB("a", 6, 2).varint(5, twos(-5)).varint(5, 9), tensor.Int32, []int64{2}, u32LE(uint32(0xFFFFFFFB), 9)},
		{"int16", tensorPB("a", 5, 2).bytes(5, packedVarints(-2, 300)), tensor.Int16, []int64{2}, u16LE(0xFFFE, 300)},
		{"uint16", tensorPB("a", 4, 1).bytes(5, packedVarints(65535)), tensor.Uint16, []int64{1}, u16LE(65535)},
		{"int8", tensorPB("a", 3, 3).bytes(5, packedVarints(-128, 127, -1)), tensor.Int8, []int64{3}, []byte{0x80, 0x7F, 0xFF}},
		{"uint8", tensorPB("a", 2, 2).bytes(5, packedVarints(255, 0)), tensor.Uint8, []int64{2}, []byte{255, 0}},
		{"bool", tensorPB("a", 9, 3).bytes(5, packedVarints(1, 0, 5)), tensor.Bool, []int64{3}, []byte{1, 0, 1}},
		{"float16 bits", tensorPB("a", 10, 2).bytes(5, packedVarints(0x3C00, 0xC000)), tensor.Float16, []int64{2}, u16LE(0x3C00, 0xC000)},
		{"bfloat16 bits", tensorPB("a", 16, 2).varint(5, 0x3F80).varint(5, 0xBF80), tensor.BFloat16, []int64{2}, u16LE(0x3F80, 0xBF80)},
		{"int64", tensorPB("a", 7, 2).bytes(7, packedVarints(-5, 1<<40)), tensor.Int64, []int64{2}, u64LE(twos(-5), 1<<40)},
		{"int64 unpacked", tensorPB("a", 7, 1).varint(7, twos(math.MinInt64)), tensor.Int64, []int64{1}, u64LE(1 << 63)},
		{"uint32", tensorPB("a", 12, 2).bytes(11, packedVarints(math.MaxUint32, 1)), tensor.Uint32, []int64{2}, u32LE(math.MaxUint32, 1)},
		{"uint64", tensorPB("a", 13, 1).varint(11, math.MaxUint64), tensor.Uint64, []int64{1}, u64LE(math.MaxUint64)},
		{"raw int16", tensorPB("a", 5, 2).bytes(9, u16LE(1, 0xFFFF)), tensor.Int16, []int64{2}, u16LE(1, 0xFFFF)},
		{"raw bfloat16", tensorPB("a", 16, 1).bytes(9, u16LE(0x3F80)), tensor.BFloat16, []int64{1}, u16LE(0x3F80)},
		{"empty", tensorPB("a", 1, 0, 5), tensor.Float32, []int64{0, 5}, []byte{}},
		{"empty raw", tensorPB("a", 7, 0).bytes(9, nil), tensor.Int64, []int64{0}, []byte{}},
		{"unknown fields", tensorPB("a", 6, 1).varint(5, 3).str(12, "doc").varint(999, 1).bytes(16, wmsg{}.str(1, "k")), tensor.Int32, []int64{1}, u32LE(3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tt, name, err := DecodeTensor(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if name != "a" && tc.name != "float unpacked dims" {
				t.Errorf("name = %q", name)
			}
			if tt.DType != tc.dt || !slices.Equal(tt.Shape, tc.shape) || !bytes.Equal(tt.Data, tc.data) {
				t.Errorf("got %v %v, want %s%v %v", tt, tt.Data, tc.dt, tc.shape, tc.data)
			}
		})
	}
}

func TestDecodeTensorStrings(t *testing.T) {
	tt, _, err := DecodeTensor(tensorPB("s", 8, 3).str(6, "a").str(6, "").str(6, "xyz"))
	if err != nil {
		t.Fatal(err)
	}
	if tt.DType != tensor.String || !slices.Equal(tensorStrings(tt), []string{"a", "", "xyz"}) || len(tt.Data) != 0 {
		t.Errorf("got %v %q", tt, tt.Strings)
	}
}

func TestDecodeTensorErrors(t *testing.T) {
	tests := []struct {
		name string
		msg  []byte
		want string
	}{
		{"count mismatch", tensorPB("a", 1, 2).bytes(4, packedFloats(1, 2, 3)), "float_data has 3 values, want 2"},
		{"complex count", tensorPB("a", 14, 2).bytes(4, packedFloats(1, 2)), "float_data has 2 values, want 4"},
		{"raw length", tensorPB("a", 7, 1).bytes(9, []byte{1, 2, 3, 4}), "raw_data has 4 bytes, want 8"},
		{"raw and typed", tensorPB("a", 1, 1).bytes(9, packedFloats(1)).bytes(4, packedFloats(1)), "both raw_data and float_data"},
		{"wrong typed field", tensorPB("a", 1, 1).bytes(7, packedVarints(1)), "int64_data in a float32 tensor"},
		{"int32 for float16 only", tensorPB("a", 10, 1).bytes(4, packedFloats(1)), "float_data in a float16 tensor"},
		{"no data", tensorPB("a", 1, 4), "no data for 4 elements"},
		{"no data scalar", tensorPB("a", 6), "no data for 1 elements"},
		{"negative dim", tensorPB("a", 1, 2, -1), "invalid dims [2 -1]"},
		{"overflow dims", tensorPB("a", 1, 1<<40, 1<<40), "invalid dims"},
		{"too large", tensorPB("a", 7, 1<<62).bytes(9, u64LE(1)), "too large"},
		{"too many dims", tensorPB("a", 1, make([]int64, 65)...), "more than 64 dims"},
		{"segment", tensorPB("a", 1, 1).bytes(3, wmsg{}.int(1, 0).int(2, 1)), "segmented tensors not supported"},
		{"2-bit", tensorPB("a", 25, 1).bytes(9, []byte{1}), "data type UINT2 (25) not supported"},
		{"int4 raw length", tensorPB("a", 22, 3).bytes(9, []byte{1}), "INT4[3]: data has 1 bytes, want 2"},
		{"uint4 int32 count", tensorPB("a", 21, 3).bytes(5, packedVarints(1, 2, 3)), "int32_data has 3 values, want 2 packed bytes"},
		{"int4 float data", tensorPB("a", 22, 2).bytes(4, packedFloats(1)), "float_data in a 4-bit tensor"},
		{"int4 negative dim", tensorPB("a", 22, -2), "invalid dims"},
		{"undefined type", wmsg{}.bytes(1, packedVarints(1)).bytes(9, []byte{1}), "data type UNDEFINED (0) not supported"},
		{"unknown type", tensorPB("a", 99, 1), "data type unknown (99) not supported"},
		{"raw string", tensorPB("a", 8, 1).bytes(9, []byte("x")), "raw_data for a string tensor"},
		{"string count", tensorPB("a", 8, 2).str(6, "x"), "string_data has 1 values, want 2"},
		{"packed floats odd", tensorPB("a", 1, 1).bytes(4, []byte{1, 2, 3}), "float_data: packed length 3 is not a multiple of 4"},
		{"packed varint truncated", tensorPB("a", 7, 1).bytes(7, []byte{0x80}), "int64_data: truncated varint"},
		{"varint overflow", tensorPB("a", 7, 1).bytes(7, bytes.Repeat([]byte{0xFF}, 10)).bytes(7, []byte{0x01}), "int64_data"},
		{"wire type", wmsg{}.str(2, "x"), "data_type (field 2): wire type length-delimited field, want varint"},
		{"wrong unpacked wire type", tensorPB("a", 1, 1).varint(4, 1), "float_data (field 4): wire type varint, want fixed32"},
		{"truncated tag", append(tensorPB("a", 1, 1), 0x80), "truncated tag"},
		{"truncated bytes", append(tensorPB("a", 1, 1), 0x4A, 0x05, 1), "field 9: truncated length-delimited field"},
		{"location", tensorPB("a", 1, 1).int(14, 2), "unknown data_location 2"},
		{"external without base dir", tensorPB("a", 1, 1).bytes(13, wmsg{}.str(1, "location").str(2, "w.bin")).int(14, 1), "no base directory"},
		{"end group", []byte{0x0C}, "end of group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DecodeTensor(tc.msg)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), "onnx: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to start with \"onnx: \" and contain %q", err, tc.want)
			}
		})
	}
}

// TestHugeDimsDoNotAllocate checks that a tensor claiming far more elements
// than its data holds is rejected before anything of that size is allocated.
func TestHugeDimsDoNotAllocate(t *testing.T) {
	inputs := [][]byte{
		tensorPB("a", 1, 1<<20, 1<<20).bytes(4, packedFloats(1)),
		tensorPB("a", 11, 1<<40).bytes(9, u64LE(1)),
		tensorPB("a", 8, 1<<40).str(6, "x"),
		tensorPB("a", 6, 1<<35),
	}
	for _, in := range inputs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, _, err := DecodeTensor(in); err == nil {
			t.Errorf("%x: no error", in)
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%x: allocated %d bytes", in, grew)
		}
	}
}

func TestDType(t *testing.T) {
	want := map[int32]tensor.DType{
		1: tensor.Float32, 2: tensor.Uint8, 3: tensor.Int8, 4: tensor.Uint16, 5: tensor.Int16,
		6: tensor.Int32, 7: tensor.Int64, 8: tensor.String, 9: tensor.Bool, 10: tensor.Float16,
		11: tensor.Float64, 12: tensor.Uint32, 13: tensor.Uint64, 14: tensor.Complex64,
		15: tensor.Complex128, 16: tensor.BFloat16, 17: tensor.Float8E4M3FN, 18: tensor.Float8E4M3FNUZ,
		19: tensor.Float8E5M2, 20: tensor.Float8E5M2FNUZ, 21: tensor.Uint4, 22: tensor.Int4,
		23: tensor.Float4E2M1FN, 24: tensor.Float8E8M0FNU,
	}
	for code, dt := range want {
		if got, err := DType(code); err != nil || got != dt {
			t.Errorf("DType(%d) = %v, %v; want %v", code, got, err, dt)
		}
	}
	for code, name := range map[int32]string{0: "UNDEFINED", 25: "UINT2", 26: "INT2", -1: "unknown", 1000: "unknown"} {
		_, err := DType(code)
		if err == nil || !strings.HasPrefix(err.Error(), "onnx: ") || !strings.Contains(err.Error(), name) {
			t.Errorf("DType(%d) error = %v, want one naming %s", code, err, name)
		}
	}
}

func TestStringers(t *testing.T) {
	if AttrInts.String() != "INTS" || AttrTypeProtos.String() != "TYPE_PROTOS" || AttrType(99).String() != "AttrType(99)" {
		t.Error("AttrType.String")
	}
	if TypeSequence.String() != "sequence" || TypeUnknown.String() != "unknown" || TypeKind(42).String() != "TypeKind(42)" {
		t.Error("TypeKind.String")
	}
}

func TestDecodeHandBuiltModel(t *testing.T) {
	fn := wmsg{}.str(1, "MyRelu").str(10, "custom").str(4, "x").str(5, "y").str(6, "alpha").
		bytes(11, attrPB("beta", AttrInt).int(3, 3)).
		bytes(7, nodePB("", "Relu", []string{"x"}, []string{"y"})).
		bytes(9, wmsg{}.str(1, "").int(2, 18))
	graph := simpleGraphPB().str(10, "the graph").bytes(13, valueInfoPB("r", tensorTypePB(1, -1, 2)))
	model := modelPB(graph).
		bytes(8, wmsg{}.str(1, "custom").int(2, 1)).
		str(3, "1.0").str(4, "org.test").int(5, 42).str(6, "doc").
		bytes(14, wmsg{}.str(1, "author").str(2, "me")).
		bytes(25, fn).
		varint(1000, 7).                   // unknown varint
		bytes(20, wmsg{}.bytes(1, graph)). // training_info: skipped
		fixed64(1001, 1).fixed32(1002, 1)
	// An unknown group holding a varint.
	model = protowire.AppendTag(model, 1003, protowire.StartGroupType)
	model = wmsg(model).varint(1, 1)
	model = protowire.AppendTag(model, 1003, protowire.EndGroupType)
	m, err := Decode(model, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.IRVersion != 8 || m.ProducerName != "test" || m.ProducerVersion != "1.0" || m.Domain != "org.test" || m.ModelVersion != 42 || m.DocString != "doc" {
		t.Errorf("model header = %+v", m)
	}
	if !slices.Equal(m.OpsetImports, []OpsetID{{"", 17}, {"custom", 1}}) {
		t.Errorf("opsets = %+v", m.OpsetImports)
	}
	if m.MetadataProps["author"] != "me" || len(m.MetadataProps) != 1 {
		t.Errorf("metadata = %v", m.MetadataProps)
	}
	g := m.Graph
	if g.Name != "main" || g.DocString != "the graph" || len(g.Nodes) != 2 || len(g.ValueInfo) != 1 {
		t.Fatalf("graph = %+v", g)
	}
	if g.Nodes[1].Name != "add" || !slices.Equal(g.Nodes[1].Inputs, []string{"r", "w"}) {
		t.Errorf("node 1 = %+v", g.Nodes[1])
	}
	if w := g.Initializers[0]; w.Name != "w" || !slices.Equal(w.Tensor.Float64s(), []float64{0.5, -1}) {
		t.Errorf("initializer = %+v", w)
	}
	if d := g.Inputs[0].Type.Dims; !slices.Equal(d, []Dim{{Param: "n"}, {2, "", true}}) {
		t.Errorf("x dims = %+v", d)
	}
	if len(m.Functions) != 1 {
		t.Fatalf("%d functions", len(m.Functions))
	}
	f := m.Functions[0]
	if f.Name != "MyRelu" || f.Domain != "custom" || !slices.Equal(f.Inputs, []string{"x"}) || !slices.Equal(f.Outputs, []string{"y"}) ||
		!slices.Equal(f.Attributes, []string{"alpha"}) || len(f.Nodes) != 1 || f.Nodes[0].OpType != "Relu" ||
		!slices.Equal(f.OpsetImports, []OpsetID{{"", 18}}) {
		t.Errorf("function = %+v", f)
	}
	if len(f.AttributeProtos) != 1 || f.AttributeProtos[0].Name != "beta" || f.AttributeProtos[0].I != 3 {
		t.Errorf("function attribute protos = %+v", f.AttributeProtos)
	}
}

func TestAttributes(t *testing.T) {
	tp := tensorTypePB(7, 3)
	attrs := []wmsg{
		wmsg{}.str(1, "f").fixed32(2, math.Float32bits(0.5)), // no type: inferred
		wmsg{}.str(1, "i").int(3, -4),
		wmsg{}.str(1, "s").str(4, "hi"),
		wmsg{}.str(1, "floats").bytes(7, packedFloats(1, 2)).fixed32(7, math.Float32bits(3)),
		wmsg{}.str(1, "ints").varint(8, 5).bytes(8, packedVarints(-6, 7)),
		wmsg{}.str(1, "strings").str(9, "a").str(9, "b"),
		wmsg{}.str(1, "t").bytes(5, tensorPB("c", 7, 1).bytes(7, packedVarints(9))),
		wmsg{}.str(1, "tensors").bytes(10, tensorPB("c", 6).bytes(5, packedVarints(1))).bytes(10, tensorPB("d", 1).bytes(4, packedFloats(2))),
		wmsg{}.str(1, "g").bytes(6, wmsg{}.str(2, "sub").bytes(1, nodePB("", "Identity", []string{"a"}, []string{"b"}))),
		wmsg{}.str(1, "graphs").bytes(11, wmsg{}.str(2, "g0")).bytes(11, wmsg{}.str(2, "g1")),
		wmsg{}.str(1, "tp").bytes(14, tp),
		wmsg{}.str(1, "tps").bytes(15, tp).bytes(15, tp),
		attrPB("ref", AttrFloat).str(21, "alpha"),
		wmsg{}.str(1, "sparse").bytes(22, wmsg{}.bytes(3, packedVarints(2))),
		attrPB("typed_empty_ints", AttrInts),
	}
	node := nodePB("n", "Custom", nil, []string{"y"}, attrs...)
	m, err := Decode(modelPB(wmsg{}.str(2, "main").bytes(1, node)), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := m.Graph.Nodes[0]
	check := func(name string, typ AttrType, ok func(a *Attribute) bool) {
		t.Helper()
		a := n.Attr(name)
		if a == nil || a.Type != typ || !ok(a) {
			t.Errorf("attribute %s = %+v, want type %v", name, a, typ)
		}
	}
	check("f", AttrFloat, func(a *Attribute) bool { return a.F == 0.5 })
	check("i", AttrInt, func(a *Attribute) bool { return a.I == -4 })
	check("s", AttrString, func(a *Attribute) bool { return string(a.S) == "hi" })
	check("floats", AttrFloats, func(a *Attribute) bool { return slices.Equal(a.Floats, []float32{1, 2, 3}) })
	check("ints", AttrInts, func(a *Attribute) bool { return slices.Equal(a.Ints, []int64{5, -6, 7}) })
	check("strings", AttrStrings, func(a *Attribute) bool { return len(a.Strings) == 2 && string(a.Strings[1]) == "b" })
	check("t", AttrTensor, func(a *Attribute) bool { return a.T.Int64At(0) == 9 })
	check("tensors", AttrTensors, func(a *Attribute) bool {
		return len(a.Tensors) == 2 && a.Tensors[0].DType == tensor.Int32 && a.Tensors[1].Float64At(0) == 2
	})
	check("g", AttrGraph, func(a *Attribute) bool { return a.G.Name == "sub" && a.G.Nodes[0].OpType == "Identity" })
	check("graphs", AttrGraphs, func(a *Attribute) bool { return len(a.Graphs) == 2 && a.Graphs[1].Name == "g1" })
	check("tp", AttrTypeProto, func(a *Attribute) bool {
		return a.TP.Kind == TypeTensor && a.TP.Elem == tensor.Int64 && slices.Equal(a.TP.Dims, []Dim{{3, "", true}})
	})
	check("tps", AttrTypeProtos, func(a *Attribute) bool { return len(a.TPs) == 2 })
	check("ref", AttrFloat, func(a *Attribute) bool { return a.RefAttrName == "alpha" })
	check("sparse", AttrSparseTensor, func(a *Attribute) bool { return a.T == nil })
	check("typed_empty_ints", AttrInts, func(a *Attribute) bool { return len(a.Ints) == 0 })
}

func TestTypeInfoKinds(t *testing.T) {
	seq := wmsg{}.bytes(4, wmsg{}.bytes(1, tensorTypePB(1, 2)))
	mp := wmsg{}.bytes(5, wmsg{}.int(1, 8).bytes(2, tensorTypePB(7)))
	opt := wmsg{}.bytes(9, wmsg{}.bytes(1, seq))
	sparse := wmsg{}.bytes(8, wmsg{}.int(1, 1).bytes(2, wmsg{}.bytes(1, wmsg{}.int(1, 4))))
	opaque := wmsg{}.bytes(7, wmsg{}.str(1, "d").str(2, "n"))
	f8 := tensorTypePB(25, 1) // UINT2, which has no dtype
	noShape := wmsg{}.bytes(1, wmsg{}.int(1, 1))
	negDim := wmsg{}.bytes(1, wmsg{}.int(1, 1).bytes(2, wmsg{}.bytes(1, wmsg{}.int(1, -1))))
	g := wmsg{}.str(2, "main")
	for i, typ := range []wmsg{seq, mp, opt, sparse, opaque, f8, noShape, negDim} {
		g = g.bytes(11, valueInfoPB(string(rune('a'+i)), typ))
	}
	g = g.bytes(11, wmsg{}.str(1, "untyped"))
	m, err := Decode(modelPB(g), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := m.Graph.Inputs
	if ti := in[0].Type; ti.Kind != TypeSequence || ti.ElemType.Elem != tensor.Float32 || ti.ElemType.Dims[0].Value != 2 {
		t.Errorf("sequence = %+v", ti)
	}
	if ti := in[1].Type; ti.Kind != TypeMap || ti.Elem != tensor.String || ti.ElemType.Elem != tensor.Int64 {
		t.Errorf("map = %+v", ti)
	}
	if ti := in[2].Type; ti.Kind != TypeOptional || ti.ElemType.Kind != TypeSequence {
		t.Errorf("optional = %+v", ti)
	}
	if ti := in[3].Type; ti.Kind != TypeSparseTensor || ti.Elem != tensor.Float32 || !ti.HasShape || ti.Dims[0].Value != 4 {
		t.Errorf("sparse = %+v", ti)
	}
	if ti := in[4].Type; ti.Kind != TypeUnknown {
		t.Errorf("opaque = %+v", ti)
	}
	if ti := in[5].Type; ti.Kind != TypeTensor || ti.Elem != tensor.Invalid || ti.ElemCode != 25 {
		t.Errorf("uint2 = %+v, want Invalid with code 25", ti)
	}
	if ti := in[6].Type; ti.HasShape || ti.Dims != nil {
		t.Errorf("no shape = %+v", ti)
	}
	if ti := in[7].Type; !ti.HasShape || ti.Dims[0] != (Dim{}) {
		t.Errorf("negative dim = %+v, want unknown", ti)
	}
	if in[8].Type != nil {
		t.Errorf("untyped = %+v", in[8].Type)
	}
}

func TestDecodeErrorsSayWhere(t *testing.T) {
	badPads := attrPB("pads", AttrInts).bytes(8, []byte{1, 0x80})
	conv := nodePB("conv1", "Conv", []string{"x", "w"}, []string{"y"}, badPads)
	tests := []struct {
		name  string
		model wmsg
		want  string
	}{
		{"attribute", modelPB(wmsg{}.str(2, "main").bytes(1, nodePB("relu", "Relu", nil, nil)).bytes(1, conv)),
			`onnx: graph "main" node 1 ("conv1", Conv): attribute "pads": ints: truncated varint`},
		{"initializer", modelPB(wmsg{}.bytes(5, tensorPB("w", 1, 2).bytes(9, u32LE(1))).str(2, "main")),
			`onnx: graph "main" initializer 0 ("w"): float32[2]: raw_data has 4 bytes, want 8`},
		{"subgraph", modelPB(wmsg{}.str(2, "main").bytes(1, nodePB("if", "If", []string{"c"}, []string{"y"},
			attrPB("then_branch", AttrGraph).bytes(6, wmsg{}.str(2, "then").bytes(1, nodePB("k", "Constant", nil, []string{"y"},
				attrPB("value", AttrTensor).bytes(5, tensorPB("v", 1, 3)))))))),
			`onnx: graph "main" node 0 ("if", If): attribute "then_branch": graph "then" node 0 ("k", Constant): attribute "value": t: float32[3]: no data for 3 elements`},
		{"input type", modelPB(wmsg{}.str(2, "main").bytes(11, valueInfoPB("x", wmsg{}.bytes(1, wmsg{}.str(1, "bad"))))),
			`onnx: graph "main" input 0 ("x"): type: tensor_type: elem_type (field 1): wire type length-delimited field, want varint`},
		{"sparse initializer", modelPB(wmsg{}.str(2, "main").bytes(15, wmsg{})),
			`onnx: graph "main": sparse initializers not supported`},
		{"opset", wmsg{}.bytes(8, wmsg{}.str(2, "x")), `onnx: opset_import 0: version (field 2): wire type length-delimited field, want varint`},
		{"function", wmsg{}.bytes(25, wmsg{}.str(1, "f").bytes(7, nodePB("n", "Foo", nil, nil, wmsg{}.str(1, "a").fixed64(2, 0)))),
			`onnx: function 0 ("f") node 0 ("n", Foo): attribute "a": f (field 2): wire type fixed64, want fixed32`},
		{"truncated", modelPB(simpleGraphPB())[:40], `onnx: field 7: truncated length-delimited field`},
		{"graph wire type", wmsg{}.int(7, 1), `onnx: graph (field 7): wire type varint, want length-delimited field`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.model, DecodeOptions{})
			if err == nil || err.Error() != tc.want {
				t.Errorf("error = %v\nwant    %s", err, tc.want)
			}
		})
	}
}

// nestedIfPB returns a graph holding depth-1 levels of If subgraphs.
func nestedIfPB(depth int) wmsg {
	g := wmsg{}.str(2, "leaf")
	for i := 1; i < depth; i++ {
		g = wmsg{}.str(2, "g").bytes(1, nodePB("", "If", []string{"c"}, []string{"y"}, attrPB("then_branch", AttrGraph).bytes(6, g)))
	}
	return g
}

func TestNestingLimits(t *testing.T) {
	if _, err := Decode(modelPB(nestedIfPB(maxNestingDepth)), DecodeOptions{}); err != nil {
		t.Errorf("%d nested graphs: %v", maxNestingDepth, err)
	}
	_, err := Decode(modelPB(nestedIfPB(maxNestingDepth+1)), DecodeOptions{})
	if err == nil || !strings.Contains(err.Error(), "subgraphs nested more than 64 deep") {
		t.Errorf("%d nested graphs: error %v", maxNestingDepth+1, err)
	}
	_, err = Decode(modelPB(nestedIfPB(2000)), DecodeOptions{})
	if err == nil {
		t.Error("2000 nested graphs: no error")
	}
	typ := tensorTypePB(1)
	for range 100 {
		typ = wmsg{}.bytes(4, wmsg{}.bytes(1, typ))
	}
	_, err = Decode(modelPB(wmsg{}.bytes(11, valueInfoPB("x", typ))), DecodeOptions{})
	if err == nil || !strings.Contains(err.Error(), "types nested more than 64 deep") {
		t.Errorf("nested sequence types: error %v", err)
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	data := modelPB(simpleGraphPB())
	m, err := Decode(data, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 0xFF
	}
	if w := m.Graph.Initializers[0].Tensor.Float64s(); !slices.Equal(w, []float64{0.5, -1}) {
		t.Errorf("initializer changed with the input buffer: %v", w)
	}
}

// externalModel writes a model whose initializer "w" (float32[2,2]) has the
// given external_data entries.
func externalModel(entries ...string) wmsg {
	w := tensorPB("w", 1, 2, 2).int(14, 1)
	for i := 0; i+1 < len(entries); i += 2 {
		w = w.bytes(13, wmsg{}.str(1, entries[i]).str(2, entries[i+1]))
	}
	return modelPB(wmsg{}.str(2, "main").bytes(5, w))
}

func writeTestFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	weights := append([]byte("8 bytes!"), packedFloats(1, 2, 3, 4)...)
	writeTestFile(t, filepath.Join(dir, "weights.bin"), weights)
	writeTestFile(t, filepath.Join(dir, "sub", "w.bin"), packedFloats(5, 6, 7, 8))

	path := filepath.Join(dir, "model.onnx")
	writeTestFile(t, path, externalModel("location", "weights.bin", "offset", "8", "length", "16", "checksum", "ignored"))
	m, err := ReadModelFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w := m.Graph.Initializers[0]
	if w.Name != "w" || !slices.Equal(w.Tensor.Shape, []int64{2, 2}) || !slices.Equal(w.Tensor.Float64s(), []float64{1, 2, 3, 4}) {
		t.Errorf("w = %v %v", w.Tensor, w.Tensor.Float64s())
	}

	m, err = Decode(externalModel("location", "sub/w.bin"), DecodeOptions{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Graph.Initializers[0].Tensor.Float64s(); !slices.Equal(got, []float64{5, 6, 7, 8}) {
		t.Errorf("sub/w.bin values = %v", got)
	}

	outside := filepath.Join(t.TempDir(), "secret.bin")
	writeTestFile(t, outside, packedFloats(9, 9, 9, 9))
	if err := os.Symlink(outside, filepath.Join(dir, "link.bin")); err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name string
		opts DecodeOptions
		msg  wmsg
		want string
	}{
		{"traversal", DecodeOptions{BaseDir: dir}, externalModel("location", "../x"), `external data location "../x" is absolute or escapes the model directory`},
		{"inner traversal", DecodeOptions{BaseDir: dir}, externalModel("location", "sub/../../x"), "escapes the model directory"},
		{"absolute", DecodeOptions{BaseDir: dir}, externalModel("location", outside), "is absolute or escapes"},
		{"symlink out", DecodeOptions{BaseDir: dir}, externalModel("location", "link.bin"), `external data "link.bin"`},
		{"length mismatch", DecodeOptions{BaseDir: dir}, externalModel("location", "weights.bin", "length", "12"), `external data "weights.bin": length 12, want 16 bytes`},
		{"short file", DecodeOptions{BaseDir: dir}, externalModel("location", "weights.bin", "offset", "12"), "file has 24 bytes, need 16 at offset 12"},
		{"huge offset", DecodeOptions{BaseDir: dir}, externalModel("location", "weights.bin", "offset", "9223372036854775807"), "file has 24 bytes"},
		{"bad offset", DecodeOptions{BaseDir: dir}, externalModel("location", "weights.bin", "offset", "-1"), `offset "-1" is not a non-negative integer`},
		{"no location", DecodeOptions{BaseDir: dir}, externalModel("offset", "0"), "external data without a location"},
		{"missing file", DecodeOptions{BaseDir: dir}, externalModel("location", "nope.bin"), `external data "nope.bin"`},
		{"no base dir", DecodeOptions{}, externalModel("location", "weights.bin"), "no base directory"},
		{"limit", DecodeOptions{BaseDir: dir, MaxExternalBytes: 15}, externalModel("location", "weights.bin"), "exceed the limit of 15"},
		{"directory", DecodeOptions{BaseDir: dir}, externalModel("location", "sub"), "not a regular file"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.msg, tc.opts)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, `onnx: graph "main" initializer 0 ("w"): float32[2,2]: `) || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want one containing %q", msg, tc.want)
			}
		})
	}
}

func TestExternalDataTotalLimit(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "w.bin"), packedFloats(1, 2, 3, 4))
	w := tensorPB("w", 1, 4).int(14, 1).bytes(13, wmsg{}.str(1, "location").str(2, "w.bin"))
	two := modelPB(wmsg{}.str(2, "main").bytes(5, w).bytes(5, w))
	if _, err := Decode(two, DecodeOptions{BaseDir: dir, MaxExternalBytes: 32}); err != nil {
		t.Errorf("32-byte limit: %v", err)
	}
	_, err := Decode(two, DecodeOptions{BaseDir: dir, MaxExternalBytes: 31})
	if err == nil || !strings.Contains(err.Error(), "initializer 1") {
		t.Errorf("31-byte limit: error %v, want one on initializer 1", err)
	}
}

func TestReadModelFileErrors(t *testing.T) {
	if _, err := ReadModelFile(filepath.Join(t.TempDir(), "missing.onnx")); err == nil || !strings.HasPrefix(err.Error(), "onnx: ") {
		t.Errorf("missing file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad.onnx")
	writeTestFile(t, path, []byte{0xFF})
	if _, err := ReadModelFile(path); err == nil || !strings.HasPrefix(err.Error(), "onnx: "+path+": ") {
		t.Errorf("corrupt file: %v", err)
	}
}

// TestDecodeTensor4Bit: INT4, UINT4 and FLOAT4E2M1 tensors (raw_data or
// one packed byte per int32_data value, the first element in the low
// nibble) decode unpacked to one element a byte.
func TestDecodeTensor4Bit(t *testing.T) {
	for _, tc := range []struct {
		name string
		pb   wmsg
		dt   tensor.DType
		want []int64
	}{
		{"int4 raw", tensorPB("a", 22, 3).bytes(9, []byte{0x71, 0x0F}), tensor.Int4, []int64{1, 7, -1}},
		{"int4 int32_data", tensorPB("a", 22, 4).bytes(5, packedVarints(0x98, 0x80)), tensor.Int4, []int64{-8, -7, 0, -8}},
		{"uint4 raw", tensorPB("a", 21, 2, 1).bytes(9, []byte{0xF0}), tensor.Uint4, []int64{0, 15}},
		{"float4 raw", tensorPB("a", 23, 3).bytes(9, []byte{0xF2, 0x07}), tensor.Float4E2M1FN, []int64{1, -6, 6}},
	} {
		got, _, err := DecodeTensor(tc.pb)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got.DType != tc.dt || fmt.Sprint(got.Int64s()) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %s %v, want %s %v", tc.name, got.DType, got.Int64s(), tc.dt, tc.want)
		}
	}
}
