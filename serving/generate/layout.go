package generate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// Layout says which of a decoder graph's inputs and outputs play which role
// in one step: the graph takes the step's tokens, their positions, the
// attention mask over the cache and the tokens, and the cache so far
// (past), and returns the logits and the cache with the step's entries
// appended along its sequence axis (present: past ++ new), or, with
// AtLength, written right after each sequence's valid entries (their count
// from the mask; GroupQueryAttention).
type Layout struct {
	InputIDs, Positions, Mask int // placeholder indices; Positions -1: none
	Logits                    int // output index
	Cache                     []CacheTensor
	// AtLength: the step's entries are written at the sequence's length
	// (generate.CacheAtLength), where the model also takes its positions
	// from when it has no positions input.
	AtLength bool
	// Cross are an encoder-decoder's cross-attention cache inputs
	// (cross_key_values_N_key / _value), [batch, heads, encoder sequence,
	// head_dim], in the order of the encoder's outputs; their Output is -1.
	Cross []CacheTensor
	// EncoderMask is the input marking the valid encoder entries
	// (encoder_attention_mask), -1: none (a fixed-size encoder).
	EncoderMask int
}

// CacheTensor is one cache tensor of the graph, [batch, heads, sequence,
// head_dim].
type CacheTensor struct {
	Input  int // placeholder index (past)
	Output int // output index (present)
	Name   string
	DType  tensor.DType
	Heads  int64
	Dim    int64
}

// cacheSeqAxis is the sequence axis of a cache tensor [batch, heads,
// sequence, head_dim], transformers' layout.
const cacheSeqAxis = 2

var (
	onnxPast    = regexp.MustCompile(`^past_key_values[._](\d+)[._](key|value)$`)
	onnxPresent = regexp.MustCompile(`^present[._](\d+)[._](key|value)$`)
	// torch.export names the flattened DynamicCache's tensors after the
	// pytree path of the argument.
	pt2Past = regexp.MustCompile(`^(?:args_\d+_)?past_key_values(?:_layers)?_(\d+)_(key|value)s?$|^(?:args_\d+_)?past_key_values_(key|value)_cache_(\d+)$`)
	// The cross-attention cache of an encoder-decoder's step, as
	// xserve.export_seq2seq names it (torch.export and ONNX).
	crossPast = regexp.MustCompile(`^(?:args_\d+_)?cross_key_values[._](\d+)[._](key|value)$`)
)

// roleNames are the names an input of each role is recognised by.
var roleNames = map[string][]string{
	"input_ids":      {"input_ids"},
	"positions":      {"position_ids", "positions"},
	"attention_mask": {"attention_mask"},
}

// NewLayout finds the roles of g's inputs and outputs: those named in cfg,
// the others recognised by name (input_ids, position_ids, attention_mask,
// logits; past_key_values.N.key/value with present.N.key/value as the ONNX
// exporters name them; torch.export's flattened past_key_values, whose
// present tensors are the outputs after the logits, in the same order).
// file names config.yaml in errors.
func NewLayout(g *fxgraph.Graph, cfg *modelrepo.GenerateConfig, file string) (*Layout, error) {
	ph := g.Placeholders()
	inNames := make([]string, len(ph))
	for i, p := range ph {
		inNames[i] = p.Target
	}
	outNames := make([]string, len(g.Outputs()))
	for i := range outNames {
		outNames[i] = g.OutputName(i)
	}
	l := &Layout{EncoderMask: -1}
	seq2seq := cfg.Encoder != nil
	var err error
	roles := []struct {
		key, given string
		dst        *int
	}{
		{"input_ids", cfg.Inputs.InputIDs, &l.InputIDs},
		{"positions", cfg.Inputs.Positions, &l.Positions},
		{"attention_mask", cfg.Inputs.AttentionMask, &l.Mask},
	}
	for _, r := range roles {
		if *r.dst, err = findName(inNames, r.given, roleNames[r.key], file, "generate.inputs."+r.key, "input"); err != nil {
			if r.key != "positions" || r.given != "" || !(cfg.CacheAtLength || seq2seq) {
				return nil, err
			}
			// Positions from the mask's count (GroupQueryAttention), or
			// none (T5's relative positions).
			*r.dst = -1
		}
	}
	l.AtLength = cfg.CacheAtLength
	if l.Logits, err = findName(outNames, cfg.Logits, []string{"logits"}, file, "generate.outputs.logits", "output"); err != nil {
		if cfg.Logits != "" || len(outNames) == 0 {
			return nil, err
		}
		l.Logits = 0 // torch.export: the first output
	}
	if seq2seq {
		l.findCross(inNames)
	}
	if err := l.findCache(cfg, inNames, outNames, file); err != nil {
		return nil, err
	}
	if err := l.check(g, inNames, file, cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// findName returns the index of the name given in config (which must
// exist) or else of the first of the usual names present.
func findName(names []string, given string, usual []string, file, key, what string) (int, error) {
	if given != "" {
		if i := slices.Index(names, given); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%w: %s: %s: the model has no %s %q (it has %s)", ErrConfig, file, key, what, given, strings.Join(names, ", "))
	}
	for _, n := range usual {
		if i := slices.Index(names, n); i >= 0 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %s: %s: no %s is named %s; name it (the model's %ss are %s)", ErrConfig, file, key, what, strings.Join(usual, " or "), what, strings.Join(names, ", "))
}

// findCross finds an encoder-decoder step's cross-attention cache and
// encoder mask inputs.
func (l *Layout) findCross(inNames []string) {
	l.EncoderMask = slices.Index(inNames, "encoder_attention_mask")
	for i, n := range inNames {
		if crossPast.MatchString(n) {
			l.Cross = append(l.Cross, CacheTensor{Input: i, Output: -1, Name: n})
		}
	}
}

// findCache pairs the cache inputs with their outputs: as config.yaml
// names them, else as the ONNX exporters name them, else torch.export's.
func (l *Layout) findCache(cfg *modelrepo.GenerateConfig, inNames, outNames []string, file string) error {
	if cfg.Cache != nil {
		return l.namedCache(cfg.Cache, inNames, outNames, file)
	}
	found, err := l.onnxCache(inNames, outNames, file)
	if err != nil || found {
		return err
	}
	return l.pt2Cache(inNames, outNames, file)
}

// namedCache takes the pairs config.yaml gives.
func (l *Layout) namedCache(pairs []modelrepo.CachePair, inNames, outNames []string, file string) error {
	for i, c := range pairs {
		key := fmt.Sprintf("generate.cache[%d]", i)
		in, err := findName(inNames, c.Input, nil, file, key+".input", "input")
		if err != nil {
			return err
		}
		out, err := findName(outNames, c.Output, nil, file, key+".output", "output")
		if err != nil {
			return err
		}
		l.Cache = append(l.Cache, CacheTensor{Input: in, Output: out, Name: c.Input})
	}
	return nil
}

// onnxCache pairs past_key_values.N.key/value with present.N.key/value;
// found is false when no input or no output has such a name.
func (l *Layout) onnxCache(inNames, outNames []string, file string) (found bool, err error) {
	present := map[string]int{}
	for i, n := range outNames {
		if m := onnxPresent.FindStringSubmatch(n); m != nil {
			present[m[1]+"."+m[2]] = i
		}
	}
	if len(present) == 0 {
		// torch.export names its flattened cache past_key_values_0_key
		// too (xserve.export_seq2seq), and its outputs by position.
		return false, nil
	}
	for i, n := range inNames {
		m := onnxPast.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		found = true
		out, ok := present[m[1]+"."+m[2]]
		if !ok {
			return true, fmt.Errorf("%w: %s: generate.cache: input %s has no output present.%s.%s; name the pairs under generate.cache", ErrConfig, file, n, m[1], m[2])
		}
		l.Cache = append(l.Cache, CacheTensor{Input: i, Output: out, Name: n})
	}
	return found, nil
}

// pt2Cache pairs torch.export's flattened cache inputs, in order, with the
// outputs after the logits.
func (l *Layout) pt2Cache(inNames, outNames []string, file string) error {
	var ins []int
	for i, n := range inNames {
		if pt2Past.MatchString(n) {
			ins = append(ins, i)
		}
	}
	if len(ins) == 0 {
		return fmt.Errorf("%w: %s: generate.cache: no input is a recognised cache tensor (past_key_values.N.key, ...); name the pairs under generate.cache (the model's inputs are %s)", ErrConfig, file, strings.Join(inNames, ", "))
	}
	var outs []int
	for i := range outNames {
		if i != l.Logits {
			outs = append(outs, i)
		}
	}
	if len(outs) != len(ins) {
		return fmt.Errorf("%w: %s: generate.cache: the model has %d cache inputs but %d outputs besides the logits; name the pairs under generate.cache", ErrConfig, file, len(ins), len(outs))
	}
	for k, i := range ins {
		l.Cache = append(l.Cache, CacheTensor{Input: i, Output: outs[k], Name: inNames[i]})
	}
	return nil
}

// check verifies the roles' ranks and dtypes and that no input is left
// without one.
func (l *Layout) check(g *fxgraph.Graph, inNames []string, file string, cfg *modelrepo.GenerateConfig) error {
	used := map[int]string{}
	claim := func(i int, role string) error {
		if prev, ok := used[i]; ok {
			return fmt.Errorf("%w: %s: generate: input %s is both %s and %s", ErrConfig, file, inNames[i], prev, role)
		}
		used[i] = role
		return nil
	}
	if err := l.checkRoles(g, inNames, file, claim); err != nil {
		return err
	}
	if err := l.checkCache(g, inNames, file, claim, cfg.CacheHeadDim); err != nil {
		return err
	}
	if err := l.checkCross(g, inNames, file, claim, cfg.Encoder != nil); err != nil {
		return err
	}
	for i, n := range inNames {
		if _, ok := used[i]; !ok {
			return fmt.Errorf("%w: %s: generate: input %s has no role (want input_ids, positions, attention_mask or a cache tensor); name the roles under generate.inputs and generate.cache", ErrConfig, file, n)
		}
	}
	return nil
}

// checkRoles checks the token, position, mask and logits roles.
func (l *Layout) checkRoles(g *fxgraph.Graph, inNames []string, file string, claim func(int, string) error) error {
	ph := g.Placeholders()
	for _, r := range []struct {
		idx  int
		role string
	}{{l.InputIDs, "input_ids"}, {l.Positions, "positions"}, {l.Mask, "attention_mask"}} {
		if r.idx < 0 {
			continue
		}
		if err := claim(r.idx, r.role); err != nil {
			return err
		}
		m := ph[r.idx].Val()
		if len(m.Shape) != 2 || (!m.DType.IsInt() && r.role != "attention_mask") {
			return fmt.Errorf("%w: %s: generate.inputs.%s: input %s is %s%s, want an integer [batch, sequence] tensor", ErrConfig, file, r.role, inNames[r.idx], m.DType, m.Shape)
		}
	}
	if lm := g.Outputs()[l.Logits].Val(); len(lm.Shape) != 3 || !lm.DType.IsFloat() {
		return fmt.Errorf("%w: %s: generate.outputs.logits: output %s is %s%s, want float [batch, sequence, vocab]", ErrConfig, file, g.OutputName(l.Logits), lm.DType, lm.Shape)
	}
	return nil
}

// checkCache checks each cache tensor's shape and fills its dtype, heads
// and head size.
func (l *Layout) checkCache(g *fxgraph.Graph, inNames []string, file string, claim func(int, string) error, headDim int64) error {
	ph, outs := g.Placeholders(), g.Outputs()
	for i := range l.Cache {
		c := &l.Cache[i]
		if err := claim(c.Input, "cache"); err != nil {
			return err
		}
		m := ph[c.Input].Val()
		dim := headDim
		if len(m.Shape) == 4 && m.Shape[3].IsStatic() {
			dim = m.Shape[3].Size
		}
		if len(m.Shape) != 4 || !m.Shape[1].IsStatic() || dim <= 0 {
			return fmt.Errorf("%w: %s: generate.cache: input %s is %s%s, want [batch, heads, sequence, head_dim] with static heads and head_dim", ErrConfig, file, inNames[c.Input], m.DType, m.Shape)
		}
		if om := outs[c.Output].Val(); om.DType != m.DType || len(om.Shape) != 4 {
			return fmt.Errorf("%w: %s: generate.cache: output %s is %s%s, input %s is %s%s: want the same dtype and rank", ErrConfig, file, g.OutputName(c.Output), om.DType, om.Shape, inNames[c.Input], m.DType, m.Shape)
		}
		c.DType, c.Heads, c.Dim = m.DType, m.Shape[1].Size, dim
	}
	return nil
}

// checkCross checks an encoder-decoder's cross-attention cache inputs and
// fills their dtype, heads and head size.
func (l *Layout) checkCross(g *fxgraph.Graph, inNames []string, file string, claim func(int, string) error, seq2seq bool) error {
	if !seq2seq {
		return nil
	}
	if len(l.Cross) == 0 {
		return fmt.Errorf("%w: %s: generate.encoder: the decoder step has no cross-attention cache input (cross_key_values_N_key / _value; its inputs are %s): export it with xserve.export_seq2seq", ErrConfig, file, strings.Join(inNames, ", "))
	}
	if l.EncoderMask >= 0 {
		if err := claim(l.EncoderMask, "encoder_attention_mask"); err != nil {
			return err
		}
	}
	ph := g.Placeholders()
	for i := range l.Cross {
		c := &l.Cross[i]
		if err := claim(c.Input, "cross-attention cache"); err != nil {
			return err
		}
		m := ph[c.Input].Val()
		if len(m.Shape) != 4 || !m.Shape[1].IsStatic() || !m.Shape[3].IsStatic() {
			return fmt.Errorf("%w: %s: generate.encoder: input %s is %s%s, want [batch, heads, encoder sequence, head_dim] with static heads and head_dim", ErrConfig, file, inNames[c.Input], m.DType, m.Shape)
		}
		c.DType, c.Heads, c.Dim = m.DType, m.Shape[1].Size, m.Shape[3].Size
	}
	return nil
}
