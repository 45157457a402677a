package serving

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Defaults of the sequence options (Options.MaxSequenceIdle, MaxSequences).
const (
	DefaultMaxSequenceIdle = time.Minute
	DefaultMaxSequences    = 1024
)

// SequenceStep places a request in a sequence of a stateful model
// (Triton's sequence_id, sequence_start and sequence_end parameters).
type SequenceStep struct {
	// ID names the sequence (Triton's integer ids in decimal).
	ID string
	// Start begins the sequence with its initial state (zeros); a started
	// sequence of the same id is dropped first. End drops it after this step.
	Start, End bool
}

// sequenceTable holds the sequences of one stateful model version: per
// sequence id, its state on the device. A sequence idle longer than idle
// expires (its state is freed) and a request for it says so; at most max
// sequences are active.
type sequenceTable struct {
	states []statePair
	idle   time.Duration
	max    int
	// batchSym is the symbol the states' batch axes carry, "" when steps of
	// different sequences cannot run together; isState marks the state
	// inputs, inAxis gives each other input's batch axis (-1: none, the
	// steps of one execution share its value), outAxis each output's.
	batchSym string
	isState  []bool
	inAxis   []int
	outAxis  []int
	queue    stepQueue
	fused    fusedSteps
	// programs counts the device programs the steps ran: one per
	// execution of the model, plus the joins and splits of unfused batches.
	programs atomic.Uint64

	mu      sync.Mutex // guards seqs and gone
	seqs    map[string]*sequence
	gone    map[string]string // why recent sequences ended (expired, lost), bounded by max
	closed  bool
	janitor chan struct{} // closed by close: stops the expiry loop
}

// sequence is one active sequence.
type sequence struct {
	id string
	mu sync.Mutex // held by the step running; guards the fields below
	// state holds the state outputs of the last step, on the device, one
	// per statePair; nil before the first step.
	state []*pjrt.Buffer
	// last is when the sequence's last step ended, busy how many of its
	// requests are in flight: it expires only when none is (both guarded
	// by sequenceTable.mu).
	last time.Time
	busy int
	// lost, once set, says why the state is gone (a failed step).
	lost error
	// ended says the sequence left the table (ended, expired, replaced).
	ended bool
}

func newSequenceTable(states []statePair, idle time.Duration, max int) *sequenceTable {
	t := &sequenceTable{states: states, idle: idle, max: max, seqs: map[string]*sequence{}, gone: map[string]string{}, janitor: make(chan struct{}),
		queue: stepQueue{pending: map[string][]*pendingStep{}, running: map[string]bool{}}}
	go t.expireLoop()
	return t
}

// stateIndex returns the index in states of state input i.
func (t *sequenceTable) stateIndex(i int) int {
	for j, sp := range t.states {
		if sp.in == i {
			return j
		}
	}
	return -1
}

// findBatch sets how steps of different sequences stack: along the
// symbol of the states' batch axes, which each other input has at most
// once, and each output at the one axis that grows with it. Otherwise
// batchSym stays "" and steps run one by one; the reason is returned.
func (t *sequenceTable) findBatch(p *BucketPlan) string {
	t.isState = make([]bool, len(p.Inputs))
	for _, sp := range t.states {
		t.isState[sp.in] = true
		if sp.batchAxis < 0 {
			return fmt.Sprintf("state %q has no batch axis", p.Inputs[sp.in].Name)
		}
		sym := p.Inputs[sp.in].Dims[sp.batchAxis].Sym
		if t.batchSym != "" && sym != t.batchSym {
			return fmt.Sprintf("the states' batch axes are different symbols (%s, %s)", t.batchSym, sym)
		}
		t.batchSym = sym
	}
	t.inAxis = make([]int, len(p.Inputs))
	for i := range p.Inputs {
		t.inAxis[i] = -1
		for d, spec := range p.Inputs[i].Dims {
			if spec.Sym == t.batchSym && !t.isState[i] {
				if t.inAxis[i] >= 0 {
					return fmt.Sprintf("input %q has the batch symbol %s twice", p.Inputs[i].Name, t.batchSym)
				}
				t.inAxis[i] = d
			}
		}
	}
	d1, d2 := p.baseDims(), p.baseDims()
	d1[t.batchSym], d2[t.batchSym] = 1, 2
	a, err1 := p.outputShapes(d1)
	c, err2 := p.outputShapes(d2)
	if err := errors.Join(err1, err2); err != nil {
		return err.Error()
	}
	axes, err := batchAxes(p.Outputs, a, c, 1, 2)
	if err != nil {
		return err.Error()
	}
	t.outAxis = axes
	return ""
}

// expireLoop frees the state of sequences idle past the limit, so that
// abandoned streams do not hold device memory until their id comes back.
func (t *sequenceTable) expireLoop() {
	tick := time.NewTicker(max(t.idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-t.janitor:
			return
		case now := <-tick.C:
			t.mu.Lock()
			t.expireLocked(now)
			t.mu.Unlock()
		}
	}
}

// expireLocked drops the sequences idle since before now-idle. Their state
// is freed by whoever holds them next, or here when no step runs.
func (t *sequenceTable) expireLocked(now time.Time) {
	for id, s := range t.seqs {
		if s.busy == 0 && now.Sub(s.last) > t.idle {
			t.dropLocked(id, s, fmt.Sprintf("expired: idle for more than %v (max_sequence_idle)", t.idle))
		}
	}
}

// dropLocked removes s from the table, remembering why, and frees its
// state once no step holds it.
func (t *sequenceTable) dropLocked(id string, s *sequence, why string) {
	delete(t.seqs, id)
	if why != "" {
		if len(t.gone) >= t.max {
			clear(t.gone)
		}
		t.gone[id] = why
	}
	go func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.ended = true
		s.free()
	}()
}

// free closes s's state buffers; s.mu is held.
func (s *sequence) free() {
	for _, b := range s.state {
		if b != nil {
			_ = b.Close()
		}
	}
	s.state = nil
}

// close drops every sequence and stops the expiry loop.
func (t *sequenceTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	close(t.janitor)
	for id, s := range t.seqs {
		t.dropLocked(id, s, "")
	}
	t.fused.close()
}

// lookup returns the sequence of step, locked, starting it on Start.
func (t *sequenceTable) lookup(model string, step *SequenceStep) (*sequence, error) {
	t.mu.Lock()
	now := time.Now()
	s := t.seqs[step.ID]
	if s != nil && s.busy == 0 && now.Sub(s.last) > t.idle {
		t.dropLocked(step.ID, s, fmt.Sprintf("expired: idle for more than %v (max_sequence_idle)", t.idle))
		s = nil
	}
	switch {
	case t.closed:
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: model %s is unloading", ErrNotReady, model)
	case step.Start:
		if s != nil {
			t.dropLocked(step.ID, s, "")
		}
		if len(t.seqs) >= t.max {
			t.expireLocked(now)
		}
		if len(t.seqs) >= t.max {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: model %s holds %d sequences, its max_sequences; end or let idle sequences expire first", ErrOverloaded, model, t.max)
		}
		delete(t.gone, step.ID)
		s = &sequence{id: step.ID}
		t.seqs[step.ID] = s
	case s == nil:
		why := t.gone[step.ID]
		t.mu.Unlock()
		if why == "" {
			why = "it was never started, it ended, or the server lost it (a restart or a reload of the model loses its sequences); its first request must set sequence_start"
		}
		return nil, fmt.Errorf("%w: sequence %q of model %s is not active: %s", ErrSequence, step.ID, model, why)
	}
	s.last = now
	s.busy++
	t.mu.Unlock()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		t.mu.Lock()
		s.busy--
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: sequence %q of model %s ended while this request waited", ErrSequence, step.ID, model)
	}
	return s, nil
}

// finish releases s after a step: it leaves the table on End or when its
// state was lost, which the next request then hears of.
func (t *sequenceTable) finish(s *sequence, end bool) {
	lost := s.lost
	s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	s.busy--
	s.last = time.Now()
	if !end && lost == nil {
		return
	}
	if t.seqs[s.id] != s {
		return
	}
	why := ""
	if lost != nil {
		why = "its state was lost: " + lost.Error()
	}
	t.dropLocked(s.id, s, why)
}

// stateful reports whether the version keeps state between requests.
func (v *version) stateful() bool { return v.seqs != nil }

// inferSequence runs one step of a sequence: the request's inputs with the
// sequence's state, kept on the device, in place of the state inputs; the
// state outputs stay on the device for the next step and are not returned.
func (v *version) inferSequence(ctx context.Context, req *InferRequest) (*InferResponse, runTimes, error) {
	t := v.seqs
	for _, sp := range t.states {
		if _, ok := req.Inputs[v.plan.Inputs[sp.in].Name]; ok {
			return nil, runTimes{}, fmt.Errorf("%w: input %q is the state of model %s's sequences, which the server keeps; send the other inputs only",
				ErrInvalidInput, v.plan.Inputs[sp.in].Name, v.name)
		}
	}
	c, err := v.prepareStep(req)
	if err != nil {
		return nil, runTimes{}, err
	}
	s, err := t.lookup(v.name, req.Sequence)
	if err != nil {
		return nil, runTimes{}, err
	}
	ps := &pendingStep{c: c, s: s, done: make(chan struct{})}
	if s.lost == nil {
		v.runQueued(ctx, ps)
	} else {
		ps.err = fmt.Errorf("%w: sequence %q of model %s lost its state: %v", ErrSequence, s.id, v.name, s.lost)
	}
	t.finish(s, req.Sequence.End)
	rt, err := ps.rt, ps.err
	if err != nil {
		return nil, rt, err
	}
	resp := &InferResponse{ID: req.ID, ModelName: v.name, ModelVersion: v.num, Bucket: v.plan.keyName(c.exec), ComputeTime: rt.compute, QueueTime: rt.wait}
	for i, k := range c.outputs {
		resp.Outputs = append(resp.Outputs, NamedTensor{Name: v.plan.Outputs[k].Name, Tensor: c.outs[i]})
	}
	return resp, rt, nil
}

// prepareStep validates a step's request against the plan with the state
// inputs at their per-sequence shape (one row), and picks its outputs (the
// state outputs are the server's).
func (v *version) prepareStep(req *InferRequest) (*call, error) {
	p := v.plan
	full := &InferRequest{Inputs: make(map[string]*tensor.Tensor, len(p.Inputs)), Outputs: req.Outputs}
	for k, t := range req.Inputs {
		full.Inputs[k] = t
	}
	given := make([]*tensor.Tensor, len(p.Inputs))
	for i := range p.Inputs {
		given[i] = req.Inputs[p.Inputs[i].Name]
	}
	dims, err := p.bind(given)
	if err != nil {
		return nil, err
	}
	for _, sp := range v.seqs.states {
		shape := p.inputShape(sp.in, dims)
		if sp.batchAxis >= 0 {
			shape[sp.batchAxis] = 1
		}
		full.Inputs[p.Inputs[sp.in].Name] = sp.initialValue(p.Inputs[sp.in].DType, shape)
	}
	c, err := v.prepare(full)
	if err != nil {
		return nil, err
	}
	state := map[int]bool{}
	for _, sp := range v.seqs.states {
		state[sp.out] = true
		if want := p.inputShape(sp.in, c.dims); !equalShape(p.inputShape(sp.in, c.exec), want) {
			return nil, fmt.Errorf("%w: model %s's state %q would be padded from %s to %s; a sequence runs at its exact sizes",
				ErrNoBucket, v.name, p.Inputs[sp.in].Name, tensor.ShapeString(want), tensor.ShapeString(p.inputShape(sp.in, c.exec)))
		}
	}
	outs := c.outputs[:0]
	for _, k := range c.outputs {
		if !state[k] {
			outs = append(outs, k)
		}
	}
	c.outputs = outs
	return c, nil
}

// runStep executes call c of sequence s (locked): its inputs uploaded, its
// state donated from the device (zeros uploaded on the first step), the
// next state kept there, the other outputs copied back.
func (v *version) runStep(ctx context.Context, c *call, s *sequence) (runTimes, error) {
	var rt runTimes
	if s.lost != nil {
		return rt, fmt.Errorf("%w: sequence %q of model %s lost its state: %v", ErrSequence, s.id, v.name, s.lost)
	}
	b := v.acquireBucket(c.exec)
	defer v.releaseBucket(b)
	start := time.Now()
	exe, err := v.executable(ctx, b, nil)
	rt.wait = time.Since(start)
	if err != nil {
		return rt, err
	}
	start = time.Now()
	args, donate, err := v.stepArgs(ctx, exe, c, s)
	if err != nil {
		return rt, err
	}
	outs, err := exe.Execute(ctx, args, engine.ExecuteOptions{Donate: donate})
	v.seqs.programs.Add(1)
	for i, a := range args {
		if !contains(donate, i) {
			_ = a.Close()
		}
	}
	if err != nil {
		s.lost = err // the donated state is gone with the failed execution
		s.state = nil
		return rt, fmt.Errorf("serving: %s: sequence %q: %w", v, s.id, err)
	}
	host, err := v.keepState(ctx, outs, s)
	rt.compute = time.Since(start)
	if err != nil {
		return rt, fmt.Errorf("serving: %s: sequence %q: %w", v, s.id, err)
	}
	v.stats.execution(1, rt.compute)
	return rt, v.slice(c, host, 0, false)
}

// stepArgs uploads c's non-state inputs and places s's state at the state
// inputs; donate lists the state positions.
func (v *version) stepArgs(ctx context.Context, exe *engine.Executable, c *call, s *sequence) ([]*pjrt.Buffer, []int, error) {
	p := v.plan
	args := make([]*pjrt.Buffer, len(p.Inputs))
	var donate []int
	fail := func(err error) ([]*pjrt.Buffer, []int, error) {
		for i, a := range args {
			if a != nil && !contains(donate, i) {
				_ = a.Close()
			}
		}
		return nil, nil, err
	}
	for j, sp := range v.seqs.states {
		donate = append(donate, sp.in)
		if s.state != nil {
			args[sp.in] = s.state[j]
			continue
		}
		b, err := exe.UploadInput(ctx, sp.in, c.inputs[sp.in]) // the initial state
		if err != nil {
			return fail(err)
		}
		args[sp.in] = b
	}
	s.state = nil // donated below: owned by the execution
	for i := range p.Inputs {
		if args[i] != nil {
			continue
		}
		t := p.assemble(i, c.exec, []*tensor.Tensor{c.inputs[i]}, []int64{0})
		b, err := exe.UploadInput(ctx, i, t)
		if err != nil {
			return fail(err)
		}
		args[i] = b
	}
	return args, donate, nil
}

// keepState keeps the state outputs of a step on the device as s's state
// and copies the others to the host (nil at the state outputs).
func (v *version) keepState(ctx context.Context, outs []*pjrt.Buffer, s *sequence) ([]*tensor.Tensor, error) {
	p := v.plan
	if len(outs) != len(p.Outputs) {
		for _, o := range outs {
			_ = o.Close()
		}
		s.lost = fmt.Errorf("the step returned %d outputs, the model has %d", len(outs), len(p.Outputs))
		return nil, s.lost
	}
	s.state = make([]*pjrt.Buffer, len(v.seqs.states))
	isState := map[int]bool{}
	for j, sp := range v.seqs.states {
		s.state[j] = outs[sp.out]
		isState[sp.out] = true
	}
	host := make([]*tensor.Tensor, len(outs))
	var err error
	for k, o := range outs {
		if isState[k] {
			continue
		}
		if err == nil {
			host[k], err = o.ToHost(ctx)
			if err == nil && host[k].DType != p.Outputs[k].DType {
				host[k] = host[k].Convert(p.Outputs[k].DType)
			}
		}
		_ = o.Close()
	}
	return host, err
}

func contains(list []int, x int) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

// setupSequences recognises the version's state (findStates) and, for a
// stateful model, starts its sequence table.
func (v *version) setupSequences(cfgFile string) error {
	sc := v.cfg.Sequence
	var states []statePair
	var err error
	if len(sc.States) > 0 {
		states, err = v.plan.namedStates(sc.States)
		if err != nil {
			return fmt.Errorf("serving: %s: %s: sequence.state: %w", v, cfgFile, err)
		}
	} else {
		states = findStates(v.plan)
	}
	if len(states) == 0 {
		if sc.MaxSequenceIdle > 0 || sc.MaxSequences > 0 {
			return fmt.Errorf("serving: %s: %s: sequence: the model has no state (no output feeds an input of its dtype and shape); name it in sequence.state", v, cfgFile)
		}
		return nil
	}
	if len(v.plan.bounded) > 0 {
		return errors.New("serving: a stateful model with outputs of data-dependent size is not supported")
	}
	idle, most := v.m.opts.MaxSequenceIdle, v.m.opts.MaxSequences
	if sc.MaxSequenceIdle > 0 {
		idle = sc.MaxSequenceIdle
	}
	if sc.MaxSequences > 0 {
		most = sc.MaxSequences
	}
	v.seqs = newSequenceTable(states, idle, most)
	names := make([]string, len(states))
	for j, sp := range states {
		names[j] = v.plan.Inputs[sp.in].Name + "<-" + v.plan.Outputs[sp.out].Name
	}
	var batch string
	if why := v.seqs.findBatch(v.plan); why != "" {
		v.seqs.batchSym = ""
		batch = "steps run one by one: " + why
	} else {
		batch = "steps of different sequences run together along " + v.seqs.batchSym
	}
	v.log().Info("stateful model: sequences keep their state on the device", "state", names,
		"max_sequence_idle", v.seqs.idle, "max_sequences", v.seqs.max, "batching", batch)
	return nil
}
