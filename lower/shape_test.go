package lower_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

func shOpenPlugin(t *testing.T) *pjrt.Client {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: ".."})
	if err != nil {
		t.Fatalf("no PJRT plugin (run make pjrt): %v", err)
	}
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestShapeStableHLO checks the exact StableHLO of a few shape rules.
func TestShapeStableHLO(t *testing.T) {
	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.TensorMeta{DType: tensor.Float32, Shape: fxgraph.Shape{fxgraph.S("N"), fxgraph.D(3)}})
	i := g.AddPlaceholder("i", fxgraph.Static(tensor.Int64, 2))
	p := g.AddCall(fxgraph.AtenPermute, []any{x, []any{int64(1), int64(0)}}, nil)
	s := g.AddCall(fxgraph.AtenIndexSelect, []any{x, int64(1), i}, nil)
	c := g.AddCall(fxgraph.AtenConstantPadNd, []any{x, []any{int64(1), int64(-1)}, 0.5}, nil)
	sl := g.AddCall(fxgraph.AtenSliceTensor, []any{x, int64(1), int64(1), nil, int64(2)}, nil)
	g.SetOutput(p, s, c, sl)
	prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, map[string]int64{"N": 2})
	if err != nil {
		t.Fatal(err)
	}
	text := string(prog.Module)
	for _, want := range []string{
		`%0 = "stablehlo.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>`,
		`%5 = "stablehlo.compare"(%i, %2) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>`,
		`%6 = "stablehlo.add"(%i, %4) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>`,
		`%7 = "stablehlo.select"(%5, %6, %i) : (tensor<2xi1>, tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>`,
		`%8 = "stablehlo.reshape"(%7) : (tensor<2xi64>) -> tensor<2x1xi64>`,
		`%9 = "stablehlo.gather"(%x, %8) {dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 2, 1>, indices_are_sorted = false} : (tensor<2x3xf32>, tensor<2x1xi64>) -> tensor<2x2xf32>`,
		`%11 = "stablehlo.pad"(%x, %10) {edge_padding_low = array<i64: 0, 1>, edge_padding_high = array<i64: 0, -1>, interior_padding = array<i64: 0, 0>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>`,
		`%12 = "stablehlo.slice"(%x) {start_indices = array<i64: 0, 1>, limit_indices = array<i64: 2, 2>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("module lacks %q:\n%s", want, text)
		}
	}
}

// shRef is a reference result computed in plain Go.
type shRef struct {
	name  string
	node  *fxgraph.Node
	shape []int64
	vals  []float64
}

// TestShapeRun runs the shape and indexing rules on the XLA CPU plugin and
// compares with references computed independently here.
func TestShapeRun(t *testing.T) {
	client := shOpenPlugin(t)
	// x[r][c] = 10r + c + 0.5, shape [2,3]; y[k] = k, shape [1,8,1,2].
	xv := func(r, c int) float64 { return float64(10*r+c) + 0.5 }
	xt := tensor.New(tensor.Float32, 2, 3)
	for r := 0; r < 2; r++ {
		for c := 0; c < 3; c++ {
			xt.SetFloat64(int64(3*r+c), xv(r, c))
		}
	}
	yt := tensor.New(tensor.Float32, 1, 8, 1, 2)
	for k := int64(0); k < 16; k++ {
		yt.SetFloat64(k, float64(k))
	}
	it := tensor.FromInt64s([]int64{2, -1, 0})

	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.TensorMeta{DType: tensor.Float32, Shape: fxgraph.Shape{fxgraph.S("N"), fxgraph.D(3)}})
	y := g.AddPlaceholder("y", fxgraph.Static(tensor.Float32, 1, 8, 1, 2))
	idx := g.AddPlaceholder("idx", fxgraph.Static(tensor.Int64, 3))
	call := func(target *fxgraph.Op, args ...any) *fxgraph.Node { return g.AddCall(target, args, nil) }
	L := func(v ...int64) []any {
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = e
		}
		return out
	}
	// grid builds a reference of shape [rows, cols] from f.
	grid := func(rows, cols int, f func(r, c int) float64) []float64 {
		var out []float64
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				out = append(out, f(r, c))
			}
		}
		return out
	}
	wrap := func(i int64, n int) int {
		if i < 0 {
			i += int64(n)
		}
		return int(i)
	}
	iv := []int64{2, -1, 0}
	g2 := g.AddConstant("g2", tensor.FromInt64s([]int64{2, 0, 1, -3}, 2, 2))
	s2 := g.AddConstant("s2", tensor.FromInt64s([]int64{0, 2, 1, 0}, 2, 2))

	var refs []shRef
	add := func(name string, n *fxgraph.Node, shape []int64, vals []float64) {
		refs = append(refs, shRef{name, n, shape, vals})
	}
	add("view", call(fxgraph.AtenView, x, L(3, -1)), []int64{3, 2}, grid(2, 3, xv))
	add("permute", call(fxgraph.AtenPermute, x, L(1, 0)), []int64{3, 2}, grid(3, 2, func(r, c int) float64 { return xv(c, r) }))
	add("expand", call(fxgraph.AtenExpand, call(fxgraph.AtenUnsqueeze, x, int64(0)), L(2, -1, -1)), []int64{2, 2, 3},
		append(grid(2, 3, xv), grid(2, 3, xv)...))
	add("cat", call(fxgraph.AtenCat, []any{x, x}, int64(1)), []int64{2, 6}, grid(2, 6, func(r, c int) float64 { return xv(r, c%3) }))
	add("split", call(fxgraph.GetItem, call(fxgraph.AtenSplitWithSizes, x, L(1, 2), int64(1)), int64(1)), []int64{2, 2},
		grid(2, 2, func(r, c int) float64 { return xv(r, c+1) }))
	add("slice", call(fxgraph.AtenSliceTensor, x, int64(1), int64(-2), int64(100)), []int64{2, 2},
		grid(2, 2, func(r, c int) float64 { return xv(r, c+1) }))
	add("slice step", call(fxgraph.AtenSliceTensor, x, int64(1), nil, nil, int64(2)), []int64{2, 2},
		grid(2, 2, func(r, c int) float64 { return xv(r, 2*c) }))
	add("select", call(fxgraph.AtenSelectInt, x, int64(0), int64(-1)), []int64{3}, grid(1, 3, func(_, c int) float64 { return xv(1, c) }))
	add("flip", call(fxgraph.AtenFlip, x, L(1)), []int64{2, 3}, grid(2, 3, func(r, c int) float64 { return xv(r, 2-c) }))
	add("index_select", call(fxgraph.AtenIndexSelect, x, int64(1), idx), []int64{2, 3},
		grid(2, 3, func(r, c int) float64 { return xv(r, wrap(iv[c], 3)) }))
	add("index", call(fxgraph.AtenIndexTensor, x, []any{nil, g2}), []int64{2, 2, 2}, func() []float64 {
		gi := []int64{2, 0, 1, -3}
		var out []float64
		for r := 0; r < 2; r++ {
			for k := 0; k < 4; k++ {
				out = append(out, xv(r, wrap(gi[k], 3)))
			}
		}
		return out
	}())
	add("gather", call(fxgraph.AtenGather, x, int64(1), g2), []int64{2, 2}, grid(2, 2, func(r, c int) float64 {
		return xv(r, wrap([]int64{2, 0, 1, -3}[2*r+c], 3))
	}))
	add("scatter", call(fxgraph.AtenScatterSrc, x, int64(1), s2, call(fxgraph.AtenNeg, x)), []int64{2, 3}, func() []float64 {
		out := grid(2, 3, xv)
		out[0*3+0], out[0*3+2] = -xv(0, 0), -xv(0, 1)
		out[1*3+1], out[1*3+0] = -xv(1, 0), -xv(1, 1)
		return out
	}())
	add("scatter_reduce prod", call(fxgraph.AtenScatterReduceTwo, x, int64(1), s2, x, "prod"), []int64{2, 3}, func() []float64 {
		out := grid(2, 3, xv)
		out[0] *= xv(0, 0)
		out[2] *= xv(0, 1)
		out[4] *= xv(1, 0)
		out[3] *= xv(1, 1)
		return out
	}())
	add("index_put accumulate", call(fxgraph.AtenIndexPut, x, []any{nil, idx}, g.AddConstant("ten", tensor.Scalar(tensor.Float32, 10)), true),
		[]int64{2, 3}, grid(2, 3, func(r, c int) float64 {
			hits := 0
			for _, i := range iv {
				if wrap(i, 3) == c {
					hits++
				}
			}
			return xv(r, c) + 10*float64(hits)
		}))
	add("constant_pad_nd", call(fxgraph.AtenConstantPadNd, x, L(1, 2), -1.0), []int64{2, 6}, grid(2, 6, func(r, c int) float64 {
		if c == 0 || c > 3 {
			return -1
		}
		return xv(r, c-1)
	}))
	add("reflection_pad1d", call(fxgraph.AtenReflectionPad1d, x, L(2, 1)), []int64{2, 6}, grid(2, 6, func(r, c int) float64 {
		return xv(r, []int{2, 1, 0, 1, 2, 1}[c])
	}))
	add("replication_pad1d", call(fxgraph.AtenReplicationPad1d, x, L(1, 2)), []int64{2, 6}, grid(2, 6, func(r, c int) float64 {
		return xv(r, []int{0, 0, 1, 2, 2, 2}[c])
	}))
	add("repeat", call(fxgraph.AtenRepeat, x, L(2, 1, 2)), []int64{2, 2, 6}, func() []float64 {
		v := grid(2, 6, func(r, c int) float64 { return xv(r, c%3) })
		return append(v, v...)
	}())
	add("triu", call(fxgraph.AtenTriu, x, int64(1)), []int64{2, 3}, grid(2, 3, func(r, c int) float64 {
		if c-r >= 1 {
			return xv(r, c)
		}
		return 0
	}))
	add("tril", call(fxgraph.AtenTril, x), []int64{2, 3}, grid(2, 3, func(r, c int) float64 {
		if c-r <= 0 {
			return xv(r, c)
		}
		return 0
	}))
	ps := call(fxgraph.AtenPixelShuffle, y, int64(2))
	add("pixel_shuffle", ps, []int64{1, 2, 2, 4}, func() []float64 {
		// out[c][h*2+i][w*2+j] = in[c*4+i*2+j][h][w]; in[k][0][w] = 2k+w.
		var out []float64
		for c := 0; c < 2; c++ {
			for oh := 0; oh < 2; oh++ {
				for ow := 0; ow < 4; ow++ {
					k := c*4 + oh*2 + ow%2
					out = append(out, float64(2*k+ow/2))
				}
			}
		}
		return out
	}())
	add("pixel_unshuffle", call(fxgraph.AtenPixelUnshuffle, ps, int64(2)), []int64{1, 8, 1, 2}, func() []float64 {
		out := make([]float64, 16)
		for k := range out {
			out[k] = float64(k)
		}
		return out
	}())

	outs := make([]*fxgraph.Node, len(refs))
	for i, r := range refs {
		outs[i] = r.node
	}
	g.SetOutput(outs...)
	for _, narrow := range []bool{false, true} {
		prog, err := lower.New(lower.Options{NarrowInt64: narrow}, cpu.Platform()).Lower(g, map[string]int64{"N": 2})
		if err != nil {
			t.Fatal(err)
		}
		got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{xt, yt, it})
		if err != nil {
			t.Fatal(err)
		}
		shCheck(t, fmt.Sprint("narrow=", narrow, ": "), refs, got)
	}
}

// shCheck compares results with float32 references, exactly.
func shCheck(t *testing.T, prefix string, refs []shRef, got []*tensor.Tensor) {
	t.Helper()
	for i, r := range refs {
		want, err := tensor.FromBytes(tensor.Float32, r.shape, make([]byte, 4*tensor.NumElements(r.shape)))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.vals) != int(want.NumElements()) {
			t.Fatalf("%s: reference has %d values for shape %v", r.name, len(r.vals), r.shape)
		}
		for k, v := range r.vals {
			want.SetFloat64(int64(k), v)
		}
		if err := conformance.Compare(got[i], want, 0, 0); err != nil {
			t.Errorf("%s%s: %v (got %v)", prefix, r.name, err, got[i].Float64s())
		}
	}
}

// TestShapeRunUnfolded lowers ops that normally fold (full, arange,
// _shape_as_tensor) without specializing, and checks NarrowInt64.
func TestShapeRunUnfolded(t *testing.T) {
	client := shOpenPlugin(t)
	for _, narrow := range []bool{false, true} {
		t.Run(fmt.Sprint("narrow=", narrow), func(t *testing.T) {
			g := fxgraph.New()
			x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, 2, 5))
			f := g.AddCall(fxgraph.AtenFull, []any{[]any{int64(2)}, int64(7)}, map[string]any{"dtype": tensor.Int64})
			a := g.AddCall(fxgraph.AtenArangeStartStep, []any{0.5, int64(3), 0.75}, map[string]any{"dtype": tensor.Float32})
			ai := g.AddCall(fxgraph.AtenArangeStartStep, []any{int64(10), int64(0), int64(-4)}, nil)
			s := g.AddCall(fxgraph.Aten_ShapeAsTensor, []any{x}, nil)
			g.SetOutput(f, a, ai, s)
			l := lower.New(lower.Options{NarrowInt64: narrow}, cpu.Platform())
			if err := l.IR().PropagateShapes(g); err != nil {
				t.Fatal(err)
			}
			prog, err := l.LowerSpecialized(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{tensor.New(tensor.Float32, 2, 5)})
			if err != nil {
				t.Fatal(err)
			}
			idt := tensor.Int64
			if narrow {
				idt = tensor.Int32
			}
			wants := []struct {
				dt   tensor.DType
				vals []float64
			}{
				{idt, []float64{7, 7}},
				{tensor.Float32, []float64{0.5, 1.25, 2, 2.75}},
				{idt, []float64{10, 6, 2}},
				{idt, []float64{2, 5}},
			}
			for i, w := range wants {
				if got[i].DType != w.dt {
					t.Errorf("output %d dtype %s, want %s", i, got[i].DType, w.dt)
				}
				if fmt.Sprint(got[i].Float64s()) != fmt.Sprint(w.vals) {
					t.Errorf("output %d = %v, want %v", i, got[i].Float64s(), w.vals)
				}
			}
		})
	}
}
