package serving

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/tensor"
)

// TestSplitBatchesMatchesORT serves tinycnn with every execution of
// several rows split across (pretend) four idle cores, and checks each
// row against ONNX Runtime's output for that image: shards of unequal
// size, shards padded up to their bucket, a request of a bucket's exact
// size, and the metric counting split executions.
func TestSplitBatchesMatchesORT(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2, 4, 8]\nwarmup: eager\n")
	for _, policy := range []SplitBatches{SplitAlways, SplitOff} {
		t.Run(string(policy), func(t *testing.T) {
			// Shards of one, two and four rows whatever this machine has.
			m, _ := start(t, r, func(o *Options) { o.SplitBatches, o.Cores = policy, 4 })
			images := readNpy(t, tinyCNNImage)
			probs := readNpy(t, tinyCNNProbs)
			var want float64
			for _, tc := range []struct {
				pick   []int
				bucket string // what the response says ran, split
			}{
				{[]int{0, 0, 1, 0, 1, 1, 1, 0}, "batch=8 split batch=2+batch=2+batch=2+batch=2"},
				{[]int{1, 0, 0, 1, 1}, "batch=8 split batch=2+batch=2+batch=1"},
				{[]int{0, 1, 1}, "batch=4 split batch=2+batch=1"},
				{[]int{1}, "batch=1"}, // one row: never split
			} {
				resp := infer(t, m, "tinycnn", 1, map[string]*tensor.Tensor{"image": rows(images, tc.pick...)})
				wantBucket := tc.bucket
				if len(tc.pick) > 1 && policy == SplitAlways {
					want++
				} else {
					wantBucket, _, _ = strings.Cut(wantBucket, " ")
				}
				if resp.Bucket != wantBucket {
					t.Errorf("rows %v ran in %q, want %q", tc.pick, resp.Bucket, wantBucket)
				}
				assertClose(t, fmt.Sprintf("probs of rows %v", tc.pick), resp.Outputs[0].Tensor, rows(probs, tc.pick...), 1e-5)
			}
			got := metric(t, m, `xserve_split_executions_total{model="tinycnn",version="1"}`)
			if got != want {
				t.Errorf("xserve_split_executions_total = %v, want %v", got, want)
			}
		})
	}
}

// TestSplitBatchesPairMatchesORT splits executions of the two-input,
// two-output pair model whose seq symbol is padded too (5 to 8), and checks
// both outputs row by row against ONNX Runtime's.
func TestSplitBatchesPairMatchesORT(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4]\n  seq: [8]\nwarmup: eager\nbatching:\n  enabled: false\n")
	m, _ := start(t, r, func(o *Options) { o.SplitBatches, o.Cores = SplitAlways, 4 })
	x, y := readNpy(t, "testdata/pair_x.npy"), readNpy(t, "testdata/pair_y.npy")
	sum, total := readNpy(t, "testdata/pair_sum.onnxruntime.npy"), readNpy(t, "testdata/pair_total.onnxruntime.npy")
	for _, pick := range [][]int{{0, 1, 2}, {2, 0, 1, 1}} {
		resp := infer(t, m, "pair", 1, map[string]*tensor.Tensor{"x": rows(x, pick...), "y": rows(y, pick...)})
		for _, o := range resp.Outputs {
			want := map[string]*tensor.Tensor{"sum": sum, "total": total}[o.Name]
			assertClose(t, fmt.Sprintf("%s of rows %v", o.Name, pick), o.Tensor, rows(want, pick...), 1e-5)
		}
	}
	if got := metric(t, m, `xserve_split_executions_total{model="pair",version="1"}`); got != 2 {
		t.Errorf("xserve_split_executions_total = %v, want 2", got)
	}
}

// TestSplitBatchesNeedsCompiledShards checks that a lazily compiled model
// runs an execution whole rather than compile a smaller bucket on a
// request's path to split it, and splits once the bucket is there.
func TestSplitBatchesNeedsCompiledShards(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2, 4, 8]\n")
	m, _ := start(t, r, func(o *Options) { o.SplitBatches, o.Cores = SplitAlways, 2 })
	images := readNpy(t, tinyCNNImage)
	probs := readNpy(t, tinyCNNProbs)
	split := func() float64 {
		return metric(t, m, `xserve_split_executions_total{model="tinycnn",version="1"}`)
	}
	eight := []int{0, 1, 1, 0, 0, 0, 1, 1}
	for i, tc := range []struct {
		pick  []int
		split float64 // split executions so far
	}{
		{eight, 0},     // batch=4 is not compiled: runs whole in batch=8
		{eight[:4], 1}, // two shards of two (the load-time probe compiled 1 and 2); compiles batch=4
		{eight, 2},     // now two shards of four
		{eight[:3], 3}, // shards of two rows and one row
	} {
		resp := infer(t, m, "tinycnn", 1, map[string]*tensor.Tensor{"image": rows(images, tc.pick...)})
		assertClose(t, fmt.Sprintf("request %d: probs of rows %v", i, tc.pick), resp.Outputs[0].Tensor, rows(probs, tc.pick...), 1e-5)
		if got := split(); got != tc.split {
			t.Errorf("after request %d (%d rows): xserve_split_executions_total = %v, want %v", i, len(tc.pick), got, tc.split)
		}
	}
}

// TestWholeThreadedAndSerialMatchORT serves tinycnn one image at a time
// with the CPU kernels: the bucket's threads chooser runs executions serial
// and threaded (learning both ways), an execution while another is running
// runs serial and is not counted, and every output matches ONNX Runtime's.
func TestWholeThreadedAndSerialMatchORT(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2]\nwarmup: eager\nbatching:\n  enabled: false\n")
	m, _ := start(t, r, nil)
	if m.client.KernelsFile() == "" {
		t.Fatalf("the CPU kernel library is not loaded (%v): run make pjrt", m.opts.Client.KernelsError())
	}
	images := readNpy(t, tinyCNNImage)
	probs := readNpy(t, tinyCNNProbs)
	v := versionOf(m, "tinycnn", 1)
	v.bmu.Lock()
	b := v.buckets["batch=1"]
	v.bmu.Unlock()
	auto := b.strategy.(*engine.Auto)
	seen := func() [2]int {
		_, threads := auto.Observed()
		return threads
	}
	const runs = 2*4 + 12 // the chooser's first uncounted runs and one episode
	for i := range runs + 1 {
		if i == runs {
			x := m.engine.Begin() // another execution holds the other core
			defer x.End()
		}
		before := seen()
		pick := []int{i % 2}
		resp := infer(t, m, "tinycnn", 1, map[string]*tensor.Tensor{"image": rows(images, pick...)})
		assertClose(t, fmt.Sprintf("request %d: probs of row %v", i, pick), resp.Outputs[0].Tensor, rows(probs, pick...), 1e-5)
		if after := seen(); i == runs && after != before {
			t.Errorf("an execution beside another was counted: chooser saw %v, then %v", before, after)
		}
	}
	// Serial first, then threaded, both learned (the load's warm-up and
	// padding probe ran one-image executions too, counted or not as other
	// executions ran beside them).
	if _, learned := auto.Learned(); seen()[0] < runs/2 || seen()[1] < runs/2-1 || !learned {
		t.Errorf("threads chooser saw %v serial and threaded runs (learned: %v), want about %d of each, decided", seen(), learned, runs/2)
	}
}

func TestParseSplitBatches(t *testing.T) {
	for in, want := range map[string]SplitBatches{"": SplitAuto, "auto": SplitAuto, "off": SplitOff, "always": SplitAlways} {
		if got, err := ParseSplitBatches(in); err != nil || got != want {
			t.Errorf("ParseSplitBatches(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseSplitBatches("yes"); err == nil || !strings.Contains(err.Error(), `"yes"`) {
		t.Errorf("ParseSplitBatches(yes) = %v, want an error naming the value", err)
	}
}

// TestShardRowsAlongAnAxis cuts shards' rows out of an input whose batch
// dim is not the leading one, padding a shard up to its bucket, and stacks
// shard outputs along a batch axis 1, element by element.
func TestShardRowsAlongAnAxis(t *testing.T) {
	pad := tensor.FromFloat32s([]float32{-1}, 1)
	p := &BucketPlan{
		batchName:    "batch",
		Inputs:       []tensorSig{{Name: "in", DType: tensor.Float32, Dims: []dimSpec{{Sym: "seq"}, {Sym: "batch"}}, pad: pad.Data}},
		outBatchAxis: []int{1},
	}
	// in[s, b] = 10*s + b, seq 2, batch 5.
	in := tensor.New(tensor.Float32, 2, 5)
	for i := range int64(10) {
		in.SetFloat64(i, float64(10*(i/5)+i%5))
	}
	got := p.inputRows(0, in, 3, 2, 4).Float64s()
	want := []float64{3, 4, -1, -1, 13, 14, -1, -1}
	if tensor.ShapeString(p.inputRows(0, in, 3, 2, 4).Shape) != "[2,4]" || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows 3-4 of batch axis 1 padded to 4: %v, want %v", got, want)
	}
	if lead := (&BucketPlan{batchName: "batch", Inputs: []tensorSig{{Dims: []dimSpec{{Sym: "batch"}, {Sym: "seq"}}}}}).inputRows(0, in, 1, 1, 1); fmt.Sprint(lead.Float64s()) != "[10 11 12 13 14]" || &lead.Data[0] != &in.Data[20] {
		t.Errorf("row 1 of a leading batch dim: %v, want [10 11 12 13 14], a view of the input's bytes", lead.Float64s())
	}

	v := &version{plan: p}
	// Shard 0 ran rows 0-2 in bucket 4, shard 1 rows 3-4 in bucket 2; each
	// output is [seq=2, its bucket], out[s, b] = 100*s + the row's number.
	shardOut := func(lo int64, bucket int64) *tensor.Tensor {
		o := tensor.New(tensor.Float32, 2, bucket)
		for i := range 2 * bucket {
			o.SetFloat64(i, float64(100*(i/bucket)+lo+i%bucket))
		}
		return o
	}
	outs, err := v.joinShards(map[string]int64{"batch": 8},
		[][]*tensor.Tensor{{shardOut(0, 4)}, {shardOut(3, 2)}},
		[]shard{{lo: 0, n: 3}, {lo: 3, n: 2}})
	if err != nil {
		t.Fatal(err)
	}
	want = []float64{0, 1, 2, 3, 4, 0, 0, 0, 100, 101, 102, 103, 104, 0, 0, 0}
	if tensor.ShapeString(outs[0].Shape) != "[2,8]" || fmt.Sprint(outs[0].Float64s()) != fmt.Sprint(want) {
		t.Errorf("joined %s %v, want [2,8] %v", tensor.ShapeString(outs[0].Shape), outs[0].Float64s(), want)
	}
}
