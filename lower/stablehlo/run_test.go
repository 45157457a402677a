package stablehlo_test

import (
	"math"
	"testing"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

type (
	unaryOp  func(*stablehlo.Block, *stablehlo.Value) (*stablehlo.Value, error)
	binaryOp func(*stablehlo.Block, *stablehlo.Value, *stablehlo.Value) (*stablehlo.Value, error)
)

// oneOp builds main(params...) returning what build emits, runs it on the
// plugin and returns the outputs.
func oneOp(t *testing.T, params []stablehlo.Type, inputs []*tensor.Tensor, build func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error)) []*tensor.Tensor {
	t.Helper()
	m := stablehlo.NewModule("test")
	ps := make([]stablehlo.Param, len(params))
	for i, p := range params {
		ps[i] = stablehlo.Param{Type: p}
	}
	f, err := m.Func("main", ps...)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := build(f.Body(), f.Params())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Return(outs...); err != nil {
		t.Fatal(err)
	}
	return run(t, m, inputs...)
}

// TestElementwiseRun runs every elementwise op on the plugin against Go's
// math on the same inputs.
func TestElementwiseRun(t *testing.T) {
	xs := []float32{-2.5, -0.5, 0.25, 1.5, 3}
	ys := []float32{1.5, -2, 0.5, 2, -1}
	unary := []struct {
		name string
		op   unaryOp
		f    func(float64) float64
	}{
		{"abs", (*stablehlo.Block).Abs, math.Abs},
		{"negate", (*stablehlo.Block).Negate, func(x float64) float64 { return -x }},
		{"sign", (*stablehlo.Block).Sign, func(x float64) float64 { return math.Copysign(1, x) }},
		{"exponential", (*stablehlo.Block).Exponential, math.Exp},
		{"exponential_minus_one", (*stablehlo.Block).ExponentialMinusOne, math.Expm1},
		{"log_plus_one", (*stablehlo.Block).LogPlusOne, func(x float64) float64 { return math.Log1p(math.Abs(x)) }},
		{"logistic", (*stablehlo.Block).Logistic, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
		{"tanh", (*stablehlo.Block).Tanh, math.Tanh},
		{"sine", (*stablehlo.Block).Sine, math.Sin},
		{"cosine", (*stablehlo.Block).Cosine, math.Cos},
		{"tan", (*stablehlo.Block).Tan, math.Tan},
		{"floor", (*stablehlo.Block).Floor, math.Floor},
		{"ceil", (*stablehlo.Block).Ceil, math.Ceil},
		{"round_nearest_even", (*stablehlo.Block).RoundNearestEven, math.RoundToEven},
		{"round_nearest_afz", (*stablehlo.Block).RoundNearestAfz, math.Round},
		{"erf", (*stablehlo.Block).Erf, math.Erf},
		{"sqrt", (*stablehlo.Block).Sqrt, func(x float64) float64 { return math.Sqrt(math.Abs(x)) }},
		{"rsqrt", (*stablehlo.Block).Rsqrt, func(x float64) float64 { return 1 / math.Sqrt(math.Abs(x)) }},
		{"cbrt", (*stablehlo.Block).Cbrt, math.Cbrt},
		{"log", (*stablehlo.Block).Log, func(x float64) float64 { return math.Log(math.Abs(x)) }},
	}
	for _, c := range unary {
		t.Run(c.name, func(t *testing.T) {
			in := xs
			needsPositive := c.name == "sqrt" || c.name == "rsqrt" || c.name == "log" || c.name == "log_plus_one"
			if needsPositive {
				in = make([]float32, len(xs))
				for i, x := range xs {
					in[i] = float32(math.Abs(float64(x)))
				}
			}
			out := oneOp(t, []stablehlo.Type{f32(5)}, []*tensor.Tensor{tensor.FromFloat32s(in)}, func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error) {
				v, err := c.op(b, p[0])
				return []*stablehlo.Value{v}, err
			})
			want := make([]float64, len(xs))
			for i, x := range xs {
				want[i] = float64(float32(c.f(float64(x))))
			}
			checkValues(t, c.name, out[0], []int64{5}, want)
		})
	}
	binary := []struct {
		name string
		op   binaryOp
		f    func(x, y float64) float64
	}{
		{"add", (*stablehlo.Block).Add, func(x, y float64) float64 { return x + y }},
		{"subtract", (*stablehlo.Block).Subtract, func(x, y float64) float64 { return x - y }},
		{"multiply", (*stablehlo.Block).Multiply, func(x, y float64) float64 { return x * y }},
		{"divide", (*stablehlo.Block).Divide, func(x, y float64) float64 { return x / y }},
		{"remainder", (*stablehlo.Block).Remainder, math.Mod},
		{"maximum", (*stablehlo.Block).Maximum, math.Max},
		{"minimum", (*stablehlo.Block).Minimum, math.Min},
		{"power", (*stablehlo.Block).Power, func(x, y float64) float64 { return math.Pow(math.Abs(x), y) }},
		{"atan2", (*stablehlo.Block).Atan2, math.Atan2},
	}
	for _, c := range binary {
		t.Run(c.name, func(t *testing.T) {
			in := xs
			if c.name == "power" {
				in = make([]float32, len(xs))
				for i, x := range xs {
					in[i] = float32(math.Abs(float64(x)))
				}
			}
			out := oneOp(t, []stablehlo.Type{f32(5), f32(5)}, []*tensor.Tensor{tensor.FromFloat32s(in), tensor.FromFloat32s(ys)}, func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error) {
				v, err := c.op(b, p[0], p[1])
				return []*stablehlo.Value{v}, err
			})
			want := make([]float64, len(xs))
			for i := range xs {
				want[i] = float64(float32(c.f(float64(xs[i]), float64(ys[i]))))
			}
			checkValues(t, c.name, out[0], []int64{5}, want)
		})
	}
	ints := tensor.FromInt64s([]int64{-6, 5, 12, 7}, 4)
	ints2 := tensor.FromInt64s([]int64{3, 1, 2, 7}, 4)
	i64 := stablehlo.TensorOf(stablehlo.I64, 4)
	intOps := []struct {
		name string
		op   binaryOp
		want []float64
	}{
		{"and", (*stablehlo.Block).And, []float64{-6 & 3, 5 & 1, 12 & 2, 7 & 7}},
		{"or", (*stablehlo.Block).Or, []float64{-6 | 3, 5 | 1, 12 | 2, 7 | 7}},
		{"xor", (*stablehlo.Block).Xor, []float64{-6 ^ 3, 5 ^ 1, 12 ^ 2, 7 ^ 7}},
		{"shift_left", (*stablehlo.Block).ShiftLeft, []float64{-6 << 3, 5 << 1, 12 << 2, 7 << 7}},
		{"shift_right_arithmetic", (*stablehlo.Block).ShiftRightArithmetic, []float64{-6 >> 3, 5 >> 1, 12 >> 2, 7 >> 7}},
		{"shift_right_logical", (*stablehlo.Block).ShiftRightLogical, []float64{float64(uint64(1<<64-6) >> 3), 5 >> 1, 12 >> 2, 7 >> 7}},
		{"divide", (*stablehlo.Block).Divide, []float64{-2, 5, 6, 1}},
		{"remainder", (*stablehlo.Block).Remainder, []float64{0, 0, 0, 0}},
	}
	for _, c := range intOps {
		t.Run("int64 "+c.name, func(t *testing.T) {
			out := oneOp(t, []stablehlo.Type{i64, i64}, []*tensor.Tensor{ints, ints2}, func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error) {
				v, err := c.op(b, p[0], p[1])
				return []*stablehlo.Value{v}, err
			})
			if c.name == "shift_right_logical" { // compare the raw bits
				if got := out[0].Int64s(); got[0] != int64(uint64(1<<64-6)>>3) || got[1] != 2 {
					t.Errorf("got %v", got)
				}
				return
			}
			checkValues(t, c.name, out[0], []int64{4}, c.want)
		})
	}
	t.Run("compare select clamp convert", func(t *testing.T) {
		out := oneOp(t, []stablehlo.Type{f32(5), f32(5)}, []*tensor.Tensor{tensor.FromFloat32s(xs), tensor.FromFloat32s(ys)}, func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error) {
			lt, err := b.Compare(p[0], p[1], stablehlo.LT, stablehlo.CompareDefault)
			if err != nil {
				return nil, err
			}
			sel, err := b.Select(lt, p[0], p[1])
			if err != nil {
				return nil, err
			}
			lo, _ := b.ScalarConstant(stablehlo.F32, -1)
			hi, _ := b.ScalarConstant(stablehlo.F32, 1)
			cl, err := b.Clamp(lo, p[0], hi)
			if err != nil {
				return nil, err
			}
			cv, err := b.Convert(p[0], stablehlo.I32)
			if err != nil {
				return nil, err
			}
			fin, err := b.IsFinite(p[0])
			if err != nil {
				return nil, err
			}
			not, err := b.Not(fin)
			if err != nil {
				return nil, err
			}
			bits, err := b.BitcastConvert(p[1], stablehlo.I32)
			if err != nil {
				return nil, err
			}
			rp, err := b.ReducePrecision(p[1], 5, 2) // 1.5 -> 1.5, -2, 0.5, 2, -1 stay; 3 mantissa bits would too
			if err != nil {
				return nil, err
			}
			return []*stablehlo.Value{sel, cl, cv, not, bits, rp}, nil
		})
		checkValues(t, "select(min)", out[0], []int64{5}, []float64{-2.5, -2, 0.25, 1.5, -1})
		checkValues(t, "clamp", out[1], []int64{5}, []float64{-1, -0.5, 0.25, 1, 1})
		checkValues(t, "convert", out[2], []int64{5}, []float64{-2, 0, 0, 1, 3})
		checkValues(t, "not is_finite", out[3], []int64{5}, []float64{0, 0, 0, 0, 0})
		if got := out[4].Int64At(0); got != int64(math.Float32bits(1.5)) {
			t.Errorf("bitcast_convert(1.5) = %#x", got)
		}
		checkValues(t, "reduce_precision", out[5], []int64{5}, []float64{1.5, -2, 0.5, 2, -1})
	})
	t.Run("reduce_precision rounds", func(t *testing.T) {
		out := oneOp(t, []stablehlo.Type{f32(2)}, []*tensor.Tensor{tensor.FromFloat32s([]float32{1.3, 1000})}, func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error) {
			v, err := b.ReducePrecision(p[0], 4, 2) // 1.3 -> 1.25; 1000 overflows e4 (max 15.0 with m2) -> inf
			return []*stablehlo.Value{v}, err
		})
		checkValues(t, "reduce_precision", out[0], []int64{2}, []float64{1.25, math.Inf(1)})
	})
}
