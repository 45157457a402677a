package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

func compilations(t testing.TB, m *Manager, model, version, bucket string) float64 {
	t.Helper()
	return metric(t, m, fmt.Sprintf(`xserve_compilations_total{bucket=%q,model=%q,version=%q}`, bucket, model, version))
}

func TestTinyCNNMatchesONNXRuntime(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2, 4]\n")
	m, _ := start(t, r, nil)
	image, ref := readNpy(t, tinyCNNImage), readNpy(t, tinyCNNProbs)
	ctx := context.Background()

	resp, err := m.Infer(ctx, "tinycnn", 0, &InferRequest{ID: "req-1", Inputs: map[string]*tensor.Tensor{"image": image}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ID != "req-1" || resp.ModelName != "tinycnn" || resp.ModelVersion != 1 || resp.Bucket != "batch=2" {
		t.Errorf("response is %q %s %d bucket %q, want req-1 tinycnn 1 batch=2", resp.ID, resp.ModelName, resp.ModelVersion, resp.Bucket)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "probs" {
		t.Fatalf("outputs %v, want probs", resp.Outputs)
	}
	assertClose(t, "batch of 2", resp.Outputs[0].Tensor, ref, 1e-5)

	// Each row alone runs in bucket 1 and gives the same row.
	single := make([]*tensor.Tensor, 2)
	for i := range single {
		resp := infer(t, m, "tinycnn", 1, map[string]*tensor.Tensor{"image": rows(image, i)})
		if resp.Bucket != "batch=1" {
			t.Errorf("row %d ran in bucket %q, want batch=1", i, resp.Bucket)
		}
		single[i] = resp.Outputs[0].Tensor
		assertClose(t, fmt.Sprintf("row %d alone", i), single[i], rows(ref, i), 1e-5)
	}

	// Three rows are padded to bucket 4 and sliced back to 3.
	resp = infer(t, m, "tinycnn", 0, map[string]*tensor.Tensor{"image": rows(image, 0, 1, 0)})
	if resp.Bucket != "batch=4" {
		t.Errorf("batch of 3 ran in bucket %q, want batch=4", resp.Bucket)
	}
	want := tensor.New(tensor.Float32, 3, 10)
	for i, row := range []int{0, 1, 0} {
		copy(want.Data[i*40:], single[row].Data)
	}
	assertClose(t, "batch of 3 in bucket 4", resp.Outputs[0].Tensor, want, 1e-6)

	for _, b := range []string{"batch=1", "batch=2", "batch=4"} {
		if n := compilations(t, m, "tinycnn", "1", b); n != 1 {
			t.Errorf("bucket %s compiled %v times, want 1", b, n)
		}
	}
	if n := metric(t, m, `xserve_requests_total{model="tinycnn",outcome="success",version="1"}`); n != 4 {
		t.Errorf("xserve_requests_total success = %v, want 4", n)
	}

	md, err := m.Metadata("tinycnn", 0)
	if err != nil {
		t.Fatal(err)
	}
	in := md.Inputs[0]
	if md.Platform != "onnx" || !slices.Equal(md.Versions, []int64{1}) || in.Name != "image" || in.DType != tensor.Float32 ||
		!slices.Equal(in.Shape, []int64{-1, 3, 32, 32}) || !slices.Equal(in.Dims, []string{"batch", "3", "32", "32"}) ||
		!slices.Equal(md.Buckets["batch"], []int64{1, 2, 4}) || len(md.Outputs) != 1 || !slices.Equal(md.Outputs[0].Dims, []string{"batch", "10"}) {
		t.Errorf("metadata %+v", md)
	}
}

func TestConcurrentRequestsCompileOncePerBucket(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	// Unbatched, so that each request runs in its own bucket.
	r.config("tinycnn", "buckets:\n  batch: [1, 2, 4, 8]\nbatching:\n  enabled: false\n")
	m, _ := start(t, r, nil)
	image, ref := readNpy(t, tinyCNNImage), readNpy(t, tinyCNNProbs)

	const workers = 24
	var wg sync.WaitGroup
	gate := make(chan struct{})
	errs := make(chan error, workers)
	for w := range workers {
		n := w%8 + 1 // batch sizes 1..8: buckets 1, 2, 4, 4, 8, 8, 8, 8
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i % 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate // all first requests at once
			resp, err := m.Infer(context.Background(), "tinycnn", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"image": rows(image, idx...)}})
			if err != nil {
				errs <- err
				return
			}
			got := resp.Outputs[0].Tensor
			if want := rows(ref, idx...); tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
				errs <- fmt.Errorf("batch %d: got %s, want %s", n, got, want)
			} else {
				g, w := got.Float64s(), want.Float64s()
				for i := range w {
					if d := g[i] - w[i]; d > 1e-5 || d < -1e-5 {
						errs <- fmt.Errorf("batch %d: element %d is %v, want %v", n, i, g[i], w[i])
						break
					}
				}
			}
		}()
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, b := range []string{"batch=1", "batch=2", "batch=4", "batch=8"} {
		if n := compilations(t, m, "tinycnn", "1", b); n != 1 {
			t.Errorf("bucket %s compiled %v times, want 1", b, n)
		}
	}
	if n := m.compiles.Load(); n != 4 {
		t.Errorf("%d compilations, want 4", n)
	}
	if n := metric(t, m, `xserve_request_duration_seconds_count{model="tinycnn",phase="total",version="1"}`); n != workers {
		t.Errorf("request duration count %v, want %d", n, workers)
	}
}

func TestConcurrentFirstRequestsShareOneCompile(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [2]\n")
	m, logs := start(t, r, nil)
	image := readNpy(t, tinyCNNImage)
	const n = 16
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			if _, err := m.Infer(context.Background(), "tinycnn", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"image": image}}); err != nil {
				t.Error(err)
			}
		}()
	}
	close(gate)
	wg.Wait()
	if c := compilations(t, m, "tinycnn", "1", "batch=2"); c != 1 {
		t.Errorf("compiled %v times, want 1", c)
	}
	if l := logs.lines("compiled bucket", `bucket="batch=2"`); len(l) != 1 {
		t.Errorf("compile log lines: %q, want 1", l)
	}
}

func TestCompileErrorReachesEveryWaiterAndRetries(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1]\n")
	m, _ := start(t, r, nil)
	v := versionOf(m, "tinycnn", 1)
	b := v.acquireBucket(map[string]int64{"batch": 1})
	defer v.releaseBucket(b)
	// A cancelled version context makes the compile fail at once (pjrt checks
	// it first), as a broken program would.
	v.cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = v.executable(context.Background(), b, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("waiter %d: %v, want the compile's error", i, err)
		}
	}
	v.ctx, v.cancel = context.WithCancel(context.Background())
	if _, err := v.executable(context.Background(), b, nil); err != nil {
		t.Fatalf("retry after a failed compile: %v", err)
	}
}

func TestNoBucket(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN) // no config.yaml: default buckets
	m, logs := start(t, r, nil)
	loaded := m.compiles.Load() // the load-time pad probe's
	_, err := m.Infer(context.Background(), "tinycnn", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"image": tensor.New(tensor.Float32, 100, 3, 32, 32)}})
	// Above the default batch buckets a size runs exactly, but dynamic
	// batching (on by default) bounds the rows of a request first.
	want := `100 rows exceed the maximum batch size 64 (buckets [1 2 4 8 16 32 64])`
	if !errors.Is(err, ErrInvalidInput) || !errors.Is(err, batching.ErrTooLarge) || !strings.Contains(err.Error(), want) {
		t.Errorf("Infer with batch 100:\n got %v\nwant %s", err, want)
	}
	if n := m.compiles.Load() - loaded; n != 0 {
		t.Errorf("%d compilations, want none", n)
	}
	if l := logs.lines("msg=symbol", "symbol=batch", "buckets_from=default"); len(l) != 1 {
		t.Errorf("default-bucket log lines: %q, want 1", l)
	}
	md, err := m.Metadata("tinycnn", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 2, 4, 8, 16, 32, 64}; !slices.Equal(md.Buckets["batch"], want) {
		t.Errorf("buckets %v, want %v", md.Buckets, want)
	}
	if n := metric(t, m, `xserve_requests_total{model="tinycnn",outcome="failure",version="1"}`); n != 1 {
		t.Errorf("failures %v, want 1", n)
	}
}

func TestInvalidInput(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.add("tinycnn", 1, tinyCNN)
	m, _ := start(t, r, nil)
	loaded := m.compiles.Load() // the load-time pad probe's
	f32 := func(shape ...int64) *tensor.Tensor { return tensor.New(tensor.Float32, shape...) }
	short := f32(3, 5)
	short.Data = short.Data[:8]
	for _, c := range []struct {
		name    string
		model   string
		inputs  map[string]*tensor.Tensor
		outputs []string
		want    string
	}{
		{"unknown input", "pair", map[string]*tensor.Tensor{"x": f32(3, 5), "y": f32(3, 5), "z": f32(3, 5)}, nil,
			`serving: invalid input: model pair has no input "z" (inputs: x, y)`},
		{"missing input", "pair", map[string]*tensor.Tensor{"x": f32(3, 5)}, nil,
			`serving: invalid input: missing input "y" (float32[batch,seq])`},
		{"nil input", "pair", map[string]*tensor.Tensor{"x": f32(3, 5), "y": nil}, nil,
			`serving: invalid input: missing input "y" (float32[batch,seq])`},
		{"wrong dtype", "pair", map[string]*tensor.Tensor{"x": tensor.New(tensor.Int64, 3, 5), "y": f32(3, 5)}, nil,
			`serving: invalid input: input "x" has dtype int64, model expects float32`},
		{"wrong rank", "pair", map[string]*tensor.Tensor{"x": f32(15), "y": f32(3, 5)}, nil,
			`serving: invalid input: input "x" has shape [15] (rank 1), model expects rank 2: [batch,seq]`},
		{"inconsistent symbol", "pair", map[string]*tensor.Tensor{"x": f32(3, 5), "y": f32(2, 5)}, nil,
			`serving: invalid input: input "y" dim 0 (batch) is 2, but input "x" dim 0 (batch) is 3`},
		{"data does not fit the shape", "pair", map[string]*tensor.Tensor{"x": short, "y": f32(3, 5)}, nil,
			`serving: invalid input: input "x" has shape [3,5] but 8 bytes of data, want 60`},
		{"unknown output", "pair", map[string]*tensor.Tensor{"x": f32(3, 5), "y": f32(3, 5)}, []string{"total", "nope"},
			`serving: invalid input: model pair has no output "nope" (outputs: sum, total)`},
		{"wrong static dim", "tinycnn", map[string]*tensor.Tensor{"image": f32(1, 4, 32, 32)}, nil,
			`serving: invalid input: input "image" dim 1 is 4, model expects 3 (shape [batch,3,32,32])`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.Infer(context.Background(), c.model, 0, &InferRequest{Inputs: c.inputs, Outputs: c.outputs})
			if !errors.Is(err, ErrInvalidInput) || err.Error() != c.want {
				t.Errorf("got  %v\nwant %s", err, c.want)
			}
		})
	}
	if n := m.compiles.Load() - loaded; n != 0 {
		t.Errorf("invalid requests compiled %d buckets", n)
	}
	for _, c := range []struct {
		model   string
		version int64
		is      error
		want    string
	}{
		{"nope", 0, ErrModelNotFound, `serving: model not found: no model "nope" in the repository`},
		{"pair", 7, ErrModelNotFound, `serving: model not found: model pair has no version 7 (versions: [1])`},
	} {
		_, err := m.Infer(context.Background(), c.model, c.version, &InferRequest{})
		if !errors.Is(err, c.is) || err.Error() != c.want {
			t.Errorf("Infer %s %d:\n got %v\nwant %s", c.model, c.version, err, c.want)
		}
	}
}

func TestPaddingAndSlicingTwoSymbols(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 4]\n  seq: [4, 8]\n")
	// padded: x's padding is 0.5, which the sum over seq sees.
	r.add("padded", 1, pairModel)
	r.config("padded", "inputs:\n  - name: x\n    pad_value: 0.5\nbuckets:\n  batch: [4]\n  seq: [8]\npad:\n  seq: true\n")
	// probed: the same pad value without pad: true; the probe sees that
	// padding seq changes total, so seq is served at exact sizes.
	r.add("probed", 1, pairModel)
	r.config("probed", "inputs:\n  - name: x\n    pad_value: 0.5\nbuckets:\n  batch: [4]\n  seq: [8]\n")
	// renamed: config.yaml names the model's batch symbol n and pins nothing.
	r.add("renamed", 1, pairModel)
	r.config("renamed", "inputs:\n  - name: x\n    dims: [n, seq]\n  - name: y\n    dtype: float32\n    dims: [n, seq]\noutputs:\n  - name: total\n    dims: [n]\nbuckets:\n  n: [2, 4]\n  seq: [8]\n")
	// pinned: config.yaml fixes the batch dim to 3.
	r.add("pinned", 1, pairModel)
	r.config("pinned", "inputs:\n  - name: x\n    dims: [3, seq]\nbuckets:\n  seq: [8]\n")
	m, _ := start(t, r, nil)

	x, y := readNpy(t, "testdata/pair_x.npy"), readNpy(t, "testdata/pair_y.npy") // [3,5]
	sum, total := readNpy(t, "testdata/pair_sum.onnxruntime.npy"), readNpy(t, "testdata/pair_total.onnxruntime.npy")
	in := map[string]*tensor.Tensor{"x": x, "y": y}

	resp := infer(t, m, "pair", 0, in)
	if resp.Bucket != "batch=4,seq=8" || len(resp.Outputs) != 2 || resp.Outputs[0].Name != "sum" || resp.Outputs[1].Name != "total" {
		t.Fatalf("bucket %q outputs %v", resp.Bucket, resp.Outputs)
	}
	assertClose(t, "sum", resp.Outputs[0].Tensor, sum, 1e-6)
	assertClose(t, "total", resp.Outputs[1].Tensor, total, 1e-5)

	resp, err := m.Infer(context.Background(), "pair", 0, &InferRequest{Inputs: in, Outputs: []string{"total"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "total" {
		t.Errorf("Outputs [total] gave %v", resp.Outputs)
	}

	resp = infer(t, m, "padded", 0, in)
	assertClose(t, "sum with pad value 0.5", resp.Outputs[0].Tensor, sum, 1e-6)
	want := total.Clone()
	for i := range int64(3) {
		want.SetFloat64(i, total.Float64At(i)+0.5*(8-5)) // three padded columns of 0.5
	}
	assertClose(t, "total with pad value 0.5", resp.Outputs[1].Tensor, want, 1e-5)

	resp = infer(t, m, "probed", 0, in)
	if resp.Bucket != "batch=4,seq=5" {
		t.Errorf("probed ran in %q, want batch=4,seq=5 (seq exact)", resp.Bucket)
	}
	assertClose(t, "probed sum", resp.Outputs[0].Tensor, sum, 1e-6)
	assertClose(t, "probed total", resp.Outputs[1].Tensor, total, 1e-5)
	md, err := m.Metadata("probed", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Symbols) != 2 || md.Symbols[0].Pad != "pad" || md.Symbols[1].Pad != "exact" || !strings.Contains(md.Symbols[1].PadReason, `changes output "total"`) {
		t.Errorf("probed symbols %+v", md.Symbols)
	}

	md, err = m.Metadata("renamed", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(md.Inputs[1].Dims, []string{"n", "seq"}) || !slices.Equal(md.Outputs[0].Dims, []string{"n", "seq"}) || !slices.Equal(md.Outputs[1].Dims, []string{"n"}) || md.Buckets["n"] == nil {
		t.Errorf("renamed metadata %+v", md)
	}
	resp = infer(t, m, "renamed", 0, in)
	if resp.Bucket != "n=4,seq=8" {
		t.Errorf("renamed ran in %q, want n=4,seq=8", resp.Bucket)
	}
	assertClose(t, "renamed sum", resp.Outputs[0].Tensor, sum, 1e-6)

	md, err = m.Metadata("pinned", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(md.Inputs[0].Shape, []int64{3, -1}) || md.Buckets["batch"] != nil {
		t.Errorf("pinned metadata %+v", md)
	}
	resp = infer(t, m, "pinned", 0, in)
	if resp.Bucket != "seq=8" {
		t.Errorf("pinned ran in %q, want seq=8", resp.Bucket)
	}
	assertClose(t, "pinned total", resp.Outputs[1].Tensor, total, 1e-5)
	_, err = m.Infer(context.Background(), "pinned", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"x": rows(x, 0), "y": rows(y, 0)}})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), `input "x" dim 0 is 1, model expects 3`) {
		t.Errorf("batch 1 on pinned: %v", err)
	}
}

func TestRunBucketStacksRequests(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [4]\n  seq: [8]\n")
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [4]\n")
	m, _ := start(t, r, nil)
	ctx := context.Background()

	// tinycnn: one row and two rows, stacked into one execution of bucket 4.
	image, ref := readNpy(t, tinyCNNImage), readNpy(t, tinyCNNProbs)
	v := versionOf(m, "tinycnn", 1)
	c1, err := v.prepare(&InferRequest{Inputs: map[string]*tensor.Tensor{"image": rows(image, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := v.prepare(&InferRequest{Inputs: map[string]*tensor.Tensor{"image": rows(image, 0, 1)}})
	if err != nil || !maps.Equal(c1.exec, c2.exec) {
		t.Fatal(err, c1.exec, c2.exec)
	}
	if _, err := v.runBucket(ctx, c1.exec, []*call{c1, c2}, nil); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "first request", c1.outs[0], rows(ref, 1), 1e-5)
	assertClose(t, "second request", c2.outs[0], rows(ref, 0, 1), 1e-5)

	// pair: requests of 1 and 2 rows with different seq sizes (3 and 5).
	x, y := readNpy(t, "testdata/pair_x.npy"), readNpy(t, "testdata/pair_y.npy")
	sum := readNpy(t, "testdata/pair_sum.onnxruntime.npy")
	v = versionOf(m, "pair", 1)
	cut := func(t0 *tensor.Tensor, rowIdx []int, cols int64) *tensor.Tensor {
		src := rows(t0, rowIdx...)
		out := tensor.New(tensor.Float32, src.Shape[0], cols)
		copyBlock(out.Data, out.Shape, []int64{0, 0}, src.Data, src.Shape, []int64{0, 0}, out.Shape, 4)
		return out
	}
	p1, err := v.prepare(&InferRequest{Inputs: map[string]*tensor.Tensor{"x": cut(x, []int{2}, 3), "y": cut(y, []int{2}, 3)}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := v.prepare(&InferRequest{Inputs: map[string]*tensor.Tensor{"x": cut(x, []int{0, 1}, 5), "y": cut(y, []int{0, 1}, 5)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.runBucket(ctx, p1.exec, []*call{p1, p2}, nil); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "pair first request", p1.outs[0], cut(sum, []int{2}, 3), 1e-6)
	assertClose(t, "pair second request", p2.outs[0], cut(sum, []int{0, 1}, 5), 1e-6)

	// Too many rows for the bucket are refused.
	p3, _ := v.prepare(&InferRequest{Inputs: map[string]*tensor.Tensor{"x": x, "y": y}})
	if _, err := v.runBucket(ctx, p1.exec, []*call{p2, p3}, nil); err == nil || !strings.Contains(err.Error(), "do not fit bucket") {
		t.Errorf("5 rows in bucket batch=4: %v", err)
	}
}

func TestEagerWarmup(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "warmup: eager\nbuckets:\n  batch: [1, 4]\n")
	m, logs := start(t, r, nil)
	for i, b := range []string{"batch=1", "batch=4"} {
		if n := compilations(t, m, "tinycnn", "1", b); n != 1 {
			t.Errorf("bucket %s compiled %v times at load, want 1", b, n)
		}
		if l := logs.lines("compiled bucket", "model=tinycnn", "version=1", `bucket="`+b+`"`, "progress=", "duration="); len(l) != 1 {
			t.Errorf("progress log for %s: %q\n%s", b, l, logs)
		}
		// The buckets compile in parallel: progress counts them as they finish.
		if l := logs.lines("compiled bucket", "model=tinycnn", fmt.Sprintf("progress=%d/2", i+1)); len(l) != 1 {
			t.Errorf("progress %d/2 logged %d times\n%s", i+1, len(l), logs)
		}
		if n := metric(t, m, `xserve_bucket_compile_seconds{bucket="`+b+`",model="tinycnn",version="1"}`); n <= 0 {
			t.Errorf("compile seconds of %s: %v", b, n)
		}
	}
	infer(t, m, "tinycnn", 0, map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)})
	if n := m.compiles.Load(); n != 2 {
		t.Errorf("%d compilations after a request, want the 2 of warmup", n)
	}
}

func TestBrokenModelsAreUnavailable(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [2]\n")
	r.write("garbage", 1, []byte("this is not an ONNX model"))
	r.add("mismatch", 1, tinyCNN)
	r.config("mismatch", "inputs:\n  - name: image\n    dtype: int64\n")
	r.add("badyaml", 1, tinyCNN)
	r.config("badyaml", "bukets: {batch: [1]}\n")
	// emptyv2: version 2 has no model file; the policy (latest: 1) would
	// serve it, so it is reported, and version 1 serves.
	r.add("emptyv2", 1, tinyCNN)
	r.config("emptyv2", "buckets:\n  batch: [2]\n")
	if err := os.MkdirAll(filepath.Join(r.root, "emptyv2", "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, _ := start(t, r, nil)

	if !m.Ready() {
		t.Error("Ready() = false")
	}
	st, reason := state(m, "garbage", 1)
	if st != StateUnavailable || !strings.Contains(reason, "model garbage version 1") {
		t.Errorf("garbage is %s (%s)", st, reason)
	}
	st, reason = state(m, "mismatch", 1)
	if st != StateUnavailable || !strings.Contains(reason, `config.yaml: inputs[0].dtype: is int64, but the model's input "image" is float32[batch,3,32,32]`) {
		t.Errorf("mismatch is %s (%s)", st, reason)
	}
	st, reason = state(m, "badyaml", 0)
	if st != StateUnavailable || !strings.Contains(reason, "bukets") {
		t.Errorf("badyaml is %s (%s)", st, reason)
	}
	st, reason = state(m, "emptyv2", 2)
	if st != StateUnavailable || !strings.Contains(reason, "no model file") {
		t.Errorf("emptyv2 version 2 is %s (%s)", st, reason)
	}
	if resp := infer(t, m, "emptyv2", 0, map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}); resp.ModelVersion != 1 {
		t.Errorf("emptyv2 served version %d, want 1", resp.ModelVersion)
	}
	if st, _ := state(m, "tinycnn", 1); st != StateReady {
		t.Errorf("tinycnn is %s", st)
	}
	infer(t, m, "tinycnn", 0, map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)})
	for _, name := range []string{"garbage", "mismatch", "badyaml"} {
		_, err := m.Infer(context.Background(), name, 0, &InferRequest{})
		if !errors.Is(err, ErrNotReady) {
			t.Errorf("Infer %s: %v, want ErrNotReady", name, err)
		}
		if m.ModelReady(name, 0) {
			t.Errorf("ModelReady(%s)", name)
		}
	}
	if n := metric(t, m, "xserve_models_loaded"); n != 2 {
		t.Errorf("xserve_models_loaded = %v, want 2", n)
	}
	if n := metric(t, m, `xserve_model_state{model="garbage",state="UNAVAILABLE",version="1"}`); n != 1 {
		t.Errorf("garbage state metric = %v", n)
	}
	if err := m.Load(context.Background(), "garbage"); !errors.Is(err, ErrNotReady) {
		t.Errorf("Load(garbage) = %v, want ErrNotReady", err)
	}
}

func TestPollingFollowsTheRepository(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "version_policy: {all: true}\nbuckets:\n  batch: [2]\n")
	m, logs := start(t, r, func(o *Options) { o.PollInterval = 20 * time.Millisecond })
	image := map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}
	ctx := context.Background()

	// A new version directory is loaded.
	r.add("tinycnn", 2, tinyCNN)
	eventually(t, "version 2 to load", func() bool { return m.ModelReady("tinycnn", 2) })
	if resp := infer(t, m, "tinycnn", 0, image); resp.ModelVersion != 2 {
		t.Errorf("version 0 ran version %d, want the latest, 2", resp.ModelVersion)
	}

	// A removed version is unloaded once its in-flight request finished.
	v2, err := m.acquire("tinycnn", 2) // a request in flight
	if err != nil {
		t.Fatal(err)
	}
	releaseV2 := sync.OnceFunc(func() { m.release(v2) })
	t.Cleanup(releaseV2) // so that a failure below does not also stall Shutdown
	r.remove("tinycnn", 2)
	eventually(t, "version 2 to unload", func() bool { s, _ := state(m, "tinycnn", 2); return s == StateUnloading })
	if _, err := m.Infer(ctx, "tinycnn", 2, &InferRequest{Inputs: image}); !errors.Is(err, ErrNotReady) {
		t.Errorf("new request to an unloading version: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if v2.model.Weights().Len() == 0 {
		t.Fatal("weights freed under an in-flight request")
	}
	resp, err := v2.infer(ctx, &InferRequest{Inputs: image}, time.Now())
	if err != nil || resp.ModelVersion != 2 {
		t.Fatalf("in-flight request on the unloading version: %v", err)
	}
	releaseV2()
	eventually(t, "version 2 to be forgotten", func() bool { s, _ := state(m, "tinycnn", 2); return s == "" })
	<-v2.freed
	if v2.model.Weights().Len() != 0 {
		t.Errorf("%d weights still on the device", v2.model.Weights().Len())
	}
	if resp := infer(t, m, "tinycnn", 0, image); resp.ModelVersion != 1 {
		t.Errorf("ran version %d, want 1", resp.ModelVersion)
	}

	// A changed model file is reloaded; the old instance serves meanwhile
	// and is freed after.
	old := versionOf(m, "tinycnn", 1)
	p := filepath.Join(r.root, "tinycnn", "1", "model.onnx")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	eventually(t, "version 1 to reload", func() bool { return versionOf(m, "tinycnn", 1) != old && m.ModelReady("tinycnn", 1) })
	<-old.freed
	infer(t, m, "tinycnn", 1, image)

	// A broken new version is UNAVAILABLE and does not affect the others.
	r.write("tinycnn", 3, []byte("garbage"))
	eventually(t, "version 3 to fail", func() bool { s, _ := state(m, "tinycnn", 3); return s == StateUnavailable })
	if !m.ModelReady("tinycnn", 1) {
		t.Error("version 1 is not ready after version 3 failed")
	}
	if resp := infer(t, m, "tinycnn", 0, image); resp.ModelVersion != 1 {
		t.Errorf("version 0 ran version %d, want 1 (3 is broken)", resp.ModelVersion)
	}

	// A new model appears; a removed model disappears.
	r.add("second", 1, tinyCNN)
	r.config("second", "buckets:\n  batch: [2]\n")
	eventually(t, "model second to load", func() bool { return m.ModelReady("second", 0) })
	gone := filepath.Join(t.TempDir(), "second")
	if err := os.Rename(filepath.Join(r.root, "second"), gone); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model second to go", func() bool { s, _ := state(m, "second", 1); return s == "" })
	if _, err := m.Infer(ctx, "second", 0, &InferRequest{Inputs: image}); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("Infer on a removed model: %v", err)
	}
	if len(logs.lines("model version unloaded", "model=second")) != 1 {
		t.Errorf("no unload logged for model second")
	}
}

// TestFailedReloadIsVisible overwrites a serving model's file with garbage
// under load: the old instance keeps serving, and the index (READY with a
// reason) and the metrics say that the file on disk failed to load; the
// same broken file is not retried on every poll; a good file heals it.
func TestFailedReloadIsVisible(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [2]\n")
	m, logs := start(t, r, func(o *Options) { o.PollInterval = 20 * time.Millisecond })
	image := map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}
	infer(t, m, "tinycnn", 0, image)
	stop := make(chan struct{})
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.Infer(context.Background(), "tinycnn", 0, &InferRequest{Inputs: image}); err != nil {
					failed.Add(1)
				} else {
					served.Add(1)
				}
			}
		}()
	}
	const staleSeries = `xserve_model_stale{model="tinycnn",version="1"}`
	const failures = `xserve_model_reload_failures_total{model="tinycnn",version="1"}`
	r.write("tinycnn", 1, []byte("garbage, not an ONNX model"))
	eventually(t, "the failed reload in the index", func() bool {
		s, reason := state(m, "tinycnn", 1)
		return s == StateReady && strings.Contains(reason, "reload failed")
	})
	if metric(t, m, staleSeries) != 1 || metric(t, m, failures) != 1 {
		t.Errorf("stale %v, reload failures %v; want 1, 1", metric(t, m, staleSeries), metric(t, m, failures))
	}
	time.Sleep(200 * time.Millisecond) // ten polls
	if n := metric(t, m, failures); n != 1 {
		t.Errorf("the same broken file was reloaded %v times, want once", n)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || served.Load() == 0 {
		t.Errorf("under the failed reload: %d served, %d failed", served.Load(), failed.Load())
	}
	_, reason := state(m, "tinycnn", 1)
	t.Logf("index reason: %s", reason)

	r.add("tinycnn", 1, tinyCNN)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(r.root, "tinycnn", "1", "model.onnx"), later, later); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the good file to load", func() bool {
		s, reason := state(m, "tinycnn", 1)
		return s == StateReady && reason == "" && metric(t, m, staleSeries) == 0
	})
	infer(t, m, "tinycnn", 1, image)
	if l := logs.lines("reload failed"); len(l) != 1 {
		t.Errorf("reload failures logged: %q, want 1", l)
	}
}

func TestUnloadAndLoad(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [2]\n")
	m, _ := start(t, r, nil)
	image := map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}
	ctx := context.Background()
	infer(t, m, "tinycnn", 0, image)

	v, err := m.acquire("tinycnn", 1) // a request in flight
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Unload(ctx, "tinycnn") }()
	eventually(t, "UNLOADING", func() bool { s, _ := state(m, "tinycnn", 1); return s == StateUnloading })
	select {
	case err := <-done:
		t.Fatalf("Unload returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := m.Infer(ctx, "tinycnn", 0, &InferRequest{Inputs: image}); !errors.Is(err, ErrNotReady) {
		t.Errorf("request during unload: %v", err)
	}
	if _, err := v.infer(ctx, &InferRequest{Inputs: image}, time.Now()); err != nil {
		t.Errorf("in-flight request: %v", err)
	}
	m.release(v)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s, reason := state(m, "tinycnn", 1); s != StateUnavailable || !strings.HasPrefix(reason, "unloaded") {
		t.Errorf("after Unload: %s (%s)", s, reason)
	}
	for _, st := range m.Status() {
		if st.Name == "tinycnn" && !st.Unloaded {
			t.Errorf("after Unload: status %+v, want Unloaded (not a broken version)", st)
		}
	}
	if v.model.Weights().Len() != 0 {
		t.Errorf("%d weights left on the device", v.model.Weights().Len())
	}
	if n := metric(t, m, "xserve_models_loaded"); n != 0 {
		t.Errorf("xserve_models_loaded = %v", n)
	}

	if err := m.Load(ctx, "tinycnn"); err != nil {
		t.Fatal(err)
	}
	if !m.ModelReady("tinycnn", 1) {
		t.Fatal("not ready after Load")
	}
	infer(t, m, "tinycnn", 0, image)

	// Unloaded, then gone from the repository: Load forgets it.
	if err := m.Unload(ctx, "tinycnn"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(r.root, "tinycnn")); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx, "tinycnn"); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("Load of a removed model = %v, want ErrModelNotFound", err)
	}
	if s := m.Status(); len(s) != 0 {
		t.Errorf("Status after the model left: %v", s)
	}

	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"Unload(nope)", func() error { return m.Unload(ctx, "nope") }},
		{"Load(nope)", func() error { return m.Load(ctx, "nope") }},
		{"Load(../etc)", func() error { return m.Load(ctx, "../etc") }},
	} {
		if err := c.f(); !errors.Is(err, ErrModelNotFound) {
			t.Errorf("%s = %v, want ErrModelNotFound", c.name, err)
		}
	}
}

func TestShutdownWaitsForInFlightRequests(t *testing.T) {
	before := runtime.NumGoroutine()
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	// Unbatched: a request that holds the version but has not reached a
	// batching queue when Shutdown begins is refused by the closed queue
	// (TestBatchingShutdownDrainsQueue covers the batched path).
	r.config("tinycnn", "buckets:\n  batch: [2]\nbatching:\n  enabled: false\n")
	m, _ := start(t, r, func(o *Options) { o.PollInterval = 10 * time.Millisecond })
	image := map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}
	ctx := context.Background()
	infer(t, m, "tinycnn", 0, image)

	v, err := m.acquire("tinycnn", 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Shutdown(ctx) }()
	eventually(t, "new requests to be refused", func() bool {
		_, err := m.Infer(ctx, "tinycnn", 0, &InferRequest{Inputs: image})
		return errors.Is(err, ErrClosed)
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := v.infer(ctx, &InferRequest{Inputs: image}, time.Now()); err != nil {
		t.Errorf("in-flight request during shutdown: %v", err)
	}
	m.release(v)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v.model.Weights().Len() != 0 {
		t.Errorf("%d weights left on the device", v.model.Weights().Len())
	}
	if _, err := m.Infer(ctx, "tinycnn", 0, &InferRequest{Inputs: image}); !errors.Is(err, ErrClosed) || err.Error() != "serving: closed: the server is shutting down" {
		t.Errorf("Infer after Shutdown: %v", err)
	}
	if err := m.Load(ctx, "tinycnn"); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Shutdown: %v", err)
	}
	if m.Ready() {
		t.Error("Ready after Shutdown")
	}
	eventually(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

func TestStableHLOCacheSurvivesRestart(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2]\n")
	cacheDir := t.TempDir()
	withCache := func(o *Options) { o.CompileCacheDir = cacheDir }
	image := readNpy(t, tinyCNNImage)
	run := func(m *Manager) []*tensor.Tensor {
		var outs []*tensor.Tensor
		for _, in := range []*tensor.Tensor{rows(image, 0), image} {
			outs = append(outs, infer(t, m, "tinycnn", 0, map[string]*tensor.Tensor{"image": in}).Outputs[0].Tensor)
		}
		return outs
	}
	const hit, miss = `xserve_compile_cache_total{kind="stablehlo",result="hit"}`, `xserve_compile_cache_total{kind="stablehlo",result="miss"}`

	m1, logs1 := start(t, r, withCache)
	first := run(m1)
	if m1.lowerings.Load() != 2 || metric(t, m1, miss) != 2 || metric(t, m1, hit) != 0 {
		t.Errorf("first run: %d lowerings, %v misses, %v hits; want 2, 2, 0", m1.lowerings.Load(), metric(t, m1, miss), metric(t, m1, hit))
	}
	if err := m1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	hlo, _ := filepath.Glob(filepath.Join(cacheDir, "*.stablehlo"))
	exes, _ := filepath.Glob(filepath.Join(cacheDir, "*.pjrt"))
	tmp, _ := filepath.Glob(filepath.Join(cacheDir, ".tmp-*"))
	if len(hlo) != 2 || len(tmp) != 0 {
		t.Fatalf("cache holds %q and temporary files %q", hlo, tmp)
	}
	// tinycnn's conv weights are stored transposed on CPU: the restart
	// below must transpose the model's tensors the same way.
	if entry, err := os.ReadFile(hlo[0]); err != nil || !strings.Contains(string(entry), `"perm":[2,3,1,0]`) {
		t.Errorf("cache entry has no transposed conv weight (err %v)", err)
	}
	serializes := len(exes) == 2
	if !serializes {
		if len(exes) != 0 {
			t.Fatalf("cache holds %d executables, want 0 or 2", len(exes))
		}
		// The plugin binding cannot serialize: said once, at debug level.
		if l := logs1.lines("cannot serialize executables"); len(l) != 1 || !strings.Contains(l[0], "level=DEBUG") {
			t.Errorf("serialize log lines %q, want one at debug level", l)
		}
	}

	m2, _ := start(t, r, withCache)
	second := run(m2)
	if m2.lowerings.Load() != 0 || metric(t, m2, hit) != 2 || metric(t, m2, miss) != 0 {
		t.Errorf("after restart: %d lowerings, %v hits, %v misses; want 0, 2, 0", m2.lowerings.Load(), metric(t, m2, hit), metric(t, m2, miss))
	}
	const exeHit = `xserve_compile_cache_total{kind="executable",result="hit"}`
	if serializes {
		if m2.compiles.Load() != 0 || metric(t, m2, exeHit) != 2 {
			t.Errorf("after restart: %d compilations, %v executable hits; want 0, 2", m2.compiles.Load(), metric(t, m2, exeHit))
		}
	} else if m2.compiles.Load() != 2 {
		t.Errorf("after restart: %d compilations, want 2", m2.compiles.Load())
	}
	for i := range first {
		assertClose(t, fmt.Sprintf("output %d after restart", i), second[i], first[i], 0)
	}

	// An entry that is intact but not a program is reported and lowered again.
	cache, err := engine.OpenDirCache(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range hlo {
		if err := cache.Put(filepath.Base(p), []byte("{not json")); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range exes {
		os.Remove(p)
	}
	m3, logs3 := start(t, r, withCache)
	run(m3)
	if m3.lowerings.Load() != 2 || len(logs3.lines("unusable StableHLO entry")) != 2 {
		t.Errorf("corrupt cache: %d lowerings, log:\n%s", m3.lowerings.Load(), logs3)
	}
}

// TestCorruptCacheEntriesAreRebuilt damages each kind of compile-cache entry
// (a one-byte change in a StableHLO entry or an executable, a StableHLO
// entry whose checksum is right but whose module does not compile) and
// restarts the Manager: the model is READY, the entry was deleted, logged,
// counted and rebuilt.
func TestCorruptCacheEntriesAreRebuilt(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "warmup: eager\nbuckets:\n  batch: [2]\n")
	cacheDir := t.TempDir()
	withCache := func(o *Options) { o.CompileCacheDir = cacheDir }
	image := map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}
	m, _ := start(t, r, withCache)
	want := infer(t, m, "tinycnn", 0, image).Outputs[0].Tensor
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The warmup and the load-time padding probe compile n buckets.
	entries := func(ext string) []string {
		p, _ := filepath.Glob(filepath.Join(cacheDir, "*"+ext))
		return p
	}
	n := len(entries(".stablehlo"))
	if n == 0 || len(entries(".pjrt")) != n {
		t.Fatalf("cache holds %q and %q, want as many executables as programs", entries(".stablehlo"), entries(".pjrt"))
	}
	flipByte := func(ext string) func() {
		return func() {
			for _, p := range entries(ext) {
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				data[len(data)/2] ^= 0x20
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cache, err := engine.OpenDirCache(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	badModule := func() {
		for _, p := range entries(".stablehlo") {
			key := filepath.Base(p)
			data, ok, err := cache.Get(key)
			if !ok || err != nil {
				t.Fatalf("Get %s: %v %v", key, ok, err)
			}
			var c map[string]any
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatal(err)
			}
			c["module"] = strings.Replace(c["module"].(string), "stablehlo.", "stablehlo.no_such_op_", 1)
			data, _ = json.Marshal(c)
			if err := cache.Put(key, data); err != nil {
				t.Fatal(err)
			}
		}
		// The executables are keyed by the program: remove them so that
		// the damaged modules reach the compiler.
		for _, p := range entries(".pjrt") {
			os.Remove(p)
		}
	}
	for _, tc := range []struct {
		name, kind, log string
		damage          func()
		lowerings       int
	}{
		{"stablehlo byte", engine.CacheStableHLO, "corrupt entry deleted", flipByte(".stablehlo"), n},
		{"executable byte", engine.CacheExecutable, "corrupt entry deleted", flipByte(".pjrt"), 0},
		{"stablehlo does not compile", engine.CacheStableHLO, "cached StableHLO does not compile", badModule, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage()
			m, logs := start(t, r, withCache)
			if st, reason := state(m, "tinycnn", 1); st != StateReady {
				t.Fatalf("state %s (%s), want READY", st, reason)
			}
			if l := logs.lines("level=WARN", tc.log); len(l) != n {
				t.Errorf("log lines %q with %q, want %d\n%s", l, tc.log, n, logs)
			}
			if got := metric(t, m, fmt.Sprintf(`xserve_compile_cache_total{kind="%s",result="corrupt"}`, tc.kind)); got != float64(n) {
				t.Errorf("corrupt %s entries counted: %v, want %d", tc.kind, got, n)
			}
			if got := m.lowerings.Load(); got != int64(tc.lowerings) {
				t.Errorf("%d lowerings, want %d", got, tc.lowerings)
			}
			assertClose(t, "output", infer(t, m, "tinycnn", 0, image).Outputs[0].Tensor, want, 0)
			if err := m.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Rebuilt: every entry is back and intact.
			for _, ext := range []string{".stablehlo", ".pjrt"} {
				ps := entries(ext)
				if len(ps) != n {
					t.Errorf("%d %s entries after restart, want %d", len(ps), ext, n)
				}
				for _, p := range ps {
					if _, ok, err := cache.Get(filepath.Base(p)); !ok || err != nil {
						t.Errorf("%s after restart: ok %v, %v", p, ok, err)
					}
				}
			}
		})
	}
}

func TestNewLatestVersionReplacesTheOldWithoutGap(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "warmup: eager\nbuckets:\n  batch: [2]\n") // default policy: latest: 1
	m, _ := start(t, r, func(o *Options) { o.PollInterval = 20 * time.Millisecond })
	image := map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}

	r.add("tinycnn", 2, tinyCNN)
	for !m.ModelReady("tinycnn", 2) {
		if !m.ModelReady("tinycnn", 0) {
			t.Fatalf("no version ready while version 2 loads: %v", m.Status())
		}
		time.Sleep(time.Millisecond)
	}
	eventually(t, "version 1 to go", func() bool { s, _ := state(m, "tinycnn", 1); return s == "" })

	// Version 3 cannot load: version 2 keeps serving although the policy
	// selects 3.
	r.write("tinycnn", 3, []byte("not a model"))
	eventually(t, "version 3 to fail", func() bool { s, _ := state(m, "tinycnn", 3); return s == StateUnavailable })
	if resp := infer(t, m, "tinycnn", 0, image); resp.ModelVersion != 2 {
		t.Errorf("served version %d, want 2", resp.ModelVersion)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	repo, err := modelrepo.Open(newRepo(t).root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{}, "serving: Options.Client is required"},
		{Options{Client: testClient(t)}, "serving: Options.Repository is required"},
		{Options{Client: testClient(t), Repository: repo, PollInterval: -time.Second}, "serving: Options.PollInterval must be >= 0, got -1s"},
	} {
		if _, err := NewManager(context.Background(), c.opts); err == nil || err.Error() != c.want {
			t.Errorf("NewManager(%+v) = %v, want %s", c.opts, err, c.want)
		}
	}
}
