package pjrt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// TestRunHost: RunHost gives the outputs of Execute on the uploaded inputs,
// on its first (portable) call and on the one-call path after it, for mixes
// of device buffers and host tensors, several outputs, scalars, zero-size
// tensors, an output that is a parameter itself, and host data that is not
// 64-byte aligned (which the plugin must copy rather than read in place).
func TestRunHost(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	multi := `module @multi {
  func.func @main(%s: tensor<f32>, %z: tensor<0x3xf32>, %i: tensor<4xi32>) -> (tensor<f32>, tensor<0x3xf32>, tensor<4xi32>, tensor<2xf64>, tensor<4xi32>) {
    %0 = stablehlo.multiply %s, %s : tensor<f32>
    %1 = stablehlo.negate %z : tensor<0x3xf32>
    %2 = stablehlo.add %i, %i : tensor<4xi32>
    %3 = stablehlo.constant dense<[0.5, -2.25]> : tensor<2xf64>
    return %0, %1, %2, %3, %i : tensor<f32>, tensor<0x3xf32>, tensor<4xi32>, tensor<2xf64>, tensor<4xi32>
  }
}`
	unaligned := func(vals ...float32) *tensor.Tensor {
		x := f32([]int64{int64(len(vals))}, vals...)
		data := make([]byte, len(x.Data)+4)[4:] // 4 bytes past an aligned allocation
		copy(data, x.Data)
		x.Data = data
		return x
	}
	w := f32([]int64{3, 5}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	tests := []struct {
		name   string
		src    string
		inputs []*tensor.Tensor
		onHost []bool // which arguments go as host tensors
	}{
		{"add both host", addProgram, []*tensor.Tensor{f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6), f32([]int64{2, 3}, 6, 5, 4, 3, 2, -1)}, []bool{true, true}},
		{"linear weight on device", linearProgram, []*tensor.Tensor{w, f32([]int64{4, 3}, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1)}, []bool{false, true}},
		{"all on device", addProgram, []*tensor.Tensor{f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6), f32([]int64{2, 3}, 1, 1, 1, 1, 1, 1)}, []bool{false, false}},
		{"scalars zero-size and a parameter as output", multi, []*tensor.Tensor{tensor.Scalar(tensor.Float32, 3), tensor.New(tensor.Float32, 0, 3), tensor.FromInt64s([]int64{1, -2, 3, 1 << 20}).Convert(tensor.Int32)}, []bool{true, true, true}},
		{"unaligned host data", `module @u {
  func.func @main(%a: tensor<5xf32>) -> tensor<5xf32> {
    %0 = stablehlo.add %a, %a : tensor<5xf32>
    return %0 : tensor<5xf32>
  }
}`, []*tensor.Tensor{unaligned(1, 2, 3, 4, 5)}, []bool{true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := mustCompile(t, c, tc.src)
			defer e.Close()
			bufs := make([]*Buffer, len(tc.inputs))
			hosts := make([]*tensor.Tensor, len(tc.inputs))
			all := make([]*Buffer, len(tc.inputs))
			for i, x := range tc.inputs {
				all[i] = mustUpload(t, c, x)
				defer all[i].Close()
				if tc.onHost[i] {
					hosts[i] = x
				} else {
					bufs[i] = all[i]
				}
			}
			want := executeToHost(t, e, all)
			for call := range 3 {
				if fast := e.fastPathUsed(); fast != (call > 0) {
					t.Fatalf("call %d: one-call path used = %v", call, fast)
				}
				got, err := e.RunHost(ctx, bufs, hosts)
				if err != nil {
					t.Fatalf("call %d: %v", call, err)
				}
				if len(got) != len(want) {
					t.Fatalf("call %d: %d outputs, want %d", call, len(got), len(want))
				}
				for i := range want {
					if got[i].String() != want[i].String() || string(got[i].Data) != string(want[i].Data) {
						t.Errorf("call %d output %d: got %v %v, want %v %v", call, i, got[i], got[i].Float64s(), want[i], want[i].Float64s())
					}
				}
			}
		})
	}
}

// executeToHost runs e with Execute and copies the outputs with ToHost:
// the reference for RunHost.
func executeToHost(t *testing.T, e *Executable, args []*Buffer) []*tensor.Tensor {
	t.Helper()
	ctx := context.Background()
	outs, err := e.Execute(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	ts := make([]*tensor.Tensor, len(outs))
	for i, o := range outs {
		if ts[i], err = o.ToHost(ctx); err != nil {
			t.Fatal(err)
		}
		o.Close()
	}
	return ts
}

// TestRunHostErrors: bad arguments are refused with the argument named, on
// both paths.
func TestRunHostErrors(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	defer e.Close()
	x := f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6)
	xb := mustUpload(t, c, x)
	defer xb.Close()
	closed := mustUpload(t, c, x)
	closed.Close()
	short := &tensor.Tensor{DType: tensor.Float32, Shape: []int64{2, 3}, Data: make([]byte, 20)}
	tests := []struct {
		name  string
		bufs  []*Buffer
		hosts []*tensor.Tensor
		want  string
	}{
		{"wrong shape", []*Buffer{nil, xb}, []*tensor.Tensor{f32([]int64{3, 2}, 1, 2, 3, 4, 5, 6), nil}, "argument 0 is float32[3,2], program wants float32[2,3]"},
		{"wrong dtype", []*Buffer{xb, nil}, []*tensor.Tensor{nil, x.Convert(tensor.Float64)}, "argument 1 is float64[2,3], program wants float32[2,3]"},
		{"short data", []*Buffer{nil, xb}, []*tensor.Tensor{short, nil}, "argument 0: float32[2,3] needs 24 bytes of data, got 20"},
		{"both given", []*Buffer{xb, xb}, []*tensor.Tensor{x, nil}, "argument 0: want exactly one of a buffer and a host tensor"},
		{"neither given", []*Buffer{xb, nil}, []*tensor.Tensor{nil, nil}, "argument 1: want exactly one"},
		{"too few", []*Buffer{xb}, []*tensor.Tensor{nil}, "got 1 arguments, program wants 2"},
		{"closed buffer", []*Buffer{closed, nil}, []*tensor.Tensor{nil, x}, "argument 0"},
		{"length mismatch", []*Buffer{xb, xb}, []*tensor.Tensor{nil}, "2 buffers but 1 host tensors"},
	}
	for _, path := range []string{"portable", "one-call"} {
		if path == "one-call" {
			if _, err := e.RunHost(ctx, []*Buffer{xb, nil}, []*tensor.Tensor{nil, x}); err != nil {
				t.Fatal(err)
			}
			if !e.fastPathUsed() {
				t.Fatal("one-call path not set up after a first run")
			}
		}
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				_, err := e.RunHost(ctx, tc.bufs, tc.hosts)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got error %v, want one containing %q", err, tc.want)
				}
			})
		}
	}
}

// TestRunHostConcurrent: concurrent one-call runs on distinct host inputs
// each get their own result.
func TestRunHostConcurrent(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	defer e.Close()
	one := mustUpload(t, c, f32([]int64{2, 3}, 1, 1, 1, 1, 1, 1))
	defer one.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 50 {
				v := make([]float32, 6)
				for i := range v {
					v[i] = float32(r.IntN(1000))
				}
				got, err := e.RunHost(ctx, []*Buffer{nil, one}, []*tensor.Tensor{f32([]int64{2, 3}, v...), nil})
				if err != nil {
					errs <- err
					return
				}
				for i, x := range got[0].Float64s() {
					if x != float64(v[i]+1) {
						errs <- fmt.Errorf("goroutine %d: element %d = %v, want %v", g, i, x, v[i]+1)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

const add16Program = `module @add16 {
  func.func @main(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {
    %0 = stablehlo.add %a, %b : tensor<16xf32>
    return %0 : tensor<16xf32>
  }
}`

// BenchmarkFixedCost is the fixed per-call cost of executing an add of 16
// floats: "execute" runs on device buffers and leaves the output on the
// device; "upload-run" is the path serving took before RunHost (Upload the
// host input, Execute, ToHost, Close: what Run did); "runhost" is RunHost
// with the same host input (one plugin call).
func BenchmarkFixedCost(b *testing.B) {
	c := testClient(b)
	ctx := context.Background()
	e := mustCompile(b, c, add16Program)
	defer e.Close()
	vals := make([]float32, 16)
	for i := range vals {
		vals[i] = float32(i)
	}
	x := f32([]int64{16}, vals...)
	w := mustUpload(b, c, x)
	defer w.Close()
	b.Run("execute", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			outs, err := e.Execute(ctx, []*Buffer{w, w})
			if err != nil {
				b.Fatal(err)
			}
			outs[0].Close()
		}
	})
	b.Run("upload-run", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			in, err := c.Upload(ctx, x)
			if err != nil {
				b.Fatal(err)
			}
			outs, err := e.Execute(ctx, []*Buffer{in, w})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := outs[0].ToHost(ctx); err != nil {
				b.Fatal(err)
			}
			outs[0].Close()
			in.Close()
		}
	})
	b.Run("runhost", func(b *testing.B) {
		b.ReportAllocs()
		bufs, hosts := []*Buffer{nil, w}, []*tensor.Tensor{x, nil}
		for b.Loop() {
			if _, err := e.RunHost(ctx, bufs, hosts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRunHostManyArguments: past 16 device buffers (where RunHost indexes
// the locked ones in a map), repeated buffers are locked once and the sum
// is right on every call.
func TestRunHostManyArguments(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	const n = 24
	var params, sum strings.Builder
	for i := range n {
		if i > 0 {
			params.WriteString(", ")
		}
		fmt.Fprintf(&params, "%%a%d: tensor<2xf32>", i)
	}
	sum.WriteString("    %s0 = stablehlo.add %a0, %a1 : tensor<2xf32>\n")
	for i := 2; i < n; i++ {
		fmt.Fprintf(&sum, "    %%s%d = stablehlo.add %%s%d, %%a%d : tensor<2xf32>\n", i-1, i-2, i)
	}
	src := fmt.Sprintf("module @many {\n  func.func @main(%s) -> tensor<2xf32> {\n%s    return %%s%d : tensor<2xf32>\n  }\n}", params.String(), sum.String(), n-2)
	e := mustCompile(t, c, src)
	defer e.Close()
	one := mustUpload(t, c, f32([]int64{2}, 1, 10))
	defer one.Close()
	bufs := make([]*Buffer, n)
	hosts := make([]*tensor.Tensor, n)
	var want [2]float64
	for i := range n {
		switch {
		case i%3 == 0:
			bufs[i] = one // the same buffer many times
			want[0], want[1] = want[0]+1, want[1]+10
		case i%3 == 1:
			b := mustUpload(t, c, f32([]int64{2}, float32(i), 0))
			defer b.Close()
			bufs[i] = b
			want[0] += float64(i)
		default:
			hosts[i] = f32([]int64{2}, 0, float32(i))
			want[1] += float64(i)
		}
	}
	for call := range 3 {
		got, err := e.RunHost(ctx, bufs, hosts)
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		if g := got[0].Float64s(); g[0] != want[0] || g[1] != want[1] {
			t.Fatalf("call %d: got %v, want %v", call, g, want)
		}
	}
	// Close still gets each buffer's write lock afterwards.
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}
}

// fastPathUsed reports whether the next RunHost of e takes the one-call
// path.
func (e *Executable) fastPathUsed() bool { return e.fast.Load() != nil }

// TestRunHostExecuteOutputArgument: an output of Execute, left on the
// device, is an argument of RunHost's one-call path like an uploaded
// buffer.
func TestRunHostExecuteOutputArgument(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	defer e.Close()
	a, err := c.Upload(ctx, f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	outs, err := e.Execute(ctx, []*Buffer{a, a})
	if err != nil {
		t.Fatal(err)
	}
	defer outs[0].Close()
	before := c.RunCounts().Runs
	for call := range 3 {
		got, err := e.RunHost(ctx, []*Buffer{outs[0], nil}, []*tensor.Tensor{nil, f32([]int64{2, 3}, 1, 1, 1, 1, 1, 1)})
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		want := []float64{3, 5, 7, 9, 11, 13}
		if v := got[0].Float64s(); !slices.Equal(v, want) {
			t.Fatalf("call %d: got %v, want %v", call, v, want)
		}
	}
	if n := c.RunCounts().Runs - before; n < 2 {
		t.Errorf("%d of 3 calls took the one-call path, want the 2 after the first", n)
	}
}

// TestRunHostTimedCoreTime: RunHostTimed reports no core time for an
// executable's first (portable) run, and on the one-call path the CPU time
// of the thread that ran it, which is above zero and, for a program run on
// that thread, never more than the wall time of the call; RunHostAll
// reports the same per run that asks for it (Timed), and 0 for the others.
func TestRunHostTimedCoreTime(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	const n = 192
	e := mustCompile(t, c, fmt.Sprintf(`module @square {
  func.func @main(%%a: tensor<%[1]dx%[1]dxf32>) -> tensor<%[1]dx%[1]dxf32> {
    %%0 = stablehlo.dot_general %%a, %%a, contracting_dims = [1] x [0] : (tensor<%[1]dx%[1]dxf32>, tensor<%[1]dx%[1]dxf32>) -> tensor<%[1]dx%[1]dxf32>
    return %%0 : tensor<%[1]dx%[1]dxf32>
  }
}`, n))
	defer e.Close()
	vals := make([]float32, n*n)
	for i := range vals {
		vals[i] = float32(i%7) - 3
	}
	x := f32([]int64{n, n}, vals...)
	hosts := []*tensor.Tensor{x}
	bufs := []*Buffer{nil}
	if _, cpu, err := e.RunHostTimed(ctx, bufs, hosts); err != nil || cpu != 0 {
		t.Fatalf("first run: core time %v, error %v; want 0 (portable path, not measured)", cpu, err)
	}
	for call := range 5 {
		start := time.Now()
		_, cpu, err := e.RunHostTimed(ctx, bufs, hosts)
		wall := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if cpu <= 0 || cpu > wall {
			t.Fatalf("call %d: core time %v, wall %v: want 0 < core <= wall", call, cpu, wall)
		}
	}
	if _, err := e.RunHost(ctx, bufs, hosts); err != nil {
		t.Fatal(err)
	}
	runs := []HostRun{{Exe: e, Bufs: bufs, Hosts: hosts, Timed: true}, {Exe: e, Bufs: bufs, Hosts: hosts, Timed: true}, {Exe: e, Bufs: bufs, Hosts: hosts}}
	start := time.Now()
	c.RunHostAll(ctx, runs)
	wall := time.Since(start)
	for i, r := range runs {
		if r.Err != nil {
			t.Fatalf("RunHostAll run %d: %v", i, r.Err)
		}
		if !r.Timed {
			if r.CPU != 0 {
				t.Fatalf("RunHostAll run %d, not timed: core time %v, want 0", i, r.CPU)
			}
			continue
		}
		if r.CPU <= 0 || r.CPU > wall {
			t.Fatalf("RunHostAll run %d: core time %v, wall %v: want 0 < core <= wall", i, r.CPU, wall)
		}
	}
}
