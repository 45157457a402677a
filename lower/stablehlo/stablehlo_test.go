package stablehlo_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/tensor"
)

// plugin is the real XLA CPU plugin's client the tests share.
var plugin = pjrttest.Shared{RepoRoot: "../.."}

// testClient returns the shared client of the real XLA CPU plugin. A
// missing plugin fails the test: run `make pjrt`.
func testClient(t *testing.T) *pjrt.Client {
	t.Helper()
	return plugin.Client(t)
}

// run compiles the module's text on the plugin and runs it on inputs.
func run(t *testing.T, m *stablehlo.Module, inputs ...*tensor.Tensor) []*tensor.Tensor {
	t.Helper()
	text, err := m.Text()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := testClient(t)
	exe, err := c.Compile(ctx, text, nil)
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, text)
	}
	defer exe.Close()
	var bufs []*pjrt.Buffer
	for _, in := range inputs {
		b, err := c.Upload(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		bufs = append(bufs, b)
	}
	outs, err := exe.Run(ctx, bufs)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, text)
	}
	return outs
}

func values(t *tensor.Tensor) []float64 {
	out := make([]float64, t.NumElements())
	for i := range out {
		out[i] = t.Float64At(int64(i))
	}
	return out
}

func checkValues(t *testing.T, what string, got *tensor.Tensor, shape []int64, want []float64) {
	t.Helper()
	if tensor.ShapeString(got.Shape) != tensor.ShapeString(shape) {
		t.Errorf("%s: shape %v, want %v", what, got.Shape, shape)
		return
	}
	g := values(got)
	for i := range want {
		if math.Abs(g[i]-want[i]) > 1e-5*(1+math.Abs(want[i])) && !(math.IsNaN(g[i]) && math.IsNaN(want[i])) {
			t.Errorf("%s: got %v, want %v", what, g, want)
			return
		}
	}
}

func f32(dims ...int64) stablehlo.Type { return stablehlo.TensorOf(stablehlo.F32, dims...) }
func i32(dims ...int64) stablehlo.Type { return stablehlo.TensorOf(stablehlo.I32, dims...) }

// must fails the test on an emitter error.
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestExactText pins the printed form of a small module: parameters,
// constants (splat and hex), broadcast, compare/select and a reduce region.
func TestExactText(t *testing.T) {
	v := must[*stablehlo.Value](t)
	vs := must[[]*stablehlo.Value](t)
	m := stablehlo.NewModule("xserve")
	f := must[*stablehlo.Function](t)(m.Func("main", stablehlo.Param{Name: "x", Type: f32(2, 3)}, stablehlo.Param{Name: "fc.weight", Type: f32(3)}))
	b := f.Body()
	two := v(b.ScalarConstant(stablehlo.F32, 2))
	w := v(b.BroadcastInDim(f.Param(1), []int64{2, 3}, []int64{1}))
	sum := v(b.Add(f.Param(0), w))
	twos := v(b.BroadcastInDim(two, []int64{2, 3}, nil))
	gt := v(b.Compare(sum, twos, stablehlo.GT, stablehlo.CompareDefault))
	sel := v(b.Select(gt, sum, twos))
	body := b.Region(f32(), f32())
	if err := body.Return(v(body.Add(body.Arg(0), body.Arg(1)))); err != nil {
		t.Fatal(err)
	}
	zero := v(b.Constant(f32(), []byte{0, 0, 0, 0}))
	red := vs(b.Reduce([]*stablehlo.Value{sel}, []*stablehlo.Value{zero}, []int64{1}, body))
	idx := v(b.Constant(stablehlo.TensorOf(stablehlo.I32, 2), []byte{1, 0, 0, 0, 2, 0, 0, 0}))
	if err := f.Return(red[0], idx); err != nil {
		t.Fatal(err)
	}
	text, err := m.Text()
	if err != nil {
		t.Fatal(err)
	}
	want := `module @xserve {
  func.func @main(%x: tensor<2x3xf32>, %fc.weight: tensor<3xf32>) -> (tensor<2xf32>, tensor<2xi32>) {
    %0 = "stablehlo.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %1 = "stablehlo.broadcast_in_dim"(%fc.weight) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %2 = "stablehlo.add"(%x, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %3 = "stablehlo.broadcast_in_dim"(%0) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x3xf32>
    %4 = "stablehlo.compare"(%2, %3) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %5 = "stablehlo.select"(%4, %2, %3) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %9 = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %10 = "stablehlo.reduce"(%5, %9) ({
      ^bb0(%6: tensor<f32>, %7: tensor<f32>):
        %8 = "stablehlo.add"(%6, %7) : (tensor<f32>, tensor<f32>) -> tensor<f32>
        "stablehlo.return"(%8) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %11 = "stablehlo.constant"() {value = dense<"0x0100000002000000"> : tensor<2xi32>} : () -> tensor<2xi32>
    "func.return"(%10, %11) : (tensor<2xf32>, tensor<2xi32>) -> ()
  }
}
`
	if string(text) != want {
		t.Errorf("text =\n%s\nwant\n%s", text, want)
	}
	x := tensor.FromFloat32s([]float32{0, 1, 2, 3, 4, 5}, 2, 3)
	wt := tensor.FromFloat32s([]float32{0.5, 0.5, 0.5})
	outs := run(t, m, x, wt)
	// x+w = [.5 1.5 2.5; 3.5 4.5 5.5]; values <= 2 become 2.
	checkValues(t, "reduce", outs[0], []int64{2}, []float64{2 + 2 + 2.5, 3.5 + 4.5 + 5.5})
	checkValues(t, "constant", outs[1], []int64{2}, []float64{1, 2})
}

// TestShapeErrors checks that ops reject operands the spec rules out, with
// errors that name the op and the shapes.
func TestShapeErrors(t *testing.T) {
	m := stablehlo.NewModule("m")
	f, err := m.Func("main", stablehlo.Param{Type: f32(2, 3)}, stablehlo.Param{Type: f32(3)}, stablehlo.Param{Type: i32(2)}, stablehlo.Param{Type: i32()})
	if err != nil {
		t.Fatal(err)
	}
	b := f.Body()
	x, y, ix, s := f.Param(0), f.Param(1), f.Param(2), f.Param(3)
	done := b.Region()
	if err := done.Return(ix); err != nil {
		t.Fatal(err)
	}
	other := b.Region()
	if err := other.Return(x); err != nil {
		t.Fatal(err)
	}
	cond := b.Region(i32())
	if err := cond.Return(cond.Arg(0)); err != nil {
		t.Fatal(err)
	}
	body := b.Region(i32())
	if err := body.Return(body.Arg(0)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"add shapes", func() error { _, err := b.Add(x, y); return err }, "add: operands differ: tensor<2x3xf32> and tensor<3xf32>"},
		{"xor floats", func() error { _, err := b.Xor(x, x); return err }, "xor: operands are tensor<2x3xf32>; the op takes i1, signed integers, unsigned integers"},
		{"sqrt ints", func() error { _, err := b.Sqrt(ix); return err }, "sqrt: operand is tensor<2xi32>; the op takes floats"},
		{"reshape count", func() error { _, err := b.Reshape(x, 4); return err }, "reshape: tensor<2x3xf32> to tensor<4xf32> changes the number of elements"},
		{"broadcast size", func() error { _, err := b.BroadcastInDim(y, []int64{3, 2}, []int64{1}); return err }, "broadcast_in_dim: dim 0 of tensor<3xf32> (size 3) cannot become dim 1 of tensor<3x2xf32>"},
		{"transpose perm", func() error { _, err := b.Transpose(x, 0, 0); return err }, "transpose: permutation [0 0] is not a permutation of the 2 dims of tensor<2x3xf32>"},
		{"slice range", func() error { _, err := b.Slice(x, []int64{0, 2}, []int64{2, 4}, []int64{1, 1}); return err }, "slice: dim 1: start 2, limit 4, stride 1 out of range for tensor<2x3xf32>"},
		{"concat dims", func() error { _, err := b.Concatenate(0, x, y); return err }, "concatenate: operands tensor<2x3xf32>, tensor<3xf32> do not agree outside dimension 0"},
		{"dot contract", func() error {
			_, err := b.DotGeneral(x, x, stablehlo.DotDims{LhsContract: []int64{1}, RhsContract: []int64{0}}, stablehlo.PrecisionNone, stablehlo.Invalid)
			return err
		}, "dot_general: contracting dims differ in size: lhs tensor<2x3xf32>, rhs tensor<2x3xf32>"},
		{"dynamic_slice starts", func() error { _, err := b.DynamicSlice(x, []*stablehlo.Value{s}, []int64{1, 1}); return err }, "dynamic_slice: 1 start indices for tensor<2x3xf32>"},
		{"case branches", func() error { _, err := b.Case(s, done, other); return err }, "branch 1: stablehlo: invalid op: case: region returns (tensor<2x3xf32>), want (tensor<2xi32>)"},
		{"while cond", func() error { _, err := b.While([]*stablehlo.Value{s}, cond, body); return err }, "condition: stablehlo: invalid op: while: region returns (tensor<i32>), want (tensor<i1>)"},
		{"select pred", func() error { _, err := b.Select(x, x, x); return err }, "select: pred is tensor<2x3xf32>; want tensor<i1> or i1 of shape tensor<2x3xf32>"},
		{"bitcast width", func() error { _, err := b.BitcastConvert(x, stablehlo.I64); return err }, "bitcast_convert: tensor<2x3xf32> to i64 changes the element width"},
		{"constant size", func() error { _, err := b.Constant(f32(2), []byte{0}); return err }, "constant: 1 bytes of data for tensor<2xf32>, want 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one containing %q", err, c.want)
			}
			if c.name != "case branches" && c.name != "while cond" && !errors.Is(err, stablehlo.ErrShape) {
				t.Errorf("err = %v does not wrap ErrShape", err)
			}
		})
	}
	if _, err := m.Text(); err == nil || !strings.Contains(err.Error(), "does not return") {
		t.Errorf("Text of an unfinished function: %v", err)
	}
}
