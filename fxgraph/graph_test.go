package fxgraph

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// testAdd and testShape are two toy ops, so that the pass machinery can be
// tested without depending on the real operator families: xserve.add(a, b)
// adds elementwise; xserve.shape(x) is x's shape as int64.
var (
	testAdd = &Op{
		Name: "xserve.add",
		Shape: func(n *Node) (Meta, error) {
			a, err := n.InputMeta(0)
			if err != nil {
				return Meta{}, err
			}
			b, err := n.InputMeta(1)
			if err != nil {
				return Meta{}, err
			}
			s, err := BroadcastShapes(a.Shape, b.Shape)
			if err != nil {
				return Meta{}, err
			}
			return One(PromoteTypes(a.DType, b.DType), s), nil
		},
		Eval: func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
			a, b := value(n.Args[0].(*Node)), value(n.Args[1].(*Node))
			if tensor.ShapeString(a.Shape) != tensor.ShapeString(b.Shape) {
				return nil, nil
			}
			out := tensor.New(a.DType, a.Shape...)
			for i := int64(0); i < a.NumElements(); i++ {
				out.SetInt64(i, a.Int64At(i)+b.Int64At(i))
			}
			return []*tensor.Tensor{out}, nil
		},
	}
	testShape = &Op{
		Name:      "xserve.shape",
		ShapeOnly: true,
		Shape: func(n *Node) (Meta, error) {
			a, err := n.InputMeta(0)
			if err != nil {
				return Meta{}, err
			}
			return One(tensor.Int64, StaticShape(int64(a.Rank()))), nil
		},
		Eval: func(n *Node, _ func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
			dims, _ := n.Args[0].(*Node).Val().Shape.Static()
			return []*tensor.Tensor{tensor.FromInt64s(dims)}, nil
		},
	}
)

// testRegistry holds the toy ops and getitem.
func testRegistry() *Registry {
	return &Registry{ops: map[string]*Op{GetItem.Name: GetItem, testAdd.Name: testAdd, testShape.Name: testShape}}
}

func TestGraphEditsAndValidate(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.Float32, Shape: Shape{S("batch"), D(3)}})
	w := g.AddConstant("weight", tensor.FromFloat32s([]float32{1, 2, 3}))
	add := g.AddCall(testAdd, []any{x, w}, nil)
	add2 := g.AddCall(testAdd, []any{add, add}, nil)
	g.SetOutput(add2)
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if add.Name != "add" || add2.Name != "add_1" {
		t.Errorf("names = %s, %s; want add, add_1 (FX naming)", add.Name, add2.Name)
	}
	if got := len(add.Users()); got != 1 {
		t.Errorf("add has %d users, want 1 (add_1 uses it twice but counts once)", got)
	}
	if err := g.Erase(add); err == nil || !strings.Contains(err.Error(), "still used by add_1") {
		t.Errorf("erasing a used node: err = %v", err)
	}
	// Rewire add_1 to read x directly, then add is dead.
	if n := g.ReplaceAllUses(add, x); n != 1 {
		t.Errorf("ReplaceAllUses changed %d users, want 1", n)
	}
	if removed := g.EliminateDeadCode(); removed != 2 {
		t.Errorf("DCE removed %d nodes, want 2 (add and the now-unused weight)", removed)
	}
	if _, ok := g.Attrs["weight"]; ok {
		t.Error("DCE kept the attr of an erased get_attr")
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	want := "graph():\n" +
		"    %x : float32[batch,3] [num_users=1] = placeholder[target=x]\n" +
		"    %add_1 : ? [num_users=1] = call_function[target=xserve.add](args = (%x, %x), kwargs = {})\n" +
		"    return (add_1,)\n"
	if got := g.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}

func TestValidateCatchesBrokenGraphs(t *testing.T) {
	tests := []struct {
		name  string
		build func() *Graph
		want  string
	}{
		{"no output", func() *Graph {
			g := New()
			g.AddPlaceholder("x", Static(tensor.Float32, 2))
			return g
		}, "no output node"},
		{"use before def", func() *Graph {
			g := New()
			x := g.AddPlaceholder("x", Static(tensor.Float32, 2))
			a := g.AddCall(testAdd, []any{x, x}, nil)
			b := g.AddCall(testAdd, []any{x, x}, nil)
			g.SetOutput(b)
			g.SetArgs(a, []any{b, b}, nil)
			return g
		}, "before it is defined"},
		{"missing attr", func() *Graph {
			g := New()
			c := g.AddConstant("c", tensor.Scalar(tensor.Float32, 1))
			g.SetOutput(c)
			delete(g.Attrs, "c")
			return g
		}, "does not hold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.build().Validate()
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestSpecializeFoldsShapeComputations(t *testing.T) {
	r := testRegistry()
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.Float32, Shape: Shape{S("batch"), D(4)}})
	one := g.AddConstant("one", tensor.FromInt64s([]int64{1, 1}))
	shape := g.AddCall(testShape, []any{x}, nil)
	plus := g.AddCall(testAdd, []any{shape, one}, nil)
	g.SetOutput(plus)
	if err := r.PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	// Before specialization the shape is symbolic: nothing folds.
	if n, err := r.FoldConstants(g, 1<<10); err != nil || n != 0 {
		t.Fatalf("FoldConstants on symbolic graph = %d, %v; want 0, nil", n, err)
	}
	s, err := r.Specialize(g, map[string]int64{"batch": 8}, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	outs := s.Outputs()
	v := s.ConstValue(outs[0])
	if v == nil {
		t.Fatalf("output not folded:\n%s", s)
	}
	if got := v.Int64s(); got[0] != 9 || got[1] != 5 {
		t.Errorf("folded value = %v, want [9 5]", got)
	}
	// The original graph is untouched.
	if g.Placeholders()[0].Val().Shape[0] != S("batch") {
		t.Error("Specialize modified its input graph")
	}
	if _, err := r.Specialize(g, map[string]int64{}, 1<<10); err == nil || !strings.Contains(err.Error(), `symbol "batch"`) {
		t.Errorf("missing symbol: err = %v", err)
	}
}

func TestBroadcastAndPromote(t *testing.T) {
	bs := []struct {
		a, b, want Shape
	}{
		{Shape{S("n"), D(3)}, Shape{D(3)}, Shape{S("n"), D(3)}},
		{Shape{S("n"), D(1)}, Shape{D(1), D(4)}, Shape{S("n"), D(4)}},
		{Shape{D(2), D(1)}, Shape{D(5)}, Shape{D(2), D(5)}},
	}
	for _, tc := range bs {
		got, err := BroadcastShapes(tc.a, tc.b)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("BroadcastShapes(%s, %s) = %s, %v; want %s", tc.a, tc.b, got, err, tc.want)
		}
	}
	if _, err := BroadcastShapes(Shape{D(2)}, Shape{D(3)}); err == nil {
		t.Error("broadcasting [2] with [3] succeeded")
	}
	ps := []struct{ a, b, want tensor.DType }{
		{tensor.Int32, tensor.Float32, tensor.Float32},
		{tensor.Uint8, tensor.Int8, tensor.Int16},
		{tensor.Float16, tensor.BFloat16, tensor.Float32},
		{tensor.Bool, tensor.Int64, tensor.Int64},
		{tensor.Float64, tensor.Complex64, tensor.Complex128},
	}
	for _, tc := range ps {
		if got := PromoteTypes(tc.a, tc.b); got != tc.want {
			t.Errorf("PromoteTypes(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestBindDims(t *testing.T) {
	g := New()
	g.AddPlaceholder("a", TensorMeta{DType: tensor.Float32, Shape: Shape{S("batch"), D(3)}})
	g.AddPlaceholder("b", TensorMeta{DType: tensor.Int64, Shape: Shape{S("batch")}})
	dims, err := g.BindDims([]*tensor.Tensor{tensor.New(tensor.Float32, 4, 3), tensor.New(tensor.Int64, 4)})
	if err != nil || dims["batch"] != 4 {
		t.Fatalf("BindDims = %v, %v", dims, err)
	}
	bad := [][]*tensor.Tensor{
		{tensor.New(tensor.Float32, 4, 3), tensor.New(tensor.Int64, 5)},    // batch conflict
		{tensor.New(tensor.Float32, 4, 2), tensor.New(tensor.Int64, 4)},    // static dim
		{tensor.New(tensor.Float64, 4, 3), tensor.New(tensor.Int64, 4)},    // dtype
		{tensor.New(tensor.Float32, 4, 3, 1), tensor.New(tensor.Int64, 4)}, // rank
	}
	for i, in := range bad {
		if _, err := g.BindDims(in); err == nil {
			t.Errorf("case %d: BindDims accepted bad inputs", i)
		}
	}
}

func TestTablePrintsEveryNode(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", Static(tensor.Float32, 2))
	a := g.AddCall(testAdd, []any{x, x}, map[string]any{"alpha": int64(1)})
	g.SetOutput(a)
	if err := testRegistry().PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	tab := g.Table()
	for _, want := range []string{"opcode", "placeholder", "call_function  add", "xserve.add", "(%x, %x)", "{alpha: 1}", "float32[2]", "output"} {
		if !strings.Contains(tab, want) {
			t.Errorf("Table() lacks %q:\n%s", want, tab)
		}
	}
}

// TestOrderUnderManyEdits inserts more nodes at one insert point than the
// order keys have room for (forcing relabels), interleaves constants and
// inputs added late, erases nodes in the middle, and checks that Nodes,
// Users and Validate agree on one order and that names stay FX-like.
func TestOrderUnderManyEdits(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", Static(tensor.Int64, 2))
	first := g.AddCall(testAdd, []any{x, x}, nil)
	last := g.AddCall(testAdd, []any{first, first}, nil)
	g.SetOutput(last)
	g.SetInsertPoint(last)
	prev, want := first, []*Node{first}
	for i := range 100 { // > log2(keyGap) inserts at one point
		c := g.AddConstant("c", tensor.FromInt64s([]int64{int64(i), 0}))
		prev = g.AddCall(testAdd, []any{prev, c}, nil)
		want = append(want, prev)
	}
	g.SetInsertPoint(nil)
	g.SetArgs(last, []any{prev, first}, nil)
	y := g.AddPlaceholder("y", Static(tensor.Int64, 2))
	want = append(want, last)
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	var calls []*Node
	for _, n := range g.Nodes() {
		if n.Opcode == CallFunction {
			calls = append(calls, n)
		}
	}
	if len(calls) != len(want) {
		t.Fatalf("%d calls, want %d", len(calls), len(want))
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Fatalf("call %d is %s, want %s", i, calls[i].Name, want[i].Name)
		}
	}
	if ph := g.Placeholders(); len(ph) != 2 || ph[1] != y {
		t.Errorf("placeholders %v, want x, y", ph)
	}
	if got := want[50].Name; got != "add_51" { // add and add_1 came first
		t.Errorf("node 50 is named %s, want add_51", got)
	}
	if users := first.Users(); len(users) != 2 || users[0] != want[1] || users[1] != last {
		t.Errorf("users of %s: %v", first.Name, users)
	}
	// Erase a run in the middle; later adds still get fresh names.
	g.ReplaceAllUses(want[60], want[40])
	if n := g.EliminateDeadCode(); n != 40 {
		t.Errorf("DCE erased %d, want 40 (20 adds, 20 constants)", n)
	}
	if g.Len() != 2+80+(len(want)-20)+1 { // inputs, constants, calls, output
		t.Errorf("Len() = %d", g.Len())
	}
	if n := g.AddCall(testAdd, []any{x, y}, nil); n.Name != "add_102" {
		t.Errorf("new node named %s, want add_102", n.Name)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
}
