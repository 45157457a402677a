package serving

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// maxStepBatch bounds the steps of different sequences one execution runs.
const maxStepBatch = 64

// Steps of different sequences run together: a step joins the queue of
// its group (same sizes apart from the batch, same values of the inputs
// without a batch axis); when no execution of the group is running, its
// request runs every queued step in one execution, then the steps that
// queued meanwhile, until the queue is empty. Under load, the steps that
// arrive while one execution runs form the next batch; alone, a step runs
// at once. In a batch, the sequences' states are rows of one program that
// gathers them before the model and scatters them after it (seqfused.go);
// where that program cannot be built, they are joined on the device
// (engine.Concat) into the state input, and the state output is split back
// (engine.Split) into each sequence's state: no state leaves the device.

// stepQueue holds the queued steps of a stateful version, per group.
type stepQueue struct {
	mu      sync.Mutex
	pending map[string][]*pendingStep
	running map[string]bool
}

// pendingStep is one sequence step waiting in its group's queue.
type pendingStep struct {
	c    *call
	s    *sequence // locked by the request
	rt   runTimes
	err  error
	done chan struct{}
}

// runQueued queues step ps and returns once it ran, running the group's
// queue itself when no other request does.
func (v *version) runQueued(ctx context.Context, ps *pendingStep) {
	q := &v.seqs.queue
	key := v.stepGroup(ps.c)
	q.mu.Lock()
	q.pending[key] = append(q.pending[key], ps)
	if q.running[key] {
		q.mu.Unlock()
		<-ps.done // the running request runs it: a step is short
		return
	}
	q.running[key] = true
	for {
		batch := q.pending[key]
		if len(batch) > maxStepBatch {
			batch = batch[:maxStepBatch]
		}
		q.pending[key] = q.pending[key][len(batch):]
		q.mu.Unlock()
		v.runSteps(context.WithoutCancel(ctx), batch)
		for _, st := range batch {
			close(st.done)
		}
		q.mu.Lock()
		if len(q.pending[key]) == 0 {
			delete(q.pending, key)
			delete(q.running, key)
			q.mu.Unlock()
			return
		}
	}
}

// stepGroup is the queue key of c: its sizes but the batch, and the bytes
// of its inputs that have no batch axis (which one execution shares).
func (v *version) stepGroup(c *call) string {
	t := v.seqs
	dims := make(map[string]int64, len(c.dims))
	for k, n := range c.dims {
		if k != t.batchSym {
			dims[k] = n
		}
	}
	var b strings.Builder
	b.WriteString(v.plan.keyName(dims))
	for i := range v.plan.Inputs {
		if !t.isState[i] && t.inAxis[i] < 0 {
			fmt.Fprintf(&b, "|%x", c.inputs[i].Data)
		}
	}
	return b.String()
}

// runSteps runs steps (of different sequences, one group) in one
// execution, or alone when it is one step or the model has no batch axis.
func (v *version) runSteps(ctx context.Context, steps []*pendingStep) {
	if len(steps) == 1 || v.seqs.batchSym == "" {
		for _, st := range steps {
			st.rt, st.err = v.runStep(ctx, st.c, st.s)
		}
		return
	}
	start := time.Now()
	err := v.runStepBatch(ctx, steps)
	d := time.Since(start)
	for _, st := range steps {
		st.rt.compute, st.err = d, err
	}
	if err == nil {
		v.stats.execution(int64(len(steps)), d)
	}
}

// runStepBatch executes steps together at the batch bucket that holds them:
// their inputs stacked along each input's batch axis, their states joined
// on the device (zeros for a first step and for padding rows); each
// sequence's state is replaced only once the execution succeeded.
func (v *version) runStepBatch(ctx context.Context, steps []*pendingStep) error {
	t, p := v.seqs, v.plan
	dims := make(map[string]int64, len(steps[0].c.dims))
	for k, n := range steps[0].c.dims {
		dims[k] = n
	}
	dims[t.batchSym] = int64(len(steps))
	exec, err := p.choose(dims)
	if err != nil {
		return err
	}
	b := v.acquireBucket(exec)
	defer v.releaseBucket(b)
	if fx := v.fusedExecutable(ctx, b, int(exec[t.batchSym])); fx != nil {
		return v.runFusedBatch(ctx, fx, exec, steps)
	}
	exe, err := v.executable(ctx, b, nil)
	if err != nil {
		return err
	}
	args, err := v.batchArgs(ctx, exe, exec, steps)
	defer closeAll(args)
	if err != nil {
		return err
	}
	outs, err := exe.Execute(ctx, args, engine.ExecuteOptions{})
	t.programs.Add(1 + 2*uint64(len(t.states))) // per state, a join before and a split after
	if err != nil {
		return fmt.Errorf("serving: %s: %d sequence steps: %w", v, len(steps), err)
	}
	defer closeAll(outs)
	if len(outs) != len(p.Outputs) {
		return fmt.Errorf("serving: %s: the step returned %d outputs, the model has %d", v, len(outs), len(p.Outputs))
	}
	states, err := v.splitStates(ctx, outs, exec[t.batchSym], len(steps))
	if err != nil {
		return err
	}
	if err := v.sliceSteps(ctx, outs, steps); err != nil {
		for _, st := range states {
			closeAll(st)
		}
		return err
	}
	for i, st := range steps {
		st.s.free()
		st.s.state = states[i]
	}
	return nil
}

// batchArgs builds the execution's inputs at exec sizes: the requests'
// inputs stacked along their batch axis and uploaded, the states joined
// on the device.
func (v *version) batchArgs(ctx context.Context, exe *engine.Executable, exec map[string]int64, steps []*pendingStep) ([]*pjrt.Buffer, error) {
	t, p := v.seqs, v.plan
	args := make([]*pjrt.Buffer, len(p.Inputs))
	for i := range p.Inputs {
		var err error
		if t.isState[i] {
			args[i], err = v.joinStates(ctx, exe, i, exec, steps)
		} else {
			args[i], err = exe.UploadInput(ctx, i, v.stackInput(i, exec, steps))
		}
		if err != nil {
			return args, err
		}
	}
	return args, nil
}

// stackInput is input i at exec sizes with each step's rows at its index
// along the input's batch axis (padding after); an input without one is
// the first step's (the group's steps share it).
func (v *version) stackInput(i int, exec map[string]int64, steps []*pendingStep) *tensor.Tensor {
	p, axis := v.plan, v.seqs.inAxis[i]
	if axis < 0 {
		return p.assemble(i, exec, []*tensor.Tensor{steps[0].c.inputs[i]}, []int64{0})
	}
	shape := p.inputShape(i, exec)
	dst := tensor.New(p.Inputs[i].DType, shape...)
	fill(dst.Data, p.Inputs[i].pad)
	elem := int64(p.Inputs[i].DType.Size())
	for k, st := range steps {
		src := st.c.inputs[i]
		off := make([]int64, len(shape))
		off[axis] = int64(k)
		copyBlock(dst.Data, shape, off, src.Data, src.Shape, make([]int64, len(shape)), src.Shape, elem)
	}
	return dst
}

// joinStates joins the steps' states of state input i (zeros for a
// sequence's first step and for the padding rows) along its batch axis on
// the device.
func (v *version) joinStates(ctx context.Context, exe *engine.Executable, i int, exec map[string]int64, steps []*pendingStep) (*pjrt.Buffer, error) {
	t, p := v.seqs, v.plan
	j := t.stateIndex(i)
	axis := t.states[j].batchAxis
	row := p.inputShape(i, exec)
	rows := row[axis]
	row[axis] = 1
	var zeros *pjrt.Buffer // a row of the initial state, uploaded once if needed
	defer func() {
		if zeros != nil {
			_ = zeros.Close()
		}
	}()
	parts := make([]*pjrt.Buffer, rows)
	for r := range parts {
		if r < len(steps) && steps[r].s.state != nil {
			parts[r] = steps[r].s.state[j]
			continue
		}
		if zeros == nil {
			var err error
			if zeros, err = exe.UploadInput(ctx, i, t.states[j].initialValue(p.Inputs[i].DType, row)); err != nil {
				return nil, err
			}
		}
		parts[r] = zeros
	}
	return v.m.engine.Concat(ctx, parts, axis)
}

// splitStates splits each state output of an execution of rows rows into
// the first n rows' states, per step.
func (v *version) splitStates(ctx context.Context, outs []*pjrt.Buffer, rows int64, n int) ([][]*pjrt.Buffer, error) {
	t := v.seqs
	states := make([][]*pjrt.Buffer, n)
	for i := range states {
		states[i] = make([]*pjrt.Buffer, len(t.states))
	}
	sizes := make([]int64, rows) // one row each, padding rows too: one program per bucket
	for i := range sizes {
		sizes[i] = 1
	}
	for j, sp := range t.states {
		parts, err := v.m.engine.Split(ctx, outs[sp.out], sp.batchAxis, sizes)
		if err != nil {
			for _, st := range states {
				closeAll(st)
			}
			return nil, err
		}
		closeAll(parts[n:])
		for i := range n {
			states[i][j] = parts[i]
		}
	}
	return states, nil
}

// sliceSteps copies the non-state outputs the steps want to the host and
// gives each step its row.
func (v *version) sliceSteps(ctx context.Context, outs []*pjrt.Buffer, steps []*pendingStep) error {
	t, p := v.seqs, v.plan
	host := make([]*tensor.Tensor, len(outs))
	for _, st := range steps {
		for _, k := range st.c.outputs {
			if host[k] != nil {
				continue
			}
			h, err := outs[k].ToHost(ctx)
			if err != nil {
				return err
			}
			if h.DType != p.Outputs[k].DType {
				h = h.Convert(p.Outputs[k].DType)
			}
			host[k] = h
		}
	}
	for row, st := range steps {
		shapes, err := p.outputShapes(st.c.dims)
		if err != nil {
			return err
		}
		st.c.outs = st.c.outs[:0]
		for _, k := range st.c.outputs {
			o, err := p.extractAlong(k, host[k], shapes[k], t.outAxis[k], int64(row))
			if err != nil {
				return err
			}
			st.c.outs = append(st.c.outs, o)
		}
	}
	return nil
}

func closeAll(bs []*pjrt.Buffer) {
	for _, b := range bs {
		if b != nil {
			_ = b.Close()
		}
	}
}
