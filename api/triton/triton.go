package triton

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Backend is the name reported as every model's backend.
const Backend = "xserve"

// ensemble makes out an ensemble of the pipeline's steps (built-in steps
// named as models: Triton has none), with the segments it runs as in
// the parameter xserve.pipeline.segments.
func ensemble(out *pb.ModelConfig, pi *serving.PipelineInfo) {
	out.Backend = ""
	es := &pb.ModelEnsembling{}
	for _, st := range pi.Steps {
		step := &pb.ModelEnsembling_Step{ModelName: st.Name, ModelVersion: -1, InputMap: maps.Clone(st.InputMap), OutputMap: maps.Clone(st.OutputMap)}
		if st.Kind == "model" && st.Version > 0 {
			step.ModelVersion = st.Version
		}
		es.Step = append(es.Step, step)
	}
	out.SchedulingChoice = &pb.ModelConfig_EnsembleScheduling{EnsembleScheduling: es}
	out.Parameters["xserve.pipeline.segments"] = &pb.ModelParameter{StringValue: strconv.Itoa(len(pi.Segments))}
}

// DataType is Triton's enum value for dt (TYPE_INVALID when it has none).
func DataType(dt tensor.DType) pb.DataType {
	return pb.DataType(pb.DataType_value["TYPE_"+payload.OIPDatatype(dt)])
}

// Config is the Triton model configuration of c. With MaxBatchSize > 0 the
// leading batch dim is left out of every tensor's dims, as Triton states
// them; -1 stands for a dim of any size.
func Config(c *serving.ModelConfig) *pb.ModelConfig {
	out := &pb.ModelConfig{
		Name:         c.Name,
		Platform:     c.Platform,
		Backend:      Backend,
		MaxBatchSize: int32(c.MaxBatchSize),
		VersionPolicy: &pb.ModelVersionPolicy{PolicyChoice: &pb.ModelVersionPolicy_Specific_{
			Specific: &pb.ModelVersionPolicy_Specific{Versions: slices.Clone(c.Versions)}}},
		InstanceGroup: []*pb.ModelInstanceGroup{{Name: c.Name, Kind: pb.ModelInstanceGroup_KIND_CPU, Count: 1}},
		Parameters:    map[string]*pb.ModelParameter{},
	}
	if len(c.Versions) == 0 {
		out.VersionPolicy.GetSpecific().Versions = []int64{c.Version}
	}
	skip := 0
	if c.MaxBatchSize > 0 {
		skip = 1
	}
	dims := func(s serving.TensorSpec) []int64 {
		if len(s.Shape) < skip {
			return []int64{}
		}
		return slices.Clone(s.Shape[skip:])
	}
	for _, in := range c.Inputs {
		out.Input = append(out.Input, &pb.ModelInput{Name: in.Name, DataType: DataType(in.DType), Dims: dims(in)})
	}
	for _, o := range c.Outputs {
		out.Output = append(out.Output, &pb.ModelOutput{Name: o.Name, DataType: DataType(o.DType), Dims: dims(o)})
	}
	if c.DynamicBatching {
		b := c.Batching
		db := &pb.ModelDynamicBatching{
			MaxQueueDelayMicroseconds: uint64(b.MaxQueueDelay.Microseconds()),
			PriorityLevels:            uint64(b.PriorityLevels),
			DefaultQueuePolicy: &pb.ModelQueuePolicy{
				DefaultTimeoutMicroseconds: uint64(b.Timeout.Microseconds()),
				MaxQueueSize:               uint32(b.MaxQueueSize),
			},
		}
		for _, n := range c.Buckets[modelrepo.BatchSymbol] {
			if c.MaxBatchSize == 0 || n <= c.MaxBatchSize {
				db.PreferredBatchSize = append(db.PreferredBatchSize, int32(n))
			}
		}
		out.SchedulingChoice = &pb.ModelConfig_DynamicBatching{DynamicBatching: db}
	}
	if c.Pipeline != nil {
		ensemble(out, c.Pipeline)
	}
	syms := make([]string, 0, len(c.Buckets))
	for s := range c.Buckets {
		syms = append(syms, s)
	}
	sort.Strings(syms)
	for _, s := range syms {
		sizes := make([]string, len(c.Buckets[s]))
		for i, n := range c.Buckets[s] {
			sizes[i] = strconv.FormatInt(n, 10)
		}
		out.Parameters["xserve.buckets."+s] = &pb.ModelParameter{StringValue: strings.Join(sizes, ",")}
	}
	return out
}

// Statistics is the Triton statistics response of sts. xserve measures an
// execution as one phase (upload, execute, download): it is reported as
// compute_infer, with compute_input and compute_output counted alongside at
// zero time.
func Statistics(sts []serving.Statistics) *pb.ModelStatisticsResponse {
	out := &pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{}}
	dur := func(d serving.Duration) *pb.StatisticDuration {
		return &pb.StatisticDuration{Count: d.Count, Ns: uint64(d.Total.Nanoseconds())}
	}
	for _, st := range sts {
		ms := &pb.ModelStatistics{
			Name:           st.Name,
			Version:        strconv.FormatInt(st.Version, 10),
			InferenceCount: st.InferenceCount,
			ExecutionCount: st.ExecutionCount,
			InferenceStats: &pb.InferStatistics{
				Success:       dur(st.Success),
				Fail:          dur(st.Fail),
				Queue:         dur(st.Queue),
				ComputeInput:  &pb.StatisticDuration{Count: st.Compute.Count},
				ComputeInfer:  dur(st.Compute),
				ComputeOutput: &pb.StatisticDuration{Count: st.Compute.Count},
				CacheHit:      &pb.StatisticDuration{},
				CacheMiss:     &pb.StatisticDuration{},
			},
			BatchStats:  []*pb.InferBatchStatistics{},
			MemoryUsage: []*pb.MemoryUsage{},
		}
		if !st.LastInference.IsZero() {
			ms.LastInference = uint64(st.LastInference.UnixMilli())
		}
		for _, b := range st.Batches {
			ms.BatchStats = append(ms.BatchStats, &pb.InferBatchStatistics{
				BatchSize:     uint64(b.BatchSize),
				ComputeInput:  &pb.StatisticDuration{Count: b.Compute.Count},
				ComputeInfer:  dur(b.Compute),
				ComputeOutput: &pb.StatisticDuration{Count: b.Compute.Count},
			})
		}
		out.ModelStats = append(out.ModelStats, ms)
	}
	return out
}
