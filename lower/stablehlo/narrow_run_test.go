package stablehlo_test

import (
	"math"
	"testing"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// narrowTypes pairs the 8- and 4-bit element types with their tensor dtypes.
var narrowTypes = []struct {
	elem stablehlo.ElementType
	dt   tensor.DType
}{
	{stablehlo.F8E4M3FN, tensor.Float8E4M3FN},
	{stablehlo.F8E4M3FNUZ, tensor.Float8E4M3FNUZ},
	{stablehlo.F8E5M2, tensor.Float8E5M2},
	{stablehlo.F8E5M2FNUZ, tensor.Float8E5M2FNUZ},
	{stablehlo.F8E8M0FNU, tensor.Float8E8M0FNU},
	{stablehlo.F4E2M1FN, tensor.Float4E2M1FN},
	{stablehlo.I4, tensor.Int4},
	{stablehlo.U4, tensor.Uint4},
}

// TestNarrowTypesRun checks that the pinned CPU plugin takes each 8- and
// 4-bit type as a parameter, a result, a constant and both sides of a
// convert: main(x f32, y narrow) returns (convert(x) narrow, convert(y)
// f32, a narrow constant), compared with package tensor's conversions
// (themselves checked against ml_dtypes).
func TestNarrowTypesRun(t *testing.T) {
	xs := []float32{0, 0.3, -1.25, 2.5, 3, -6, 7, 1e-3, 100, -100, 500, float32(math.Inf(1)), float32(math.NaN())}
	n := int64(len(xs))
	for _, c := range narrowTypes {
		t.Run(c.dt.String(), func(t *testing.T) {
			x := tensor.FromFloat32s(xs)
			if c.dt.IsInt() {
				for i, v := range xs { // in range: XLA's float to int conversion of others saturates, no wrap
					r := float64(int64(v) % 8)
					if c.dt.IsUnsigned() {
						r = math.Abs(r) * 2
					}
					x.SetFloat64(int64(i), r)
				}
			}
			want := x.Convert(c.dt)
			y := want.Clone()
			cst := want.Clone()
			outs := oneOp(t, []stablehlo.Type{f32(n), stablehlo.TensorOf(c.elem, n)}, []*tensor.Tensor{x, y},
				func(b *stablehlo.Block, p []*stablehlo.Value) ([]*stablehlo.Value, error) {
					nx, err := b.Convert(p[0], c.elem)
					if err != nil {
						return nil, err
					}
					fy, err := b.Convert(p[1], stablehlo.F32)
					if err != nil {
						return nil, err
					}
					k, err := b.Constant(stablehlo.TensorOf(c.elem, n), cst.Data)
					if err != nil {
						return nil, err
					}
					return []*stablehlo.Value{nx, fy, k}, nil
				})
			for i, got := range []*tensor.Tensor{outs[0], outs[2]} {
				if got.DType != c.dt {
					t.Fatalf("output %d is %s, want %s", i, got, c.dt)
				}
				for j := range n {
					g, w := got.Float64At(j), want.Float64At(j)
					if g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
						t.Errorf("output %d element %d (%v): got %v, want %v", i, j, x.Float64At(j), g, w)
					}
				}
			}
			for j := range n {
				g, w := outs[1].Float64At(j), want.Float64At(j)
				if g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
					t.Errorf("convert back element %d: got %v, want %v", j, g, w)
				}
			}
		})
	}
}
