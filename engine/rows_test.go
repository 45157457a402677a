package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// TestConcatSplit: rows of three [2,1,3] buffers joined along axis 1 on the
// device are the host-side concatenation, split back they are the inputs,
// and no value crosses to the host in between.
func TestConcatSplit(t *testing.T) {
	e := testEngine(t, Options{})
	ctx := context.Background()
	var hosts []*tensor.Tensor
	var bufs []*pjrt.Buffer
	for k := range 3 {
		vals := make([]float32, 6)
		for i := range vals {
			vals[i] = float32(10*k + i)
		}
		h := tensor.FromFloat32s(vals, 2, 1, 3)
		b, err := e.Upload(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		hosts, bufs = append(hosts, h), append(bufs, b)
	}
	before := e.Client().Transfers()
	joined, err := e.Concat(ctx, bufs, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer joined.Close()
	parts, err := e.Split(ctx, joined, 1, []int64{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if after := e.Client().Transfers(); after != before {
		t.Errorf("concat and split copied values: transfers %+v -> %+v", before, after)
	}
	got, err := joined.ToHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 1, 2, 10, 11, 12, 20, 21, 22, 3, 4, 5, 13, 14, 15, 23, 24, 25}
	if tensor.ShapeString(got.Shape) != "[2,3,3]" || !bytes.Equal(got.Data, tensor.FromFloat32s(want, 2, 3, 3).Data) {
		t.Errorf("concat = %v %v, want [2,3,3] %v", got.Shape, got.Float64s(), want)
	}
	for k, p := range parts {
		h, err := p.ToHost(ctx)
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(h.Data, hosts[k].Data) {
			t.Errorf("split part %d = %v, want %v", k, h.Float64s(), hosts[k].Float64s())
		}
	}
	if _, err := e.Split(ctx, joined, 1, []int64{1, 1}); err == nil {
		t.Error("split into sizes that do not sum to the axis: no error")
	}
}
