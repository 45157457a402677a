package serving

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/xserve/xserve/tensor"
)

// prepare validates req against the plan and returns its call, with the
// sizes it executes at. Errors wrap ErrInvalidInput or ErrNoBucket.
func (v *version) prepare(req *InferRequest) (*call, error) { return v.prepareWith(req, nil) }

// prepareWith is prepare where the inputs named in given are not in req
// but on the device already, of the given (real) shapes: their call input
// is nil, their symbols bound from those shapes.
func (v *version) prepareWith(req *InferRequest, given map[string][]int64) (*call, error) {
	p := v.plan
	names := make([]string, 0, len(req.Inputs))
	for name := range req.Inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if p.inputIndex(name) < 0 {
			return nil, fmt.Errorf("%w: model %s has no input %q (inputs: %s)", ErrInvalidInput, v.name, name, p.inputNames())
		}
	}
	c := &call{inputs: make([]*tensor.Tensor, len(p.Inputs))}
	for i := range p.Inputs {
		in := &p.Inputs[i]
		if c.inputs[i] = req.Inputs[in.Name]; c.inputs[i] == nil && given[in.Name] == nil {
			return nil, fmt.Errorf("%w: missing input %q (%s)", ErrInvalidInput, in.Name, in)
		}
	}
	dims, err := p.bind(c.inputs)
	if err != nil {
		return nil, err
	}
	if err := p.bindShapes(dims, given); err != nil {
		return nil, err
	}
	c.dims = dims
	if c.outputs, err = v.requestedOutputs(req); err != nil {
		return nil, err
	}
	if c.exec, err = p.choose(dims); err != nil {
		return nil, err
	}
	return c, nil
}

// requestedOutputs returns the indices of the outputs req asks for (all
// when it names none), ascending.
func (v *version) requestedOutputs(req *InferRequest) ([]int, error) {
	p := v.plan
	want := map[string]bool{}
	for _, name := range req.Outputs {
		if p.outputIndex(name) < 0 {
			return nil, fmt.Errorf("%w: model %s has no output %q (outputs: %s)", ErrInvalidInput, v.name, name, p.outputNames())
		}
		want[name] = true
	}
	var outs []int
	for k, o := range p.Outputs {
		if req.Outputs == nil || want[o.Name] {
			outs = append(outs, k)
		}
	}
	return outs, nil
}

// infer runs one request on v: validate, pick the bucket, run it, and
// record the request's metrics.
func (v *version) infer(ctx context.Context, req *InferRequest, start time.Time) (*InferResponse, error) {
	resp, t, err := v.inferOnce(ctx, req)
	total := time.Since(start)
	v.stats.request(v.requestRows(req), total, t.wait, t.compute, err)
	if err != nil {
		mt := v.m.metrics
		mt.requests.With(v.name, v.label, outcomeFailure).Inc()
		mt.duration.With(v.name, v.label, phaseTotal).Observe(total.Seconds())
		return resp, err
	}
	rs := v.requestSeries()
	rs.success.Inc()
	rs.total.Observe(total.Seconds())
	rs.queue.Observe(t.wait.Seconds())
	rs.compute.Observe(t.compute.Seconds())
	return resp, err
}

// inferOnce validates req and runs it: through the host stages of a model
// with string values, else on the device.
func (v *version) inferOnce(ctx context.Context, req *InferRequest) (*InferResponse, runTimes, error) {
	switch {
	case v.pipe != nil || v.host != nil:
		if req.Sequence != nil {
			return nil, runTimes{}, fmt.Errorf("%w: model %s keeps no state between requests; send it without sequence_id", ErrSequence, v.name)
		}
		if v.pipe != nil {
			return v.inferPipeline(ctx, req)
		}
		return v.inferHost(ctx, req)
	}
	if req.Sequence != nil {
		if !v.stateful() {
			return nil, runTimes{}, fmt.Errorf("%w: model %s keeps no state between requests (no output feeds an input); send it without sequence_id", ErrSequence, v.name)
		}
		return v.inferSequence(ctx, req)
	}
	return v.inferDevice(ctx, req)
}

// inferDevice validates req against the plan and runs it: through the
// version's batcher when it has one (and the request has rows to batch),
// else alone in its bucket.
func (v *version) inferDevice(ctx context.Context, req *InferRequest) (*InferResponse, runTimes, error) {
	if v.plan == nil {
		return nil, runTimes{}, fmt.Errorf("serving: %s has no device program", v)
	}
	c, err := v.prepare(req)
	if err != nil {
		return nil, runTimes{}, err
	}
	var t runTimes
	exec := c.exec
	if v.batcher != nil && c.dims[v.plan.batchName] > 0 {
		t, exec, err = v.inferBatched(ctx, req, c)
	} else {
		t, err = v.runBucket(ctx, exec, []*call{c}, nil)
	}
	if err != nil {
		return nil, t, err
	}
	resp := &InferResponse{
		ID:           req.ID,
		ModelName:    v.name,
		ModelVersion: v.num,
		Bucket:       v.plan.keyName(exec),
		QueueTime:    t.wait,
		ComputeTime:  t.compute,
	}
	if t.split != "" {
		resp.Bucket += " split " + t.split
	}
	for i, k := range c.outputs {
		resp.Outputs = append(resp.Outputs, NamedTensor{Name: v.plan.Outputs[k].Name, Tensor: c.outs[i]})
	}
	return resp, t, nil
}
