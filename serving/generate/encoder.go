package generate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// An encoder-decoder (generate.encoder) has two graphs: the encoder, which
// takes the encoder's inputs and returns every decoder layer's
// cross-attention keys and values, and the decoder's step, which takes them
// as its cross-attention cache besides its self-attention cache. The
// encoder runs once per sequence, as an encode program that writes its
// outputs into the sequence's slot of the cross-attention cache on the
// device:
//
//	inputs:  input_ids [1,S], attention_mask [1,S] (text, S an encoder bucket)
//	         or features [1, ...] (a fixed-size encoder, Whisper's log-mel), slot [1], cache..., cross...
//	outputs: cache..., cross...
//
// The prefill and decode steps then read the slots' cross-attention cache
// ([slots, heads, encoder max_length, head_dim] per tensor) and take the
// encoder mask ([b, max_length], the valid encoder entries) as one more
// host input.

// EncoderLayout says which of an encoder graph's inputs and outputs play
// which role.
type EncoderLayout struct {
	// Text: the encoder takes token ids and their mask at a bucket's length;
	// else one float features tensor at the graph's static shape.
	Text           bool
	InputIDs, Mask int // placeholder indices (Text)
	Features       int // placeholder index (not Text)
	// FeatureShape is the features' shape without the batch axis.
	FeatureShape []int64
	// Outputs are the cross-attention outputs, paired in order with
	// Layout.Cross.
	Outputs []int
}

// NewEncoderLayout finds the roles of an encoder graph: input_ids and
// attention_mask, or one float input with a static shape past its batch
// axis; its outputs, [batch, heads, sequence, head_dim] each, are the
// decoder's cross-attention cache in the order of dec.Cross. file and
// encFile name config.yaml and the encoder file in errors.
func NewEncoderLayout(g *fxgraph.Graph, dec *Layout, cfg *modelrepo.EncoderConfig, file string) (*EncoderLayout, error) {
	el, err := encoderInputs(g.Placeholders(), cfg, file)
	if err != nil {
		return nil, err
	}
	outs := g.Outputs()
	if len(outs) != len(dec.Cross) {
		return nil, fmt.Errorf("%w: %s: generate.encoder.file: %s returns %d tensors, the decoder step takes %d cross-attention cache tensors", ErrConfig, file, cfg.File, len(outs), len(dec.Cross))
	}
	for i, o := range outs {
		if err := el.checkOutput(i, o.Val(), dec.Cross[i], cfg, file); err != nil {
			return nil, err
		}
		el.Outputs = append(el.Outputs, i)
	}
	return el, nil
}

// encoderInputs finds the encoder's input roles.
func encoderInputs(ph []*fxgraph.Node, cfg *modelrepo.EncoderConfig, file string) (*EncoderLayout, error) {
	names := make([]string, len(ph))
	for i, p := range ph {
		names[i] = p.Target
	}
	el := &EncoderLayout{InputIDs: slices.Index(names, "input_ids"), Mask: slices.Index(names, "attention_mask"), Features: -1}
	switch {
	case el.InputIDs >= 0 && el.Mask >= 0 && len(ph) == 2:
		el.Text = true
	case len(ph) == 1 && ph[0].Val().DType.IsFloat() && staticPast(ph[0].Val().Shape):
		el.Features = 0
		for _, d := range ph[0].Val().Shape[1:] {
			el.FeatureShape = append(el.FeatureShape, d.Size)
		}
	default:
		return nil, fmt.Errorf("%w: %s: generate.encoder.file: %s takes %s; want input_ids and attention_mask, or one float features tensor of static shape past its batch axis",
			ErrConfig, file, cfg.File, strings.Join(names, ", "))
	}
	return el, nil
}

// checkOutput checks encoder output i against the decoder's
// cross-attention input c.
func (el *EncoderLayout) checkOutput(i int, m fxgraph.TensorMeta, c CacheTensor, cfg *modelrepo.EncoderConfig, file string) error {
	if len(m.Shape) != 4 || m.DType != c.DType || !m.Shape[1].IsStatic() || m.Shape[1].Size != c.Heads || !m.Shape[3].IsStatic() || m.Shape[3].Size != c.Dim {
		return fmt.Errorf("%w: %s: generate.encoder.file: %s output %d is %s%s, the decoder's %s is %s[batch, %d, sequence, %d]", ErrConfig, file, cfg.File, i, m.DType, m.Shape, c.Name, c.DType, c.Heads, c.Dim)
	}
	if !el.Text && m.Shape[2].IsStatic() && m.Shape[2].Size > cfg.MaxLength {
		return fmt.Errorf("%w: %s: generate.encoder.max_length: %d, but %s returns %d entries", ErrConfig, file, cfg.MaxLength, cfg.File, m.Shape[2].Size)
	}
	return nil
}

func staticPast(shape fxgraph.Shape) bool {
	if len(shape) < 2 {
		return false
	}
	for _, d := range shape[1:] {
		if !d.IsStatic() {
			return false
		}
	}
	return true
}

// shapes are the shapes of the encoder's inputs in an encode step of b
// sequences of input length s (text).
func (el *EncoderLayout) shapes(b, s int64) map[int][]int64 {
	if el.Text {
		return map[int][]int64{el.InputIDs: {b, s}, el.Mask: {b, s}}
	}
	return map[int][]int64{el.Features: append([]int64{b}, el.FeatureShape...)}
}

// buildEncode rewrites a clone of the encoder's graph into the encode
// program of spec (w.g is the clone, w.old its placeholders, w.outs its
// outputs).
func (w *wrapper) buildEncode() error {
	el, sb := w.sb.encLayout, w.sb
	hosts := make([]*fxgraph.Node, len(w.old))
	for i, p := range w.old {
		m := p.Val()
		shape := el.shapes(w.spec.batch, w.spec.tokens)[i]
		hosts[i] = w.input("encoder_"+p.Target, m.DType, shape...)
	}
	slot := w.input("step_slot", tensor.Int64, w.spec.batch)
	caches, cross := w.stateInputs()
	for i, n := range w.old {
		w.g.ReplaceAllUses(n, hosts[i])
		if err := w.g.Erase(n); err != nil {
			return err
		}
	}
	results := slices.Clone(caches)
	var names []string
	for i := range caches {
		names = append(names, fmt.Sprintf("cache_%d", i))
	}
	rows := w.call(fxgraph.AtenUnsqueeze, slot, int64(1)) // [b, 1]: each row's slot, beside its entries
	for i, o := range el.Outputs {
		entries := w.call(fxgraph.AtenPermute, w.outs[o], []any{int64(0), int64(2), int64(1), int64(3)}) // [b, S, heads, dim]
		n := w.outs[o].Val().Shape[2]
		length := w.spec.tokens
		if n.IsStatic() {
			length = n.Size
		}
		if length > sb.encLen {
			return fmt.Errorf("the encoder returns %d entries, more than generate.encoder.max_length %d", length, sb.encLen)
		}
		results = append(results, w.call(fxgraph.AtenIndexPut, cross[i], []any{rows, nil, w.arange(length)}, entries))
		names = append(names, fmt.Sprintf("cross_%d", i))
	}
	w.g.SetOutput(results...)
	w.g.OutputNames = names
	w.g.EliminateDeadCode()
	return nil
}

// stateInputs adds the step's state inputs: the self-attention cache, then
// the cross-attention cache.
func (w *wrapper) stateInputs() (caches, cross []*fxgraph.Node) {
	sb := w.sb
	for i, c := range sb.layout.Cache {
		caches = append(caches, w.input(fmt.Sprintf("cache_%d", i), c.DType, sb.slots, c.Heads, sb.maxLen, c.Dim))
	}
	for i, c := range sb.layout.Cross {
		cross = append(cross, w.input(fmt.Sprintf("cross_%d", i), c.DType, sb.slots, c.Heads, sb.encLen, c.Dim))
	}
	return caches, cross
}

// withEncoder sets up an encoder-decoder's encoder (generate.encoder).
func (m *Model) withEncoder(o Options) error {
	e := o.Config.Encoder
	switch {
	case e == nil && o.Encoder == nil:
		return nil
	case e == nil:
		return fmt.Errorf("%w: %s: generate.encoder: an encoder graph was given but config.yaml has no generate.encoder", ErrConfig, o.ConfigFile)
	case o.Encoder == nil || o.EncoderDevice == nil:
		return fmt.Errorf("%w: %s: generate.encoder: the encoder %s was not loaded", ErrConfig, o.ConfigFile, e.File)
	}
	el, err := NewEncoderLayout(o.Encoder, m.layout, e, o.ConfigFile)
	if err != nil {
		return err
	}
	sb := m.builder
	sb.encoder, sb.encoderAt, sb.encLayout, sb.encLen = o.Encoder, o.EncoderAt, el, e.MaxLength
	m.encDev = o.EncoderDevice
	m.encMaskType = tensor.Int64
	if m.layout.EncoderMask >= 0 {
		m.encMaskType = o.Graph.Placeholders()[m.layout.EncoderMask].Val().DType
	}
	if el.Text {
		m.encIDType = o.Encoder.Placeholders()[el.InputIDs].Val().DType
		m.encIDMaskType = o.Encoder.Placeholders()[el.Mask].Val().DType
	} else {
		m.featType = o.Encoder.Placeholders()[el.Features].Val().DType
	}
	return nil
}

// encodeSpecs are the encode programs of an encoder-decoder: one per
// text encoder bucket (or one for a fixed-size encoder) and slot bucket,
// the sequences admitted together being encoded at once.
func (m *Model) encodeSpecs() []stepSpec {
	el := m.builder.encLayout
	if el == nil {
		return nil
	}
	lengths := []int64{m.builder.encLen}
	if el.Text {
		lengths = m.cfg.Encoder.Buckets
	}
	var out []stepSpec
	for _, l := range lengths {
		for _, b := range m.cfg.SlotBuckets {
			out = append(out, stepSpec{kind: encode, batch: b, tokens: l})
		}
	}
	return out
}

// validateEncoder checks a request's encoder input against the model and
// gives an encoder-decoder's request its default decoder prompt.
func (m *Model) validateEncoder(req *Request) error {
	el := m.builder.encLayout
	if el == nil {
		if req.EncoderIDs != nil || req.EncoderFeatures != nil {
			return fmt.Errorf("%w: the model is not an encoder-decoder: it takes no encoder input", ErrInvalidRequest)
		}
		return nil
	}
	if len(req.Prompt) == 0 {
		if len(m.cfg.DecoderStartIDs) == 0 {
			return fmt.Errorf("%w: the request has no decoder prompt and %s has no generate.decoder_start_token_id", ErrInvalidRequest, m.file)
		}
		req.Prompt = slices.Clone(m.cfg.DecoderStartIDs)
	}
	if el.Text {
		return m.validateEncoderIDs(req)
	}
	return m.validateFeatures(req)
}

func (m *Model) validateEncoderIDs(req *Request) error {
	longest := slices.Max(m.cfg.Encoder.Buckets)
	switch n := int64(len(req.EncoderIDs)); {
	case req.EncoderFeatures != nil:
		return fmt.Errorf("%w: the model's encoder takes token ids, not features", ErrInvalidRequest)
	case n == 0:
		return fmt.Errorf("%w: the encoder input has no tokens", ErrInvalidRequest)
	case n > longest:
		return fmt.Errorf("%w: the encoder input has %d tokens, more than the model takes (%d: the largest of generate.encoder.buckets in %s)", ErrInvalidRequest, n, longest, m.file)
	}
	for i, t := range req.EncoderIDs {
		if t < 0 || (m.vocab > 0 && t >= m.vocab) {
			return fmt.Errorf("%w: encoder token %d is %d, outside the model's vocabulary [0, %d)", ErrInvalidRequest, i, t, m.vocab)
		}
	}
	return nil
}

func (m *Model) validateFeatures(req *Request) error {
	want := m.builder.encLayout.FeatureShape
	f := req.EncoderFeatures
	switch {
	case req.EncoderIDs != nil || f == nil:
		return fmt.Errorf("%w: the model's encoder takes a features tensor %v (float), not token ids", ErrInvalidRequest, want)
	case !f.DType.IsFloat():
		return fmt.Errorf("%w: the encoder features are %s, want a float tensor %v", ErrInvalidRequest, f.DType, want)
	}
	shape := f.Shape
	if len(shape) == len(want)+1 && shape[0] == 1 {
		shape = shape[1:]
	}
	if !slices.Equal(shape, want) {
		return fmt.Errorf("%w: the encoder features are %v, want %v (the model's encoder input without its batch axis)", ErrInvalidRequest, f.Shape, want)
	}
	return nil
}

// encodeAll runs the encoder of the sequences admitted together into
// their slots of the cross-attention cache: one encode per text encoder
// bucket (the sequences of one bucket at once), or one for a fixed-size
// encoder. A failed encode ends its sequences; encodeAll returns the
// others.
func (m *Model) encodeAll(ctx context.Context, seqs []*sequence) []*sequence {
	groups := map[int64][]*sequence{}
	var order []int64
	for _, s := range seqs {
		l := m.encodeLength(s)
		if groups[l] == nil {
			order = append(order, l)
		}
		groups[l] = append(groups[l], s)
	}
	var ok []*sequence
	for _, l := range order {
		g := groups[l]
		for len(g) > 0 {
			n := min(len(g), int(m.cfg.SlotBuckets[len(m.cfg.SlotBuckets)-1]))
			if err := m.encode(ctx, g[:n], l); err != nil {
				for _, s := range g[:n] {
					m.fail(s, err)
				}
			} else {
				ok = append(ok, g[:n]...)
			}
			g = g[n:]
		}
	}
	return ok
}

// encodeLength is the encoder input length of s in its encode program:
// the smallest text encoder bucket that holds it, or the fixed size.
func (m *Model) encodeLength(s *sequence) int64 {
	if !m.builder.encLayout.Text {
		return m.builder.encLen
	}
	n := int64(len(s.req.EncoderIDs))
	buckets := m.cfg.Encoder.Buckets
	return buckets[slices.IndexFunc(buckets, func(b int64) bool { return b >= n })]
}

// encode runs the encoder of seqs (of encode length l) into their slots
// of the cross-attention cache, as one program of the smallest slot
// bucket that holds them; the rows past them repeat the first (the same
// entries written again into its slot).
func (m *Model) encode(ctx context.Context, seqs []*sequence, l int64) error {
	buckets := m.cfg.SlotBuckets
	b := buckets[slices.IndexFunc(buckets, func(x int64) bool { return x >= int64(len(seqs)) })]
	step, err := m.step(ctx, stepSpec{kind: encode, batch: b, tokens: l})
	if err != nil {
		return err
	}
	hosts := m.encoderInputs(seqs, b, l)
	slots := tensor.New(tensor.Int64, b)
	for r := range b {
		slots.SetInt64(r, int64(seqs[padRow(r, len(seqs))].slot))
	}
	if _, err = m.run(ctx, step, append(hosts, slots)); err != nil {
		return err
	}
	m.stats.Encodes.Add(1)
	return nil
}

// padRow is the sequence that row r of an encode of n sequences holds:
// its own, or the first past them.
func padRow(r int64, n int) int {
	if r < int64(n) {
		return int(r)
	}
	return 0
}

// encoderInputs are the encoder's inputs for seqs in an encode of b rows
// at length l, and sets each sequence's encoder length.
func (m *Model) encoderInputs(seqs []*sequence, b, l int64) []*tensor.Tensor {
	el := m.builder.encLayout
	if !el.Text {
		f := tensor.New(m.featType, append([]int64{b}, el.FeatureShape...)...)
		per := f.NumElements() / b
		for r := range b {
			s := seqs[padRow(r, len(seqs))]
			src := s.req.EncoderFeatures.Convert(m.featType) // a copy: the request's tensor is the caller's
			for i := range per {
				f.SetFloat64(r*per+i, src.Float64At(i))
			}
			s.encLen = m.builder.encLen
		}
		return []*tensor.Tensor{f}
	}
	ids, mask := tensor.New(m.encIDType, b, l), tensor.New(m.encIDMaskType, b, l)
	for r := range b {
		s := seqs[padRow(r, len(seqs))]
		n := int64(len(s.req.EncoderIDs))
		for i := range l {
			tok := m.cfg.PadTokenID
			if i < n {
				tok = s.req.EncoderIDs[i]
				mask.SetFloat64(r*l+i, 1)
			}
			ids.SetInt64(r*l+i, tok)
		}
		s.encLen = n
	}
	byIndex := map[int]*tensor.Tensor{el.InputIDs: ids, el.Mask: mask}
	return []*tensor.Tensor{byIndex[0], byIndex[1]}
}

// encoderMask returns the encoder mask of b rows, the valid encoder entries
// of each row's sequence; nil for a decoder-only model.
func (m *Model) encoderMask(rows []*sequence) *tensor.Tensor {
	if m.builder.encLayout == nil {
		return nil
	}
	l := m.builder.encLen
	mask := tensor.New(m.encMaskType, int64(len(rows)), l)
	for r, s := range rows {
		n := int64(1) // an unused row attends to one (finite) entry
		if s != nil {
			n = s.encLen
		}
		for j := range n {
			mask.SetFloat64(int64(r)*l+j, 1)
		}
	}
	return mask
}

// EncoderDecoder says whether the model is an encoder-decoder
// (generate.encoder).
func (m *Model) EncoderDecoder() bool { return m.builder.encLayout != nil }

// TextEncoder says whether the model is an encoder-decoder whose encoder
// takes token ids (T5, BART), so that a text prompt is its input.
func (m *Model) TextEncoder() bool { return m.builder.encLayout != nil && m.builder.encLayout.Text }
