package serving

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// BenchmarkSmallCall splits the time of one small call, the zoo's BERT
// encoder at batch 1 and sequence 12 in a bucket of exactly that size, into
// its layers, each timed in the same loop, one call after the other:
//
//   - device: the executable on inputs already on the device, outputs left
//     there (engine.Executable.Execute): the program alone;
//   - execute: engine.Executable.Run from host tensors to host tensors (one
//     call into the plugin: upload, execute, copy out);
//   - serial: the same with the CPU kernels limited to the calling thread
//     (engine.Way{Threads: 1}, what serving picks while other executions
//     run or when its threads chooser measured it faster);
//   - infer: Manager.Infer, the request path of a server without the wire
//     (validation, bucket, assembly, execute, slicing of the outputs).
//
// It reports each one's median per call (*-p50-us) and the process's CPU
// time per call over all of its calls (*-cpu-us: every thread's, so
// helper threads spinning for work count too).
//
//	go test -run '^$' -bench SmallCall -benchtime 3000x ./serving
func BenchmarkSmallCall(b *testing.B) {
	ctx := context.Background()
	r := newRepo(b)
	r.add("bert", 1, "../testdata/zoo/bert/model.onnx")
	r.config("bert", "buckets:\n  batch: [1]\n  sequence: [12]\nwarmup: eager\n")
	m, _ := start(b, r, nil)
	req := &InferRequest{Inputs: map[string]*tensor.Tensor{
		"input_ids":      readNpy(b, "../testdata/zoo/bert/b1.in.input_ids.npy"),
		"attention_mask": readNpy(b, "../testdata/zoo/bert/b1.in.attention_mask.npy"),
	}}
	m.mu.Lock()
	v, err := m.lookupLocked("bert", 0)
	m.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
	c, err := v.prepare(req)
	if err != nil {
		b.Fatal(err)
	}
	bk := v.acquireBucket(c.exec)
	exe, err := v.executable(ctx, bk, nil)
	v.releaseBucket(bk)
	if err != nil {
		b.Fatal(err)
	}
	ins := c.inputs
	bufs := make([]*pjrt.Buffer, len(ins))
	for k, x := range ins {
		if bufs[k], err = exe.UploadInput(ctx, k, x); err != nil {
			b.Fatal(err)
		}
		defer bufs[k].Close()
	}
	paths := []struct {
		name string
		call func() error
	}{
		{"device", func() error {
			outs, err := exe.Execute(ctx, bufs, engine.ExecuteOptions{})
			for _, o := range outs {
				o.Close()
			}
			return err
		}},
		{"execute", func() error { _, err := exe.Run(ctx, ins); return err }},
		{"serial", func() error { // as execute, the CPU kernels on the calling thread alone
			x := m.engine.Begin()
			defer x.End()
			return x.Run(ctx, engine.Way{Threads: 1}, []engine.Job{{Exe: exe, Inputs: ins}})
		}},
		{"infer", func() error { _, err := m.Infer(ctx, "bert", 0, req); return err }},
	}
	times := make([][]time.Duration, len(paths))
	cpu := make([]time.Duration, len(paths))
	for range 50 { // warm every path
		for _, p := range paths {
			if err := p.call(); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, p := range paths {
			c0 := processCPU()
			t0 := time.Now()
			if err := p.call(); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			times[i] = append(times[i], time.Since(t0))
			cpu[i] += processCPU() - c0
		}
	}
	b.StopTimer()
	for i, p := range paths {
		slices.Sort(times[i])
		b.ReportMetric(float64(times[i][len(times[i])/2].Nanoseconds())/1e3, p.name+"-p50-us")
		b.ReportMetric(float64(cpu[i].Nanoseconds())/1e3/float64(len(times[i])), p.name+"-cpu-us")
	}
}

// processCPU returns the CPU time (user + system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
