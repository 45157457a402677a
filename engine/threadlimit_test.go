package engine

import (
	"context"
	"math"
	"testing"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// TestThreadLimitOnlyWithKernels: an execution run with a thread limit
// (Way.Threads) keeps it when its program calls the CPU kernel library
// (tinycnn lowered with the kernels: the limit is theirs) and drops it when
// the program has no custom call (addone), which then runs on the lone
// path; either way the results are those of a run without a limit.
func TestThreadLimitOnlyWithKernels(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	for _, tc := range []struct {
		name        string
		file        string
		input       []int64
		kernels     []string
		wantThreads int
	}{
		{"addone", addOne, []int64{2, 16}, c.Kernels(), 0},
		{"tinycnn with kernels", tinyCNN, []int64{1, 3, 32, 32}, c.Kernels(), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantThreads > 0 && len(tc.kernels) == 0 {
				t.Fatal("the plugin has no CPU kernel library: run `make pjrt`")
			}
			e := testEngine(t, Options{Lowering: lower.Options{Kernels: tc.kernels}})
			m, err := e.Load(tc.file, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			x, _, err := m.Build(ctx, map[string]int64{"batch": tc.input[0]})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			in := tensor.New(tensor.Float32, tc.input...)
			for i := range in.NumElements() {
				in.SetFloat64(i, float64(i%13)/13)
			}
			want, err := x.Run(ctx, []*tensor.Tensor{in})
			if err != nil {
				t.Fatal(err)
			}
			run := e.Begin()
			jobs := []Job{{Exe: x, Inputs: []*tensor.Tensor{in}}}
			err = run.Run(ctx, Way{Threads: 1}, jobs)
			run.End()
			if err != nil {
				t.Fatal(err)
			}
			if jobs[0].Threads != tc.wantThreads {
				t.Errorf("the job ran with Threads %d, want %d", jobs[0].Threads, tc.wantThreads)
			}
			got := jobs[0].Outs[0]
			for i := range want[0].NumElements() {
				if d := math.Abs(got.Float64At(i) - want[0].Float64At(i)); d > 1e-5 {
					t.Fatalf("element %d: %v, %v without a limit", i, got.Float64At(i), want[0].Float64At(i))
				}
			}
		})
	}
}
