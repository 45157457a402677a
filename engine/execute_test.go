package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// addOne is y = x + 1 over float32[batch,16], exported by the ONNX
// exporter (testdata/tiny).
const addOne = "../testdata/tiny/addone.onnx"

// TestExecuteKeepsValuesOnTheDevice runs a step function N times, feeding
// its output buffer back in as the next input, with the input donated:
// the result equals N round trips through the host (Executable.Run), and
// the steps make no copy between host and device.
func TestExecuteKeepsValuesOnTheDevice(t *testing.T) {
	e := testEngine(t, Options{})
	ctx := context.Background()
	m, err := e.Load(addOne, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, _, err := m.Build(ctx, map[string]int64{"batch": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	start := tensor.New(tensor.Float32, 2, 16)
	for i := range start.NumElements() {
		start.SetFloat64(i, float64(i)/3)
	}
	const steps = 25

	host := start
	for range steps {
		outs, err := x.Run(ctx, []*tensor.Tensor{host})
		if err != nil {
			t.Fatal(err)
		}
		host = outs[0]
	}

	v, err := e.Upload(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	before := e.Client().Transfers()
	for step := range steps {
		outs, err := x.Execute(ctx, []*pjrt.Buffer{v}, ExecuteOptions{Donate: []int{0}})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if _, err := v.ToHost(ctx); !errors.Is(err, pjrt.ErrClosed) {
			t.Fatalf("step %d: the donated input still reads: %v", step, err)
		}
		v = outs[0]
	}
	if got := e.Client().Transfers(); got != before {
		t.Errorf("%d steps made host copies: %+v, before %+v", steps, got, before)
	}
	got, err := v.ToHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	if fmt.Sprint(got.Float64s()) != fmt.Sprint(host.Float64s()) {
		t.Errorf("on the device: %v\nthrough the host: %v", got.Float64s(), host.Float64s())
	}
	want := float32(start.Float64At(5))
	for range steps {
		want++
	}
	if got.Float64At(5) != float64(want) {
		t.Errorf("element 5 is %v, want %v", got.Float64At(5), want)
	}

	// Wrong inputs are errors naming what is wrong, before the plugin.
	w, err := e.Upload(ctx, tensor.New(tensor.Float32, 3, 16))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tc := range []struct {
		in   []*pjrt.Buffer
		opts ExecuteOptions
		want string
	}{
		{nil, ExecuteOptions{}, "got 0 inputs, the program takes 1"},
		{[]*pjrt.Buffer{w}, ExecuteOptions{}, "argument 0 is float32[3,16], program wants float32[2,16]"},
		{[]*pjrt.Buffer{w}, ExecuteOptions{Donate: []int{1}}, "cannot donate input 1 of 1"},
	} {
		if _, err := x.Execute(ctx, tc.in, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Execute(%v, %+v) = %v, want %q", tc.in, tc.opts, err, tc.want)
		}
	}
}
