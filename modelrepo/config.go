package modelrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// File names of the repository layout.
const (
	// ConfigFile is the optional per-model config, beside the version
	// directories.
	ConfigFile = "config.yaml"
	// ModelFileONNX is an ONNX model inside a version directory.
	ModelFileONNX = "model.onnx"
	// ModelFilePT2 is a torch.export archive inside a version directory.
	ModelFilePT2 = "model.pt2"
)

// Model formats, as in Config.Platform and VersionEntry.Format.
const (
	// FormatONNX is an ONNX model (model.onnx).
	FormatONNX = "onnx"
	// FormatPT2 is a torch.export archive (model.pt2).
	FormatPT2 = "pt2"
)

// Defaults and limits of the config schema.
const (
	// DefaultMaxQueueDelay is BatchingConfig.MaxQueueDelay when
	// max_queue_delay is not given.
	DefaultMaxQueueDelay = 2 * time.Millisecond
	// MaxQueueDelayLimit is the largest accepted max_queue_delay.
	MaxQueueDelayLimit = 10 * time.Second
	// DefaultMaxQueueSize is BatchingConfig.MaxQueueSize when max_queue_size
	// is not given.
	DefaultMaxQueueSize = 1024
	// DefaultTimeout is BatchingConfig.Timeout when timeout is not given.
	DefaultTimeout = 30 * time.Second
	// MaxPriorityLevels is the largest accepted priority_levels.
	MaxPriorityLevels = 16
	// BatchSymbol is the dimension symbol whose bucket list bounds
	// BatchingConfig.MaxBatchSize.
	BatchSymbol = "batch"
	// DefaultExactExecutables is Config.ExactExecutables when
	// exact_executables is not given.
	DefaultExactExecutables = 32
	// MaxConfigSize is the largest config file ParseConfig accepts, in bytes.
	MaxConfigSize = 1 << 20
	// MaxConfigDepth is the deepest nesting of mappings and sequences a
	// config file may have (the schema needs four): the key paths of a
	// deeper file would cost memory quadratic in its depth.
	MaxConfigDepth = 16
)

// Warmup says when a model's per-bucket executables are compiled.
type Warmup string

const (
	// WarmupLazy compiles a bucket's executable on the first request that
	// needs it (the default).
	WarmupLazy Warmup = "lazy"
	// WarmupEager compiles every bucket's executable when the model is
	// loaded.
	WarmupEager Warmup = "eager"
)

// Config is a model's config.yaml. A field's zero value means "not given":
// SetDefaults fills it, except for BatchingConfig.Enabled and
// BatchingConfig.MaxQueueDelay, whose zero values are meaningful settings
// (DefaultConfig and ParseConfig start them at true and 2ms).
type Config struct {
	// Name is the model's name; ParseConfig requires it to equal the model's
	// directory name when config.yaml gives it, and fills it from the
	// directory otherwise.
	Name string
	// Platform is FormatONNX, FormatPT2 or "" (the format of each version is
	// then taken from its model file; see VersionEntry.Format).
	Platform string
	// Inputs overrides or completes what the model file says about its
	// inputs; nil means "as the model file says". The server merges them.
	Inputs []InputConfig
	// Outputs is as Inputs, for the model's outputs.
	Outputs []OutputConfig
	// Buckets gives each dimension symbol its ascending list of positive
	// bucket sizes, e.g. {"batch": [1 2 4 8], "sequence": [64 128]}.
	Buckets map[string][]int64
	// VersionPolicy selects the versions to serve (default: the latest one).
	VersionPolicy VersionPolicy
	// Warmup says when bucket executables are compiled (default WarmupLazy).
	Warmup Warmup
	// PJRTPlugin is the plugin path or platform name for this model; "" means
	// the server's default.
	PJRTPlugin string
	// Batching configures dynamic batching of the model's requests.
	Batching BatchingConfig
	// Pad forces a symbol's padding policy: true pads requests up to the
	// symbol's buckets without the load-time probe, false serves each
	// distinct size with its own executable. A symbol not named here is
	// probed at load: it is padded only if padding leaves every output's
	// valid region unchanged.
	Pad map[string]bool
	// BatchSymbol names the symbol that is the batch dim; "" means the symbol
	// that is the leading dim of every input, whatever its name.
	BatchSymbol string
	// ExactExecutables bounds the executables a version keeps for sizes
	// served exactly (least recently used first out); default 32.
	ExactExecutables int
	// Generate, when set, makes the model generative: the server runs its
	// generation loop (config.yaml's generate: section; see GenerateConfig).
	Generate *GenerateConfig
	// Pipeline, when set, makes the model a pipeline of other models and
	// built-in steps (config.yaml's pipeline:, or a Triton ensemble); its
	// versions hold no model file.
	Pipeline *PipelineConfig
	// Devices places the model on these devices of the server's PJRT
	// client, by index: its weights uploaded to each, one executable per
	// bucket and device, each execution on the least loaded device
	// (Triton's instance_group). nil means the server's default (its
	// --devices, else device 0).
	Devices []int
	// Sequence configures the sequences of a stateful model.
	Sequence SequenceConfig
}

// SequenceConfig is config.yaml's sequence: section, for a model that
// carries state from one request of a sequence to the next. Zero values
// mean "as the server decides": the state recognised from the model, the
// server's idle limit and sequence bound.
type SequenceConfig struct {
	// States names each state: the input a sequence's previous step feeds
	// from the output, and its initial value.
	States []StateConfig
	// MaxSequenceIdle is how long a sequence may go without a request
	// before it expires (max_sequence_idle).
	MaxSequenceIdle time.Duration
	// MaxSequences bounds the active sequences of a version.
	MaxSequences int
}

// StateConfig is one state of SequenceConfig: input <- output. Initial
// is the value of every element of the state at a sequence's start
// (initial; default 0).
type StateConfig struct {
	Input, Output string
	Initial       float64
}

// AnyDim, in InputConfig.Dims and OutputConfig.Dims, is a dim the config
// leaves as the model has it (Triton's -1 in config.pbtxt).
var AnyDim = fxgraph.D(-1)

// InputConfig describes one model input.
type InputConfig struct {
	// Name is the input's name (required).
	Name string
	// DType is the element type; tensor.Invalid means "as the model file
	// says".
	DType tensor.DType
	// Dims is the shape, each dim a size (>= 0) or a symbol; nil means "as
	// the model file says", while an empty non-nil Shape is a scalar.
	Dims fxgraph.Shape
	// PadValue is the value used to pad this input up to its bucket's shape.
	PadValue float64
}

// OutputConfig describes one model output.
type OutputConfig struct {
	// Name is the output's name (required).
	Name string
	// DType is the element type; tensor.Invalid means "as the model file
	// says".
	DType tensor.DType
	// Dims is the shape as in InputConfig.Dims.
	Dims fxgraph.Shape
}

// VersionPolicy selects which of a model's versions are served. Exactly one
// mode is set; the zero value means the default, the latest version.
type VersionPolicy struct {
	// Latest serves the Latest highest-numbered versions (>= 1).
	Latest int
	// Specific serves exactly these versions (ascending, no duplicates).
	Specific []int64
	// All serves every version.
	All bool
}

// Select returns the versions of have (any order, no duplicates) that the
// policy serves, in ascending order.
func (p VersionPolicy) Select(have []int64) []int64 {
	vs := slices.Clone(have)
	slices.Sort(vs)
	switch {
	case p.All:
		return vs
	case p.Specific != nil:
		var out []int64
		for _, v := range vs {
			if slices.Contains(p.Specific, v) {
				out = append(out, v)
			}
		}
		return out
	default:
		n := p.Latest
		if n <= 0 {
			n = 1
		}
		if n > len(vs) {
			n = len(vs)
		}
		return vs[len(vs)-n:]
	}
}

// String reads "latest: 1", "specific: [1 3]" or "all: true".
func (p VersionPolicy) String() string {
	switch {
	case p.All:
		return "all: true"
	case p.Specific != nil:
		return fmt.Sprintf("specific: %v", p.Specific)
	case p.Latest == 0:
		return "latest: 1"
	default:
		return fmt.Sprintf("latest: %d", p.Latest)
	}
}

// BatchingConfig configures dynamic batching for one model.
type BatchingConfig struct {
	// Enabled turns dynamic batching on (default true); when false each
	// request runs alone.
	Enabled bool
	// MaxBatchSize is the most rows a formed batch may hold; default the
	// largest "batch" bucket. It must not exceed the largest "batch" bucket
	// when there is one. 0 (only when config.yaml gives no "batch" buckets)
	// means the largest of the buckets the server picks for the batch dim.
	MaxBatchSize int
	// MaxQueueDelay is how long the first request of a batch may wait for
	// others, in [0, 10s]; default 2ms, and 0 dispatches at once.
	MaxQueueDelay time.Duration
	// MaxQueueSize is the most requests waiting in one queue (>= 1); default
	// 1024. A model has one queue per version and bucket of its non-batch
	// dims, so a model with one such bucket queues at most MaxQueueSize.
	MaxQueueSize int
	// Timeout is the per-request deadline (> 0); default 30s.
	Timeout time.Duration
	// PriorityLevels is the number of priority levels, 1..16; default 1.
	PriorityLevels int
}

// DefaultConfig returns the config of a model without config.yaml: every
// field at its default, Platform inferred from the model files.
func DefaultConfig(name string) *Config {
	c := baseConfig(name)
	c.SetDefaults()
	return c
}

// baseConfig is a Config with the defaults whose zero values are meaningful.
func baseConfig(name string) *Config {
	return &Config{
		Name:     name,
		Batching: BatchingConfig{Enabled: true, MaxQueueDelay: DefaultMaxQueueDelay},
	}
}

// SetDefaults fills the fields left at their zero value: Warmup (lazy),
// VersionPolicy (latest: 1), and Batching's MaxBatchSize (the largest "batch"
// bucket; left 0 without one), MaxQueueSize (1024), Timeout (30s) and
// PriorityLevels (1).
// Batching.Enabled and Batching.MaxQueueDelay are left alone because their
// zero values are valid settings; start from DefaultConfig to get their
// defaults. SetDefaults is idempotent.
func (c *Config) SetDefaults() {
	if c.Warmup == "" {
		c.Warmup = WarmupLazy
	}
	if c.ExactExecutables == 0 {
		c.ExactExecutables = DefaultExactExecutables
	}
	if !c.VersionPolicy.All && c.VersionPolicy.Specific == nil && c.VersionPolicy.Latest == 0 {
		c.VersionPolicy.Latest = 1
	}
	b := &c.Batching
	if sizes := c.Buckets[BatchSymbol]; b.MaxBatchSize == 0 && len(sizes) > 0 {
		b.MaxBatchSize = int(slices.Max(sizes))
	}
	if b.MaxQueueSize == 0 {
		b.MaxQueueSize = DefaultMaxQueueSize
	}
	if b.Timeout == 0 {
		b.Timeout = DefaultTimeout
	}
	if b.PriorityLevels == 0 {
		b.PriorityLevels = 1
	}
	if c.Generate != nil {
		c.Generate.setDefaults()
	}
}

// Validate checks the values of c (a Config built in memory, or merged by the
// server) and returns every problem as *ConfigError, joined. Zero values
// count as "not given" and pass.
func (c *Config) Validate() error {
	p := newProblems("", nil)
	c.validate(p)
	return p.err()
}

// LoadConfig reads and parses the config file at path (see ParseConfig).
func LoadConfig(path string) (*Config, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data)
}

// readConfig reads a config file, at most MaxConfigSize+1 bytes of it (the
// parser refuses more).
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("modelrepo: read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("modelrepo: read config: %w", err)
	}
	return data, nil
}

// ParseConfig parses the config.yaml data read from path, validates it and
// fills the defaults. path names the file in errors, and the directory that
// holds it is the model's name: a name key must equal it, and Name is set
// from it when the key is absent (a path without a directory, or whose
// directory is not a valid model name, skips both).
// Empty data is a valid config with every default.
//
// The error, when not nil, joins one *ConfigError per problem (all matching
// ErrConfig), each naming the file, the key path and the line.
func ParseConfig(path string, data []byte) (*Config, error) {
	dirName := dirName(path)
	if len(data) > MaxConfigSize {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("file is larger than %d bytes", MaxConfigSize)}
	}

	// Pass 1: the node tree, for syntax errors, key paths and lines.
	doc, err := parseDocument(path, data)
	if err != nil {
		return nil, err
	}
	idx := indexNodes(doc)
	p := newProblems(path, idx)

	// Pass 2: the typed decode, strict about unknown keys.
	var raw rawConfig
	if doc.Kind != 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
			var te *yaml.TypeError
			if !errors.As(err, &te) {
				return nil, syntaxError(path, err)
			}
			for _, msg := range te.Errors {
				p.addYAML(msg)
			}
		}
	}

	c := raw.convert(p, dirName)
	c.SetDefaults()
	c.validate(p)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// parseDocument parses data, the config file path, into its one YAML
// document, within MaxConfigSize and MaxConfigDepth.
func parseDocument(path string, data []byte) (*yaml.Node, error) {
	if len(data) > MaxConfigSize {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("file is larger than %d bytes", MaxConfigSize)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, syntaxError(path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &ConfigError{File: path, Line: extra.Line, Reason: "holds more than one YAML document"}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(path, err)
	}
	if depth := yamlDepth(&doc); depth > MaxConfigDepth {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("nested %d levels deep, more than the limit of %d (MaxConfigDepth)", depth, MaxConfigDepth)}
	}
	return &doc, nil
}

// syntaxError turns a YAML parser error ("yaml: line 3: did not find ...")
// into a *ConfigError.
func syntaxError(path string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return &ConfigError{File: path, Line: line, Reason: "invalid YAML: " + msg}
}

// The raw types mirror config.yaml for the strict decode; pointers tell a
// key that is absent from one given a zero value.
type rawConfig struct {
	Name          string             `yaml:"name"`
	Platform      string             `yaml:"platform"`
	Inputs        []rawInput         `yaml:"inputs"`
	Outputs       []rawOutput        `yaml:"outputs"`
	Buckets       map[string][]int64 `yaml:"buckets"`
	VersionPolicy *rawVersionPolicy  `yaml:"version_policy"`
	Warmup        string             `yaml:"warmup"`
	PJRTPlugin    string             `yaml:"pjrt_plugin"`
	Batching      rawBatching        `yaml:"batching"`
	Pad           map[string]bool    `yaml:"pad"`
	BatchSymbol   string             `yaml:"batch_symbol"`
	ExactExecs    *int               `yaml:"exact_executables"`
	Generate      *rawGenerate       `yaml:"generate"`
	Pipeline      *rawPipeline       `yaml:"pipeline"`
	Devices       []int              `yaml:"devices"`
	Sequence      *rawSequence       `yaml:"sequence"`
}

type rawSequence struct {
	State           []rawState `yaml:"state"`
	MaxSequenceIdle *string    `yaml:"max_sequence_idle"`
	MaxSequences    *int       `yaml:"max_sequences"`
}

type rawState struct {
	Input   string  `yaml:"input"`
	Output  string  `yaml:"output"`
	Initial float64 `yaml:"initial"`
}

// convert reads the sequence section into c (nothing when rs is nil: no
// section).
func (rs *rawSequence) convert(p *problems, c *SequenceConfig) {
	if rs == nil {
		return
	}
	for i, st := range rs.State {
		if st.Input == "" || st.Output == "" {
			p.add(fmt.Sprintf("sequence.state[%d]", i), "needs both input and output, got input %q output %q", st.Input, st.Output)
		}
		c.States = append(c.States, StateConfig{Input: st.Input, Output: st.Output, Initial: st.Initial})
	}
	if rs.MaxSequenceIdle != nil {
		c.MaxSequenceIdle = convertDuration(p, "sequence.max_sequence_idle", *rs.MaxSequenceIdle)
		if d, err := time.ParseDuration(strings.TrimSpace(*rs.MaxSequenceIdle)); err == nil && d <= 0 {
			p.add("sequence.max_sequence_idle", "must be > 0, got %q", *rs.MaxSequenceIdle)
		}
	}
	if rs.MaxSequences != nil {
		if *rs.MaxSequences < 1 {
			p.add("sequence.max_sequences", "must be >= 1, got %d", *rs.MaxSequences)
		}
		c.MaxSequences = *rs.MaxSequences
	}
}

type rawInput struct {
	Name     string      `yaml:"name"`
	DType    string      `yaml:"dtype"`
	Dims     []yaml.Node `yaml:"dims"`
	PadValue float64     `yaml:"pad_value"`
}

type rawOutput struct {
	Name  string      `yaml:"name"`
	DType string      `yaml:"dtype"`
	Dims  []yaml.Node `yaml:"dims"`
}

type rawVersionPolicy struct {
	Latest   *int    `yaml:"latest"`
	Specific []int64 `yaml:"specific"`
	All      *bool   `yaml:"all"`
}

type rawBatching struct {
	Enabled        *bool   `yaml:"enabled"`
	MaxBatchSize   *int    `yaml:"max_batch_size"`
	MaxQueueDelay  *string `yaml:"max_queue_delay"`
	MaxQueueSize   *int    `yaml:"max_queue_size"`
	Timeout        *string `yaml:"timeout"`
	PriorityLevels *int    `yaml:"priority_levels"`
}

// convert builds a Config from raw, reporting the problems only the raw form
// shows: names, dtypes, dims and durations that don't parse, explicit values
// that would otherwise read as "not given", and the version policy's modes.
func (raw *rawConfig) convert(p *problems, dirName string) *Config {
	c := baseConfig(dirName)
	if raw.Name != "" {
		if dirName != "" && raw.Name != dirName {
			p.add("name", "%q does not match the model's directory name %q", raw.Name, dirName)
		}
		c.Name = raw.Name
	}
	c.Platform = raw.Platform
	c.Warmup = Warmup(raw.Warmup)
	c.PJRTPlugin = raw.PJRTPlugin
	c.BatchSymbol = raw.BatchSymbol
	c.Devices = slices.Clone(raw.Devices)
	if raw.Pad != nil {
		c.Pad = maps.Clone(raw.Pad)
	}
	if raw.ExactExecs != nil {
		if *raw.ExactExecs < 1 {
			p.add("exact_executables", "must be >= 1, got %d", *raw.ExactExecs)
		}
		c.ExactExecutables = *raw.ExactExecs
	}
	if raw.Generate != nil {
		c.Generate = raw.Generate.convert(p)
	}
	raw.Sequence.convert(p, &c.Sequence)
	if raw.Buckets != nil {
		c.Buckets = make(map[string][]int64, len(raw.Buckets))
		for k, v := range raw.Buckets {
			c.Buckets[k] = slices.Clone(v)
		}
	}
	c.Pipeline = raw.Pipeline.convert()
	raw.convertTensors(p, c)
	if vp := raw.VersionPolicy; vp != nil {
		vp.convert(p, &c.VersionPolicy)
	}
	raw.Batching.convert(p, &c.Batching)
	return c
}

// convertTensors converts inputs: and outputs:.
func (raw *rawConfig) convertTensors(p *problems, c *Config) {
	strs := raw.Pipeline != nil // a pipeline's tensors may be strings (BYTES)
	for i, in := range raw.Inputs {
		key := fmt.Sprintf("inputs[%d]", i)
		c.Inputs = append(c.Inputs, InputConfig{
			Name:     in.Name,
			DType:    convertDType(p, key, in.DType, strs),
			Dims:     convertDims(p, key, in.Dims),
			PadValue: in.PadValue,
		})
	}
	for i, out := range raw.Outputs {
		key := fmt.Sprintf("outputs[%d]", i)
		c.Outputs = append(c.Outputs, OutputConfig{
			Name:  out.Name,
			DType: convertDType(p, key, out.DType, strs),
			Dims:  convertDims(p, key, out.Dims),
		})
	}
}

// convert converts version_policy:, which must name exactly one mode.
func (vp *rawVersionPolicy) convert(p *problems, out *VersionPolicy) {
	var modes []string
	if vp.Latest != nil {
		modes = append(modes, "latest")
		if *vp.Latest < 1 {
			p.add("version_policy.latest", "must be >= 1, got %d", *vp.Latest)
		}
		out.Latest = *vp.Latest
	}
	if vp.Specific != nil {
		modes = append(modes, "specific")
		out.Specific = slices.Clone(vp.Specific)
	}
	if vp.All != nil {
		modes = append(modes, "all")
		if !*vp.All {
			p.add("version_policy.all", "must be true when given (omit version_policy for the default latest: 1)")
		}
		out.All = *vp.All
	}
	switch {
	case len(modes) == 0:
		p.add("version_policy", "want exactly one of latest: N, specific: [versions] or all: true, got none")
	case len(modes) > 1:
		p.add("version_policy", "want exactly one of latest, specific or all, got %s", strings.Join(modes, " and "))
	}
}

// convert converts batching:.
func (rb rawBatching) convert(p *problems, b *BatchingConfig) {
	if rb.Enabled != nil {
		b.Enabled = *rb.Enabled
	}
	if rb.MaxBatchSize != nil {
		if *rb.MaxBatchSize < 1 {
			p.add("batching.max_batch_size", "must be >= 1, got %d", *rb.MaxBatchSize)
		}
		b.MaxBatchSize = *rb.MaxBatchSize
	}
	if rb.MaxQueueDelay != nil {
		b.MaxQueueDelay = convertDuration(p, "batching.max_queue_delay", *rb.MaxQueueDelay)
	}
	if rb.MaxQueueSize != nil {
		if *rb.MaxQueueSize < 1 {
			p.add("batching.max_queue_size", "must be >= 1, got %d", *rb.MaxQueueSize)
		}
		b.MaxQueueSize = *rb.MaxQueueSize
	}
	if rb.Timeout != nil {
		b.Timeout = convertDuration(p, "batching.timeout", *rb.Timeout)
		if b.Timeout == 0 {
			p.add("batching.timeout", "must be > 0, got %q", *rb.Timeout)
		}
	}
	if rb.PriorityLevels != nil {
		if n := *rb.PriorityLevels; n < 1 || n > MaxPriorityLevels {
			p.add("batching.priority_levels", "must be in 1..%d, got %d", MaxPriorityLevels, n)
		}
		b.PriorityLevels = *rb.PriorityLevels
	}
}

// convertDType parses a dtype; strings (string or bytes) only where strs
// allows them (a pipeline's tensors).
func convertDType(p *problems, key, s string, strs bool) tensor.DType {
	if s == "" {
		return tensor.Invalid
	}
	dt, err := tensor.ParseDType(s)
	if err != nil || (dt == tensor.String && !strs) {
		want := "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64, complex64, complex128"
		if strs {
			want += ", string"
		}
		p.add(key+".dtype", "unknown dtype %q (want one of %s)", s, want)
		return tensor.Invalid
	}
	return dt
}

func convertDims(p *problems, key string, nodes []yaml.Node) fxgraph.Shape {
	if nodes == nil {
		return nil
	}
	shape := make(fxgraph.Shape, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		dkey := fmt.Sprintf("%s.dims[%d]", key, i)
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
			var size int64
			if err := n.Decode(&size); err != nil || size < 0 {
				p.add(dkey, "want a size >= 0 or a symbol name, got %s (use a symbol such as batch for a dynamic dimension)", n.Value)
				continue
			}
			shape = append(shape, fxgraph.D(size))
			continue
		}
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && isIdent(n.Value) {
			shape = append(shape, fxgraph.S(n.Value))
			continue
		}
		p.add(dkey, "want a size >= 0 or a symbol name (a letter or _ then letters, digits or _), got %s", describeNode(n))
	}
	return shape
}

func convertDuration(p *problems, key, s string) time.Duration {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		p.add(key, "invalid duration %q (want a Go duration such as 2ms, 500us or 30s)", s)
		return 0
	}
	return d
}

// validate reports the impossible values of c. It runs on a Config whose
// defaults may or may not be filled: zero values pass.
// validatePlatform checks the platform, and the pipeline of a pipeline.
func (c *Config) validatePlatform(p *problems) {
	if c.Generate != nil && c.Pipeline != nil {
		p.add("generate", "a model is generative (generate:) or a pipeline of other models (pipeline:), not both: serve the generative model as a model of its own")
	}
	switch c.Platform {
	case "", FormatONNX, FormatPT2:
	case FormatEnsemble:
		if c.Pipeline == nil {
			p.add("platform", "%s needs a pipeline (config.yaml's pipeline:, config.pbtxt's ensemble_scheduling)", FormatEnsemble)
		}
	default:
		p.add("platform", "want onnx or pt2, got %q", c.Platform)
	}
	if c.Pipeline != nil {
		c.validatePipeline(p)
	}
}

func (c *Config) validate(p *problems) {
	if c.Name != "" {
		if err := ValidateName(c.Name); err != nil {
			p.add("name", "%s", strings.TrimPrefix(err.Error(), "modelrepo: "))
		}
	}
	c.validatePlatform(p)
	switch c.Warmup {
	case "", WarmupLazy, WarmupEager:
	default:
		p.add("warmup", "want eager or lazy, got %q", string(c.Warmup))
	}

	validateDevices(p, c.Devices)
	seen := map[string]int{}
	for i, in := range c.Inputs {
		validateTensor(p, "inputs", i, in.Name, in.Dims, seen)
	}
	seen = map[string]int{}
	for i, out := range c.Outputs {
		validateTensor(p, "outputs", i, out.Name, out.Dims, seen)
	}
	c.validateSymbols(p)
	c.VersionPolicy.validate(p)
	if c.Generate != nil {
		c.Generate.validate(p)
	}
	c.validateBatching(p)
}

// validateSymbols checks the symbols pad:, batch_symbol: and buckets: name,
// and the bucket sizes.
func (c *Config) validateSymbols(p *problems) {
	for _, s := range slices.Sorted(maps.Keys(c.Pad)) {
		if !isIdent(s) {
			p.add("pad."+s, "symbol %q is not an identifier (a letter or _ then letters, digits or _)", s)
		}
	}
	if c.BatchSymbol != "" && !isIdent(c.BatchSymbol) {
		p.add("batch_symbol", "%q is not an identifier (a letter or _ then letters, digits or _)", c.BatchSymbol)
	}
	for _, s := range slices.Sorted(maps.Keys(c.Buckets)) {
		key := "buckets." + s
		if !isIdent(s) {
			p.add(key, "bucket symbol %q is not an identifier (a letter or _ then letters, digits or _)", s)
		}
		sizes := c.Buckets[s]
		if len(sizes) == 0 {
			p.add(key, "needs at least one size")
			continue
		}
		for i, n := range sizes {
			if n < 1 || (i > 0 && n <= sizes[i-1]) {
				p.add(key, "sizes must be ascending and positive, got %v", sizes)
				break
			}
		}
	}
}

// validate checks version_policy: one mode, and its values.
func (vp VersionPolicy) validate(p *problems) {
	modes := 0
	if vp.Latest != 0 {
		modes++
	}
	if vp.Specific != nil {
		modes++
	}
	if vp.All {
		modes++
	}
	if modes > 1 {
		p.add("version_policy", "want exactly one of latest, specific or all, got %s", vp.modes())
	}
	if vp.Latest < 0 {
		p.add("version_policy.latest", "must be >= 1, got %d", vp.Latest)
	}
	if vp.Specific == nil {
		return
	}
	if len(vp.Specific) == 0 {
		p.add("version_policy.specific", "needs at least one version")
	}
	for i, v := range vp.Specific {
		if v < 1 {
			p.add("version_policy.specific", "versions must be positive, got %d", v)
			break
		}
		if slices.Contains(vp.Specific[:i], v) {
			p.add("version_policy.specific", "version %d is listed twice", v)
			break
		}
	}
}

// validateBatching checks batching:'s limits.
func (c *Config) validateBatching(p *problems) {
	b := c.Batching
	if b.MaxBatchSize < 0 {
		p.add("batching.max_batch_size", "must be >= 1, got %d", b.MaxBatchSize)
	} else if sizes := c.Buckets[BatchSymbol]; len(sizes) > 0 && b.MaxBatchSize > int(slices.Max(sizes)) {
		p.add("batching.max_batch_size", "%d is larger than the largest batch bucket %d (buckets.batch: %v)", b.MaxBatchSize, slices.Max(sizes), sizes)
	}
	if b.MaxQueueDelay < 0 || b.MaxQueueDelay > MaxQueueDelayLimit {
		p.add("batching.max_queue_delay", "must be >= 0 and <= %v, got %v", MaxQueueDelayLimit, b.MaxQueueDelay)
	}
	if b.MaxQueueSize < 0 {
		p.add("batching.max_queue_size", "must be >= 1, got %d", b.MaxQueueSize)
	}
	if b.Timeout < 0 {
		p.add("batching.timeout", "must be > 0, got %v", b.Timeout)
	}
	if b.PriorityLevels < 0 || b.PriorityLevels > MaxPriorityLevels {
		p.add("batching.priority_levels", "must be in 1..%d, got %d", MaxPriorityLevels, b.PriorityLevels)
	}
}

// modes lists the modes set in p, e.g. "latest and all".
func (p VersionPolicy) modes() string {
	var m []string
	if p.Latest != 0 {
		m = append(m, "latest")
	}
	if p.Specific != nil {
		m = append(m, "specific")
	}
	if p.All {
		m = append(m, "all")
	}
	return strings.Join(m, " and ")
}

// validateDevices checks the devices: indexes, each once.
func validateDevices(p *problems, devices []int) {
	for i, d := range devices {
		switch {
		case d < 0:
			p.add(fmt.Sprintf("devices[%d]", i), "want a device index >= 0, got %d", d)
		case slices.Contains(devices[:i], d):
			p.add(fmt.Sprintf("devices[%d]", i), "device %d is listed twice", d)
		}
	}
}

func validateTensor(p *problems, list string, i int, name string, dims fxgraph.Shape, seen map[string]int) {
	key := fmt.Sprintf("%s[%d]", list, i)
	if name == "" {
		p.add(key+".name", "required")
	} else if j, dup := seen[name]; dup {
		p.add(key+".name", "duplicate %s name %q (also %s[%d])", strings.TrimSuffix(list, "s"), name, list, j)
	} else {
		seen[name] = i
	}
	for j, d := range dims {
		if (d.Sym != "" && !isIdent(d.Sym)) || (d.Sym == "" && d.Size < 0 && d != AnyDim) {
			p.add(fmt.Sprintf("%s.dims[%d]", key, j), "want a size >= 0 or a symbol name, got %s", d)
		}
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// isIdent reports whether s is an identifier: a letter or _ then letters,
// digits or _.
func isIdent(s string) bool { return identRE.MatchString(s) }
