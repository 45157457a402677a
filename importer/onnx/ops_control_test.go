package onnx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
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
		{"run-time condition is a cond", ifModel(nil, mul), "cond getitem", ""},
		{"run-time condition, shapes differ", ifModel(nil, narrow), "", "branches give output 0 as float32[N,3] and float32[N,1]"},
		{"constant condition, shapes differ", ifModel(&no, narrow), "slice.Tensor", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := onnx.NewImporter().Import(c.model)
			if !checkImport(t, g, err, c.targets, c.err) {
				return
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

// loopModel is (acc, scan) = Loop(M, cond, acc0) with the body
// acc' = acc + x, scan = acc', cond' = condOp(iter, limit) (Identity of
// cond_in when condOp is ""). M is the constant trip (or a graph input when
// trip < 0); x and acc0 are graph inputs.
func loopModel(trip int64, condOp string, limit int64) *onnx.Model {
	bodyNodes := []*onnx.Node{nnNode("Add", []string{"acc_in", "x"}, []string{"acc_out"}), nnNode("Identity", []string{"acc_out"}, []string{"scan"})}
	var bodyInits []*onnx.Initializer
	switch condOp {
	case "":
		bodyNodes = append(bodyNodes, nnNode("Identity", []string{"cond_in"}, []string{"cond_out"}))
	case "x":
		// A condition from run-time values: any(x > 0) as ReduceMax(x) > 0.
		bodyInits = append(bodyInits, &onnx.Initializer{Name: "zero", Tensor: tensor.New(tensor.Float32)})
		bodyNodes = append(bodyNodes, nnNode("ReduceMax", []string{"x"}, []string{"mx"}, nnAI("keepdims", 0)), nnNode("Greater", []string{"mx", "zero"}, []string{"cond_out"}))
	default:
		bodyInits = append(bodyInits, &onnx.Initializer{Name: "limit", Tensor: tensor.Scalar(tensor.Int64, float64(limit))})
		bodyNodes = append(bodyNodes, nnNode(condOp, []string{"iter", "limit"}, []string{"cond_out"}))
	}
	body := &onnx.Graph{
		Name:         "body",
		Inputs:       []*onnx.ValueInfo{nnVI("iter", tensor.Int64), nnVI("cond_in", tensor.Bool), nnVI("acc_in", tensor.Float32, 2)},
		Initializers: bodyInits,
		Nodes:        bodyNodes,
		Outputs:      []*onnx.ValueInfo{{Name: "cond_out"}, {Name: "acc_out"}, {Name: "scan"}},
	}
	inputs := []*onnx.ValueInfo{nnVI("x", tensor.Float32, 2), nnVI("acc0", tensor.Float32, 2)}
	var inits []*onnx.Initializer
	if trip >= 0 {
		inits = append(inits, &onnx.Initializer{Name: "M", Tensor: tensor.FromInt64s([]int64{trip})})
	} else {
		inputs = append(inputs, nnVI("M", tensor.Int64))
	}
	node := nnNode("Loop", []string{"M", "", "acc0"}, []string{"acc", "scans"}, &onnx.Attribute{Name: "body", Type: onnx.AttrGraph, G: body})
	return &onnx.Model{
		IRVersion:    8,
		OpsetImports: []onnx.OpsetID{{Domain: "", Version: 13}},
		Graph:        &onnx.Graph{Name: "g", Nodes: []*onnx.Node{node}, Inputs: inputs, Initializers: inits, Outputs: []*onnx.ValueInfo{{Name: "acc"}, {Name: "scans"}}},
	}
}

func TestLoopConverter(t *testing.T) {
	for _, c := range []struct {
		name  string
		model *onnx.Model
		metas string // the outputs' metas
		err   string
	}{
		{"constant trip count", loopModel(3, "", 0), "float32[2] float32[3,2]", ""},
		{"condition folds: stops when iter reaches 1", loopModel(10, "Less", 1), "float32[2] float32[2,2]", ""},
		{"run-time trip count", loopModel(-1, "", 0), "", "trip"},
		{"run-time condition: a while_loop, scans padded to 3 with a count", loopModel(3, "x", 0), "float32[2] float32[3,2] int64[]", ""},
		{"too many iterations", loopModel(onnx.MaxLoopUnroll+1, "", 0), "", "more than 1024 iterations"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := onnx.NewImporter().Import(c.model)
			if c.err != "" {
				var nv *onnx.NeedsValueError
				if c.err == "trip" {
					if !errors.As(err, &nv) || !strings.Contains(strings.Join(nv.Inputs, ","), "M") {
						t.Fatalf("err = %v, want a NeedsValueError for M", err)
					}
					return
				}
				if !errors.Is(err, onnx.ErrUnsupported) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want unsupported with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := nnOutputMetas(g); got != c.metas {
				t.Errorf("outputs %s, want %s", got, c.metas)
			}
		})
	}
}

// TestLoopRun runs the unrolled loop through PJRT: three iterations of
// acc += x from acc0 give acc0+3x, and the scan output holds each step.
func TestLoopRun(t *testing.T) {
	client := nnPlugin(t)
	g, err := onnx.NewImporter().Import(loopModel(3, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, acc0 := nnT(tensor.Float32, []float64{1, -0.5}, 2), nnT(tensor.Float32, []float64{10, 20}, 2)
	got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{x, acc0})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range [][]float64{{13, 18.5}, {11, 19.5, 12, 19, 13, 18.5}} {
		for j, v := range w {
			if g := got[i].Float64At(int64(j)); g != v {
				t.Errorf("output %d element %d = %v, want %v", i, j, g, v)
			}
		}
	}
}

// TestLoopSharesBodyConstants: a body's initializer and Constant values are
// added to the graph once, not once per unrolled iteration.
func TestLoopSharesBodyConstants(t *testing.T) {
	w := nnT(tensor.Float32, []float64{1, 2}, 2)
	v := nnT(tensor.Float32, []float64{3, 4}, 2)
	body := &onnx.Graph{
		Name:         "body",
		Inputs:       []*onnx.ValueInfo{nnVI("iter", tensor.Int64), nnVI("cond_in", tensor.Bool), nnVI("acc_in", tensor.Float32, 2)},
		Initializers: []*onnx.Initializer{{Name: "w", Tensor: w}},
		Nodes: []*onnx.Node{
			nnNode("Constant", nil, []string{"v"}, &onnx.Attribute{Name: "value", Type: onnx.AttrTensor, T: v}),
			nnNode("Mul", []string{"acc_in", "w"}, []string{"m"}),
			nnNode("Add", []string{"m", "v"}, []string{"acc_out"}),
			nnNode("Identity", []string{"cond_in"}, []string{"cond_out"}),
		},
		Outputs: []*onnx.ValueInfo{{Name: "cond_out"}, {Name: "acc_out"}},
	}
	m := &onnx.Model{
		IRVersion:    8,
		OpsetImports: []onnx.OpsetID{{Domain: "", Version: 13}},
		Graph: &onnx.Graph{Name: "g",
			Nodes:        []*onnx.Node{nnNode("Loop", []string{"M", "", "acc0"}, []string{"acc"}, &onnx.Attribute{Name: "body", Type: onnx.AttrGraph, G: body})},
			Inputs:       []*onnx.ValueInfo{nnVI("acc0", tensor.Float32, 2)},
			Initializers: []*onnx.Initializer{{Name: "M", Tensor: tensor.FromInt64s([]int64{5})}},
			Outputs:      []*onnx.ValueInfo{{Name: "acc"}}},
	}
	g, err := onnx.NewImporter().Import(m)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, t := range g.Attrs {
		if t == w || t == v {
			n++
		}
	}
	if n != 2 || len(g.Attrs) != 2 {
		t.Errorf("graph holds %d constants, %d of them w or v; want w and v once each", len(g.Attrs), n)
	}
}

// TestScanRun unrolls Scan(s0, x) with the body s' = s + x_t, scan = s',
// and runs it through PJRT: forward along axis 0, and with the input read
// in reverse and the output stacked along axis 1 in prepend order.
func TestScanRun(t *testing.T) {
	client := nnPlugin(t)
	body := &onnx.Graph{
		Name:    "body",
		Inputs:  []*onnx.ValueInfo{nnVI("s_in", tensor.Float32, 2), nnVI("x_t", tensor.Float32, 2)},
		Nodes:   []*onnx.Node{nnNode("Add", []string{"s_in", "x_t"}, []string{"s_out"}), nnNode("Identity", []string{"s_out"}, []string{"scan"})},
		Outputs: []*onnx.ValueInfo{{Name: "s_out"}, {Name: "scan"}},
	}
	s0, x := nnT(tensor.Float32, []float64{0, 0}, 2), nnT(tensor.Float32, []float64{1, 2, 3, 4, 5, 6}, 3, 2)
	for _, c := range []struct {
		name      string
		attrs     []*onnx.Attribute
		wantScan  []float64
		scanShape string
	}{
		{"forward", nil, []float64{1, 2, 4, 6, 9, 12}, "float32[3,2]"},
		{"reverse input, axis 1, prepend", []*onnx.Attribute{nnAInts("scan_input_directions", 1), nnAInts("scan_output_axes", 1), nnAInts("scan_output_directions", 1)},
			[]float64{9, 8, 5, 12, 10, 6}, "float32[2,3]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			attrs := append([]*onnx.Attribute{nnAI("num_scan_inputs", 1), {Name: "body", Type: onnx.AttrGraph, G: body}}, c.attrs...)
			g, err := nnImport(9, nnNode("Scan", []string{"s0", "x"}, []string{"s", "scan"}, attrs...),
				[]*onnx.ValueInfo{nnVI("s0", tensor.Float32, 2), nnVI("x", tensor.Float32, 3, 2)}, nil, []string{"s", "scan"})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Outputs()[1].Val().String(); got != c.scanShape {
				t.Errorf("scan output %s, want %s", got, c.scanShape)
			}
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{s0, x})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range [][]float64{{9, 12}, c.wantScan} {
				for j, w := range want {
					if g := got[i].Float64At(int64(j)); g != w {
						t.Errorf("output %d element %d = %v, want %v", i, j, g, w)
					}
				}
			}
		})
	}
	// A scan over a symbolic dim cannot be unrolled.
	_, err := nnImport(9, nnNode("Scan", []string{"s0", "x"}, []string{"s", "scan"}, nnAI("num_scan_inputs", 1), &onnx.Attribute{Name: "body", Type: onnx.AttrGraph, G: body}),
		[]*onnx.ValueInfo{nnVI("s0", tensor.Float32, 2), nnVI("x", tensor.Float32, "T", 2)}, nil, []string{"s", "scan"})
	if !errors.Is(err, onnx.ErrUnsupported) || !strings.Contains(err.Error(), "run-time size") {
		t.Errorf("scan over a symbolic dim: %v", err)
	}
}

// checkImport checks an import's result: with wantErr, an ErrUnsupported
// error containing it; otherwise no error and the call targets wantTargets.
// It reports whether the graph is there to check further.
func checkImport(t *testing.T, g *fxgraph.Graph, err error, wantTargets, wantErr string) bool {
	t.Helper()
	if wantErr != "" {
		if !errors.Is(err, onnx.ErrUnsupported) || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want unsupported with %q", err, wantErr)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := nnTargets(g); got != wantTargets {
		t.Errorf("targets %q, want %q", got, wantTargets)
	}
	return true
}
