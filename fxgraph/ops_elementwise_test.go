package fxgraph

import (
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

func ewMeta(dt tensor.DType, dims ...any) TensorMeta {
	m := TensorMeta{DType: dt, Shape: Shape{}}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			m.Shape = append(m.Shape, D(int64(v)))
		case string:
			m.Shape = append(m.Shape, S(v))
		}
	}
	return m
}

func TestElementwiseShapes(t *testing.T) {
	r := NewRegistry()
	type in = TensorMeta
	cases := []struct {
		name   string
		target *Op
		inputs []in
		// args: *int refers to inputs[i]; other values are literals.
		args   []any
		kwargs map[string]any
		want   string // Meta string, or "error: <substring>"
	}{
		{"add broadcast symbolic", AtenAddTensor, []in{ewMeta(tensor.Float32, "N", 3), ewMeta(tensor.Float32, 3)}, []any{0, 1}, nil, "float32[N,3]"},
		{"add alpha", AtenAddTensor, []in{ewMeta(tensor.Float32, "N"), ewMeta(tensor.Float32, "N")}, []any{0, 1}, map[string]any{"alpha": 2.0}, "float32[N]"},
		{"add dim beats zero-dim", AtenAddTensor, []in{ewMeta(tensor.Int32, "N"), ewMeta(tensor.Int64)}, []any{0, 1}, nil, "int32[N]"},
		{"add float zero-dim promotes category", AtenAddTensor, []in{ewMeta(tensor.Int32, "N"), ewMeta(tensor.Float64)}, []any{0, 1}, nil, "float64[N]"},
		{"add dims promote", AtenAddTensor, []in{ewMeta(tensor.Int32, 2), ewMeta(tensor.Int64, 2)}, []any{0, 1}, nil, "int64[2]"},
		{"add.Scalar int tensor float scalar", AtenAddScalar, []in{ewMeta(tensor.Int32, "B", 4)}, []any{0, 1.5}, nil, "float32[B,4]"},
		{"mul.Scalar keeps f16", AtenMulScalar, []in{ewMeta(tensor.Float16, 4)}, []any{0, 0.2}, nil, "float16[4]"},
		{"mul.Scalar bool with int", AtenMulScalar, []in{ewMeta(tensor.Bool, 4)}, []any{0, int64(3)}, nil, "int64[4]"},
		{"sub bool rejected", AtenSubTensor, []in{ewMeta(tensor.Bool, 4), ewMeta(tensor.Bool, 4)}, []any{0, 1}, nil, "error: bool"},
		{"two symbols", AtenMulTensor, []in{ewMeta(tensor.Float32, "A", 1), ewMeta(tensor.Float32, 1, "B")}, []any{0, 1}, nil, "float32[A,B]"},
		{"mismatch", AtenMulTensor, []in{ewMeta(tensor.Float32, 2, 3), ewMeta(tensor.Float32, 4)}, []any{0, 1}, nil, "error: broadcast"},
		{"true div of ints", AtenDivTensor, []in{ewMeta(tensor.Int64, "N"), ewMeta(tensor.Int64, "N")}, []any{0, 1}, nil, "float32[N]"},
		{"div trunc keeps ints", AtenDivTensorMode, []in{ewMeta(tensor.Uint8, 3), ewMeta(tensor.Uint8, 3)}, []any{0, 1}, map[string]any{"rounding_mode": "trunc"}, "uint8[3]"},
		{"div bad mode", AtenDivTensorMode, []in{ewMeta(tensor.Int8, 3), ewMeta(tensor.Int8, 3)}, []any{0, 1}, map[string]any{"rounding_mode": "ceil"}, "error: rounding_mode"},
		{"pow mixed", AtenPowTensorTensor, []in{ewMeta(tensor.Float32, "N"), ewMeta(tensor.Int64, "N")}, []any{0, 1}, nil, "float32[N]"},
		{"pow.Scalar", AtenPowScalar, []in{ewMeta(tensor.Int32, 5)}, []any{2.0, 0}, nil, "float32[5]"},
		{"pow.Tensor_Scalar int", AtenPowTensorScalar, []in{ewMeta(tensor.Int32, 5)}, []any{0, int64(2)}, nil, "int32[5]"},
		{"eq broadcast", AtenEqTensor, []in{ewMeta(tensor.Int64, "N", 1), ewMeta(tensor.Float32, 1, 4)}, []any{0, 1}, nil, "bool[N,4]"},
		{"gt.Scalar", AtenGtScalar, []in{ewMeta(tensor.Int8, "N")}, []any{0, 0.5}, nil, "bool[N]"},
		{"logical_and mixed", AtenLogicalAnd, []in{ewMeta(tensor.Int8, 3), ewMeta(tensor.Float32, 3)}, []any{0, 1}, nil, "bool[3]"},
		{"bitwise on float", AtenBitwiseAndTensor, []in{ewMeta(tensor.Float32, 3), ewMeta(tensor.Float32, 3)}, []any{0, 1}, nil, "error: integer"},
		{"shift", AtenBitwiseLeftShiftTensor, []in{ewMeta(tensor.Uint16, "N"), ewMeta(tensor.Uint16, "N")}, []any{0, 1}, nil, "uint16[N]"},
		{"maximum", AtenMaximum, []in{ewMeta(tensor.Float16, "N", 2), ewMeta(tensor.Float16, 2)}, []any{0, 1}, nil, "float16[N,2]"},
		{"where", AtenWhereSelf, []in{ewMeta(tensor.Bool, "N", 1), ewMeta(tensor.Float32, 1, 4), ewMeta(tensor.Float64)}, []any{0, 1, 2}, nil, "float32[N,4]"},
		{"where.ScalarOther", AtenWhereScalarOther, []in{ewMeta(tensor.Bool, "N"), ewMeta(tensor.Int64, "N")}, []any{0, 1, 0.5}, nil, "float32[N]"},
		{"where float cond", AtenWhereSelf, []in{ewMeta(tensor.Float32, 2), ewMeta(tensor.Float32, 2), ewMeta(tensor.Float32, 2)}, []any{0, 1, 2}, nil, "error: condition"},
		{"exp of int", AtenExp, []in{ewMeta(tensor.Int32, "N")}, []any{0}, nil, "float32[N]"},
		{"sigmoid f16", AtenSigmoid, []in{ewMeta(tensor.Float16, "N")}, []any{0}, nil, "float16[N]"},
		{"abs int", AtenAbs, []in{ewMeta(tensor.Int16, 2, "S")}, []any{0}, nil, "int16[2,S]"},
		{"isnan", AtenIsnan, []in{ewMeta(tensor.Float64, "N")}, []any{0}, nil, "bool[N]"},
		{"logical_not", AtenLogicalNot, []in{ewMeta(tensor.Int32, "N")}, []any{0}, nil, "bool[N]"},
		{"relu int", AtenRelu, []in{ewMeta(tensor.Int8, "N")}, []any{0}, nil, "int8[N]"},
		{"gelu tanh", AtenGelu, []in{ewMeta(tensor.Float32, "N")}, []any{0}, map[string]any{"approximate": "tanh"}, "float32[N]"},
		{"gelu bad", AtenGelu, []in{ewMeta(tensor.Float32, "N")}, []any{0}, map[string]any{"approximate": "erf"}, "error: approximate"},
		{"leaky_relu", AtenLeakyRelu, []in{ewMeta(tensor.Float32, "N")}, []any{0, 0.1}, nil, "float32[N]"},
		{"elu", AtenElu, []in{ewMeta(tensor.BFloat16, "N")}, []any{0, 1.0, 1.0, 1.0}, nil, "bfloat16[N]"},
		{"hardtanh int", AtenHardtanh, []in{ewMeta(tensor.Int32, 3)}, []any{0, -1.0, 1.0}, nil, "int32[3]"},
		{"clamp int keeps", AtenClamp, []in{ewMeta(tensor.Int8, "N")}, []any{0, int64(0), nil}, nil, "int8[N]"},
		{"clamp float bound promotes", AtenClamp, []in{ewMeta(tensor.Int8, "N")}, []any{0, 0.5}, nil, "float32[N]"},
		{"clamp no bounds", AtenClamp, []in{ewMeta(tensor.Int8, "N")}, []any{0, nil, nil}, nil, "error: at least one"},
		{"clamp.Tensor", AtenClampTensor, []in{ewMeta(tensor.Float32, "N", 3), ewMeta(tensor.Float32), ewMeta(tensor.Float32, 3)}, []any{0, 1, 2}, nil, "float32[N,3]"},
		{"to_copy", Aten_ToCopy, []in{ewMeta(tensor.Float32, "N", 3)}, []any{0}, map[string]any{"dtype": tensor.Float16}, "float16[N,3]"},
		{"to_copy same", Aten_ToCopy, []in{ewMeta(tensor.Int64, "N")}, []any{0}, nil, "int64[N]"},
		{"view.dtype", AtenViewDtype, []in{ewMeta(tensor.Float32, "N")}, []any{0, tensor.Int32}, nil, "int32[N]"},
		{"view.dtype size change", AtenViewDtype, []in{ewMeta(tensor.Float32, "N")}, []any{0, tensor.Int64}, nil, "error: element size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New()
			var ins []*Node
			for i, m := range tc.inputs {
				ins = append(ins, g.AddPlaceholder("x"+string(rune('0'+i)), m))
			}
			args := make([]any, len(tc.args))
			for i, a := range tc.args {
				if k, ok := a.(int); ok {
					args[i] = ins[k]
				} else {
					args[i] = a
				}
			}
			n := g.AddCall(tc.target, args, tc.kwargs)
			info, ok := r.Lookup(tc.target.Name)
			if !ok {
				t.Fatalf("%s not registered", tc.target)
			}
			m, err := info.Shape(n)
			if want, isErr := strings.CutPrefix(tc.want, "error: "); isErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, %v; want an error containing %q", m, err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.String() != tc.want {
				t.Errorf("meta %s, want %s", m, tc.want)
			}
		})
	}
}

func TestResultType(t *testing.T) {
	g := New()
	i32v := g.AddPlaceholder("a", ewMeta(tensor.Int32, 3))
	i64s := g.AddPlaceholder("b", ewMeta(tensor.Int64))
	f64s := g.AddPlaceholder("c", ewMeta(tensor.Float64))
	u8v := g.AddPlaceholder("d", ewMeta(tensor.Uint8, 3))
	i8v := g.AddPlaceholder("e", ewMeta(tensor.Int8, 3))
	bv := g.AddPlaceholder("f", ewMeta(tensor.Bool, 3))
	f16v := g.AddPlaceholder("h", ewMeta(tensor.Float16, 3))
	cases := []struct {
		args []any
		want tensor.DType
	}{
		{[]any{i32v, i64s}, tensor.Int32},
		{[]any{i32v, f64s}, tensor.Float64},
		{[]any{i32v, 2.5}, tensor.Float32},
		{[]any{i32v, int64(7)}, tensor.Int32},
		{[]any{u8v, i8v}, tensor.Int16},
		{[]any{bv, int64(1)}, tensor.Int64},
		{[]any{bv, true}, tensor.Bool},
		{[]any{f16v, f64s}, tensor.Float16},
		{[]any{f16v, 1.0, nil}, tensor.Float16},
		{[]any{i64s, 1.0}, tensor.Float32},
		{[]any{int64(1), 2.0}, tensor.Float32},
	}
	for _, tc := range cases {
		got, err := ResultType(tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("ResultType(%s) = %s, want %s", FormatArgs(tc.args), got, tc.want)
		}
	}
}

// ewFold builds target(args) over constant inputs and evaluates it.
func ewFold(t *testing.T, target *Op, consts []*tensor.Tensor, args []any, kwargs map[string]any) *tensor.Tensor {
	t.Helper()
	r := NewRegistry()
	g := New()
	var ins []*Node
	for i, c := range consts {
		ins = append(ins, g.AddConstant("c"+string(rune('0'+i)), c))
	}
	full := make([]any, len(args))
	for i, a := range args {
		if k, ok := a.(int); ok {
			full[i] = ins[k]
		} else {
			full[i] = a
		}
	}
	n := g.AddCall(target, full, kwargs)
	info, _ := r.Lookup(target.Name)
	m, err := info.Shape(n)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	n.Meta = m
	out, err := info.Eval(n, g.ConstValue)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	if out == nil {
		return nil
	}
	if out[0].DType != m.Val().DType {
		t.Fatalf("%s: folded %s, meta %s", target, out[0], m)
	}
	return out[0]
}

func ewInts(dt tensor.DType, vals ...int64) *tensor.Tensor {
	t := tensor.New(dt, int64(len(vals)))
	for i, v := range vals {
		ewPutInt(t, int64(i), v)
	}
	return t
}

func ewFloats(dt tensor.DType, vals ...float64) *tensor.Tensor {
	t := tensor.New(dt, int64(len(vals)))
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return t
}

func TestElementwiseEval(t *testing.T) {
	big := int64(1)<<62 + 3
	cases := []struct {
		name   string
		target *Op
		consts []*tensor.Tensor
		args   []any
		kwargs map[string]any
		want   []float64 // nil: the fold must be declined
		wantDT tensor.DType
	}{
		{"int8 add wraps", AtenAddTensor, []*tensor.Tensor{ewInts(tensor.Int8, 100, -100), ewInts(tensor.Int8, 100, -100)}, []any{0, 1}, nil, []float64{-56, 56}, tensor.Int8},
		{"sub alpha", AtenSubTensor, []*tensor.Tensor{ewInts(tensor.Int64, 10, 20), ewInts(tensor.Int64, 1, 2)}, []any{0, 1}, map[string]any{"alpha": int64(3)}, []float64{7, 14}, tensor.Int64},
		{"rsub.Scalar", AtenRsubScalar, []*tensor.Tensor{ewInts(tensor.Int64, 1, 2)}, []any{0, int64(10)}, nil, []float64{9, 8}, tensor.Int64},
		{"mul.Scalar broadcast float", AtenMulScalar, []*tensor.Tensor{ewInts(tensor.Int32, 1, 2)}, []any{0, 0.5}, nil, []float64{0.5, 1}, tensor.Float32},
		{"div true", AtenDivTensor, []*tensor.Tensor{ewInts(tensor.Int64, 7, -7), ewInts(tensor.Int64, 2, 2)}, []any{0, 1}, nil, []float64{3.5, -3.5}, tensor.Float32},
		{"div trunc", AtenDivTensorMode, []*tensor.Tensor{ewInts(tensor.Int64, 7, -7), ewInts(tensor.Int64, 2, 2)}, []any{0, 1}, map[string]any{"rounding_mode": "trunc"}, []float64{3, -3}, tensor.Int64},
		{"div floor", AtenDivTensorMode, []*tensor.Tensor{ewInts(tensor.Int64, 7, -7), ewInts(tensor.Int64, 2, 2)}, []any{0, 1}, map[string]any{"rounding_mode": "floor"}, []float64{3, -4}, tensor.Int64},
		{"div by zero declined", AtenDivTensorMode, []*tensor.Tensor{ewInts(tensor.Int64, 7), ewInts(tensor.Int64, 0)}, []any{0, 1}, map[string]any{"rounding_mode": "trunc"}, nil, tensor.Int64},
		{"remainder", AtenRemainderTensor, []*tensor.Tensor{ewInts(tensor.Int32, -7, 7, -7), ewInts(tensor.Int32, 3, -3, -3)}, []any{0, 1}, nil, []float64{2, -2, -1}, tensor.Int32},
		{"fmod", AtenFmodTensor, []*tensor.Tensor{ewInts(tensor.Int32, -7, 7), ewInts(tensor.Int32, 3, -3)}, []any{0, 1}, nil, []float64{-1, 1}, tensor.Int32},
		{"float remainder", AtenRemainderScalar, []*tensor.Tensor{ewFloats(tensor.Float64, -7.5, 7.5)}, []any{0, 2.0}, nil, []float64{0.5, 1.5}, tensor.Float64},
		{"int pow", AtenPowTensorScalar, []*tensor.Tensor{ewInts(tensor.Int64, 3, -2)}, []any{0, int64(3)}, nil, []float64{27, -8}, tensor.Int64},
		{"negative int pow declined", AtenPowTensorScalar, []*tensor.Tensor{ewInts(tensor.Int64, 3)}, []any{0, int64(-1)}, nil, nil, tensor.Int64},
		{"shift left uint8", AtenBitwiseLeftShiftTensor, []*tensor.Tensor{ewInts(tensor.Uint8, 1, 255, 1), ewInts(tensor.Uint8, 3, 1, 9)}, []any{0, 1}, nil, []float64{8, 254, 0}, tensor.Uint8},
		{"shift right int8", AtenBitwiseRightShiftTensor, []*tensor.Tensor{ewInts(tensor.Int8, -128, 64), ewInts(tensor.Int8, 3, 9)}, []any{0, 1}, nil, []float64{-16, 0}, tensor.Int8},
		{"int64 exact", AtenAddScalar, []*tensor.Tensor{ewInts(tensor.Int64, big)}, []any{0, int64(1)}, nil, []float64{float64(big + 1)}, tensor.Int64},
		{"eq broadcast", AtenEqTensor, []*tensor.Tensor{ewInts(tensor.Int64, 1, 2, 3), ewInts(tensor.Int64, 2)}, []any{0, 1}, nil, []float64{0, 1, 0}, tensor.Bool},
		{"lt.Scalar float", AtenLtScalar, []*tensor.Tensor{ewInts(tensor.Int64, 0, 1)}, []any{0, 0.5}, nil, []float64{1, 0}, tensor.Bool},
		{"logical_xor", AtenLogicalXor, []*tensor.Tensor{ewInts(tensor.Int32, 0, 5, 0), ewFloats(tensor.Float32, 0, 1, 2)}, []any{0, 1}, nil, []float64{0, 0, 1}, tensor.Bool},
		{"where", AtenWhereSelf, []*tensor.Tensor{ewInts(tensor.Bool, 1, 0), ewInts(tensor.Int64, 5, 6), ewInts(tensor.Int64, -1)}, []any{0, 1, 2}, nil, []float64{5, -1}, tensor.Int64},
		{"clamp", AtenClamp, []*tensor.Tensor{ewInts(tensor.Int8, -5, 0, 5)}, []any{0, int64(-1), int64(2)}, nil, []float64{-1, 0, 2}, tensor.Int8},
		{"clamp min only", AtenClampTensor, []*tensor.Tensor{ewFloats(tensor.Float32, -5, math.NaN(), 5), ewFloats(tensor.Float32, 0)}, []any{0, 1, nil}, nil, []float64{0, math.NaN(), 5}, tensor.Float32},
		{"maximum nan", AtenMaximum, []*tensor.Tensor{ewFloats(tensor.Float32, 1, math.NaN()), ewFloats(tensor.Float32, 2, 0)}, []any{0, 1}, nil, []float64{2, math.NaN()}, tensor.Float32},
		{"exp of int", AtenExp, []*tensor.Tensor{ewInts(tensor.Int32, 0, 1)}, []any{0}, nil, []float64{1, float64(float32(math.E))}, tensor.Float32},
		{"neg", AtenNeg, []*tensor.Tensor{ewInts(tensor.Int16, 3, -4)}, []any{0}, nil, []float64{-3, 4}, tensor.Int16},
		{"round half even", AtenRound, []*tensor.Tensor{ewFloats(tensor.Float32, 0.5, 1.5, 2.5, -0.5)}, []any{0}, nil, []float64{0, 2, 2, 0}, tensor.Float32},
		{"sign nan", AtenSign, []*tensor.Tensor{ewFloats(tensor.Float32, -3, 0, math.NaN())}, []any{0}, nil, []float64{-1, 0, 0}, tensor.Float32},
		{"isinf", AtenIsinf, []*tensor.Tensor{ewFloats(tensor.Float32, math.Inf(-1), 0, math.NaN())}, []any{0}, nil, []float64{1, 0, 0}, tensor.Bool},
		{"bitwise_not bool", AtenBitwiseNot, []*tensor.Tensor{ewInts(tensor.Bool, 1, 0)}, []any{0}, nil, []float64{0, 1}, tensor.Bool},
		{"leaky_relu", AtenLeakyRelu, []*tensor.Tensor{ewFloats(tensor.Float64, -2, 3)}, []any{0, 0.25}, nil, []float64{-0.5, 3}, tensor.Float64},
		{"threshold", AtenThreshold, []*tensor.Tensor{ewFloats(tensor.Float64, 1, 2, 3)}, []any{0, 2.0, -1.0}, nil, []float64{-1, -1, 3}, tensor.Float64},
		{"to int truncates", Aten_ToCopy, []*tensor.Tensor{ewFloats(tensor.Float32, 2.7, -2.7)}, []any{0}, map[string]any{"dtype": tensor.Int32}, []float64{2, -2}, tensor.Int32},
		{"to bool", Aten_ToCopy, []*tensor.Tensor{ewFloats(tensor.Float32, 0, -0.5, math.NaN())}, []any{0}, map[string]any{"dtype": tensor.Bool}, []float64{0, 1, 1}, tensor.Bool},
		{"to uint8 wraps", Aten_ToCopy, []*tensor.Tensor{ewInts(tensor.Int64, 257, -1)}, []any{0}, map[string]any{"dtype": tensor.Uint8}, []float64{1, 255}, tensor.Uint8},
		{"view.dtype", AtenViewDtype, []*tensor.Tensor{ewFloats(tensor.Float32, 1)}, []any{0, tensor.Int32}, nil, []float64{0x3f800000}, tensor.Int32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ewFold(t, tc.target, tc.consts, tc.args, tc.kwargs)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("folded to %v, want the fold declined", got.Float64s())
				}
				return
			}
			if got == nil {
				t.Fatal("fold declined")
			}
			if got.DType != tc.wantDT {
				t.Errorf("dtype %s, want %s", got.DType, tc.wantDT)
			}
			if got.NumElements() != int64(len(tc.want)) {
				t.Fatalf("%d elements, want %d", got.NumElements(), len(tc.want))
			}
			for i, w := range tc.want {
				var g float64
				if tc.wantDT.IsInt() {
					g = float64(got.Int64At(int64(i)))
				} else {
					g = got.Float64At(int64(i))
				}
				if !(g == w || (math.IsNaN(g) && math.IsNaN(w)) || math.Abs(g-w) < 1e-6*math.Abs(w)) {
					t.Errorf("element %d = %v, want %v", i, g, w)
				}
			}
		})
	}
}
