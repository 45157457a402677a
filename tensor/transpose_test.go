package tensor

import (
	"slices"
	"testing"
)

func TestTranspose(t *testing.T) {
	x := New(Int32, 2, 3, 4)
	for i := range x.NumElements() {
		x.SetInt64(i, i)
	}
	// numpy.arange(24).reshape(2, 3, 4).transpose(2, 0, 1).ravel(): element
	// [a, b, c] of the result is x[b, c, a] = 12b + 4c + a.
	want := make([]int64, 0, 24)
	for a := range int64(4) {
		for b := range int64(2) {
			for c := range int64(3) {
				want = append(want, 12*b+4*c+a)
			}
		}
	}
	for _, tt := range []struct {
		perm  []int
		shape []int64
		want  []int64
	}{
		{[]int{2, 0, 1}, []int64{4, 2, 3}, want},
		{[]int{0, 1, 2}, []int64{2, 3, 4}, x.Int64s()},
	} {
		y := x.Transpose(tt.perm)
		if !slices.Equal(y.Shape, tt.shape) || !slices.Equal(y.Int64s(), tt.want) {
			t.Errorf("Transpose(%v) = %v %v, want %v %v", tt.perm, y.Shape, y.Int64s(), tt.shape, tt.want)
		}
	}
	// Back and forth is the identity, for a 2-byte dtype too.
	h := New(Float16, 3, 1, 2, 5)
	for i := range h.NumElements() {
		h.SetFloat64(i, float64(i))
	}
	if back := h.Transpose([]int{2, 3, 1, 0}).Transpose([]int{3, 2, 0, 1}); !slices.Equal(back.Data, h.Data) || !slices.Equal(back.Shape, h.Shape) {
		t.Errorf("HWIO and back changed the tensor")
	}
	if s := New(Float32).Transpose(nil); s.NumElements() != 1 {
		t.Errorf("scalar transpose: %v", s)
	}
}
