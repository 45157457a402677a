package httpapi

import (
	"strconv"

	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/serving"
)

// oipTensorMeta is a tensor of model metadata.
type oipTensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// oipModelMeta is the model metadata response.
type oipModelMeta struct {
	Name     string          `json:"name"`
	Versions []string        `json:"versions"`
	Platform string          `json:"platform"`
	Inputs   []oipTensorMeta `json:"inputs"`
	Outputs  []oipTensorMeta `json:"outputs"`
	// Symbols is xserve's extension: each dynamic dim's role, buckets and
	// pad policy.
	Symbols []oipSymbol `json:"symbols,omitempty"`
	// Pipeline is xserve's extension for a pipeline: its steps and the
	// executions they share (fused: stitched into one executable per
	// bucket).
	Pipeline *oipPipeline `json:"pipeline,omitempty"`
	// MemoryBytes is xserve's extension: the device memory the version
	// takes as the memory budget counts it (all its weights, an
	// encoder-decoder's encoder included, or its model files while larger).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// oipPipeline describes how a pipeline's steps are served.
type oipPipeline struct {
	Steps    []oipPipelineStep    `json:"steps"`
	Segments []oipPipelineSegment `json:"segments"`
}

type oipPipelineStep struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Version   int64  `json:"version,omitempty"`
	Segment   int    `json:"segment"`
	Placement string `json:"placement"`
	Fused     bool   `json:"fused"`
}

type oipPipelineSegment struct {
	Steps   []string `json:"steps"`
	Fused   bool     `json:"fused"`
	Whole   bool     `json:"whole,omitempty"`
	Inputs  []string `json:"inputs"`
	Outputs []string `json:"outputs"`
	// DeviceInputs are the tensors taken from the segment before on the
	// device.
	DeviceInputs []string           `json:"device_inputs,omitempty"`
	Buckets      map[string][]int64 `json:"buckets,omitempty"`
}

func pipelineMeta(p *serving.PipelineInfo) *oipPipeline {
	if p == nil {
		return nil
	}
	out := &oipPipeline{Steps: []oipPipelineStep{}, Segments: []oipPipelineSegment{}}
	for _, s := range p.Steps {
		out.Steps = append(out.Steps, oipPipelineStep{Name: s.Name, Kind: s.Kind, Version: s.Version, Segment: s.Segment, Placement: s.Placement, Fused: s.Fused})
	}
	for _, s := range p.Segments {
		out.Segments = append(out.Segments, oipPipelineSegment{Steps: s.Steps, Fused: s.Fused, Whole: s.Whole, Inputs: s.Inputs, Outputs: s.Outputs, DeviceInputs: s.DeviceInputs, Buckets: s.Buckets})
	}
	return out
}

// oipSymbol is one served symbol in model metadata.
type oipSymbol struct {
	Name         string   `json:"name"`
	Role         string   `json:"role"`
	ModelSymbols []string `json:"model_symbols"`
	Buckets      []int64  `json:"buckets"`
	Min          int64    `json:"min"`
	Max          int64    `json:"max"` // -1: unbounded
	Pad          string   `json:"pad"`
	PadReason    string   `json:"pad_reason"`
}

func modelMeta(m *serving.Metadata) oipModelMeta {
	out := oipModelMeta{Name: m.Name, Platform: m.Platform, Versions: []string{}, Inputs: []oipTensorMeta{}, Outputs: []oipTensorMeta{}, MemoryBytes: m.MemoryBytes}
	for _, v := range m.Versions {
		out.Versions = append(out.Versions, strconv.FormatInt(v, 10))
	}
	if len(out.Versions) == 0 && m.Version > 0 {
		out.Versions = append(out.Versions, strconv.FormatInt(m.Version, 10))
	}
	conv := func(specs []serving.TensorSpec) []oipTensorMeta {
		r := []oipTensorMeta{}
		for _, s := range specs {
			shape := s.Shape
			if shape == nil {
				shape = []int64{}
			}
			r = append(r, oipTensorMeta{Name: s.Name, Datatype: payload.OIPDatatype(s.DType), Shape: shape})
		}
		return r
	}
	out.Inputs, out.Outputs = conv(m.Inputs), conv(m.Outputs)
	out.Pipeline = pipelineMeta(m.Pipeline)
	for _, s := range m.Symbols {
		out.Symbols = append(out.Symbols, oipSymbol{Name: s.Name, Role: s.Role, ModelSymbols: s.ModelSymbols, Buckets: s.Buckets,
			Min: s.Min, Max: s.Max, Pad: s.Pad, PadReason: s.PadReason})
	}
	return out
}

// oipIndexEntry is one entry of the repository index.
type oipIndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}
