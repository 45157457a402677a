package zoo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/platforms"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

// RelTolerance is the default bound on an output's max abs error, relative
// to max(1, max|reference|): float32 XLA against float32 PyTorch eager
// differs by reassociation in convolutions, matmuls and reductions only.
const RelTolerance = 1e-4

// Stage is where a check failed.
type Stage string

// Stages, in the order a check goes through them.
const (
	StageExport  Stage = "export"  // the exporter failed (error from the manifest)
	StageImport  Stage = "import"  // importer.Load
	StageInputs  Stage = "inputs"  // reading or binding the reference inputs
	StageLower   Stage = "lower"   // lower.Lowerer.Lower
	StageCompile Stage = "compile" // PJRT compilation and weight upload
	StageRun     Stage = "run"     // execution
	StageCompare Stage = "compare" // an output differs from the reference
	StagePanic   Stage = "panic"   // xserve panicked (always a bug)
)

// Result is the outcome of one model in one format.
type Result struct {
	Model   string
	Format  string // "onnx" or "pt2"
	Variant string // "small" or "full"
	File    string // the model file checked
	// Import is the time importer.Load took.
	Import time.Duration
	// Buckets has one entry per reference case that got as far as lowering.
	Buckets []Bucket
	// MaxError is the largest absolute error over all compared outputs;
	// Tolerance is the bound of the output where error/bound is largest.
	MaxError, Tolerance float64
	// Passed is true when every case ran and matched.
	Passed bool
	// Stage and Err say where and why the check failed.
	Stage Stage
	Err   error
}

// Bucket is one reference case: one batch size (and sequence length)
// lowered, compiled and run.
type Bucket struct {
	Batch int64
	// Dims are the symbol sizes bound from the inputs.
	Dims map[string]int64
	// Lower and Compile are the lowering and PJRT compile times; Compile
	// includes uploading the weights for the format's first bucket.
	Lower, Compile, Run time.Duration
	// MaxError is the largest absolute error over this case's outputs.
	MaxError float64
	// Passed says this case ran and matched.
	Passed bool
}

// LowerCompile is the bucket's lowering plus compile time.
func (b Bucket) LowerCompile() time.Duration { return b.Lower + b.Compile }

// Name is "model/format".
func (r Result) Name() string { return r.Model + "/" + r.Format }

// Tolerances overrides RelTolerance per model ("model" or "model/format").
// Every entry must say why; none are needed today.
var Tolerances = map[string]float64{}

// Tolerance returns the bound on max abs error for an output whose largest
// reference magnitude is maxRef: rel * max(1, maxRef).
func Tolerance(rel, maxRef float64) float64 { return rel * math.Max(1, maxRef) }

// Checker checks zoo models on one PJRT client.
type Checker struct {
	Client *pjrt.Client
	// Lowerer defaults to lower.New for the client's platform.
	Lowerer *lower.Lowerer
	// Models and Formats restrict the check (empty: all).
	Models, Formats []string
	// Progress, if set, is called after each model/format with its result.
	Progress func(Result)
}

// Check checks every model under dir in every format with a new Checker on
// client. Per-model failures are Results; the error is for a zoo directory
// that cannot be read at all.
func Check(ctx context.Context, dir string, client *pjrt.Client) ([]Result, error) {
	return (&Checker{Client: client}).Check(ctx, dir)
}

// Check checks the models under dir (each subdirectory with a manifest).
func (c *Checker) Check(ctx context.Context, dir string) ([]Result, error) {
	if c.Client == nil {
		return nil, errors.New("zoo: Checker has no PJRT client")
	}
	if c.Lowerer == nil {
		c.Lowerer = platforms.New(lower.Options{Platform: c.Client.Platform(), Kernels: c.Client.Kernels()})
	}
	dirs, err := ModelDirs(dir)
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, d := range dirs {
		if len(c.Models) > 0 && !slices.Contains(c.Models, filepath.Base(d)) {
			continue
		}
		m, err := ReadManifest(d)
		if err != nil {
			// One broken model directory fails that model, not the zoo.
			for _, f := range Formats {
				if c.wantFormat(f) {
					results = append(results, c.report(Result{Model: filepath.Base(d), Format: f, Stage: StageExport, Err: err}))
				}
			}
			continue
		}
		for _, f := range Formats {
			if !c.wantFormat(f) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return results, err
			}
			results = append(results, c.report(c.CheckModel(ctx, d, m, f)))
		}
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("zoo: no model in %s matches models %v and formats %v", dir, c.Models, c.Formats)
	}
	return results, nil
}

func (c *Checker) wantFormat(f string) bool {
	return len(c.Formats) == 0 || slices.Contains(c.Formats, f)
}

func (c *Checker) report(r Result) Result {
	if c.Progress != nil {
		c.Progress(r)
	}
	return r
}

// CheckModel checks the model in dir (described by m) in one format.
func (c *Checker) CheckModel(ctx context.Context, dir string, m *Manifest, format string) (res Result) {
	res = Result{Model: m.Model, Format: format, Variant: m.Variant}
	defer func() {
		if p := recover(); p != nil {
			res.Passed, res.Stage = false, StagePanic
			res.Err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	fail := func(st Stage, err error) Result {
		res.Passed, res.Stage, res.Err = false, st, err
		return res
	}
	info, ok := m.Formats[format]
	if !ok {
		return fail(StageExport, fmt.Errorf("the manifest has no %s export (re-run python/zoo/export.py)", format))
	}
	if info.Error != "" {
		return fail(StageExport, fmt.Errorf("export failed: %s", info.Error))
	}
	res.File = info.File
	if res.File == "" {
		res.File = "model." + format
	}
	start := time.Now()
	g, err := runner.Import(filepath.Join(dir, res.File))
	res.Import = time.Since(start)
	if err != nil {
		return fail(StageImport, err)
	}
	r, err := runner.New(c.Client, runner.Options{Lowerer: c.Lowerer})
	if err != nil {
		return fail(StageCompile, err)
	}
	model, err := r.Model(g)
	if err != nil {
		return fail(StageImport, err)
	}
	defer model.Close()
	rel := RelTolerance
	if t, ok := Tolerances[m.Model+"/"+format]; ok {
		rel = t
	} else if t, ok := Tolerances[m.Model]; ok {
		rel = t
	}
	worst := -1.0
	for _, cs := range m.Cases {
		if err := ctx.Err(); err != nil {
			return fail(StageRun, err)
		}
		b, st, err := c.runCase(ctx, dir, model, cs, rel, &res, &worst)
		if b != nil {
			res.Buckets = append(res.Buckets, *b)
		}
		if err != nil {
			return fail(st, fmt.Errorf("batch %d: %w", cs.Batch, err))
		}
	}
	res.Passed = true
	return res
}

// runCase lowers, compiles and runs one reference case and compares its
// outputs. It returns the bucket (nil if the case failed before lowering).
func (c *Checker) runCase(ctx context.Context, dir string, m *runner.Model, cs Case, rel float64, res *Result, worst *float64) (*Bucket, Stage, error) {
	inputs, err := bindInputs(dir, m.Graph, cs.Inputs)
	if err != nil {
		return nil, StageInputs, err
	}
	dims, err := m.Bind(inputs)
	if err != nil {
		return nil, StageInputs, err
	}
	b := &Bucket{Batch: cs.Batch, Dims: dims}
	start := time.Now()
	prog, err := m.Lower(dims)
	b.Lower = time.Since(start)
	if err != nil {
		return b, StageLower, err
	}
	start = time.Now()
	exe, err := m.Compile(ctx, prog)
	b.Compile = time.Since(start)
	if err != nil {
		return b, StageCompile, err
	}
	defer exe.Close()
	start = time.Now()
	got, err := exe.Run(ctx, inputs)
	b.Run = time.Since(start)
	if err != nil {
		return b, StageRun, err
	}
	if len(got) != len(cs.Outputs) {
		return b, StageCompare, fmt.Errorf("the program returns %d outputs, PyTorch %d (%s)", len(got), len(cs.Outputs), outputNames(cs.Outputs))
	}
	var mismatches []string
	for i, of := range cs.Outputs {
		want, err := tensor.ReadNpyFile(filepath.Join(dir, of.File))
		if err != nil {
			return b, StageInputs, fmt.Errorf("reference output %s: %w", of.Name, err)
		}
		d, maxRef, err := MaxAbsError(got[i], want)
		if err != nil {
			return b, StageCompare, fmt.Errorf("output %d (%s): %w", i, of.Name, err)
		}
		tol := Tolerance(rel, maxRef)
		if !want.DType.IsFloat() && !want.DType.IsComplex() {
			tol = 0 // integer and bool outputs must match exactly
		}
		b.MaxError = math.Max(b.MaxError, d)
		res.MaxError = math.Max(res.MaxError, d)
		ratio := d / tol
		if tol == 0 {
			ratio = 0
			if d > 0 {
				ratio = math.Inf(1)
			}
		}
		if ratio > *worst || math.IsNaN(d) {
			*worst, res.Tolerance = ratio, tol
		}
		if !(d <= tol) {
			mismatches = append(mismatches, fmt.Sprintf("output %d (%s): max abs error %.3g > tolerance %.3g (max|ref| %.3g)", i, of.Name, d, tol, maxRef))
		}
	}
	if len(mismatches) > 0 {
		return b, StageCompare, errors.New(strings.Join(mismatches, "; "))
	}
	b.Passed = true
	return b, "", nil
}

func outputNames(ts []TensorFile) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// bindInputs reads a case's input files in the order of g's placeholders:
// by name when every placeholder names a reference input, else by position
// (an importer may name inputs differently; the order is the model's).
func bindInputs(dir string, g *fxgraph.Graph, files []TensorFile) ([]*tensor.Tensor, error) {
	ph := g.Placeholders()
	if len(ph) != len(files) {
		return nil, fmt.Errorf("the model has %d inputs (%s), the reference case %d (%s)", len(ph), placeholderNames(ph), len(files), outputNames(files))
	}
	byName := map[string]TensorFile{}
	for _, f := range files {
		byName[f.Name] = f
	}
	order := make([]TensorFile, len(ph))
	for i, p := range ph {
		f, ok := byName[p.Target]
		if !ok {
			copy(order, files) // positional
			break
		}
		order[i] = f
	}
	out := make([]*tensor.Tensor, len(order))
	for i, f := range order {
		t, err := tensor.ReadNpyFile(filepath.Join(dir, f.File))
		if err != nil {
			return nil, fmt.Errorf("reference input %s: %w", f.Name, err)
		}
		out[i] = t
	}
	return out, nil
}

func placeholderNames(ph []*fxgraph.Node) string {
	names := make([]string, len(ph))
	for i, p := range ph {
		names[i] = p.Target
	}
	return strings.Join(names, ", ")
}

// MaxAbsError returns the largest |got-want| and the largest |want| over two
// tensors of the same dtype and shape. A NaN or infinity where the other
// tensor has a different value makes the error +Inf (NaN matches NaN).
func MaxAbsError(got, want *tensor.Tensor) (maxErr, maxRef float64, err error) {
	if got.DType != want.DType {
		return 0, 0, fmt.Errorf("dtype %s, PyTorch %s", got.DType, want.DType)
	}
	if tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
		return 0, 0, fmt.Errorf("shape %s, PyTorch %s", tensor.ShapeString(got.Shape), tensor.ShapeString(want.Shape))
	}
	if want.DType == tensor.String {
		return 0, 0, errors.New("string outputs cannot be compared")
	}
	exact := !want.DType.IsFloat() && !want.DType.IsComplex()
	n := want.NumElements()
	for i := int64(0); i < n; i++ {
		if exact {
			wi, gi := want.Int64At(i), got.Int64At(i)
			maxRef = math.Max(maxRef, math.Abs(float64(wi)))
			if wi != gi {
				maxErr = math.Max(maxErr, math.Abs(float64(wi)-float64(gi)))
			}
			continue
		}
		w, g := want.Float64At(i), got.Float64At(i)
		if !math.IsNaN(w) && !math.IsInf(w, 0) {
			maxRef = math.Max(maxRef, math.Abs(w))
		}
		switch {
		case math.IsNaN(w) && math.IsNaN(g):
		case math.IsNaN(w) || math.IsNaN(g) || math.IsInf(w, 0) || math.IsInf(g, 0):
			if w != g {
				maxErr = math.Inf(1)
			}
		default:
			maxErr = math.Max(maxErr, math.Abs(w-g))
		}
	}
	return maxErr, maxRef, nil
}

// Failed returns the results that did not pass.
func Failed(results []Result) []Result {
	var out []Result
	for _, r := range results {
		if !r.Passed {
			out = append(out, r)
		}
	}
	return out
}
