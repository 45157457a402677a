package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Job is one execution of an executable on host inputs.
type Job struct {
	Exe *Executable
	// Inputs are in the order of the program's input parameters.
	Inputs []*tensor.Tensor
	// Threads, above 0, is the most threads the execution's CPU kernels
	// run on (1: the calling thread only, no OpenMP team); 0 is as many
	// as they want. It applies to a Job run alone: Jobs run at once each
	// run on one thread.
	Threads int

	// Outs are the results the run sets, guard results checked and
	// dropped.
	Outs []*tensor.Tensor
	// Timed asks for CPU, the run's core time: the CPU time of the thread
	// that ran it (pjrt.Executable.RunHostTimed); 0 when not asked for or
	// not measured (an executable's first run).
	Timed bool
	CPU   time.Duration
}

// JobError is the error of one Job of several run at once.
type JobError struct {
	Job int // its index
	Err error
}

func (e *JobError) Error() string { return fmt.Sprintf("engine: job %d: %v", e.Job, e.Err) }
func (e *JobError) Unwrap() error { return e.Err }

// run is the engine's one execute path: it runs jobs at once, as one
// pjrt.Client.RunHostAll (the first on the calling thread, the others on
// the client's worker threads; a lone job on every thread its kernels
// want is that call's pjrt.Executable.RunHost), and sets each one's Outs,
// guard results checked and dropped. With several jobs, an error is a
// *JobError.
func run(ctx context.Context, c *pjrt.Client, jobs []Job) error {
	if len(jobs) == 1 && jobs[0].Threads == 0 {
		j := &jobs[0]
		hosts, err := j.Exe.hostArgs(j.Inputs)
		if err != nil {
			return err
		}
		outs, err := runLone(ctx, j, hosts)
		if err != nil {
			return err
		}
		j.Outs, err = j.Exe.Program.CheckGuards(outs)
		return err
	}
	runs := make([]pjrt.HostRun, len(jobs))
	for i, j := range jobs {
		hosts, err := j.Exe.hostArgs(j.Inputs)
		if err != nil {
			return jobError(i, len(jobs), err)
		}
		runs[i] = pjrt.HostRun{Exe: j.Exe.exe, Bufs: j.Exe.args, Hosts: hosts, Threads: j.Threads, Timed: j.Timed}
	}
	c.RunHostAll(ctx, runs)
	for i, r := range runs {
		jobs[i].CPU = r.CPU
		err := r.Err
		if err == nil {
			// A guard result says the run reached a part of the model
			// that could not be built: an error, never the stand-in's
			// result.
			jobs[i].Outs, err = jobs[i].Exe.Program.CheckGuards(r.Outs)
		}
		if err != nil {
			return jobError(i, len(jobs), err)
		}
	}
	return nil
}

// runLone runs j alone on its host arguments, timing it if it asks.
func runLone(ctx context.Context, j *Job, hosts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if !j.Timed {
		return j.Exe.exe.RunHost(ctx, j.Exe.args, hosts)
	}
	outs, cpu, err := j.Exe.exe.RunHostTimed(ctx, j.Exe.args, hosts)
	j.CPU = cpu
	return outs, err
}

func jobError(i, n int, err error) error {
	if n == 1 {
		return err
	}
	return &JobError{Job: i, Err: err}
}

// Load is what an execution finds when it begins.
type Load struct {
	// Others counts the other executions running, each part of a split
	// one counted.
	Others int
	// Cores is how many executions run at once without sharing a core
	// (GOMAXPROCS).
	Cores int
}

// Execution is one execution in progress, from Engine.Begin to End: while
// it runs it counts as running, so that executions beginning meanwhile see
// the cores it holds.
type Execution struct {
	e    *Engine
	load Load
}

// Begin starts an execution: it counts from now until End.
func (e *Engine) Begin() Execution {
	others := e.executing.Add(1) - 1
	return Execution{e: e, load: Load{Others: int(others), Cores: e.cores}}
}

// Load returns what the execution found when it began.
func (x *Execution) Load() Load { return x.load }

// Run runs the execution the way w says: jobs is one Job for a whole
// execution (on w.Threads threads), or the parts of a split one, run at
// once, each holding a core. The caller times the execution, as far as it
// reaches (a split one's cutting and stacking of rows included), for the
// Strategy that chose w (Observe).
func (x *Execution) Run(ctx context.Context, w Way, jobs []Job) error {
	if len(jobs) == 1 && jobs[0].Exe.calls {
		jobs[0].Threads = w.Threads
	}
	if extra := int64(len(jobs) - 1); extra > 0 {
		x.e.executing.Add(extra)
		defer x.e.executing.Add(-extra)
	}
	return run(ctx, x.e.client, jobs)
}

// End ends the execution.
func (x *Execution) End() { x.e.executing.Add(-1) }
