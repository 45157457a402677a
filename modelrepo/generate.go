package modelrepo

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults of the generate: section.
const (
	// DefaultMaxSeqLen is GenerateConfig.MaxSeqLen when max_seq_len is not
	// given.
	DefaultMaxSeqLen = 256
	// DefaultSlots is GenerateConfig.Slots when slots is not given.
	DefaultSlots = 8
	// DefaultMaxDecodeStall is GenerateConfig.MaxDecodeStall when
	// max_decode_stall is not given.
	DefaultMaxDecodeStall = 50 * time.Millisecond
	// DefaultGenerateQueue is GenerateConfig.MaxQueue when max_queue is not
	// given.
	DefaultGenerateQueue = 256
	// MaxGenerateSlots bounds slots (each holds max_seq_len cache entries
	// per layer on the device).
	MaxGenerateSlots = 1024
	// MaxGenerateSeqLen bounds max_seq_len.
	MaxGenerateSeqLen = 1 << 17
	// DefaultTokenizerFile is the tokenizer a generative version's
	// directory may hold beside its model file.
	DefaultTokenizerFile = "tokenizer.json"
)

// GenerateConfig is config.yaml's generate: section: the model is a decoder
// whose graph runs one step (prompt tokens or one new token per sequence)
// with its key/value cache as inputs and outputs, and the server runs the
// generation loop (serving/generate). Which inputs and outputs play which
// role is recognised from their names for the usual exports (torch.export
// of a transformers model with its cache flattened, torch.onnx's dynamo
// exporter with past_key_values.* and present.*); the Inputs, Outputs and
// Cache fields name them for anything else.
type GenerateConfig struct {
	// MaxSeqLen is the most tokens (prompt and generated) one sequence may
	// hold: the length of each cache slot; default 256.
	MaxSeqLen int
	// Slots is the number of cache slots, the most sequences decoded at
	// once; default 8.
	Slots int
	// SlotBuckets are the decode step's batch sizes, each compiled once
	// (ascending, the last one Slots); default the powers of two below
	// Slots, then Slots.
	SlotBuckets []int64
	// PrefillBuckets are the prompt lengths the prefill is compiled for
	// (ascending, at most MaxSeqLen); a longer prompt is refused. Default
	// the powers of two from 16 below MaxSeqLen, then MaxSeqLen.
	PrefillBuckets []int64
	// EOSTokenIDs end a sequence when generated (eos_token_id: an id or a
	// list); none by default (tokenizer_config.json's eos_token is used
	// when a tokenizer is served).
	EOSTokenIDs []int64
	// PadTokenID is the token fed to unused rows; default 0.
	PadTokenID int64
	// MaxDecodeStall bounds how long prompts are prefilled between two
	// decode steps while sequences are decoding; default 50ms. At least
	// one prompt is prefilled between two steps when a slot is free.
	MaxDecodeStall time.Duration
	// MaxQueue is the most requests waiting for a slot; default 256.
	MaxQueue int
	// Inputs names the graph inputs by role; empty names are recognised.
	Inputs GenerateInputs
	// Logits names the logits output; "" is recognised.
	Logits string
	// Cache pairs each cache input with the output holding it one step
	// later; nil is recognised.
	Cache []CachePair
	// Tokenizer is the tokenizer file in the version directory; default
	// tokenizer.json when present.
	Tokenizer string
	// CacheAtLength says the model writes a step's cache entries at each
	// sequence's length (seqlens_k, from the attention mask's count) rather
	// than after the whole past: GroupQueryAttention, as ONNX Runtime
	// GenAI's model builder writes models. Set from genai_config.json.
	CacheAtLength bool
	// CacheHeadDim is the cache tensors' head size when the graph leaves it
	// symbolic (genai_config.json's head_size); 0: the graph's.
	CacheHeadDim int64
	// Encoder makes the model an encoder-decoder (T5, BART, Whisper): the
	// encoder runs once per sequence and the model file is the decoder's
	// step; nil for a decoder-only model.
	Encoder *EncoderConfig
	// DecoderStartIDs are the decoder's prompt when a request gives none
	// (decoder_start_token_id: an id or a list); encoder-decoders only.
	DecoderStartIDs []int64
}

// EncoderConfig is the generate.encoder section of an encoder-decoder:
// its graph (file, in the version directory) takes the encoder's inputs
// (input_ids and attention_mask, or a float features tensor such as
// Whisper's log-mel spectrogram) and returns each decoder layer's
// cross-attention keys and values, which the decoder step takes as inputs
// (cross_key_values_N_key / _value, in the same order).
type EncoderConfig struct {
	// File is the encoder's model file in the version directory.
	File string
	// MaxLength is the longest encoder sequence (the cross-attention
	// cache's length): a text encoder's longest input, or a fixed-size
	// encoder's output length.
	MaxLength int64
	// Buckets are the text encoder's input lengths, each compiled once
	// (ascending, at most MaxLength); default the powers of two from 16
	// below MaxLength, then MaxLength. Unused by fixed-size encoders.
	Buckets []int64
}

// GenerateInputs names the graph inputs of a generative model by role.
type GenerateInputs struct {
	// InputIDs are the token ids, int [batch, sequence].
	InputIDs string
	// Positions are the tokens' positions, int [batch, sequence].
	Positions string
	// AttentionMask marks the valid cache entries and tokens, int [batch,
	// past + sequence].
	AttentionMask string
}

// CachePair is one cache tensor: the input that takes it (past) and the
// output that returns it with the step's entries appended (present).
type CachePair struct {
	Input  string
	Output string
}

type rawGenerate struct {
	MaxSeqLen      *int               `yaml:"max_seq_len"`
	Slots          *int               `yaml:"slots"`
	SlotBuckets    []int64            `yaml:"slot_buckets"`
	PrefillBuckets []int64            `yaml:"prefill_buckets"`
	EOSTokenID     yaml.Node          `yaml:"eos_token_id"`
	PadTokenID     *int64             `yaml:"pad_token_id"`
	MaxDecodeStall *string            `yaml:"max_decode_stall"`
	MaxQueue       *int               `yaml:"max_queue"`
	Inputs         rawGenerateInputs  `yaml:"inputs"`
	Outputs        rawGenerateOutputs `yaml:"outputs"`
	Cache          []rawCachePair     `yaml:"cache"`
	Tokenizer      string             `yaml:"tokenizer"`
	Encoder        *rawEncoder        `yaml:"encoder"`
	DecoderStart   yaml.Node          `yaml:"decoder_start_token_id"`
}

type rawEncoder struct {
	File      string  `yaml:"file"`
	MaxLength *int64  `yaml:"max_length"`
	Buckets   []int64 `yaml:"buckets"`
}

type rawGenerateInputs struct {
	InputIDs      string `yaml:"input_ids"`
	Positions     string `yaml:"positions"`
	AttentionMask string `yaml:"attention_mask"`
}

type rawGenerateOutputs struct {
	Logits string `yaml:"logits"`
}

type rawCachePair struct {
	Input  string `yaml:"input"`
	Output string `yaml:"output"`
}

// convert builds the GenerateConfig of raw, reporting what only the raw
// form shows.
func (raw *rawGenerate) convert(p *problems) *GenerateConfig {
	g := &GenerateConfig{
		SlotBuckets:    slices.Clone(raw.SlotBuckets),
		PrefillBuckets: slices.Clone(raw.PrefillBuckets),
		Inputs:         GenerateInputs(raw.Inputs),
		Logits:         raw.Outputs.Logits,
		Tokenizer:      raw.Tokenizer,
	}
	if raw.MaxSeqLen != nil {
		if *raw.MaxSeqLen < 2 {
			p.add("generate.max_seq_len", "must be >= 2, got %d", *raw.MaxSeqLen)
		}
		g.MaxSeqLen = *raw.MaxSeqLen
	}
	if raw.Slots != nil {
		if *raw.Slots < 1 {
			p.add("generate.slots", "must be >= 1, got %d", *raw.Slots)
		}
		g.Slots = *raw.Slots
	}
	if raw.PadTokenID != nil {
		g.PadTokenID = *raw.PadTokenID
	}
	if raw.MaxDecodeStall != nil {
		g.MaxDecodeStall = convertDuration(p, "generate.max_decode_stall", *raw.MaxDecodeStall)
		if g.MaxDecodeStall == 0 {
			p.add("generate.max_decode_stall", "must be > 0, got %q", *raw.MaxDecodeStall)
		}
	}
	if raw.MaxQueue != nil {
		if *raw.MaxQueue < 1 {
			p.add("generate.max_queue", "must be >= 1, got %d", *raw.MaxQueue)
		}
		g.MaxQueue = *raw.MaxQueue
	}
	g.EOSTokenIDs = convertIDs(p, "generate.eos_token_id", &raw.EOSTokenID)
	g.DecoderStartIDs = convertIDs(p, "generate.decoder_start_token_id", &raw.DecoderStart)
	if e := raw.Encoder; e != nil {
		g.Encoder = &EncoderConfig{File: e.File, Buckets: slices.Clone(e.Buckets)}
		if e.MaxLength != nil {
			g.Encoder.MaxLength = *e.MaxLength
		}
	}
	for _, c := range raw.Cache {
		g.Cache = append(g.Cache, CachePair(c))
	}
	return g
}

// convertIDs reads a token id or a list of them.
func convertIDs(p *problems, key string, n *yaml.Node) []int64 {
	switch n.Kind {
	case 0:
		return nil
	case yaml.ScalarNode:
		var id int64
		if err := n.Decode(&id); err != nil {
			p.add(key, "want a token id or a list of them, got %s", describeNode(n))
			return nil
		}
		return []int64{id}
	case yaml.SequenceNode:
		var ids []int64
		if err := n.Decode(&ids); err != nil {
			p.add(key, "want a token id or a list of them, got %s", describeNode(n))
			return nil
		}
		return ids
	}
	p.add(key, "want a token id or a list of them, got %s", describeNode(n))
	return nil
}

// setDefaults fills the fields left at their zero value.
func (g *GenerateConfig) setDefaults() {
	if g.MaxSeqLen == 0 {
		g.MaxSeqLen = DefaultMaxSeqLen
	}
	if g.Slots == 0 {
		g.Slots = DefaultSlots
	}
	if g.SlotBuckets == nil {
		g.SlotBuckets = powersBelow(1, int64(g.Slots))
	}
	if g.PrefillBuckets == nil {
		g.PrefillBuckets = powersBelow(min(16, int64(g.MaxSeqLen)), int64(g.MaxSeqLen))
	}
	if g.MaxDecodeStall == 0 {
		g.MaxDecodeStall = DefaultMaxDecodeStall
	}
	if g.MaxQueue == 0 {
		g.MaxQueue = DefaultGenerateQueue
	}
	if e := g.Encoder; e != nil && e.Buckets == nil && e.MaxLength > 0 {
		e.Buckets = powersBelow(min(16, e.MaxLength), e.MaxLength)
	}
}

// powersBelow returns from, 2*from, 4*from, ... below limit, then limit.
func powersBelow(from, limit int64) []int64 {
	var out []int64
	for n := from; n < limit; n *= 2 {
		out = append(out, n)
	}
	return append(out, limit)
}

// validate reports the impossible values of g.
func (g *GenerateConfig) validate(p *problems) {
	if g.MaxSeqLen > MaxGenerateSeqLen {
		p.add("generate.max_seq_len", "must be <= %d, got %d", MaxGenerateSeqLen, g.MaxSeqLen)
	}
	if g.Slots > MaxGenerateSlots {
		p.add("generate.slots", "must be <= %d, got %d", MaxGenerateSlots, g.Slots)
	}
	validateSizes(p, "generate.slot_buckets", g.SlotBuckets, int64(g.Slots), "slots")
	if n := len(g.SlotBuckets); n > 0 && g.Slots > 0 && g.SlotBuckets[n-1] != int64(g.Slots) {
		p.add("generate.slot_buckets", "the largest must be slots (%d), got %v", g.Slots, g.SlotBuckets)
	}
	validateSizes(p, "generate.prefill_buckets", g.PrefillBuckets, int64(g.MaxSeqLen), "max_seq_len")
	for _, id := range g.EOSTokenIDs {
		if id < 0 {
			p.add("generate.eos_token_id", "token ids must be >= 0, got %d", id)
			break
		}
	}
	if g.PadTokenID < 0 {
		p.add("generate.pad_token_id", "must be >= 0, got %d", g.PadTokenID)
	}
	if g.MaxDecodeStall < 0 {
		p.add("generate.max_decode_stall", "must be > 0, got %v", g.MaxDecodeStall)
	}
	g.validateEncoder(p)
	for i, c := range g.Cache {
		key := fmt.Sprintf("generate.cache[%d]", i)
		if c.Input == "" {
			p.add(key+".input", "required")
		}
		if c.Output == "" {
			p.add(key+".output", "required")
		}
	}
}

// validateSizes checks an ascending list of positive sizes up to limit.
func validateSizes(p *problems, key string, sizes []int64, limit int64, limitKey string) {
	if sizes != nil && len(sizes) == 0 {
		p.add(key, "needs at least one size")
		return
	}
	for i, n := range sizes {
		if n < 1 || (i > 0 && n <= sizes[i-1]) {
			p.add(key, "sizes must be ascending and positive, got %v", sizes)
			return
		}
	}
	if n := len(sizes); n > 0 && limit > 0 && sizes[n-1] > limit {
		p.add(key, "%d is larger than %s (%d)", sizes[n-1], limitKey, limit)
	}
}

// validateEncoder checks the encoder-decoder keys.
func (g *GenerateConfig) validateEncoder(p *problems) {
	e := g.Encoder
	if e == nil {
		if g.DecoderStartIDs != nil {
			p.add("generate.decoder_start_token_id", "is for encoder-decoders: give generate.encoder too")
		}
		return
	}
	switch {
	case e.File == "":
		p.add("generate.encoder.file", "required: the encoder's model file in the version directory")
	case e.File != filepath.Base(e.File) || e.File == "." || e.File == "..":
		p.add("generate.encoder.file", "must be a file name in the version directory, got %q", e.File)
	}
	if e.MaxLength < 1 {
		p.add("generate.encoder.max_length", "required, >= 1: the longest encoder sequence, got %d", e.MaxLength)
	}
	validateSizes(p, "generate.encoder.buckets", e.Buckets, e.MaxLength, "generate.encoder.max_length")
	for _, id := range g.DecoderStartIDs {
		if id < 0 {
			p.add("generate.decoder_start_token_id", "token ids must be >= 0, got %d", id)
			break
		}
	}
}
