package pjrt

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// chainProgram is a program of steps chained products of an n×n matrix
// with itself, each through tanh: an execution long enough (tens of
// milliseconds) for another to start while it runs.
func chainProgram(n, steps int) string {
	ty := fmt.Sprintf("tensor<%[1]dx%[1]dxf32>", n)
	var b strings.Builder
	fmt.Fprintf(&b, "module @chain {\n  func.func @main(%%a: %s) -> %s {\n", ty, ty)
	prev := "%a"
	for k := range steps {
		fmt.Fprintf(&b, "    %%d%d = stablehlo.dot_general %s, %%a, contracting_dims = [1] x [0] : (%s, %s) -> %s\n", k, prev, ty, ty, ty)
		fmt.Fprintf(&b, "    %%t%d = stablehlo.tanh %%d%d : %s\n", k, k, ty)
		prev = fmt.Sprintf("%%t%d", k)
	}
	fmt.Fprintf(&b, "    return %s : %s\n  }\n}\n", prev, ty)
	return b.String()
}

// TestRunHostTracedOverlap runs two executions of one program on one
// device, the second started while the first runs, and shows from their
// traces that nothing in the execution path serialises them: the second's
// uploads are handed to the plugin while the first executes, and the
// outputs of the one that completes first are copied back while the other
// executes. (On the CPU
// plugin an upload hands the host memory over without a copy and a
// download is a memcpy; on a device plugin they are the host↔device
// transfers that this lets run beside the other execution.)
func TestRunHostTracedOverlap(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	const n = 192
	e := mustCompile(t, c, chainProgram(n, 40))
	defer e.Close()
	vals := make([]float32, n*n)
	for i := range vals {
		vals[i] = float32(i%13-6) / 64
	}
	x := f32([]int64{n, n}, vals...)
	run := func() ([]*tensor.Tensor, RunTrace) {
		outs, tr, err := e.RunHostTraced(ctx, []*Buffer{nil}, []*tensor.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		return outs, tr
	}
	if _, tr := run(); tr != (RunTrace{}) {
		t.Fatalf("first run (portable path) traced %+v, want zero", tr)
	}
	want, solo := run()
	checkTrace(t, "alone", solo)
	for try := range 5 {
		type result struct {
			outs []*tensor.Tensor
			tr   RunTrace
		}
		first := make(chan result, 1)
		go func() {
			outs, tr := run()
			first <- result{outs, tr}
		}()
		// Start the second a quarter into the first's execution, as
		// long as it took alone: when it starts is not asserted, only
		// the order the traces show.
		time.Sleep((solo.Executed - solo.Uploaded) / 4)
		outsB, b := run()
		ra := <-first
		a := ra.tr
		checkTrace(t, "first", a)
		checkTrace(t, "second", b)
		for _, o := range [][]*tensor.Tensor{ra.outs, outsB} {
			if !tensorsEqual(o[0], want[0]) {
				t.Fatal("an execution beside another gave outputs other than alone")
			}
		}
		at := func(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d-a.Start)/1e6) }
		t.Logf("try %d, from the first's start: first uploaded %s, executed %s, downloaded %s; second started %s, uploaded %s, executed %s, downloaded %s",
			try, at(a.Uploaded), at(a.Executed), at(a.Downloaded), at(b.Start), at(b.Uploaded), at(b.Executed), at(b.Downloaded))
		// The second's inputs were handed over while the first executed;
		// whichever completed first had its outputs copied back while
		// the other was still executing.
		uploadDuring := a.Uploaded <= b.Start && b.Uploaded <= a.Executed
		downloadDuring := a.Downloaded <= b.Executed || b.Downloaded <= a.Executed
		if uploadDuring && downloadDuring {
			return
		}
	}
	t.Fatal("in 5 tries, no second execution was uploaded while the first executed with one's outputs copied back while the other executed: executions on one device are serialised")
}

// checkTrace checks that a one-call execution traced its steps in order.
func checkTrace(t *testing.T, what string, tr RunTrace) {
	t.Helper()
	if tr.Start <= 0 || tr.Uploaded < tr.Start || tr.Executed < tr.Uploaded || tr.Downloaded < tr.Executed {
		t.Fatalf("%s: trace %+v, want 0 < start <= uploaded <= executed <= downloaded", what, tr)
	}
}

func tensorsEqual(a, b *tensor.Tensor) bool {
	return a.DType == b.DType && tensor.ShapeString(a.Shape) == tensor.ShapeString(b.Shape) && string(a.Data) == string(b.Data)
}

// TestRunHostCopiesQueuedBehindExecution runs a program with two outputs
// on a CPU client that executes asynchronously (XSERVE_CPU_EXECUTION=async:
// the plugin's execute returns before the program has run) and copies its
// outputs through the plugin as on a device: RunHost asks for both copies
// before it awaits the execution, and the plugin orders them after it, so
// the outputs are those of the inline client's memcpy path.
func TestRunHostCopiesQueuedBehindExecution(t *testing.T) {
	path, err := FindPlugin(FindOptions{RepoRoot: repoRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvCPUExecution, CPUExecutionAsync)
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.pluginCopies = true
	const n = 128
	ty := fmt.Sprintf("tensor<%[1]dx%[1]dxf32>", n)
	src := strings.Replace(chainProgram(n, 16), "return %t15 : "+ty, "%s = stablehlo.add %t15, %a : "+ty+"\n    return %t15, %s : "+ty+", "+ty, 1)
	src = strings.Replace(src, ") -> "+ty+" {", ") -> ("+ty+", "+ty+") {", 1)
	vals := make([]float32, n*n)
	for i := range vals {
		vals[i] = float32(i%11-5) / 48
	}
	x := f32([]int64{n, n}, vals...)
	ctx := context.Background()
	ref := mustCompile(t, testClient(t), src)
	defer ref.Close()
	want, err := ref.RunHost(ctx, []*Buffer{nil}, []*tensor.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	e := mustCompile(t, c, src)
	defer e.Close()
	for run := range 4 {
		got, tr, err := e.RunHostTraced(ctx, []*Buffer{nil}, []*tensor.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		if run > 0 {
			checkTrace(t, fmt.Sprintf("run %d", run), tr)
		}
		for k := range want {
			if err := closeF32(float32s(t, got[k]), float32s(t, want[k]), 1e-6); err != nil {
				t.Fatalf("run %d, output %d: %v", run, k, err)
			}
		}
	}
	if rc := c.RunCounts(); rc.Runs != 3 || rc.Inline != 0 {
		t.Errorf("RunCounts %+v, want 3 one-call runs, none completed when the plugin's execute returned", rc)
	}
}

// closeF32 compares got with want within rel relative to want's largest
// magnitude.
func closeF32(got, want []float32, rel float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > rel*scale {
			return fmt.Errorf("value %d: %g, want %g", i, got[i], want[i])
		}
	}
	return nil
}
