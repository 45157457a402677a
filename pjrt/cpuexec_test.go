package pjrt

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// matmulProgram multiplies two 512x512 matrices: a quarter of a GFLOP,
// milliseconds of work, far above the 1000 flops under which XLA CPU runs a
// program inline whatever the client's mode.
const matmulProgram = `module @mm {
  func.func @main(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
    return %0 : tensor<512x512xf32>
  }
}`

// TestCPUExecution: by default a CPU client runs programs on the calling
// thread (each execution has completed when the plugin's execute call
// returns); with XSERVE_CPU_EXECUTION=async the plugin's thread pool runs
// them, and both give the same, right, result. An unknown mode fails Open
// with the variable named.
func TestCPUExecution(t *testing.T) {
	c := testClient(t)
	if c.CPUExecution() != CPUExecutionInline {
		t.Fatalf("CPUExecution() = %q by default, want %q", c.CPUExecution(), CPUExecutionInline)
	}
	const n = 512
	vals := make([]float32, n*n)
	for i := range vals {
		vals[i] = float32(i%7) / 7
	}
	x := f32([]int64{n, n}, vals...)
	// Row r of x·x, column 0: sum_k x[r,k]·x[k,0], computed here in float64.
	want := func(r int) float64 {
		var s float64
		for k := range n {
			s += float64(vals[r*n+k]) * float64(vals[k*n])
		}
		return s
	}
	run := func(t *testing.T, c *Client, times int) RunCounts {
		t.Helper()
		e := mustCompile(t, c, matmulProgram)
		defer e.Close()
		before := c.RunCounts()
		for range times + 1 { // the first run records the output types
			outs, err := e.RunHost(context.Background(), []*Buffer{nil, nil}, []*tensor.Tensor{x, x})
			if err != nil {
				t.Fatal(err)
			}
			got := float32s(t, outs[0])
			for _, r := range []int{0, 1, n - 1} {
				if w := want(r); math.Abs(float64(got[r*n])-w) > 1e-3*math.Abs(w)+1e-3 {
					t.Fatalf("out[%d,0] = %v, want %v", r, got[r*n], w)
				}
			}
		}
		after := c.RunCounts()
		return RunCounts{Runs: after.Runs - before.Runs, Inline: after.Inline - before.Inline}
	}

	if got := run(t, c, 4); got.Runs != 4 || got.Inline != 4 {
		t.Errorf("inline client: %d of %d RunHost executions ran inline, want 4 of 4", got.Inline, got.Runs)
	}

	t.Run("async", func(t *testing.T) {
		t.Setenv(EnvCPUExecution, "async")
		c2, err := Open(c.PluginPath())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if c2.CPUExecution() != CPUExecutionAsync {
			t.Fatalf("CPUExecution() = %q, want %q", c2.CPUExecution(), CPUExecutionAsync)
		}
		// The pool finishing milliseconds of work before the caller
		// checks the event at all is possible under heavy load, but not
		// eight times over.
		if got := run(t, c2, 8); got.Runs != 8 || got.Inline == 8 {
			t.Errorf("async client: %d of %d RunHost executions ran inline, want fewer than all", got.Inline, got.Runs)
		}
	})

	t.Run("unknown mode", func(t *testing.T) {
		t.Setenv(EnvCPUExecution, "eager")
		if c2, err := Open(c.PluginPath()); err == nil {
			c2.Close()
			t.Fatal("Open succeeded with an unknown XSERVE_CPU_EXECUTION")
		} else if !strings.Contains(err.Error(), EnvCPUExecution) || !strings.Contains(err.Error(), "eager") {
			t.Errorf("error %q does not name %s and its value", err, EnvCPUExecution)
		}
	})
}
