package modelrepo

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

const testConfigPath = "models/tinycnn/config.yaml"

const fullConfig = `# a complete config
name: tinycnn
platform: onnx
inputs:
  - name: image
    dtype: float32
    dims: [batch, 3, 32, 32]
    pad_value: -1.5
  - name: mask
    dtype: bool
    dims: [batch, sequence]
outputs:
  - name: probs
    dtype: float32
    dims: [batch, 10]
buckets:
  batch: [1, 2, 4, 8, 16, 32]
  sequence: [64, 128, 256]
version_policy:
  latest: 2
warmup: eager
pjrt_plugin: cuda
batching:
  enabled: false
  max_batch_size: 16
  max_queue_delay: 500us
  max_queue_size: 64
  timeout: 2s
  priority_levels: 4
pad:
  sequence: false
batch_symbol: batch
exact_executables: 8
devices: [1, 0]
`

func TestParseConfigFull(t *testing.T) {
	got, err := ParseConfig(testConfigPath, []byte(fullConfig))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	want := &Config{
		Name:     "tinycnn",
		Platform: FormatONNX,
		Inputs: []InputConfig{
			{Name: "image", DType: tensor.Float32, Dims: fxgraph.Shape{fxgraph.S("batch"), fxgraph.D(3), fxgraph.D(32), fxgraph.D(32)}, PadValue: -1.5},
			{Name: "mask", DType: tensor.Bool, Dims: fxgraph.Shape{fxgraph.S("batch"), fxgraph.S("sequence")}},
		},
		Outputs: []OutputConfig{
			{Name: "probs", DType: tensor.Float32, Dims: fxgraph.Shape{fxgraph.S("batch"), fxgraph.D(10)}},
		},
		Buckets: map[string][]int64{
			"batch":    {1, 2, 4, 8, 16, 32},
			"sequence": {64, 128, 256},
		},
		VersionPolicy: VersionPolicy{Latest: 2},
		Warmup:        WarmupEager,
		PJRTPlugin:    "cuda",
		Batching: BatchingConfig{
			Enabled:        false,
			MaxBatchSize:   16,
			MaxQueueDelay:  500 * time.Microsecond,
			MaxQueueSize:   64,
			Timeout:        2 * time.Second,
			PriorityLevels: 4,
		},
		Pad:              map[string]bool{"sequence": false},
		BatchSymbol:      "batch",
		ExactExecutables: 8,
		Devices:          []int{1, 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConfig:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate of a parsed config: %v", err)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	def := func(mod func(c *Config)) *Config {
		c := DefaultConfig("tinycnn")
		mod(c)
		return c
	}
	tests := []struct {
		name string
		yaml string
		want *Config
	}{
		{"empty file", "", DefaultConfig("tinycnn")},
		{"only comments", "# nothing here\n", DefaultConfig("tinycnn")},
		{"null document", "~\n", DefaultConfig("tinycnn")},
		{"name given", "name: tinycnn\n", DefaultConfig("tinycnn")},
		{"max_batch_size from batch buckets", "buckets:\n  batch: [1, 4, 8]\n", def(func(c *Config) {
			c.Buckets = map[string][]int64{"batch": {1, 4, 8}}
			c.Batching.MaxBatchSize = 8
		})},
		{"max_batch_size 1 without batch buckets", "buckets:\n  sequence: [16, 32]\n", def(func(c *Config) {
			c.Buckets = map[string][]int64{"sequence": {16, 32}}
		})},
		{"explicit zero delay is kept", "batching:\n  max_queue_delay: 0\n", def(func(c *Config) {
			c.Batching.MaxQueueDelay = 0
		})},
		{"batching disabled", "batching:\n  enabled: false\n", def(func(c *Config) {
			c.Batching.Enabled = false
		})},
		{"empty sections", "batching:\nversion_policy:\ninputs:\n", DefaultConfig("tinycnn")},
		{"input without dtype or dims", "inputs:\n  - name: x\n", def(func(c *Config) {
			c.Inputs = []InputConfig{{Name: "x"}}
		})},
		{"scalar input", "inputs:\n  - name: x\n    dims: []\n", def(func(c *Config) {
			c.Inputs = []InputConfig{{Name: "x", Dims: fxgraph.Shape{}}}
		})},
		{"specific policy", "version_policy:\n  specific: [3, 1]\n", def(func(c *Config) {
			c.VersionPolicy = VersionPolicy{Specific: []int64{3, 1}}
		})},
		{"all policy", "version_policy:\n  all: true\n", def(func(c *Config) {
			c.VersionPolicy = VersionPolicy{All: true}
		})},
		{"dtype aliases", "outputs:\n  - name: y\n    dtype: FP16\n", def(func(c *Config) {
			c.Outputs = []OutputConfig{{Name: "y", DType: tensor.Float16}}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(testConfigPath, []byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseConfig:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig("m")
	want := &Config{
		Name:             "m",
		VersionPolicy:    VersionPolicy{Latest: 1},
		Warmup:           WarmupLazy,
		ExactExecutables: DefaultExactExecutables,
		Batching: BatchingConfig{
			Enabled:        true,
			MaxQueueDelay:  2 * time.Millisecond,
			MaxQueueSize:   1024,
			Timeout:        30 * time.Second,
			PriorityLevels: 1,
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("DefaultConfig:\n got %+v\nwant %+v", c, want)
	}
	c.SetDefaults()
	if !reflect.DeepEqual(c, want) {
		t.Errorf("SetDefaults is not idempotent: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(DefaultConfig): %v", err)
	}
}

func TestParseConfigNameFromPath(t *testing.T) {
	tests := []struct {
		path, yaml, want string
	}{
		{"models/resnet/config.yaml", "", "resnet"},
		{"config.yaml", "", ""},
		{"config.yaml", "name: anything\n", "anything"},
		{"", "name: x.y-z_1\n", "x.y-z_1"},
		{"/tmp/not a name/config.yaml", "", ""},
	}
	for _, tt := range tests {
		c, err := ParseConfig(tt.path, []byte(tt.yaml))
		if err != nil {
			t.Fatalf("ParseConfig(%q, %q): %v", tt.path, tt.yaml, err)
		}
		if c.Name != tt.want {
			t.Errorf("ParseConfig(%q, %q).Name = %q, want %q", tt.path, tt.yaml, c.Name, tt.want)
		}
	}
}

// TestParseConfigErrors checks that each impossible config is rejected with
// a *ConfigError naming the file, the key, the reason and the line.
func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		key  string // ConfigError.Key
		line int    // ConfigError.Line
		msg  string // substring of the message
	}{
		{"unknown top-level key", "name: tinycnn\ncolour: red\n", "colour", 2, "unknown key (want one of name, platform,"},
		{"negative device", "name: tinycnn\ndevices: [-1]\n", "devices[0]", 2, "want a device index >= 0, got -1"},
		{"device twice", "devices: [0, 1, 0]\n", "devices[2]", 1, "device 0 is listed twice"},
		{"device not a number", "devices: [gpu0]\n", "devices[0]", 1, `want an integer, got "gpu0"`},
		{"unknown nested key", "batching:\n  enabled: true\n  max_delay: 1ms\n", "batching.max_delay", 3, "unknown key (want one of enabled, max_batch_size"},
		{"unknown key in an input", "inputs:\n  - name: a\n  - name: b\n    shape: [1]\n", "inputs[1].shape", 4, "unknown key"},
		{"unknown key in version_policy", "version_policy:\n  newest: 1\n", "version_policy.newest", 2, "unknown key (want one of latest, specific, all)"},
		{"bad dtype", "inputs:\n  - name: a\n    dtype: float33\n", "inputs[0].dtype", 3, `unknown dtype "float33"`},
		{"string dtype", "outputs:\n  - name: a\n    dtype: string\n", "outputs[0].dtype", 3, `unknown dtype "string"`},
		{"descending buckets", "buckets:\n  batch: [4, 2]\n", "buckets.batch", 2, "sizes must be ascending and positive, got [4 2]"},
		{"repeated bucket", "buckets:\n  batch: [1, 2, 2]\n", "buckets.batch", 2, "sizes must be ascending and positive, got [1 2 2]"},
		{"zero bucket", "buckets:\n  sequence: [0, 8]\n", "buckets.sequence", 2, "sizes must be ascending and positive"},
		{"empty bucket list", "buckets:\n  batch: []\n", "buckets.batch", 2, "needs at least one size"},
		{"bucket symbol not an identifier", "buckets:\n  2x: [1]\n", "buckets.2x", 2, `bucket symbol "2x" is not an identifier`},
		{"bucket sizes not integers", "buckets:\n  batch: [1, two]\n", "buckets.batch[1]", 2, `want an integer, got "two"`},
		{"negative delay", "batching:\n  max_queue_delay: -1ms\n", "batching.max_queue_delay", 2, "must be >= 0 and <= 10s, got -1ms"},
		{"delay too long", "batching:\n  max_queue_delay: 11s\n", "batching.max_queue_delay", 2, "must be >= 0 and <= 10s, got 11s"},
		{"bad duration string", "batching:\n  timeout: 5 seconds\n", "batching.timeout", 2, `invalid duration "5 seconds"`},
		{"duration without unit", "batching:\n  max_queue_delay: 5\n", "batching.max_queue_delay", 2, `invalid duration "5"`},
		{"zero timeout", "batching:\n  timeout: 0s\n", "batching.timeout", 2, "must be > 0"},
		{"negative timeout", "batching:\n  timeout: -3s\n", "batching.timeout", 2, "must be > 0, got -3s"},
		{"two version policies", "version_policy:\n  latest: 1\n  all: true\n", "version_policy", 1, "want exactly one of latest, specific or all, got latest and all"},
		{"three version policies", "version_policy:\n  latest: 1\n  specific: [1]\n  all: true\n", "version_policy", 1, "got latest and specific and all"},
		{"empty version policy", "version_policy: {}\n", "version_policy", 1, "got none"},
		{"latest zero", "version_policy:\n  latest: 0\n", "version_policy.latest", 2, "must be >= 1, got 0"},
		{"all false", "version_policy:\n  all: false\n", "version_policy.all", 2, "must be true when given"},
		{"specific empty", "version_policy:\n  specific: []\n", "version_policy.specific", 2, "needs at least one version"},
		{"specific non-positive", "version_policy:\n  specific: [1, 0]\n", "version_policy.specific", 2, "versions must be positive, got 0"},
		{"specific duplicate", "version_policy:\n  specific: [2, 1, 2]\n", "version_policy.specific", 2, "version 2 is listed twice"},
		{"name mismatch", "name: resnet\n", "name", 1, `"resnet" does not match the model's directory name "tinycnn"`},
		{"max_batch_size above the largest batch bucket", "buckets:\n  batch: [1, 2, 4]\nbatching:\n  max_batch_size: 8\n", "batching.max_batch_size", 4, "8 is larger than the largest batch bucket 4"},
		{"max_batch_size zero", "batching:\n  max_batch_size: 0\n", "batching.max_batch_size", 2, "must be >= 1, got 0"},
		{"sequence state without output", "sequence:\n  state:\n    - input: h\n", "sequence.state[0]", 3, `needs both input and output, got input "h" output ""`},
		{"sequence idle zero", "sequence:\n  max_sequence_idle: 0s\n", "sequence.max_sequence_idle", 2, "must be > 0"},
		{"sequence idle bad", "sequence:\n  max_sequence_idle: soon\n", "sequence.max_sequence_idle", 2, `invalid duration "soon"`},
		{"max_sequences zero", "sequence:\n  max_sequences: 0\n", "sequence.max_sequences", 2, "must be >= 1, got 0"},
		{"unknown sequence key", "sequence:\n  initial: zeros\n", "sequence.initial", 2, "unknown key (want one of state, max_sequence_idle, max_sequences)"},
		{"max_batch_size not a number", "batching:\n  max_batch_size: lots\n", "batching.max_batch_size", 2, `want an integer, got "lots"`},
		{"exact_executables zero", "exact_executables: 0\n", "exact_executables", 1, "must be >= 1, got 0"},
		{"pad not a bool", "pad:\n  seq: sometimes\n", "pad.seq", 2, "want true or false"},
		{"pad symbol not an identifier", "pad:\n  2x: true\n", "pad.2x", 2, "is not an identifier"},
		{"batch_symbol not an identifier", "batch_symbol: \"a b\"\n", "batch_symbol", 1, "is not an identifier"},
		{"max_queue_size zero", "batching:\n  max_queue_size: 0\n", "batching.max_queue_size", 2, "must be >= 1, got 0"},
		{"priority levels too many", "batching:\n  priority_levels: 17\n", "batching.priority_levels", 2, "must be in 1..16, got 17"},
		{"priority levels zero", "batching:\n  priority_levels: 0\n", "batching.priority_levels", 2, "must be in 1..16, got 0"},
		{"enabled not a bool", "batching:\n  enabled: maybe\n", "batching.enabled", 2, `want true or false, got "maybe"`},
		{"batching not a mapping", "batching: [1]\n", "batching", 1, "want a mapping, got a list"},
		{"inputs not a list", "inputs: image\n", "inputs", 1, `want a list, got "image"`},
		{"platform", "platform: tensorflow\n", "platform", 1, `want onnx or pt2, got "tensorflow"`},
		{"warmup", "warmup: sometimes\n", "warmup", 1, `want eager or lazy, got "sometimes"`},
		{"dims entry not an identifier", "inputs:\n  - name: a\n    dims: [batch, 3x]\n", "inputs[0].dims[1]", 3, `got "3x"`},
		{"dims entry negative", "inputs:\n  - name: a\n    dims: [-1, 3]\n", "inputs[0].dims[0]", 3, "use a symbol such as batch"},
		{"dims entry a float", "outputs:\n  - name: a\n    dims:\n      - 2.5\n", "outputs[0].dims[0]", 4, "got 2.5"},
		{"dims entry a list", "inputs:\n  - name: a\n    dims: [[1]]\n", "inputs[0].dims[0]", 3, "got a list"},
		{"duplicate input names", "inputs:\n  - name: a\n  - name: b\n  - name: a\n", "inputs[2].name", 4, `duplicate input name "a" (also inputs[0])`},
		{"duplicate output names", "outputs:\n  - name: y\n  - name: y\n", "outputs[1].name", 3, `duplicate output name "y"`},
		{"input without a name", "inputs:\n  - dtype: float32\n", "inputs[0].name", 2, "required"},
		{"duplicate key", "batching:\n  timeout: 1s\n  timeout: 2s\n", "batching.timeout", 3, "duplicate key (first at line 2)"},
		{"duplicate bucket", "buckets:\n  batch: [1]\n  batch: [2]\n", "buckets.batch", 3, "duplicate key"},
		{"invalid YAML", "inputs: [\n", "", 1, "invalid YAML"},
		{"tab indentation", "batching:\n\tenabled: true\n", "", 2, "invalid YAML"},
		{"not a mapping", "- a\n- b\n", "", 1, "want a mapping, got a list"},
		{"two documents", "name: tinycnn\n---\nname: other\n", "", 2, "more than one YAML document"},
		{"unknown generate key", "generate:\n  max_seq_len: 64\n  max_tokens: 9\n", "generate.max_tokens", 3, "unknown key (want one of max_seq_len, slots,"},
		{"unknown generate input role", "generate:\n  inputs:\n    token_ids: ids\n", "generate.inputs.token_ids", 3, "unknown key (want one of input_ids, positions, attention_mask)"},
		{"generate slots zero", "generate:\n  slots: 0\n", "generate.slots", 2, "must be >= 1, got 0"},
		{"generate slot buckets past slots", "generate:\n  slots: 4\n  slot_buckets: [1, 8]\n", "generate.slot_buckets", 3, "8 is larger than slots (4)"},
		{"generate slot buckets short of slots", "generate:\n  slots: 4\n  slot_buckets: [1, 2]\n", "generate.slot_buckets", 3, "the largest must be slots (4)"},
		{"generate prefill past max_seq_len", "generate:\n  max_seq_len: 32\n  prefill_buckets: [16, 64]\n", "generate.prefill_buckets", 3, "64 is larger than max_seq_len (32)"},
		{"generate eos not an id", "generate:\n  eos_token_id: end\n", "generate.eos_token_id", 2, `want a token id or a list of them, got "end"`},
		{"generate stall zero", "generate:\n  max_decode_stall: 0s\n", "generate.max_decode_stall", 2, "must be > 0"},
		{"generate and pipeline", "generate:\n  max_seq_len: 64\npipeline:\n  steps:\n    - model: a\n", "generate", 1, "generative (generate:) or a pipeline of other models (pipeline:), not both"},
		{"generate cache pair without output", "generate:\n  cache:\n    - input: past.0\n", "generate.cache[0].output", 3, "required"},
		{"generate encoder without file", "generate:\n  encoder:\n    max_length: 64\n", "generate.encoder.file", 2, "required"},
		{"generate encoder file a path", "generate:\n  encoder:\n    file: ../enc.pt2\n    max_length: 64\n", "generate.encoder.file", 3, "must be a file name in the version directory"},
		{"generate encoder without max_length", "generate:\n  encoder:\n    file: encoder.pt2\n", "generate.encoder.max_length", 2, "required, >= 1"},
		{"generate encoder bucket past max_length", "generate:\n  encoder:\n    file: encoder.pt2\n    max_length: 32\n    buckets: [16, 64]\n", "generate.encoder.buckets", 5, "64 is larger than generate.encoder.max_length (32)"},
		{"generate unknown encoder key", "generate:\n  encoder:\n    file: encoder.pt2\n    max_length: 8\n    inputs: [x]\n", "generate.encoder.inputs", 5, "unknown key (want one of file, max_length, buckets)"},
		{"generate decoder start without encoder", "generate:\n  decoder_start_token_id: 0\n", "generate.decoder_start_token_id", 2, "is for encoder-decoders"},
		{"generate decoder start not an id", "generate:\n  encoder: {file: e.pt2, max_length: 8}\n  decoder_start_token_id: go\n", "generate.decoder_start_token_id", 3, "want a token id or a list of them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(testConfigPath, []byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseConfig succeeded: %+v", c)
			}
			if c != nil {
				t.Errorf("ParseConfig returned a config with its error")
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error does not match ErrConfig: %v", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error is not a *ConfigError: %T %v", err, err)
			}
			if ce.File != testConfigPath || ce.Key != tt.key || ce.Line != tt.line || !strings.Contains(ce.Reason, tt.msg) {
				t.Errorf("got File=%q Key=%q Line=%d Reason=%q\nwant File=%q Key=%q Line=%d Reason containing %q",
					ce.File, ce.Key, ce.Line, ce.Reason, testConfigPath, tt.key, tt.line, tt.msg)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "modelrepo: "+testConfigPath+": ") {
				t.Errorf("message does not start with the package and the file: %s", msg)
			}
			if tt.key != "" && !strings.Contains(msg, ": "+tt.key+": ") {
				t.Errorf("message does not name the key %q: %s", tt.key, msg)
			}
		})
	}
}

// TestParseGenerate: the generate: section with its defaults.
func TestParseGenerate(t *testing.T) {
	c, err := ParseConfig(testConfigPath, []byte("generate:\n  max_seq_len: 100\n  slots: 6\n  eos_token_id: 2\n  cache:\n    - {input: a, output: b}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Generate
	want := &GenerateConfig{MaxSeqLen: 100, Slots: 6, SlotBuckets: []int64{1, 2, 4, 6}, PrefillBuckets: []int64{16, 32, 64, 100},
		EOSTokenIDs: []int64{2}, MaxDecodeStall: DefaultMaxDecodeStall, MaxQueue: DefaultGenerateQueue, Cache: []CachePair{{Input: "a", Output: "b"}}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("got %+v\nwant %+v", g, want)
	}
	c, err = ParseConfig(testConfigPath, []byte("generate:\n  encoder:\n    file: encoder.pt2\n    max_length: 40\n  decoder_start_token_id: [3, 4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Generate.Encoder; e == nil || e.File != "encoder.pt2" || e.MaxLength != 40 || !reflect.DeepEqual(e.Buckets, []int64{16, 32, 40}) ||
		!reflect.DeepEqual(c.Generate.DecoderStartIDs, []int64{3, 4}) {
		t.Errorf("encoder-decoder: got %+v, encoder %+v", c.Generate, c.Generate.Encoder)
	}
	if c, err := ParseConfig(testConfigPath, []byte("name: tinycnn\n")); err != nil || c.Generate != nil {
		t.Errorf("a config without generate: %v %+v", err, c)
	}
}

func TestConfigErrorMessage(t *testing.T) {
	_, err := ParseConfig("models/resnet/config.yaml", []byte("buckets:\n  batch: [4, 2]\n"))
	want := "modelrepo: models/resnet/config.yaml: buckets.batch: sizes must be ascending and positive, got [4 2] (line 2)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// TestParseConfigCollectsAllErrors checks that every problem of a file is
// reported, one per key, in the order of their lines.
func TestParseConfigCollectsAllErrors(t *testing.T) {
	const data = `name: other
buckets:
  batch: [8, 4]
batching:
  max_queue_delay: -2ms
  timeout: soon
  colour: blue
version_policy:
  latest: 1
  specific: [1]
`
	_, err := ParseConfig(testConfigPath, []byte(data))
	if err == nil {
		t.Fatal("ParseConfig succeeded")
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error is not joined: %v", err)
	}
	var keys []string
	var lines []int
	for _, e := range joined.Unwrap() {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("not a *ConfigError: %v", e)
		}
		keys = append(keys, ce.Key)
		lines = append(lines, ce.Line)
	}
	wantKeys := []string{"name", "buckets.batch", "batching.max_queue_delay", "batching.timeout", "batching.colour", "version_policy"}
	wantLines := []int{1, 3, 5, 6, 7, 8}
	if !reflect.DeepEqual(keys, wantKeys) || !reflect.DeepEqual(lines, wantLines) {
		t.Errorf("got keys %q lines %v\nwant keys %q lines %v\n%v", keys, lines, wantKeys, wantLines, err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(wantKeys) {
		t.Errorf("message has %d lines, want %d:\n%v", n, len(wantKeys), err)
	}
}

func TestParseConfigTooLarge(t *testing.T) {
	data := []byte("# " + strings.Repeat("x", MaxConfigSize) + "\n")
	if _, err := ParseConfig(testConfigPath, data); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("got %v, want a size error", err)
	}
}

// TestParseConfigTooDeep: a config nested deeper than MaxConfigDepth (here
// 9990 levels in 50 KB, which took 116 MB and a second to refuse before
// the limit) is refused at once, with bounded allocations.
func TestParseConfigTooDeep(t *testing.T) {
	for _, data := range []string{
		"batching: " + strings.Repeat("{a: ", 9990) + "1" + strings.Repeat("}", 9990),
		"inputs: " + strings.Repeat("[", 9990) + strings.Repeat("]", 9990),
		"batching: " + strings.Repeat("{a: ", MaxConfigDepth) + "1" + strings.Repeat("}", MaxConfigDepth),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ParseConfig(testConfigPath, []byte(data))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "(MaxConfigDepth)") {
			t.Errorf("%.40s...: got %v, want a depth error", data, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
			t.Errorf("%.40s...: %d bytes allocated", data, alloc)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tinycnn")
	path := filepath.Join(dir, ConfigFile)
	writeFile(t, path, fullConfig)
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if c.Name != "tinycnn" || c.Batching.MaxBatchSize != 16 {
		t.Errorf("LoadConfig = %+v", c)
	}

	writeFile(t, path, "name: other\n")
	if _, err := LoadConfig(path); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), path) {
		t.Errorf("LoadConfig(bad) = %v, want an ErrConfig naming %s", err, path)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadConfig(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(c *Config)
		key  string
	}{
		{"bad name", func(c *Config) { c.Name = "../x" }, "name"},
		{"symbol dim", func(c *Config) {
			c.Inputs = []InputConfig{{Name: "x", Dims: fxgraph.Shape{fxgraph.S("not ok")}}}
		}, "inputs[0].dims[0]"},
		{"negative dim", func(c *Config) {
			c.Outputs = []OutputConfig{{Name: "y", Dims: fxgraph.Shape{fxgraph.D(-2)}}}
		}, "outputs[0].dims[0]"},
		{"two policies", func(c *Config) { c.VersionPolicy = VersionPolicy{Latest: 1, All: true} }, "version_policy"},
		{"batch above bucket", func(c *Config) {
			c.Buckets = map[string][]int64{"batch": {1, 2}}
			c.Batching.MaxBatchSize = 3
		}, "batching.max_batch_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig("m")
			tt.mod(c)
			err := c.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != tt.key || ce.File != "" || ce.Line != 0 {
				t.Errorf("Validate = %v, want a ConfigError for %s", err, tt.key)
			}
		})
	}
}

func TestVersionPolicySelect(t *testing.T) {
	tests := []struct {
		policy VersionPolicy
		have   []int64
		want   []int64
	}{
		{VersionPolicy{Latest: 2}, []int64{1, 2, 5}, []int64{2, 5}},
		{VersionPolicy{Latest: 2}, []int64{5, 1, 2}, []int64{2, 5}},
		{VersionPolicy{Latest: 1}, []int64{1, 2, 5}, []int64{5}},
		{VersionPolicy{}, []int64{3, 7}, []int64{7}},
		{VersionPolicy{Latest: 9}, []int64{1, 2}, []int64{1, 2}},
		{VersionPolicy{Latest: 1}, nil, []int64{}},
		{VersionPolicy{Specific: []int64{3, 1}}, []int64{1, 2, 3}, []int64{1, 3}},
		{VersionPolicy{Specific: []int64{4}}, []int64{1, 2}, nil},
		{VersionPolicy{All: true}, []int64{2, 1, 9}, []int64{1, 2, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			got := tt.policy.Select(tt.have)
			if len(got) != len(tt.want) || (len(got) > 0 && !reflect.DeepEqual(got, tt.want)) {
				t.Errorf("%v.Select(%v) = %v, want %v", tt.policy, tt.have, got, tt.want)
			}
		})
	}
}

// writeFile writes data to path, creating its directories.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestParseConfigSequence: a state's initial value (default 0) and the
// limits of the sequence section.
func TestParseConfigSequence(t *testing.T) {
	c, err := ParseConfig("silero/config.yaml", []byte("sequence:\n  state:\n    - input: state\n      output: stateN\n      initial: 0.25\n    - input: h\n      output: hn\n  max_sequence_idle: 2s\n  max_sequences: 8\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := SequenceConfig{States: []StateConfig{{Input: "state", Output: "stateN", Initial: 0.25}, {Input: "h", Output: "hn"}}, MaxSequenceIdle: 2 * time.Second, MaxSequences: 8}
	if !reflect.DeepEqual(c.Sequence, want) {
		t.Errorf("sequence = %+v, want %+v", c.Sequence, want)
	}
	if _, err := ParseConfig("silero/config.yaml", []byte("sequence:\n  state:\n    - input: state\n      output: stateN\n      initial: zeros\n")); err == nil || !strings.Contains(err.Error(), "zeros") {
		t.Errorf("initial: zeros: err = %v, want an error quoting the value", err)
	}
}
