package modelrepo

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// ConfigFileTriton is Triton's model configuration, protobuf text of
// inference.ModelConfig (model_config.proto), read when a model directory
// has no config.yaml: a Triton repository is served as it is.
const ConfigFileTriton = "config.pbtxt"

// torchScriptRefused is the reason a config.pbtxt naming TorchScript (its
// platform or backend) is refused.
const torchScriptRefused = "TorchScript (model.pt) is not served: export the model with torch.export (model.pt2) or to ONNX (model.onnx)"

// ConfigPath returns the config file of the model directory dir: its
// config.yaml, else its config.pbtxt when it has one, else the config.yaml
// it would have. Messages about a model's config name it.
func ConfigPath(dir string) string {
	yaml := filepath.Join(dir, ConfigFile)
	if _, err := os.Lstat(yaml); err != nil {
		if pbtxt := filepath.Join(dir, ConfigFileTriton); fileExists(pbtxt) {
			return pbtxt
		}
	}
	return yaml
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// LoadTritonConfig reads and parses the config.pbtxt at path (see
// ParseTritonConfig).
func LoadTritonConfig(path string) (*Config, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	return ParseTritonConfig(path, data)
}

// ParseTritonConfig parses a Triton config.pbtxt read from path into a
// Config, as Triton reads it: max_batch_size > 0 adds a leading batch dim
// ("batch") to every input and output, whose buckets go up to it; dims of
// -1 are left as the model has them (AnyDim); dynamic_batching turns
// batching on with its queue delay, preferred sizes (batch buckets), queue
// size, timeout and priority levels; version_policy is the version policy;
// platform "ensemble" with ensemble_scheduling makes the model a pipeline.
// The fields that change nothing here (instance_group, optimization,
// parameters, model_warmup, backend names) are accepted; those xserve cannot
// honour (sequence_batching, reshape, shape tensors, other platforms) are
// errors. Every error is a *ConfigError naming the file and the key (and
// the line for text that does not parse).
func ParseTritonConfig(path string, data []byte) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("file is larger than %d bytes", MaxConfigSize)}
	}
	var mc pb.ModelConfig
	if err := prototext.Unmarshal(data, &mc); err != nil {
		return nil, pbtxtError(path, err)
	}
	p := newProblems(path, nil)
	c := baseConfig(dirName(path))
	if mc.Name != "" {
		if c.Name != "" && mc.Name != c.Name {
			p.add("name", "%q does not match the model's directory name %q", mc.Name, c.Name)
		}
		c.Name = mc.Name
	}
	tritonPlatform(p, &mc, c)
	tritonTensors(p, &mc, c)
	tritonBatching(p, &mc, c)
	tritonVersionPolicy(&mc, c)
	tritonUnsupported(p, &mc)
	if es := mc.GetEnsembleScheduling(); es != nil {
		c.Pipeline = tritonEnsemble(es)
		if mc.MaxBatchSize > 0 {
			// Triton batches an ensemble's requests in its composing
			// models; here the stitched steps batch, dispatching at once
			// when nothing runs (no added delay for a lone request).
			c.Batching.Enabled, c.Batching.MaxQueueDelay = true, 0
		}
	}
	c.SetDefaults()
	c.validate(p)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// dirName is the model directory's name of a config file's path, "" when
// it has none or it is not a valid model name.
func dirName(path string) string {
	if d := filepath.Dir(path); path != "" && d != "." && d != string(filepath.Separator) {
		if base := filepath.Base(d); ValidateName(base) == nil {
			return base
		}
	}
	return ""
}

var pbtxtRE = regexp.MustCompile(`^proto: \(line (\d+):(\d+)\): (.*)$`)

// pbtxtError turns prototext's "proto: (line 3:5): unknown field: foo" into
// a *ConfigError.
func pbtxtError(path string, err error) error {
	msg := strings.TrimSpace(err.Error())
	if m := pbtxtRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		reason := m[3]
		if f, ok := strings.CutPrefix(reason, "unknown field: "); ok {
			return &ConfigError{File: path, Key: f, Line: line, Reason: "unknown field of inference.ModelConfig (model_config.proto), column " + m[2]}
		}
		return &ConfigError{File: path, Line: line, Reason: "invalid protobuf text: " + reason + " (column " + m[2] + ")"}
	}
	return &ConfigError{File: path, Reason: "invalid protobuf text: " + strings.TrimPrefix(msg, "proto: ")}
}

// tritonPlatform maps platform and backend to Config.Platform.
func tritonPlatform(p *problems, mc *pb.ModelConfig, c *Config) {
	switch mc.Platform {
	case "":
	case "ensemble":
		c.Platform = FormatEnsemble
		if mc.GetEnsembleScheduling() == nil {
			p.add("ensemble_scheduling", "platform \"ensemble\" needs ensemble_scheduling with its steps")
		}
		return
	case "onnxruntime_onnx":
		c.Platform = FormatONNX
	case "pytorch_libtorch":
		p.add("platform", torchScriptRefused)
	default:
		p.add("platform", "%q is not served: xserve serves onnxruntime_onnx (model.onnx), torch.export archives (model.pt2) and ensemble", mc.Platform)
	}
	switch mc.Backend {
	case "", "xserve":
	case "onnxruntime":
		c.Platform = FormatONNX
	case "pytorch":
		p.add("backend", torchScriptRefused)
	default:
		p.add("backend", "%q is not served: xserve serves onnxruntime (model.onnx), torch.export archives (model.pt2) and ensembles", mc.Backend)
	}
	if mc.GetEnsembleScheduling() != nil {
		p.add("ensemble_scheduling", "is only for platform \"ensemble\", got platform %q", mc.Platform)
	}
	switch f := mc.DefaultModelFilename; f {
	case "", ModelFileONNX, ModelFilePT2:
	default:
		p.add("default_model_filename", "is %q: xserve reads %s or %s in each version directory", f, ModelFileONNX, ModelFilePT2)
	}
}

// tritonTensors converts input and output.
func tritonTensors(p *problems, mc *pb.ModelConfig, c *Config) {
	batched := mc.MaxBatchSize > 0
	strs := mc.Platform == "ensemble"
	for i, in := range mc.Input {
		key := fmt.Sprintf("input[%d]", i)
		c.Inputs = append(c.Inputs, InputConfig{Name: in.Name, DType: tritonDType(p, key, in.DataType, strs), Dims: tritonDims(p, key, in.Dims, batched)})
		switch {
		case in.Reshape != nil:
			p.add(key+".reshape", "is not supported: give the dims the model has")
		case in.IsShapeTensor:
			p.add(key+".is_shape_tensor", "is not supported")
		case in.AllowRaggedBatch:
			p.add(key+".allow_ragged_batch", "is not supported")
		case in.Optional:
			p.add(key+".optional", "is not supported: every input is required")
		}
	}
	for i, out := range mc.Output {
		key := fmt.Sprintf("output[%d]", i)
		c.Outputs = append(c.Outputs, OutputConfig{Name: out.Name, DType: tritonDType(p, key, out.DataType, strs), Dims: tritonDims(p, key, out.Dims, batched)})
		if out.Reshape != nil {
			p.add(key+".reshape", "is not supported: give the dims the model has")
		}
	}
}

// tritonDType maps data_type; TYPE_STRING only where strs allows it.
func tritonDType(p *problems, key string, dt pb.DataType, strs bool) tensor.DType {
	if dt == pb.DataType_TYPE_INVALID {
		p.add(key+".data_type", "is required")
		return tensor.Invalid
	}
	name := strings.TrimPrefix(dt.String(), "TYPE_")
	if dt == pb.DataType_TYPE_STRING {
		if !strs {
			p.add(key+".data_type", "TYPE_STRING: give the model's own dtype (strings are declared by the model file)")
			return tensor.Invalid
		}
		return tensor.String
	}
	out, err := tensor.ParseDType(name)
	if err != nil {
		p.add(key+".data_type", "%s is not served", dt)
		return tensor.Invalid
	}
	return out
}

// tritonDims maps dims: the batch dim first when the model batches, -1 as
// AnyDim.
func tritonDims(p *problems, key string, dims []int64, batched bool) fxgraph.Shape {
	var out fxgraph.Shape
	if batched {
		out = append(out, fxgraph.S(BatchSymbol))
	}
	for j, d := range dims {
		switch {
		case d == -1:
			out = append(out, AnyDim)
		case d < 0:
			p.add(fmt.Sprintf("%s.dims[%d]", key, j), "want a size >= 0 or -1, got %d", d)
		default:
			out = append(out, fxgraph.D(d))
		}
	}
	if out == nil {
		out = fxgraph.Shape{}
	}
	return out
}

// tritonBatching maps max_batch_size and dynamic_batching.
func tritonBatching(p *problems, mc *pb.ModelConfig, c *Config) {
	b := &c.Batching
	db := mc.GetDynamicBatching()
	b.Enabled = db != nil
	if mc.MaxBatchSize < 0 {
		p.add("max_batch_size", "must be >= 0, got %d", mc.MaxBatchSize)
		return
	}
	if mc.MaxBatchSize == 0 {
		if db != nil {
			p.add("dynamic_batching", "needs max_batch_size > 0")
		}
		b.Enabled = false
		return
	}
	n := int64(mc.MaxBatchSize)
	var sizes []int64
	if db != nil {
		for _, s := range db.PreferredBatchSize {
			sizes = append(sizes, int64(s))
		}
	}
	if len(sizes) == 0 {
		for s := int64(1); s < n; s *= 2 {
			sizes = append(sizes, s)
		}
	}
	slices.Sort(sizes)
	sizes = slices.Compact(append(sizes, n))
	for _, s := range sizes {
		if s < 1 || s > n {
			p.add("dynamic_batching.preferred_batch_size", "sizes must be in 1..max_batch_size (%d), got %v", n, db.PreferredBatchSize)
			break
		}
	}
	c.Buckets = map[string][]int64{BatchSymbol: sizes}
	b.MaxBatchSize = int(n)
	if db == nil {
		return
	}
	b.MaxQueueDelay = time.Duration(db.MaxQueueDelayMicroseconds) * time.Microsecond
	if db.PriorityLevels > 0 {
		b.PriorityLevels = int(db.PriorityLevels)
	}
	if q := db.DefaultQueuePolicy; q != nil {
		b.MaxQueueSize = int(q.MaxQueueSize)
		b.Timeout = time.Duration(q.DefaultTimeoutMicroseconds) * time.Microsecond
	}
}

// tritonVersionPolicy maps version_policy.
func tritonVersionPolicy(mc *pb.ModelConfig, c *Config) {
	vp := mc.GetVersionPolicy()
	switch {
	case vp.GetAll() != nil:
		c.VersionPolicy.All = true
	case vp.GetSpecific() != nil:
		c.VersionPolicy.Specific = slices.Clone(vp.GetSpecific().Versions)
		slices.Sort(c.VersionPolicy.Specific)
	case vp.GetLatest() != nil:
		c.VersionPolicy.Latest = int(vp.GetLatest().NumVersions)
	}
}

// tritonUnsupported reports the fields whose meaning xserve cannot honour.
func tritonUnsupported(p *problems, mc *pb.ModelConfig) {
	if mc.GetSequenceBatching() != nil {
		p.add("sequence_batching", "is not supported: xserve serves stateless models")
	}
	if mc.BatchInput != nil || mc.BatchOutput != nil {
		p.add("batch_input", "batch_input and batch_output are not supported")
	}
}

// tritonEnsemble maps ensemble_scheduling's steps.
func tritonEnsemble(es *pb.ModelEnsembling) *PipelineConfig {
	pc := &PipelineConfig{}
	for i, s := range es.Step {
		v := s.ModelVersion
		if v < 0 {
			v = 0 // -1: the latest
		}
		pc.Steps = append(pc.Steps, PipelineStep{
			Model: s.ModelName, Version: v,
			InputMap: maps.Clone(s.InputMap), OutputMap: maps.Clone(s.OutputMap),
			Key: fmt.Sprintf("ensemble_scheduling.step[%d]", i),
		})
	}
	return pc
}
