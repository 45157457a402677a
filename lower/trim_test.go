package lower_test

import (
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// TestTrim slices a bounded output along a middle axis by its count output
// and drops the count; other outputs pass through.
func TestTrim(t *testing.T) {
	padded := tensor.New(tensor.Float32, 2, 3, 2)
	for i := range int64(12) {
		padded.SetFloat64(i, float64(i))
	}
	other := tensor.FromInt64s([]int64{7, 8})
	p := &lower.Program{Bounded: []fxgraph.BoundedOutput{{Output: 0, Axis: 1, Count: 2}}}
	got, err := p.Trim([]*tensor.Tensor{padded, other, tensor.FromInt64s([]int64{2}, []int64{}...)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1] != other {
		t.Fatalf("Trim returned %v, want the sliced output and the other one", got)
	}
	want := tensor.FromFloat32s([]float32{0, 1, 2, 3, 6, 7, 8, 9}, 2, 2, 2)
	if err := conformance.Compare(got[0], want, 0, 0); err != nil {
		t.Error(err)
	}
	if _, err := p.Trim([]*tensor.Tensor{padded, other, tensor.FromInt64s([]int64{4}, []int64{}...)}); err == nil {
		t.Error("a count above the bound was accepted")
	}
}
