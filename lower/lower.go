package lower

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// Options configure lowering. The zero value means the defaults below.
type Options struct {
	// Platform is the PJRT platform the program is for ("cpu", "cuda",
	// "tpu"); default "cpu". New applies that platform's Platform (its
	// defaults, passes and rules) when it is given one.
	Platform string
	// NarrowInt64 lowers int64 values as int32 (TPUs emulate 64-bit
	// integers, slowly). Inputs and outputs then have dtype int32 in the
	// Program. The TPU platform (lower/platforms) sets it.
	NarrowInt64 bool
	// NarrowFloat64 lowers float64 values as float32 (TPUs have no
	// float64). Inputs and outputs then have dtype float32 in the Program.
	// The TPU platform sets it.
	NarrowFloat64 bool
	// HalfInF32 computes float16/bfloat16 dot and convolution in float32 and
	// rounds the result back. XLA CPU is very slow on half-precision dot and
	// conv. Default: false; the CPU platform (lower/cpu) sets true.
	HalfInF32 *bool
	// DefaultPrecision asks for the platform's default dot/conv precision
	// instead of the highest one. Off by default: parity with the reference
	// framework matters more than the last few percent (TPUs and GPUs
	// otherwise compute f32 dot products with bf16 or tf32 passes).
	DefaultPrecision bool
	// InlineConstantMax is the element count up to which get_attr tensors are
	// emitted as StableHLO constants rather than weight parameters; default 32.
	InlineConstantMax int64
	// MaxFoldElements bounds the size of values computed on the host by
	// constant folding during specialization; default 1<<20.
	MaxFoldElements int64
	// ModuleName names the StableHLO module; default "xserve".
	ModuleName string
	// ConvWeightsHWIO stores the weights that only feed convolutions as
	// [spatial..., in, out] rather than PyTorch's [out, in, spatial...]: the
	// order XLA CPU's convolutions read them in. Otherwise XLA transposes
	// every such weight on every call. The program transposes the parameter
	// back, which XLA cancels against its own transpose. Default: false;
	// the CPU platform sets true.
	ConvWeightsHWIO *bool
	// DepthwiseMulAdd computes depthwise convolutions (groups = input
	// channels = output channels) as a sum of the kernel taps' strided
	// input slices times per-channel weights, which XLA fuses into one loop.
	// XLA CPU otherwise expands a grouped convolution's kernel into a dense
	// block-diagonal one, doing groups times the work. Read by the CPU
	// platform's convolution (lower/cpu), which defaults it to true (GPU
	// libraries have depthwise kernels).
	DepthwiseMulAdd *bool
	// ConvAsDot computes a convolution with one group (not transposed, one
	// to three spatial dims) whose kernel window has more taps than its
	// input has positions (a 3x3 kernel on a 2x2 map) as one matrix product
	// over the input's patches (im2col) instead of a stablehlo.convolution,
	// up to a bounded patch matrix. XLA CPU swaps the operands of such a
	// convolution into a form it runs in plain loops (resnet18 on 64x64
	// images: 10x slower); on larger inputs its own convolution measured
	// faster than the matrix product, so they stay convolutions. Read by
	// the CPU platform's convolution, which defaults it to true.
	ConvAsDot *bool
	// Kernels are the custom-call targets the backend provides beyond
	// XLA's own: on CPU, those of xserve's kernel library
	// (pjrt.Client.Kernels), which the CPU platform (lower/cpu) calls for
	// float32 convolutions, matrix products, pooling, softmax and layer
	// norm, the products' epilogues fused (fxgraph.Graph.FuseEpilogues).
	Kernels []string
	// KeepBatchNorm disables folding inference batch norms into the
	// preceding convolution's weights (fxgraph.Graph.FoldBatchNorm), which
	// is on by default.
	KeepBatchNorm bool
}

func (o Options) withDefaults(p *Platform) Options {
	if o.Platform == "" {
		o.Platform = "cpu"
	}
	if p != nil && p.Defaults != nil {
		p.Defaults(&o)
	}
	for _, b := range []**bool{&o.HalfInF32, &o.DepthwiseMulAdd, &o.ConvAsDot, &o.ConvWeightsHWIO} {
		if *b == nil {
			*b = new(bool)
		}
	}
	if o.InlineConstantMax == 0 {
		o.InlineConstantMax = 32
	}
	if o.MaxFoldElements == 0 {
		o.MaxFoldElements = 1 << 20
	}
	if o.ModuleName == "" {
		o.ModuleName = "xserve"
	}
	return o
}

// HasKernel reports whether the backend provides the custom-call target.
func (o Options) HasKernel(target string) bool {
	return slices.Contains(o.Kernels, target)
}

// Lowerer lowers graphs with a fixed set of rules and options. It is safe
// for concurrent use.
type Lowerer struct {
	ir       *fxgraph.Registry
	rules    *Registry
	opts     Options
	platform *Platform // nil: the generic rules only
}

// New returns a Lowerer with the IR registry, every lowering rule and opts.
// Of platforms, the one named opts.Platform (if any) adds its defaults,
// passes and rules; without one the generic rules alone are used, which
// are right for every platform.
func New(opts Options, platforms ...*Platform) *Lowerer {
	name := opts.Platform
	if name == "" {
		name = "cpu"
	}
	var p *Platform
	for _, q := range platforms {
		if q != nil && q.Name == name {
			p = q
		}
	}
	l := &Lowerer{ir: fxgraph.NewRegistry(), rules: NewRegistry(), opts: opts.withDefaults(p), platform: p}
	if p != nil && p.Register != nil {
		p.Register(l.rules, l.opts)
	}
	return l
}

// IR returns the IR operator registry the lowerer specializes graphs with.
func (l *Lowerer) IR() *fxgraph.Registry { return l.ir }

// Rules returns the lowering rule registry.
func (l *Lowerer) Rules() *Registry { return l.rules }

// Options returns the options in effect, defaults filled in.
func (l *Lowerer) Options() Options { return l.opts }

// Context is what a rule sees while lowering one node.
type Context struct {
	// Graph is the specialized graph being lowered (all shapes static).
	Graph *fxgraph.Graph
	// Fn is the StableHLO function being built (the main function, or a
	// control-flow body while lowering a subgraph): rules add ops to
	// Fn.Block().
	Fn *Func
	// Options are the lowering options, defaults filled in.
	Options Options
	// Rules lets composite rules call other rules.
	Rules *Registry

	values map[*fxgraph.Node][]*stablehlo.Value
	root   *rootState
}

// Primitives returns the platform's primitives (see Primitives).
func (ctx *Context) Primitives() Primitives { return ctx.Rules.prims }

// rootState is what the contexts of a graph and its subgraphs share: the
// main function and the program, to which the weights of subgraphs are
// added as parameters too.
type rootState struct {
	main    *Func
	prog    *Program
	weights map[*tensor.Tensor]*stablehlo.Value // the weight parameters by value
}

// Value returns the lowered value of node m (its first value for tuples).
func (ctx *Context) Value(m *fxgraph.Node) (*stablehlo.Value, error) {
	vals, ok := ctx.values[m]
	if !ok || len(vals) == 0 {
		return nil, fmt.Errorf("lower: %s has no lowered value", m.Name)
	}
	return vals[0], nil
}

// Values returns the lowered values of the nodes in a list argument.
func (ctx *Context) Values(list any) ([]*stablehlo.Value, error) {
	items, ok := list.([]any)
	if !ok {
		return nil, fmt.Errorf("lower: argument %s is not a list of tensors", fxgraph.FormatArg(list))
	}
	out := make([]*stablehlo.Value, len(items))
	for i, it := range items {
		m, ok := it.(*fxgraph.Node)
		if !ok {
			return nil, fmt.Errorf("lower: list element %d is %s, want a tensor", i, fxgraph.FormatArg(it))
		}
		v, err := ctx.Value(m)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Elem maps an IR dtype to the element type its values have in the
// program, honouring NarrowInt64 and NarrowFloat64.
func (ctx *Context) Elem(dt tensor.DType) (stablehlo.ElementType, error) {
	return ElemOf(ctx.Options.ProgramDType(dt))
}

// TypeOf maps a static TensorMeta to the type its value has in the program.
func (ctx *Context) TypeOf(m fxgraph.TensorMeta) (stablehlo.Type, error) {
	e, err := ctx.Elem(m.DType)
	if err != nil {
		return stablehlo.Type{}, err
	}
	dims, ok := m.Shape.Static()
	if !ok {
		return stablehlo.Type{}, fmt.Errorf("lower: shape %s is not static", m.Shape)
	}
	return stablehlo.TensorOf(e, dims...), nil
}

// ProgramDType is the dtype values of IR dtype dt have in the program:
// dt, or its narrowed 32-bit type under NarrowInt64 and NarrowFloat64.
func (o Options) ProgramDType(dt tensor.DType) tensor.DType {
	switch {
	case o.NarrowInt64 && dt == tensor.Int64:
		return tensor.Int32
	case o.NarrowInt64 && dt == tensor.Uint64:
		return tensor.Uint32
	case o.NarrowFloat64 && dt == tensor.Float64:
		return tensor.Float32
	}
	return dt
}

// Lower specializes g to the symbol sizes in dims and lowers it to a Program,
// after the shape-independent optimization passes (Optimize).
func (l *Lowerer) Lower(g *fxgraph.Graph, dims map[string]int64) (*Program, error) {
	return l.lower(l.Optimize(g), dims)
}

// LowerOptimized is Lower for a graph Optimize made: a server optimizes a
// model once and lowers it per shape bucket.
func (l *Lowerer) LowerOptimized(g *fxgraph.Graph, dims map[string]int64) (*Program, error) {
	return l.lower(g, dims)
}

func (l *Lowerer) lower(g *fxgraph.Graph, dims map[string]int64) (*Program, error) {
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("lower: %w", err)
	}
	sg, err := l.specialize(g, dims)
	if err != nil {
		return nil, err
	}
	return l.LowerSpecialized(sg, dims)
}

// Specialize returns g specialized to dims (static shapes, constants folded)
// with the optimization passes the options enable applied: the graph
// LowerSpecialized takes.
func (l *Lowerer) Specialize(g *fxgraph.Graph, dims map[string]int64) (*fxgraph.Graph, error) {
	return l.specialize(l.Optimize(g), dims)
}

func (l *Lowerer) specialize(g *fxgraph.Graph, dims map[string]int64) (*fxgraph.Graph, error) {
	if err := notDeferred(g); err != nil {
		return nil, err
	}
	sg, err := l.ir.Specialize(g, dims, l.opts.MaxFoldElements)
	if err != nil {
		return nil, fmt.Errorf("lower: %w", err)
	}
	if l.platform != nil && l.platform.Specialized != nil {
		l.platform.Specialized(sg, l.opts)
	}
	return sg, nil
}

// notDeferred refuses a deferred graph, whose importer makes the graph to
// lower once the sizes are known (importer.Model.At).
func notDeferred(g *fxgraph.Graph) error {
	if g.IsDeferred() {
		return errors.New("lower: the graph is deferred: its import waits for the input sizes (importer.Model.At imports it at them)")
	}
	return nil
}

// Optimize applies the shape-independent optimization passes and returns
// the optimized graph: a copy when something changed, g itself otherwise.
// The passes fold inference batch norms into convolutions (unless
// Options.KeepBatchNorm) and turn bmm of an expanded weight into a
// broadcasting matmul. They do not depend on the bucket, so a server calls
// Optimize once per model version; the weights they make are then shared by
// every bucket's program.
func (l *Lowerer) Optimize(g *fxgraph.Graph) *fxgraph.Graph {
	foldBN := !l.opts.KeepBatchNorm && hasConvBatchNorm(g)
	if !foldBN && !hasExpandedBmm(g) {
		return g
	}
	c := g.Clone()
	if foldBN {
		c.FoldBatchNorm()
	}
	c.UnexpandMatmul()
	return c
}

func hasExpandedBmm(g *fxgraph.Graph) bool {
	for _, n := range g.Nodes() {
		if n.Op != fxgraph.AtenBmm {
			continue
		}
		if in, ok := n.Arg(1).(*fxgraph.Node); ok && (in.Op == fxgraph.AtenExpand || in.Op == fxgraph.AtenView) {
			return true
		}
	}
	return false
}

func hasConvBatchNorm(g *fxgraph.Graph) bool {
	for _, n := range g.Nodes() {
		if n.Op != fxgraph.Aten_NativeBatchNormLegitNoTraining {
			continue
		}
		if in, ok := n.Arg(0).(*fxgraph.Node); ok && in.Op == fxgraph.AtenConvolution {
			return true
		}
	}
	return false
}

// LowerSpecialized lowers a graph whose shapes are already static (the
// output of fxgraph.Registry.Specialize).
func (l *Lowerer) LowerSpecialized(g *fxgraph.Graph, dims map[string]int64) (*Program, error) {
	mod := stablehlo.NewModule(l.opts.ModuleName)
	fn, err := newMain(mod)
	if err != nil {
		return nil, fmt.Errorf("lower: %w", err)
	}
	ctx := &Context{Graph: g, Fn: fn, Options: l.opts, Rules: l.rules, values: map[*fxgraph.Node][]*stablehlo.Value{}}
	prog := &Program{Dims: copyDims(dims), Bounded: append([]fxgraph.BoundedOutput(nil), g.Bounded...),
		Guards: append([]fxgraph.GuardOutput(nil), g.Guards...)}
	ctx.root = &rootState{main: fn, prog: prog, weights: map[*tensor.Tensor]*stablehlo.Value{}}

	// Parameters: inputs in graph order, then weights in graph order.
	for _, n := range g.Placeholders() {
		if err := ctx.addParam(prog, n, Input, nil); err != nil {
			return nil, err
		}
	}
	for _, n := range g.Nodes() {
		if n.Opcode != fxgraph.GetAttr {
			continue
		}
		t := g.Attrs[n.Target]
		if t == nil {
			continue // a subgraph reference: lowered by the control-flow rule
		}
		if t.NumElements() <= l.opts.InlineConstantMax {
			v, err := ctx.Constant(t)
			if err != nil {
				return nil, fmt.Errorf("lower: constant %s: %w", n.Name, err)
			}
			ctx.values[n] = []*stablehlo.Value{v}
			continue
		}
		if perm := l.convWeightPerm(n, t); perm != nil {
			if err := ctx.addPermutedWeight(prog, n, t, perm); err != nil {
				return nil, err
			}
			continue
		}
		if err := ctx.addParam(prog, n, Weight, t); err != nil {
			return nil, err
		}
		ctx.root.weights[t] = ctx.values[n][0]
	}
	if err := ctx.lowerNodes(g); err != nil {
		return nil, err
	}
	var results []*stablehlo.Value
	for i, o := range g.Outputs() {
		v, err := ctx.Value(o)
		if err != nil {
			return nil, fmt.Errorf("lower: output %d: %w", i, err)
		}
		m := o.Val()
		dt := m.DType
		dt = l.opts.ProgramDType(dt)
		d, _ := m.Shape.Static()
		results = append(results, v)
		prog.Outputs = append(prog.Outputs, Output{Name: g.OutputName(i), DType: dt, Shape: d})
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("lower: graph returns nothing")
	}
	if err := fn.Return(results...); err != nil {
		return nil, fmt.Errorf("lower: return: %w", err)
	}
	code, err := mod.Text()
	if err != nil {
		return nil, fmt.Errorf("lower: build module: %w", err)
	}
	prog.Module = code
	prog.Usage = mod.Usage()
	return prog, nil
}

func copyDims(d map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(d))
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = d[k]
	}
	return out
}

// addParam adds node n as the next parameter, of kind, holding value (nil
// for inputs), and makes the parameter n's value.
func (ctx *Context) addParam(prog *Program, n *fxgraph.Node, kind ParamKind, value *tensor.Tensor) error {
	v, err := ctx.addParamAs(prog, n, n.Val(), kind, value)
	if err == nil {
		ctx.values[n] = []*stablehlo.Value{v}
	}
	return err
}

// addParamAs adds the next parameter for node n with meta m (static) and
// returns it.
func (ctx *Context) addParamAs(prog *Program, n *fxgraph.Node, m fxgraph.TensorMeta, kind ParamKind, value *tensor.Tensor) (*stablehlo.Value, error) {
	typ, err := ctx.TypeOf(m)
	if err != nil {
		return nil, fmt.Errorf("lower: parameter %s: %w", n.Name, err)
	}
	v, err := ctx.Fn.NamedInput(n.Name, typ)
	if err != nil {
		return nil, fmt.Errorf("lower: parameter %s: %w", n.Name, err)
	}
	dims, _ := m.Shape.Static()
	dt := m.DType
	if ctx.Options.ProgramDType(dt) != dt {
		dt = ctx.Options.ProgramDType(dt)
		if value != nil {
			value = value.Convert(dt)
		}
	}
	prog.Params = append(prog.Params, Param{Name: n.Target, Kind: kind, DType: dt, Shape: dims, Value: value})
	return v, nil
}

// convWeightPerm returns the permutation that takes weight t of get_attr
// node n from [out, in, spatial...] to [spatial..., in, out] when
// Options.ConvWeightsHWIO is on and every use of n is as the weight of a
// non-transposed convolution; nil otherwise.
func (l *Lowerer) convWeightPerm(n *fxgraph.Node, t *tensor.Tensor) []int {
	if !*l.opts.ConvWeightsHWIO || t.Rank() < 3 || t.DType == tensor.String {
		return nil
	}
	users := n.Users()
	if len(users) == 0 {
		return nil
	}
	for _, u := range users {
		if (u.Op != fxgraph.AtenConvolution && u.Op != fxgraph.XserveConvFused && u.Op != fxgraph.XserveQLinearConv) || u.Arg(0) == n || u.Arg(1) != n || u.Arg(2) == n {
			return nil
		}
		if transposed, ok := u.Arg(6).(bool); !ok || transposed {
			return nil
		}
	}
	rank := t.Rank()
	perm := make([]int, 0, rank)
	for d := 2; d < rank; d++ {
		perm = append(perm, d)
	}
	return append(perm, 1, 0)
}

// addPermutedWeight adds weight t of node n as a parameter holding t
// transposed by perm (Param.Perm); n's value is that parameter transposed
// back.
func (ctx *Context) addPermutedWeight(prog *Program, n *fxgraph.Node, t *tensor.Tensor, perm []int) error {
	v, err := ctx.addParamAs(prog, n, fxgraph.Static(t.DType, PermutedShape(t.Shape, perm)...), Weight, t)
	if err != nil {
		return err
	}
	inv := make([]int64, len(perm))
	for i, p := range perm {
		inv[p] = int64(i)
	}
	back, err := ctx.Fn.Block().Transpose(v, inv...)
	if err != nil {
		return fmt.Errorf("lower: parameter %s: %w", n.Name, err)
	}
	ctx.values[n] = []*stablehlo.Value{back}
	prog.Params[len(prog.Params)-1].Perm = perm
	return nil
}

// onLowered, when set (by the package's tests), is told the op of every
// node lowered successfully.
var onLowered func(op *fxgraph.Op)

// lowerNodes lowers every call_function node of g in order, checking each
// result against the node's Meta.
func (ctx *Context) lowerNodes(g *fxgraph.Graph) error {
	for _, n := range g.Nodes() {
		if n.Opcode != fxgraph.CallFunction {
			continue
		}
		op := n.Op
		rule, ok := ctx.Rules.Lookup(op)
		if !ok {
			return ctx.Rules.missing(n)
		}
		in := make([]*stablehlo.Value, len(n.Args))
		for i, a := range n.Args {
			if m, ok := a.(*fxgraph.Node); ok {
				if vals := ctx.values[m]; len(vals) > 0 {
					in[i] = vals[0]
				}
			}
		}
		out, err := rule(ctx, n, in)
		if err != nil {
			return fmt.Errorf("lower %s (%s): %w", n.Name, n.Target, err)
		}
		if err := ctx.checkResults(n, out); err != nil {
			return err
		}
		if onLowered != nil {
			onLowered(op)
		}
		ctx.values[n] = out
	}
	return nil
}

func (ctx *Context) checkResults(n *fxgraph.Node, out []*stablehlo.Value) error {
	if len(out) != len(n.Meta.Vals) {
		return fmt.Errorf("lower %s (%s): rule returned %d values, node has %d", n.Name, n.Target, len(out), len(n.Meta.Vals))
	}
	for i, v := range out {
		want, err := ctx.TypeOf(n.Meta.Vals[i])
		if err != nil {
			return fmt.Errorf("lower %s (%s): %w", n.Name, n.Target, err)
		}
		if v == nil || !v.Type().Equal(want) {
			got := "nil"
			if v != nil {
				got = v.Type().String()
			}
			return fmt.Errorf("lower %s (%s): value %d is %s, the IR says %s", n.Name, n.Target, i, got, want)
		}
	}
	return nil
}

// shapeFoldElements bounds the values OutputShapes computes on the host:
// enough for every shape sub-computation, far below the weights.
const shapeFoldElements = 1 << 14

// OutputShapes returns the static shapes of g's outputs when its input
// symbols take the sizes in dims: the IR's own shape propagation (and the
// folding of shape sub-computations) at those sizes, with no lowering or
// compiling. A server slices padded outputs back to these shapes.
func (l *Lowerer) OutputShapes(g *fxgraph.Graph, dims map[string]int64) ([][]int64, error) {
	if err := notDeferred(g); err != nil {
		return nil, err
	}
	sg, err := l.ir.Specialize(g, dims, shapeFoldElements)
	if err != nil {
		return nil, fmt.Errorf("lower: output shapes at %v: %w", dims, err)
	}
	outs := sg.Outputs()[:sg.ModelOutputs()] // the guards are no model outputs
	shapes := make([][]int64, len(outs))
	for i, o := range outs {
		s, ok := o.Val().Shape.Static()
		if !ok {
			return nil, fmt.Errorf("lower: output %d (%s) has symbolic shape %s at %v", i, sg.OutputName(i), o.Val().Shape, dims)
		}
		shapes[i] = s
	}
	return shapes, nil
}
