package serving

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Device-resident intermediates. Two consecutive segments of a pipeline
// that both run on the device only (no host stage, no output whose size
// follows the data, no sequence state) hand the tensors the first makes
// and only the second reads over as device buffers: the first keeps them
// at its bucket's shape, the second takes them as arguments when its own
// bucket's input shape is the buffer's and the two differ from the
// request's real shape only along the second's batch axis (padding rows,
// which no real row reads). Otherwise the buffer is copied to the host, cut
// to its real shape and the segment runs as usual (path "host" of
// xserve_pipeline_handoffs_total). A segment that gives or takes device
// buffers runs alone in its bucket, outside its batcher.

// Handoff paths (label of xserve_pipeline_handoffs_total).
const (
	handoffDevice = "device"
	handoffHost   = "host"
)

// onDevice is a pipeline tensor kept on the device: the executed buffer at
// its producer's bucket shape, the request's real shape inside it, and the
// producing segment's output it is.
type onDevice struct {
	buf  *pjrt.Buffer
	real []int64
	from *version
	k    int
}

// errOtherDevice says a device buffer is not on the device the segment
// runs on: the segment takes it through the host.
var errOtherDevice = errors.New("serving: intermediate on another device")

// planHandoffs marks, for each segment, the pipeline tensors it makes that
// the next segment takes on the device.
func (p *pipe) planHandoffs() {
	p.handoff = make([]map[string]bool, len(p.segs))
	for i := 0; i+1 < len(p.segs); i++ {
		if !p.segs[i].deviceOnly() || !p.segs[i+1].deviceOnly() {
			continue
		}
		for _, tn := range p.plan.Segments[i].Outputs {
			if tn != "" && p.onlyNextReads(i, tn) {
				if p.handoff[i] == nil {
					p.handoff[i] = map[string]bool{}
				}
				p.handoff[i][tn] = true
			}
		}
	}
}

// handsOver reports whether segment i hands tn to the next on the device.
func (p *pipe) handsOver(i int, tn string) bool {
	return i < len(p.handoff) && p.handoff[i][tn]
}

// onlyNextReads reports whether pipeline tensor tn, made by segment i, is
// read by segment i+1 and by nothing else (no later segment, not a
// pipeline output).
func (p *pipe) onlyNextReads(i int, tn string) bool {
	if slices.ContainsFunc(p.outputs, func(s TensorSpec) bool { return s.Name == tn }) {
		return false
	}
	for j := i + 2; j < len(p.plan.Segments); j++ {
		if slices.Contains(p.plan.Segments[j].Inputs, tn) {
			return false
		}
	}
	return slices.Contains(p.plan.Segments[i+1].Inputs, tn)
}

// deviceOnly reports whether segment v runs on the device alone, its
// outputs' sizes known before it runs.
func (v *version) deviceOnly() bool {
	return v.plan != nil && v.host == nil && !v.stateful() && !v.plan.dataDependent()
}

// closeDevice frees the pipeline tensors still on the device.
func closeDevice(dev map[string]*onDevice) {
	for tn, d := range dev {
		_ = d.buf.Close()
		delete(dev, tn)
	}
}

// runSegment runs segment i of v's pipeline on the pipeline tensors made so
// far, on the host (env) or on the device (dev), and adds the ones it
// makes: those the next segment takes on the device to dev.
func (v *version) runSegment(ctx context.Context, i int, req *InferRequest, env map[string]*tensor.Tensor, dev map[string]*onDevice) (*InferResponse, runTimes, error) {
	p := v.pipe
	seg, sv := p.plan.Segments[i], p.segs[i]
	sub := &InferRequest{ID: req.ID, Priority: req.Priority, Inputs: map[string]*tensor.Tensor{}}
	given := map[string]*onDevice{}
	for j, tn := range seg.Inputs {
		if d := dev[tn]; d != nil {
			given[seg.InputNames[j]] = d
			continue
		}
		sub.Inputs[seg.InputNames[j]] = env[tn]
	}
	keep := map[string]string{}
	for j, tn := range seg.Outputs {
		switch {
		case tn == "":
		case p.handsOver(i, tn):
			keep[seg.OutputNames[j]] = tn
		default:
			sub.Outputs = append(sub.Outputs, seg.OutputNames[j])
		}
	}
	if len(given) == 0 && len(keep) == 0 {
		return sv.inferOnce(ctx, sub)
	}
	r, t, ok, err := sv.inferHandoff(ctx, sub, given, keep, dev)
	if ok || err != nil {
		return r, t, err
	}
	if err := v.handoffToHost(ctx, i, sub, given); err != nil {
		return nil, t, err
	}
	for name := range keep {
		sub.Outputs = append(sub.Outputs, name)
	}
	return sv.inferOnce(ctx, sub)
}

// handoffToHost copies the device buffers segment i was given to the host,
// each cut to its real shape, as inputs of sub.
func (v *version) handoffToHost(ctx context.Context, i int, sub *InferRequest, given map[string]*onDevice) error {
	for name, d := range given {
		t, err := d.buf.ToHost(ctx)
		if err != nil {
			return fmt.Errorf("serving: %s: segment %d input %q to the host: %w", v, i, name, err)
		}
		if want := d.from.plan.Outputs[d.k].DType; t.DType != want {
			t = t.Convert(want)
		}
		if sub.Inputs[name], err = d.from.plan.extract(d.k, t, d.real, 0, false); err != nil {
			return fmt.Errorf("serving: %s: segment %d input %q: %w", v, i, name, err)
		}
	}
	v.m.metrics.pipelineHandoffs.With(v.name, v.label, handoffHost).Add(float64(len(given)))
	v.log().Debug("pipeline intermediates through the host", "segment", i, "inputs", len(given))
	return nil
}

// inferHandoff runs req on segment v alone in its bucket with the inputs
// in given taken as device buffers and the outputs in keep left on the
// device (into dev, by pipeline tensor). ok is false, with nothing run,
// when a given buffer does not fit v's bucket: the caller takes the host
// path.
func (v *version) inferHandoff(ctx context.Context, req *InferRequest, given map[string]*onDevice, keep map[string]string, dev map[string]*onDevice) (*InferResponse, runTimes, bool, error) {
	if req.Outputs == nil {
		req.Outputs = []string{} // the kept outputs only
	}
	shapes := map[string][]int64{}
	for name, d := range given {
		shapes[name] = d.real
	}
	c, err := v.prepareWith(req, shapes)
	if err != nil {
		return nil, runTimes{}, false, err
	}
	byIndex := map[int]*onDevice{}
	for name, d := range given {
		byIndex[v.plan.inputIndex(name)] = d
	}
	if !v.fitsBucket(c.exec, byIndex) {
		return nil, runTimes{}, false, nil
	}
	kept := map[int]string{}
	for name, tn := range keep {
		kept[v.plan.outputIndex(name)] = tn
	}
	t, err := v.runHandoff(ctx, c, byIndex, kept, dev)
	if errors.Is(err, errOtherDevice) {
		return nil, t, false, nil
	}
	if err != nil {
		return nil, t, false, err
	}
	if len(given) > 0 {
		v.m.metrics.pipelineHandoffs.With(v.name, v.label, handoffDevice).Add(float64(len(given)))
	}
	resp := &InferResponse{ID: req.ID, ModelName: v.name, ModelVersion: v.num, Bucket: v.plan.keyName(c.exec), QueueTime: t.wait, ComputeTime: t.compute}
	for i, k := range c.outputs {
		resp.Outputs = append(resp.Outputs, NamedTensor{Name: v.plan.Outputs[k].Name, Tensor: c.outs[i]})
	}
	return resp, t, true, nil
}

// fitsBucket reports whether each given buffer is input i of the bucket
// at exec sizes as it is: its dtype and shape, padded (beyond the real
// shape) only along the input's batch axis.
func (v *version) fitsBucket(exec map[string]int64, given map[int]*onDevice) bool {
	for i, d := range given {
		if i < 0 || d.buf.DType() != v.plan.Inputs[i].DType {
			return false
		}
		want, axis := v.plan.inputShape(i, exec), v.plan.inputBatchAxis(i)
		if !equalShape(d.buf.Shape(), want) || len(d.real) != len(want) {
			return false
		}
		for a := range want {
			if d.real[a] != want[a] && a != axis {
				return false
			}
		}
	}
	return true
}

// runHandoff executes call c alone in its bucket: given inputs as they are
// on the device, the others uploaded at the bucket's shape; kept outputs
// stay on the device (into dev), the call's outputs are cut to its shapes
// on the host.
func (v *version) runHandoff(ctx context.Context, c *call, given map[int]*onDevice, kept map[int]string, dev map[string]*onDevice) (runTimes, error) {
	var t runTimes
	h, err := v.hold(ctx, c.exec)
	defer v.release(h)
	t.wait = h.wait
	if err != nil {
		return t, err
	}
	exe := h.exe
	device := v.models[h.place].Device()
	v.m.metrics.deviceLoad.begin(device)
	start := time.Now()
	if len(kept) == 0 {
		err = v.runGiven(ctx, exe, c, given, device)
	} else {
		err = v.executeKeeping(ctx, exe, c, given, kept, dev, device)
	}
	t.compute = time.Since(start)
	v.m.metrics.deviceLoad.end(device)
	if err != nil {
		return t, err
	}
	v.m.metrics.deviceExecutions.With(strconv.Itoa(device)).Inc()
	v.stats.execution(v.executionRows([]*call{c}), t.compute)
	return t, nil
}

// runGiven executes c with the given buffers and its other inputs on the
// host, in one call, its outputs copied to the host and cut to its shapes.
func (v *version) runGiven(ctx context.Context, exe *engine.Executable, c *call, given map[int]*onDevice, device int) error {
	p := v.plan
	inputs := make([]*tensor.Tensor, len(p.Inputs))
	bufs := make([]*pjrt.Buffer, len(p.Inputs))
	for i := range p.Inputs {
		if d := given[i]; d != nil {
			if on, err := d.buf.Device(); err != nil || on != device {
				return errOtherDevice
			}
			bufs[i] = d.buf
			continue
		}
		inputs[i] = p.assemble(i, c.exec, []*tensor.Tensor{c.inputs[i]}, []int64{0})
	}
	outs, err := exe.RunGiven(ctx, inputs, bufs)
	if err != nil {
		return err
	}
	if len(outs) != len(p.Outputs) {
		return fmt.Errorf("serving: %s: %d outputs, the model has %d", v, len(outs), len(p.Outputs))
	}
	p.widenOutputs(outs)
	return v.slice(c, outs, 0, false)
}

// executeKeeping executes c on the device, the outputs in kept left there
// (into dev), its other outputs copied to the host.
func (v *version) executeKeeping(ctx context.Context, exe *engine.Executable, c *call, given map[int]*onDevice, kept map[int]string, dev map[string]*onDevice, device int) error {
	args, err := v.handoffArgs(ctx, exe, c, given, device)
	var outs []*pjrt.Buffer
	if err == nil {
		outs, err = exe.Execute(ctx, args, engine.ExecuteOptions{})
	}
	for i, a := range args {
		if given[i] == nil && a != nil {
			_ = a.Close()
		}
	}
	if err != nil {
		return err
	}
	return v.takeOutputs(ctx, c, outs, kept, dev)
}

// handoffArgs returns the arguments of c's execution of exe on device:
// the given buffers, the other inputs uploaded at the bucket's shape.
func (v *version) handoffArgs(ctx context.Context, exe *engine.Executable, c *call, given map[int]*onDevice, device int) ([]*pjrt.Buffer, error) {
	args := make([]*pjrt.Buffer, len(v.plan.Inputs))
	for i := range v.plan.Inputs {
		if d := given[i]; d != nil {
			if on, err := d.buf.Device(); err != nil || on != device {
				return args, errOtherDevice
			}
			args[i] = d.buf
			continue
		}
		b, err := exe.UploadInput(ctx, i, v.plan.assemble(i, c.exec, []*tensor.Tensor{c.inputs[i]}, []int64{0}))
		if err != nil {
			return args, fmt.Errorf("serving: %s: input %q: %w", v, v.plan.Inputs[i].Name, err)
		}
		args[i] = b
	}
	return args, nil
}

// takeOutputs keeps the outputs in kept on the device (into dev, with
// their real shapes), copies c's outputs to the host cut to its shapes
// and frees the rest.
func (v *version) takeOutputs(ctx context.Context, c *call, outs []*pjrt.Buffer, kept map[int]string, dev map[string]*onDevice) error {
	p := v.plan
	if len(outs) != len(p.Outputs) {
		closeAll(outs)
		return fmt.Errorf("serving: %s: %d outputs, the model has %d", v, len(outs), len(p.Outputs))
	}
	shapes, err := p.outputShapes(c.dims)
	if err != nil {
		closeAll(outs)
		return err
	}
	c.outs = c.outs[:0]
	for k, o := range outs {
		if tn, ok := kept[k]; ok {
			dev[tn] = &onDevice{buf: o, real: shapes[k], from: v, k: k}
			continue
		}
		if err == nil && contains(c.outputs, k) {
			err = v.hostOutput(ctx, c, k, o, shapes[k])
		}
		_ = o.Close()
	}
	return err
}

// hostOutput copies output k of c's execution to the host, cut to shape.
func (v *version) hostOutput(ctx context.Context, c *call, k int, o *pjrt.Buffer, shape []int64) error {
	t, err := o.ToHost(ctx)
	if err != nil {
		return fmt.Errorf("serving: %s: output %q to the host: %w", v, v.plan.Outputs[k].Name, err)
	}
	if want := v.plan.Outputs[k].DType; t.DType != want {
		t = t.Convert(want)
	}
	if t, err = v.plan.extract(k, t, shape, 0, false); err != nil {
		return err
	}
	c.outs = append(c.outs, t)
	return nil
}
