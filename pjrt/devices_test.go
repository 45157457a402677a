package pjrt

import (
	"context"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestCPUDevices opens the real CPU plugin with three host devices
// (cpu_device_count) and places values and executions on them: a buffer
// uploaded to device d is on d as the plugin reports it, an execution on
// buffers of device d runs there (its outputs are on d, and so are the
// host arguments RunHost uploads for it), results equal those of device 0,
// and arguments on two devices, a device out of range, and CPU devices on
// a client asked for a count it cannot have are refused by name.
func TestCPUDevices(t *testing.T) {
	path, err := FindPlugin(FindOptions{RepoRoot: repoRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenWith(path, OpenOptions{CPUDevices: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := c.Devices(); n != 3 {
		t.Fatalf("Devices() = %d, want 3", n)
	}
	one, err := OpenWith(path, OpenOptions{CPUDevices: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := one.Devices(); n != 1 {
		t.Errorf("CPUDevices 1: Devices() = %d, want 1", n)
	}
	one.Close()
	t.Logf("the plugin's default CPU client has %d devices", testClient(t).Devices())
	ctx := context.Background()
	e, err := c.Compile(ctx, []byte(linearProgram), []Type{f32Type(3, 5), f32Type(4, 3)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	w := make([]float32, 15)
	x := make([]float32, 12)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	for i := range x {
		x[i] = float32(i) / 4
	}
	want := linearWant(w, x)
	host := f32([]int64{4, 3}, x...)
	for dev := range 3 {
		wb, err := c.UploadTo(ctx, f32([]int64{3, 5}, w...), dev)
		if err != nil {
			t.Fatal(err)
		}
		defer wb.Close()
		xb, err := c.UploadTo(ctx, host, dev)
		if err != nil {
			t.Fatal(err)
		}
		defer xb.Close()
		if got, err := wb.Device(); err != nil || got != dev {
			t.Errorf("UploadTo(device %d): buffer on device %d, %v", dev, got, err)
		}
		outs, err := e.Execute(ctx, []*Buffer{wb, xb})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := outs[0].Device(); err != nil || got != dev {
			t.Errorf("execution on device %d's buffers: output on device %d, %v", dev, got, err)
		}
		if err := closeEnough(float32s(t, mustToHost(t, outs[0])), want); err != nil {
			t.Errorf("device %d: %v", dev, err)
		}
		outs[0].Close()
		// RunHost with the weights on dev uploads x to dev and runs there
		// (twice: the portable path, then the one-call path).
		for range 2 {
			ts, err := e.RunHost(ctx, []*Buffer{wb, nil}, []*tensor.Tensor{nil, host})
			if err != nil {
				t.Fatal(err)
			}
			if err := closeEnough(float32s(t, ts[0]), want); err != nil {
				t.Errorf("RunHost on device %d: %v", dev, err)
			}
		}
	}

	a, _ := c.UploadTo(ctx, f32([]int64{3, 5}, w...), 0)
	defer a.Close()
	b, _ := c.UploadTo(ctx, host, 1)
	defer b.Close()
	if _, err := e.Execute(ctx, []*Buffer{a, b}); err == nil || !strings.Contains(err.Error(), "argument 0 is on device 0, argument 1 on device 1") {
		t.Errorf("arguments on two devices: err = %v", err)
	}
	if _, err := e.RunHost(ctx, []*Buffer{a, b}, make([]*tensor.Tensor, 2)); err == nil || !strings.Contains(err.Error(), "on device 1") {
		t.Errorf("RunHost, arguments on two devices: err = %v", err)
	}
	if _, err := c.UploadTo(ctx, host, 3); err == nil || !strings.Contains(err.Error(), "no device 3 (the client has 3)") {
		t.Errorf("UploadTo(3): err = %v", err)
	}
	if _, err := OpenWith(path, OpenOptions{CPUDevices: -1}); err == nil || !strings.Contains(err.Error(), "CPUDevices -1") {
		t.Errorf("CPUDevices -1: err = %v", err)
	}
}
