package engine

import (
	"context"
	"testing"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// runUploadThenRun is the way Executable.Run executed before
// pjrt.Executable.RunHost (kept here as the baseline of
// BenchmarkExecutableRun): upload each input with Client.Upload, Execute,
// then ToHost and Close per output (what pjrt.Executable.Run did), close the
// uploads.
func (x *Executable) runUploadThenRun(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	args := append([]*pjrt.Buffer(nil), x.args...)
	for k, i := range x.inputs {
		b, err := x.client.Upload(ctx, inputs[k])
		if err != nil {
			return nil, err
		}
		defer b.Close()
		args[i] = b
	}
	outs, err := x.exe.Execute(ctx, args)
	if err != nil {
		return nil, err
	}
	ts := make([]*tensor.Tensor, len(outs))
	for i, o := range outs {
		if ts[i], err = o.ToHost(ctx); err != nil {
			return nil, err
		}
		o.Close()
	}
	return ts, nil
}

// BenchmarkExecutableRun is the end-to-end cost of Executable.Run (host
// tensors in, host tensors out) at batch 1, on tinycnn
// (examples/models/tinycnn) and on y = x + 1 over float32[1,16]
// (testdata/tiny/addone.onnx), where it is nearly all fixed per-call cost.
// path=upload-run is the code before RunHost, path=runhost today's Run;
// kernels=off lowers tinycnn without the CPU kernels (XLA's own
// convolutions), kernels=on with them (docs/CPU-KERNELS.md); exec=inline
// runs on the default client, exec=async on one opened with
// XSERVE_CPU_EXECUTION=async (pjrt.EnvCPUExecution). They alternate within
// each -count round:
//
//	go test -run '^$' -bench ExecutableRun -count 6 ./engine
func BenchmarkExecutableRun(b *testing.B) {
	c := testClient(b)
	b.Setenv(pjrt.EnvCPUExecution, pjrt.CPUExecutionAsync)
	async, err := pjrt.Open(c.PluginPath())
	if err != nil {
		b.Fatal(err)
	}
	defer async.Close()
	ctx := context.Background()
	for _, m := range []struct {
		name, file string
		kernels    []string
	}{
		{"tinycnn/kernels=off", tinyCNN, []string{}},
		{"tinycnn/kernels=on", tinyCNN, c.Kernels()},
		{"addone16", "../testdata/tiny/addone.onnx", []string{}},
	} {
		for _, c := range []*pjrt.Client{c, async} {
			benchmarkExecutableRun(ctx, b, c, m.name+"/exec="+c.CPUExecution(), m.file, m.kernels)
		}
	}
}

// benchmarkExecutableRun is one model of BenchmarkExecutableRun, on client c.
func benchmarkExecutableRun(ctx context.Context, b *testing.B, c *pjrt.Client, name, file string, kernels []string) {
	e, err := New(Options{Client: c, Lowering: lower.Options{Kernels: kernels}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := e.Load(file, LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	g := m.Graph()
	var inputs []*tensor.Tensor
	for _, p := range g.Placeholders() {
		shape := p.Val().Shape
		dims := make([]int64, len(shape))
		for i, d := range shape {
			dims[i] = 1
			if d.IsStatic() {
				dims[i] = d.Size
			}
		}
		x := tensor.New(tensor.Float32, dims...)
		for i := range x.NumElements() {
			x.SetFloat64(i, float64(i%17)/17) // finite, no denormals
		}
		inputs = append(inputs, x)
	}
	bound, err := g.BindDims(inputs)
	if err != nil {
		b.Fatal(err)
	}
	prog, err := m.Lower(bound)
	if err != nil {
		b.Fatal(err)
	}
	exe, _, err := m.Compile(ctx, prog)
	if err != nil {
		b.Fatal(err)
	}
	defer exe.Close()
	want, err := exe.runUploadThenRun(ctx, inputs)
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range []struct {
		name string
		run  func(context.Context, []*tensor.Tensor) ([]*tensor.Tensor, error)
	}{{"upload-run", exe.runUploadThenRun}, {"runhost", exe.Run}} {
		got, err := path.run(ctx, inputs)
		if err != nil {
			b.Fatal(err)
		}
		if string(got[0].Data) != string(want[0].Data) {
			b.Fatalf("%s %s: outputs differ from the baseline's", name, path.name)
		}
		b.Run(name+"/path="+path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := path.run(ctx, inputs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
