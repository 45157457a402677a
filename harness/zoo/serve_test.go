package zoo

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// TestServeEveryModelExactly serves every model of the zoo fixtures in
// both formats with no config.yaml (the .pt2 files name their symbols
// torch's way, s43), some of them also with one, and the example tinycnn
// with its config.yaml, at batch 1, 3 and 5 and, for models with a sequence symbol, at
// sequence sizes that are not bucket sizes. Every output must have the
// exact shape of the request and the values of `xserve run` at that exact
// shape (lowered and compiled for it), and of PyTorch where the fixture
// has a reference (batch 1 and 3; batch 5 stacks rows of batch 3).
func TestServeEveryModelExactly(t *testing.T) {
	dirs, err := ModelDirs(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var models []servedModel
	add := func(sm servedModel, data []byte) {
		writeFile(t, filepath.Join(root, sm.name, "1", "model"+filepath.Ext(sm.file)), data)
		if sm.config != "" {
			writeFile(t, filepath.Join(root, sm.name, modelrepo.ConfigFile), []byte(sm.config))
		}
		models = append(models, sm)
	}
	for _, dir := range dirs {
		man, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, format := range slices.Sorted(maps.Keys(man.Formats)) {
			fi := man.Formats[format]
			if fi.File == "" {
				t.Fatalf("%s: no %s file: %s", man.Model, format, fi.Error)
			}
			data, err := os.ReadFile(filepath.Join(dir, fi.File))
			if err != nil {
				t.Fatal(err)
			}
			sm := servedModel{name: man.Model + "_" + format, dir: dir, file: filepath.Join(dir, fi.File), man: man}
			add(sm, data)
			if cfg := withConfig[sm.name]; cfg != "" {
				sm.name, sm.config = sm.name+"_config", cfg
				add(sm, data)
			}
		}
	}
	tiny, err := os.ReadFile(tinyCNNFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(tinyCNNFile)), modelrepo.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	add(servedModel{name: "tinycnn", file: tinyCNNFile, config: string(cfg)}, tiny)

	client := openClient(t)
	m := startManager(t, client, root)
	lw := lower.New(lower.Options{Platform: client.Platform()})
	for _, sm := range models {
		t.Run(sm.name, func(t *testing.T) { checkServed(t, m, client, lw, sm) })
	}
}

// withConfig gives some zoo models a config.yaml besides their zero-config
// copy: other bucket sets, a padded sequence, a batch minimum above 1.
var withConfig = map[string]string{
	"bert_onnx":    "buckets:\n  batch: [1, 4, 8]\n  sequence: [8, 16]\n",
	"resnet18_pt2": "buckets:\n  batch: [2, 4, 8]\nbatching:\n  max_queue_delay: 0s\n",
	"vit_b_16_pt2": "buckets:\n  batch: [1, 8]\npad:\n  batch: true\n",
}

// tinyCNNFile is the example model, whose config.yaml warms its buckets up
// eagerly; its reference is ONNX Runtime's (examples/samples).
const tinyCNNFile = "../../examples/models/tinycnn/1/model.onnx"

// servedModel is one model of the test repository.
type servedModel struct {
	name, dir, file, config string
	man                     *Manifest // nil: not a zoo fixture
}

// checkServed serves sm's cases and compares every output.
func checkServed(t *testing.T, m *serving.Manager, client *pjrt.Client, lw *lower.Lowerer, sm servedModel) {
	md, err := m.Metadata(sm.name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if md.Symbols[0].Name != "batch" || md.Symbols[0].Role != "batch" || md.Symbols[0].Pad != "pad" {
		t.Errorf("symbols %+v: want batch first, padded", md.Symbols)
	}
	if st, ok, err := m.BatchStats(sm.name, 0); err != nil || !ok {
		t.Errorf("%s does not batch: %v %v", sm.name, st, err)
	}
	var cases []zooCase
	if sm.man != nil {
		cases = zooCases(t, sm.dir, sm.man, len(md.Symbols) > 1)
	} else {
		cases = tinyCNNCases(t)
	}
	for _, c := range cases {
		resp, err := m.Infer(context.Background(), sm.name, 0, &serving.InferRequest{Inputs: c.inputs})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		exact := runExact(t, client, lw, sm.file, c.inputs)
		for i, o := range resp.Outputs {
			checkClose(t, c.name+" "+o.Name+" vs xserve run", o.Tensor, exact[i])
			if c.want != nil {
				checkClose(t, c.name+" "+o.Name+" vs reference", o.Tensor, c.want[i])
			}
		}
	}
}

// tinyCNNCases are batch 1, 3 and 5 made of the sample's two images, with
// ONNX Runtime's outputs for them.
func tinyCNNCases(t *testing.T) []zooCase {
	img := mustNpy(t, "../../examples/samples/tinycnn/image.npy")
	ref := mustNpy(t, "../../examples/samples/tinycnn/probs.onnxruntime.npy")
	r0, r1 := firstRows(img, 1), lastRow(img)
	p0, p1 := firstRows(ref, 1), lastRow(ref)
	return []zooCase{
		{name: "batch 1", inputs: map[string]*tensor.Tensor{"image": r1}, want: []*tensor.Tensor{p1}},
		{name: "batch 3", inputs: map[string]*tensor.Tensor{"image": concatRows(r0, r1, r0)}, want: []*tensor.Tensor{concatRows(p0, p1, p0)}},
		{name: "batch 5", inputs: map[string]*tensor.Tensor{"image": concatRows(r1, r1, r0, r1, r0)}, want: []*tensor.Tensor{concatRows(p1, p1, p0, p1, p0)}},
	}
}

// lastRow returns the last row (dim 0) of x.
func lastRow(x *tensor.Tensor) *tensor.Tensor {
	shape := slices.Clone(x.Shape)
	shape[0] = 1
	out := tensor.New(x.DType, shape...)
	copy(out.Data, x.Data[len(x.Data)-len(out.Data):])
	return out
}

// zooCase is one request: its inputs by name and PyTorch's outputs (nil
// without a reference).
type zooCase struct {
	name   string
	inputs map[string]*tensor.Tensor
	want   []*tensor.Tensor
}

// zooCases returns batch 1, 3 and 5 (3+2 rows of the batch 3 reference) and,
// for a model with a sequence dim, batch 3 at sequence sizes 5 and 7.
func zooCases(t *testing.T, dir string, man *Manifest, sequence bool) []zooCase {
	t.Helper()
	var b1, b3 zooCase
	for _, c := range man.Cases {
		zc := zooCase{name: fmt.Sprintf("batch %d", c.Batch), inputs: map[string]*tensor.Tensor{}}
		for _, f := range c.Inputs {
			zc.inputs[f.Name] = mustNpy(t, filepath.Join(dir, f.File))
		}
		for _, f := range c.Outputs {
			zc.want = append(zc.want, mustNpy(t, filepath.Join(dir, f.File)))
		}
		switch c.Batch {
		case 1:
			b1 = zc
		case 3:
			b3 = zc
		}
	}
	if b1.inputs == nil || b3.inputs == nil {
		t.Fatalf("%s: want reference cases at batch 1 and 3", man.Model)
	}
	// Batch 5: the 3 rows of batch 3, then its first 2 again (batch 1 may
	// have another sequence length).
	b5 := zooCase{name: "batch 5", inputs: map[string]*tensor.Tensor{}}
	for name, x := range b3.inputs {
		b5.inputs[name] = concatRows(x, firstRows(x, 2))
	}
	for i := range b3.want {
		b5.want = append(b5.want, concatRows(b3.want[i], firstRows(b3.want[i], 2)))
	}
	cases := []zooCase{b1, b3, b5}
	if sequence {
		for _, n := range []int64{5, 7} {
			c := zooCase{name: fmt.Sprintf("batch 3 sequence %d", n), inputs: map[string]*tensor.Tensor{}}
			for name, x := range b3.inputs {
				c.inputs[name] = cutColumns(x, n)
			}
			cases = append(cases, c)
		}
	}
	return cases
}

// runExact is `xserve run`: the model imported, lowered and compiled for
// the inputs' exact shapes, and run once.
func runExact(t *testing.T, client *pjrt.Client, lw *lower.Lowerer, file string, inputs map[string]*tensor.Tensor) []*tensor.Tensor {
	t.Helper()
	g, err := importer.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var in []*tensor.Tensor
	for _, p := range g.Placeholders() {
		in = append(in, inputs[p.Target])
	}
	dims, err := g.BindDims(in)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := lw.Lower(g, dims)
	if err != nil {
		t.Fatal(err)
	}
	w := engine.NewWeights(client)
	defer w.Close()
	exe, err := engine.Compile(context.Background(), client, prog, w)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	outs, err := exe.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range g.Outputs() {
		if dt := o.Val().DType; outs[i].DType != dt {
			outs[i] = outs[i].Convert(dt)
		}
	}
	return outs
}

// checkClose requires equal shapes and values within the zoo's tolerance.
func checkClose(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	if !slices.Equal(got.Shape, want.Shape) {
		t.Errorf("%s: shape %v, want %v", what, got.Shape, want.Shape)
		return
	}
	d, maxRef, err := MaxAbsError(got, want)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	tol := Tolerance(RelTolerance, maxRef)
	if !want.DType.IsFloat() {
		tol = 0
	}
	if !(d <= tol) {
		t.Errorf("%s: max abs error %.3g > %.3g", what, d, tol)
	}
}

// concatRows stacks tensors along dim 0.
func concatRows(ts ...*tensor.Tensor) *tensor.Tensor {
	shape := slices.Clone(ts[0].Shape)
	shape[0] = 0
	var data []byte
	for _, x := range ts {
		shape[0] += x.Shape[0]
		data = append(data, x.Data...)
	}
	out := tensor.New(ts[0].DType, shape...)
	copy(out.Data, data)
	return out
}

// firstRows returns the first n rows (dim 0) of x.
func firstRows(x *tensor.Tensor, n int64) *tensor.Tensor {
	shape := slices.Clone(x.Shape)
	shape[0] = n
	out := tensor.New(x.DType, shape...)
	copy(out.Data, x.Data)
	return out
}

// cutColumns keeps the first n entries of dim 1 of a rank-2 tensor.
func cutColumns(x *tensor.Tensor, n int64) *tensor.Tensor {
	out := tensor.New(x.DType, x.Shape[0], n)
	row, keep := x.Shape[1]*int64(x.DType.Size()), n*int64(x.DType.Size())
	for r := range x.Shape[0] {
		copy(out.Data[r*keep:(r+1)*keep], x.Data[r*row:r*row+keep])
	}
	return out
}

func mustNpy(t *testing.T, path string) *tensor.Tensor {
	t.Helper()
	x, err := tensor.ReadNpyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startManager serves the repository at root until the test ends.
func startManager(t *testing.T, client *pjrt.Client, root string) *serving.Manager {
	t.Helper()
	repo, err := modelrepo.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	m, err := serving.NewManager(context.Background(), serving.Options{Client: client, Repository: repo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	for _, st := range m.Status() {
		if st.State != serving.StateReady {
			t.Errorf("%s %d is %s: %s", st.Name, st.Version, st.State, st.Reason)
		}
	}
	return m
}
