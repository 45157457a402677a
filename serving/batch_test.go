package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xserve/xserve/batching"
	"github.com/xserve/xserve/tensor"
)

// batchGate is a Manager.batchHook that holds batches at the runner until
// it is opened, so that tests can keep a version's executors busy. It holds
// the first hold batches (all of them when hold < 0) and reports every batch
// on started.
type batchGate struct {
	hold    int64
	started chan *batching.Batch
	open    chan struct{}
	once    sync.Once
	n       atomic.Int64
}

func newBatchGate(hold int64) *batchGate {
	return &batchGate{hold: hold, started: make(chan *batching.Batch, 10000), open: make(chan struct{})}
}

func (g *batchGate) hook(ctx context.Context, bt *batching.Batch) {
	g.started <- bt
	if n := g.n.Add(1); g.hold >= 0 && n > g.hold {
		return
	}
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

// release lets every held batch, present and future, through.
func (g *batchGate) release() { g.once.Do(func() { close(g.open) }) }

// waitStarted waits for the next batch to reach the runner.
func (g *batchGate) waitStarted(t *testing.T) *batching.Batch {
	t.Helper()
	select {
	case bt := <-g.started:
		return bt
	case <-time.After(20 * time.Second):
		t.Fatal("no batch reached the runner within 20s")
		return nil
	}
}

// gated starts a Manager on r whose batches pass g; the gate is released
// before the Manager is shut down at the end of the test.
func gated(t *testing.T, r *testRepo, g *batchGate) *Manager {
	t.Helper()
	m, _ := start(t, r, nil)
	m.batchHook = g.hook
	t.Cleanup(g.release) // runs before start's Shutdown (cleanups run last-in first-out)
	return m
}

// pairInputs returns distinct pair inputs of the given rows and seq, drawn
// from rng.
func pairInputs(rng *rand.Rand, rowsN, seq int64) map[string]*tensor.Tensor {
	x, y := tensor.New(tensor.Float32, rowsN, seq), tensor.New(tensor.Float32, rowsN, seq)
	for i := range rowsN * seq {
		x.SetFloat64(i, rng.NormFloat64())
		y.SetFloat64(i, rng.NormFloat64())
	}
	return map[string]*tensor.Tensor{"x": x, "y": y}
}

// imageInputs returns a distinct tinycnn input of the given rows.
func imageInputs(rng *rand.Rand, rowsN int64) map[string]*tensor.Tensor {
	img := tensor.New(tensor.Float32, rowsN, 3, 32, 32)
	for i := range tensor.NumElements(img.Shape) {
		img.SetFloat64(i, rng.NormFloat64())
	}
	return map[string]*tensor.Tensor{"image": img}
}

// result is the outcome of one asynchronous Infer.
type result struct {
	resp *InferResponse
	err  error
	took time.Duration
}

func inferAsync(ctx context.Context, m *Manager, model string, req *InferRequest) <-chan result {
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := m.Infer(ctx, model, 0, req)
		ch <- result{resp, err, time.Since(start)}
	}()
	return ch
}

func receiveResult(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30s")
		return result{}
	}
}

// batchStats returns the batching stats of a model's version 1.
func batchStats(t *testing.T, m *Manager, model string) batching.KeyStats {
	t.Helper()
	st, ok, err := m.BatchStats(model, 1)
	if err != nil || !ok {
		t.Fatalf("BatchStats(%s): ok %v, %v", model, ok, err)
	}
	return st.Total
}

// TestBatchingMatchesUnbatched sends 2,000 concurrent pair requests with
// distinct inputs of 1..4 rows and sequence lengths 1..16 (three non-batch
// buckets, so three queues), and 500 tinycnn requests of 1..4 rows beside
// them, to copies of the models with batching on. Each answer must be
// exactly (bit for bit) what the same model with batching off answers for
// the same input; the batcher's counters and the row metrics must account
// for every request and row exactly once.
func TestBatchingMatchesUnbatched(t *testing.T) {
	const (
		pairN = 2000
		cnnN  = 500
	)
	r := newRepo(t)
	pairCfg := "buckets:\n  batch: [1, 2, 4, 8, 16, 32]\n  seq: [4, 8, 16]\nbatching:\n  enabled: %v\n  max_queue_size: 4096\n  max_queue_delay: 5ms\n"
	cnnCfg := "buckets:\n  batch: [1, 2, 4, 8, 16]\nbatching:\n  enabled: %v\n  max_queue_size: 4096\n  max_queue_delay: 5ms\n"
	for _, on := range []bool{true, false} {
		suffix := map[bool]string{true: "_batched", false: "_unbatched"}[on]
		r.add("pair"+suffix, 1, pairModel)
		r.config("pair"+suffix, fmt.Sprintf(pairCfg, on))
		r.add("tinycnn"+suffix, 1, tinyCNN)
		r.config("tinycnn"+suffix, fmt.Sprintf(cnnCfg, on))
	}
	m, _ := start(t, r, nil)
	if _, ok, _ := m.BatchStats("pair_unbatched", 1); ok {
		t.Fatal("pair_unbatched batches")
	}

	type job struct {
		model string
		req   *InferRequest
		rows  int64
		want  *InferResponse
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var jobs []*job
	wantRows := map[string]int64{}
	for i := range pairN + cnnN {
		rowsN := int64(1 + i%4)
		j := &job{rows: rowsN}
		if i < pairN {
			seq := int64(1 + rng.IntN(16))
			j.model, j.req = "pair", &InferRequest{ID: fmt.Sprint(i), Inputs: pairInputs(rng, rowsN, seq)}
		} else {
			j.model, j.req = "tinycnn", &InferRequest{ID: fmt.Sprint(i), Inputs: imageInputs(rng, rowsN)}
		}
		wantRows[j.model] += rowsN
		jobs = append(jobs, j)
	}

	// References: the same inputs, one by one, with batching off.
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := m.Infer(context.Background(), j.model+"_unbatched", 0, j.req)
			if err != nil {
				t.Errorf("unbatched %s request %s: %v", j.model, j.req.ID, err)
				return
			}
			j.want = resp
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// All at once, with batching on.
	gate := make(chan struct{})
	got := make([]*InferResponse, len(jobs))
	for i, j := range jobs {
		wg.Go(func() {
			<-gate
			resp, err := m.Infer(context.Background(), j.model+"_batched", 0, j.req)
			if err != nil {
				t.Errorf("batched %s request %s (%d rows): %v", j.model, j.req.ID, j.rows, err)
				return
			}
			got[i] = resp
		})
	}
	close(gate)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// XLA CPU tiles convolutions and matmuls by the batch size, so a row's
	// result may differ in its last bits between two buckets' executables;
	// in the same bucket it must be bit-identical, whatever its slot and its
	// neighbours. The pair model (elementwise ops and a reduction over seq)
	// is bit-identical in every bucket.
	const crossBucketTol = 1e-6
	mismatches, crossBucket := 0, 0
	for i, j := range jobs {
		resp := got[i]
		if resp.ID != j.req.ID {
			t.Errorf("request %s answered with ID %q", j.req.ID, resp.ID)
		}
		if len(resp.Outputs) != len(j.want.Outputs) {
			t.Fatalf("request %s: %d outputs, want %d", j.req.ID, len(resp.Outputs), len(j.want.Outputs))
		}
		for k, o := range resp.Outputs {
			w := j.want.Outputs[k]
			what := fmt.Sprintf("%s request %s output %s (bucket %s, unbatched %s)", j.model, j.req.ID, o.Name, resp.Bucket, j.want.Bucket)
			switch {
			case o.Name != w.Name:
				t.Fatalf("%s: name %q, want %q", what, o.Name, w.Name)
			case bytes.Equal(o.Tensor.Data, w.Tensor.Data) && o.Tensor.String() == w.Tensor.String():
			case j.model == "tinycnn" && resp.Bucket != j.want.Bucket:
				crossBucket++
				assertClose(t, what, o.Tensor, w.Tensor, crossBucketTol)
			default:
				mismatches++
				if mismatches <= 5 {
					assertClose(t, what, o.Tensor, w.Tensor, 0)
					t.Errorf("%s differs from the unbatched run", what)
				}
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d outputs differ from the unbatched runs", mismatches)
	}
	t.Logf("tinycnn: %d outputs ran in another bucket than unbatched and are not bit-identical; all within %g", crossBucket, crossBucketTol)

	for model, n := range map[string]int{"pair_batched": pairN, "tinycnn_batched": cnnN} {
		// A batch counts as completed just after its requests got results.
		eventually(t, model+"'s batches to finish", func() bool { return batchStats(t, m, model).InFlight == 0 })
		st := batchStats(t, m, model)
		base := strings.TrimSuffix(model, "_batched")
		if st.Submitted != uint64(n) || st.Completed != uint64(n) || st.Failed+st.Expired+st.Cancelled+st.Rejected+st.Dropped+st.Invalid != 0 {
			t.Errorf("%s: stats %+v, want %d submitted and completed, nothing else", model, st, n)
		}
		if int64(st.RealRows.Sum) != wantRows[base] {
			t.Errorf("%s: batches ran %v real rows, the requests had %d", model, st.RealRows.Sum, wantRows[base])
		}
		if st.Batches >= uint64(n) {
			t.Errorf("%s: %d batches for %d requests: nothing was batched", model, st.Batches, n)
		}
		series := fmt.Sprintf(`{kind="real",model=%q,version="1"}`, model)
		if c, s := metric(t, m, "xserve_batch_rows_count"+series), metric(t, m, "xserve_batch_rows_sum"+series); c != float64(st.Batches) || int64(s) != wantRows[base] {
			t.Errorf("%s: xserve_batch_rows real count %v sum %v, want %d and %d", model, c, s, st.Batches, wantRows[base])
		}
		if v := metric(t, m, fmt.Sprintf(`xserve_requests_total{model=%q,outcome="success",version="1"}`, model)); v != float64(n) {
			t.Errorf("%s: %v successful requests counted, want %d", model, v, n)
		}
		t.Logf("%s: %d requests, %d rows in %d batches (%.1f rows per batch, padded to %.1f)", model, n, wantRows[base],
			st.Batches, st.RealRows.Mean(), st.PaddedRows.Mean())
	}
	if st := batchStats(t, m, "pair_batched"); len(st.QueueDelay.Counts) == 0 {
		t.Error("no queue delay histogram")
	}
	if st, _, _ := m.BatchStats("pair_batched", 1); len(st.Keys) != 3 {
		t.Errorf("pair_batched has queues %v, want one per seq bucket", keysOf(st.Keys))
	}
}

func keysOf[V any](m map[string]V) []string { return sortedKeys(m) }

// TestBatchingDelayBound: a lone request on an idle queue is dispatched at
// once (adaptive delay); a lone request that arrives while a batch executes
// waits for company max_queue_delay (unless the learned batch size limit is
// 1, which it fills) before it runs on the second executor. Neither is held
// longer than max_queue_delay plus one execution.
func TestBatchingDelayBound(t *testing.T) {
	const delay = 300 * time.Millisecond
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [8]\nwarmup: eager\nbatching:\n  max_queue_delay: 300ms\n")
	g := newBatchGate(0) // holds nothing yet
	m := gated(t, r, g)
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()

	// One execution, unbatched, for the bound.
	start := time.Now()
	infer(t, m, "pair", 0, pairInputs(rng, 2, 8))
	exec := time.Since(start)

	// Idle: dispatched at once.
	res := receiveResult(t, inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)}))
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.resp.QueueTime >= delay || res.took >= delay+exec+2*time.Second {
		t.Errorf("lone request on an idle queue: queued %v, took %v; want queued < max_queue_delay %v", res.resp.QueueTime, res.took, delay)
	}

	// Busy: the first batch is held; a lone request waits for company at
	// most max_queue_delay, then runs beside it.
	g2 := newBatchGate(1)
	m.batchHook = g2.hook // no batch is running: the next goroutines see it
	defer g2.release()
	held := inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)})
	for range 2 {
		g.waitStarted(t) // drain the earlier batches' reports
	}
	g2.waitStarted(t)
	// The learned batch size limit cannot change while the held batch
	// executes. Should it be 1 (the model runs one row as cheaply per row as
	// two), a lone request is a full batch and leaves at once.
	limit := metric(t, m, `xserve_batch_size_limit{model="pair",queue="seq=8",version="1"}`)
	res = receiveResult(t, inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)}))
	if res.err != nil {
		t.Fatal(res.err)
	}
	switch q := res.resp.QueueTime; {
	case limit == 1 && q >= delay:
		t.Errorf("lone request beside a running batch, batch size limit 1, queued %v, want at once", q)
	case limit > 1 && (q < delay-5*time.Millisecond || q > delay+time.Second):
		t.Errorf("lone request beside a running batch queued %v, want max_queue_delay %v (+ scheduling)", q, delay)
	}
	if res.took > delay+exec+2*time.Second {
		t.Errorf("lone request beside a running batch took %v, want at most max_queue_delay %v + one execution %v (+ 2s slack)", res.took, delay, exec)
	}
	g2.release()
	if r := receiveResult(t, held); r.err != nil {
		t.Fatal(r.err)
	}
	if v := metric(t, m, `xserve_request_duration_seconds_count{model="pair",phase="queue",version="1"}`); v != 4 {
		t.Errorf("queue phase observed %v times, want 4", v)
	}
}

// TestBatchingSizeBound: under load, batches never exceed max_batch_size
// (checked from the batch row metrics), a request above it is refused, and
// one above every bucket gets ErrNoBucket.
func TestBatchingSizeBound(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [8]\nbatching:\n  max_batch_size: 4\n  max_queue_delay: 20ms\n")
	m, _ := start(t, r, nil)
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 300
	reqs := make([]*InferRequest, n)
	for i := range reqs {
		reqs[i] = &InferRequest{Inputs: pairInputs(rng, int64(1+i%3), 8)}
	}
	var wg sync.WaitGroup
	for _, req := range reqs {
		wg.Go(func() {
			if _, err := m.Infer(context.Background(), "pair", 0, req); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, kind := range []string{"real", "padded"} {
		series := fmt.Sprintf(`{kind=%q,model="pair",version="1"}`, kind)
		count := metric(t, m, "xserve_batch_rows_count"+series)
		le4 := metric(t, m, `xserve_batch_rows_bucket{kind="`+kind+`",model="pair",version="1",le="4"}`)
		if count == 0 || le4 != count {
			t.Errorf("%s rows: %v of %v batches have <= 4 rows, want all (max_batch_size 4)", kind, le4, count)
		}
		if count >= n {
			t.Errorf("%v batches for %d requests: nothing was batched", count, n)
		}
	}

	_, err := m.Infer(context.Background(), "pair", 0, &InferRequest{Inputs: pairInputs(rng, 5, 8)})
	if !errors.Is(err, ErrInvalidInput) || !errors.Is(err, batching.ErrTooLarge) || !strings.Contains(err.Error(), "5 rows exceed the maximum batch size 4") {
		t.Errorf("5 rows with max_batch_size 4: %v", err)
	}
	_, err = m.Infer(context.Background(), "pair", 0, &InferRequest{Inputs: pairInputs(rng, 9, 8)})
	if !errors.Is(err, ErrNoBucket) {
		t.Errorf("9 rows with buckets up to 8: %v", err)
	}
}

// TestBatchingMaxBatchSizeWithoutBatchBuckets: with no batch buckets in
// config.yaml the default buckets apply; max_batch_size defaults to their
// largest, and an explicit max_batch_size (even 1) is honoured.
func TestBatchingMaxBatchSizeWithoutBatchBuckets(t *testing.T) {
	for _, tt := range []struct {
		name, config string
		want         int
	}{
		{"default", "", int(slices.Max(defaultBuckets()))},
		{"explicit 1", "batching:\n  max_batch_size: 1\n", 1},
		{"explicit 3", "batching:\n  max_batch_size: 3\n", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRepo(t)
			r.add("tinycnn", 1, tinyCNN)
			if tt.config != "" {
				r.config("tinycnn", tt.config)
			}
			m, _ := start(t, r, nil)
			if _, ok, err := m.BatchStats("tinycnn", 1); err != nil || !ok {
				t.Fatalf("tinycnn does not batch: ok=%v err=%v", ok, err)
			}
			if got := metric(t, m, `xserve_batch_size_limit{model="tinycnn",queue="all",version="1"}`); got != float64(tt.want) {
				t.Errorf("batch size limit %v, want %d", got, tt.want)
			}
			if tt.want == int(slices.Max(defaultBuckets())) {
				return // more rows have no bucket at all
			}
			rng := rand.New(rand.NewPCG(7, 8))
			_, err := m.Infer(context.Background(), "tinycnn", 0, &InferRequest{Inputs: imageInputs(rng, int64(tt.want)+1)})
			if !errors.Is(err, batching.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("exceed the maximum batch size %d", tt.want)) {
				t.Errorf("%d rows: %v, want ErrTooLarge", tt.want+1, err)
			}
		})
	}
}

// TestBatchingQueueFull: with both executors held, a full queue answers at
// once with ErrOverloaded carrying the batcher's *QueueFullError (its
// RetryAfter becomes HTTP's Retry-After), and the queued requests still run
// once the executors are free. Priorities pass through to the batcher.
func TestBatchingQueueFull(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [8]\nbatching:\n  max_queue_size: 3\n  max_queue_delay: 10s\n  priority_levels: 2\n")
	g := newBatchGate(-1)
	m := gated(t, r, g)
	rng := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()

	first := inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)})
	g.waitStarted(t)
	var queued []<-chan result
	for i := range 3 {
		queued = append(queued, inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8), Priority: i % 2}))
	}
	eventually(t, "3 requests queued", func() bool { return batchStats(t, m, "pair").Queued == 3 })
	if v := metric(t, m, `xserve_queue_depth{model="pair",version="1"}`); v != 3 {
		t.Errorf("xserve_queue_depth = %v, want 3", v)
	}

	start := time.Now()
	_, err := m.Infer(ctx, "pair", 0, &InferRequest{Inputs: pairInputs(rng, 1, 8)})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a full queue answered after %v, want at once", took)
	}
	var qf *batching.QueueFullError
	if !errors.Is(err, ErrOverloaded) || !errors.As(err, &qf) {
		t.Fatalf("full queue: %v, want ErrOverloaded wrapping a *batching.QueueFullError", err)
	}
	if qf.Queued != 3 || qf.RetryAfter <= 0 || qf.Key != "pair/1/seq=8" {
		t.Errorf("QueueFullError %+v, want 3 queued under key pair/1/seq=8 and a positive RetryAfter", qf)
	}
	if v := metric(t, m, `xserve_queue_rejected_total{model="pair",reason="queue_full",version="1"}`); v != 1 {
		t.Errorf("queue_full rejections counted: %v, want 1", v)
	}
	_, err = m.Infer(ctx, "pair", 0, &InferRequest{Inputs: pairInputs(rng, 1, 8), Priority: 2})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "priority = 2, want 0 (highest) to 1") {
		t.Errorf("priority 2 of 2 levels: %v", err)
	}

	g.release()
	for _, ch := range append(queued, first) {
		if r := receiveResult(t, ch); r.err != nil {
			t.Errorf("queued request: %v", r.err)
		}
	}
	// A batch counts as completed just after its requests got their results.
	eventually(t, "4 requests completed", func() bool { return batchStats(t, m, "pair").Completed == 4 })
	if st := batchStats(t, m, "pair"); st.Rejected != 1 {
		t.Errorf("stats %+v, want 1 rejected", st)
	}
}

// TestBatchingDeadlineAndCancel: requests whose deadline passes (config
// timeout or the caller's deadline) or whose caller goes away while they
// are queued leave the queue and never run.
func TestBatchingDeadlineAndCancel(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [8]\nbatching:\n  max_queue_delay: 10s\n  timeout: 200ms\n")
	g := newBatchGate(-1)
	m := gated(t, r, g)
	rng := rand.New(rand.NewPCG(9, 10))

	// The first request's batch is held; its own deadline replaces the
	// config timeout (which bounds the whole request, execution included).
	fctx, fcancel := context.WithTimeout(context.Background(), time.Minute)
	defer fcancel()
	first := inferAsync(fctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)})
	g.waitStarted(t)

	byTimeout := inferAsync(context.Background(), m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)})
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	byDeadline := inferAsync(dctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 2, 8)})
	cctx, cancel := context.WithCancel(context.Background())
	byCancel := inferAsync(cctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 3, 8)})
	eventually(t, "3 requests queued", func() bool { return batchStats(t, m, "pair").Queued == 3 })
	cancel()

	for name, ch := range map[string]<-chan result{"config timeout": byTimeout, "deadline": byDeadline} {
		res := receiveResult(t, ch)
		if !errors.Is(res.err, context.DeadlineExceeded) || !errors.Is(res.err, batching.ErrExpired) {
			t.Errorf("%s: %v, want ErrExpired and context.DeadlineExceeded", name, res.err)
		}
	}
	if res := receiveResult(t, byCancel); !errors.Is(res.err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", res.err)
	}
	g.release()
	if res := receiveResult(t, first); res.err != nil {
		t.Errorf("the executing request: %v", res.err)
	}
	eventually(t, "the batch to finish", func() bool { return batchStats(t, m, "pair").InFlight == 0 })
	st := batchStats(t, m, "pair")
	if st.Expired != 2 || st.Cancelled != 1 || st.Completed != 1 || st.Batches != 1 || st.RealRows.Sum != 1 {
		t.Errorf("stats %+v, want 2 expired, 1 cancelled, and 1 batch of 1 row completed", st)
	}
	for reason, want := range map[string]float64{"expired": 2, "cancelled": 1, "queue_full": 0} {
		if v := metric(t, m, fmt.Sprintf(`xserve_queue_rejected_total{model="pair",reason=%q,version="1"}`, reason)); v != want {
			t.Errorf("xserve_queue_rejected_total reason %s = %v, want %v", reason, v, want)
		}
	}
	if v := metric(t, m, `xserve_requests_total{model="pair",outcome="failure",version="1"}`); v != 3 {
		t.Errorf("failed requests counted: %v, want 3", v)
	}
}

// TestBatchingShutdownDrainsQueue: Shutdown refuses new requests at once,
// runs every queued request (without waiting for max_queue_delay) and
// returns once they are answered; no goroutine is left.
func TestBatchingShutdownDrainsQueue(t *testing.T) {
	before := runtime.NumGoroutine()
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8, 16]\n  seq: [8]\nbatching:\n  max_queue_delay: 10s\n")
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2, 4, 8]\nbatching:\n  max_queue_delay: 10s\n")
	g := newBatchGate(1)
	m := gated(t, r, g)
	v := versionOf(m, "pair", 1)
	rng := rand.New(rand.NewPCG(11, 12))
	ctx := context.Background()

	type sent struct {
		in map[string]*tensor.Tensor
		ch <-chan result
	}
	firstIn := pairInputs(rng, 1, 8)
	reqs := []sent{{firstIn, inferAsync(ctx, m, "pair", &InferRequest{Inputs: firstIn})}}
	g.waitStarted(t)
	for i := range 5 {
		in := pairInputs(rng, int64(1+i%3), int64(3+i))
		reqs = append(reqs, sent{in, inferAsync(ctx, m, "pair", &InferRequest{Inputs: in})})
	}
	eventually(t, "5 requests queued", func() bool { return batchStats(t, m, "pair").Queued == 5 })

	done := make(chan error, 1)
	go func() { done <- m.Shutdown(ctx) }()
	early := 0 // probes that came before Shutdown closed the Manager, and ran
	eventually(t, "new requests to be refused", func() bool {
		_, err := m.Infer(ctx, "pair", 0, &InferRequest{Inputs: pairInputs(rng, 1, 8)})
		if err == nil {
			early++
		}
		return errors.Is(err, ErrClosed)
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a batch executing", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.release()
	for i, s := range reqs {
		res := receiveResult(t, s.ch)
		if res.err != nil {
			t.Errorf("request %d: %v", i, res.err)
			continue
		}
		// sum = x + 0.5*y, exactly in float32.
		x, y, sum := s.in["x"].Float64s(), s.in["y"].Float64s(), res.resp.Outputs[0].Tensor.Float64s()
		for k := range x {
			if want := float64(float32(x[k]) + float32(0.5*float32(y[k]))); sum[k] != want {
				t.Errorf("request %d: sum[%d] = %v, want %v", i, k, sum[k], want)
				break
			}
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	// The version is unloaded now; its batcher keeps its counters.
	if st := v.batcher.Stats().Total; st.Completed != uint64(6+early) || st.Dropped != 0 || st.Failed != 0 {
		t.Errorf("stats %+v, want %d completed, none dropped or failed", st, 6+early)
	}
	eventually(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

// TestBatchingShutdownTimeout: when Shutdown's context ends while requests
// are still queued behind held batches, they fail with ErrClosed and
// Shutdown reports the timeout.
func TestBatchingShutdownTimeout(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [8]\nbatching:\n  max_batch_size: 1\n")
	g := newBatchGate(-1)
	m := gated(t, r, g)
	rng := rand.New(rand.NewPCG(13, 14))
	ctx := context.Background()

	var held []<-chan result
	for range concurrentBatches {
		held = append(held, inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)}))
		g.waitStarted(t)
	}
	queued := inferAsync(ctx, m, "pair", &InferRequest{Inputs: pairInputs(rng, 1, 8)})
	eventually(t, "1 request queued", func() bool { return batchStats(t, m, "pair").Queued == 1 })

	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := m.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with requests held: %v, want context.DeadlineExceeded", err)
	}
	if res := receiveResult(t, queued); !errors.Is(res.err, ErrClosed) || !errors.Is(res.err, batching.ErrClosed) {
		t.Errorf("queued request at the shutdown timeout: %v, want ErrClosed", res.err)
	}
	g.release()
	for _, ch := range held {
		receiveResult(t, ch) // cancelled or finished; either way answered
	}
}

// BenchmarkLoneRequest measures what batching costs a request that finds
// its queue idle (concurrency 1), on the tiniest model (y = x + 1 over
// float32[1,16]), where that cost is the largest share:
//
//	go test -run '^$' -bench LoneRequest -benchtime 5000x -count 3 ./serving
func BenchmarkLoneRequest(b *testing.B) {
	r := newRepo(b)
	for model, enabled := range map[string]bool{"batching_on": true, "batching_off": false} {
		r.add(model, 1, "../testdata/tiny/addone.onnx")
		r.config(model, fmt.Sprintf("buckets:\n  batch: [1, 2, 4]\nwarmup: eager\nbatching:\n  enabled: %v\n", enabled))
	}
	m, _ := start(b, r, nil)
	in := map[string]*tensor.Tensor{"x": tensor.New(tensor.Float32, 1, 16)}
	for _, model := range []string{"batching_off", "batching_on"} {
		b.Run(model, func(b *testing.B) {
			for b.Loop() {
				if _, err := m.Infer(context.Background(), model, 0, &InferRequest{Inputs: in}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBatchSizerLearnsCoreTime: the batch sizer learns a bucket's cost
// from the core time of its executions (the CPU time of the thread that ran
// each one), not from their wall time: lone requests (each a batch of one
// row, run at once) leave their bucket a cost above zero and below the
// execution time the responses report, which also counts the Go side of
// the execution and any time its thread waited for a core. (Executions run
// whole here: a split one's shards run on two threads at once, and their
// core times added up may exceed its wall time.)
func TestBatchSizerLearnsCoreTime(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2]\nwarmup: eager\nbatching:\n  enabled: true\n")
	m, _ := start(t, r, func(o *Options) { o.SplitBatches = SplitOff })
	req := &InferRequest{Inputs: map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}}
	for i := range 8 {
		resp, err := m.Infer(context.Background(), "tinycnn", 0, req)
		if err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		v, err := m.lookupLocked("tinycnn", 0)
		m.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		sz := v.sizer(v.queuePrefix())
		sz.mu.Lock()
		var cost time.Duration // the batch's: its bucket's cost per row times its rows
		for k, c := range sz.cost {
			cost += time.Duration(c * float64(sz.buckets[k]) * float64(time.Second))
		}
		clear(sz.cost) // the next request's alone, not an average
		sz.mu.Unlock()
		if i == 0 {
			continue // the executable's first run takes the portable path: wall time
		}
		if cost <= 0 || cost >= resp.ComputeTime {
			t.Fatalf("request %d: the sizer learned %v for the batch, the execution took %v: want 0 < core time < execution time", i, cost, resp.ComputeTime)
		}
	}
}

// TestRunTimesCost: a batch costs its core time, or its wall time where
// the core time was not measured.
func TestRunTimesCost(t *testing.T) {
	for _, tc := range []struct {
		t    runTimes
		want time.Duration
	}{
		{runTimes{compute: 5 * time.Millisecond, core: 2 * time.Millisecond}, 2 * time.Millisecond},
		{runTimes{compute: 5 * time.Millisecond}, 5 * time.Millisecond},
	} {
		if got := tc.t.cost(); got != tc.want {
			t.Errorf("%+v: cost %v, want %v", tc.t, got, tc.want)
		}
	}
}
