package serving

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// defaultBuckets returns the bucket sizes of a symbol that config.yaml gives
// no buckets for.
func defaultBuckets() []int64 { return []int64{1, 2, 4, 8, 16, 32, 64} }

// maxBucketCombinations bounds the number of bucket combinations a model may
// have (the product of its symbols' bucket counts).
const maxBucketCombinations = 4096

// unknownSym marks an output dim whose size the server cannot relate to an
// input symbol (fxgraph.Unknown, or a symbol no input has).
const unknownSym = "?"

// dimSpec is one dim of a served tensor: a static size (Sym empty), a
// bucketed symbol, or unknownSym (outputs only).
type dimSpec struct {
	Size int64
	Sym  string
}

func (d dimSpec) String() string {
	if d.Sym != "" {
		return d.Sym
	}
	return strconv.FormatInt(d.Size, 10)
}

func (d dimSpec) isSymbol() bool { return d.Sym != "" && d.Sym != unknownSym }

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
	Dims  []dimSpec
	// pad is one element of the input's pad value in DType (inputs only).
	pad []byte
	// batchAxis is the index of the dim whose symbol is "batch", or -1 when
	// there is none or more than one.
	batchAxis int
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

// signature is a model version's served signature: the model file's inputs
// and outputs merged with config.yaml.
type signature struct {
	Inputs  []tensorSig
	Outputs []tensorSig
	// modelSyms maps each symbol of the model's inputs to what it is served
	// as: a symbol named in config.yaml (or the model's own name), or a static
	// size config.yaml pins it to.
	modelSyms map[string]dimSpec
	// Symbols are the bucketed symbols of the inputs, sorted.
	Symbols []string
	// Buckets gives each of Symbols its ascending bucket sizes.
	Buckets map[string][]int64
	// Defaulted lists the Symbols that got defaultBuckets.
	Defaulted []string
	// UnusedBuckets lists symbols config.yaml has buckets for that no input
	// has.
	UnusedBuckets []string
	// batchErr says why requests cannot be stacked along the batch symbol
	// (nil when they can).
	batchErr error
}

func (s *signature) inputNames() string {
	names := make([]string, len(s.Inputs))
	for i, in := range s.Inputs {
		names[i] = in.Name
	}
	return strings.Join(names, ", ")
}

func (s *signature) outputNames() string {
	names := make([]string, len(s.Outputs))
	for i, o := range s.Outputs {
		names[i] = o.Name
	}
	return strings.Join(names, ", ")
}

// configError is a load error about a config.yaml key.
func configError(file, key, format string, args ...any) error {
	return fmt.Errorf("serving: %s: %s: %s", file, key, fmt.Sprintf(format, args...))
}

// buildSignature merges the model's signature (graph placeholders and
// outputs) with cfg. cfgFile names config.yaml in errors. Config dims may
// name symbols for the model's symbolic dims (renaming them) or pin them to
// a size; dtypes and static dims must agree with the model. Every served
// symbol gets its buckets from cfg.Buckets, else defaultBuckets.
func buildSignature(g *fxgraph.Graph, cfg *modelrepo.Config, cfgFile string) (*signature, error) {
	ph := g.Placeholders()
	if len(ph) == 0 {
		return nil, fmt.Errorf("serving: the model has no inputs")
	}
	s := &signature{modelSyms: map[string]dimSpec{}}
	modelIn := map[string]int{}
	for i, p := range ph {
		modelIn[p.Target] = i
	}
	names := func(nodes []*fxgraph.Node) string {
		var out []string
		for _, n := range nodes {
			out = append(out, n.Target)
		}
		return strings.Join(out, ", ")
	}

	// Pass 1: what config.yaml says about the inputs binds model symbols.
	boundBy := map[string]string{} // model symbol -> config key that bound it
	bind := func(key, sym string, d dimSpec) error {
		if prev, ok := s.modelSyms[sym]; ok && prev != d {
			return configError(cfgFile, key, "is %s, but %s already makes the model's symbol %s %s", d, boundBy[sym], sym, prev)
		}
		s.modelSyms[sym] = d
		boundBy[sym] = key
		return nil
	}
	cfgIn := map[string]modelrepo.InputConfig{}
	for i, ic := range cfg.Inputs {
		key := fmt.Sprintf("inputs[%d]", i)
		j, ok := modelIn[ic.Name]
		if !ok {
			return nil, configError(cfgFile, key+".name", "the model has no input %q (inputs: %s)", ic.Name, names(ph))
		}
		cfgIn[ic.Name] = ic
		m := ph[j].Val()
		if ic.DType != tensor.Invalid && ic.DType != m.DType {
			return nil, configError(cfgFile, key+".dtype", "is %s, but the model's input %q is %s", ic.DType, ic.Name, m)
		}
		if ic.Dims == nil {
			continue
		}
		if len(ic.Dims) != len(m.Shape) {
			return nil, configError(cfgFile, key+".dims", "%s has rank %d, but the model's input %q is %s (rank %d)", ic.Dims, len(ic.Dims), ic.Name, m, len(m.Shape))
		}
		for d, md := range m.Shape {
			cd := ic.Dims[d]
			dkey := fmt.Sprintf("%s.dims[%d]", key, d)
			switch {
			case md.IsStatic() && cd.IsStatic() && cd.Size != md.Size:
				return nil, configError(cfgFile, dkey, "is %d, but dim %d of the model's input %q is %d (%s)", cd.Size, d, ic.Name, md.Size, m)
			case md.IsStatic() && !cd.IsStatic():
				return nil, configError(cfgFile, dkey, "is symbol %s, but dim %d of the model's input %q is static %d (%s)", cd.Sym, d, ic.Name, md.Size, m)
			case !md.IsStatic():
				if err := bind(dkey, md.Sym, dimSpec{Size: cd.Size, Sym: cd.Sym}); err != nil {
					return nil, err
				}
			}
		}
	}
	// Pass 2: every symbol config.yaml left alone keeps its model name.
	for _, p := range ph {
		m := p.Val()
		if m.DType.Size() == 0 {
			return nil, fmt.Errorf("serving: input %q has dtype %s, which cannot be served", p.Target, m.DType)
		}
		for d, md := range m.Shape {
			if md.IsStatic() {
				continue
			}
			if md.Sym == unknownSym {
				return nil, fmt.Errorf("serving: dim %d of input %q has no size or symbol; give it a symbol in %s (inputs: dims)", d, p.Target, cfgFile)
			}
			if _, ok := s.modelSyms[md.Sym]; !ok {
				s.modelSyms[md.Sym] = dimSpec{Sym: md.Sym}
			}
		}
	}

	syms := map[string]bool{}
	for _, p := range ph {
		m := p.Val()
		in := tensorSig{Name: p.Target, DType: m.DType, Dims: make([]dimSpec, len(m.Shape))}
		for d, md := range m.Shape {
			if md.IsStatic() {
				in.Dims[d] = dimSpec{Size: md.Size}
				continue
			}
			in.Dims[d] = s.modelSyms[md.Sym]
			if in.Dims[d].Sym != "" {
				syms[in.Dims[d].Sym] = true
			}
		}
		pad := tensor.New(m.DType, 1)
		pad.SetFloat64(0, cfgIn[p.Target].PadValue)
		in.pad = pad.Data
		in.batchAxis = batchAxis(in.Dims)
		s.Inputs = append(s.Inputs, in)
	}

	if err := s.buildOutputs(g, cfg, cfgFile, syms); err != nil {
		return nil, err
	}

	s.Buckets = map[string][]int64{}
	combos := 1
	for sym := range syms {
		s.Symbols = append(s.Symbols, sym)
	}
	sort.Strings(s.Symbols)
	for _, sym := range s.Symbols {
		sizes, ok := cfg.Buckets[sym]
		if !ok {
			sizes = defaultBuckets()
			s.Defaulted = append(s.Defaulted, sym)
		}
		s.Buckets[sym] = slices.Clone(sizes)
		combos *= len(sizes)
		if combos > maxBucketCombinations {
			return nil, configError(cfgFile, "buckets", "the symbols %s give more than %d bucket combinations; give fewer sizes", strings.Join(s.Symbols, ", "), maxBucketCombinations)
		}
	}
	if err := s.checkRanges(g, cfgFile); err != nil {
		return nil, err
	}
	for sym := range cfg.Buckets {
		if !syms[sym] {
			s.UnusedBuckets = append(s.UnusedBuckets, sym)
		}
	}
	sort.Strings(s.UnusedBuckets)
	s.batchErr = s.checkBatchable()
	return s, nil
}

// checkRanges rejects bucket sizes (and pinned sizes) outside the range a
// model symbol may take (torch.export's range constraints, in
// Graph.SymbolRanges): the program was only traced as valid for that range.
func (s *signature) checkRanges(g *fxgraph.Graph, cfgFile string) error {
	names := make([]string, 0, len(g.SymbolRanges))
	for ms := range g.SymbolRanges {
		names = append(names, ms)
	}
	sort.Strings(names)
	for _, ms := range names {
		r := g.SymbolRanges[ms]
		d, ok := s.modelSyms[ms]
		if !ok {
			continue
		}
		if d.Sym == "" {
			if !r.Contains(d.Size) {
				return configError(cfgFile, "inputs", "the model's symbol %s is pinned to %d, outside its range %s", ms, d.Size, r)
			}
			continue
		}
		for _, size := range s.Buckets[d.Sym] {
			if !r.Contains(size) {
				return configError(cfgFile, "buckets."+d.Sym, "size %d is outside the range %s the model allows for %s (its export's range constraint); use sizes in %s", size, r, d.Sym, r)
			}
		}
	}
	return nil
}

// buildOutputs resolves the outputs' dims through modelSyms and merges the
// outputs of cfg; syms are the served input symbols.
func (s *signature) buildOutputs(g *fxgraph.Graph, cfg *modelrepo.Config, cfgFile string, syms map[string]bool) error {
	outs := g.Outputs()
	index := map[string]int{}
	for i, o := range outs {
		m := o.Val()
		out := tensorSig{Name: g.OutputName(i), DType: m.DType, Dims: make([]dimSpec, len(m.Shape))}
		for d, md := range m.Shape {
			switch {
			case md.IsStatic():
				out.Dims[d] = dimSpec{Size: md.Size}
			default:
				if spec, ok := s.modelSyms[md.Sym]; ok {
					out.Dims[d] = spec
				} else {
					out.Dims[d] = dimSpec{Sym: unknownSym}
				}
			}
		}
		index[out.Name] = i
		s.Outputs = append(s.Outputs, out)
	}
	for i, oc := range cfg.Outputs {
		key := fmt.Sprintf("outputs[%d]", i)
		j, ok := index[oc.Name]
		if !ok {
			return configError(cfgFile, key+".name", "the model has no output %q (outputs: %s)", oc.Name, s.outputNames())
		}
		out := &s.Outputs[j]
		if oc.DType != tensor.Invalid && oc.DType != out.DType {
			return configError(cfgFile, key+".dtype", "is %s, but the model's output %q is %s", oc.DType, oc.Name, out)
		}
		if oc.Dims == nil {
			continue
		}
		if len(oc.Dims) != len(out.Dims) {
			return configError(cfgFile, key+".dims", "%s has rank %d, but the model's output %q is %s (rank %d)", oc.Dims, len(oc.Dims), oc.Name, out, len(out.Dims))
		}
		for d, cd := range oc.Dims {
			dkey := fmt.Sprintf("%s.dims[%d]", key, d)
			have := out.Dims[d]
			want := dimSpec{Size: cd.Size, Sym: cd.Sym}
			switch {
			case have == want:
			case have.Sym == unknownSym && want.Sym == "":
				out.Dims[d] = want // config.yaml knows the size the model file does not say
			case have.Sym == unknownSym && syms[want.Sym]:
				out.Dims[d] = want // follows an input symbol: sliced like it
			case have.Sym == unknownSym:
				return configError(cfgFile, dkey, "is symbol %s, which no input has (input symbols: %s); an output dim can only follow an input symbol", want.Sym, strings.Join(sortedKeys(syms), ", "))
			default:
				return configError(cfgFile, dkey, "is %s, but dim %d of the model's output %q is %s (%s)", want, d, oc.Name, have, out)
			}
		}
	}
	for i := range s.Outputs {
		s.Outputs[i].batchAxis = batchAxis(s.Outputs[i].Dims)
	}
	return nil
}

// batchAxis returns the index of the one dim with the batch symbol, or -1.
func batchAxis(dims []dimSpec) int {
	axis := -1
	for i, d := range dims {
		if d.Sym == modelrepo.BatchSymbol {
			if axis >= 0 {
				return -1
			}
			axis = i
		}
	}
	return axis
}

// checkBatchable says why requests cannot be stacked along the batch symbol
// into one execution: every input and output needs exactly one batch dim.
func (s *signature) checkBatchable() error {
	for _, in := range s.Inputs {
		if in.batchAxis < 0 {
			return fmt.Errorf("input %q (%s) has no single %s dim", in.Name, &in, modelrepo.BatchSymbol)
		}
	}
	for _, o := range s.Outputs {
		if o.batchAxis < 0 {
			return fmt.Errorf("output %q (%s) has no single %s dim", o.Name, &o, modelrepo.BatchSymbol)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// bucket is one combination of bucket sizes, one per served symbol, and the
// executable compiled for it.
type bucket struct {
	// name reads "batch=4,sequence=128" (symbols sorted), or "static" for a
	// model without symbols.
	name string
	// dims gives each served symbol its size.
	dims map[string]int64
	// modelDims gives each of the model's input symbols its size: what the
	// graph is lowered with.
	modelDims map[string]int64
	// inShapes are the inputs' shapes in this bucket.
	inShapes [][]int64
	// queueKey names the batching queue of the bucket's requests (see
	// version.queueKey); set when the version batches.
	queueKey string

	mu      sync.Mutex   // guards exe, pending
	exe     *Executable  // nil until compiled
	pending *compileCall // the compile in flight, nil when none
}

// compileCall is one compile of a bucket that concurrent requests share.
type compileCall struct {
	done chan struct{} // closed when exe or err is set
	exe  *Executable
	err  error
}

// bucketName formats a bucket's symbol sizes.
func bucketName(symbols []string, dims map[string]int64) string {
	if len(symbols) == 0 {
		return "static"
	}
	parts := make([]string, len(symbols))
	for i, sym := range symbols {
		parts[i] = sym + "=" + strconv.FormatInt(dims[sym], 10)
	}
	return strings.Join(parts, ",")
}

// newBucket builds the bucket for dims (a size for every symbol of s).
func (s *signature) newBucket(dims map[string]int64) *bucket {
	b := &bucket{name: bucketName(s.Symbols, dims), dims: dims, modelDims: map[string]int64{}}
	for msym, spec := range s.modelSyms {
		if spec.Sym != "" {
			b.modelDims[msym] = dims[spec.Sym]
		} else {
			b.modelDims[msym] = spec.Size
		}
	}
	for _, in := range s.Inputs {
		b.inShapes = append(b.inShapes, s.shapeIn(in.Dims, dims))
	}
	return b
}

// shapeIn resolves dims with the symbol sizes of a bucket or request.
func (s *signature) shapeIn(dims []dimSpec, sizes map[string]int64) []int64 {
	shape := make([]int64, len(dims))
	for i, d := range dims {
		if d.Sym != "" {
			shape[i] = sizes[d.Sym]
		} else {
			shape[i] = d.Size
		}
	}
	return shape
}

// allBuckets returns every bucket combination, symbols in sorted order and
// sizes ascending (the last symbol varies fastest).
func (s *signature) allBuckets() []*bucket {
	var out []*bucket
	dims := map[string]int64{}
	var rec func(i int)
	rec = func(i int) {
		if i == len(s.Symbols) {
			out = append(out, s.newBucket(maps.Clone(dims)))
			return
		}
		for _, n := range s.Buckets[s.Symbols[i]] {
			dims[s.Symbols[i]] = n
			rec(i + 1)
		}
	}
	rec(0)
	return out
}
