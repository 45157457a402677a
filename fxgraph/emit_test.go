package fxgraph

import (
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestEmitterFolds checks the importers' shared emit helper: constant inputs
// fold up to the size limit, a graph input stops folding, ShapeOnly ops fold
// on static shapes, and a folded constant is named after its source.
func TestEmitterFolds(t *testing.T) {
	g := New()
	e := Emitter{Graph: g, IR: testRegistry(), MaxFoldElements: 4}
	x := g.AddPlaceholder("x", Static(tensor.Int64, 4))
	w := g.AddConstant("w", tensor.FromInt64s([]int64{1, 2, 3, 4}))
	big := g.AddConstant("big", tensor.FromInt64s([]int64{1, 2, 3, 4, 5}))
	for _, c := range []struct {
		name   string
		args   []any
		folded string // name of the constant, "" when not folded
	}{
		{"constants fold", []any{w, w}, "w_add"},
		{"over the limit stays", []any{big, big}, ""},
		{"an input stays", []any{x, w}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := e.Emit("add", testAdd, c.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Opcode == GetAttr; got != (c.folded != "") {
				t.Fatalf("%s: folded = %v", n, got)
			}
			if c.folded != "" && n.Name != c.folded {
				t.Errorf("folded constant named %s, want %s", n.Name, c.folded)
			}
		})
	}
	s, err := e.Emit("", testShape, []any{x}, nil)
	if err != nil || g.ConstValue(s) == nil || s.Name != "shape_c" {
		t.Errorf("shape of a static input: %v, %v; want the folded constant shape_c", s, err)
	}
	if _, err := e.Emit("", &Op{Name: "xserve.nope"}, nil, nil); err == nil {
		t.Error("an unknown target emitted")
	}
}
