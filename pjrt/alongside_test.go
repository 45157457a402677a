package pjrt

import (
	"context"
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

// envAlongsideHelper makes the test binary run alongsideHelper instead of
// the tests: the kernels report the threads of each primitive they make
// (XSERVE_CPU_KERNELS_VERBOSE) on the process's stderr, which only a parent
// process can read.
const envAlongsideHelper = "XSERVE_TEST_ALONGSIDE_HELPER"

// TestRunHostAlongside: RunHost runs a large kernel on every core,
// RunHostAlongside the same program on the calling thread alone, and both
// compute the product right.
func TestRunHostAlongside(t *testing.T) {
	if os.Getenv(envAlongsideHelper) == "1" {
		if err := alongsideHelper(); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestRunHostAlongside$", "-test.count", "1")
	cmd.Env = append(os.Environ(), envAlongsideHelper+"=1", "XSERVE_CPU_KERNELS_VERBOSE=1", "XSERVE_CPU_KERNELS_THREADS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
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
	switch alongside := made["RunHostAlongside"]; {
	case procs == 1 && len(alongside) != 0:
		t.Errorf("RunHostAlongside on one processor made primitives %q, want RunHost's reused\n%s", alongside, out)
	case procs > 1 && (len(alongside) != 1 || !strings.HasSuffix(alongside[0], " 1 thread(s)")):
		t.Errorf("RunHostAlongside made primitives %q, want one on 1 thread(s)\n%s", alongside, out)
	}
	if len(made["RunHost again"]) != 0 {
		t.Errorf("RunHost after RunHostAlongside made primitives %q, want the first one reused (the thread limit ends with the call)\n%s", made["RunHost again"], out)
	}
}

// alongsideHelper runs kernelMatmulProgram with RunHost, RunHostAlongside and
// RunHost again, each after a marker line on stderr, checking the results.
func alongsideHelper() error {
	path, err := FindPlugin(FindOptions{RepoRoot: ".."})
	if err != nil {
		return err
	}
	c, err := Open(path)
	if err != nil {
		return err
	}
	defer c.Close()
	if c.kernelsLimit == nil {
		return fmt.Errorf("no CPU kernel library with a thread limit loaded (%v): run make pjrt", c.KernelsError())
	}
	e, err := c.Compile(context.Background(), []byte(kernelMatmulProgram))
	if err != nil {
		return err
	}
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
	for _, part := range []string{"RunHost", "RunHostAlongside", "RunHost again"} {
		fmt.Fprintln(os.Stderr, "== "+part)
		run := e.RunHost
		if part == "RunHostAlongside" {
			run = e.RunHostAlongside
		}
		for range 2 {
			outs, err := run(context.Background(), []*Buffer{nil, nil}, []*tensor.Tensor{x, x})
			if err != nil {
				return fmt.Errorf("%s: %w", part, err)
			}
			if err := check(outs); err != nil {
				return fmt.Errorf("%s: %w", part, err)
			}
		}
	}
	return nil
}
