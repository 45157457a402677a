package serving

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// planGraph is a graph whose inputs have the given shapes (all float32)
// and which returns its inputs, with ranges for some symbols.
func planGraph(ranges map[string]fxgraph.SymbolRange, inputs ...fxgraph.Shape) *fxgraph.Graph {
	g := fxgraph.New()
	var ph []*fxgraph.Node
	for i, s := range inputs {
		ph = append(ph, g.AddPlaceholder(fmt.Sprintf("in%d", i), fxgraph.TensorMeta{DType: tensor.Float32, Shape: s}))
	}
	g.SetOutput(ph...)
	g.SymbolRanges = ranges
	return g
}

func mustPlan(t *testing.T, g *fxgraph.Graph, yaml string, shapes ShapeFunc) *BucketPlan {
	t.Helper()
	cfg, err := modelrepo.ParseConfig("models/m/config.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewBucketPlan(g, cfg, "models/m/config.yaml", shapes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClampBuckets(t *testing.T) {
	for _, tt := range []struct {
		r    fxgraph.SymbolRange
		want []int64
	}{
		{fxgraph.SymbolRange{Min: 0, Max: -1}, []int64{1, 2, 4, 8, 16, 32, 64}},
		{fxgraph.SymbolRange{Min: 2, Max: -1}, []int64{2, 4, 8, 16, 32, 64}}, // torch.export's default minimum
		{fxgraph.SymbolRange{Min: 2, Max: 50}, []int64{2, 4, 8, 16, 32, 50}},
		{fxgraph.SymbolRange{Min: 3, Max: 3}, []int64{3}},
		{fxgraph.SymbolRange{Min: 100, Max: -1}, []int64{100}},
	} {
		if got := clampBuckets(defaultBuckets(), tt.r); !slices.Equal(got, tt.want) {
			t.Errorf("clamp to %s: %v, want %v", tt.r, got, tt.want)
		}
	}
}

// TestDefaultSymbolBuckets: a non-batch symbol without config.yaml buckets
// gets its range's minimum, then the powers of two above it, up to the
// range's maximum or 4096.
func TestDefaultSymbolBuckets(t *testing.T) {
	for _, tt := range []struct {
		r    fxgraph.SymbolRange
		want []int64
	}{
		{fxgraph.SymbolRange{Min: 0, Max: -1}, []int64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}},
		{fxgraph.SymbolRange{Min: 2, Max: 50}, []int64{2, 4, 8, 16, 32, 50}},
		{fxgraph.SymbolRange{Min: 3, Max: 3}, []int64{3}},
		{fxgraph.SymbolRange{Min: 1024, Max: -1}, []int64{1024, 2048, 4096}},
		{fxgraph.SymbolRange{Min: 100, Max: 300}, []int64{100, 128, 256, 300}},
	} {
		if got := defaultSymbolBuckets(tt.r); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.r, got, tt.want)
		}
	}
}

// TestPlanZeroConfigAboveBuckets: with no config.yaml, a size above the
// largest default bucket (within the model's range) runs at its exact
// size; one outside the range is refused, naming it.
func TestPlanZeroConfigAboveBuckets(t *testing.T) {
	for _, tt := range []struct {
		max, batch, seq int64
		want            string
	}{
		{-1, 3, 4096, "batch=4,s7=4096"},
		{-1, 3, 5000, "batch=4,s7=5000"},
		{-1, 100, 12, "batch=100,s7=16"},
		{9000, 1, 8500, "batch=1,s7=9000"},
		{9000, 1, 9001, "is 9001, the largest bucket is 9000 (buckets: [2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 9000]; the model allows [2, 9000] for it)"},
	} {
		g := planGraph(map[string]fxgraph.SymbolRange{"s7": {Min: 2, Max: tt.max}}, fxgraph.Shape{fxgraph.S("batch"), fxgraph.S("s7")})
		p := mustPlan(t, g, "", nil)
		p.Symbols[0].Pad, p.Symbols[1].Pad = PadBuckets, PadBuckets
		exec, err := p.choose(map[string]int64{"batch": tt.batch, "s7": tt.seq})
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = p.keyName(exec)
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("%d,%d: %q, want %q", tt.batch, tt.seq, got, tt.want)
		}
	}
}

// TestPlanLearnsStride: the default buckets at which the model's shapes
// fail (here: not a multiple of 32, as a detector's feature maps need) are
// dropped; sizes above the largest bucket run at the next multiple when
// padding is invisible, and are refused naming the stride when it is not.
func TestPlanLearnsStride(t *testing.T) {
	g := planGraph(map[string]fxgraph.SymbolRange{"h": {Min: 1, Max: -1}, "w": {Min: 1, Max: -1}},
		fxgraph.Shape{fxgraph.S("batch"), fxgraph.D(3), fxgraph.S("h"), fxgraph.S("w")})
	shapes := func(d map[string]int64) ([][]int64, error) {
		for _, s := range []string{"h", "w"} {
			if d[s]%32 != 0 {
				return nil, fmt.Errorf("cat: inputs of %d and %d rows", d[s]/2, (d[s]+1)/2)
			}
		}
		return [][]int64{{d["batch"], 3, d["h"], d["w"]}}, nil
	}
	p := mustPlan(t, g, "", shapes)
	p.learnSizes()
	h := p.symbol("h")
	if !slices.Equal(h.Buckets, []int64{32, 64, 128, 256, 512, 1024, 2048, 4096}) || h.Stride != 32 || !strings.Contains(h.Learned, "fail at h 1, 2, 4, 8, 16") {
		t.Fatalf("h: buckets %v, stride %d, learned %q", h.Buckets, h.Stride, h.Learned)
	}
	for _, s := range p.Symbols {
		s.Pad = PadBuckets
	}
	exec, err := p.choose(map[string]int64{"batch": 1, "h": 100, "w": 5000})
	if err != nil || p.keyName(exec) != "batch=1,h=128,w=5024" {
		t.Errorf("100x5000 padded: %v %v", exec, err)
	}
	p.symbol("w").Pad = PadExact
	if _, err := p.choose(map[string]int64{"batch": 1, "h": 64, "w": 5000}); !errors.Is(err, ErrNoBucket) || !strings.Contains(err.Error(), "need a multiple of 32") {
		t.Errorf("w 5000 served exactly: %v", err)
	}
}

// TestPlanZeroConfig: a torch.export-style graph whose symbols are s43 and
// s7 with minimum 2: the leading symbol of every input is the batch,
// served as "batch", its default buckets clamped to the range.
func TestPlanZeroConfig(t *testing.T) {
	g := planGraph(map[string]fxgraph.SymbolRange{"s43": {Min: 2, Max: -1}, "s7": {Min: 2, Max: 40}},
		fxgraph.Shape{fxgraph.S("s43"), fxgraph.S("s7")}, fxgraph.Shape{fxgraph.S("s43"), fxgraph.D(3)})
	p := mustPlan(t, g, "", nil)
	if p.symbolNames() != "batch, s7" {
		t.Fatalf("symbols %s", p.symbolNames())
	}
	b, s := p.Symbols[0], p.Symbols[1]
	if !b.Batch || !slices.Equal(b.Model, []string{"s43"}) || !slices.Equal(b.Buckets, []int64{2, 4, 8, 16, 32, 64}) || b.Pad != PadProbe {
		t.Errorf("batch %+v", b)
	}
	if s.Batch || !slices.Equal(s.Buckets, []int64{2, 4, 8, 16, 32, 40}) || s.Range.Max != 40 {
		t.Errorf("s7 %+v", s)
	}
	if p.Inputs[1].String() != "float32[batch,3]" {
		t.Errorf("input 1 %s", &p.Inputs[1])
	}
	if md := p.modelDims(map[string]int64{"batch": 4, "s7": 9}); md["s43"] != 4 || md["s7"] != 9 {
		t.Errorf("model dims %v", md)
	}

	// batch_symbol names another symbol; buckets may use the model's name.
	p = mustPlan(t, g, "batch_symbol: s7\nbuckets:\n  s43: [2, 8]\n", nil)
	if p.Symbols[0].Name != "s43" || p.Symbols[0].Batch || !p.Symbols[1].Batch || !slices.Equal(p.Symbols[0].Buckets, []int64{2, 8}) {
		t.Errorf("batch_symbol s7: %+v %+v", p.Symbols[0], p.Symbols[1])
	}
}

func TestPlanConfigErrors(t *testing.T) {
	g := planGraph(map[string]fxgraph.SymbolRange{"s0": {Min: 2, Max: 16}}, fxgraph.Shape{fxgraph.S("s0"), fxgraph.S("t")})
	for _, tt := range []struct{ yaml, want string }{
		{"buckets:\n  batch: [1, 4]\n", "buckets.batch: size 1 is outside the range [2, 16]"},
		{"buckets:\n  s0: [4, 32]\n", "buckets.s0: size 32 is outside the range [2, 16]"},
		{"pad:\n  nope: true\n", "pad.nope: no input has the symbol nope (symbols: batch, t)"},
		{"batch_symbol: nope\n", "batch_symbol: is nope, but no input has that symbol"},
		{"inputs:\n  - name: in0\n    dims: [1, t]\n", "the model's symbol s0 is pinned to 1, outside its range [2, 16]"},
	} {
		cfg, err := modelrepo.ParseConfig("models/m/config.yaml", []byte(tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewBucketPlan(g, cfg, "models/m/config.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

func TestPlanChoose(t *testing.T) {
	g := planGraph(map[string]fxgraph.SymbolRange{"seq": {Min: 2, Max: -1}}, fxgraph.Shape{fxgraph.S("batch"), fxgraph.S("seq")})
	p := mustPlan(t, g, "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [4, 16]\npad:\n  batch: true\n  seq: false\n", nil)
	for _, tt := range []struct {
		batch, seq int64
		want       string // keyName, or the error
	}{
		{1, 4, "batch=1,seq=4"},
		{3, 7, "batch=4,seq=7"}, // batch padded, seq exact
		{8, 16, "batch=8,seq=16"},
		{9, 4, `shape fits no bucket: input "in0" dim 0 (batch) is 9, the largest bucket is 8 (buckets: [1 2 4 8]; config.yaml's buckets bound it)`},
		{1, 17, `input "in0" dim 1 (seq) is 17, the largest bucket is 16`},
		{1, 1, `input "in0" dim 1 (seq) is 1, outside the range [2, inf]`},
	} {
		exec, err := p.choose(map[string]int64{"batch": tt.batch, "seq": tt.seq})
		got := ""
		if err != nil {
			if !errors.Is(err, ErrNoBucket) {
				t.Errorf("%d,%d: %v is not ErrNoBucket", tt.batch, tt.seq, err)
			}
			got = err.Error()
		} else {
			got = p.keyName(exec)
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("%d,%d: %q, want %q", tt.batch, tt.seq, got, tt.want)
		}
	}
	if !p.isBucket(map[string]int64{"batch": 4, "seq": 16}) || p.isBucket(map[string]int64{"batch": 4, "seq": 7}) {
		t.Error("isBucket")
	}
	if k := p.queueKey("m/1", map[string]int64{"batch": 4, "seq": 7}); k != "m/1/seq=7" {
		t.Errorf("queue key %s", k)
	}
}

// TestPlanPadAndSlice: the pad value fills the padding, requests land at
// their row offsets, outputs are cut back to the exact shapes the
// ShapeFunc gives (here the output is [seq, batch]: batch on axis 1).
func TestPlanPadAndSlice(t *testing.T) {
	g := planGraph(nil, fxgraph.Shape{fxgraph.S("batch"), fxgraph.S("seq")})
	shapes := func(d map[string]int64) ([][]int64, error) { return [][]int64{{d["seq"], d["batch"]}}, nil }
	p := mustPlan(t, g, "inputs:\n  - name: in0\n    pad_value: -1\npad:\n  batch: true\n  seq: true\n", shapes)
	p.findBatchAxes()
	if p.batchErr != nil || !slices.Equal(p.outBatchAxis, []int{1}) {
		t.Fatalf("batch axes %v: %v", p.outBatchAxis, p.batchErr)
	}
	a := tensor.New(tensor.Float32, 1, 2)
	a.SetFloat64(0, 1)
	a.SetFloat64(1, 2)
	b := tensor.New(tensor.Float32, 2, 1)
	b.SetFloat64(0, 3)
	b.SetFloat64(1, 4)
	exec := map[string]int64{"batch": 4, "seq": 2}
	offsets, err := p.rowOffsets(exec, []map[string]int64{{"batch": 1, "seq": 2}, {"batch": 2, "seq": 1}}, nil)
	if err != nil || !slices.Equal(offsets, []int64{0, 1}) {
		t.Fatalf("offsets %v: %v", offsets, err)
	}
	in := p.assemble(0, exec, []*tensor.Tensor{a, b}, offsets)
	want := []float64{1, 2, 3, -1, 4, -1, -1, -1}
	for i, w := range want {
		if in.Float64At(int64(i)) != w {
			t.Fatalf("assembled %v, want %v", in, want)
		}
	}
	// The executed output [seq=2, batch=4]: element (s, r) = 10*s + r.
	out := tensor.New(tensor.Float32, 2, 4)
	for i := range int64(8) {
		out.SetFloat64(i, float64(10*(i/4)+i%4))
	}
	got, err := p.extract(0, out, []int64{1, 2}, 1, true)
	if err != nil || !slices.Equal(got.Shape, []int64{1, 2}) || got.Float64At(0) != 1 || got.Float64At(1) != 2 {
		t.Errorf("second request's output %v %v", got, err)
	}
	if _, err := p.extract(0, out, []int64{3, 2}, 0, false); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("an exact shape larger than the executed one: %v", err)
	}
	if _, err := p.rowOffsets(exec, []map[string]int64{{"batch": 3, "seq": 2}, {"batch": 2, "seq": 2}}, nil); err == nil {
		t.Error("5 rows fit a bucket of 4")
	}

	// Outputs that do not stack along one batch dim turn batching off.
	p.shapes = func(d map[string]int64) ([][]int64, error) { return [][]int64{{d["batch"] * d["seq"]}}, nil }
	p.shapeCache = map[string][][]int64{}
	p.findBatchAxes()
	if p.batchErr == nil || !strings.Contains(p.batchErr.Error(), `output "in0" does not stack`) {
		t.Errorf("flattened output: %v", p.batchErr)
	}
}
