package pjrt

import (
	"context"
	"errors"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// stepProgram is one step of a loop whose state stays on the device:
// state' = state * 0.5 + x, its state parameter aliased to its result
// (tf.aliasing_output, what JAX's donate_argnums emits), so that a donated
// state is updated in place.
const stepProgram = `module @step {
  func.func @main(%state: tensor<4x8xf32> {tf.aliasing_output = 0 : i32}, %x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %half = stablehlo.constant dense<0.5> : tensor<4x8xf32>
    %0 = stablehlo.multiply %state, %half : tensor<4x8xf32>
    %1 = stablehlo.add %0, %x : tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}`

// TestExecuteDonation: a state donated to the step program comes back in
// the same device memory (the program aliases it), the donated buffer is
// invalid afterwards, one not donated stays valid and is not written, and
// N steps fed back on the device make no host copy and equal the steps
// computed in Go.
func TestExecuteDonation(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e, err := c.Compile(ctx, []byte(stepProgram), []Type{f32Type(4, 8), f32Type(4, 8)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	vals := make([]float32, 32)
	for i := range vals {
		vals[i] = float32(i) / 8
	}
	x := mustUpload(t, c, f32([]int64{4, 8}, vals...))
	defer x.Close()

	// Not donated: a new output, the argument intact.
	kept := mustUpload(t, c, f32([]int64{4, 8}, vals...))
	defer kept.Close()
	outs, err := e.Execute(ctx, []*Buffer{kept, x})
	if err != nil {
		t.Fatal(err)
	}
	if got := float32s(t, mustToHost(t, kept)); got[8] != vals[8] {
		t.Errorf("an argument not donated changed: %v", got)
	}
	outs[0].Close()

	state := mustUpload(t, c, tensor.New(tensor.Float32, 4, 8))
	want := make([]float32, 32)
	before := c.Transfers()
	const steps = 20
	for step := range steps {
		at, err := state.devicePointer()
		if err != nil {
			t.Fatal(err)
		}
		outs, err := e.Execute(ctx, []*Buffer{state, x}, ExecuteOptions{Donate: []int{0}})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if _, err := state.ToHost(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("step %d: the donated state still reads: %v", step, err)
		}
		if err := state.Close(); err != nil {
			t.Fatalf("step %d: Close of a donated buffer: %v", step, err)
		}
		state = outs[0]
		if got, err := state.devicePointer(); err != nil || got != at {
			t.Errorf("step %d: the new state is at %#x, the donated one was at %#x: not updated in place (%v)", step, got, at, err)
		}
		for i := range want {
			want[i] = want[i]*0.5 + vals[i]
		}
	}
	if got := c.Transfers(); got != before {
		t.Errorf("%d steps on the device made %+v host copies, had %+v before", steps, got, before)
	}
	got := float32s(t, mustToHost(t, state))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after %d steps: element %d is %v, want %v", steps, i, got[i], want[i])
		}
	}
	state.Close()

	// Donating an argument twice, or out of range, is refused before the
	// plugin sees it.
	for _, donate := range [][]int{{0, 0}, {2}, {-1}} {
		if _, err := e.Execute(ctx, []*Buffer{kept, x}, ExecuteOptions{Donate: donate}); err == nil {
			t.Errorf("Donate %v accepted", donate)
		}
	}
	if _, err := e.Execute(ctx, []*Buffer{x, x}, ExecuteOptions{Donate: []int{0}}); err == nil {
		t.Error("a buffer donated and passed again accepted")
	}
}

func mustToHost(t testing.TB, b *Buffer) *tensor.Tensor {
	t.Helper()
	x, err := b.ToHost(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return x
}
