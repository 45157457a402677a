package lower_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

func ewOpenPlugin(t *testing.T) *pjrt.Client {
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

func ewInput(g *fxgraph.Graph, name string, dt tensor.DType, dims ...fxgraph.Dim) *fxgraph.Node {
	return g.AddPlaceholder(name, fxgraph.TensorMeta{DType: dt, Shape: fxgraph.Shape(dims)})
}

// TestElementwiseStableHLO checks the exact StableHLO of a few rules.
func TestElementwiseStableHLO(t *testing.T) {
	cases := []struct {
		name  string
		build func(g *fxgraph.Graph) []*fxgraph.Node
		opts  lower.Options
		want  []string
	}{
		{
			name: "add alpha broadcast and lt.Scalar",
			build: func(g *fxgraph.Graph) []*fxgraph.Node {
				x := ewInput(g, "x", tensor.Float32, fxgraph.S("N"), fxgraph.D(3))
				y := ewInput(g, "y", tensor.Float32, fxgraph.D(3))
				a := g.AddCall(fxgraph.AtenAddTensor, []any{x, y}, map[string]any{"alpha": 2.0})
				return []*fxgraph.Node{a, g.AddCall(fxgraph.AtenLtScalar, []any{a, int64(0)}, nil)}
			},
			want: []string{
				`%0 = "stablehlo.broadcast_in_dim"(%y) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>`,
				`%1 = "stablehlo.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>`,
				`%3 = "stablehlo.multiply"(%0, %2) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>`,
				`%4 = "stablehlo.add"(%x, %3) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>`,
				`comparison_direction = #stablehlo<comparison_direction LT>`,
				`compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>`,
			},
		},
		{
			name: "integer true division converts to float32",
			build: func(g *fxgraph.Graph) []*fxgraph.Node {
				x := ewInput(g, "x", tensor.Int64, fxgraph.S("N"))
				y := ewInput(g, "y", tensor.Int64, fxgraph.S("N"))
				return []*fxgraph.Node{g.AddCall(fxgraph.AtenDivTensor, []any{x, y}, nil)}
			},
			want: []string{
				`%0 = "stablehlo.convert"(%x) : (tensor<2xi64>) -> tensor<2xf32>`,
				`%1 = "stablehlo.convert"(%y) : (tensor<2xi64>) -> tensor<2xf32>`,
				`%2 = "stablehlo.divide"(%0, %1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>`,
			},
		},
		{
			name: "floor division of ints with NarrowInt64",
			opts: lower.Options{NarrowInt64: true},
			build: func(g *fxgraph.Graph) []*fxgraph.Node {
				x := ewInput(g, "x", tensor.Int64, fxgraph.S("N"))
				y := ewInput(g, "y", tensor.Int64, fxgraph.S("N"))
				return []*fxgraph.Node{g.AddCall(fxgraph.AtenDivTensorMode, []any{x, y}, map[string]any{"rounding_mode": "floor"})}
			},
			want: []string{
				`%0 = "stablehlo.remainder"(%x, %y) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>`,
				`"stablehlo.divide"(%x, %y) : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>`,
				`"stablehlo.select"`,
				`"func.return"(%12) : (tensor<2xi32>) -> ()`,
			},
		},
		{
			name: "to bool is a comparison with zero",
			build: func(g *fxgraph.Graph) []*fxgraph.Node {
				x := ewInput(g, "x", tensor.Float32, fxgraph.S("N"))
				return []*fxgraph.Node{g.AddCall(fxgraph.Aten_ToCopy, []any{x}, map[string]any{"dtype": tensor.Bool})}
			},
			want: []string{
				`"stablehlo.compare"(%x, %1)`,
				`comparison_direction = #stablehlo<comparison_direction NE>`,
			},
		},
		{
			name: "where broadcasts its condition",
			build: func(g *fxgraph.Graph) []*fxgraph.Node {
				c := ewInput(g, "c", tensor.Bool, fxgraph.S("N"), fxgraph.D(1))
				x := ewInput(g, "x", tensor.Float16, fxgraph.D(4))
				return []*fxgraph.Node{g.AddCall(fxgraph.AtenWhereScalarOther, []any{c, x, 0.5}, nil)}
			},
			want: []string{
				`%0 = "stablehlo.reshape"(%c) : (tensor<2x1xi1>) -> tensor<2xi1>`,
				`%1 = "stablehlo.broadcast_in_dim"(%0) {broadcast_dimensions = array<i64: 0>} : (tensor<2xi1>) -> tensor<2x4xi1>`,
				`"stablehlo.select"(%1, %2, %4) : (tensor<2x4xi1>, tensor<2x4xf16>, tensor<2x4xf16>) -> tensor<2x4xf16>`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := fxgraph.New()
			g.SetOutput(tc.build(g)...)
			p, err := lower.New(tc.opts, cpu.Platform()).Lower(g, map[string]int64{"N": 2})
			if err != nil {
				t.Fatal(err)
			}
			text := string(p.Module)
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("missing %q in\n%s", w, text)
				}
			}
		})
	}
}

// TestElementwiseRun lowers a graph of many pointwise ops, runs it on the
// PJRT CPU plugin and checks every output against plain Go math.
func TestElementwiseRun(t *testing.T) {
	client := ewOpenPlugin(t)
	xs := []float32{-2.5, -1, -0.5, 0, 0.25, 0.75, 1.5, 3}
	is := []int32{-7, 7, -7, 7, 0, 5}
	js := []int32{2, -2, -2, 2, 3, 1}

	g := fxgraph.New()
	x := ewInput(g, "x", tensor.Float32, fxgraph.S("N"))
	i := ewInput(g, "i", tensor.Int32, fxgraph.S("M"))
	j := ewInput(g, "j", tensor.Int32, fxgraph.S("M"))
	call := func(target *fxgraph.Op, args []any, kw map[string]any) *fxgraph.Node {
		return g.AddCall(target, args, kw)
	}
	x3 := call(fxgraph.AtenMulScalar, []any{x, 0.3}, nil)
	ax1 := call(fxgraph.AtenAddScalar, []any{call(fxgraph.AtenAbs, []any{x}, nil), 1.0}, nil)

	type check struct {
		node *fxgraph.Node
		ref  func(k int) float64 // reference for element k
	}
	fx := func(k int) float64 { return float64(xs[k]) }
	f3 := func(k int) float64 { return float64(float32(fx(k) * 0.3)) }
	a1 := func(k int) float64 { return math.Abs(fx(k)) + 1 }
	sp := func(v, beta, th float64) float64 {
		if v*beta > th {
			return v
		}
		return math.Log1p(math.Exp(v*beta)) / beta
	}
	floats := []check{
		{call(fxgraph.AtenAsin, []any{x3}, nil), func(k int) float64 { return math.Asin(f3(k)) }},
		{call(fxgraph.AtenAcos, []any{x3}, nil), func(k int) float64 { return math.Acos(f3(k)) }},
		{call(fxgraph.AtenAtan, []any{x}, nil), func(k int) float64 { return math.Atan(fx(k)) }},
		{call(fxgraph.AtenAtanh, []any{x3}, nil), func(k int) float64 { return math.Atanh(f3(k)) }},
		{call(fxgraph.AtenSinh, []any{x}, nil), func(k int) float64 { return math.Sinh(fx(k)) }},
		{call(fxgraph.AtenCosh, []any{x}, nil), func(k int) float64 { return math.Cosh(fx(k)) }},
		{call(fxgraph.AtenAsinh, []any{x}, nil), func(k int) float64 { return math.Asinh(fx(k)) }},
		{call(fxgraph.AtenAcosh, []any{ax1}, nil), func(k int) float64 { return math.Acosh(a1(k)) }},
		{call(fxgraph.AtenLog2, []any{ax1}, nil), func(k int) float64 { return math.Log2(a1(k)) }},
		{call(fxgraph.AtenRsqrt, []any{ax1}, nil), func(k int) float64 { return 1 / math.Sqrt(a1(k)) }},
		{call(fxgraph.AtenReciprocal, []any{ax1}, nil), func(k int) float64 { return 1 / a1(k) }},
		{call(fxgraph.AtenExpm1, []any{x}, nil), func(k int) float64 { return math.Expm1(fx(k)) }},
		{call(fxgraph.AtenGelu, []any{x}, nil), func(k int) float64 { v := fx(k); return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }},
		{call(fxgraph.AtenGelu, []any{x}, map[string]any{"approximate": "tanh"}), func(k int) float64 {
			v := fx(k)
			return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		}},
		{call(fxgraph.AtenElu, []any{x, 0.5, 2.0, 1.5}, nil), func(k int) float64 {
			if v := fx(k); v > 0 {
				return 2 * v
			}
			return 0.5 * 2 * (math.Exp(1.5*fx(k)) - 1)
		}},
		{call(fxgraph.AtenSoftplus, []any{x, 2.0, 1.0}, nil), func(k int) float64 { return sp(fx(k), 2, 1) }},
		{call(fxgraph.AtenMish, []any{x}, nil), func(k int) float64 { return fx(k) * math.Tanh(sp(fx(k), 1, 20)) }},
		{call(fxgraph.AtenHardswish, []any{x}, nil), func(k int) float64 { return fx(k) * math.Min(math.Max(fx(k)+3, 0), 6) / 6 }},
		{call(fxgraph.AtenHardsigmoid, []any{x}, nil), func(k int) float64 { return math.Min(math.Max(fx(k)+3, 0), 6) / 6 }},
		{call(fxgraph.AtenSilu, []any{x}, nil), func(k int) float64 { return fx(k) / (1 + math.Exp(-fx(k))) }},
		{call(fxgraph.AtenLeakyRelu, []any{x, 0.1}, nil), func(k int) float64 { return math.Max(fx(k), 0.1*fx(k)) }},
		{call(fxgraph.AtenHardtanh, []any{x, -1.0, 2.0}, nil), func(k int) float64 { return math.Min(math.Max(fx(k), -1), 2) }},
		{call(fxgraph.AtenThreshold, []any{x, 0.25, -9.0}, nil), func(k int) float64 {
			if fx(k) <= 0.25 {
				return -9
			}
			return fx(k)
		}},
		{call(fxgraph.AtenWhereScalarOther, []any{call(fxgraph.AtenLtScalar, []any{x, int64(0)}, nil), x, 2.0}, nil), func(k int) float64 {
			if fx(k) < 0 {
				return fx(k)
			}
			return 2
		}},
		{call(fxgraph.AtenClamp, []any{x, -1.0, 1.0}, nil), func(k int) float64 { return math.Min(math.Max(fx(k), -1), 1) }},
		{call(fxgraph.AtenRound, []any{call(fxgraph.AtenMulScalar, []any{x, 2.0}, nil)}, nil), func(k int) float64 { return math.RoundToEven(2 * fx(k)) }},
		{call(fxgraph.AtenTrunc, []any{x}, nil), func(k int) float64 { return math.Trunc(fx(k)) }},
		{call(fxgraph.AtenSign, []any{x}, nil), func(k int) float64 {
			switch v := fx(k); {
			case v > 0:
				return 1
			case v < 0:
				return -1
			}
			return 0
		}},
		{call(fxgraph.AtenRemainderScalar, []any{x, 0.75}, nil), func(k int) float64 {
			r := math.Mod(fx(k), 0.75)
			if r != 0 && (r < 0) != (0.75 < 0) {
				r += 0.75
			}
			return r
		}},
		{call(fxgraph.AtenDivTensorMode, []any{x, ax1}, map[string]any{"rounding_mode": "floor"}), func(k int) float64 { return math.Floor(fx(k) / a1(k)) }},
		{call(fxgraph.AtenPowScalar, []any{2.0, x}, nil), func(k int) float64 { return math.Pow(2, fx(k)) }},
		// Truncation to bfloat16 precision through the bits, as the ONNX importer does.
		{call(fxgraph.AtenViewDtype, []any{call(fxgraph.AtenBitwiseAndScalar, []any{call(fxgraph.AtenViewDtype, []any{x3, tensor.Int32}, nil), int64(-65536)}, nil), tensor.Float32}, nil),
			func(k int) float64 {
				return float64(math.Float32frombits(math.Float32bits(float32(f3(k))) & 0xffff0000))
			}},
	}
	fi := func(k int) int64 { return int64(is[k]) }
	fj := func(k int) int64 { return int64(js[k]) }
	ints := []check{
		{call(fxgraph.AtenDivTensorMode, []any{i, j}, map[string]any{"rounding_mode": "floor"}), func(k int) float64 {
			return math.Floor(float64(fi(k)) / float64(fj(k)))
		}},
		{call(fxgraph.AtenDivTensorMode, []any{i, j}, map[string]any{"rounding_mode": "trunc"}), func(k int) float64 { return float64(fi(k) / fj(k)) }},
		{call(fxgraph.AtenRemainderTensor, []any{i, j}, nil), func(k int) float64 {
			r := fi(k) % fj(k)
			if r != 0 && (r < 0) != (fj(k) < 0) {
				r += fj(k)
			}
			return float64(r)
		}},
		{call(fxgraph.AtenFmodTensor, []any{i, j}, nil), func(k int) float64 { return float64(fi(k) % fj(k)) }},
		{call(fxgraph.AtenMaximum, []any{i, j}, nil), func(k int) float64 { return float64(max(fi(k), fj(k))) }},
		{call(fxgraph.AtenBitwiseXorTensor, []any{i, j}, nil), func(k int) float64 { return float64(fi(k) ^ fj(k)) }},
		{call(fxgraph.AtenNeg, []any{i}, nil), func(k int) float64 { return float64(-fi(k)) }},
		{call(fxgraph.Aten_ToCopy, []any{x}, map[string]any{"dtype": tensor.Int32}), func(k int) float64 { return math.Trunc(fx(k)) }},
		{call(fxgraph.AtenGeTensor, []any{i, j}, nil), func(k int) float64 {
			if fi(k) >= fj(k) {
				return 1
			}
			return 0
		}},
		{call(fxgraph.AtenLogicalOr, []any{i, call(fxgraph.AtenLtScalar, []any{j, int64(0)}, nil)}, nil), func(k int) float64 {
			if fi(k) != 0 || fj(k) < 0 {
				return 1
			}
			return 0
		}},
	}
	var outs []*fxgraph.Node
	for _, c := range append(append([]check(nil), floats...), ints...) {
		outs = append(outs, c.node)
	}
	g.SetOutput(outs...)
	dims := map[string]int64{"N": int64(len(xs)), "M": int64(len(is))}
	prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, dims)
	if err != nil {
		t.Fatal(err)
	}
	xt := tensor.FromFloat32s(xs)
	it := tensor.New(tensor.Int32, int64(len(is)))
	jt := tensor.New(tensor.Int32, int64(len(js)))
	for k := range is {
		it.SetInt64(int64(k), int64(is[k]))
		jt.SetInt64(int64(k), int64(js[k]))
	}
	got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{xt, it, jt})
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]check(nil), floats...), ints...)
	if len(got) != len(all) {
		t.Fatalf("%d outputs, want %d", len(got), len(all))
	}
	for o, c := range all {
		res := got[o]
		n := int(res.NumElements())
		for k := 0; k < n; k++ {
			w := c.ref(k)
			var v float64
			if res.DType.IsFloat() {
				v = res.Float64At(int64(k))
			} else {
				v = float64(res.Int64At(int64(k)))
			}
			tol := 1e-6 + 2e-6*math.Abs(w)
			if !(math.Abs(v-w) <= tol || (math.IsNaN(v) && math.IsNaN(w))) {
				t.Errorf("%s (%s) element %d = %v, want %v", c.node.Name, c.node.Target, k, v, w)
			}
		}
	}
}
