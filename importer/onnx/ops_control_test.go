package onnx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/internal/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// ifBranch is a one-node If branch computing `out = op(x, c)` from the outer
// value x and the branch's own constant c = [k].
func ifBranch(name, op, out string, k float32) *onnx.Graph {
	c := tensor.New(tensor.Float32, 1)
	c.SetFloat64(0, float64(k))
	return &onnx.Graph{
		Name:         name,
		Initializers: []*onnx.Initializer{{Name: "k", Tensor: c}},
		Nodes:        []*onnx.Node{nnNode(op, []string{"x", "k"}, []string{out})},
		Outputs:      []*onnx.ValueInfo{{Name: out}},
	}
}

// ifModel is y = If(cond, then: x + 1, else: x * else_k), with cond a graph
// input or, when condValue is set, a constant.
func ifModel(condValue *bool, elseBranch *onnx.Graph) *onnx.Model {
	inputs := []*onnx.ValueInfo{nnVI("x", tensor.Float32, "N", 3)}
	var inits []*onnx.Initializer
	if condValue == nil {
		inputs = append(inputs, nnVI("cond", tensor.Bool))
	} else {
		c := tensor.New(tensor.Bool)
		if *condValue {
			c.Data[0] = 1
		}
		inits = append(inits, &onnx.Initializer{Name: "cond", Tensor: c})
	}
	node := nnNode("If", []string{"cond"}, []string{"y"},
		&onnx.Attribute{Name: "then_branch", Type: onnx.AttrGraph, G: ifBranch("then", "Add", "t", 1)},
		&onnx.Attribute{Name: "else_branch", Type: onnx.AttrGraph, G: elseBranch})
	return &onnx.Model{
		IRVersion:    8,
		OpsetImports: []onnx.OpsetID{{Domain: "", Version: 13}},
		Graph:        &onnx.Graph{Name: "g", Nodes: []*onnx.Node{node}, Inputs: inputs, Initializers: inits, Outputs: []*onnx.ValueInfo{{Name: "y"}}},
	}
}

func TestIfConverter(t *testing.T) {
	yes, no := true, false
	mul := ifBranch("else", "Mul", "e", 2)
	// An else branch whose output has another shape: x[:, :1] via Slice.
	narrow := &onnx.Graph{
		Name: "else",
		Initializers: []*onnx.Initializer{
			{Name: "s", Tensor: tensor.FromInt64s([]int64{0})}, {Name: "e", Tensor: tensor.FromInt64s([]int64{1})}, {Name: "a", Tensor: tensor.FromInt64s([]int64{1})},
		},
		Nodes:   []*onnx.Node{nnNode("Slice", []string{"x", "s", "e", "a"}, []string{"n"})},
		Outputs: []*onnx.ValueInfo{{Name: "n"}},
	}
	for _, c := range []struct {
		name    string
		model   *onnx.Model
		targets string
		err     string
	}{
		{"constant true inlines then", ifModel(&yes, mul), "add.Tensor", ""},
		{"constant false inlines else", ifModel(&no, mul), "mul.Tensor", ""},
		{"run-time condition selects", ifModel(nil, mul), "add.Tensor mul.Tensor view.default where.self", ""},
		{"run-time condition, shapes differ", ifModel(nil, narrow), "", "branches give output 0 as float32[N,3] and float32[N,1]"},
		{"constant condition, shapes differ", ifModel(&no, narrow), "slice.Tensor", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := onnx.NewImporter().Import(c.model)
			if c.err != "" {
				if !errors.Is(err, onnx.ErrUnsupported) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want unsupported with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := nnTargets(g); got != c.targets {
				t.Errorf("targets %q, want %q", got, c.targets)
			}
		})
	}
}

// TestIfRun runs a run-time If both ways through PJRT: y = x + 1 when cond,
// else x * 2.
func TestIfRun(t *testing.T) {
	client := nnPlugin(t)
	g, err := onnx.NewImporter().Import(ifModel(nil, ifBranch("else", "Mul", "e", 2)))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, map[string]int64{"N": 2})
	if err != nil {
		t.Fatal(err)
	}
	x := nnT(tensor.Float32, []float64{1, -2, 3.5, 0, 4, -1}, 2, 3)
	for _, cond := range []bool{true, false} {
		c := tensor.New(tensor.Bool)
		want := []float64{2, -1, 4.5, 1, 5, 0}
		if cond {
			c.Data[0] = 1
		} else {
			want = []float64{2, -4, 7, 0, 8, -2}
		}
		got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{x, c})
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if g := got[0].Float64At(int64(i)); g != w {
				t.Errorf("cond=%v: y[%d] = %v, want %v", cond, i, g, w)
			}
		}
	}
}
