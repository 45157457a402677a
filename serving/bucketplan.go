package serving

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// ShapeFunc returns a model's output shapes when its input symbols (the
// model's own names) take the given sizes. The server's is the IR's shape
// propagation (lower.Lowerer.OutputShapes); it needs no compile.
type ShapeFunc func(modelDims map[string]int64) ([][]int64, error)

// PadPolicy says how the requests' sizes of a symbol map to executables.
type PadPolicy string

// Pad policies.
const (
	// PadProbe is undecided: the load-time probe compares a padded and an
	// exact run and sets PadBuckets or PadExact.
	PadProbe PadPolicy = "probe"
	// PadBuckets pads a request up to the smallest bucket that holds it and
	// slices every output back: padding does not change the valid region.
	PadBuckets PadPolicy = "pad"
	// PadExact runs each distinct size in an executable of its own, compiled
	// on first use and kept in a bounded cache.
	PadExact PadPolicy = "exact"
)

// SymbolPlan is one served symbol of a model version.
type SymbolPlan struct {
	// Name is the served name ("batch", "sequence", or the model's own).
	Name string
	// Model lists the model's symbols served as this one.
	Model []string
	// Batch marks the batch symbol: requests stack along it.
	Batch bool
	// Buckets are the ascending bucket sizes; with PadExact the largest
	// bounds the sizes served.
	Buckets []int64
	// Defaulted says Buckets are the defaults, not config.yaml's.
	Defaulted bool
	// Range is the sizes the model allows (torch.export range constraints).
	Range fxgraph.SymbolRange
	// Pad is the symbol's pad policy and PadReason why.
	Pad       PadPolicy
	PadReason string
	// Stride, when above 1, is a step the model's shapes need: the default
	// buckets at sizes the IR's shape propagation refused were dropped and
	// the rest are its multiples (learnSizes); a size above the largest
	// bucket runs at the next multiple when padding is invisible. Learned
	// says what was dropped and why.
	Stride  int64
	Learned string
}

// Role reads "batch" or "dynamic".
func (s *SymbolPlan) Role() string {
	if s.Batch {
		return "batch"
	}
	return "dynamic"
}

// BucketPlan owns a model version's shape buckets: its served symbols and
// where each appears, which one is the batch, the bucket sizes and pad
// policy of each, the inputs' pad values; it chooses the executable sizes
// of a request, pads inputs into them and slices every output back to its
// exact shape at the request's sizes (from the IR's shape propagation,
// whatever the model file declares). Nothing else computes buckets,
// padding or slicing. Its methods are safe for concurrent use once the
// load-time probe has set the pad policies.
type BucketPlan struct {
	Inputs  []tensorSig
	Outputs []tensorSig
	// Symbols are the served symbols, sorted by name.
	Symbols []*SymbolPlan
	// UnusedBuckets lists symbols config.yaml has buckets for that no input
	// has.
	UnusedBuckets []string

	// modelSyms maps each symbol of the model's inputs to what it is served
	// as: a served symbol, or a static size config.yaml pins it to.
	modelSyms map[string]dimSpec
	// derived are the model's derived symbols (Graph.SymbolExprs): input
	// dims that are expressions of its symbols, evaluated, not served.
	derived   map[string]*fxgraph.SymExpr
	batchName string // the batch symbol's served name, "" without one
	// bounded lists the outputs of data-dependent size and their count
	// outputs (the graph's last outputs, not served): executions return them
	// padded to a bound and trim holds them to their counts.
	bounded []fxgraph.BoundedOutput
	// freeOutputs marks the outputs of a deferred model (one imported per
	// input size, fxgraph.Graph.IsDeferred) with a declared dim that no
	// input gives, when an import at a probe size has outputs of
	// data-dependent size: their size follows the data. Each size's import
	// makes them bounded outputs, which its executable trims
	// (engine.Executable.Trim).
	freeOutputs map[int]bool
	// outBatchAxis gives each output the axis its rows stack along (set by
	// findBatchAxes); batchErr says why requests cannot be stacked.
	outBatchAxis []int
	batchErr     error

	shapes     ShapeFunc
	mu         sync.Mutex // guards shapeCache
	shapeCache map[string][][]int64
}

// shapeCacheSize bounds the exact request shapes whose output shapes a plan
// remembers; the cache starts over when full.
const shapeCacheSize = 4096

func (p *BucketPlan) symbolNames() string {
	names := make([]string, len(p.Symbols))
	for i, s := range p.Symbols {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func (p *BucketPlan) inputNames() string  { return tensorNames(p.Inputs) }
func (p *BucketPlan) outputNames() string { return tensorNames(p.Outputs) }

func tensorNames(ts []tensorSig) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

func (p *BucketPlan) inputIndex(name string) int {
	for i, in := range p.Inputs {
		if in.Name == name {
			return i
		}
	}
	return -1
}

func (p *BucketPlan) outputIndex(name string) int {
	for i, o := range p.Outputs {
		if o.Name == name {
			return i
		}
	}
	return -1
}

// batch returns the batch symbol, or nil.
func (p *BucketPlan) batch() *SymbolPlan {
	for _, s := range p.Symbols {
		if s.Batch {
			return s
		}
	}
	return nil
}

// symbol returns the served symbol called name, or nil.
func (p *BucketPlan) symbol(name string) *SymbolPlan {
	for _, s := range p.Symbols {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// hasExact reports whether some symbol is served at exact sizes.
func (p *BucketPlan) hasExact() bool {
	for _, s := range p.Symbols {
		if s.Pad == PadExact {
			return true
		}
	}
	return false
}

// bind checks a request's inputs (in signature order) against the
// signature and returns each served symbol's size; a nil input (a
// sequence's state, which the server holds) is skipped. Errors wrap
// ErrInvalidInput and name the input and dim.
func (p *BucketPlan) bind(inputs []*tensor.Tensor) (map[string]int64, error) {
	dims := map[string]int64{}
	from := map[string]symSource{}
	for i := range p.Inputs {
		in, t := &p.Inputs[i], inputs[i]
		if t == nil {
			continue // not given (a sequence's state): bound from the others
		}
		if t.DType != in.DType {
			return nil, fmt.Errorf("%w: input %q has dtype %s, model expects %s", ErrInvalidInput, in.Name, t.DType, in.DType)
		}
		if len(t.Shape) != len(in.Dims) {
			return nil, fmt.Errorf("%w: input %q has shape %s (rank %d), model expects rank %d: %s", ErrInvalidInput, in.Name, tensor.ShapeString(t.Shape), len(t.Shape), len(in.Dims), formatDims(in.Dims))
		}
		n := tensor.NumElements(t.Shape)
		if n < 0 || int64(len(t.Data)) != n*int64(in.DType.Size()) {
			return nil, fmt.Errorf("%w: input %q has shape %s but %d bytes of data, want %d", ErrInvalidInput, in.Name, tensor.ShapeString(t.Shape), len(t.Data), n*int64(in.DType.Size()))
		}
		for d, spec := range in.Dims {
			got := t.Shape[d]
			if spec.Expr != nil {
				continue // checked below, once the plain symbols are bound
			}
			if spec.Sym == "" {
				if got != spec.Size {
					return nil, fmt.Errorf("%w: input %q dim %d is %d, model expects %d (shape %s)", ErrInvalidInput, in.Name, d, got, spec.Size, formatDims(in.Dims))
				}
				continue
			}
			if prev, ok := dims[spec.Sym]; ok && prev != got {
				return nil, fmt.Errorf("%w: input %q dim %d (%s) is %d, but %s (%s) is %d", ErrInvalidInput, in.Name, d, spec.Sym, got, from[spec.Sym], spec.Sym, prev)
			}
			if _, ok := dims[spec.Sym]; !ok {
				dims[spec.Sym] = got
				from[spec.Sym] = symSource{input: in.Name, dim: d}
			}
		}
	}
	if err := p.bindDerived(inputs, dims, from); err != nil {
		return nil, err
	}
	return dims, nil
}

// symSource is where bind found a symbol's size, for its errors (formatted
// only when one is made: every request binds its symbols).
type symSource struct {
	input string
	dim   int
	expr  string // the dim's expression when the symbol was solved from it
	size  int64  // that dim's size
}

func (s symSource) String() string {
	if s.expr == "" {
		return fmt.Sprintf("input %q dim %d", s.input, s.dim)
	}
	return fmt.Sprintf("input %q dim %d (%s = %d)", s.input, s.dim, s.expr, s.size)
}

// bindDerived checks every input dim that is an expression of symbols
// against the sizes bound from the other inputs, solving a symbol that only
// such a dim carries where the expression allows (s + c, c * s).
func (p *BucketPlan) bindDerived(inputs []*tensor.Tensor, dims map[string]int64, from map[string]symSource) error {
	for i := range p.Inputs {
		in := &p.Inputs[i]
		for d, spec := range in.Dims {
			if spec.Expr == nil || inputs[i] == nil {
				continue
			}
			got := inputs[i].Shape[d]
			for _, s := range spec.Expr.Symbols() {
				if _, ok := dims[s]; ok {
					continue
				}
				sym, v, ok := spec.Expr.Solve(got)
				if !ok || sym != s {
					return fmt.Errorf("%w: input %q dim %d is %s, whose symbol %s no input gives on its own", ErrInvalidInput, in.Name, d, spec.Sym, s)
				}
				dims[s], from[s] = v, symSource{input: in.Name, dim: d, expr: spec.Sym, size: got}
			}
			want, err := spec.Expr.Eval(dims)
			if err != nil {
				return fmt.Errorf("%w: input %q dim %d: %v", ErrInvalidInput, in.Name, d, err)
			}
			if got != want {
				var parts []string
				for _, s := range spec.Expr.Symbols() {
					parts = append(parts, fmt.Sprintf("%s is %d from %s", s, dims[s], from[s]))
				}
				return fmt.Errorf("%w: input %q dim %d (%s) is %d, but %s is %d (%s)", ErrInvalidInput, in.Name, d, spec.Sym, got, spec.Sym, want, strings.Join(parts, ", "))
			}
		}
	}
	return nil
}

// choose returns the sizes a request of the given sizes executes at: per
// symbol the smallest bucket that holds it (PadBuckets) or its own size
// (PadExact, or a size above the largest bucket: an executable of its own,
// compiled on first use within the compile budget). A size outside the
// model's range where it cannot be padded into it, or above the largest
// bucket of a symbol whose buckets config.yaml gives, is ErrNoBucket.
func (p *BucketPlan) choose(dims map[string]int64) (map[string]int64, error) {
	exec := make(map[string]int64, len(p.Symbols))
	for _, s := range p.Symbols {
		n := dims[s.Name]
		var err error
		if n > s.Buckets[len(s.Buckets)-1] {
			exec[s.Name], err = p.aboveBuckets(s, n)
		} else {
			exec[s.Name], err = p.withinBuckets(s, n)
		}
		if err != nil {
			return nil, err
		}
	}
	return exec, nil
}

// aboveBuckets is choose for a size above s's largest bucket: its own size
// (the next multiple of a learned stride where padding is invisible) when
// the buckets are the defaults and the model's range holds it.
func (p *BucketPlan) aboveBuckets(s *SymbolPlan, n int64) (int64, error) {
	top := s.Buckets[len(s.Buckets)-1]
	switch {
	case !s.Defaulted || !s.Range.Contains(n):
		return 0, fmt.Errorf("%w: %s (%s) is %d, the largest bucket is %d (buckets: %v%s)", ErrNoBucket, p.origin(s.Name), s.Name, n, top, s.Buckets, p.rangeNote(s, n))
	case s.Stride <= 1 || n%s.Stride == 0:
		return n, nil
	case s.Pad == PadBuckets:
		return (n + s.Stride - 1) / s.Stride * s.Stride, nil
	}
	return 0, fmt.Errorf("%w: %s (%s) is %d; the model's shapes need a multiple of %d there (%s), and padding changes its outputs", ErrNoBucket, p.origin(s.Name), s.Name, n, s.Stride, s.Learned)
}

// withinBuckets is choose for a size up to s's largest bucket.
func (p *BucketPlan) withinBuckets(s *SymbolPlan, n int64) (int64, error) {
	switch {
	case s.Pad == PadExact && !s.Range.Contains(n):
		return 0, fmt.Errorf("%w: %s (%s) is %d, outside the range %s the model allows for it (served at exact sizes: padding would change the outputs)", ErrNoBucket, p.origin(s.Name), s.Name, n, s.Range)
	case s.Pad == PadExact:
		return n, nil
	}
	i := sort.Search(len(s.Buckets), func(i int) bool { return s.Buckets[i] >= n })
	return s.Buckets[i], nil
}

// rangeNote says why a size above the largest bucket is refused.
func (p *BucketPlan) rangeNote(s *SymbolPlan, n int64) string {
	if !s.Range.Contains(n) {
		return fmt.Sprintf("; the model allows %s for it", s.Range)
	}
	return "; config.yaml's buckets bound it"
}

// origin names the first input dim that has the served symbol sym.
func (p *BucketPlan) origin(sym string) string {
	for _, in := range p.Inputs {
		for d, spec := range in.Dims {
			if spec.Sym == sym {
				return fmt.Sprintf("input %q dim %d", in.Name, d)
			}
		}
	}
	return "symbol " + sym
}

// keyName formats executable sizes: "batch=4,sequence=128" (symbols
// sorted), or "static" for a model without symbols.
func (p *BucketPlan) keyName(dims map[string]int64) string {
	if len(p.Symbols) == 0 {
		return "static"
	}
	parts := make([]string, len(p.Symbols))
	for i, s := range p.Symbols {
		parts[i] = s.Name + "=" + strconv.FormatInt(dims[s.Name], 10)
	}
	return strings.Join(parts, ",")
}

// queueKey names the batching queue of requests executing at exec: the
// prefix and exec's sizes of every symbol but the batch.
func (p *BucketPlan) queueKey(prefix string, exec map[string]int64) string {
	var parts []string
	for _, s := range p.Symbols {
		if !s.Batch {
			parts = append(parts, s.Name+"="+strconv.FormatInt(exec[s.Name], 10))
		}
	}
	if len(parts) == 0 {
		return prefix
	}
	return prefix + "/" + strings.Join(parts, ",")
}

// modelDims maps served sizes to the model's own symbols (pinned ones
// included): what the graph is specialized with.
func (p *BucketPlan) modelDims(dims map[string]int64) map[string]int64 {
	md := make(map[string]int64, len(p.modelSyms))
	for ms, spec := range p.modelSyms {
		if spec.Sym != "" {
			md[ms] = dims[spec.Sym]
		} else {
			md[ms] = spec.Size
		}
	}
	for name, e := range p.derived {
		md[name], _ = e.Eval(md) // the model's symbols, all set above
	}
	return md
}

// inputShape resolves input i's dims with the given symbol sizes.
func (p *BucketPlan) inputShape(i int, dims map[string]int64) []int64 {
	in := &p.Inputs[i]
	shape := make([]int64, len(in.Dims))
	for d, spec := range in.Dims {
		switch {
		case spec.Expr != nil:
			shape[d], _ = spec.Expr.Eval(dims) // every symbol is served: bound
		case spec.Sym != "":
			shape[d] = dims[spec.Sym]
		default:
			shape[d] = spec.Size
		}
	}
	return shape
}

// outputShapes returns every output's exact shape at the given served
// sizes, from the ShapeFunc, remembered per distinct sizes.
func (p *BucketPlan) outputShapes(dims map[string]int64) ([][]int64, error) {
	key := p.keyName(dims)
	p.mu.Lock()
	shapes, ok := p.shapeCache[key]
	p.mu.Unlock()
	if ok {
		return shapes, nil
	}
	shapes, err := p.shapes(p.modelDims(dims))
	if err != nil {
		return nil, fmt.Errorf("serving: output shapes at %s: %w", key, err)
	}
	if len(p.bounded) > 0 {
		shapes = shapes[:len(shapes)-len(p.bounded)] // the count outputs come last
	} else if len(p.freeOutputs) > 0 && len(shapes) > len(p.Outputs) {
		shapes = shapes[:len(p.Outputs)] // the import at these sizes added count outputs, last
	}
	if len(shapes) != len(p.Outputs) {
		return nil, fmt.Errorf("serving: output shapes at %s: %d shapes for %d outputs", key, len(shapes), len(p.Outputs))
	}
	p.mu.Lock()
	if len(p.shapeCache) >= shapeCacheSize {
		p.shapeCache = map[string][][]int64{}
	}
	p.shapeCache[key] = shapes
	p.mu.Unlock()
	return shapes, nil
}

// baseDims gives every symbol its smallest bucket: the sizes the probes and
// the batch-axis check hold the other symbols at.
func (p *BucketPlan) baseDims() map[string]int64 {
	dims := make(map[string]int64, len(p.Symbols))
	for _, s := range p.Symbols {
		dims[s.Name] = s.Buckets[0]
	}
	return dims
}

// findBatchAxes finds the axis each output's rows stack along: the one dim
// whose size is the batch size at two batch sizes while every other dim
// stays. Without it (or without a batch symbol) requests run one by one,
// and batchErr says why.
func (p *BucketPlan) findBatchAxes() {
	if p.dataDependent() {
		p.batchErr = fmt.Errorf("the model has outputs of data-dependent size, which one execution cannot split between requests")
		return
	}
	b := p.batch()
	if b == nil {
		p.batchErr = fmt.Errorf("no input has a batch dim (a symbol that is the leading dim of every input, or config.yaml's batch_symbol)")
		return
	}
	if b.Pad != PadBuckets {
		p.batchErr = fmt.Errorf("%s is served at exact sizes (%s)", b.Name, b.PadReason)
		return
	}
	for _, in := range p.Inputs {
		if n := countSym(in.Dims, b.Name); n != 1 {
			p.batchErr = fmt.Errorf("input %q (%s) has %d %s dims, want 1", in.Name, &in, n, b.Name)
			return
		}
	}
	lo := max(b.Range.Min, 1)
	hi := lo + 1
	if !b.Range.Contains(hi) {
		p.batchErr = fmt.Errorf("%s can only be %d", b.Name, lo)
		return
	}
	// The other symbols at a size of at least 3 where a bucket allows, so
	// that an output that folds them into the batch dim shows it.
	dims := p.baseDims()
	for _, s := range p.Symbols {
		i := sort.Search(len(s.Buckets), func(i int) bool { return s.Buckets[i] >= 3 })
		dims[s.Name] = s.Buckets[min(i, len(s.Buckets)-1)]
	}
	dims[b.Name] = lo
	a, err := p.outputShapes(maps.Clone(dims))
	if err == nil {
		dims[b.Name] = hi
		var c [][]int64
		c, err = p.outputShapes(dims)
		if err == nil {
			p.outBatchAxis, err = batchAxes(p.Outputs, a, c, lo, hi)
		}
	}
	p.batchErr = err
}

// batchAxes returns, per output, the one axis whose size is lo in a and hi
// in c while every other dim is the same.
func batchAxes(outs []tensorSig, a, c [][]int64, lo, hi int64) ([]int, error) {
	axes := make([]int, len(outs))
	for k := range outs {
		axes[k] = -1
		if len(a[k]) != len(c[k]) {
			return nil, fmt.Errorf("output %q changes rank with the batch size (%v, %v)", outs[k].Name, a[k], c[k])
		}
		for d := range a[k] {
			switch {
			case a[k][d] == c[k][d]:
			case a[k][d] == lo && c[k][d] == hi && axes[k] < 0:
				axes[k] = d
			default:
				return nil, fmt.Errorf("output %q does not stack along one batch dim (shape %v at batch %d, %v at %d)", outs[k].Name, a[k], lo, c[k], hi)
			}
		}
		if axes[k] < 0 {
			return nil, fmt.Errorf("output %q has no batch dim (shape %v at batch %d and %d)", outs[k].Name, a[k], lo, hi)
		}
	}
	return axes, nil
}

func countSym(dims []dimSpec, sym string) int {
	n := 0
	for _, d := range dims {
		if d.Sym == sym {
			n++
		}
	}
	return n
}

// buckets returns every combination of bucket sizes (symbols in sorted
// order, the last varying fastest): what eager warmup compiles.
func (p *BucketPlan) buckets() []map[string]int64 {
	var out []map[string]int64
	dims := map[string]int64{}
	var rec func(i int)
	rec = func(i int) {
		if i == len(p.Symbols) {
			out = append(out, maps.Clone(dims))
			return
		}
		for _, n := range p.Symbols[i].Buckets {
			dims[p.Symbols[i].Name] = n
			rec(i + 1)
		}
	}
	rec(0)
	return out
}

// rowOffsets returns where each request's rows start along the batch dim
// of a batch executing at exec: given (the batcher's offsets) or, when
// nil, stacked in order. It checks that the requests (their sizes in dims)
// fit exec and that their rows do not overlap.
func (p *BucketPlan) rowOffsets(exec map[string]int64, dims []map[string]int64, given []int64) ([]int64, error) {
	if len(dims) > 1 && p.batchErr != nil {
		return nil, fmt.Errorf("cannot run %d requests in one batch: %w", len(dims), p.batchErr)
	}
	if given != nil && len(given) != len(dims) {
		return nil, fmt.Errorf("%d offsets for %d requests", len(given), len(dims))
	}
	offsets := make([]int64, len(dims))
	var rows int64 // the end of the rows placed so far
	for i, d := range dims {
		offsets[i] = rows
		if given != nil {
			if given[i] < rows {
				return nil, fmt.Errorf("request %d starts at row %d, inside the rows before it (which end at %d)", i, given[i], rows)
			}
			offsets[i] = given[i]
		}
		for _, s := range p.Symbols {
			n := d[s.Name]
			if s.Batch {
				rows = offsets[i] + n
				n = rows
			}
			if n > exec[s.Name] || (s.Pad == PadExact && !s.Batch && n != exec[s.Name]) {
				return nil, fmt.Errorf("requests do not fit bucket %s (%s is %d)", p.keyName(exec), s.Name, n)
			}
		}
	}
	return offsets, nil
}

// assemble builds input i at exec's shape from the requests' tensors
// (srcs), each written at its row offset along the batch dim, the rest
// filled with the input's pad value. One request whose tensor has exec's
// shape is returned as is.
func (p *BucketPlan) assemble(i int, exec map[string]int64, srcs []*tensor.Tensor, offsets []int64) *tensor.Tensor {
	in := &p.Inputs[i]
	shape := p.inputShape(i, exec)
	if len(srcs) == 1 && equalShape(srcs[0].Shape, shape) {
		return srcs[0] // fits the bucket exactly: no copy
	}
	dst := tensor.New(in.DType, shape...)
	fill(dst.Data, in.pad)
	elem := int64(in.DType.Size())
	axis := p.inputBatchAxis(i)
	for ci, src := range srcs {
		dstOff := make([]int64, len(shape))
		if offsets[ci] != 0 && axis >= 0 {
			dstOff[axis] = offsets[ci]
		}
		copyBlock(dst.Data, shape, dstOff, src.Data, src.Shape, make([]int64, len(shape)), src.Shape, elem)
	}
	return dst
}

// inputBatchAxis returns the dim of input i that is the batch symbol, or
// -1 (no batch symbol, or an input without it).
func (p *BucketPlan) inputBatchAxis(i int) int {
	axis := -1
	for d, spec := range p.Inputs[i].Dims {
		if spec.Sym == p.batchName && p.batchName != "" {
			axis = d
		}
	}
	return axis
}

// extract cuts a request's output k out of the executed output: the box of
// the request's exact shape (want), starting at its row offset along the
// output's batch axis when several requests ran. An exact shape the
// executed output cannot hold means padding was not invisible: an error,
// never a wrong answer.
func (p *BucketPlan) extract(k int, out *tensor.Tensor, want []int64, offset int64, batched bool) (*tensor.Tensor, error) {
	axis := -1
	if batched && p.outBatchAxis != nil {
		axis = p.outBatchAxis[k]
	}
	if !batched && equalShape(want, out.Shape) {
		return out, nil
	}
	return p.extractAlong(k, out, want, axis, offset)
}

// extractAlong cuts the box of shape want out of output k's executed
// value, starting at offset along axis (-1: at the origin).
func (p *BucketPlan) extractAlong(k int, out *tensor.Tensor, want []int64, axis int, offset int64) (*tensor.Tensor, error) {
	off := make([]int64, len(want))
	if p.isBounded(k) {
		return out, nil // trimmed to its count; every size runs exactly
	}
	if len(want) != len(out.Shape) {
		return nil, fmt.Errorf("serving: output %q has shape %s, the request's shape %s", p.Outputs[k].Name, tensor.ShapeString(out.Shape), tensor.ShapeString(want))
	}
	if axis >= 0 {
		off[axis] = offset
	}
	for d := range want {
		if off[d]+want[d] > out.Shape[d] {
			return nil, fmt.Errorf("serving: output %q: the request's shape %s does not fit the executed %s; padding changes this output (set pad: false for the symbol in config.yaml)", p.Outputs[k].Name, tensor.ShapeString(want), tensor.ShapeString(out.Shape))
		}
	}
	res := tensor.New(out.DType, want...)
	copyBlock(res.Data, want, make([]int64, len(want)), out.Data, out.Shape, off, want, int64(out.DType.Size()))
	return res, nil
}

// dataDependent reports whether some output's size follows the data.
func (p *BucketPlan) dataDependent() bool { return len(p.bounded) > 0 || len(p.freeOutputs) > 0 }

// isBounded reports whether output k has a data-dependent size.
func (p *BucketPlan) isBounded(k int) bool {
	if p.freeOutputs[k] {
		return true
	}
	for _, b := range p.bounded {
		if b.Output == k {
			return true
		}
	}
	return false
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// bindShapes binds the symbols of the inputs given by shape only (kept on
// the device), as bind does those of the request's tensors.
func (p *BucketPlan) bindShapes(dims map[string]int64, given map[string][]int64) error {
	for name, shape := range given {
		i := p.inputIndex(name)
		if i < 0 {
			return fmt.Errorf("%w: model has no input %q", ErrInvalidInput, name)
		}
		if len(shape) != len(p.Inputs[i].Dims) {
			return fmt.Errorf("%w: input %q has shape %s, model expects %s", ErrInvalidInput, name, tensor.ShapeString(shape), formatDims(p.Inputs[i].Dims))
		}
		for d, spec := range p.Inputs[i].Dims {
			if spec.Sym == "" || spec.Expr != nil {
				continue
			}
			if prev, ok := dims[spec.Sym]; ok && prev != shape[d] {
				return fmt.Errorf("%w: input %q dim %d (%s) is %d, bound to %d", ErrInvalidInput, name, d, spec.Sym, shape[d], prev)
			}
			dims[spec.Sym] = shape[d]
		}
	}
	return nil
}
