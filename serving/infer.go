package serving

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// prepare validates req against the signature and returns its call and the
// bucket it runs in. Errors wrap ErrInvalidInput or ErrNoBucket.
func (v *version) prepare(req *InferRequest) (*call, *bucket, error) {
	sig := v.sig
	names := make([]string, 0, len(req.Inputs))
	for name := range req.Inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !sig.hasInput(name) {
			return nil, nil, fmt.Errorf("%w: model %s has no input %q (inputs: %s)", ErrInvalidInput, v.name, name, sig.inputNames())
		}
	}

	type origin struct {
		input string
		dim   int
	}
	c := &call{inputs: make([]*tensor.Tensor, len(sig.Inputs)), dims: map[string]int64{}}
	from := map[string]origin{}
	for i := range sig.Inputs {
		in := &sig.Inputs[i]
		t := req.Inputs[in.Name]
		if t == nil {
			return nil, nil, fmt.Errorf("%w: missing input %q (%s)", ErrInvalidInput, in.Name, in)
		}
		if t.DType != in.DType {
			return nil, nil, fmt.Errorf("%w: input %q has dtype %s, model expects %s", ErrInvalidInput, in.Name, t.DType, in.DType)
		}
		if len(t.Shape) != len(in.Dims) {
			return nil, nil, fmt.Errorf("%w: input %q has shape %s (rank %d), model expects rank %d: %s", ErrInvalidInput, in.Name, tensor.ShapeString(t.Shape), len(t.Shape), len(in.Dims), formatDims(in.Dims))
		}
		n := tensor.NumElements(t.Shape)
		if n < 0 || int64(len(t.Data)) != n*int64(in.DType.Size()) {
			return nil, nil, fmt.Errorf("%w: input %q has shape %s but %d bytes of data, want %d", ErrInvalidInput, in.Name, tensor.ShapeString(t.Shape), len(t.Data), n*int64(in.DType.Size()))
		}
		for d, spec := range in.Dims {
			got := t.Shape[d]
			if spec.Sym == "" {
				if got != spec.Size {
					return nil, nil, fmt.Errorf("%w: input %q dim %d is %d, model expects %d (shape %s)", ErrInvalidInput, in.Name, d, got, spec.Size, formatDims(in.Dims))
				}
				continue
			}
			if prev, ok := c.dims[spec.Sym]; ok && prev != got {
				o := from[spec.Sym]
				return nil, nil, fmt.Errorf("%w: input %q dim %d (%s) is %d, but input %q dim %d (%s) is %d", ErrInvalidInput, in.Name, d, spec.Sym, got, o.input, o.dim, spec.Sym, prev)
			}
			if _, ok := c.dims[spec.Sym]; !ok {
				c.dims[spec.Sym] = got
				from[spec.Sym] = origin{in.Name, d}
			}
		}
		c.inputs[i] = t
	}

	want := map[string]bool{}
	for _, name := range req.Outputs {
		if !sig.hasOutput(name) {
			return nil, nil, fmt.Errorf("%w: model %s has no output %q (outputs: %s)", ErrInvalidInput, v.name, name, sig.outputNames())
		}
		want[name] = true
	}
	for k, o := range sig.Outputs {
		if req.Outputs == nil || want[o.Name] {
			c.outputs = append(c.outputs, k)
		}
	}

	dims := make(map[string]int64, len(sig.Symbols))
	for _, sym := range sig.Symbols {
		n := c.dims[sym]
		sizes := sig.Buckets[sym]
		i := sort.Search(len(sizes), func(i int) bool { return sizes[i] >= n })
		if i == len(sizes) {
			o := from[sym]
			return nil, nil, fmt.Errorf("%w: input %q dim %d (%s) is %d, the largest bucket is %d (buckets: %v)", ErrNoBucket, o.input, o.dim, sym, n, sizes[len(sizes)-1], sizes)
		}
		dims[sym] = sizes[i]
	}
	b := v.buckets[bucketName(sig.Symbols, dims)]
	if b == nil {
		return nil, nil, fmt.Errorf("serving: %s has no bucket %s", v, bucketName(sig.Symbols, dims))
	}
	return c, b, nil
}

func (s *signature) hasInput(name string) bool {
	for _, in := range s.Inputs {
		if in.Name == name {
			return true
		}
	}
	return false
}

func (s *signature) hasOutput(name string) bool {
	for _, o := range s.Outputs {
		if o.Name == name {
			return true
		}
	}
	return false
}

// infer runs one request on v: validate, pick the bucket, run it, and
// record the request's metrics.
func (v *version) infer(ctx context.Context, req *InferRequest, start time.Time) (*InferResponse, error) {
	resp, t, err := v.inferOnce(ctx, req)
	mt := v.m.metrics
	total := time.Since(start)
	v.stats.request(v.requestRows(req), total, t.wait, t.compute, err)
	outcome := outcomeSuccess
	if err != nil {
		outcome = outcomeFailure
	}
	mt.requests.With(v.name, v.label, outcome).Inc()
	mt.duration.With(v.name, v.label, phaseTotal).Observe(total.Seconds())
	if err == nil {
		mt.duration.With(v.name, v.label, phaseQueue).Observe(t.wait.Seconds())
		mt.duration.With(v.name, v.label, phaseCompute).Observe(t.compute.Seconds())
	}
	return resp, err
}

// inferOnce validates req and runs it: through the version's batcher when
// it has one (and the request has rows to batch), else alone in its bucket.
func (v *version) inferOnce(ctx context.Context, req *InferRequest) (*InferResponse, runTimes, error) {
	c, b, err := v.prepare(req)
	if err != nil {
		return nil, runTimes{}, err
	}
	var t runTimes
	if v.batcher != nil && c.dims[modelrepo.BatchSymbol] > 0 {
		t, b, err = v.inferBatched(ctx, req, c, b)
	} else {
		t, err = v.runBucket(ctx, b, []*call{c}, nil)
	}
	if err != nil {
		return nil, t, err
	}
	resp := &InferResponse{
		ID:           req.ID,
		ModelName:    v.name,
		ModelVersion: v.num,
		Bucket:       b.name,
		QueueTime:    t.wait,
		ComputeTime:  t.compute,
	}
	for i, k := range c.outputs {
		resp.Outputs = append(resp.Outputs, NamedTensor{Name: v.sig.Outputs[k].Name, Tensor: c.outs[i]})
	}
	return resp, t, nil
}
