package fxgraph

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestQLinearConvShape checks xserve.qlinear_conv's result type and its
// refusals of operands it does not take.
func TestQLinearConvShape(t *testing.T) {
	u8, i8, i32, f32 := tensor.Uint8, tensor.Int8, tensor.Int32, tensor.Float32
	args := func(bias bool, xzp, yzp int64, signed bool) func(in []*Node) []any {
		return func(in []*Node) []any {
			var b any
			if bias {
				b = in[3]
			}
			return []any{in[0], in[1], b, nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), int64(1), in[2], xzp, yzp, signed}
		}
	}
	x, w, s, b := nnM(u8, "N", 4, 8, 8), nnM(i8, 6, 4, 3, 3), nnM(f32, 6), nnM(i32, 6)
	for _, tc := range []struct {
		name string
		in   []TensorMeta
		args func(in []*Node) []any
		want string // Meta.String(), or "error: <substring>"
	}{
		{"uint8", []TensorMeta{x, w, s, b}, args(true, 3, 120, false), "uint8[N,6,8,8]"},
		{"int8 out, no bias", []TensorMeta{x, w, s, b}, args(false, 0, -5, true), "int8[N,6,8,8]"},
		{"int8 in", []TensorMeta{nnM(i8, 1, 4, 8, 8), w, s, b}, args(true, -128, 0, false), "uint8[1,6,8,8]"},
		{"float input", []TensorMeta{nnM(f32, 1, 4, 8, 8), w, s, b}, args(true, 0, 0, false), "error: want uint8 or int8"},
		{"uint8 weight", []TensorMeta{x, nnM(u8, 6, 4, 3, 3), s, b}, args(true, 0, 0, false), "error: want uint8 or int8"},
		{"float bias", []TensorMeta{x, w, s, nnM(f32, 6)}, args(true, 0, 0, false), "error: bias"},
		{"scale per tensor", []TensorMeta{x, w, nnM(f32, 1), b}, args(true, 0, 0, false), "error: one per output channel"},
		{"x zero point range", []TensorMeta{x, w, s, b}, args(true, 300, 0, false), "error: x_zero_point 300"},
		{"y zero point range", []TensorMeta{x, w, s, b}, args(true, 0, 200, true), "error: y_zero_point 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New()
			var in []*Node
			for i, m := range tc.in {
				in = append(in, g.AddPlaceholder("x"+string(rune('0'+i)), m))
			}
			n := g.AddCall(XserveQLinearConv, tc.args(in), nil)
			info, ok := nnReg().Lookup(XserveQLinearConv.Name)
			if !ok {
				t.Fatalf("%s not registered", XserveQLinearConv)
			}
			m, err := info.Shape(n)
			if want, isErr := strings.CutPrefix(tc.want, "error: "); isErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, %v; want error containing %q", m, err, want)
				}
				return
			}
			if err != nil || m.String() != tc.want {
				t.Errorf("meta %v, %v; want %s", m, err, tc.want)
			}
		})
	}
}
