package fx

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// builder holds the state of one import.
type builder struct {
	a     *archive
	model string // the program's name in models/ ("model")
	entry string // models/<model>.json, for errors
	ep    *exportedProgram
	gr    *graph
	ir    *fxgraph.Registry
	g     *fxgraph.Graph

	weights, constants payloadConfig

	// env maps the archive's value names to IR nodes, or to literals for
	// constant inputs.
	env map[string]any
	// uses counts the reads of each value name (node arguments and graph
	// outputs), so that only used outputs of tuple nodes get getitems.
	uses map[string]int
	// aliasClass maps values that share memory (view outputs and their
	// bases) to the name of their class; aliases lists each class. An
	// in-place op on one member is rebound only when no other member is
	// read afterwards.
	aliasClass map[string]string
	aliases    map[string][]string
	// lastUse is the index of the last node reading each value
	// (len(nodes) for graph outputs); node is the index being converted.
	lastUse map[string]int
	node    int
	// bound lists the archive tensor names bound to IR nodes, in order, for
	// the metadata cross-check.
	bound []binding
	// symSize caches aten.sym_size.int nodes by input and dim.
	symSize map[symKey]*fxgraph.Node
	// reserved holds the archive's value and node names: nodes the importer
	// adds on its own are named around them, so that every torch value
	// keeps its name in the IR.
	reserved map[string]bool
	// fresh holds, per base name, the last suffix freshName handed out, so
	// that naming n nodes of one target takes O(n) in all.
	fresh map[string]int
	// state holds the get_attr nodes of the program's parameters, buffers
	// and constants: what an in-place op must not write (a folded constant
	// is a computed value, which it may).
	state map[*fxgraph.Node]bool
	// views records the slice and select views, for writing an in-place
	// op's result back into their bases (writeback.go).
	views map[string]viewStep
}

type binding struct {
	name string
	n    *fxgraph.Node
}

type symKey struct {
	n   *fxgraph.Node
	dim int
}

// newBuilder picks the program to import from the archive.
func newBuilder(a *archive) (*builder, error) {
	b := &builder{a: a, ir: fxgraph.NewRegistry(), g: fxgraph.New(), env: map[string]any{}, uses: map[string]int{},
		aliasClass: map[string]string{}, aliases: map[string][]string{}, lastUse: map[string]int{},
		symSize: map[symKey]*fxgraph.Node{}, views: map[string]viewStep{}}
	models := a.modelNames()
	switch {
	case len(models) == 0:
		if anyPrefix(a, "data/aotinductor/") {
			return nil, fmt.Errorf("%w: the archive holds only AOTInductor artifacts, no exported program (models/*.json)", ErrUnsupported)
		}
		return nil, fmt.Errorf("%w: the archive has no exported program (%smodels/<name>.json)", ErrFormat, a.root)
	case len(models) == 1:
		b.model = models[0]
	default:
		for _, m := range models {
			if m == "model" {
				b.model = m
			}
		}
		if b.model == "" {
			return nil, fmt.Errorf("%w: the archive holds %d programs (%s); xserve serves one: save a single ExportedProgram",
				ErrUnsupported, len(models), strings.Join(models, ", "))
		}
	}
	b.entry = a.entry(modelsDir + b.model + ".json")
	return b, nil
}

// anyPrefix reports whether an entry name starts with prefix.
func anyPrefix(a *archive, prefix string) bool {
	for name := range a.files {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// errf returns an ErrFormat error about the program entry.
func (b *builder) errf(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrFormat, b.entry, fmt.Sprintf(format, args...))
}

// build reads the program and returns the graph.
func (b *builder) build() (*fxgraph.Graph, error) {
	if err := b.readProgram(); err != nil {
		return nil, err
	}
	if err := b.readPayloadConfigs(); err != nil {
		return nil, err
	}
	if err := b.setSymbolRanges(); err != nil {
		return nil, err
	}
	b.countUses()
	b.reserveNames()
	if err := b.addInputs(); err != nil {
		return nil, err
	}
	for i := range b.gr.Nodes {
		b.node = i
		if err := b.convertNode(&b.gr.Nodes[i]); err != nil {
			return nil, err
		}
	}
	if err := b.addOutputs(); err != nil {
		return nil, err
	}
	b.g.EliminateDeadCode()
	if err := b.ir.PropagateShapes(b.g); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnsupported, b.entry, err)
	}
	if err := b.crossCheck(); err != nil {
		return nil, err
	}
	if err := b.g.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: imported graph: %w", ErrFormat, b.entry, err)
	}
	return b.g, nil
}

// readProgram decodes models/<name>.json after checking its schema version.
func (b *builder) readProgram() error {
	name := modelsDir + b.model + ".json"
	raw, err := b.a.read(name, maxModelJSON)
	if err != nil {
		return err
	}
	var probe versionProbe
	if err := json.Unmarshal(raw, &probe); err != nil {
		return b.errf("%v", err)
	}
	if probe.SchemaVersion == nil || probe.SchemaVersion.Major == nil {
		return b.errf("no schema_version: not a serialized ExportedProgram")
	}
	major := *probe.SchemaVersion.Major
	minor := int64(0)
	if probe.SchemaVersion.Minor != nil {
		minor = *probe.SchemaVersion.Minor
	}
	if major != supportedMajor {
		return fmt.Errorf("%w: %s: schema version %d.%d (written by torch %s); this importer reads schema major version %d (torch 2.8 to 2.14)",
			ErrUnsupported, b.entry, major, minor, orUnknown(probe.TorchVersion), supportedMajor)
	}
	var ep exportedProgram
	if err := json.Unmarshal(raw, &ep); err != nil {
		return b.errf("%v", err)
	}
	if ep.GraphModule == nil || ep.GraphModule.Graph == nil || ep.GraphModule.Signature == nil {
		return b.errf("no graph_module.graph or graph_module.signature")
	}
	b.ep, b.gr = &ep, ep.GraphModule.Graph
	return nil
}

// orUnknown returns s, or "unknown" when it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// readPayloadConfigs reads the weights and constants configs.
func (b *builder) readPayloadConfigs() error {
	legacy := weightsDir + b.model + ".pt"
	if b.a.has(legacy) {
		return fmt.Errorf("%w: %s: %s", ErrUnsupported, b.a.entry(legacy), pickledHint)
	}
	wc := fmt.Sprintf(weightsConfigFmt, b.model)
	if b.a.has(wc) {
		if err := b.a.readJSON(wc, maxConfigJSON, &b.weights); err != nil {
			return err
		}
	}
	cc := fmt.Sprintf(constantsConfigFmt, b.model)
	if b.a.has(cc) {
		if err := b.a.readJSON(cc, maxConfigJSON, &b.constants); err != nil {
			return err
		}
	}
	return nil
}

// setSymbolRanges turns range_constraints into Graph.SymbolRanges. A bound
// torch leaves open (null, or int_oo) is no bound.
func (b *builder) setSymbolRanges() error {
	for name, rc := range b.ep.RangeConstraints {
		if !identRE.MatchString(name) {
			continue // a compound expression: not a dim symbol of the IR
		}
		r := fxgraph.SymbolRange{Min: 0, Max: -1}
		if rc.MinVal != nil {
			v := float64(*rc.MinVal)
			if math.IsNaN(v) {
				return b.errf("range of %s has min NaN", name)
			}
			if v > 0 && v < 1<<62 {
				r.Min = int64(v)
			}
		}
		if rc.MaxVal != nil {
			v := float64(*rc.MaxVal)
			if math.IsNaN(v) {
				return b.errf("range of %s has max NaN", name)
			}
			if v < 1<<62 {
				if v < 0 {
					return b.errf("range of %s has max %v < 0", name, v)
				}
				r.Max = int64(v)
			}
		}
		if r.Max >= 0 && r.Min > r.Max {
			return b.errf("range of %s is empty: %s", name, r)
		}
		if b.g.SymbolRanges == nil {
			b.g.SymbolRanges = map[string]fxgraph.SymbolRange{}
		}
		b.g.SymbolRanges[symbolName(name)] = r
	}
	return nil
}

// symbolName is the IR name of a torch symbol. torch.export does not
// serialize the names given to torch.export.Dim, so symbols keep torch's
// names (s0, s77).
func symbolName(s string) string { return s }

// countUses counts how often each value name is read, and where last.
func (b *builder) countUses() {
	for i := range b.gr.Nodes {
		for _, in := range b.gr.Nodes[i].Inputs {
			for _, name := range argRefs(in.Arg) {
				b.uses[name]++
				b.lastUse[name] = i
			}
		}
	}
	for _, spec := range b.ep.GraphModule.Signature.OutputSpecs {
		if spec.Kind != "user_output" {
			continue
		}
		var out userOutputSpec
		if spec.decode(&out) == nil {
			for _, name := range argRefs(out.Arg) {
				b.uses[name]++
				b.lastUse[name] = len(b.gr.Nodes)
			}
		}
	}
}

// reserveNames collects the names torch gives to values and nodes.
func (b *builder) reserveNames() {
	b.reserved = map[string]bool{}
	for name := range b.gr.TensorValues {
		b.reserved[sanitize(name)] = true
	}
	for i := range b.gr.Nodes {
		n := &b.gr.Nodes[i]
		if n.Name != nil {
			b.reserved[sanitize(*n.Name)] = true
		}
		if outs, err := outputNames(n); err == nil {
			for _, o := range outs {
				b.reserved[sanitize(o)] = true
			}
		}
	}
}

// freshName returns a node name derived from target ("aten._softmax.default"
// -> softmax, softmax_1, ...) that neither the graph nor the archive uses.
// nodeName names a node a decomposition emits (decomp.Call.NodeName): a
// constant (op nil) or an unnamed node gets a fresh name, a named one its
// name made an identifier.
func (b *builder) nodeName(name string, op *fxgraph.Op) string {
	switch {
	case op == nil:
		return b.freshName(name)
	case name == "":
		return b.freshName(op.Name)
	}
	return sanitize(name)
}

func (b *builder) freshName(target string) string {
	base := target
	if parts := strings.Split(target, "."); len(parts) >= 2 && parts[0] == "aten" {
		base = parts[1]
	}
	base = strings.Trim(sanitize(base), "_")
	if base == "" {
		base = "node"
	}
	free := func(name string) bool { return !b.reserved[name] && b.g.Node(name) == nil }
	if free(base) {
		return base
	}
	if b.fresh == nil {
		b.fresh = map[string]int{}
	}
	for i := b.fresh[base] + 1; ; i++ {
		if name := base + "_" + strconv.Itoa(i); free(name) {
			b.fresh[base] = i
			return name
		}
	}
}

// argRefs returns the value names an argument reads.
func argRefs(u union) []string {
	var out []string
	switch u.Kind {
	case "as_tensor", "as_optional_tensor", "as_sym_int", "as_sym_float", "as_sym_bool":
		var v struct {
			Name     string          `json:"name"`
			AsName   string          `json:"as_name"`
			AsTensor *tensorArgument `json:"as_tensor"`
		}
		if json.Unmarshal(u.Raw, &v) == nil {
			for _, s := range []string{v.Name, v.AsName} {
				if s != "" {
					out = append(out, s)
				}
			}
			if v.AsTensor != nil {
				out = append(out, v.AsTensor.Name)
			}
		}
	case "as_tensors", "as_optional_tensors", "as_sym_ints", "as_sym_floats", "as_sym_bools":
		var list []json.RawMessage
		if json.Unmarshal(u.Raw, &list) == nil {
			for _, e := range list {
				out = append(out, argRefs(union{Kind: "as_tensor", Raw: e})...)
			}
		}
	}
	return out
}

// addInputs adds placeholders for user inputs and get_attr nodes for
// parameters, buffers and tensor constants, following the graph signature.
func (b *builder) addInputs() error {
	sig := b.ep.GraphModule.Signature
	for i, spec := range sig.InputSpecs {
		if err := b.addInput(i, spec); err != nil {
			return err
		}
	}
	return nil
}

// addInput adds input spec i.
func (b *builder) addInput(i int, spec union) error {
	switch spec.Kind {
	case "user_input":
		var s userInputSpec
		if err := spec.decode(&s); err != nil {
			return b.errf("input spec %d: %v", i, err)
		}
		if s.Arg.Kind != "as_tensor" {
			return fmt.Errorf("%w: %s: user input %d is a %s; only tensor inputs are supported (pass ints and floats as constants)",
				ErrUnsupported, b.entry, i, strings.TrimPrefix(s.Arg.Kind, "as_"))
		}
		var t tensorArgument
		if err := s.Arg.decode(&t); err != nil {
			return b.errf("input spec %d: %v", i, err)
		}
		meta, err := b.inputMeta(t.Name)
		if err != nil {
			return err
		}
		n := b.g.AddPlaceholder(sanitize(t.Name), meta)
		n.Target = t.Name
		return b.bindValue(t.Name, n)
	case "parameter":
		var s inputToParameterSpec
		if err := spec.decode(&s); err != nil {
			return b.errf("input spec %d: %v", i, err)
		}
		return b.addTensorInput(s.Arg.Name, s.ParameterName, "parameter", &b.weights)
	case "buffer":
		var s inputToBufferSpec
		if err := spec.decode(&s); err != nil {
			return b.errf("input spec %d: %v", i, err)
		}
		// Persistent buffers are saved with the weights, non-persistent ones
		// with the constants.
		cfg := &b.weights
		if _, ok := b.weights.Config[s.BufferName]; !ok {
			cfg = &b.constants
		}
		return b.addTensorInput(s.Arg.Name, s.BufferName, "buffer", cfg)
	case "tensor_constant":
		var s inputToTensorConstantSpec
		if err := spec.decode(&s); err != nil {
			return b.errf("input spec %d: %v", i, err)
		}
		return b.addTensorInput(s.Arg.Name, s.TensorConstantName, "tensor constant", &b.constants)
	case "constant_input":
		var s inputToConstantInputSpec
		if err := spec.decode(&s); err != nil {
			return b.errf("input spec %d: %v", i, err)
		}
		v, err := constantValue(s.Value)
		if err != nil {
			return b.errf("constant input %s: %v", s.Name, err)
		}
		b.env[s.Name] = v
		return nil
	case "custom_obj", "token":
		return fmt.Errorf("%w: %s: input %d is a %s input (script objects and effect tokens are not supported)",
			ErrUnsupported, b.entry, i, spec.Kind)
	}
	return fmt.Errorf("%w: %s: input %d has unknown kind %q", ErrUnsupported, b.entry, i, spec.Kind)
}

// constantValue decodes a schema.ConstantValue.
func constantValue(u union) (any, error) {
	switch u.Kind {
	case "as_none":
		return nil, nil
	case "as_int":
		return decodeInt(u.Raw)
	case "as_float":
		var f jnum
		err := u.decode(&f)
		return float64(f), err
	case "as_string":
		var s string
		err := u.decode(&s)
		return s, err
	case "as_bool":
		var v bool
		err := u.decode(&v)
		return v, err
	}
	return nil, fmt.Errorf("constant kind %q", u.Kind)
}

// inputMeta turns the tensor_values entry of a user input into a TensorMeta.
func (b *builder) inputMeta(name string) (fxgraph.TensorMeta, error) {
	tm, ok := b.gr.TensorValues[name]
	if !ok {
		return fxgraph.TensorMeta{}, b.errf("input %s has no entry in tensor_values", name)
	}
	dt, err := dtypeOf(tm.DType)
	if err != nil {
		return fxgraph.TensorMeta{}, fmt.Errorf("%w (input %s of %s)", err, name, b.entry)
	}
	if tm.Layout != nil && *tm.Layout != layoutStrided {
		return fxgraph.TensorMeta{}, fmt.Errorf("%w: %s: input %s has layout %d (only dense strided tensors are supported)",
			ErrUnsupported, b.entry, name, *tm.Layout)
	}
	meta := fxgraph.TensorMeta{DType: dt, Shape: make(fxgraph.Shape, len(tm.Sizes))}
	for i, u := range tm.Sizes {
		d, err := decodeSymInt(u)
		if err != nil {
			return fxgraph.TensorMeta{}, b.errf("input %s size %d: %v", name, i, err)
		}
		switch {
		case d.expr != "":
			e, err := parseSymExpr(d.expr)
			if err != nil {
				return fxgraph.TensorMeta{}, fmt.Errorf("%w: %s: input %s dim %d: %v", ErrUnsupported, b.entry, name, i, err)
			}
			// A derived symbol named by its expression, bound from the
			// plain symbols it reads.
			derived := e.String()
			if b.g.SymbolExprs == nil {
				b.g.SymbolExprs = map[string]*fxgraph.SymExpr{}
			}
			b.g.SymbolExprs[derived] = e
			meta.Shape[i] = fxgraph.S(derived)
		case d.sym != "":
			meta.Shape[i] = fxgraph.S(symbolName(d.sym))
		default:
			if d.size < 0 {
				return fxgraph.TensorMeta{}, b.errf("input %s has negative size %d", name, d.size)
			}
			meta.Shape[i] = fxgraph.D(d.size)
		}
	}
	return meta, nil
}

// addTensorInput adds the get_attr node of a parameter, buffer or constant.
func (b *builder) addTensorInput(argName, fqn, kind string, cfg *payloadConfig) error {
	pm, ok := cfg.Config[fqn]
	if !ok {
		return b.errf("%s %s (input %s) is in neither %s nor %s", kind, fqn, argName,
			b.a.entry(fmt.Sprintf(weightsConfigFmt, b.model)), b.a.entry(fmt.Sprintf(constantsConfigFmt, b.model)))
	}
	dir := weightsDir
	if cfg == &b.constants {
		dir = constantsDir
	}
	entry := dir + pm.PathName
	if pm.UsePickle {
		return fmt.Errorf("%w: %s %s is pickled in %s (tensor subclasses and script objects): %s",
			ErrUnsupported, kind, fqn, b.a.entry(entry), pickledHint)
	}
	if pm.TensorMeta == nil {
		return b.errf("%s %s has no tensor_meta", kind, fqn)
	}
	if pm.PathName == "" || strings.Contains(pm.PathName, "/") {
		return b.errf("%s %s has path_name %q", kind, fqn, pm.PathName)
	}
	storage, err := b.a.readStorage(entry)
	if err != nil {
		return err
	}
	t, err := b.a.materialize(pm.TensorMeta, storage, kind+" "+fqn)
	if err != nil {
		if isSentinel(err) {
			return fmt.Errorf("%w (%s %s in %s)", err, kind, fqn, b.a.entry(entry))
		}
		return fmt.Errorf("%w: %s %s in %s: %v", ErrFormat, kind, fqn, b.a.entry(entry), err)
	}
	if tm, ok := b.gr.TensorValues[argName]; ok {
		if err := checkPayloadMeta(t, &tm); err != nil {
			return b.errf("%s %s: the graph says %v", kind, fqn, err)
		}
	}
	n := b.g.AddConstant(fqn, t)
	if b.state == nil {
		b.state = map[*fxgraph.Node]bool{}
	}
	b.state[n] = true
	return b.bindValue(argName, n)
}

// isSentinel reports whether err already wraps a package sentinel.
func isSentinel(err error) bool {
	return errors.Is(err, ErrFormat) || errors.Is(err, ErrUnsupported)
}

// checkPayloadMeta compares a loaded tensor with the graph's metadata of the
// placeholder it feeds.
func checkPayloadMeta(t *tensor.Tensor, tm *tensorMeta) error {
	dt, err := dtypeOf(tm.DType)
	if err != nil {
		return err
	}
	sizes, err := staticInts(tm.Sizes, "sizes")
	if err != nil {
		return err
	}
	if dt != t.DType || tensor.ShapeString(sizes) != tensor.ShapeString(t.Shape) {
		return fmt.Errorf("%s%s, the weights config %s", dt, tensor.ShapeString(sizes), t)
	}
	return nil
}

// bindValue binds an archive value name to a node.
func (b *builder) bindValue(name string, n *fxgraph.Node) error {
	if _, dup := b.env[name]; dup {
		return b.errf("value %s is defined twice", name)
	}
	b.env[name] = n
	b.bound = append(b.bound, binding{name, n})
	return nil
}

// addAliases records that names share memory.
func (b *builder) addAliases(names ...string) {
	class := ""
	for _, n := range names {
		if c, ok := b.aliasClass[n]; ok {
			class = c
			break
		}
	}
	if class == "" {
		class = names[0]
	}
	for _, n := range names {
		if n == "" || b.aliasClass[n] == class {
			continue
		}
		b.aliasClass[n] = class
		b.aliases[class] = append(b.aliases[class], n)
	}
}

// readAllAfter returns every value sharing memory with name that a node
// after the current one reads.
func (b *builder) readAllAfter(name string) []string {
	var out []string
	class, ok := b.aliasClass[name]
	if !ok {
		return nil
	}
	for _, m := range b.aliases[class] {
		if m != name && b.lastUse[m] > b.node {
			out = append(out, m)
		}
	}
	return out
}

// readAfter returns a value sharing memory with name that a node after the
// current one reads, or "".
func (b *builder) readAfter(name string) string {
	class, ok := b.aliasClass[name]
	if !ok {
		return ""
	}
	for _, m := range b.aliases[class] {
		if m != name && b.lastUse[m] > b.node {
			return m
		}
	}
	return ""
}

// rebind points an existing name at a new node (after an in-place op).
func (b *builder) rebind(name string, n *fxgraph.Node) {
	b.env[name] = n
	b.bound = append(b.bound, binding{name, n})
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// sanitize makes a torch name usable as an IR node name.
func sanitize(name string) string {
	s := nonIdent.ReplaceAllString(name, "_")
	if s == "" {
		return "v"
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "v" + s
	}
	return s
}

// addOutputs sets the graph outputs from the signature's user outputs.
// Mutations of buffers, parameters or inputs are rejected: a served model
// must not carry state from one request to the next.
func (b *builder) addOutputs() error {
	var outs []*fxgraph.Node
	for i, spec := range b.ep.GraphModule.Signature.OutputSpecs {
		switch spec.Kind {
		case "user_output":
			var s userOutputSpec
			if err := spec.decode(&s); err != nil {
				return b.errf("output spec %d: %v", i, err)
			}
			if s.Arg.Kind != "as_tensor" {
				return fmt.Errorf("%w: %s: output %d is a %s; only tensor outputs are supported",
					ErrUnsupported, b.entry, i, strings.TrimPrefix(s.Arg.Kind, "as_"))
			}
			var t tensorArgument
			if err := s.Arg.decode(&t); err != nil {
				return b.errf("output spec %d: %v", i, err)
			}
			v, ok := b.env[t.Name]
			n, isNode := v.(*fxgraph.Node)
			if !ok || !isNode {
				return b.errf("output %d (%s) is not produced by any node or input", i, t.Name)
			}
			outs = append(outs, n)
			b.g.OutputNames = append(b.g.OutputNames, t.Name)
		case "buffer_mutation", "parameter_mutation", "user_input_mutation":
			var s mutationSpec
			_ = spec.decode(&s)
			what := s.BufferName + s.ParameterName + s.UserInputName
			return fmt.Errorf("%w: %s: the program writes %s %s in place (%s); xserve serves stateless programs: export the model in eval mode (model.eval()) without state updates",
				ErrUnsupported, b.entry, strings.TrimSuffix(spec.Kind, "_mutation"), what, s.Arg.Name)
		case "loss_output", "gradient_to_parameter", "gradient_to_user_input":
			return fmt.Errorf("%w: %s: output %d is a %s: training programs are not supported", ErrUnsupported, b.entry, i, spec.Kind)
		case "token":
			return fmt.Errorf("%w: %s: output %d is an effect token: programs with side effects are not supported", ErrUnsupported, b.entry, i)
		default:
			return fmt.Errorf("%w: %s: output %d has unknown kind %q", ErrUnsupported, b.entry, i, spec.Kind)
		}
	}
	if len(outs) == 0 {
		return fmt.Errorf("%w: %s: the program returns no tensors", ErrUnsupported, b.entry)
	}
	b.g.SetOutput(outs...)
	return nil
}

// crossCheck compares the Meta the IR computed for every bound value with the
// archive's tensor_values: dtype and rank must match, and so must every dim
// both sides know (static sizes, plain symbols). A mismatch means an
// operator was mapped wrongly.
func (b *builder) crossCheck() error {
	for _, bd := range b.bound {
		n := bd.n
		if n.Graph() != b.g {
			continue // erased as dead code
		}
		tm, ok := b.gr.TensorValues[bd.name]
		if !ok || n.Meta.Tuple || len(n.Meta.Vals) != 1 {
			continue
		}
		got := n.Val()
		dt, err := dtypeOf(tm.DType)
		if err != nil {
			return fmt.Errorf("%w (value %s of %s)", err, bd.name, b.entry)
		}
		want := make([]symDim, len(tm.Sizes))
		for i, u := range tm.Sizes {
			if want[i], err = decodeSymInt(u); err != nil {
				return b.errf("value %s size %d: %v", bd.name, i, err)
			}
		}
		if err := compareMeta(got, dt, want); err != nil {
			return fmt.Errorf("%w: %s: node %s (%s) for torch value %s: IR computes %s, torch says %s: %v",
				ErrFormat, b.entry, n.Name, n.Target, bd.name, got, formatTorchMeta(dt, want), err)
		}
	}
	return nil
}

// compareMeta compares the IR's meta of a value with torch's dtype and sizes.
func compareMeta(got fxgraph.TensorMeta, dt tensor.DType, want []symDim) error {
	if got.DType != dt {
		return fmt.Errorf("dtype differs")
	}
	if len(got.Shape) != len(want) {
		return fmt.Errorf("rank differs")
	}
	for i, w := range want {
		g := got.Shape[i]
		if g == fxgraph.Unknown || w.expr != "" {
			continue
		}
		switch {
		case w.sym == "" && g.IsStatic() && g.Size != w.size:
			return fmt.Errorf("dim %d differs", i)
		case w.sym != "" && g.IsStatic():
			return fmt.Errorf("dim %d is static in the IR, symbolic in torch", i)
		case w.sym == "" && !g.IsStatic():
			return fmt.Errorf("dim %d is symbolic in the IR, static in torch", i)
		case w.sym != "" && g.Sym != symbolName(w.sym):
			return fmt.Errorf("dim %d is a different symbol", i)
		}
	}
	return nil
}

// formatTorchMeta prints torch's meta like a TensorMeta.
func formatTorchMeta(dt tensor.DType, dims []symDim) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		switch {
		case d.expr != "":
			parts[i] = d.expr
		case d.sym != "":
			parts[i] = d.sym
		default:
			parts[i] = fmt.Sprint(d.size)
		}
	}
	return dt.String() + "[" + strings.Join(parts, ",") + "]"
}
