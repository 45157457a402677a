package fx_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/importer/fx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// runnable are the fixtures (testdata/<name>/, written by
// make_fixtures.py) that import and run; each holds model.pt2 and the
// inputs and eager PyTorch outputs of two cases.
var runnable = []string{"cnn", "cnn_train", "block", "block_train", "tied", "kwargs", "kwargs_train", "resnet18", "cond", "while_loop", "map", "float8"}

func fixture(name string) string { return filepath.Join("testdata", name, "model.pt2") }

func openPlugin(t testing.TB) *pjrt.Client {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: "../.."})
	if err != nil {
		t.Fatalf("%v (run `make pjrt`)", err)
	}
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readCase reads testdata/<name>/<prefix><k>_<i>.npy for i = 0, 1, ...
func readCase(t *testing.T, name, prefix string, k int) []*tensor.Tensor {
	t.Helper()
	var out []*tensor.Tensor
	for i := 0; ; i++ {
		p := filepath.Join("testdata", name, fmt.Sprintf("%s%d_%d.npy", prefix, k, i))
		if _, err := os.Stat(p); err != nil {
			return out
		}
		x, err := tensor.ReadNpyFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
}

// closeTo checks got against want: same dtype and shape, floats within
// 1e-4 * max(1, |want|), everything else exactly.
func closeTo(got, want *tensor.Tensor) error {
	if got.DType != want.DType || tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		return fmt.Errorf("got %s, want %s", got, want)
	}
	worst, at := 0.0, int64(-1)
	for i := int64(0); i < want.NumElements(); i++ {
		if !want.DType.IsFloat() {
			if got.Int64At(i) != want.Int64At(i) {
				return fmt.Errorf("element %d is %d, want %d", i, got.Int64At(i), want.Int64At(i))
			}
			continue
		}
		w, g := want.Float64At(i), got.Float64At(i)
		d := math.Abs(g - w)
		if math.IsNaN(g) != math.IsNaN(w) || d > 1e-4*math.Max(1, math.Abs(w)) {
			return fmt.Errorf("element %d is %g, want %g", i, g, w)
		}
		if d > worst {
			worst, at = d, i
		}
	}
	_ = at
	return nil
}

// TestFixturesRun imports every runnable fixture, lowers it for the shapes
// of each case, runs it on the XLA CPU plugin and compares with PyTorch's
// eager outputs.
func TestFixturesRun(t *testing.T) {
	client := openPlugin(t)
	l := lower.New(lower.Options{})
	for _, name := range runnable {
		t.Run(name, func(t *testing.T) {
			g, err := fx.ImportFile(fixture(name))
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; ; k++ {
				inputs := readCase(t, name, "in", k)
				if len(inputs) == 0 {
					if k < 2 {
						t.Fatalf("fixture has %d cases, want 2", k)
					}
					break
				}
				want := readCase(t, name, "out", k)
				dims, err := g.BindDims(inputs)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				prog, err := l.Lower(g, dims)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				got, err := conformance.Execute(context.Background(), client, prog, inputs)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				if len(got) != len(want) {
					t.Fatalf("case %d: %d outputs, want %d", k, len(got), len(want))
				}
				for j := range want {
					if err := closeTo(got[j], want[j]); err != nil {
						t.Errorf("case %d (dims %v) output %d (%s): %v", k, dims, j, g.OutputName(j), err)
					}
				}
			}
		})
	}
}

// TestSignature checks inputs, outputs, symbols and their ranges.
func TestSignature(t *testing.T) {
	tests := []struct {
		name    string
		inputs  []string // "name: meta"
		outputs []string
		ranges  string
	}{
		{"cnn", []string{"x: float32[s77,3,8,8]"}, []string{"_log_softmax", "sum_1"}, "s77=[1, 64]"},
		{"cnn_train", []string{"x: float32[s77,3,8,8]"}, []string{"log_softmax", "sum_1"}, "s77=[1, 64]"},
		{"block", []string{"x: float32[s77,s27,16]", "mask: float32[s27,s27]"}, []string{"_softmax_2"}, "s27=[2, 64] s77=[1, 64]"},
		{"tied", []string{"ids: int64[s23,s27]"}, []string{"linear"}, "s23=[1, 64] s27=[2, 64]"},
		{"resnet18", []string{"x: float32[s77,3,32,32]"}, []string{"addmm"}, "s77=[1, 64]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := fx.ImportFile(fixture(tc.name))
			if err != nil {
				t.Fatal(err)
			}
			var inputs []string
			for _, p := range g.Placeholders() {
				inputs = append(inputs, p.Target+": "+p.Val().String())
			}
			if !slices.Equal(inputs, tc.inputs) {
				t.Errorf("inputs %q, want %q", inputs, tc.inputs)
			}
			if !slices.Equal(g.OutputNames, tc.outputs) {
				t.Errorf("outputs %q, want %q", g.OutputNames, tc.outputs)
			}
			var ranges []string
			for s, r := range g.SymbolRanges {
				ranges = append(ranges, s+"="+r.String())
			}
			slices.Sort(ranges)
			if got := strings.Join(ranges, " "); got != tc.ranges {
				t.Errorf("symbol ranges %q, want %q", got, tc.ranges)
			}
		})
	}
}

// TestResnet18Targets checks that the imported torchvision resnet18 has
// torch's call_function targets (after run_decompositions) in torch's order.
func TestResnet18Targets(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "resnet18", "targets.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(data))
	g, err := importer.Load(fixture("resnet18"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range g.Nodes() {
		if n.Opcode == fxgraph.CallFunction {
			got = append(got, n.Target)
		}
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("call %d is %s, torch has %s (%d calls, torch %d)", i, got[i], want[i], len(got), len(want))
			}
		}
		t.Fatalf("%d calls, torch has %d", len(got), len(want))
	}
	table := g.Table()
	for _, row := range []string{
		"placeholder    x ",
		"get_attr       conv1_weight ",
		"aten.convolution.default",
		"aten._native_batch_norm_legit_no_training.default",
		"aten.max_pool2d_with_indices.default",
		"float32[s77,1000]",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("Table() has no %q:\n%s", row, table)
		}
	}
}

// TestTrainingIRDecomposed checks which targets the importer put in place
// of the training IR's composite operators.
func TestTrainingIRDecomposed(t *testing.T) {
	tests := []struct {
		name      string
		want, not []string
	}{
		{"cnn_train",
			[]string{"aten.convolution.default", "aten._native_batch_norm_legit_no_training.default", "aten.max_pool2d_with_indices.default",
				"aten._adaptive_avg_pool2d.default", "aten.split.Tensor", "aten._log_softmax.default", "aten.linear.default"},
			[]string{"aten.conv2d.default", "aten.batch_norm.default", "aten.flatten.using_ints", "aten.chunk.default"}},
		{"block_train",
			[]string{"aten.native_layer_norm.default", "aten.matmul.default", "aten._softmax.default", "aten.tril.default", "aten.gelu.default"},
			[]string{"aten.scaled_dot_product_attention.default", "aten.dropout.default", "aten.layer_norm.default"}},
		{"kwargs_train",
			[]string{"aten.native_group_norm.default", "aten.constant_pad_nd.default", "aten.select.int", "aten.cat.default", "aten.relu.default"},
			[]string{"aten.relu_.default", "aten.add_.Tensor", "aten.unbind.int", "aten.stack.default", "aten.group_norm.default"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := fx.ImportFile(fixture(tc.name))
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, n := range g.Nodes() {
				have[n.Target] = true
			}
			for _, w := range tc.want {
				if !have[w] {
					t.Errorf("no %s node", w)
				}
			}
			for _, w := range tc.not {
				if have[w] {
					t.Errorf("a %s node is left", w)
				}
			}
		})
	}
}

// TestSharedStorage checks weights that are views of one storage: a
// parameter sliced from another, a transposed buffer and a sliced buffer of
// the same base.
func TestSharedStorage(t *testing.T) {
	g, err := fx.ImportFile(fixture("tied"))
	if err != nil {
		t.Fatal(err)
	}
	// small and proj_half are read only through their transposes, which the
	// importer folds (fxgraph.Emitter), so the graph holds small_t and
	// proj_half_t instead.
	big, smallT := g.Attrs["big"], g.Attrs["small_t"]
	projT, projHalfT := g.Attrs["proj_t"], g.Attrs["proj_half_t"]
	if big == nil || smallT == nil || projT == nil || projHalfT == nil {
		t.Fatalf("attrs %v", keys(g.Attrs))
	}
	if got := tensor.ShapeString(projT.Shape); got != "[8,16]" {
		t.Fatalf("proj_t is %s", projT)
	}
	// small = big[8:], so small_t[j][i] = big[8+i][j]; proj_t = base.t(), proj_half = base[8:], so
	// proj_t[j][8+i] = proj_half[i][j] = proj_half_t[j][i].
	for i := int64(0); i < 8; i++ {
		for j := int64(0); j < 8; j++ {
			if smallT.Float64At(j*8+i) != big.Float64At((8+i)*8+j) {
				t.Fatalf("small_t[%d][%d] != big[%d][%d]", j, i, 8+i, j)
			}
			if projT.Float64At(j*16+8+i) != projHalfT.Float64At(j*8+i) {
				t.Fatalf("proj_t[%d][%d] != proj_half_t[%d][%d]", j, 8+i, j, i)
			}
		}
	}
	if _, ok := g.Attrs["scale"]; !ok {
		t.Errorf("the non-persistent buffer scale is missing: %v", keys(g.Attrs))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestFixtureSizes keeps the committed fixtures small.
func TestFixtureSizes(t *testing.T) {
	total := int64(0)
	err := filepath.Walk("testdata", func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		total += fi.Size()
		if fi.Size() > 200<<10 {
			t.Errorf("%s is %d bytes (limit 200 KiB)", p, fi.Size())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total > 2<<20 {
		t.Errorf("testdata holds %d bytes (limit 2 MiB)", total)
	}
}
