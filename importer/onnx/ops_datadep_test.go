package onnx_test

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

// nonzeroRef is numpy's np.array(np.nonzero(x)) for x of shape dims.
func nonzeroRef(vals []float64, dims []int64) *tensor.Tensor {
	var rows [][]int64
	for flat, v := range vals {
		if v == 0 {
			continue
		}
		idx := make([]int64, len(dims))
		rest := int64(flat)
		for d := len(dims) - 1; d >= 0; d-- {
			idx[d], rest = rest%dims[d], rest/dims[d]
		}
		rows = append(rows, idx)
	}
	out := tensor.New(tensor.Int64, int64(len(dims)), int64(len(rows)))
	for j, r := range rows {
		for d, v := range r {
			out.SetInt64(int64(d*len(rows)+j), v)
		}
	}
	return out
}

// TestNonZeroRun runs NonZero on PJRT (padded to the input's size, sliced
// by its count on the host) against the indices computed in Go.
func TestNonZeroRun(t *testing.T) {
	client := nnPlugin(t)
	for _, c := range []struct {
		name string
		dt   tensor.DType
		dims []int64
		vals []float64
	}{
		{"float 2x3", tensor.Float32, []int64{2, 3}, []float64{0, 1.5, 0, -2, 0, 3}},
		{"int 1-D", tensor.Int32, []int64{5}, []float64{7, 0, 0, 1, 2}},
		{"bool 2x2x2", tensor.Bool, []int64{2, 2, 2}, []float64{1, 0, 0, 1, 1, 1, 0, 0}},
		{"all zero", tensor.Float32, []int64{2, 2}, []float64{0, 0, 0, 0}},
		{"none zero", tensor.Int64, []int64{3, 1}, []float64{4, 5, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dims := make([]any, len(c.dims))
			for i, d := range c.dims {
				dims[i] = int(d)
			}
			g, err := nnImport(13, nnNode("NonZero", []string{"x"}, []string{"y"}), []*onnx.ValueInfo{nnVI("x", c.dt, dims...)}, nil, []string{"y"})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(prog.Outputs) != 2 || len(prog.Bounded) != 1 {
				t.Fatalf("program outputs %v, bounded %v: want the padded indices and their count", prog.Outputs, prog.Bounded)
			}
			if want := []int64{int64(len(c.dims)), tensor.NumElements(c.dims)}; !slices.Equal(prog.Outputs[0].Shape, want) {
				t.Errorf("padded output shape %v, want %v", prog.Outputs[0].Shape, want)
			}
			got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{nnT(c.dt, c.vals, c.dims...)})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("%d outputs after Trim, want 1", len(got))
			}
			if err := conformance.Compare(got[0], nonzeroRef(c.vals, c.dims), 0, 0); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNonZeroFeedingAnOp checks that a NonZero whose padded result would
// reach an operator that cannot carry its count is rejected as unsupported,
// naming that operator.
func TestNonZeroFeedingAnOp(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *onnx.Node
		want string
	}{
		{"reshape to a run-time shape", nnNode("Reshape", []string{"i", "w"}, []string{"y"}), `operand "w" must be a constant`},
		{"reshape that interleaves the padding", nnNode("Reshape", []string{"i", "s22"}, []string{"y"}), "reshaping [1 4] (padded along 1) to [2 2] would interleave the padding"},
		{"pad of the padded axis", nnNode("Pad", []string{"i", "p0001"}, []string{"y"}), "it pads the padded axis 1 by 0 and 1"},
		{"reduce", nnNode("ReduceSum", []string{"i"}, []string{"y"}), "ReduceSum consumes the data-dependent result of NonZero"},
		{"gather along the padded axis", nnNode("Gather", []string{"i", "i"}, []string{"y"}, &onnx.Attribute{Name: "axis", Type: onnx.AttrInt, I: 0}), "the data is padded along another axis"},
		{"full-size operand", nnNode("Add", []string{"i", "w"}, []string{"y"}), "operand 1 has size 4 along the data-dependent axis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &onnx.Model{
				IRVersion:    8,
				OpsetImports: []onnx.OpsetID{{Domain: "", Version: 13}},
				Graph: &onnx.Graph{Name: "g", Inputs: []*onnx.ValueInfo{nnVI("x", tensor.Float32, 4), nnVI("w", tensor.Int64, 1, 4)},
					Initializers: []*onnx.Initializer{{Name: "s22", Tensor: tensor.FromInt64s([]int64{2, 2}, 2)}, {Name: "p0001", Tensor: tensor.FromInt64s([]int64{0, 0, 0, 1}, 4)}},
					Nodes:        []*onnx.Node{nnNode("NonZero", []string{"x"}, []string{"i"}), tc.node},
					Outputs:      []*onnx.ValueInfo{{Name: "y"}}},
			}
			g, err := onnx.NewImporter().Import(m)
			checkImport(t, g, err, "", tc.want)
		})
	}
}

// TestPostprocessMatchesORT runs detection postprocesses that keep
// computing with data-dependent results, against ONNX Runtime:
// nms_postprocess (gen_nms_postprocess.py, onnx.helper): NonMaxSuppression's
// indices sliced, gathered into boxes and scores and offset into labels,
// and a NonZero score filter transposed, gathered and scaled;
// detect_postprocess (gen_detect_postprocess.py, torch.onnx of torchvision's
// SSD-style postprocess): per-class NonZero filter, TopK with a run-time k,
// the classes packed together (Concat), torchvision's "no boxes" If,
// NonMaxSuppression of 300 padded boxes (the greedy while_loop), gathers by
// its indices and a ReduceMax over the packed boxes. Trim must leave ONNX
// Runtime's outputs exactly (within float rounding); bounded_sizes
// (gen_bounded_sizes.py, onnx.helper): Range, Reshape and Pad to sizes
// built from a selection's run-time shape, and a static size read from it;
// bounded_loop (gen_bounded_loop.py, onnx.helper): a Loop over a
// selection's run-time count reading its row i, carrying a sum and growing
// a value by one row per iteration (Mask R-CNN's mask pasting loop).
func TestPostprocessMatchesORT(t *testing.T) {
	client := nnPlugin(t)
	for _, tc := range []struct {
		name     string
		inShapes [][]int64
		outTypes []tensor.DType
		bounded  int
	}{
		{"nms_postprocess", [][]int64{{1, 64, 4}, {1, 1, 64}}, []tensor.DType{tensor.Float32, tensor.Float32, tensor.Int64, tensor.Float32}, 4},
		{"detect_postprocess", [][]int64{{160, 4}, {160, 4}}, []tensor.DType{tensor.Float32, tensor.Float32, tensor.Int64, tensor.Float32}, 3},
		{"bounded_sizes", [][]int64{{8, 4}, {8, 2}}, []tensor.DType{tensor.Int64, tensor.Float32, tensor.Float32, tensor.Float32}, 4},
		{"bounded_loop", [][]int64{{8, 4}, {8, 2}}, []tensor.DType{tensor.Float32, tensor.Float32}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := onnx.ImportFile("testdata/" + tc.name + ".onnx")
			if err != nil {
				t.Fatal(err)
			}
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(prog.Bounded) != tc.bounded {
				t.Fatalf("bounded outputs %v, want %d", prog.Bounded, tc.bounded)
			}
			raw, err := os.ReadFile("testdata/" + tc.name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				Cases []struct {
					Boxes, Scores []float64
					Outputs       []struct {
						Shape  []int64
						Values []float64
					}
				}
			}
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			exe := compileOnRunner(t, client, g, prog) // once for every case
			for i, rc := range ref.Cases {
				in := []*tensor.Tensor{nnT(tensor.Float32, rc.Boxes, tc.inShapes[0]...), nnT(tensor.Float32, rc.Scores, tc.inShapes[1]...)}
				got, err := exe.Run(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(rc.Outputs) {
					t.Fatalf("case %d: %d outputs, want %d", i, len(got), len(rc.Outputs))
				}
				for j, o := range rc.Outputs {
					if err := conformance.Compare(got[j], nnT(tc.outTypes[j], o.Values, o.Shape...), 1e-6, 1e-6); err != nil {
						t.Errorf("case %d, output %s: %v", i, g.OutputName(j), err)
					}
				}
			}
		})
	}
}

// TestCompressRun runs Compress on PJRT (padded along the axis, sliced by
// its count on the host) against numpy's np.compress, written out.
func TestCompressRun(t *testing.T) {
	client := nnPlugin(t)
	x := []float64{1, 2, 3, 4, 5, 6} // [3,2]
	for _, c := range []struct {
		name      string
		axis      *int64
		cond      []float64
		want      []float64
		wantShape []int64
	}{
		{"axis 0", ptr(int64(0)), []float64{0, 1, 1}, []float64{3, 4, 5, 6}, []int64{2, 2}},
		{"axis -1", ptr(int64(-1)), []float64{0, 1}, []float64{2, 4, 6}, []int64{3, 1}},
		{"flattened, short condition", nil, []float64{1, 0, 0, 1}, []float64{1, 4}, []int64{2}},
		{"none selected", ptr(int64(0)), []float64{0, 0, 0}, nil, []int64{0, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var attrs []*onnx.Attribute
			if c.axis != nil {
				attrs = append(attrs, &onnx.Attribute{Name: "axis", Type: onnx.AttrInt, I: *c.axis})
			}
			n := int64(len(c.cond))
			g, err := nnImport(11, nnNode("Compress", []string{"x", "cond"}, []string{"y"}, attrs...),
				[]*onnx.ValueInfo{nnVI("x", tensor.Float32, 3, 2), nnVI("cond", tensor.Bool, int(n))}, nil, []string{"y"})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{nnT(tensor.Float32, x, 3, 2), nnT(tensor.Bool, c.cond, n)})
			if err != nil {
				t.Fatal(err)
			}
			if err := conformance.Compare(got[0], nnT(tensor.Float32, c.want, c.wantShape...), 0, 0); err != nil {
				t.Error(err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// uniqueRef is ONNX Unique without axis (numpy's np.unique with
// return_index, return_inverse and return_counts; for sorted=0 the
// groups in order of first occurrence).
func uniqueRef(x []float64, sorted bool) (y, first, inverse, counts []float64) {
	at := map[float64]int{}
	for j, v := range x {
		if k, ok := at[v]; ok {
			counts[k]++
			continue
		}
		at[v] = len(y)
		y, first, counts = append(y, v), append(first, float64(j)), append(counts, 1)
	}
	order := make([]int, len(y))
	for k := range order {
		order[k] = k
	}
	if sorted {
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(y[a], y[b]) })
	}
	rank := make([]int, len(y))
	var ys, fs, cs []float64
	for newK, k := range order {
		rank[k] = newK
		ys, fs, cs = append(ys, y[k]), append(fs, first[k]), append(cs, counts[k])
	}
	for _, v := range x {
		inverse = append(inverse, float64(rank[at[v]]))
	}
	return ys, fs, inverse, cs
}

// TestUniqueRun runs Unique without axis on PJRT (Y, indices and counts
// padded and sliced by their count on the host) against uniqueRef.
func TestUniqueRun(t *testing.T) {
	client := nnPlugin(t)
	for _, x := range [][]float64{{2, 1, 1, 3, 4, 3}, {5, 5, 5, 5}, {3, -1, 2, 0}, {7}} {
		for _, sorted := range []int64{0, 1} {
			n := int64(len(x))
			g, err := nnImport(11, nnNode("Unique", []string{"x"}, []string{"y", "i", "inv", "c"}, &onnx.Attribute{Name: "sorted", Type: onnx.AttrInt, I: sorted}),
				[]*onnx.ValueInfo{nnVI("x", tensor.Float32, int(n))}, nil, []string{"y", "i", "inv", "c"})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{nnT(tensor.Float32, x, n)})
			if err != nil {
				t.Fatal(err)
			}
			y, first, inverse, counts := uniqueRef(x, sorted == 1)
			u := int64(len(y))
			for i, want := range []*tensor.Tensor{nnT(tensor.Float32, y, u), nnT(tensor.Int64, first, u), nnT(tensor.Int64, inverse, n), nnT(tensor.Int64, counts, u)} {
				if err := conformance.Compare(got[i], want, 0, 0); err != nil {
					t.Errorf("x %v, sorted %d, output %d: %v", x, sorted, i, err)
				}
			}
		}
	}
}

// TestNonMaxSuppressionRun runs NonMaxSuppression on 2 batches x 3
// classes x 40 random overlapping boxes (testdata/gen_nms.py) on PJRT
// against ONNX Runtime's selections, for three thresholds and limits.
func TestNonMaxSuppressionRun(t *testing.T) {
	client := nnPlugin(t)
	g, err := onnx.ImportFile("testdata/nms.onnx")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/nms.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Boxes, Scores []float64
		Cases         []struct {
			MaxOut   int64   `json:"max_out"`
			IoU      float64 `json:"iou"`
			ScoreThr float64 `json:"score_thr"`
			Selected []float64
			Rows     int64
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for _, tc := range ref.Cases {
		in := []*tensor.Tensor{
			nnT(tensor.Float32, ref.Boxes, 2, 40, 4), nnT(tensor.Float32, ref.Scores, 2, 3, 40),
			nnT(tensor.Int64, []float64{float64(tc.MaxOut)}, 1), nnT(tensor.Float32, []float64{tc.IoU}, 1), nnT(tensor.Float32, []float64{tc.ScoreThr}, 1),
		}
		got, err := conformance.Execute(context.Background(), client, prog, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := conformance.Compare(got[0], nnT(tensor.Int64, tc.Selected, tc.Rows, 3), 0, 0); err != nil {
			t.Errorf("max %d, iou %g, score > %g: %v", tc.MaxOut, tc.IoU, tc.ScoreThr, err)
		}
	}
}

// TestLoopScanRunTimeMatchesORT runs Loops with scan outputs and a number
// of iterations known only at run time (testdata/gen_loop_scan.py): trip
// count min(n, 8), and trip count 6 with a condition from the loop state.
// They become while_loops writing into buffers of 8 and 6 slices; the scan
// outputs come back bounded and trimmed to ONNX Runtime's (0 to 8 rows).
func TestLoopScanRunTimeMatchesORT(t *testing.T) {
	client := nnPlugin(t)
	g, err := onnx.ImportFile("testdata/loop_scan.onnx")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog.Bounded) != 2 || prog.Outputs[1].Shape[0] != 8 || prog.Outputs[3].Shape[0] != 6 {
		t.Fatalf("bounded %v, outputs %v: want the scan outputs padded to 8 and 6 rows", prog.Bounded, prog.Outputs)
	}
	raw, err := os.ReadFile("testdata/loop_scan.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			N       int64
			Limit   float64
			X       []float64
			Outputs []struct {
				Shape  []int64
				Values []float64
			}
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	exe := compileOnRunner(t, client, g, prog)
	for _, rc := range ref.Cases {
		n := tensor.New(tensor.Int64)
		n.SetInt64(0, rc.N)
		got, err := exe.Run(context.Background(), []*tensor.Tensor{n, nnT(tensor.Float32, rc.X, 3), nnT(tensor.Float32, []float64{rc.Limit})})
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range rc.Outputs {
			if err := conformance.Compare(got[j], nnT(tensor.Float32, o.Values, o.Shape...), 1e-6, 1e-6); err != nil {
				t.Errorf("n %d, limit %g, output %s: %v", rc.N, rc.Limit, g.OutputName(j), err)
			}
		}
	}
}

// TestPasteLoopMatchesORT runs torchvision's mask pasting
// (gen_paste_loop.py: paste_masks_in_image after a score filter, exported
// by torch.onnx) against ONNX Runtime: a Loop over the filter's run-time
// count whose body resizes each mask to its box's run-time size and pads
// it into the image (values of run-time extent along two axes, window.go).
// Five inputs: boxes partly outside the image, no box selected, and boxes
// outside the image, degenerate or larger than it.
func TestPasteLoopMatchesORT(t *testing.T) {
	client := nnPlugin(t)
	g, err := onnx.ImportFile("testdata/paste_loop.onnx")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/paste_loop.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Inputs [][]float64
			Output struct {
				Shape  []int64
				Values []float64
			}
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	exe := compileOnRunner(t, client, g, prog)
	shapes := [][]int64{{6, 1, 8, 8}, {6, 4}, {6}}
	for i, rc := range ref.Cases {
		in := make([]*tensor.Tensor, len(shapes))
		for k, s := range shapes {
			in[k] = nnT(tensor.Float32, rc.Inputs[k], s...)
		}
		got, err := exe.Run(context.Background(), in)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if err := conformance.Compare(got[0], nnT(tensor.Float32, rc.Output.Values, rc.Output.Shape...), 1e-6, 1e-6); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
}

// TestWindowGuardFailsLikeORT runs window_guard (gen_window_guard.py,
// onnx.helper): a Loop body slicing a vector to a run-time length and then
// to its first 4 entries. With every length >= 4 the rows equal ONNX
// Runtime's; with a length of 2 ONNX Runtime fails (a row of 2 entries),
// and so must xserve, by the guard that the run-time size reached the
// static one, rather than answer a row padded with zeros.
func TestWindowGuardFailsLikeORT(t *testing.T) {
	client := nnPlugin(t)
	g, err := onnx.ImportFile("testdata/window_guard.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Guards) != 1 {
		t.Fatalf("guards %v, want the loop's", g.Guards)
	}
	prog, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/window_guard.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Boxes, Scores []float64
		ShortBoxes    []float64 `json:"short_boxes"`
		Output        struct {
			Shape  []int64
			Values []float64
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	exe := compileOnRunner(t, client, g, prog)
	scores := nnT(tensor.Float32, ref.Scores, 8, 2)
	got, err := exe.Run(context.Background(), []*tensor.Tensor{nnT(tensor.Float32, ref.Boxes, 8, 4), scores})
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.Compare(got[0], nnT(tensor.Float32, ref.Output.Values, ref.Output.Shape...), 0, 0); err != nil {
		t.Error(err)
	}
	_, err = exe.Run(context.Background(), []*tensor.Tensor{nnT(tensor.Float32, ref.ShortBoxes, 8, 4), scores})
	if err == nil || !strings.Contains(err.Error(), "is smaller than the [4] it is used at") {
		t.Fatalf("a row of 2 entries held at 4: error %v, want the guard's", err)
	}
	t.Log(err)
}

// compileOnRunner compiles prog (lowered from g) on client through the
// runner, as serving does, and closes the model and executable when the
// test ends.
func compileOnRunner(t *testing.T, client *pjrt.Client, g *fxgraph.Graph, prog *lower.Program) *runner.Compiled {
	t.Helper()
	r, err := runner.New(client, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Model(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	exe, err := m.Compile(context.Background(), prog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exe.Close() })
	return exe
}
