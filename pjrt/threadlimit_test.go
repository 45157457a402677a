package pjrt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// kernelMatmulProgram multiplies two 256x256 matrices with xserve's CPU
// kernel: 16.7M multiply-adds, above the 4M from which a kernel runs on
// every core.
const kernelMatmulProgram = `module @kmm {
  func.func @main(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %0 = "stablehlo.custom_call"(%a, %b) {call_target_name = "xserve_matmul_f32", api_version = 4 : i32, backend_config = {activation = 0 : i64, alpha = 0.0 : f32, has_bias = 0 : i64, residual = 0 : i64, trans_a = 0 : i64, trans_b = 0 : i64}} : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    return %0 : tensor<256x256xf32>
  }
}`

// envThreadLimitHelper makes the test binary run threadLimitHelper instead
// of the tests: the kernels report the threads of each primitive they make
// (XSERVE_CPU_KERNELS_VERBOSE) on the process's stderr, which only a parent
// process can read.
const envThreadLimitHelper = "XSERVE_TEST_THREAD_LIMIT_HELPER"

// TestRunHostAllThreadLimit: RunHost runs a large kernel on every core;
// RunHostAll of one execution with Threads 1 runs it on its thread alone (a
// primitive made for one thread), and RunHostAll of two executions of the
// same program at once runs each so (that primitive again); RunHost after
// them is back on every core; all compute the product right.
func TestRunHostAllThreadLimit(t *testing.T) {
	if inHelper(envThreadLimitHelper, threadLimitHelper) {
		return
	}
	out := runHelper(t, "TestRunHostAllThreadLimit", envThreadLimitHelper, "XSERVE_CPU_KERNELS_THREADS=")
	// The primitive lines each part made, after its marker.
	made := map[string][]string{}
	part := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "== "):
			part = strings.TrimPrefix(line, "== ")
		case strings.HasPrefix(line, "xserve_matmul_f32: "):
			made[part] = append(made[part], line)
		}
	}
	procs := runtime.NumCPU()
	whole := fmt.Sprintf("%d thread(s)", procs)
	if len(made["RunHost"]) != 1 || !strings.HasSuffix(made["RunHost"][0], whole) {
		t.Errorf("RunHost made primitives %q, want one on %s\n%s", made["RunHost"], whole, out)
	}
	switch serial := made["RunHostAll serial"]; {
	case procs == 1 && len(serial) != 0:
		t.Errorf("RunHostAll serial on one processor made primitives %q, want RunHost's reused\n%s", serial, out)
	case procs > 1 && (len(serial) != 1 || !strings.HasSuffix(serial[0], " 1 thread(s)")):
		t.Errorf("RunHostAll serial made primitives %q, want one on 1 thread(s)\n%s", serial, out)
	}
	if all := made["RunHostAll"]; len(all) != 0 {
		t.Errorf("RunHostAll made primitives %q, want the serial one reused by both executions\n%s", all, out)
	}
	if len(made["RunHost again"]) != 0 {
		t.Errorf("RunHost after RunHostAll made primitives %q, want the first one reused (the thread limit ends with the call)\n%s", made["RunHost again"], out)
	}
}

// threadLimitHelper runs kernelMatmulProgram with RunHost, RunHostAll of
// one execution with Threads 1, RunHostAll of two and RunHost again, each after a
// marker line on stderr, checking the results.
func threadLimitHelper() error {
	c, e, err := compileWithKernels(kernelMatmulProgram)
	if err != nil {
		return err
	}
	defer c.Close()
	defer e.Close()
	const n = 256
	vals := make([]float32, n*n)
	for i := range vals {
		vals[i] = float32(i%5)/5 - 0.4
	}
	x := tensor.FromFloat32s(vals, n, n)
	check := func(outs []*tensor.Tensor) error {
		got := outs[0].Float64s()
		for _, r := range []int{0, 7, n - 1} {
			var want float64
			for k := range n {
				want += float64(vals[r*n+k]) * float64(vals[k*n+3])
			}
			if d := math.Abs(got[r*n+3] - want); d > 1e-3 {
				return fmt.Errorf("out[%d,3] = %v, want %v", r, got[r*n+3], want)
			}
		}
		return nil
	}
	for _, part := range []string{"RunHost", "RunHostAll serial", "RunHostAll", "RunHost again"} {
		fmt.Fprintln(os.Stderr, "== "+part)
		for range 2 {
			runs := []HostRun{{Exe: e, Bufs: []*Buffer{nil, nil}, Hosts: []*tensor.Tensor{x, x}}}
			switch part {
			case "RunHostAll serial":
				runs[0].Threads = 1
				c.RunHostAll(context.Background(), runs)
			case "RunHostAll":
				runs = append(runs, runs[0])
				c.RunHostAll(context.Background(), runs)
			default:
				runs[0].Outs, runs[0].Err = e.RunHost(context.Background(), runs[0].Bufs, runs[0].Hosts)
			}
			for i, r := range runs {
				if r.Err != nil {
					return fmt.Errorf("%s: execution %d: %w", part, i, r.Err)
				}
				if err := check(r.Outs); err != nil {
					return fmt.Errorf("%s: execution %d: %w", part, i, err)
				}
			}
		}
	}
	return nil
}

// kernelConvProgram is a 3x3 convolution of one 8-channel 32x32 image with
// xserve's CPU kernel (channels-last, padding 1, bias): 590K multiply-adds,
// which the kernel runs as bands of output rows unless the calling thread's
// thread limit is 1.
const kernelConvProgram = `module @kconv {
  func.func @main(%x: tensor<1x8x32x32xf32>, %w: tensor<3x3x8x8xf32>, %b: tensor<8xf32>) -> tensor<1x8x32x32xf32> {
    %0 = "stablehlo.custom_call"(%x, %w, %b) {call_target_name = "xserve_conv_f32", api_version = 4 : i32, backend_config = {activation = 0 : i64, alpha = 0.0 : f32, dilation = array<i64: 1, 1>, groups = 1 : i64, has_bias = 1 : i64, pad_hi = array<i64: 1, 1>, pad_lo = array<i64: 1, 1>, residual = 0 : i64, stride = array<i64: 1, 1>}, operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[0]> : tensor<1xindex>], result_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>]} : (tensor<1x8x32x32xf32>, tensor<3x3x8x8xf32>, tensor<8xf32>) -> tensor<1x8x32x32xf32>
    return %0 : tensor<1x8x32x32xf32>
  }
}`

const envBandsHelper = "XSERVE_TEST_BANDS_HELPER"

// TestBandsConcurrent runs kernelConvProgram from several goroutines at
// once in a process whose kernels run it as three bands (two band workers,
// so calls contend for them and run bands themselves), and checks every
// result against the same convolution run serial (HostRun.Threads 1: one
// primitive, no bands), which TestConvKernelMatchesORT checks against ONNX
// Runtime.
func TestBandsConcurrent(t *testing.T) {
	if inHelper(envBandsHelper, bandsHelper) {
		return
	}
	out := runHelper(t, "TestBandsConcurrent", envBandsHelper, "XSERVE_CPU_KERNELS_BANDS=3")
	if !strings.Contains(string(out), "x [1, 8, 32, ...] w [8, 8, 3, ...] groups 1: 3 bands of output rows") {
		t.Errorf("the convolution did not run as 3 bands\n%s", out)
	}
}

func bandsHelper() error {
	c, e, err := compileWithKernels(kernelConvProgram)
	if err != nil {
		return err
	}
	defer c.Close()
	defer e.Close()
	vals := func(n, mod int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (float32(i*7%mod) - float32(mod)/2) * scale
		}
		return v
	}
	x := tensor.FromFloat32s(vals(8*32*32, 13, 0.1), 1, 8, 32, 32)
	w := tensor.FromFloat32s(vals(3*3*8*8, 11, 0.05), 3, 3, 8, 8)
	b := tensor.FromFloat32s(vals(8, 5, 0.3), 8)
	run := func(serial bool) ([]float64, error) {
		threads := 0
		if serial {
			threads = 1
		}
		runs := []HostRun{{Exe: e, Bufs: []*Buffer{nil, nil, nil}, Hosts: []*tensor.Tensor{x, w, b}, Threads: threads}}
		c.RunHostAll(context.Background(), runs)
		if runs[0].Err != nil {
			return nil, runs[0].Err
		}
		return runs[0].Outs[0].Float64s(), nil
	}
	if _, err := run(true); err != nil { // the first run takes the portable path
		return err
	}
	want, err := run(true)
	if err != nil {
		return err
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 50 {
				got, err := run(false)
				if err == nil {
					for i := range want {
						if d := math.Abs(got[i] - want[i]); d > 1e-4 {
							err = fmt.Errorf("banded result [%d] = %v, serial %v", i, got[i], want[i])
							break
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// inHelper reports whether this process is a helper that env names (set
// by runHelper), after running body and exiting with 1 if it failed.
func inHelper(env string, body func() error) bool {
	if os.Getenv(env) != "1" {
		return false
	}
	if err := body(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	return true
}

// runHelper runs test in a child process of the test binary with env=1,
// the kernels' verbose log on and the variables of vars, and returns its
// output: the kernels log on the process's stderr, which only a parent
// process can read, and read their settings once per process.
func runHelper(t *testing.T, test, env string, vars ...string) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.count", "1")
	cmd.Env = append(append(os.Environ(), env+"=1", "XSERVE_CPU_KERNELS_VERBOSE=1"), vars...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	return out
}

// compileWithKernels opens the plugin with the CPU kernel library, which
// must export its thread limit, and compiles program.
func compileWithKernels(program string) (*Client, *Executable, error) {
	path, err := FindPlugin(FindOptions{RepoRoot: ".."})
	if err != nil {
		return nil, nil, err
	}
	c, err := Open(path)
	if err != nil {
		return nil, nil, err
	}
	if c.kernelsLimit == nil {
		err := fmt.Errorf("no CPU kernel library with a thread limit loaded (%v): run make pjrt", c.KernelsError())
		return nil, nil, errors.Join(err, c.Close())
	}
	e, err := c.Compile(context.Background(), []byte(program), nil)
	if err != nil {
		return nil, nil, errors.Join(err, c.Close())
	}
	return c, e, nil
}
