package fxgraph

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// nnL builds an int list argument.
func nnL(v ...int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

func nnM(dt tensor.DType, dims ...any) TensorMeta {
	m := TensorMeta{DType: dt}
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

func TestNNShapes(t *testing.T) {
	f32, f16 := tensor.Float32, tensor.Float16
	img := nnM(f32, "N", 4, 10, 9)
	cases := []struct {
		name   string
		target *Op
		in     []TensorMeta
		args   func(in []*Node) []any
		kwargs map[string]any
		want   string // Meta.String(), or "error: <substring>"
	}{
		{"conv2d", AtenConvolution, []TensorMeta{img, nnM(f32, 6, 2, 3, 3), nnM(f32, 6)},
			func(in []*Node) []any {
				return []any{in[0], in[1], in[2], nnL(2, 1), nnL(1, 0), nnL(1, 2), false, nnL(0, 0), int64(2)}
			}, nil, "float32[N,6,5,5]"},
		{"conv1d no bias", AtenConvolution, []TensorMeta{nnM(f32, 2, 3, "L"), nnM(f32, 5, 3, 1)},
			func(in []*Node) []any {
				return []any{in[0], in[1], nil, nnL(1), nnL(0), nnL(1), false, nnL(0), int64(1)}
			}, nil, "float32[2,5,L]"},
		{"conv symbolic spatial", AtenConvolution, []TensorMeta{nnM(f32, 2, 3, "L"), nnM(f32, 5, 3, 3)},
			func(in []*Node) []any {
				return []any{in[0], in[1], nil, nnL(1), nnL(0), nnL(1), false, nnL(0), int64(1)}
			}, nil, "float32[2,5,?]"},
		{"conv channels mismatch", AtenConvolution, []TensorMeta{img, nnM(f32, 6, 3, 3, 3)},
			func(in []*Node) []any {
				return []any{in[0], in[1], nil, nnL(1), nnL(0), nnL(1), false, nnL(0), int64(1)}
			}, nil, "error: channels"},
		{"conv transposed groups", AtenConvolution, []TensorMeta{nnM(f32, 1, 4, 3, 3), nnM(f32, 4, 3, 3, 3)},
			func(in []*Node) []any {
				return []any{in[0], in[1], nil, nnL(3, 2), nnL(1, 1), nnL(1, 1), true, nnL(1, 1), int64(2)}
			}, nil, "float32[1,6,8,6]"},
		{"conv3d f16", AtenConvolution, []TensorMeta{nnM(f16, 1, 2, 5, 5, 5), nnM(f16, 4, 2, 2, 2, 2)},
			func(in []*Node) []any {
				return []any{in[0], in[1], nil, nnL(2), nnL(1), nnL(2), false, nnL(0), int64(1)}
			}, nil, "float16[1,4,3,3,3]"},
		{"mm", AtenMm, []TensorMeta{nnM(f32, "M", 3), nnM(f32, 3, 5)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "float32[M,5]"},
		{"mm mismatch", AtenMm, []TensorMeta{nnM(f32, 2, 3), nnM(f32, 4, 5)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "error: contracting"},
		{"bmm", AtenBmm, []TensorMeta{nnM(f32, "B", 2, 3), nnM(f32, "B", 3, 4)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "float32[B,2,4]"},
		{"addmm vector bias", AtenAddmm, []TensorMeta{nnM(f32, 5), nnM(f32, "M", 3), nnM(f32, 3, 5)},
			func(in []*Node) []any { return []any{in[0], in[1], in[2]} }, map[string]any{"beta": 0.5}, "float32[M,5]"},
		{"addmm bad bias", AtenAddmm, []TensorMeta{nnM(f32, 4), nnM(f32, 2, 3), nnM(f32, 3, 5)},
			func(in []*Node) []any { return []any{in[0], in[1], in[2]} }, nil, "error: broadcast"},
		{"matmul vec-vec", AtenMatmul, []TensorMeta{nnM(f32, 3), nnM(f32, 3)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "float32[]"},
		{"matmul vec-batch", AtenMatmul, []TensorMeta{nnM(f32, 3), nnM(f32, 2, 3, 4)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "float32[2,4]"},
		{"matmul batch-vec", AtenMatmul, []TensorMeta{nnM(f32, "N", 2, 3), nnM(f32, 3)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "float32[N,2]"},
		{"matmul broadcast", AtenMatmul, []TensorMeta{nnM(f32, 2, 1, 4, 3), nnM(f32, 5, 3, 6)},
			func(in []*Node) []any { return []any{in[0], in[1]} }, nil, "float32[2,5,4,6]"},
		{"linear", AtenLinear, []TensorMeta{nnM(f32, "N", "T", 8), nnM(f32, 4, 8), nnM(f32, 4)},
			func(in []*Node) []any { return []any{in[0], in[1], in[2]} }, nil, "float32[N,T,4]"},
		{"max_pool2d", AtenMaxPool2dWithIndices, []TensorMeta{img},
			func(in []*Node) []any { return []any{in[0], nnL(3, 3), nnL(2, 2), nnL(1, 1), nnL(1, 1), true} }, nil,
			"(float32[N,4,6,5], int64[N,4,6,5])"},
		{"max_pool2d default stride", AtenMaxPool2dWithIndices, []TensorMeta{nnM(f32, 4, 10, 9)},
			func(in []*Node) []any { return []any{in[0], nnL(2)} }, nil, "(float32[4,5,4], int64[4,5,4])"},
		{"max_pool1d dilated", AtenMaxPool1d, []TensorMeta{nnM(f32, 1, 1, 20)},
			func(in []*Node) []any { return []any{in[0], nnL(3), nnL(2), nnL(0), nnL(3)} }, nil, "float32[1,1,7]"},
		{"max_pool3d symbolic", AtenMaxPool3dWithIndices, []TensorMeta{nnM(f32, 1, 2, "D", 4, 4)},
			func(in []*Node) []any { return []any{in[0], nnL(2), nnL(2)} }, nil, "(float32[1,2,?,2,2], int64[1,2,?,2,2])"},
		{"max_pool ceil drops window in padding", AtenMaxPool2dWithIndices, []TensorMeta{nnM(f32, 1, 1, 5, 5)},
			func(in []*Node) []any { return []any{in[0], nnL(2), nnL(2), nnL(1), nnL(1), true} }, nil,
			"(float32[1,1,3,3], int64[1,1,3,3])"},
		{"avg_pool2d ceil", AtenAvgPool2d, []TensorMeta{nnM(f32, 1, 1, 4, 4)},
			func(in []*Node) []any { return []any{in[0], nnL(3, 3), nnL(2, 2), nnL(0), true, false} }, nil, "float32[1,1,2,2]"},
		{"avg_pool1d", AtenAvgPool1d, []TensorMeta{nnM(f32, "N", 3, 32)},
			func(in []*Node) []any { return []any{in[0], nnL(2), nnL(1)} }, nil, "float32[N,3,31]"},
		{"avg_pool too small", AtenAvgPool2d, []TensorMeta{nnM(f32, 1, 1, 2, 2)},
			func(in []*Node) []any { return []any{in[0], nnL(3, 3)} }, nil, "error: does not fit"},
		{"adaptive", Aten_AdaptiveAvgPool2d, []TensorMeta{img},
			func(in []*Node) []any { return []any{in[0], nnL(3, 1)} }, nil, "float32[N,4,3,1]"},
		{"batch norm", Aten_NativeBatchNormLegitNoTraining,
			[]TensorMeta{img, nnM(f32, 4), nnM(f32, 4), nnM(f32, 4), nnM(f32, 4)},
			func(in []*Node) []any { return []any{in[0], in[1], in[2], in[3], in[4], 0.1, 1e-5} }, nil,
			"(float32[N,4,10,9], float32[0], float32[0])"},
		{"batch norm no affine", Aten_NativeBatchNormLegitNoTraining,
			[]TensorMeta{img, nnM(f32, 4), nnM(f32, 4)},
			func(in []*Node) []any { return []any{in[0], nil, nil, in[1], in[2], 0.1, 1e-5} }, nil,
			"(float32[N,4,10,9], float32[0], float32[0])"},
		{"batch norm bad channels", Aten_NativeBatchNormLegitNoTraining,
			[]TensorMeta{img, nnM(f32, 3), nnM(f32, 4)},
			func(in []*Node) []any { return []any{in[0], nil, nil, in[1], in[2], 0.1, 1e-5} }, nil, "error: want [4]"},
		{"layer norm", AtenNativeLayerNorm, []TensorMeta{nnM(f32, "N", "T", 8), nnM(f32, 8), nnM(f32, 8)},
			func(in []*Node) []any { return []any{in[0], nnL(8), in[1], in[2], 1e-5} }, nil,
			"(float32[N,T,8], float32[N,T,1], float32[N,T,1])"},
		{"layer norm 2 dims", AtenNativeLayerNorm, []TensorMeta{nnM(f16, "N", 3, 4)},
			func(in []*Node) []any { return []any{in[0], nnL(3, 4), nil, nil, 1e-5} }, nil,
			"(float16[N,3,4], float16[N,1,1], float16[N,1,1])"},
		{"layer norm mismatch", AtenNativeLayerNorm, []TensorMeta{nnM(f32, 2, 3)},
			func(in []*Node) []any { return []any{in[0], nnL(4), nil, nil, 1e-5} }, nil, "error: does not match"},
		{"group norm", AtenNativeGroupNorm, []TensorMeta{img, nnM(f32, 4), nnM(f32, 4)},
			func(in []*Node) []any {
				return []any{in[0], in[1], in[2], int64(1), int64(4), int64(90), int64(2), 1e-5}
			}, nil,
			"(float32[N,4,10,9], float32[N,2], float32[N,2])"},
		{"group norm bad groups", AtenNativeGroupNorm, []TensorMeta{img},
			func(in []*Node) []any { return []any{in[0], nil, nil, int64(1), int64(4), int64(90), int64(3), 1e-5} }, nil,
			"error: groups"},
		{"softmax", Aten_Softmax, []TensorMeta{nnM(f32, "N", 5)},
			func(in []*Node) []any { return []any{in[0], int64(-1), false} }, nil, "float32[N,5]"},
		{"softmax half_to_float", Aten_Softmax, []TensorMeta{nnM(f16, 2, 5)},
			func(in []*Node) []any { return []any{in[0], int64(1), true} }, nil, "float32[2,5]"},
		{"log_softmax dim range", Aten_LogSoftmax, []TensorMeta{nnM(f32, 2, 5)},
			func(in []*Node) []any { return []any{in[0], int64(2), false} }, nil, "error: out of range"},
		{"softmax of ints", Aten_Softmax, []TensorMeta{nnM(tensor.Int32, 2, 5)},
			func(in []*Node) []any { return []any{in[0], int64(1), false} }, nil, "error: floating point"},
		{"grid sampler", AtenGridSampler2d, []TensorMeta{img, nnM(f32, "N", 3, 2, 2)},
			func(in []*Node) []any { return []any{in[0], in[1], int64(0), int64(0), false} }, nil, "float32[N,4,3,2]"},
		{"grid sampler bad grid", AtenGridSampler2d, []TensorMeta{img, nnM(f32, "N", 3, 2, 3)},
			func(in []*Node) []any { return []any{in[0], in[1], int64(0), int64(0), false} }, nil, "error: want [N,C,H,W]"},
		{"roi align", XserveRoIAlign, []TensorMeta{img, nnM(f32, "R", 4), nnM(tensor.Int64, "R")},
			func(in []*Node) []any { return []any{in[0], in[1], in[2], int64(5), int64(3), int64(2), 0.25, true} }, nil, "float32[R,4,5,3]"},
		{"roi align adaptive", XserveRoIAlign, []TensorMeta{img, nnM(f32, "R", 4), nnM(tensor.Int64, "R")},
			func(in []*Node) []any { return []any{in[0], in[1], in[2], int64(5), int64(3), int64(0), 0.25, true} }, nil, "error: unsupported"},
		{"resize scales", XserveResize, []TensorMeta{nnM(f32, "N", 3, 4, 6)},
			func(in []*Node) []any {
				return []any{in[0], nil, []any{1.0, 1.0, 0.6, 2.0}, nil, "linear", "half_pixel", "round_prefer_floor", -0.75, false, 0.0}
			}, nil, "float32[N,3,2,12]"},
		{"resize sizes", XserveResize, []TensorMeta{nnM(tensor.Uint8, 1, 3, 4, 6)},
			func(in []*Node) []any {
				return []any{in[0], nnL(1, 3, 8, -1), nil, nil, "nearest", "asymmetric", "floor"}
			}, nil, "uint8[1,3,8,6]"},
		{"resize crop", XserveResize, []TensorMeta{nnM(f32, 1, 1, 10, 10)},
			func(in []*Node) []any {
				return []any{in[0], nil, []any{1.0, 1.0, 0.8, 0.8}, []any{0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 0.6, 0.8}, "linear", "tf_crop_and_resize"}
			}, nil, "float32[1,1,1,1]"},
		{"resize bad mode", XserveResize, []TensorMeta{nnM(f32, 1, 4)},
			func(in []*Node) []any { return []any{in[0], nnL(1, 8), nil, nil, "area"} }, nil, "error: unsupported"},
		{"resize linear of ints", XserveResize, []TensorMeta{nnM(tensor.Int32, 1, 4)},
			func(in []*Node) []any { return []any{in[0], nnL(1, 8), nil, nil, "linear"} }, nil, "error: unsupported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New()
			var in []*Node
			for i, m := range tc.in {
				in = append(in, g.AddPlaceholder("x"+string(rune('0'+i)), m))
			}
			n := g.AddCall(tc.target, tc.args(in), tc.kwargs)
			info, ok := nnReg().Lookup(tc.target.Name)
			if !ok {
				t.Fatalf("%s not registered", tc.target)
			}
			m, err := info.Shape(n)
			if strings.HasPrefix(tc.want, "error: ") {
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.want, "error: ")) {
					t.Fatalf("got %v, %v; want error containing %q", m, err, strings.TrimPrefix(tc.want, "error: "))
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

var nnRegistry *Registry

func nnReg() *Registry {
	if nnRegistry == nil {
		nnRegistry = NewRegistry()
	}
	return nnRegistry
}

// TestNNResizeFromFoldedSizes checks that a resize whose sizes come from a
// node gets Unknown dims until the node is a constant, then the sizes.
func TestNNResizeFromFoldedSizes(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", nnM(tensor.Float32, "N", 3, 4, 4))
	sizes := g.AddPlaceholder("sizes", nnM(tensor.Int64, 4))
	n := g.AddCall(XserveResize, []any{x, sizes, nil, nil, "nearest"}, nil)
	info, _ := NewRegistry().Lookup(XserveResize.Name)
	m, err := info.Shape(n)
	if err != nil {
		t.Fatal(err)
	}
	if m.String() != "float32[?,?,?,?]" {
		t.Errorf("meta %s, want all Unknown", m)
	}
	c := g.AddConstant("sz", tensor.FromInt64s([]int64{2, 3, 8, 8}))
	g.SetArgs(n, []any{x, c, nil, nil, "nearest"}, nil)
	if m, err = info.Shape(n); err != nil {
		t.Fatal(err)
	}
	if m.String() != "float32[2,3,8,8]" {
		t.Errorf("meta %s, want float32[2,3,8,8]", m)
	}
}

func TestNNPoolOutSize(t *testing.T) {
	cases := []struct {
		in, ek, s, lo, hi int64
		ceil              bool
		want              int64
	}{
		{32, 2, 1, 0, 0, false, 31},
		{4, 3, 2, 0, 0, true, 2},
		{5, 2, 2, 1, 1, true, 3},  // last window would start in the right padding
		{6, 3, 2, 1, 1, true, 4},  // ceil keeps a window starting in the input
		{7, 3, 2, 0, 1, false, 3}, // asymmetric
		{1000, 591, 10, 10, 10, false, 43},
	}
	for _, c := range cases {
		got, err := PoolOutSize(c.in, c.ek, c.s, c.lo, c.hi, c.ceil)
		if err != nil || got != c.want {
			t.Errorf("PoolOutSize(%d, %d, %d, %d, %d, %v) = %d, %v; want %d", c.in, c.ek, c.s, c.lo, c.hi, c.ceil, got, err, c.want)
		}
	}
}
