package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// ErrUnsupported is wrapped by errors about ONNX operators, attributes or
// types the importer does not support.
var ErrUnsupported = errors.New("onnx: unsupported")

// Converter converts one ONNX node into IR nodes through c.
type Converter func(c *Ctx, n *Node) error

// converterEntry is a converter valid from opset version Since onwards.
type converterEntry struct {
	Since int64
	Conv  Converter
}

// converters maps "domain:OpType" (domain "" for ai.onnx) to entries sorted by Since.
type converters map[string][]converterEntry

// register adds conv for op in domain from opset version since.
func (cs converters) register(domain, op string, since int64, conv Converter) {
	key := domain + ":" + op
	for _, e := range cs[key] {
		if e.Since == since {
			panic("onnx: converter registered twice: " + key + fmt.Sprint(since))
		}
	}
	cs[key] = append(cs[key], converterEntry{since, conv})
	sort.Slice(cs[key], func(i, j int) bool { return cs[key][i].Since < cs[key][j].Since })
}

// add registers conv for a default-domain op from opset 1 onward.
func (cs converters) add(op string, conv Converter) { cs.register("", op, 1, conv) }

// lookup returns the converter for op at the given opset version.
func (cs converters) lookup(domain, op string, opset int64) (Converter, bool) {
	entries := cs[domain+":"+op]
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Since <= opset {
			return entries[i].Conv, true
		}
	}
	return nil, false
}

func newConverters() converters {
	cs := converters{}
	registerElementwise(cs)
	registerShapeOps(cs)
	registerNN(cs)
	registerReductions(cs)
	registerRNN(cs)
	registerControlFlow(cs)
	registerSignal(cs)
	registerSequence(cs)
	registerRandom(cs)
	registerTraining(cs)
	registerTfIdf(cs)
	registerQuant(cs)
	registerQuantContrib(cs)
	registerMicrosoft(cs)
	registerML(cs)
	registerStrings(cs)
	registerTransformer(cs)
	registerNorm(cs)
	registerImage(cs)
	registerPool(cs)
	registerSample(cs)
	registerImageDecoder(cs)
	return cs
}

// Importer converts decoded ONNX models to IR graphs. It is safe for
// concurrent use.
type Importer struct {
	ir   *fxgraph.Registry
	conv converters
}

// NewImporter returns an importer with every converter of the package.
func NewImporter() *Importer {
	return &Importer{ir: fxgraph.NewRegistry(), conv: newConverters()}
}

// SupportedOps returns the default-domain operators with a converter, sorted.
func (im *Importer) SupportedOps() []string {
	var out []string
	for k := range im.conv {
		out = append(out, strings.TrimPrefix(k, ":"))
	}
	sort.Strings(out)
	return out
}

// ImportFile reads and imports the .onnx file at path.
func ImportFile(path string) (*fxgraph.Graph, error) {
	m, err := ReadModelFile(path)
	if err != nil {
		return nil, err
	}
	return NewImporter().Import(m)
}

// Import converts a decoded model to an IR graph and validates it.
func (im *Importer) Import(m *Model) (*fxgraph.Graph, error) {
	return im.ImportWithValues(m, nil)
}

// ImportWithValues is Import with the values of some graph inputs known at
// compile time: operators that need a constant operand (Reshape's shape,
// Slice's starts, reduction axes given as inputs, ...) read them from values.
// The inputs stay in the graph's signature, so callers pass them as usual.
//
// A model whose conversion needs values computed from symbolic input sizes
// (see shapeDependentError) imports as a deferred graph
// (fxgraph.Graph.IsDeferred): ImportAt imports it again once the sizes are
// known, per shape bucket.
func (im *Importer) ImportWithValues(m *Model, values map[string]*tensor.Tensor) (*fxgraph.Graph, error) {
	return im.ImportWithOptions(m, ImportOptions{Values: values})
}

// importModel imports m with what o says of its inputs and, when dims is not
// nil, the inputs' symbolic dims set to the sizes it gives.
func (im *Importer) importModel(m *Model, o ImportOptions, dims map[string]int64) (*fxgraph.Graph, error) {
	values := o.Values
	if m.Graph == nil {
		return nil, errors.New("onnx: model has no graph")
	}
	opsets := map[string]int64{}
	for _, o := range m.OpsetImports {
		d := o.Domain
		if d == "ai.onnx" {
			d = ""
		}
		opsets[d] = o.Version
	}
	if _, ok := opsets[""]; !ok && m.IRVersion < 3 {
		opsets[""] = 1 // before IR version 3 the opset was implicit
	}
	funcs := map[string]*Function{}
	for _, f := range m.Functions {
		funcs[f.Domain+":"+f.Name] = f
	}
	g := fxgraph.New()
	s := &scope{im: im, g: g, opsets: opsets, funcs: funcs, env: map[string]*fxgraph.Node{}, values: values, structured: o.Structured, subConsts: map[*tensor.Tensor]*fxgraph.Node{}, bounded: &[]boundedValue{}, dims: dims, guards: &[]guardValue{}}
	if err := s.importGraph(m.Graph); err != nil {
		return nil, err
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: imported graph: %w", err)
	}
	return g, nil
}

// scope holds the state of one import: the graph being built, the opsets
// and the ONNX value names bound to IR nodes.
type scope struct {
	im     *Importer
	g      *fxgraph.Graph
	opsets map[string]int64
	funcs  map[string]*Function
	env    map[string]*fxgraph.Node
	depth  int
	// values are graph inputs whose values are known at compile time.
	values map[string]*tensor.Tensor
	// structured lays out the sequence and optional graph inputs (see
	// ImportOptions.Structured).
	structured map[string]*Value
	// converted are the nodes this scope converted, in order (Gradient
	// differentiates through them).
	converted []*Node
	// subConsts holds the constant of each subgraph initializer already
	// added, shared by every scope of the import: a Loop body inlined once
	// per iteration adds its initializers once.
	subConsts map[*tensor.Tensor]*fxgraph.Node
	// bounded collects the values of data-dependent size (NonZero) the
	// import made, padded, with their counts; nil in scopes building a
	// subgraph, where they are unsupported.
	bounded *[]boundedValue
	// guards are the run-time guards of If branches the import could not
	// build (see guardedIf), shared by the scopes that build the main
	// graph; nil in scopes building a subgraph.
	guards *[]guardValue
	// dims, when not nil, gives the main graph's symbolic input dims
	// concrete sizes (ImportAt).
	dims map[string]int64
	// windowGuards are the run-time checks of windows made tensors in a
	// loop body (see window.go), which the loop carries out.
	windowGuards []guardValue
	// carriesGuards: the scope builds a while_loop body that carries its
	// windowGuards out.
	carriesGuards bool
}

var identRE = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// sanitize makes an ONNX value name usable as an IR node name.
func sanitize(name string) string {
	s := identRE.ReplaceAllString(name, "_")
	s = strings.Trim(s, "_")
	if s == "" {
		s = "v"
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "v" + s
	}
	return s
}

func (s *scope) importGraph(gr *Graph) error {
	inits := map[string]bool{}
	for _, in := range gr.Initializers {
		inits[in.Name] = true
	}
	for i, vi := range gr.Inputs {
		if inits[vi.Name] {
			continue // an initializer listed as input (IR < 4): a constant
		}
		if vi.Type != nil && (vi.Type.Kind == TypeSequence || vi.Type.Kind == TypeOptional) {
			if err := s.structuredInput(vi, s.structured[vi.Name]); err != nil {
				return fmt.Errorf("onnx: graph input %d (%q): %w", i, vi.Name, err)
			}
			continue
		}
		meta, err := inputMeta(vi)
		if err != nil {
			return fmt.Errorf("onnx: graph input %d (%q): %w", i, vi.Name, err)
		}
		if s.dims != nil {
			if meta, err = staticInputMeta(meta, s.dims, vi.Name); err != nil {
				return err
			}
		}
		n := s.g.AddPlaceholder(sanitize(vi.Name), meta)
		n.Target = vi.Name
		s.env[vi.Name] = n
		if v, ok := s.values[vi.Name]; ok {
			if v.DType != meta.DType || len(v.Shape) != len(meta.Shape) {
				return fmt.Errorf("onnx: value given for input %q is %s, the input is %s", vi.Name, v, meta)
			}
			s.env[vi.Name] = s.g.AddConstant(sanitize(vi.Name)+"_value", v)
		}
	}
	for _, in := range gr.Initializers {
		s.env[in.Name] = s.g.AddConstant(sanitize(in.Name), in.Tensor)
	}
	for i, node := range fuseQDQTables(gr, fuseQDQ(gr)) {
		if err := s.convertNode(node); err != nil {
			return fmt.Errorf("%w (graph %q, node %d)", err, gr.Name, i)
		}
	}
	var outs []*fxgraph.Node
	for _, vi := range gr.Outputs {
		n, ok := s.env[vi.Name]
		if !ok {
			return fmt.Errorf("onnx: graph output %q is not produced by any node", vi.Name)
		}
		if isStructured(n) { // a sequence or optional: its tensors, see ImportOptions
			for k, e := range flattenMarker(n) {
				outs = append(outs, e)
				s.g.OutputNames = append(s.g.OutputNames, fmt.Sprintf("%s[%d]", vi.Name, k))
			}
			continue
		}
		outs = append(outs, n)
		s.g.OutputNames = append(s.g.OutputNames, vi.Name)
	}
	s.g.SetOutput(append(append(outs, s.counts()...), s.guardNodes()...)...) // alive until boundOutputs
	s.g.EliminateDeadCode()
	return s.boundOutputs(outs)
}

// counts returns the count nodes of the bounded values.
func (s *scope) counts() []*fxgraph.Node {
	if s.bounded == nil {
		return nil
	}
	var out []*fxgraph.Node
	for _, b := range *s.bounded {
		if !b.shape {
			out = append(out, b.count)
		}
	}
	return out
}

// boundedValue is a value padded along axis to a static bound, whose valid
// size is the int64 scalar count.
type boundedValue struct {
	value, count *fxgraph.Node
	axis         int
	op           string
	// shape marks the run-time shape of a bounded value (Shape of it), whose
	// padded dims are dims: not itself bounded.
	shape bool
	dims  []int64
	// src is the input of the NonZero that made the value, which a
	// NonZero of the same input reuses.
	src *fxgraph.Node
}

// boundOutputs declares the bounded values that are graph outputs
// (fxgraph.BoundedOutput), appending their counts as outputs. Operators
// that consume bounded values were checked as they were converted
// (boundRules).
func (s *scope) boundOutputs(outs []*fxgraph.Node) error {
	if s.bounded == nil {
		s.g.SetOutput(s.appendGuards(outs)...)
		return nil
	}
	for _, b := range *s.bounded {
		if b.shape || b.value.Graph() != s.g {
			continue // a shape, or dead
		}
		for i, o := range outs {
			if o != b.value {
				continue
			}
			s.g.Bounded = append(s.g.Bounded, fxgraph.BoundedOutput{Output: i, Axis: b.axis, Count: len(outs)})
			outs = append(outs, b.count)
			s.g.OutputNames = append(s.g.OutputNames, s.g.OutputName(i)+"_count")
		}
	}
	outs = s.appendGuards(outs)
	s.g.SetOutput(outs...)
	s.g.EliminateDeadCode()
	return nil
}

// inputMeta turns an ONNX graph input type into a TensorMeta. dim_param
// becomes a symbol; a dim with neither value nor param, or with the param
// "?" (Paddle's exporter writes it for every unknown dim, which are not one
// size), gets a symbol named after the input and axis.
func inputMeta(vi *ValueInfo) (fxgraph.TensorMeta, error) {
	t := vi.Type
	if t == nil {
		return fxgraph.TensorMeta{}, fmt.Errorf("%w: input has no type", ErrUnsupported)
	}
	if t.Kind != TypeTensor {
		return fxgraph.TensorMeta{}, fmt.Errorf("%w: input type %v (only tensors are supported)", ErrUnsupported, t.Kind)
	}
	if !t.HasShape {
		return fxgraph.TensorMeta{}, fmt.Errorf("%w: input has no shape (unknown rank)", ErrUnsupported)
	}
	meta := fxgraph.TensorMeta{DType: t.Elem}
	for i, d := range t.Dims {
		switch {
		case d.Known:
			meta.Shape = append(meta.Shape, fxgraph.D(d.Value))
		case d.Param != "" && d.Param != "?":
			meta.Shape = append(meta.Shape, fxgraph.S(sanitize(d.Param)))
		default:
			meta.Shape = append(meta.Shape, fxgraph.S(fmt.Sprintf("%s_dim%d", sanitize(vi.Name), i)))
		}
	}
	return meta, nil
}

func (s *scope) convertNode(node *Node) error {
	domain := node.Domain
	if domain == "ai.onnx" {
		domain = ""
	}
	if f, ok := s.funcs[domain+":"+node.OpType]; ok {
		return s.inlineFunction(node, f)
	}
	opset, ok := s.opsets[domain]
	if !ok {
		return fmt.Errorf("%w: node %q (%s) is in domain %q, which the model does not import", ErrUnsupported, node.Name, node.OpType, node.Domain)
	}
	conv, ok := s.im.conv.lookup(domain, node.OpType, opset)
	if !ok {
		op := node.OpType
		if domain != "" {
			op = domain + "." + op
		}
		return fmt.Errorf("%w: operator %s (node %q, opset %d)", ErrUnsupported, op, node.Name, opset)
	}
	c := &Ctx{s: s, node: node, Opset: opset}
	s.converted = append(s.converted, node)
	bin := s.boundedInputs(node)
	rule, override := boundRules[node.OpType], boundConverters[node.OpType]
	var err error
	switch {
	case len(bin) > 0 && override != nil, override != nil && s.takesCountSizes(node):
		err = override(c, node, bin, conv)
	case len(bin) == 0 && s.windowed(node):
		err = s.convertWindowed(c, node, conv)
	case len(bin) > 0 && rule == nil:
		_, b := anyBound(bin)
		return fmt.Errorf("%w (operator %s, node %q, opset %d)", unsupportedBound(node, b, "xserve cannot follow its size through this operator"), node.OpType, node.Name, opset)
	default:
		err = conv(c, node)
		if err == nil && len(bin) > 0 {
			err = rule(c, node, bin)
		}
	}
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return c.markShapeDependent(fmt.Errorf("%w (operator %s, node %q, opset %d)", err, node.OpType, node.Name, opset))
		}
		return fmt.Errorf("onnx: node %q (%s, opset %d): %w", node.Name, node.OpType, opset, err)
	}
	// Optional outputs a converter does not produce stay unbound: a node that
	// uses one fails with "input not defined".
	if len(node.Outputs) > 0 && node.Outputs[0] != "" {
		if _, ok := s.env[node.Outputs[0]]; !ok {
			return fmt.Errorf("onnx: node %q (%s): converter produced no output %q", node.Name, node.OpType, node.Outputs[0])
		}
	}
	return nil
}

// inlineFunction expands a model-local function call in place.
func (s *scope) inlineFunction(node *Node, f *Function) error {
	if s.depth > 32 {
		return fmt.Errorf("onnx: node %q: functions nested too deep", node.Name)
	}
	inner := &scope{im: s.im, g: s.g, opsets: s.opsets, funcs: s.funcs, env: map[string]*fxgraph.Node{}, depth: s.depth + 1, subConsts: s.subConsts, bounded: s.bounded}
	for _, o := range f.OpsetImports {
		d := o.Domain
		if d == "ai.onnx" {
			d = ""
		}
		inner.opsets = copyOpsets(inner.opsets)
		inner.opsets[d] = o.Version
	}
	for i, name := range f.Inputs {
		if i < len(node.Inputs) && node.Inputs[i] != "" {
			v, ok := s.env[node.Inputs[i]]
			if !ok {
				return fmt.Errorf("onnx: node %q: input %q is not defined", node.Name, node.Inputs[i])
			}
			inner.env[name] = v
		}
	}
	attrs := map[string]*Attribute{}
	for _, a := range f.AttributeProtos {
		attrs[a.Name] = a
	}
	for _, a := range node.Attributes {
		attrs[a.Name] = a
	}
	for _, fn := range f.Nodes {
		bound := *fn
		bound.Attributes = nil
		for _, a := range fn.Attributes {
			if a.RefAttrName != "" {
				if v, ok := attrs[a.RefAttrName]; ok {
					cp := *v
					cp.Name = a.Name
					bound.Attributes = append(bound.Attributes, &cp)
				}
				continue
			}
			bound.Attributes = append(bound.Attributes, a)
		}
		if err := inner.convertNode(&bound); err != nil {
			return fmt.Errorf("%w (in function %s)", err, f.Name)
		}
	}
	for i, name := range f.Outputs {
		if i < len(node.Outputs) && node.Outputs[i] != "" {
			v, ok := inner.env[name]
			if !ok {
				return fmt.Errorf("onnx: function %s: output %q not produced", f.Name, name)
			}
			s.env[node.Outputs[i]] = v
		}
	}
	return nil
}

func copyOpsets(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ReadModelFileAndImport is a convenience for tools: decode and import path.
func ReadModelFileAndImport(path string) (*fxgraph.Graph, *Model, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("onnx: %w", err)
	}
	m, err := ReadModelFile(filepath.Clean(path))
	if err != nil {
		return nil, nil, err
	}
	g, err := NewImporter().Import(m)
	return g, m, err
}
