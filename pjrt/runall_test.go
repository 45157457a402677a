package pjrt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestRunHostAll: every execution of a RunHostAll gets the outputs Execute
// gives for its own arguments, whether it runs on the calling thread or on
// a worker, with more executions than workers, executions of different
// programs and executions sharing a device buffer; an execution whose
// arguments are wrong fails alone.
func TestRunHostAll(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	add := mustCompile(t, c, addProgram)
	defer add.Close()
	lin := mustCompile(t, c, linearProgram)
	defer lin.Close()
	r := rand.New(rand.NewPCG(7, 7))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.IntN(200) - 100)
		}
		return v
	}
	w := mustUpload(t, c, f32([]int64{3, 5}, vals(15)...))
	defer w.Close()
	addRun := func() HostRun {
		return HostRun{Exe: add, Bufs: []*Buffer{nil, nil}, Hosts: []*tensor.Tensor{f32([]int64{2, 3}, vals(6)...), f32([]int64{2, 3}, vals(6)...)}}
	}
	linRun := func() HostRun {
		return HostRun{Exe: lin, Bufs: []*Buffer{w, nil}, Hosts: []*tensor.Tensor{nil, f32([]int64{4, 3}, vals(12)...)}}
	}
	badRun := HostRun{Exe: add, Bufs: []*Buffer{nil, nil}, Hosts: []*tensor.Tensor{f32([]int64{3, 2}, vals(6)...), f32([]int64{2, 3}, vals(6)...)}}
	tests := []struct {
		name    string
		runs    func() []HostRun
		wantErr map[int]string
	}{
		{"one", func() []HostRun { return []HostRun{addRun()} }, nil},
		{"two of one program", func() []HostRun { return []HostRun{addRun(), addRun()} }, nil},
		{"two sharing a weight buffer", func() []HostRun { return []HostRun{linRun(), linRun()} }, nil},
		{"two programs", func() []HostRun { return []HostRun{linRun(), addRun()} }, nil},
		{"more than the workers", func() []HostRun {
			return []HostRun{addRun(), linRun(), addRun(), linRun(), addRun(), linRun(), addRun(), linRun()}
		}, nil},
		{"one with a wrong shape", func() []HostRun { return []HostRun{addRun(), badRun, linRun()} },
			map[int]string{1: "argument 0 is float32[3,2], program wants float32[2,3]"}},
		{"one without an executable", func() []HostRun { return []HostRun{addRun(), {}} },
			map[int]string{1: "no executable"}},
		{"the first with a wrong shape", func() []HostRun { return []HostRun{badRun, addRun()} },
			map[int]string{0: "argument 0 is float32[3,2], program wants float32[2,3]"}},
	}
	// The first round runs each program for the first time (the portable
	// path, on goroutines); the others take the one-call path.
	for round := range 3 {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("round %d/%s", round, tc.name), func(t *testing.T) {
				runs := tc.runs()
				c.RunHostAll(ctx, runs)
				for i, run := range runs {
					if want, bad := tc.wantErr[i]; bad {
						if run.Err == nil || !strings.Contains(run.Err.Error(), want) {
							t.Errorf("run %d: got error %v, want one containing %q", i, run.Err, want)
						}
						continue
					}
					if run.Err != nil {
						t.Fatalf("run %d: %v", i, run.Err)
					}
					checkHostRun(t, c, i, run)
				}
			})
		}
		if round == 0 && (!add.fastPathUsed() || !lin.fastPathUsed()) {
			t.Fatal("one-call path not set up after a first round")
		}
	}
}

// checkHostRun compares run's outputs with Execute's on the same
// arguments, uploaded.
func checkHostRun(t *testing.T, c *Client, i int, run HostRun) {
	t.Helper()
	args := make([]*Buffer, len(run.Bufs))
	for k := range args {
		if args[k] = run.Bufs[k]; args[k] == nil {
			args[k] = mustUpload(t, c, run.Hosts[k])
			defer args[k].Close()
		}
	}
	want := executeToHost(t, run.Exe, args)
	if len(run.Outs) != len(want) {
		t.Fatalf("run %d: %d outputs, want %d", i, len(run.Outs), len(want))
	}
	for k := range want {
		if run.Outs[k].String() != want[k].String() || string(run.Outs[k].Data) != string(want[k].Data) {
			t.Errorf("run %d output %d: got %v, want %v", i, k, run.Outs[k].Float64s(), want[k].Float64s())
		}
	}
}

// TestRunHostAllConcurrent: RunHostAll calls from several goroutines at
// once share the client's workers (a call that finds none idle runs its
// executions itself), and each execution gets its own result.
func TestRunHostAllConcurrent(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	e := mustCompile(t, c, addProgram)
	defer e.Close()
	one := mustUpload(t, c, f32([]int64{2, 3}, 1, 1, 1, 1, 1, 1))
	defer one.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for range 40 {
				runs := make([]HostRun, 1+r.IntN(3))
				vals := make([][]float32, len(runs))
				for i := range runs {
					vals[i] = make([]float32, 6)
					for k := range vals[i] {
						vals[i][k] = float32(r.IntN(1000))
					}
					runs[i] = HostRun{Exe: e, Bufs: []*Buffer{nil, one}, Hosts: []*tensor.Tensor{f32([]int64{2, 3}, vals[i]...), nil}}
				}
				c.RunHostAll(ctx, runs)
				for i, run := range runs {
					if run.Err != nil {
						errs <- run.Err
						return
					}
					for k, x := range run.Outs[0].Float64s() {
						if x != float64(vals[i][k]+1) {
							errs <- fmt.Errorf("goroutine %d run %d: element %d = %v, want %v", g, i, k, x, vals[i][k]+1)
							return
						}
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

// TestRunHostAllClosed: a client's workers stop with it, and RunHostAll on
// a closed client or a cancelled context fails every execution.
func TestRunHostAllClosed(t *testing.T) {
	path, err := FindPlugin(FindOptions{RepoRoot: repoRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e := mustCompile(t, c, addProgram)
	x := f32([]int64{2, 3}, 1, 2, 3, 4, 5, 6)
	runs := func() []HostRun {
		return []HostRun{{Exe: e, Bufs: []*Buffer{nil, nil}, Hosts: []*tensor.Tensor{x, x}}, {Exe: e, Bufs: []*Buffer{nil, nil}, Hosts: []*tensor.Tensor{x, x}}}
	}
	for range 2 { // the second takes the one-call path, on a worker
		rs := runs()
		c.RunHostAll(context.Background(), rs)
		for i, r := range rs {
			if r.Err != nil || r.Outs[0].Float64s()[5] != 12 {
				t.Fatalf("run %d: %v %v", i, r.Err, r.Outs)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rs := runs()
	c.RunHostAll(ctx, rs)
	for i, r := range rs {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "context canceled") {
			t.Errorf("cancelled: run %d: got error %v", i, r.Err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rs = runs()
	c.RunHostAll(context.Background(), rs)
	for i, r := range rs {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "closed") {
			t.Errorf("closed client: run %d: got error %v", i, r.Err)
		}
	}
}
