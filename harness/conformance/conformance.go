// Package conformance runs the ONNX backend test data (the cases inside the
// pinned onnx wheel, found by internal/onnxtestdata) through xserve's whole
// path: decode, import, lower, compile on a PJRT plugin, execute, and
// compare with the expected outputs the ONNX project computed with its
// reference implementation.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/platforms"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

// Suites are the test-data directories that make up the conformance run.
var Suites = []string{"node", "pytorch-converted", "pytorch-operator", "simple"}

// Status is the outcome of one case.
type Status string

// Outcomes. Skipped is only ever an operator (or type) that xserve rejects
// with a clear "unsupported" error; any other failure is Failed.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Case is one test case directory.
type Case struct {
	Suite string
	Name  string
	Dir   string
}

// ID is "suite/name".
func (c Case) ID() string { return c.Suite + "/" + c.Name }

// Result is the outcome of running one case.
type Result struct {
	Case
	Status Status
	// Ops are the ONNX operator types of the model's main graph, sorted.
	Ops []string
	// Targets are the IR targets the lowered program used, sorted.
	Targets []string
	// CustomCalls are the custom-call targets of the lowered programs (the
	// platform's kernels), sorted.
	CustomCalls []string
	// Detail is the error or mismatch for failed and skipped cases.
	Detail   string
	Duration time.Duration
}

// ListCases returns every case of the suites under dataDir, sorted by ID.
func ListCases(dataDir string) ([]Case, error) {
	var out []Case
	for _, s := range Suites {
		entries, err := os.ReadDir(filepath.Join(dataDir, s))
		if err != nil {
			return nil, fmt.Errorf("conformance: %w (want the onnx wheel's backend test data: make venv)", err)
		}
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), "test_") {
				out = append(out, Case{Suite: s, Name: e.Name(), Dir: filepath.Join(dataDir, s, e.Name())})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out, nil
}

// Runner runs cases on one PJRT client.
type Runner struct {
	Client   *pjrt.Client
	Lowerer  *lower.Lowerer
	Importer *onnx.Importer
	// RTol and ATol bound |got-want| <= ATol + RTol*|want| for float outputs.
	RTol, ATol float64
}

// NewRunner returns a runner with the ONNX backend test's default
// tolerances (rtol 1e-3) and an absolute tolerance of 1e-5.
func NewRunner(c *pjrt.Client) *Runner {
	return &Runner{
		Client:   c,
		Lowerer:  platforms.New(lower.Options{Platform: c.Platform(), Kernels: c.Kernels()}),
		Importer: onnx.NewImporter(),
		RTol:     1e-3,
		ATol:     1e-5,
	}
}

// isUnsupported reports whether err is a clear "unsupported" rejection.
func isUnsupported(err error) bool {
	return errors.Is(err, onnx.ErrUnsupported) || errors.Is(err, fxgraph.ErrUnsupported) || errors.Is(err, lower.ErrNoRule)
}

// Run runs one case: every test_data_set_* directory in it must match.
func (r *Runner) Run(ctx context.Context, c Case) (res Result) {
	start := time.Now()
	res.Case = c
	defer func() {
		if p := recover(); p != nil {
			res.Status, res.Detail = Failed, fmt.Sprintf("panic: %v", p)
		}
		res.Duration = time.Since(start)
	}()
	fail := func(err error) Result {
		res.Status, res.Detail = Failed, err.Error()
		if why := BadData[c.ID()]; why != "" {
			res.Detail = "test data contradicts the model: " + why + "; " + res.Detail
		}
		if isUnsupported(err) {
			res.Status = Skipped
		}
		return res
	}
	m, err := onnx.ReadModelFile(filepath.Join(c.Dir, "model.onnx"))
	if err != nil {
		return fail(err)
	}
	res.Ops = opTypes(m)
	g, err := r.Importer.Import(m)
	var needs *onnx.NeedsValueError
	perSet := errors.As(err, &needs) || hasStructuredInputs(m)
	if err != nil && !perSet {
		return fail(err)
	}
	sets, _ := filepath.Glob(filepath.Join(c.Dir, "test_data_set_*"))
	if len(sets) == 0 {
		return fail(errors.New("no test_data_set_* directory"))
	}
	sort.Strings(sets)
	targets := map[string]bool{}
	for _, set := range sets {
		sg, opts := g, onnx.ImportOptions{}
		if perSet {
			// Some operands (shapes, axes, pads) are graph inputs, or
			// sequence inputs need their lengths: compile this data set's
			// program with their values, as a server would for
			// compile-time-constant inputs.
			if sg, opts, err = r.importWithValues(m, set); err != nil {
				return fail(fmt.Errorf("%s: %w", filepath.Base(set), err))
			}
		}
		if err := r.runSet(ctx, m, sg, opts, set, targets, randomCheck(c.ID())); err != nil {
			return fail(fmt.Errorf("%s: %w", filepath.Base(set), err))
		}
	}
	res.Targets, res.CustomCalls = splitTargets(targets)
	res.Status = Passed
	if p := RandomCases[c.ID()]; p != "" {
		res.Detail = "checked by properties (" + p + ")"
	}
	return res
}

// importWithValues imports m with the values of the data set's inputs that
// operators need at compile time, adding inputs until the import succeeds;
// it returns the options it imported with.
func (r *Runner) importWithValues(m *onnx.Model, set string) (*fxgraph.Graph, onnx.ImportOptions, error) {
	inputs, err := readValues(set, "input", graphInputs(m))
	if err != nil {
		return nil, onnx.ImportOptions{}, err
	}
	byName := map[string]*tensor.Tensor{}
	structured := map[string]*onnx.Value{}
	for i, vi := range graphInputs(m) {
		if i >= len(inputs) {
			break
		}
		if inputs[i].Kind == onnx.TypeTensor {
			byName[vi.Name] = inputs[i].Tensor
		} else {
			structured[vi.Name] = inputs[i]
		}
	}
	values := map[string]*tensor.Tensor{}
	for {
		opts := onnx.ImportOptions{Values: values, Structured: structured}
		g, err := r.Importer.ImportWithOptions(m, opts)
		var needs *onnx.NeedsValueError
		if !errors.As(err, &needs) {
			return g, opts, err
		}
		added := false
		for _, name := range needs.Inputs {
			if _, done := values[name]; !done && byName[name] != nil {
				values[name] = byName[name]
				added = true
			}
		}
		if !added {
			return nil, onnx.ImportOptions{}, err
		}
	}
}

func opTypes(m *onnx.Model) []string {
	seen := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		seen[n.OpType] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// graphInputs returns the graph inputs that are not initializers.
func graphInputs(m *onnx.Model) []*onnx.ValueInfo {
	inits := map[string]bool{}
	for _, in := range m.Graph.Initializers {
		inits[in.Name] = true
	}
	var out []*onnx.ValueInfo
	for _, vi := range m.Graph.Inputs {
		if !inits[vi.Name] {
			out = append(out, vi)
		}
	}
	return out
}

// hasStructuredInputs reports whether m has sequence or optional inputs:
// the importer needs their structure (ImportOptions.Structured).
func hasStructuredInputs(m *onnx.Model) bool {
	for _, vi := range graphInputs(m) {
		if vi.Type != nil && (vi.Type.Kind == onnx.TypeSequence || vi.Type.Kind == onnx.TypeOptional) {
			return true
		}
	}
	return false
}

// readValues reads prefix_0.pb, prefix_1.pb, ... in dir, each decoded as
// the type of the corresponding value info (a TensorProto, SequenceProto or
// OptionalProto).
func readValues(dir, prefix string, infos []*onnx.ValueInfo) ([]*onnx.Value, error) {
	var out []*onnx.Value
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%s_%d.pb", prefix, i))
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var v *onnx.Value
		if i < len(infos) && infos[i].Type != nil && infos[i].Type.Kind != onnx.TypeTensor {
			v, err = onnx.DecodeValue(data, infos[i].Type)
		} else {
			var t *tensor.Tensor
			t, _, err = onnx.DecodeTensor(data)
			v = onnx.TensorValue(t)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		out = append(out, v)
	}
}

// flatten lays values out as the importer does (onnx.Value.Flatten).
func flatten(vs []*onnx.Value) []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, v := range vs {
		out = append(out, v.Flatten()...)
	}
	return out
}

func readTensors(dir, prefix string) ([]*tensor.Tensor, error) {
	var out []*tensor.Tensor
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%s_%d.pb", prefix, i))
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		t, _, err := onnx.DecodeTensor(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		out = append(out, t)
	}
}

func (r *Runner) runSet(ctx context.Context, m *onnx.Model, g *fxgraph.Graph, opts onnx.ImportOptions, dir string, targets map[string]bool, check propertyCheck) error {
	inVals, err := readValues(dir, "input", graphInputs(m))
	if err != nil {
		return err
	}
	outVals, err := readValues(dir, "output", m.Graph.Outputs)
	if err != nil {
		return err
	}
	inputs, want := flatten(inVals), flatten(outVals)
	bfloat16FromUint16(inputs, g.Placeholders())
	bfloat16FromUint16(want, g.Outputs())
	if g.IsDeferred() { // its import waits for the input sizes
		dims, err := g.BindDims(inputs)
		if err != nil {
			return err
		}
		if g, err = r.Importer.ImportAt(m, opts, dims); err != nil {
			return err
		}
	}
	host, err := fxgraph.SplitHost(g)
	if err != nil {
		return err
	}
	var got []*tensor.Tensor
	var names []string
	if host == nil {
		var prog *lower.Program
		if got, prog, err = r.runDevice(ctx, g, inputs, targets); err != nil {
			return err
		}
		names = outputNames(prog)
	} else {
		got, err = host.Run(ctx, inputs, func(ctx context.Context, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
			outs, _, err := r.runDevice(ctx, host.Device, in, targets)
			return outs, err
		})
		if err != nil {
			return err
		}
		for _, n := range host.Pre {
			targets[n.Target] = true
		}
		for _, n := range host.Post {
			targets[n.Target] = true
		}
		for i := range g.Outputs() {
			names = append(names, g.OutputName(i))
		}
	}
	if check != nil {
		return check(inputs, got, want, r.RTol, r.ATol)
	}
	if len(got) != len(want) {
		return fmt.Errorf("got %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		if err := Compare(got[i], want[i], r.RTol, r.ATol); err != nil {
			return fmt.Errorf("output %d (%s): %w", i, names[i], err)
		}
	}
	return nil
}

// customCallKey prefixes the custom-call targets a case's programs used in
// the set of targets runDevice records (Result.CustomCalls).
const customCallKey = "custom_call "

// splitTargets returns the IR targets and the custom calls (customCallKey)
// of the set runDevice records, each sorted.
func splitTargets(targets map[string]bool) (ir, calls []string) {
	for t := range targets {
		if call, ok := strings.CutPrefix(t, customCallKey); ok {
			calls = append(calls, call)
		} else {
			ir = append(ir, t)
		}
	}
	sort.Strings(ir)
	sort.Strings(calls)
	return ir, calls
}

// runDevice specializes, lowers and runs graph g (a whole model, or the
// device graph of one with host stages) on inputs, recording the targets
// it lowered.
func (r *Runner) runDevice(ctx context.Context, g *fxgraph.Graph, inputs []*tensor.Tensor, targets map[string]bool) ([]*tensor.Tensor, *lower.Program, error) {
	dims, err := g.BindDims(inputs)
	if err != nil {
		return nil, nil, err
	}
	sg, err := r.Lowerer.Specialize(g, dims)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range sg.Nodes() {
		if n.Opcode == fxgraph.CallFunction {
			targets[n.Target] = true
		}
	}
	prog, err := r.Lowerer.LowerSpecialized(sg, dims)
	if err != nil {
		return nil, nil, err
	}
	for call := range prog.Usage.CustomCalls {
		targets[customCallKey+call] = true
	}
	got, err := Execute(ctx, r.Client, prog, inputs)
	return got, prog, err
}

// outputNames are the names of prog's outputs.
func outputNames(prog *lower.Program) []string {
	var out []string
	for _, o := range prog.Outputs {
		out = append(out, o.Name)
	}
	return out
}

// bfloat16FromUint16 works around a quirk of the ONNX test data: bfloat16
// tensors are stored as UINT16 TensorProtos holding the same bits. A uint16
// tensor where the graph has a bfloat16 value is relabelled in place.
func bfloat16FromUint16(ts []*tensor.Tensor, nodes []*fxgraph.Node) {
	for i, t := range ts {
		if i < len(nodes) && t.DType == tensor.Uint16 && nodes[i].Val().DType == tensor.BFloat16 {
			t.DType = tensor.BFloat16
		}
	}
}

// Execute compiles prog, uploads its weights and inputs, runs it once and
// returns the outputs (bounded outputs sliced to their valid size).
func Execute(ctx context.Context, c *pjrt.Client, prog *lower.Program, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	r, err := runner.New(c, runner.Options{})
	if err != nil {
		return nil, err
	}
	return r.Execute(ctx, prog, inputs)
}

// Compare checks got against want: same dtype and shape, floats within
// atol + rtol*|want| (NaN matches NaN, infinities must match exactly),
// everything else exactly.
func Compare(got, want *tensor.Tensor, rtol, atol float64) error {
	if got.DType != want.DType {
		return fmt.Errorf("dtype %s, want %s", got.DType, want.DType)
	}
	if tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		return fmt.Errorf("shape %v, want %v", got.Shape, want.Shape)
	}
	n := want.NumElements()
	if want.DType == tensor.String {
		return compareStrings(got, want)
	}
	bad, worst, worstAt := 0, 0.0, int64(-1)
	for i := int64(0); i < n; i++ {
		w, g := want.Float64At(i), got.Float64At(i)
		if !want.DType.IsFloat() && !want.DType.IsComplex() {
			if want.Int64At(i) != got.Int64At(i) {
				bad++
				if worstAt < 0 {
					worstAt, worst = i, math.Abs(w-g)
				}
			}
			continue
		}
		switch {
		case math.IsNaN(w) && math.IsNaN(g):
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if w != g {
				bad++
				worstAt, worst = i, math.Inf(1)
			}
		default:
			d := math.Abs(w - g)
			if d > atol+rtol*math.Abs(w) || math.IsNaN(d) {
				bad++
				if d > worst || math.IsNaN(d) {
					worst, worstAt = d, i
				}
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d elements differ; worst at flat index %d: got %v, want %v (|diff| %.3g)",
			bad, n, worstAt, got.Float64At(worstAt), want.Float64At(worstAt), worst)
	}
	return nil
}

// compareStrings checks string tensors element by element.
func compareStrings(got, want *tensor.Tensor) error {
	if len(got.Strings) != len(want.Strings) {
		return fmt.Errorf("%d strings, want %d", len(got.Strings), len(want.Strings))
	}
	bad, first := 0, -1
	for i := range want.Strings {
		if !bytes.Equal(got.Strings[i], want.Strings[i]) {
			bad++
			if first < 0 {
				first = i
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d strings differ; first at flat index %d: got %q, want %q", bad, len(want.Strings), first, got.Strings[first], want.Strings[first])
	}
	return nil
}
