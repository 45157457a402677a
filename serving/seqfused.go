package serving

import (
	"context"
	"fmt"
	"sync"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/pjrt"
)

// A batch of steps of different sequences runs as one program: the model
// built with its state rows gathered and scattered inside it
// (engine.Model.BuildRows), per batch bucket. Each sequence's state buffer
// is a row input of the program, donated to the execution; each row output
// is that sequence's next state. Without it (the build failed), a batch is
// three kinds of programs: the states joined (engine.Concat), the model,
// the state output split (engine.Split).

// fusedSteps holds the fused programs of a stateful version, per batch
// bucket.
type fusedSteps struct {
	mu   sync.Mutex
	exes map[string]*fusedStep
	// off runs batches unfused (a benchmark's and a test's comparison);
	// closed once the version is freed.
	off, closed bool
}

// fusedStep is one bucket's fused program, built once.
type fusedStep struct {
	done chan struct{}
	exe  *engine.Executable
	err  error
}

// close frees the fused programs once built; no step runs any more.
func (f *fusedSteps) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, fs := range f.exes {
		<-fs.done
		if fs.exe != nil {
			_ = fs.exe.Close()
		}
	}
	f.exes = nil
}

// fusedExecutable returns bucket b's fused program for rows steps, building
// it on first use (in a compile slot); nil when it cannot be built (the
// caller runs the batch unfused, and the failure is logged once).
func (v *version) fusedExecutable(ctx context.Context, b *bucket, rows int) *engine.Executable {
	f := &v.seqs.fused
	f.mu.Lock()
	if f.off || f.closed {
		f.mu.Unlock()
		return nil
	}
	if f.exes == nil {
		f.exes = map[string]*fusedStep{}
	}
	fs := f.exes[b.name]
	if fs == nil {
		fs = &fusedStep{done: make(chan struct{})}
		f.exes[b.name] = fs
		f.mu.Unlock()
		fs.exe, fs.err = v.buildFused(b, rows)
		close(fs.done)
		if fs.err != nil {
			v.log().Warn("sequence steps run unfused (states joined and split by programs of their own)", "bucket", b.name, "error", fs.err)
		}
	} else {
		f.mu.Unlock()
	}
	select {
	case <-fs.done:
		return fs.exe
	case <-ctx.Done():
		return nil
	}
}

// buildFused builds bucket b's fused program in a compile slot.
func (v *version) buildFused(b *bucket, rows int) (*engine.Executable, error) {
	select {
	case v.m.compileSlots <- struct{}{}:
	case <-v.ctx.Done():
		return nil, v.ctx.Err()
	}
	defer func() { <-v.m.compileSlots }()
	states := make([]engine.RowState, len(v.seqs.states))
	for j, sp := range v.seqs.states {
		states[j] = engine.RowState{Input: sp.in, Output: sp.out, Axis: sp.batchAxis}
	}
	exe, info, err := v.model.BuildRows(v.ctx, b.modelDims, states, rows)
	if info.Compiled {
		v.m.compiles.Add(1)
		v.m.metrics.compilations.With(v.name, v.label, v.bucketLabel(b)).Inc()
	}
	return exe, err
}

// runFusedBatch runs steps in one execution of the fused program exe at
// exec sizes: their inputs stacked, their states donated (zeros for a
// first step and for the padding rows). A failed execution loses the
// states it was given, which the sequences' next requests hear of.
func (v *version) runFusedBatch(ctx context.Context, exe *engine.Executable, exec map[string]int64, steps []*pendingStep) error {
	args, donate, zeros, err := v.fusedArgs(ctx, exe, exec, steps)
	defer closeAll(zeros)
	if err != nil {
		closeAll(args)
		return err
	}
	for _, st := range steps {
		st.s.state = nil // donated below: owned by the execution
	}
	outs, err := exe.Execute(ctx, args, engine.ExecuteOptions{Donate: donate})
	for i, a := range args {
		if a != nil && !contains(donate, i) && !containsBuf(zeros, a) {
			_ = a.Close()
		}
	}
	v.seqs.programs.Add(1)
	if err != nil {
		for _, st := range steps {
			st.s.lost = err
		}
		return fmt.Errorf("serving: %s: %d sequence steps: %w", v, len(steps), err)
	}
	model, err := v.fusedOutputs(outs, steps, int(exec[v.seqs.batchSym]))
	if err != nil {
		for _, st := range steps {
			st.s.lost = err
		}
		return err
	}
	defer closeAll(model)
	return v.sliceSteps(ctx, model, steps)
}

// fusedArgs builds the fused program's inputs: the non-state inputs
// stacked and uploaded, then each state's rows. donate lists the rows that
// are sequences' states; zeros are the zero rows, one per state, shared by
// the first steps and the padding rows.
func (v *version) fusedArgs(ctx context.Context, exe *engine.Executable, exec map[string]int64, steps []*pendingStep) (args []*pjrt.Buffer, donate []int, zeros []*pjrt.Buffer, err error) {
	t, p := v.seqs, v.plan
	for i := range p.Inputs {
		if t.isState[i] {
			continue
		}
		b, err := exe.UploadInput(ctx, len(args), v.stackInput(i, exec, steps))
		if err != nil {
			return args, nil, zeros, err
		}
		args = append(args, b)
	}
	rows := int(exec[t.batchSym])
	for j, sp := range t.states {
		shape := p.inputShape(sp.in, exec)
		shape[sp.batchAxis] = 1
		var zero *pjrt.Buffer
		for r := range rows {
			if r < len(steps) && steps[r].s.state != nil {
				donate = append(donate, len(args))
				args = append(args, steps[r].s.state[j])
				continue
			}
			if zero == nil {
				if zero, err = exe.UploadInput(ctx, len(args), sp.initialValue(p.Inputs[sp.in].DType, shape)); err != nil {
					return args, nil, zeros, err
				}
				zeros = append(zeros, zero)
			}
			args = append(args, zero)
		}
	}
	return args, donate, zeros, nil
}

// fusedOutputs takes the fused program's outputs: it returns the model's
// non-state outputs at their indices (nil at the states), keeps each
// step's state rows as its sequence's state and frees the padding rows.
func (v *version) fusedOutputs(outs []*pjrt.Buffer, steps []*pendingStep, rows int) ([]*pjrt.Buffer, error) {
	t, p := v.seqs, v.plan
	if want := len(p.Outputs) - len(t.states) + rows*len(t.states); len(outs) != want {
		closeAll(outs)
		return nil, fmt.Errorf("serving: %s: the fused step returned %d outputs, want %d", v, len(outs), want)
	}
	isOut := map[int]bool{}
	for _, sp := range t.states {
		isOut[sp.out] = true
	}
	model := make([]*pjrt.Buffer, len(p.Outputs))
	n := 0
	for k := range p.Outputs {
		if !isOut[k] {
			model[k] = outs[n]
			n++
		}
	}
	for _, st := range steps {
		st.s.state = make([]*pjrt.Buffer, len(t.states))
	}
	for j := range t.states {
		for r := range rows {
			if r < len(steps) {
				steps[r].s.state[j] = outs[n]
			} else {
				_ = outs[n].Close()
			}
			n++
		}
	}
	return model, nil
}

func containsBuf(list []*pjrt.Buffer, b *pjrt.Buffer) bool {
	for _, x := range list {
		if x == b {
			return true
		}
	}
	return false
}
