package serving

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Host stages. A model with string values (ONNX string operators, string
// class labels) is cut by fxgraph.SplitHost: its pre stage runs on the
// host for each request, before the request's numeric values go through
// the bucket plan, batching and the executables of the device graph like
// any model's, and its post stage runs after. The model's signature (what
// requests give and what Metadata shows) is the whole graph's; the plan's
// is the device graph's. A model whose every node is a string operator
// has no plan and runs on the host only.

// hostStages is a version's host split and the model's signature.
type hostStages struct {
	split           *fxgraph.HostSplit
	inputs, outputs []TensorSpec
}

func newHostStages(split *fxgraph.HostSplit) *hostStages {
	h := &hostStages{split: split}
	g := split.Model
	for _, p := range g.Placeholders() {
		h.inputs = append(h.inputs, graphSpec(p.Target, p.Val()))
	}
	for i, o := range g.Outputs() {
		h.outputs = append(h.outputs, graphSpec(g.OutputName(i), o.Val()))
	}
	return h
}

// graphSpec is the TensorSpec of a graph value.
func graphSpec(name string, m fxgraph.TensorMeta) TensorSpec {
	s := TensorSpec{Name: name, DType: m.DType, Shape: make([]int64, len(m.Shape)), Dims: make([]string, len(m.Shape))}
	for i, d := range m.Shape {
		s.Dims[i] = d.String()
		s.Shape[i] = d.Size
		if !d.IsStatic() {
			s.Shape[i] = -1
		}
	}
	return s
}

func specNames(specs []TensorSpec) string {
	var out string
	for i, s := range specs {
		if i > 0 {
			out += ", "
		}
		out += s.Name
	}
	return out
}

// checkInput checks one input's name, dtype and rank against the model.
func (h *hostStages) checkInput(model, name string, dt tensor.DType, shape []int64) error {
	return checkSpec(model, h.inputs, name, dt, shape)
}

// checkSpec checks one input's name, dtype, rank and static dims against
// a signature.
func checkSpec(model string, specs []TensorSpec, name string, dt tensor.DType, shape []int64) error {
	for _, in := range specs {
		if in.Name != name {
			continue
		}
		if dt != in.DType {
			return fmt.Errorf("%w: input %q has dtype %s, model expects %s", ErrInvalidInput, name, dt, in.DType)
		}
		if len(shape) != len(in.Shape) {
			return fmt.Errorf("%w: input %q has shape %s (rank %d), model expects rank %d: %v", ErrInvalidInput, name, tensor.ShapeString(shape), len(shape), len(in.Shape), in.Dims)
		}
		for d, size := range in.Shape {
			if size >= 0 && shape[d] != size {
				return fmt.Errorf("%w: input %q has shape %s, model expects %d at dim %d", ErrInvalidInput, name, tensor.ShapeString(shape), size, d)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: model %s has no input %q (inputs: %s)", ErrInvalidInput, model, name, specNames(specs))
}

// orderInputs checks req's inputs and returns them in the model's order.
func (h *hostStages) orderInputs(model string, req *InferRequest) ([]*tensor.Tensor, error) {
	names := make([]string, 0, len(req.Inputs))
	for name := range req.Inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := req.Inputs[name]
		if err := h.checkInput(model, name, t.DType, t.Shape); err != nil {
			return nil, err
		}
	}
	out := make([]*tensor.Tensor, len(h.inputs))
	for i, in := range h.inputs {
		if out[i] = req.Inputs[in.Name]; out[i] == nil {
			return nil, fmt.Errorf("%w: missing input %q (%s%v)", ErrInvalidInput, in.Name, in.DType, in.Dims)
		}
	}
	return out, nil
}

// inferHost runs req through the host stages, the device part as a request
// of the device graph.
func (v *version) inferHost(ctx context.Context, req *InferRequest) (*InferResponse, runTimes, error) {
	h := v.host
	inputs, err := h.orderInputs(v.name, req)
	if err != nil {
		return nil, runTimes{}, err
	}
	want := map[string]bool{}
	for _, name := range req.Outputs {
		found := false
		for _, o := range h.outputs {
			found = found || o.Name == name
		}
		if !found {
			return nil, runTimes{}, fmt.Errorf("%w: model %s has no output %q (outputs: %s)", ErrInvalidInput, v.name, name, specNames(h.outputs))
		}
		want[name] = true
	}
	resp := &InferResponse{ID: req.ID, ModelName: v.name, ModelVersion: v.num, Bucket: "host"}
	var t runTimes
	outs, err := h.split.Run(ctx, inputs, func(ctx context.Context, dev []*tensor.Tensor) ([]*tensor.Tensor, error) {
		sub := &InferRequest{ID: req.ID, Inputs: map[string]*tensor.Tensor{}, Priority: req.Priority}
		for i, p := range h.split.Device.Placeholders() {
			sub.Inputs[p.Target] = dev[i]
		}
		r, rt, err := v.inferDevice(ctx, sub)
		if err != nil {
			return nil, err
		}
		t = rt
		resp.Bucket, resp.QueueTime, resp.ComputeTime = r.Bucket, r.QueueTime, r.ComputeTime
		res := make([]*tensor.Tensor, len(r.Outputs))
		for i, o := range r.Outputs {
			res[i] = o.Tensor
		}
		return res, nil
	})
	if err != nil {
		return nil, t, hostError(err)
	}
	for i, o := range outs {
		if name := h.outputs[i].Name; req.Outputs == nil || want[name] {
			resp.Outputs = append(resp.Outputs, NamedTensor{Name: name, Tensor: o})
		}
	}
	return resp, t, nil
}

// hostError marks a failure of a host node (text that is no number) as
// the request's fault; errors of the device part keep their kind.
func hostError(err error) error {
	if errors.Is(err, fxgraph.ErrHostNode) && !errors.Is(err, ErrInvalidInput) {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	return err
}
