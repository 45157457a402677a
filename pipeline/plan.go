package pipeline

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// ErrConfig is wrapped by the errors of a pipeline that cannot be built
// as configured: a step's inputs or outputs that its model does not have,
// sizes that do not agree between steps, a built-in's bad parameters. The
// message names the config file and the key.
var ErrConfig = errors.New("pipeline: invalid pipeline")

// Options are what Build needs besides the config.
type Options struct {
	// Config is the pipeline model's config (Config.Pipeline set).
	Config *modelrepo.Config
	// ConfigFile names the config file in errors.
	ConfigFile string
	// Graphs holds, for each step of Config.Pipeline.Steps, the imported
	// graph of its model (nil for built-in steps).
	Graphs []*fxgraph.Graph
	// Paths holds, for each step, its model file (for a step that runs as a
	// model of its own).
	Paths []string
	// ReadFile reads a file a built-in's parameters name (labels),
	// relative to the pipeline's model directory.
	ReadFile func(name string) ([]byte, error)
}

// Plan is a pipeline cut into segments: each segment is one graph, served
// as a model (one executable per bucket, its host stages around it), and
// the segments run one after the other, each reading pipeline tensors that
// the request or earlier segments made.
type Plan struct {
	// Inputs and Outputs are the pipeline's signature, as Config declares
	// it (dims it leaves open taken from the steps).
	Inputs, Outputs []Tensor
	// Steps describes each step of Config.Pipeline.Steps, in that order.
	Steps []Step
	// Segments in execution order.
	Segments []*Segment
}

// Tensor is a named value of the pipeline.
type Tensor struct {
	Name string
	Meta fxgraph.TensorMeta
}

// Step describes one step of a plan.
type Step struct {
	// Name is the model's or the built-in's name; Kind is "model" or
	// "builtin".
	Name, Kind string
	// Version is the model's version as configured (0: the latest).
	Version int64
	// Segment is the index of the segment that runs the step.
	Segment int
	// Placement is "device", "host" or "device+host" (where its nodes run).
	Placement string
	// Whole says the step's model runs as it is, a segment of its own: its
	// sizes are decided at run time, or the config keeps it separate.
	Whole bool
}

// Segment is one execution of a pipeline: a graph stitched from
// consecutive steps, or one model run whole.
type Segment struct {
	// Graph is the segment's graph: its placeholders read Inputs, its
	// outputs are Outputs (for a whole model, the model's graph as
	// imported).
	Graph *fxgraph.Graph
	// Path is the model file of a step that runs whole ("" for a stitched
	// graph): serve it as that file.
	Path string
	// Inputs are the pipeline tensors the segment reads, one per
	// placeholder of Graph, and InputNames the names Graph gives them.
	Inputs, InputNames []string
	// Outputs are the pipeline tensors the segment makes, one per output
	// of Graph ("" for an output the pipeline drops), and OutputNames the
	// names Graph gives them.
	Outputs, OutputNames []string
	// Steps are the indices (into Plan.Steps) of the steps it runs.
	Steps []int
}

// Fused reports whether the segment stitches more than one step into its
// graph.
func (s *Segment) Fused() bool { return s.Path == "" && len(s.Steps) > 1 }

// Describe lists the plan for logs and `xserve inspect`: each segment's
// steps and whether they were stitched.
func (p *Plan) Describe() string {
	var b strings.Builder
	for i, s := range p.Segments {
		var names []string
		for _, k := range s.Steps {
			st := p.Steps[k]
			names = append(names, fmt.Sprintf("%s (%s)", st.Name, st.Placement))
		}
		how := "stitched into one executable per bucket"
		switch {
		case s.Path != "":
			how = "run whole (its sizes are decided at run time, or it is kept separate)"
		case len(s.Steps) == 1:
			how = "one step"
		}
		fmt.Fprintf(&b, "segment %d: %s: %s\n", i, strings.Join(names, ", "), how)
	}
	return b.String()
}

// tensorState is what the builder knows of a pipeline tensor.
type tensorState struct {
	seg  int                // segment that makes it, -1 for a pipeline input
	late bool               // made after a device node of its segment
	host bool               // made by a host node
	meta fxgraph.TensorMeta // its dtype and shape where it is made
}

type builder struct {
	o       Options
	pc      *modelrepo.PipelineConfig
	plan    *Plan
	tensors map[string]*tensorState
	readers map[string][]int // tensor -> the steps that read it
	cur     *segBuild
	done    []*segBuild
}

// segBuild is a segment being built.
type segBuild struct {
	idx   int
	seg   *Segment
	e     *fxgraph.Emitter
	nodes map[string]*fxgraph.Node // pipeline tensor -> its node in the graph
}

// Build cuts the pipeline into segments and stitches each segment's steps
// into one graph: model steps are inlined (fxgraph.Graph.Inline, their
// placeholders replaced by what feeds them), built-in steps add their
// nodes. A new segment starts where a step cannot share the program of
// the steps before it: a step whose device nodes read values the host
// computed from device results of the segment (per-box crops of a
// detector's output, say: their count is data-dependent), a step whose
// model decides sizes at run time (it runs whole, on its own), a step the
// config keeps separate, and every step with fuse: none.
func Build(o Options) (*Plan, error) {
	if o.Config == nil || o.Config.Pipeline == nil {
		return nil, fmt.Errorf("pipeline: the config has no pipeline")
	}
	pc := o.Config.Pipeline
	if len(o.Graphs) != len(pc.Steps) {
		return nil, fmt.Errorf("pipeline: %d graphs for %d steps", len(o.Graphs), len(pc.Steps))
	}
	b := &builder{o: o, pc: pc, plan: &Plan{}, tensors: map[string]*tensorState{}, readers: map[string][]int{}}
	for i, s := range pc.Steps {
		for _, t := range s.InputMap {
			b.readers[t] = append(b.readers[t], i)
		}
	}
	if err := b.inputs(); err != nil {
		return nil, err
	}
	for i := range pc.Steps {
		if err := b.step(i); err != nil {
			return nil, err
		}
	}
	b.cut()
	for _, sb := range b.done {
		if err := b.finish(sb); err != nil {
			return nil, err
		}
	}
	if err := b.outputs(); err != nil {
		return nil, err
	}
	return b.plan, nil
}

func (b *builder) configErr(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", ErrConfig, b.o.ConfigFile, key, fmt.Sprintf(format, args...))
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]`)

// fresh names a dim the data decides: "<tensor>_d<i>".
func fresh(tensorName string, i int) fxgraph.Dim {
	s := nonIdent.ReplaceAllString(tensorName, "_")
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		s = "t" + s
	}
	return fxgraph.S(fmt.Sprintf("%s_d%d", s, i))
}

// inputs sets the pipeline's inputs from the config: dtype and dims as
// declared; a dim left open (-1) is the dim of the model input it feeds
// (renamed after the tensor when symbolic), else a symbol of its own.
func (b *builder) inputs() error {
	for i, in := range b.o.Config.Inputs {
		key := fmt.Sprintf("inputs[%d]", i)
		if in.DType == tensor.Invalid {
			return b.configErr(key+".dtype", "a pipeline input declares its dtype")
		}
		if in.Dims == nil {
			return b.configErr(key+".dims", "a pipeline input declares its dims (sizes, symbols such as batch, or -1)")
		}
		consumer := b.consumerMeta(in.Name)
		meta := fxgraph.TensorMeta{DType: in.DType, Shape: make(fxgraph.Shape, len(in.Dims))}
		for d, dim := range in.Dims {
			switch {
			case dim != modelrepo.AnyDim:
				meta.Shape[d] = dim
			case consumer != nil && consumer.Rank() == len(in.Dims) && consumer.Shape[d].IsStatic():
				meta.Shape[d] = consumer.Shape[d]
			default:
				meta.Shape[d] = fresh(in.Name, d)
			}
		}
		b.tensors[in.Name] = &tensorState{seg: -1, meta: meta}
		b.plan.Inputs = append(b.plan.Inputs, Tensor{Name: in.Name, Meta: meta})
	}
	return nil
}

// consumerMeta is the meta of the first model input that tensor t feeds,
// or nil.
func (b *builder) consumerMeta(t string) *fxgraph.TensorMeta {
	for _, i := range b.readers[t] {
		g := b.o.Graphs[i]
		if g == nil {
			continue
		}
		for name, tt := range b.pc.Steps[i].InputMap {
			if tt != t {
				continue
			}
			for _, p := range g.Placeholders() {
				if p.Target == name {
					m := p.Val()
					return &m
				}
			}
		}
	}
	return nil
}

// whole reports whether step i runs as a model of its own.
func (b *builder) whole(i int) bool {
	s := b.pc.Steps[i]
	g := b.o.Graphs[i]
	return g != nil && (s.Separate || g.IsDeferred() || len(g.Bounded) > 0 || len(g.Guards) > 0)
}

// step places step i in a segment and adds its nodes.
func (b *builder) step(i int) error {
	s := b.pc.Steps[i]
	st := Step{Name: s.Name(), Version: s.Version, Kind: "model", Placement: onDevice.String(), Whole: b.whole(i)}
	var bi *builtin
	if s.Builtin != "" {
		bi = builtins[s.Builtin]
		if bi == nil {
			return b.configErr(s.Key+".builtin", "unknown built-in step %q (built-ins: %s)", s.Builtin, strings.Join(Builtins(), ", "))
		}
		st.Kind, st.Placement = "builtin", bi.place.String()
	}
	if b.newSegment(i, bi) {
		b.cut()
		b.cur = &segBuild{idx: len(b.done), seg: &Segment{}, nodes: map[string]*fxgraph.Node{}}
		b.cur.e = &fxgraph.Emitter{Graph: fxgraph.New(), IR: fxgraph.NewRegistry(), MaxFoldElements: -1}
	}
	st.Segment = b.cur.idx
	b.plan.Steps = append(b.plan.Steps, st)
	b.cur.seg.Steps = append(b.cur.seg.Steps, i)
	switch {
	case st.Whole:
		return b.addWhole(i)
	case bi != nil:
		return b.addBuiltin(i, bi)
	}
	return b.addModel(i)
}

// newSegment reports whether step i (a built-in when bi is set) starts a
// new segment.
func (b *builder) newSegment(i int, bi *builtin) bool {
	if b.cur == nil || b.cur.seg.Path != "" || b.whole(i) || b.pc.Fuse == modelrepo.FuseNone {
		return true
	}
	if bi != nil && bi.place == onHost {
		return false // the host runs it after the device, in this segment
	}
	for _, t := range b.pc.Steps[i].InputMap {
		ts := b.tensors[t]
		if ts.seg == b.cur.idx && ts.late && ts.host {
			return true // the host computed it from this segment's device results
		}
	}
	return false
}

// cut closes the current segment.
func (b *builder) cut() {
	if b.cur != nil {
		b.done = append(b.done, b.cur)
		b.cur = nil
	}
}

// node returns the current segment's node for tensor t, a placeholder when
// the segment does not make it.
func (b *builder) node(t string) *fxgraph.Node {
	sb := b.cur
	if n, ok := sb.nodes[t]; ok {
		return n
	}
	meta := b.tensors[t].meta
	m := fxgraph.TensorMeta{DType: meta.DType, Shape: meta.Shape.Clone()}
	for d, dim := range m.Shape {
		if dim == fxgraph.Unknown {
			m.Shape[d] = fresh(t, d)
		}
	}
	n := sb.e.Graph.AddPlaceholder(t, m)
	sb.nodes[t] = n
	sb.seg.Inputs = append(sb.seg.Inputs, t)
	sb.seg.InputNames = append(sb.seg.InputNames, t)
	return n
}

// made records that step i made tensor t as node n of the current segment.
func (b *builder) made(i int, t string, n *fxgraph.Node, late bool) {
	b.cur.nodes[t] = n
	host := n.Op != nil && n.Op.Host || n.Val().DType == tensor.String
	if n.Op == fxgraph.GetItem {
		if src, err := n.InputNode(0); err == nil && src.Op != nil && src.Op.Host {
			host = true
		}
	}
	b.tensors[t] = &tensorState{seg: b.cur.idx, late: late, host: host, meta: n.Val()}
}

// lateInputs reports whether any input of step i was made late in the
// current segment.
func (b *builder) lateInputs(i int) bool {
	for _, t := range b.pc.Steps[i].InputMap {
		if ts := b.tensors[t]; ts.seg == b.cur.idx && ts.late {
			return true
		}
	}
	return false
}

func (b *builder) addModel(i int) error {
	s := b.pc.Steps[i]
	g := b.o.Graphs[i]
	ph := g.Placeholders()
	args := make([]*fxgraph.Node, len(ph))
	for j, p := range ph {
		t, ok := s.InputMap[p.Target]
		if !ok {
			return b.configErr(s.Key+".input_map", "model %s's input %q is not mapped (inputs: %s)", s.Model, p.Target, placeholderNames(g))
		}
		args[j] = b.node(t)
	}
	for name := range s.InputMap {
		if !slices.ContainsFunc(ph, func(p *fxgraph.Node) bool { return p.Target == name }) {
			return b.configErr(s.Key+".input_map."+name, "model %s has no input %q (inputs: %s)", s.Model, name, placeholderNames(g))
		}
	}
	outs, err := b.cur.e.Graph.Inline(g, args, nodePrefix(s.Name()))
	if err != nil {
		return b.configErr(s.Key, "model %s: %v", s.Model, err)
	}
	names := outputNames(g)
	for name, t := range s.OutputMap {
		k := slices.Index(names, name)
		if k < 0 {
			return b.configErr(s.Key+".output_map."+name, "model %s has no output %q (outputs: %s)", s.Model, name, strings.Join(names, ", "))
		}
		b.made(i, t, outs[k], true)
	}
	return nil
}

func (b *builder) addWhole(i int) error {
	s := b.pc.Steps[i]
	g := b.o.Graphs[i]
	seg := b.cur.seg
	seg.Graph, seg.Path = g, b.o.Paths[i]
	for _, p := range g.Placeholders() {
		t, ok := s.InputMap[p.Target]
		if !ok {
			return b.configErr(s.Key+".input_map", "model %s's input %q is not mapped (inputs: %s)", s.Model, p.Target, placeholderNames(g))
		}
		if err := checkFeeds(b.tensors[t].meta, p.Val()); err != nil {
			return b.configErr(s.Key+".input_map."+p.Target, "model %s: %v", s.Model, err)
		}
		seg.Inputs = append(seg.Inputs, t)
		seg.InputNames = append(seg.InputNames, p.Target)
	}
	names := outputNames(g)
	bounded := map[int]int{}
	for _, bo := range g.Bounded {
		bounded[bo.Output] = bo.Axis
	}
	for name := range s.OutputMap {
		if !slices.Contains(names, name) {
			return b.configErr(s.Key+".output_map."+name, "model %s has no output %q (outputs: %s)", s.Model, name, strings.Join(names, ", "))
		}
	}
	for k, o := range g.Outputs()[:g.ModelOutputs()] {
		t := s.OutputMap[names[k]]
		seg.Outputs = append(seg.Outputs, t)
		seg.OutputNames = append(seg.OutputNames, names[k])
		if t == "" {
			continue
		}
		m := o.Val()
		m.Shape = m.Shape.Clone()
		if axis, ok := bounded[k]; ok {
			m.Shape[axis] = fxgraph.Unknown
		}
		b.tensors[t] = &tensorState{seg: b.cur.idx, late: true, meta: m}
	}
	return nil
}

// checkFeeds checks that a value of meta have may feed an input of want.
func checkFeeds(have, want fxgraph.TensorMeta) error {
	if have.DType != want.DType || have.Rank() != want.Rank() {
		return fmt.Errorf("takes %s, fed %s", want, have)
	}
	for d, w := range want.Shape {
		if h := have.Shape[d]; w.IsStatic() && h.IsStatic() && w.Size != h.Size {
			return fmt.Errorf("takes %s, fed %s: dim %d differs", want, have, d)
		}
	}
	return nil
}

func (b *builder) addBuiltin(i int, bi *builtin) error {
	s := b.pc.Steps[i]
	p := &params{raw: s.Params, file: b.o.ConfigFile, key: s.Key, read: b.o.ReadFile}
	p.known(bi.params...)
	if p.err != nil {
		return p.err
	}
	in := map[string]*fxgraph.Node{}
	for name, t := range s.InputMap {
		if !slices.Contains(bi.inputNames(), name) {
			return b.configErr(s.Key+".input_map."+name, "built-in %s has no input %q (inputs: %s)", s.Builtin, name, strings.Join(bi.inputs, ", "))
		}
		in[name] = b.node(t)
	}
	for _, name := range bi.inputNames() {
		if in[name] == nil && !bi.optional(name) {
			return b.configErr(s.Key+".input_map", "built-in %s's input %q is not mapped", s.Builtin, name)
		}
	}
	late := b.lateInputs(i)
	c := &stepCtx{e: b.cur.e, in: in, p: p, name: nodePrefix(s.Builtin)}
	outs, err := bi.build(c)
	if err != nil {
		if errors.Is(err, ErrConfig) {
			return err
		}
		return b.configErr(s.Key, "%v", err)
	}
	for name, t := range s.OutputMap {
		k := slices.Index(bi.outputs, name)
		if k < 0 {
			return b.configErr(s.Key+".output_map."+name, "built-in %s has no output %q (outputs: %s)", s.Builtin, name, strings.Join(bi.outputs, ", "))
		}
		if outs[k] == nil {
			return b.configErr(s.Key+".output_map."+name, "built-in %s makes %q only with its params say so (see docs/PIPELINES.md)", s.Builtin, name)
		}
		b.made(i, t, outs[k], late || bi.place != onHost)
	}
	return nil
}

func nodePrefix(name string) string {
	s := nonIdent.ReplaceAllString(name, "_")
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		s = "s" + s
	}
	return s
}

func placeholderNames(g *fxgraph.Graph) string {
	var out []string
	for _, p := range g.Placeholders() {
		out = append(out, p.Target)
	}
	return strings.Join(out, ", ")
}

func outputNames(g *fxgraph.Graph) []string {
	n := g.ModelOutputs()
	out := make([]string, n)
	for i := range n {
		out[i] = g.OutputName(i)
	}
	return out
}

// finish sets a stitched segment's outputs: the tensors it makes that the
// pipeline returns or later segments read.
func (b *builder) finish(sb *segBuild) error {
	seg := sb.seg
	b.plan.Segments = append(b.plan.Segments, seg)
	if seg.Path != "" {
		return nil
	}
	g := sb.e.Graph
	var outs []*fxgraph.Node
	for _, t := range slices.Sorted(maps.Keys(sb.nodes)) {
		ts := b.tensors[t]
		if ts.seg != sb.idx || !b.wanted(t, sb.idx) {
			continue
		}
		outs = append(outs, sb.nodes[t])
		seg.Outputs = append(seg.Outputs, t)
		seg.OutputNames = append(seg.OutputNames, t)
	}
	if len(outs) == 0 {
		return fmt.Errorf("%w: %s: segment %d makes nothing the pipeline uses", ErrConfig, b.o.ConfigFile, sb.idx)
	}
	g.SetOutput(outs...)
	g.OutputNames = slices.Clone(seg.Outputs)
	g.EliminateDeadCode()
	if err := g.Validate(); err != nil {
		return fmt.Errorf("pipeline: segment %d: %w", sb.idx, err)
	}
	if _, err := fxgraph.SplitHost(g); err != nil {
		return b.configErr("pipeline", "segment %d: %v", sb.idx, err)
	}
	seg.Graph = g
	return nil
}

// wanted reports whether tensor t, made in segment seg, is a pipeline
// output or read by a step of a later segment.
func (b *builder) wanted(t string, seg int) bool {
	for _, o := range b.o.Config.Outputs {
		if o.Name == t {
			return true
		}
	}
	for _, i := range b.readers[t] {
		if b.plan.Steps[i].Segment != seg {
			return true
		}
	}
	return false
}

// outputs sets the pipeline's outputs, checking what the config declares
// of them against what the steps make.
func (b *builder) outputs() error {
	for i, o := range b.o.Config.Outputs {
		key := fmt.Sprintf("outputs[%d]", i)
		ts := b.tensors[o.Name]
		if ts == nil {
			return b.configErr(key+".name", "no step makes %q", o.Name)
		}
		have := ts.meta
		if o.DType != tensor.Invalid && o.DType != have.DType {
			return b.configErr(key+".dtype", "is %s, but the steps make %s", o.DType, have)
		}
		if o.Dims != nil && len(o.Dims) != have.Rank() {
			return b.configErr(key+".dims", "%s has rank %d, but the steps make %s", o.Dims, len(o.Dims), have)
		}
		for d, dim := range o.Dims {
			if hd := have.Shape[d]; dim.IsStatic() && dim != modelrepo.AnyDim && hd.IsStatic() && hd.Size != dim.Size {
				return b.configErr(fmt.Sprintf("%s.dims[%d]", key, d), "is %d, but the steps make %s", dim.Size, have)
			}
		}
		b.plan.Outputs = append(b.plan.Outputs, Tensor{Name: o.Name, Meta: have})
	}
	return nil
}
