package serving

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// defaultBuckets returns the batch bucket sizes of a model whose config.yaml
// gives none (clamped to the model's range for the batch symbol).
func defaultBuckets() []int64 { return []int64{1, 2, 4, 8, 16, 32, 64} }

// defaultTopBucket is the largest default bucket of a non-batch symbol
// whose range has no upper bound: larger sizes run at their exact size.
const defaultTopBucket = 4096

// defaultSymbolBuckets returns the bucket sizes of a non-batch symbol that
// config.yaml gives none for: the smallest size the model's range allows,
// then every power of two above it, up to the range's maximum (itself the
// last bucket) or defaultTopBucket. Sizes above the largest bucket run at
// their exact size (BucketPlan.choose).
func defaultSymbolBuckets(r fxgraph.SymbolRange) []int64 {
	lo := max(r.Min, 1)
	hi := int64(defaultTopBucket)
	if r.Max >= 0 {
		hi = r.Max
	}
	out := []int64{lo}
	for p := int64(1); p <= hi && p <= 1<<40; p *= 2 {
		if p > lo {
			out = append(out, p)
		}
	}
	if r.Max >= 0 && out[len(out)-1] < r.Max && lo < r.Max {
		out = append(out, r.Max)
	}
	return out
}

// maxBucketCombinations bounds the number of bucket combinations a model may
// have (the product of its symbols' bucket counts).
const maxBucketCombinations = 4096

// unknownSym marks an output dim the model file gives no size or symbol for.
const unknownSym = "?"

// dimSpec is one dim of a served tensor: a static size (Sym empty), a
// served symbol, an expression of served symbols (Expr set, Sym its text:
// a .pt2 input dim such as past + 1), or unknownSym (declared outputs
// only).
type dimSpec struct {
	Size int64
	Sym  string
	Expr *fxgraph.SymExpr
}

func (d dimSpec) String() string {
	if d.Sym != "" {
		return d.Sym
	}
	return strconv.FormatInt(d.Size, 10)
}

func (d dimSpec) isSymbol() bool { return d.Sym != "" && d.Sym != unknownSym && d.Expr == nil }

func formatDims(dims []dimSpec) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// tensorSig is one input or output of a served model version.
type tensorSig struct {
	Name  string
	DType tensor.DType
	// Dims are the declared dims (for outputs, what the model file and
	// config.yaml say; the served shape of a request comes from the IR's
	// shape propagation, not from these).
	Dims []dimSpec
	// pad is one element of the input's pad value in DType (inputs only).
	pad []byte
}

func (t *tensorSig) String() string { return t.DType.String() + formatDims(t.Dims) }

// spec returns the TensorSpec of Metadata.
func (t *tensorSig) spec() TensorSpec {
	s := TensorSpec{Name: t.Name, DType: t.DType, Shape: make([]int64, len(t.Dims)), Dims: make([]string, len(t.Dims))}
	for i, d := range t.Dims {
		s.Dims[i] = d.String()
		s.Shape[i] = d.Size
		if d.Sym != "" {
			s.Shape[i] = -1
		}
	}
	return s
}

// configError is a load error about a config.yaml key.
func configError(file, key, format string, args ...any) error {
	return fmt.Errorf("serving: %s: %s: %s", file, key, fmt.Sprintf(format, args...))
}

// planBuilder merges a model's signature with its config.yaml into a
// BucketPlan; each step is one method.
type planBuilder struct {
	g       *fxgraph.Graph
	cfg     *modelrepo.Config
	cfgFile string
	ph      []*fxgraph.Node
	p       *BucketPlan
	boundBy map[string]string // model symbol -> config key that bound it
	renamed map[string]bool   // model symbols config.yaml gave a served name
	cfgIn   map[string]modelrepo.InputConfig
}

// NewBucketPlan merges the model's signature (graph placeholders and
// outputs) with cfg; cfgFile names config.yaml in errors. Config dims may
// name symbols for the model's symbolic dims (renaming them) or pin them to
// a size; dtypes and static dims must agree with the model. The batch
// symbol is config.yaml's batch_symbol, else the symbol that is the leading
// dim of every input (served as "batch" whatever the model calls it, unless
// config.yaml renames it). Every symbol gets its buckets from config.yaml
// (under its served or its model name), else defaultBuckets clamped to the
// model's range for it, and its pad policy from config.yaml's pad, else
// PadProbe. shapes gives the model's output shapes at given symbol sizes.
func NewBucketPlan(g *fxgraph.Graph, cfg *modelrepo.Config, cfgFile string, shapes ShapeFunc) (*BucketPlan, error) {
	b := &planBuilder{
		g: g, cfg: cfg, cfgFile: cfgFile, ph: g.Placeholders(),
		p:       &BucketPlan{modelSyms: map[string]dimSpec{}, derived: g.SymbolExprs, shapes: shapes, shapeCache: map[string][][]int64{}},
		boundBy: map[string]string{}, renamed: map[string]bool{}, cfgIn: map[string]modelrepo.InputConfig{},
	}
	if len(b.ph) == 0 {
		return nil, fmt.Errorf("serving: the model has no inputs")
	}
	steps := []func() error{b.bindConfigInputs, b.bindModelSymbols, b.nameBatch, b.buildInputs, b.buildOutputs, b.buildSymbols}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return b.p, nil
}

func (b *planBuilder) inputNames() string {
	out := make([]string, len(b.ph))
	for i, n := range b.ph {
		out[i] = n.Target
	}
	return strings.Join(out, ", ")
}

// bind records that config key makes the model's symbol sym the served d.
func (b *planBuilder) bind(key, sym string, d dimSpec) error {
	if prev, ok := b.p.modelSyms[sym]; ok && prev != d {
		return configError(b.cfgFile, key, "is %s, but %s already makes the model's symbol %s %s", d, b.boundBy[sym], sym, prev)
	}
	b.p.modelSyms[sym] = d
	b.boundBy[sym] = key
	b.renamed[sym] = true
	return nil
}

// bindConfigInputs applies what config.yaml says about the inputs: dtypes
// must agree, dims rename or pin the model's symbols.
func (b *planBuilder) bindConfigInputs() error {
	index := map[string]int{}
	for i, p := range b.ph {
		index[p.Target] = i
	}
	for i, ic := range b.cfg.Inputs {
		key := fmt.Sprintf("inputs[%d]", i)
		j, ok := index[ic.Name]
		if !ok {
			return configError(b.cfgFile, key+".name", "the model has no input %q (inputs: %s)", ic.Name, b.inputNames())
		}
		b.cfgIn[ic.Name] = ic
		m := b.ph[j].Val()
		if ic.DType != tensor.Invalid && ic.DType != m.DType {
			return configError(b.cfgFile, key+".dtype", "is %s, but the model's input %q is %s", ic.DType, ic.Name, m)
		}
		if ic.Dims == nil {
			continue
		}
		if len(ic.Dims) != len(m.Shape) {
			return configError(b.cfgFile, key+".dims", "%s has rank %d, but the model's input %q is %s (rank %d)", ic.Dims, len(ic.Dims), ic.Name, m, len(m.Shape))
		}
		for d, md := range m.Shape {
			if err := b.bindDim(fmt.Sprintf("%s.dims[%d]", key, d), ic.Name, d, m, md, ic.Dims[d]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *planBuilder) bindDim(key, input string, d int, m fxgraph.TensorMeta, md, cd fxgraph.Dim) error {
	switch {
	case md.IsStatic() && cd.IsStatic() && cd.Size != md.Size:
		return configError(b.cfgFile, key, "is %d, but dim %d of the model's input %q is %d (%s)", cd.Size, d, input, md.Size, m)
	case md.IsStatic() && !cd.IsStatic():
		return configError(b.cfgFile, key, "is symbol %s, but dim %d of the model's input %q is static %d (%s)", cd.Sym, d, input, md.Size, m)
	case !md.IsStatic():
		return b.bind(key, md.Sym, dimSpec{Size: cd.Size, Sym: cd.Sym})
	}
	return nil
}

// bindModelSymbols gives every symbol config.yaml left alone its model name.
func (b *planBuilder) bindModelSymbols() error {
	for _, p := range b.ph {
		m := p.Val()
		if m.DType.Size() == 0 {
			return fmt.Errorf("serving: input %q has dtype %s, which cannot be served", p.Target, m.DType)
		}
		for d, md := range m.Shape {
			if md.IsStatic() {
				continue
			}
			if md.Sym == unknownSym || md.Sym == "" {
				return fmt.Errorf("serving: dim %d of input %q has no size or symbol; give it a symbol in %s (inputs: dims)", d, p.Target, b.cfgFile)
			}
			syms := []string{md.Sym}
			if e, ok := b.g.SymbolExprs[md.Sym]; ok {
				syms = e.Symbols() // a derived dim: its symbols are served
			}
			for _, s := range syms {
				if _, ok := b.p.modelSyms[s]; !ok {
					b.p.modelSyms[s] = dimSpec{Sym: s}
				}
			}
		}
	}
	return nil
}

// leadingSymbol returns the served symbol that is dim 0 of every input, or
// "".
func (b *planBuilder) leadingSymbol() string {
	lead := ""
	for _, p := range b.ph {
		shape := p.Val().Shape
		if len(shape) == 0 || shape[0].IsStatic() {
			return ""
		}
		s := b.p.modelSyms[shape[0].Sym].Sym
		if s == "" || (lead != "" && s != lead) {
			return ""
		}
		lead = s
	}
	return lead
}

// nameBatch picks the batch symbol and, when the model names it otherwise
// and config.yaml does not rename it, serves it as "batch".
func (b *planBuilder) nameBatch() error {
	served := map[string]bool{}
	for _, d := range b.p.modelSyms {
		if d.Sym != "" {
			served[d.Sym] = true
		}
	}
	if want := b.cfg.BatchSymbol; want != "" {
		if !served[want] && !b.modelHas(want) {
			return configError(b.cfgFile, "batch_symbol", "is %s, but no input has that symbol (symbols: %s)", want, strings.Join(sortedKeys(served), ", "))
		}
		b.p.batchName = b.servedName(want)
		return nil
	}
	lead := b.leadingSymbol()
	if lead == "" {
		return nil
	}
	b.p.batchName = lead
	if lead == modelrepo.BatchSymbol || served[modelrepo.BatchSymbol] {
		return nil
	}
	for ms, d := range b.p.modelSyms {
		if d.Sym == lead && !b.renamed[ms] {
			b.p.modelSyms[ms] = dimSpec{Sym: modelrepo.BatchSymbol}
			b.p.batchName = modelrepo.BatchSymbol
		}
	}
	return nil
}

// modelHas reports whether sym is one of the model's own input symbols.
func (b *planBuilder) modelHas(sym string) bool {
	_, ok := b.p.modelSyms[sym]
	return ok
}

// servedName maps a name config.yaml uses (served or the model's) to the
// served symbol.
func (b *planBuilder) servedName(name string) string {
	for _, d := range b.p.modelSyms {
		if d.Sym == name {
			return name
		}
	}
	if d, ok := b.p.modelSyms[name]; ok && d.Sym != "" {
		return d.Sym
	}
	return name
}

// servedExpr returns the dim of a derived input dim: e over the served
// symbols (config.yaml's pinned sizes substituted), printed as its text.
func (b *planBuilder) servedExpr(e *fxgraph.SymExpr) dimSpec {
	se := e.Substitute(func(sym string) *fxgraph.SymExpr {
		d := b.p.modelSyms[sym]
		if d.Sym == "" {
			return &fxgraph.SymExpr{Op: "int", Value: d.Size}
		}
		return &fxgraph.SymExpr{Op: "sym", Sym: d.Sym}
	})
	return dimSpec{Sym: se.String(), Expr: se}
}

func (b *planBuilder) buildInputs() error {
	for _, p := range b.ph {
		m := p.Val()
		in := tensorSig{Name: p.Target, DType: m.DType, Dims: make([]dimSpec, len(m.Shape))}
		for d, md := range m.Shape {
			switch e, derived := b.g.SymbolExprs[md.Sym]; {
			case md.IsStatic():
				in.Dims[d] = dimSpec{Size: md.Size}
			case derived:
				in.Dims[d] = b.servedExpr(e)
			default:
				in.Dims[d] = b.p.modelSyms[md.Sym]
			}
		}
		pad := tensor.New(m.DType, 1)
		pad.SetFloat64(0, b.cfgIn[p.Target].PadValue)
		in.pad = pad.Data
		b.p.Inputs = append(b.p.Inputs, in)
	}
	return nil
}

// buildOutputs resolves the declared output dims and merges config.yaml's
// outputs: names and dtypes must agree; dims only document (the served
// shape of every output comes from the IR's shape propagation).
func (b *planBuilder) buildOutputs() error {
	outs := b.g.Outputs()
	index := map[string]int{}
	counts := map[int]bool{} // the count outputs of data-dependent sizes: not served
	for _, bo := range b.g.Bounded {
		counts[bo.Count] = true
	}
	b.p.bounded = b.g.Bounded
	for i, o := range outs[:b.g.ModelOutputs()] {
		if counts[i] {
			continue
		}
		m := o.Val()
		out := tensorSig{Name: b.g.OutputName(i), DType: m.DType, Dims: make([]dimSpec, len(m.Shape))}
		for d, md := range m.Shape {
			out.Dims[d] = dimSpec{Sym: unknownSym}
			if md.IsStatic() {
				out.Dims[d] = dimSpec{Size: md.Size}
			} else if spec, ok := b.p.modelSyms[md.Sym]; ok {
				out.Dims[d] = spec
			} else if b.g.IsDeferred() {
				if b.p.freeOutputs == nil {
					b.p.freeOutputs = map[int]bool{}
				}
				b.p.freeOutputs[len(b.p.Outputs)] = true
			}
		}
		index[out.Name] = i
		b.p.Outputs = append(b.p.Outputs, out)
	}
	if len(b.p.freeOutputs) > 0 && !b.counts() {
		b.p.freeOutputs = nil // sized by the inputs after all (silero-vad's stateN)
	}
	for i, oc := range b.cfg.Outputs {
		if err := b.mergeOutput(fmt.Sprintf("outputs[%d]", i), oc, index); err != nil {
			return err
		}
	}
	return nil
}

// freeOutputProbeSizes are the sizes every symbol takes, in turn, when a
// deferred model is imported to see whether it has outputs of
// data-dependent size: the first import that succeeds decides (silero-vad's
// 16 kHz model imports at 512, not at 64, where its STFT window of 256
// does not fit).
var freeOutputProbeSizes = []int64{64, 512}

// counts reports whether the deferred model has outputs of data-dependent
// size at the first probe size it imports at; yes when it imports at none.
func (b *planBuilder) counts() bool {
	for _, size := range freeOutputProbeSizes {
		if yes, ok := b.countsAt(size); ok {
			return yes
		}
	}
	return true
}

// countsAt reports whether the deferred model, imported with every symbol
// at size, has outputs of data-dependent size (the import appends their
// counts to the model's outputs); ok is false when the import fails.
func (b *planBuilder) countsAt(size int64) (yes, ok bool) {
	if b.p.shapes == nil {
		return true, true
	}
	dims := map[string]int64{}
	for _, spec := range b.p.modelSyms {
		if spec.Sym != "" {
			dims[spec.Sym] = size
		}
	}
	shapes, err := b.p.shapes(b.p.modelDims(dims))
	if err != nil {
		return false, false
	}
	return len(shapes) > len(b.p.Outputs), true
}

func (b *planBuilder) mergeOutput(key string, oc modelrepo.OutputConfig, index map[string]int) error {
	j, ok := index[oc.Name]
	if !ok {
		return configError(b.cfgFile, key+".name", "the model has no output %q (outputs: %s)", oc.Name, b.p.outputNames())
	}
	out := &b.p.Outputs[j]
	if oc.DType != tensor.Invalid && oc.DType != out.DType {
		return configError(b.cfgFile, key+".dtype", "is %s, but the model's output %q is %s", oc.DType, oc.Name, out)
	}
	if oc.Dims == nil {
		return nil
	}
	if len(oc.Dims) != len(out.Dims) {
		return configError(b.cfgFile, key+".dims", "%s has rank %d, but the model's output %q is %s (rank %d)", oc.Dims, len(oc.Dims), oc.Name, out, len(out.Dims))
	}
	for d, cd := range oc.Dims {
		have, want := out.Dims[d], dimSpec{Size: cd.Size, Sym: cd.Sym}
		switch {
		case have == want:
		case have.Sym == unknownSym:
			out.Dims[d] = want // documents what the model file leaves open
		default:
			return configError(b.cfgFile, fmt.Sprintf("%s.dims[%d]", key, d), "is %s, but dim %d of the model's output %q is %s (%s)", want, d, oc.Name, have, out)
		}
	}
	return nil
}

// buildSymbols gives every served symbol its buckets, range and pad policy.
func (b *planBuilder) buildSymbols() error {
	p := b.p
	byName := map[string]*SymbolPlan{}
	for _, ms := range sortedKeys(p.modelSyms) {
		d := p.modelSyms[ms]
		if d.Sym == "" {
			if r, ok := b.g.SymbolRanges[ms]; ok && !r.Contains(d.Size) {
				return configError(b.cfgFile, "inputs", "the model's symbol %s is pinned to %d, outside its range %s", ms, d.Size, r)
			}
			continue
		}
		s := byName[d.Sym]
		if s == nil {
			s = &SymbolPlan{Name: d.Sym, Range: fxgraph.SymbolRange{Min: 0, Max: -1}, Batch: d.Sym == p.batchName}
			byName[d.Sym] = s
			p.Symbols = append(p.Symbols, s)
		}
		s.Model = append(s.Model, ms)
		if r, ok := b.g.SymbolRanges[ms]; ok {
			s.Range = intersect(s.Range, r)
		}
	}
	sort.Slice(p.Symbols, func(i, j int) bool { return p.Symbols[i].Name < p.Symbols[j].Name })
	combos := 1
	used := map[string]bool{}
	for _, s := range p.Symbols {
		if err := b.symbolBuckets(s, used); err != nil {
			return err
		}
		b.symbolPad(s, used)
		combos *= b.warmupBuckets(s)
		if combos > maxBucketCombinations {
			return configError(b.cfgFile, "buckets", "the symbols %s give more than %d bucket combinations; give fewer sizes", p.symbolNames(), maxBucketCombinations)
		}
	}
	for _, sym := range sortedKeys(b.cfg.Buckets) {
		if !used["buckets."+sym] {
			p.UnusedBuckets = append(p.UnusedBuckets, sym)
		}
	}
	for _, sym := range sortedKeys(b.cfg.Pad) {
		if !used["pad."+sym] {
			return configError(b.cfgFile, "pad."+sym, "no input has the symbol %s (symbols: %s)", sym, p.symbolNames())
		}
	}
	return nil
}

// warmupBuckets is how many of s's buckets an eager warmup compiles (the
// combination limit counts them): config.yaml's, or the defaults under
// warmup: eager; lazily compiled defaults count as one.
func (b *planBuilder) warmupBuckets(s *SymbolPlan) int {
	if !s.Defaulted || b.cfg.Warmup == modelrepo.WarmupEager {
		return len(s.Buckets)
	}
	return 1
}

// configNames are the names config.yaml may use for s: its served name,
// then the model's names for it.
func (s *SymbolPlan) configNames() []string { return append([]string{s.Name}, s.Model...) }

// symbolBuckets sets s.Buckets from config.yaml (checked against the range)
// or the default (clamped to it).
func (b *planBuilder) symbolBuckets(s *SymbolPlan, used map[string]bool) error {
	for _, name := range s.configNames() {
		sizes, ok := b.cfg.Buckets[name]
		if !ok {
			continue
		}
		used["buckets."+name] = true
		for _, size := range sizes {
			if !s.Range.Contains(size) {
				return configError(b.cfgFile, "buckets."+name, "size %d is outside the range %s the model allows for %s (its export's range constraint); use sizes in %s", size, s.Range, s.Name, s.Range)
			}
		}
		s.Buckets = slices.Clone(sizes)
		return nil
	}
	s.Defaulted = true
	s.Buckets = clampBuckets(defaultBuckets(), s.Range)
	if !s.Batch && b.cfg.Warmup != modelrepo.WarmupEager {
		// Compiled on first use: as many as the range allows. An eager
		// warmup keeps the batch's defaults (it compiles every combination).
		s.Buckets = defaultSymbolBuckets(s.Range)
	}
	return nil
}

// symbolPad sets s's pad policy from config.yaml's pad, else PadProbe.
func (b *planBuilder) symbolPad(s *SymbolPlan, used map[string]bool) {
	s.Pad, s.PadReason = PadProbe, "decided by the load-time probe"
	if b.p.dataDependent() {
		// An output whose size depends on the values (NonZero, Unique, ...)
		// would count the padding: every size runs exactly.
		s.Pad, s.PadReason = PadExact, "the model has outputs of data-dependent size"
		return
	}
	if why := wholeTensorQuantization(b.g); why != "" {
		// Padding (and other requests' rows) would move the quantization
		// range of every row: visible, though a probe may not see it.
		s.Pad, s.PadReason = PadExact, why
		return
	}
	for _, name := range s.configNames() {
		pad, ok := b.cfg.Pad[name]
		if !ok {
			continue
		}
		used["pad."+name] = true
		s.Pad, s.PadReason = PadExact, fmt.Sprintf("%s: pad.%s is false", b.cfgFile, name)
		if pad {
			s.Pad, s.PadReason = PadBuckets, fmt.Sprintf("%s: pad.%s is true", b.cfgFile, name)
		}
		return
	}
}

// intersect returns the sizes both ranges allow.
func intersect(a, b fxgraph.SymbolRange) fxgraph.SymbolRange {
	r := fxgraph.SymbolRange{Min: max(a.Min, b.Min), Max: a.Max}
	if r.Max < 0 || (b.Max >= 0 && b.Max < r.Max) {
		r.Max = b.Max
	}
	return r
}

// clampBuckets moves each size into r and drops duplicates.
func clampBuckets(sizes []int64, r fxgraph.SymbolRange) []int64 {
	var out []int64
	for _, s := range sizes {
		s = max(s, r.Min, 1)
		if r.Max >= 0 {
			s = min(s, r.Max)
		}
		if len(out) == 0 || s > out[len(out)-1] {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// wholeTensorQuantization says why the model's rows are not independent
// when it quantizes activations over a whole tensor at run time (ONNX
// DynamicQuantizeLinear's min/max over every element, DynamicQuantizeLSTM's
// over the whole batch), or "".
func wholeTensorQuantization(g *fxgraph.Graph) string {
	for _, n := range g.Nodes() {
		switch {
		case n.Op == fxgraph.XserveRNN && fxgraph.RNNQuantized(n):
			return "the model quantizes its recurrent state over the whole batch (DynamicQuantizeLSTM): padding and other requests' rows change every row's quantization"
		case n.Op == fxgraph.AtenMin || n.Op == fxgraph.AtenMax:
			return "the model takes the minimum or maximum of a whole tensor (DynamicQuantizeLinear's range): padding and other requests' rows change it"
		}
	}
	return ""
}
