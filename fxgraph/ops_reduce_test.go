package fxgraph

import (
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

func TestReductionShapes(t *testing.T) {
	r := NewRegistry()
	x := TensorMeta{DType: tensor.Float32, Shape: Shape{S("N"), D(3), D(4)}}
	xi := TensorMeta{DType: tensor.Int32, Shape: Shape{S("N"), D(3)}}
	tgt := TensorMeta{DType: tensor.Int64, Shape: Shape{S("N"), D(4)}}
	w := TensorMeta{DType: tensor.Float32, Shape: Shape{D(3)}}
	cases := []struct {
		name   string
		target *Op
		in     []TensorMeta
		args   func(in []*Node) []any
		kwargs map[string]any
		want   string // Meta.String(), or "error: <substring>"
	}{
		{"sum keepdim", AtenSumDimIntList, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(1)}, true} }, nil, "float32[N,1,4]"},
		{"sum negative dims", AtenSumDimIntList, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(-1), int64(0)}} }, nil, "float32[3]"},
		{"sum None dims", AtenSumDimIntList, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], nil, true} }, nil, "float32[1,1,1]"},
		{"sum int promotes", AtenSum, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0]} }, nil, "int64[]"},
		{"sum dtype kwarg", AtenSumDimIntList, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], []any{int64(0)}} }, map[string]any{"dtype": tensor.Int32}, "int32[3]"},
		{"sum dup dim", AtenSumDimIntList, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(1), int64(-2)}} }, nil, "error: twice"},
		{"sum dim range", AtenSumDimIntList, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(3)}} }, nil, "error: out of range"},
		{"mean", AtenMeanDim, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(2)}, false} }, nil, "float32[N,3]"},
		{"mean of ints", AtenMeanDim, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], []any{int64(1)}} }, nil, "error: floating point"},
		{"mean default", AtenMean, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0]} }, nil, "float32[]"},
		{"prod dim_int", AtenProdDimInt, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], int64(1), true} }, map[string]any{"dtype": tensor.Int32}, "int32[N,1]"},
		{"amax all", AtenAmax, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{}} }, nil, "float32[]"},
		{"amin keepdim", AtenAmin, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], []any{int64(0)}, true} }, nil, "int32[1,3]"},
		{"max.dim", AtenMaxDim, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], int64(1)} }, nil, "(float32[N,4], int64[N,4])"},
		{"argmax None", AtenArgmax, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0]} }, nil, "int64[]"},
		{"argmin keepdim", AtenArgmin, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], int64(-1), true} }, nil, "int64[N,3,1]"},
		{"any.dim", AtenAnyDim, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], int64(1)} }, nil, "bool[N]"},
		{"all.default", AtenAll, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0]} }, nil, "bool[]"},
		{"cumsum int", AtenCumsum, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], int64(1)} }, nil, "int64[N,3]"},
		{"cumsum float", AtenCumsum, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], int64(0)} }, nil, "float32[N,3,4]"},
		{"logsumexp", AtenLogsumexp, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(2)}} }, nil, "float32[N,3]"},
		{"logsumexp int", AtenLogsumexp, []TensorMeta{xi},
			func(in []*Node) []any { return []any{in[0], []any{int64(1)}, true} }, nil, "float32[N,1]"},
		{"var keepdim", AtenVarCorrection, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], []any{int64(2)}} }, map[string]any{"keepdim": true, "correction": int64(0)}, "float32[N,3,1]"},
		{"std all", AtenStdCorrection, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0]} }, nil, "float32[]"},
		{"vector norm", AtenLinalgVectorNorm, []TensorMeta{x},
			func(in []*Node) []any { return []any{in[0], 2.0, []any{int64(1), int64(2)}} }, nil, "float32[N]"},
		{"nll none", AtenNllLossForward, []TensorMeta{x, tgt, w},
			func(in []*Node) []any { return []any{in[0], in[1], in[2], int64(0), int64(-100)} }, nil, "(float32[N,4], float32[])"},
		{"nll mean no weight", AtenNllLossForward, []TensorMeta{x, tgt},
			func(in []*Node) []any { return []any{in[0], in[1], nil, int64(1), int64(1)} }, nil, "(float32[], float32[])"},
		{"nll bad target", AtenNllLossForward, []TensorMeta{x, xi},
			func(in []*Node) []any { return []any{in[0], in[1], nil, int64(1), int64(1)} }, nil, "error: do not match"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := New()
			var in []*Node
			for i, m := range c.in {
				in = append(in, g.AddPlaceholder(string(rune('a'+i)), m))
			}
			n := g.AddCall(c.target, c.args(in), c.kwargs)
			info, ok := r.Lookup(c.target.Name)
			if !ok {
				t.Fatalf("%s is not registered", c.target)
			}
			m, err := info.Shape(n)
			if strings.HasPrefix(c.want, "error: ") {
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(c.want, "error: ")) {
					t.Fatalf("got %v, %v; want an error containing %q", m, err, strings.TrimPrefix(c.want, "error: "))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.String() != c.want {
				t.Errorf("meta = %s, want %s", m, c.want)
			}
		})
	}
}

// rdEval folds target(args) on constant x and returns the results.
func rdEval(t *testing.T, target *Op, x *tensor.Tensor, rest []any, kwargs map[string]any) []*tensor.Tensor {
	t.Helper()
	r := NewRegistry()
	g := New()
	xn := g.AddConstant("x", x)
	n := g.AddCall(target, append([]any{xn}, rest...), kwargs)
	info, _ := r.Lookup(target.Name)
	m, err := info.Shape(n)
	if err != nil {
		t.Fatal(err)
	}
	n.Meta = m
	outs, err := info.Eval(n, g.ConstValue)
	if err != nil {
		t.Fatal(err)
	}
	if outs == nil {
		t.Fatalf("%s declined to fold", target)
	}
	for i, o := range outs {
		dims, _ := m.Vals[i].Shape.Static()
		if o.DType != m.Vals[i].DType || tensor.ShapeString(o.Shape) != tensor.ShapeString(dims) {
			t.Fatalf("value %d is %s, meta says %s", i, o, m.Vals[i])
		}
	}
	return outs
}

func TestReductionEval(t *testing.T) {
	f := tensor.FromFloat32s([]float32{1, 5, 2, -3, 5, 0}, 2, 3)
	big := tensor.FromInt64s([]int64{1 << 60, 1, 3, 1<<60 + 7}, 2, 2)
	cases := []struct {
		name   string
		target *Op
		x      *tensor.Tensor
		rest   []any
		kwargs map[string]any
		want   []string // per output: dtype, then values
	}{
		{"sum dim1", AtenSumDimIntList, f, []any{[]any{int64(1)}}, nil, []string{"float32 [8 2]"}},
		{"sum exact int64", AtenSumDimIntList, big, []any{[]any{int64(0)}}, nil, []string{"int64 [1152921504606846979 1152921504606846984]"}},
		{"sum all keepdim", AtenSumDimIntList, f, []any{nil, true}, nil, []string{"float32 [10]"}},
		{"mean dim0", AtenMeanDim, f, []any{[]any{int64(0)}}, nil, []string{"float32 [-1 5 1]"}},
		{"prod", AtenProd, f, nil, nil, []string{"float32 [-0]"}},
		{"amax", AtenAmax, f, []any{[]any{int64(1)}}, nil, []string{"float32 [5 5]"}},
		{"amin all", AtenAmin, big, []any{[]any{}}, nil, []string{"int64 [1]"}},
		{"max.dim first index", AtenMaxDim, f, []any{int64(1)}, nil, []string{"float32 [5 5]", "int64 [1 1]"}},
		{"argmax flat", AtenArgmax, f, nil, nil, []string{"int64 [1]"}},
		{"argmin dim0 keepdim", AtenArgmin, f, []any{int64(0), true}, nil, []string{"int64 [1 0 1]"}},
		{"any", AtenAnyDim, f, []any{int64(0)}, nil, []string{"bool [1 1 1]"}},
		{"all", AtenAllDims, f, []any{[]any{int64(1)}}, nil, []string{"bool [1 0]"}},
		{"cumsum dim1", AtenCumsum, f, []any{int64(1)}, nil, []string{"float32 [1 6 8 -3 2 2]"}},
		{"cumsum int64 exact", AtenCumsum, big, []any{int64(0)}, nil, []string{"int64 [1152921504606846976 1 1152921504606846979 1152921504606846984]"}},
		{"cumprod dim0", AtenCumprod, f, []any{int64(0)}, nil, []string{"float32 [1 5 2 -3 25 0]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outs := rdEval(t, c.target, c.x, c.rest, c.kwargs)
			if len(outs) != len(c.want) {
				t.Fatalf("%d outputs, want %d", len(outs), len(c.want))
			}
			for i, o := range outs {
				var got string
				if o.DType.IsFloat() {
					got = o.DType.String() + " " + rdFmt(o.Float64s())
				} else {
					got = o.DType.String() + " " + rdFmtInts(o.Int64s())
				}
				if got != c.want[i] {
					t.Errorf("output %d = %s, want %s", i, got, c.want[i])
				}
			}
		})
	}
}

func TestReductionEvalNaNAndEmpty(t *testing.T) {
	x := tensor.FromFloat32s([]float32{1, float32(math.NaN()), 3}, 3)
	outs := rdEval(t, AtenAmax, x, nil, nil)
	if v := outs[0].Float64At(0); !math.IsNaN(v) {
		t.Errorf("amax with NaN = %v, want NaN", v)
	}
	outs = rdEval(t, AtenArgmax, x, nil, nil)
	if v := outs[0].Int64At(0); v != 1 {
		t.Errorf("argmax with NaN = %d, want 1", v)
	}
	empty := tensor.New(tensor.Float32, 2, 0)
	for target, want := range map[*Op]float64{AtenSumDimIntList: 0, AtenAmax: math.Inf(-1), AtenAmin: math.Inf(1)} {
		outs := rdEval(t, target, empty, []any{[]any{int64(1)}}, nil)
		if got := outs[0].Float64s(); len(got) != 2 || got[0] != want || got[1] != want {
			t.Errorf("%s of an empty dim = %v, want %v", target, got, want)
		}
	}
	emptyInt := tensor.New(tensor.Int32, 0)
	outs = rdEval(t, AtenAmax, emptyInt, nil, nil)
	if got := outs[0].Int64At(0); got != math.MinInt32 {
		t.Errorf("amax of empty int32 = %d, want MinInt32", got)
	}
}

func rdFmt(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = FormatArg(x)
		parts[i] = strings.TrimSuffix(parts[i], ".0")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func rdFmtInts(v []int64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = FormatArg(x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
