package engine

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/tensor"
)

// TestModelsOnDevices places tinycnn on each device of a CPU client with
// two host devices (the plugin's cpu_device_count), loaded on device 0
// and placed on device 1 by Model.On: each placement's
// weights are on its device (as the plugin reports), its executions run
// there (outputs of Execute on its device), and both answer as ONNX
// Runtime does, through Run, RunGiven (the input uploaded first) and
// Execute. A device the client lacks is refused by name.
func TestModelsOnDevices(t *testing.T) {
	client := pjrttest.Open(t, "..", pjrt.OpenOptions{CPUDevices: 2})
	e, err := New(Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	image, err := tensor.ReadNpyFile(tinyCNNImage)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(tinyCNNProbs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dims := map[string]int64{"batch": image.Shape[0]}
	var first0 *Executable // the first placement's executable
	first, err := e.Load(tinyCNN, LoadOptions{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for dev := range 2 {
		m := first
		if dev > 0 {
			// A second placement of the same model: its graph shared, its
			// weights its own.
			if m, err = first.On(dev); err != nil {
				t.Fatal(err)
			}
			defer m.Close()
		}
		x, _, err := m.Build(ctx, dims)
		if err != nil {
			t.Fatal(err)
		}
		if dev == 0 {
			first0 = x
		} else {
			defer x.Close()
		}
		outs, err := x.Run(ctx, []*tensor.Tensor{image})
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, dev, outs[0], want)
		if m.Device() != dev || m.Weights().Len() == 0 {
			t.Fatalf("device %d: model on %d with %d weights", dev, m.Device(), m.Weights().Len())
		}
		for name, b := range m.Weights().bufs {
			if got, err := b.Device(); err != nil || got != dev {
				t.Errorf("model on device %d: weight %s on device %d, %v", dev, name, got, err)
			}
		}
		in, err := m.Upload(ctx, image)
		if err != nil {
			t.Fatal(err)
		}
		// RunGiven: the input on the device already, the outputs to the host.
		given, err := x.RunGiven(ctx, []*tensor.Tensor{nil}, []*pjrt.Buffer{in})
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, dev, given[0], want)
		res, err := x.Execute(ctx, []*pjrt.Buffer{in}, ExecuteOptions{})
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := res[0].Device(); err != nil || got != dev {
			t.Errorf("model on device %d: Execute's output on device %d, %v", dev, got, err)
		}
		host, err := res[0].ToHost(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, dev, host, want)
		for _, r := range res {
			r.Close()
		}
		if dev == 0 {
			continue
		}
		// The first placement's executable bound to this one's weights:
		// not compiled again, and run on this device.
		shared, err := first0.On(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		in, err = m.Upload(ctx, image)
		if err != nil {
			t.Fatal(err)
		}
		res, err = shared.Execute(ctx, []*pjrt.Buffer{in}, ExecuteOptions{})
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := res[0].Device(); err != nil || got != dev {
			t.Errorf("first placement's executable On device %d: output on device %d, %v", dev, got, err)
		}
		if host, err = res[0].ToHost(ctx); err != nil {
			t.Fatal(err)
		}
		checkClose(t, dev, host, want)
		for _, r := range res {
			r.Close()
		}
		// Closing the first does not free what the second still runs.
		if err := first0.Close(); err != nil {
			t.Fatal(err)
		}
		if outs, err := shared.Run(ctx, []*tensor.Tensor{image}); err != nil {
			t.Fatalf("shared executable after the first's Close: %v", err)
		} else {
			checkClose(t, dev, outs[0], want)
		}
		if err := shared.Close(); err != nil || shared.Close() != nil {
			t.Errorf("closing the last share twice: %v", err)
		}
	}
	if _, err := e.Load(tinyCNN, LoadOptions{Device: 2}); err == nil || !strings.Contains(err.Error(), "no device 2 to place the model on (the cpu client has 2)") {
		t.Errorf("device 2 of 2: err = %v", err)
	}
	if _, err := first.On(2); err == nil || !strings.Contains(err.Error(), "no device 2 to place the model on (the cpu client has 2)") {
		t.Errorf("On(2) of 2 devices: err = %v", err)
	}
}

// checkClose compares tinycnn's probabilities with ONNX Runtime's.
func checkClose(t *testing.T, dev int, got, want *tensor.Tensor) {
	t.Helper()
	if tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		t.Fatalf("device %d: shape %v, want %v", dev, got.Shape, want.Shape)
	}
	for i := range want.NumElements() {
		if d := math.Abs(got.Float64At(i) - want.Float64At(i)); d > 1e-5 {
			t.Fatalf("device %d: probs[%d] = %g, ONNX Runtime %g", dev, i, got.Float64At(i), want.Float64At(i))
		}
	}
}
