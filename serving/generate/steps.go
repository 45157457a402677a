package generate

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// The step programs wrap the model's graph, which computes one step on a
// cache of past entries and returns it with the step's entries appended
// (present = past ++ new), into programs over the server's cache: one
// tensor per cache tensor of the model, [slots, heads, max_seq_len,
// head_dim], passed in and returned (aliased, so that it is updated in
// place) by every step.
//
// A decode step for slot bucket b runs the model on slots 0..b-1, one token
// each, with the whole cache slot as the past (past = max_seq_len entries,
// the mask marking the valid ones and the new token, placed last) and
// writes each new entry at its sequence's position:
//
//	inputs:  ids [b,1], positions [b,1], mask [b,M+1], write [b], cache...
//	outputs: logits [b,vocab], cache...
//
// A prefill for prompt bucket L runs the model on one prompt padded to L
// tokens with a past of prefillPast masked zero entries and writes the L
// new entries at positions 0..L-1 of the sequence's slot:
//
//	inputs:  ids [1,L], positions [1,L], mask [1,P+L], slot [1], last [1], cache...
//	outputs: logits of token last [1,vocab], cache...
//
// A model whose cache is written at the sequence's length (Layout.AtLength,
// GroupQueryAttention) places its entries by the mask's count instead: the
// decode's new entry is at its write position of the present, and the
// prefill counts its padding, so that its L entries are present's first L.

// prefillPast is the past length of a prefill: one masked entry, so that
// the model's past never has size zero.
const prefillPast = 1

// stepKind is a prefill or a decode step.
type stepKind int

const (
	prefill stepKind = iota
	decode
	encode // an encoder-decoder's encoder, into the cross-attention cache
)

// stepSpec is one step program: its kind and batch and token counts.
type stepSpec struct {
	kind   stepKind
	batch  int64 // b: rows (decode), 1 (prefill, encode)
	tokens int64 // L (prefill), 1 (decode), the input length (encode)
}

// hostInputs is the number of host inputs a step takes before the cache.
func (sb *stepBuilder) hostInputs(s stepSpec) int {
	n := 4
	switch {
	case s.kind == encode:
		return len(sb.encoder.Placeholders()) + 1
	case s.kind == prefill:
		n = 5
	}
	if sb.encLayout != nil {
		n++ // the encoder mask
	}
	return n
}

// hostOutputs is the number of host results a step returns before the
// cache: the logits, none for an encode.
func (s stepSpec) hostOutputs() int {
	if s.kind == encode {
		return 0
	}
	return 1
}

// past is the model's past length in the step.
func (s stepSpec) past(maxLen int64) int64 {
	if s.kind == prefill {
		return prefillPast
	}
	return maxLen
}

func (s stepSpec) String() string {
	switch s.kind {
	case prefill:
		return fmt.Sprintf("prefill %d", s.tokens)
	case encode:
		return fmt.Sprintf("encode %d", s.tokens)
	}
	return fmt.Sprintf("decode %d", s.batch)
}

// stepBuilder makes the step programs of one model.
type stepBuilder struct {
	lowerer *lower.Lowerer
	graph   *fxgraph.Graph
	graphAt func(dims map[string]int64) (*fxgraph.Graph, error)
	layout  *Layout
	slots   int64
	maxLen  int64

	// An encoder-decoder's encoder; nil for a decoder-only model.
	encoder   *fxgraph.Graph
	encoderAt func(dims map[string]int64) (*fxgraph.Graph, error)
	encLayout *EncoderLayout
	encLen    int64 // generate.encoder.max_length
}

// program lowers the step program of spec.
func (sb *stepBuilder) program(spec stepSpec) (*lower.Program, error) {
	g, dims, err := sb.graphFor(spec)
	if err != nil {
		return nil, fmt.Errorf("generate: %s: %w", spec, err)
	}
	prog, err := sb.lowerer.Lower(g, dims)
	if err != nil {
		return nil, fmt.Errorf("generate: %s: %w", spec, err)
	}
	aliases := map[int]int{}
	for i := range len(sb.layout.Cache) + len(sb.layout.Cross) {
		aliases[sb.hostInputs(spec)+i] = spec.hostOutputs() + i
	}
	if err := prog.SetAliases(aliases); err != nil {
		return nil, fmt.Errorf("generate: %s: %w", spec, err)
	}
	return prog, nil
}

// modelShapes are the shapes of the model's inputs in a step, by
// placeholder index.
func (sb *stepBuilder) modelShapes(spec stepSpec) map[int][]int64 {
	b, t, p := spec.batch, spec.tokens, spec.past(sb.maxLen)
	l := sb.layout
	shapes := map[int][]int64{l.InputIDs: {b, t}, l.Mask: {b, p + t}}
	if l.Positions >= 0 {
		shapes[l.Positions] = []int64{b, t}
	}
	for _, c := range l.Cache {
		shapes[c.Input] = []int64{b, c.Heads, p, c.Dim}
	}
	for _, c := range l.Cross {
		shapes[c.Input] = []int64{b, c.Heads, sb.encLen, c.Dim}
	}
	if l.EncoderMask >= 0 {
		shapes[l.EncoderMask] = []int64{b, sb.encLen}
	}
	return shapes
}

// bindDims returns the size of each of the model's symbols in a step.
func bindDims(ph []*fxgraph.Node, shapes map[int][]int64) (map[string]int64, error) {
	dims := map[string]int64{}
	for i, p := range ph {
		m := p.Val()
		for j, d := range m.Shape {
			got := shapes[i][j]
			if d.IsStatic() {
				if d.Size != got {
					return nil, fmt.Errorf("input %s dim %d is %d in the model, the step needs %d", p.Target, j, d.Size, got)
				}
				continue
			}
			if prev, ok := dims[d.Sym]; ok && prev != got {
				return nil, fmt.Errorf("input %s dim %d is symbol %s, which the step needs at %d and %d: export the past and new sequence lengths as separate dims", p.Target, j, d.Sym, prev, got)
			}
			dims[d.Sym] = got
		}
	}
	return dims, nil
}

// graphFor builds the step graph of spec and the symbol sizes it is
// lowered at.
func (sb *stepBuilder) graphFor(spec stepSpec) (*fxgraph.Graph, map[string]int64, error) {
	graph, graphAt := sb.graph, sb.graphAt
	var shapes map[int][]int64
	if spec.kind == encode {
		graph, graphAt, shapes = sb.encoder, sb.encoderAt, sb.encLayout.shapes(spec.batch, spec.tokens)
	} else {
		shapes = sb.modelShapes(spec)
	}
	dims, err := bindDims(graph.Placeholders(), shapes)
	if err != nil {
		return nil, nil, err
	}
	rg := graph
	if graphAt != nil {
		if rg, err = graphAt(dims); err != nil {
			return nil, nil, err
		}
	}
	if rg.IsDeferred() {
		return nil, nil, fmt.Errorf("the model's import waits for its input sizes and no GraphAt was given")
	}
	g := rg.Clone()
	if len(g.Guards) > 0 || len(g.Bounded) > 0 {
		return nil, nil, fmt.Errorf("the model has outputs of data-dependent size or guards, which a generation step cannot have")
	}
	w := &wrapper{g: g, spec: spec, sb: sb, old: g.Placeholders(), outs: g.Outputs()}
	build := w.build
	if spec.kind == encode {
		build = w.buildEncode
	}
	if err := build(); err != nil {
		return nil, nil, err
	}
	return g, dims, nil
}

// wrapper rewrites a clone of the model's graph into a step graph.
type wrapper struct {
	g    *fxgraph.Graph
	spec stepSpec
	sb   *stepBuilder
	old  []*fxgraph.Node // the model's placeholders
	outs []*fxgraph.Node // the model's outputs
}

func (w *wrapper) input(name string, dt tensor.DType, shape ...int64) *fxgraph.Node {
	return w.g.AddPlaceholder(name, fxgraph.TensorMeta{DType: dt, Shape: fxgraph.StaticShape(shape...)})
}

func (w *wrapper) call(op *fxgraph.Op, args ...any) *fxgraph.Node {
	return w.g.AddCall(op, args, nil)
}

func (w *wrapper) arange(n int64) *fxgraph.Node {
	return w.g.AddCall(fxgraph.AtenArange, []any{n}, map[string]any{"dtype": tensor.Int64})
}

// stepNodes are a step graph's inputs.
type stepNodes struct {
	ids, pos, mask *fxgraph.Node
	write          *fxgraph.Node // decode
	slot, last     *fxgraph.Node // prefill
	encMask        *fxgraph.Node // encoder-decoders
	caches, cross  []*fxgraph.Node
}

// inputs adds the step's inputs, in the order the loop passes them.
func (w *wrapper) inputs() *stepNodes {
	l, s, sb := w.sb.layout, w.spec, w.sb
	b, t, p := s.batch, s.tokens, s.past(sb.maxLen)
	in := &stepNodes{ids: w.input("step_input_ids", w.old[l.InputIDs].Val().DType, b, t)}
	posType := tensor.Int64
	if l.Positions >= 0 {
		posType = w.old[l.Positions].Val().DType
	}
	in.pos = w.input("step_positions", posType, b, t)
	in.mask = w.input("step_attention_mask", w.old[l.Mask].Val().DType, b, p+t)
	if s.kind == decode {
		in.write = w.input("step_write", tensor.Int64, b)
	} else {
		in.slot = w.input("step_slot", tensor.Int64, 1)
		in.last = w.input("step_last", tensor.Int64, 1)
	}
	if sb.encLayout != nil {
		dt := tensor.Int64
		if l.EncoderMask >= 0 {
			dt = w.old[l.EncoderMask].Val().DType
		}
		in.encMask = w.input("step_encoder_mask", dt, b, sb.encLen)
	}
	in.caches, in.cross = w.stateInputs()
	return in
}

// modelInputs computes the model's inputs from the step's, by placeholder
// index (before the model's first node).
func (w *wrapper) modelInputs(in *stepNodes) map[int]*fxgraph.Node {
	l, s := w.sb.layout, w.spec
	p := s.past(w.sb.maxLen)
	prev := w.g.SetInsertPoint(firstCall(w.g))
	defer w.g.SetInsertPoint(prev)
	repl := map[int]*fxgraph.Node{l.InputIDs: in.ids, l.Mask: in.mask}
	if l.Positions >= 0 {
		repl[l.Positions] = in.pos
	}
	if l.EncoderMask >= 0 {
		repl[l.EncoderMask] = in.encMask
	}
	for i, c := range l.Cross {
		repl[c.Input] = w.rows(in.cross[i], in.slot)
	}
	for i, c := range l.Cache {
		if s.kind == prefill {
			repl[c.Input] = w.g.AddCall(fxgraph.AtenFull, []any{[]any{int64(1), c.Heads, p, c.Dim}, 0.0}, map[string]any{"dtype": c.DType})
		} else {
			repl[c.Input] = w.rows(in.caches[i], nil)
		}
	}
	return repl
}

// cacheUpdate writes the step's entries of cache tensor i into the
// server's cache.
func (w *wrapper) cacheUpdate(i int, in *stepNodes) *fxgraph.Node {
	l, s, sb := w.sb.layout, w.spec, w.sb
	b, t, p := s.batch, s.tokens, s.past(sb.maxLen)
	present := w.outs[l.Cache[i].Output]
	if s.kind == decode {
		var entry *fxgraph.Node // [b, heads, dim]
		if l.AtLength {
			entry = w.call(fxgraph.AtenIndexTensor, present, []any{w.arange(b), nil, in.write})
		} else {
			entry = w.call(fxgraph.AtenSelectInt, present, int64(cacheSeqAxis), p)
		}
		return w.call(fxgraph.AtenIndexPut, in.caches[i], []any{w.arange(b), nil, in.write}, entry)
	}
	from := p // after the past, or at the (empty) sequence's length 0
	if l.AtLength {
		from = 0
	}
	entries := w.call(fxgraph.AtenSliceTensor, present, int64(cacheSeqAxis), from, from+t) // [1, heads, L, dim]
	entries = w.call(fxgraph.AtenSelectInt, entries, int64(0), int64(0))
	entries = w.call(fxgraph.AtenPermute, entries, []any{int64(1), int64(0), int64(2)}) // [L, heads, dim]
	return w.call(fxgraph.AtenIndexPut, in.caches[i], []any{in.slot, nil, w.arange(t)}, entries)
}

func (w *wrapper) build() error {
	l := w.sb.layout
	in := w.inputs()
	repl := w.modelInputs(in)
	for i, n := range w.old {
		w.g.ReplaceAllUses(n, repl[i])
		if err := w.g.Erase(n); err != nil {
			return err
		}
	}

	// The step's outputs, after the model's.
	logits := w.outs[l.Logits]
	if w.spec.kind == prefill {
		logits = w.call(fxgraph.AtenIndexSelect, logits, int64(1), in.last)
	}
	results := []*fxgraph.Node{w.call(fxgraph.AtenSelectInt, logits, int64(1), int64(0))}
	names := []string{"logits"}
	for i := range l.Cache {
		results = append(results, w.cacheUpdate(i, in))
		names = append(names, fmt.Sprintf("cache_%d", i))
	}
	for i := range in.cross {
		results = append(results, in.cross[i]) // unchanged
		names = append(names, fmt.Sprintf("cross_%d", i))
	}
	w.g.SetOutput(results...)
	w.g.OutputNames = names
	w.g.EliminateDeadCode()
	return nil
}

// rows returns the step's rows of a state tensor [slots, ...]: the
// prefill's slot, or the decode's first b slots.
func (w *wrapper) rows(state, slot *fxgraph.Node) *fxgraph.Node {
	switch {
	case w.spec.kind == prefill:
		return w.call(fxgraph.AtenIndexSelect, state, int64(0), slot)
	case w.spec.batch == w.sb.slots:
		return state
	}
	return w.call(fxgraph.AtenSliceTensor, state, int64(0), int64(0), w.spec.batch)
}

// firstCall returns the graph's first call_function (or output) node.
func firstCall(g *fxgraph.Graph) *fxgraph.Node {
	for _, n := range g.Nodes() {
		if n.Opcode == fxgraph.CallFunction || n.Opcode == fxgraph.Output {
			return n
		}
	}
	return nil
}
