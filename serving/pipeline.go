package serving

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pipeline"
	"github.com/xserve/xserve/tensor"
)

// Pipelines. A model whose config is a pipeline (a Triton ensemble's
// config.pbtxt, or config.yaml's pipeline:) is served by its segments
// (package pipeline cuts and stitches them): each segment is a version of
// its own inside the pipeline's, with its bucket plan, pad probe, batching
// and one executable per bucket, but no name in the repository. A request
// runs the segments in order; the tensors one segment makes and a later
// one reads go through the host between them (they are cut there because
// the host computes on them: boxes, crops), except between two segments
// that run on the device only, which hand them over as device buffers
// (pipedevice.go).

// pipe is a pipeline version's plan and its segments.
type pipe struct {
	plan            *pipeline.Plan
	segs            []*version
	inputs, outputs []TensorSpec
	info            *PipelineInfo
	// handoff[i] are the pipeline tensors segment i makes and segment i+1
	// takes on the device (pipedevice.go).
	handoff []map[string]bool
}

// PipelineInfo describes how a pipeline is served (Metadata.Pipeline).
type PipelineInfo struct {
	// Steps in execution order.
	Steps []PipelineStepInfo
	// Segments are the executions a request makes, in order.
	Segments []PipelineSegmentInfo
}

// PipelineStepInfo describes one step of a pipeline.
type PipelineStepInfo struct {
	// Name is the step's model or built-in; Kind is "model" or "builtin".
	Name, Kind string
	// Version is the model version it runs (0 for a built-in).
	Version int64
	// Segment is the index of the execution that runs it.
	Segment int
	// Placement is "device", "host" or "device+host".
	Placement string
	// Fused says the step shares its segment's executables with other
	// steps: no host round trip between them.
	Fused bool
	// InputMap and OutputMap are the step's wiring (step name -> pipeline
	// tensor), as configured.
	InputMap, OutputMap map[string]string
}

// PipelineSegmentInfo describes one execution of a pipeline.
type PipelineSegmentInfo struct {
	// Steps are the names of the steps it runs.
	Steps []string
	// Fused says it stitches several steps into one graph: one executable
	// per bucket for all of them.
	Fused bool
	// Whole says it runs one step's model as it is (its sizes are decided
	// at run time, or the config keeps it separate).
	Whole bool
	// Inputs and Outputs are the pipeline tensors it reads and makes.
	Inputs, Outputs []string
	// DeviceInputs are the pipeline tensors it takes from the segment
	// before it as device buffers, without a copy through the host, when
	// its bucket's input shape is the buffer's (else through the host:
	// xserve_pipeline_handoffs_total counts both paths).
	DeviceInputs []string
	// Buckets are its symbols' buckets (nil for a segment that runs on the
	// host only).
	Buckets map[string][]int64
}

// loadPipeline builds the pipeline's plan from its steps' model files and
// loads every segment.
func (v *version) loadPipeline(ctx context.Context, start time.Time) error {
	pc := v.cfg.Pipeline
	dir := v.entry.Path
	if v.entry.Format == modelrepo.FormatEnsemble && filepath.Base(dir) == strconv.FormatInt(v.num, 10) {
		dir = filepath.Dir(dir)
	}
	cfgFile := modelrepo.ConfigPath(dir)
	graphs := make([]*fxgraph.Graph, len(pc.Steps))
	paths := make([]string, len(pc.Steps))
	k := 0
	for i, s := range pc.Steps {
		if s.Model == "" {
			continue
		}
		if k >= len(v.entry.Steps) {
			return fmt.Errorf("serving: %s: step %s has no model version in the repository", v, s.Key)
		}
		ve := v.entry.Steps[k]
		k++
		g, err := v.m.engine.Import(ve.Path)
		if err != nil {
			return fmt.Errorf("serving: %s: %s (model %s version %d): %w", v, s.Key, s.Model, ve.Version, err)
		}
		graphs[i], paths[i] = g, ve.Path
	}
	plan, err := pipeline.Build(pipeline.Options{
		Config: v.cfg, ConfigFile: cfgFile, Graphs: graphs, Paths: paths,
		ReadFile: func(name string) ([]byte, error) { return v.m.repo.ReadModelFile(v.name, name) },
	})
	if err != nil {
		return err
	}
	p := &pipe{plan: plan}
	v.pipe = p
	for _, t := range plan.Inputs {
		p.inputs = append(p.inputs, graphSpec(t.Name, t.Meta))
	}
	for _, t := range plan.Outputs {
		p.outputs = append(p.outputs, graphSpec(t.Name, t.Meta))
	}
	for i, seg := range plan.Segments {
		sv, err := v.loadSegment(ctx, i, seg, cfgFile)
		if sv != nil {
			p.segs = append(p.segs, sv)
		}
		if err != nil {
			return fmt.Errorf("segment %d (%s): %w", i, v.segmentSteps(i), err)
		}
	}
	p.planHandoffs()
	p.info = v.pipelineInfo()
	v.m.metrics.pipelineExecutions.With(v.name, v.label).Set(float64(v.executions()))
	v.log().Info("pipeline loaded", "segments", len(plan.Segments), "plan", plan.Describe(), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// segmentSteps names the steps of segment i.
func (v *version) segmentSteps(i int) string {
	var out string
	for j, k := range v.pipe.plan.Segments[i].Steps {
		if j > 0 {
			out += ", "
		}
		out += v.pipe.plan.Steps[k].Name
	}
	return out
}

// loadSegment loads segment i as a version inside v.
func (v *version) loadSegment(ctx context.Context, i int, seg *pipeline.Segment, cfgFile string) (*version, error) {
	cfg := *v.cfg
	cfg.Pipeline, cfg.Inputs, cfg.Outputs = nil, nil, nil
	ve := modelrepo.VersionEntry{Version: v.num, Path: seg.Path}
	sv := newVersion(v.m, v.name, ve, &cfg)
	if len(v.pipe.plan.Segments) > 1 {
		sv.stage = "s" + strconv.Itoa(i) + ":"
	}
	sv.segment = i
	var model *engine.Model
	var err error
	if seg.Path != "" {
		model, err = v.m.engine.Load(seg.Path, engine.LoadOptions{Logger: sv.log()})
	} else {
		model, err = v.m.engine.NewModel(seg.Graph, engine.LoadOptions{Logger: sv.log()})
	}
	if err != nil {
		return nil, err
	}
	return sv, sv.serve(ctx, model, cfgFile, time.Now())
}

// pipelineInfo describes v's pipeline for Metadata.
func (v *version) pipelineInfo() *PipelineInfo {
	p := v.pipe
	info := &PipelineInfo{}
	steps := v.cfg.Pipeline.Steps
	k := 0
	for i, st := range p.plan.Steps {
		s := PipelineStepInfo{Name: st.Name, Kind: st.Kind, Segment: st.Segment, Placement: st.Placement,
			Fused: p.plan.Segments[st.Segment].Fused(), InputMap: maps.Clone(steps[i].InputMap), OutputMap: maps.Clone(steps[i].OutputMap)}
		if steps[i].Model != "" && k < len(v.entry.Steps) {
			s.Version = v.entry.Steps[k].Version
			k++
		}
		info.Steps = append(info.Steps, s)
	}
	for i, seg := range p.plan.Segments {
		si := PipelineSegmentInfo{Fused: seg.Fused(), Whole: seg.Path != "", Inputs: slices.Clone(seg.Inputs)}
		for _, o := range seg.Outputs {
			if o != "" {
				si.Outputs = append(si.Outputs, o)
			}
		}
		for _, k := range seg.Steps {
			si.Steps = append(si.Steps, p.plan.Steps[k].Name)
		}
		if i > 0 && i <= len(p.handoff) {
			si.DeviceInputs = slices.Sorted(maps.Keys(p.handoff[i-1]))
		}
		if sv := p.segs[i]; sv.plan != nil {
			si.Buckets = map[string][]int64{}
			for _, s := range sv.plan.Symbols {
				si.Buckets[s.Name] = slices.Clone(s.Buckets)
			}
		}
		info.Segments = append(info.Segments, si)
	}
	return info
}

// executions is how many executions of a program a request of v makes:
// 1 for a model or a pipeline whose steps all share one segment.
func (v *version) executions() int {
	if v.pipe == nil {
		return 1
	}
	n := 0
	for _, sv := range v.pipe.segs {
		if sv.plan != nil {
			n++
		}
	}
	return n
}

// inferPipeline runs req through v's segments.
func (v *version) inferPipeline(ctx context.Context, req *InferRequest) (*InferResponse, runTimes, error) {
	p := v.pipe
	var t runTimes
	env, err := p.requestInputs(v.name, req)
	if err != nil {
		return nil, t, err
	}
	want, err := p.wantedOutputs(v.name, req)
	if err != nil {
		return nil, t, err
	}
	resp := &InferResponse{ID: req.ID, ModelName: v.name, ModelVersion: v.num}
	dev := map[string]*onDevice{}
	defer closeDevice(dev)
	for i := range p.plan.Segments {
		r, rt, err := v.runSegment(ctx, i, req, env, dev)
		t.wait += rt.wait
		t.compute += rt.compute
		if err != nil {
			return nil, t, fmt.Errorf("pipeline %s, segment %d (%s): %w", v.name, i, v.segmentSteps(i), err)
		}
		if resp.Bucket != "" {
			resp.Bucket += " "
		}
		resp.Bucket += p.segs[i].stage + r.Bucket
		resp.QueueTime += r.QueueTime
		resp.ComputeTime += r.ComputeTime
		seg := p.plan.Segments[i]
		for _, o := range r.Outputs {
			if j := slices.Index(seg.OutputNames, o.Name); j >= 0 && seg.Outputs[j] != "" {
				env[seg.Outputs[j]] = o.Tensor
			}
		}
	}
	for _, o := range p.outputs {
		if want == nil || want[o.Name] {
			resp.Outputs = append(resp.Outputs, NamedTensor{Name: o.Name, Tensor: env[o.Name]})
		}
	}
	return resp, t, nil
}

// requestInputs checks req's inputs against the pipeline's signature and
// returns them by name.
func (p *pipe) requestInputs(model string, req *InferRequest) (map[string]*tensor.Tensor, error) {
	env := map[string]*tensor.Tensor{}
	for _, name := range slices.Sorted(maps.Keys(req.Inputs)) {
		t := req.Inputs[name]
		if err := checkSpec(model, p.inputs, name, t.DType, t.Shape); err != nil {
			return nil, err
		}
		env[name] = t
	}
	for _, in := range p.inputs {
		if env[in.Name] == nil {
			return nil, fmt.Errorf("%w: missing input %q (%s%v)", ErrInvalidInput, in.Name, in.DType, in.Dims)
		}
	}
	return env, nil
}

// wantedOutputs returns the outputs req asks for (nil: all).
func (p *pipe) wantedOutputs(model string, req *InferRequest) (map[string]bool, error) {
	if req.Outputs == nil {
		return nil, nil
	}
	want := map[string]bool{}
	for _, name := range req.Outputs {
		if !slices.ContainsFunc(p.outputs, func(s TensorSpec) bool { return s.Name == name }) {
			return nil, fmt.Errorf("%w: model %s has no output %q (outputs: %s)", ErrInvalidInput, model, name, specNames(p.outputs))
		}
		want[name] = true
	}
	return want, nil
}

// freeSegments frees the segments of a pipeline version.
func (p *pipe) free() {
	if p == nil {
		return
	}
	for _, sv := range p.segs {
		sv.free()
	}
}

// pipelineMetadata fills md for a pipeline version: its signature, how
// its steps are served, and the buckets of its first segment with a
// device program (the one requests' sizes decide).
func (v *version) pipelineMetadata(md *Metadata) {
	p := v.pipe
	md.Platform = modelrepo.FormatEnsemble
	md.Inputs, md.Outputs = slices.Clone(p.inputs), slices.Clone(p.outputs)
	md.Pipeline = p.info
	for _, sv := range p.segs {
		if sv.plan == nil {
			continue
		}
		for _, s := range sv.plan.Symbols {
			md.Buckets[s.Name] = slices.Clone(s.Buckets)
			md.Symbols = append(md.Symbols, SymbolInfo{Name: s.Name, Role: s.Role(), ModelSymbols: slices.Clone(s.Model),
				Buckets: slices.Clone(s.Buckets), Min: s.Range.Min, Max: s.Range.Max, Pad: string(s.Pad), PadReason: s.PadReason})
		}
		return
	}
}

// firstDevice is what decides a request's buckets: v itself, or the first
// segment of a pipeline with a device program (nil when none has one).
func (v *version) firstDevice() *version {
	if v.pipe == nil {
		return v
	}
	for _, sv := range v.pipe.segs {
		if sv.plan != nil {
			return sv
		}
	}
	return nil
}

// deviceBytes is the device memory v takes: its weights on the device, or
// its model files' size while that is larger (before the first bucket
// uploads the weights); a pipeline's is its segments' (each with weights
// of its own), or its step models' files while larger.
func (v *version) deviceBytes() int64 {
	if v.pipe != nil {
		var n int64
		for _, sv := range v.pipe.segs {
			n += sv.deviceBytes()
		}
		return max(n, filesSize(v.entry))
	}
	if v.model == nil {
		return 0
	}
	return max(v.model.Weights().Bytes(), v.files.bytes()) // a segment has no encoder
}

// filesSize is the size of a version's model files: a pipeline's, its
// step models'.
func filesSize(ve modelrepo.VersionEntry) int64 {
	n := ve.Size
	for _, st := range ve.Steps {
		n += filesSize(st)
	}
	return n
}
