package onnx

import (
	"errors"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// deferModel is silero-vad's decoder pattern: y = x.squeeze(1) if
// x.shape[1] == 1 else x, over x[N, T, 4] with symbolic T. The condition is
// computed from a symbolic size and the branches differ in rank, so the
// symbolic import cannot express it; it is deferred to concrete sizes.
func deferModel(declared bool) *Model {
	one := tensor.FromInt64s([]int64{1})
	idx := tensor.FromInt64s([]int64{1})
	nodes := []*Node{
		shNode("Shape", []string{"x"}, []string{"s"}),
		shNode("Gather", []string{"s", "idx"}, []string{"t"}, shInt("axis", 0)),
		shNode("Equal", []string{"t", "one"}, []string{"eq"}),
		shNode("Squeeze", []string{"eq"}, []string{"cond"}),
		shNode("If", []string{"cond"}, []string{"y"},
			&Attribute{Name: "then_branch", Type: AttrGraph, G: &Graph{Name: "then",
				Nodes:   []*Node{shNode("Squeeze", []string{"x", "idx"}, []string{"sq"})},
				Outputs: []*ValueInfo{{Name: "sq"}}}},
			&Attribute{Name: "else_branch", Type: AttrGraph, G: &Graph{Name: "else",
				Nodes:   []*Node{shNode("Identity", []string{"x"}, []string{"id"})},
				Outputs: []*ValueInfo{{Name: "id"}}}}),
	}
	out := &ValueInfo{Name: "y"}
	if declared {
		out = shVI("y", tensor.Float32, "N", "T", 4)
	}
	return &Model{
		IRVersion:    8,
		OpsetImports: []OpsetID{{Domain: "", Version: 13}},
		Graph: &Graph{Name: "g", Nodes: nodes, Inputs: []*ValueInfo{shVI("x", tensor.Float32, "N", "T", 4)},
			Initializers: []*Initializer{{Name: "one", Tensor: one}, {Name: "idx", Tensor: idx}},
			Outputs:      []*ValueInfo{out}},
	}
}

func TestShapeDependentImportIsDeferred(t *testing.T) {
	im, m := NewImporter(), deferModel(true)
	g, err := im.Import(m)
	if err != nil {
		t.Fatal(err)
	}
	if !g.IsDeferred() {
		t.Fatal("the import is not deferred")
	}
	if got := g.Outputs()[0].Val().String(); got != "float32[N,T,4]" {
		t.Errorf("deferred output meta %s, want the declared float32[N,T,4]", got)
	}
	cases := []struct {
		dims map[string]int64
		want string
	}{
		{map[string]int64{"N": 2, "T": 1}, "float32[2,4]"},   // then: squeezed
		{map[string]int64{"N": 2, "T": 5}, "float32[2,5,4]"}, // else: as is
	}
	for _, c := range cases {
		rg, err := im.ImportAt(m, ImportOptions{}, c.dims)
		if err != nil {
			t.Fatalf("%v: %v", c.dims, err)
		}
		if rg.IsDeferred() {
			t.Errorf("%v: the graph at these sizes is deferred again", c.dims)
		}
		if got := rg.Outputs()[0].Val().String(); got != c.want {
			t.Errorf("%v: output %s, want %s", c.dims, got, c.want)
		}
	}
	if _, err := im.ImportAt(m, ImportOptions{}, map[string]int64{"N": 2}); err == nil {
		t.Error("imported without a size for T")
	}
	// Without declared output types there is no signature to defer with:
	// the symbolic import's error stands, naming the If.
	_, err = NewImporter().Import(deferModel(false))
	if !errors.Is(err, ErrUnsupported) || err == nil {
		t.Fatalf("undeclared outputs: error %v, want ErrUnsupported", err)
	}
}
