package serving

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// lazyRepo is a repository of the n tinycnn models of testdata/lazy, each
// with weights of its own, one bucket (batch 2, padded without a probe)
// compiled at load.
func lazyRepo(t *testing.T, n int) *testRepo {
	t.Helper()
	r := newRepo(t)
	for i := range n {
		name := fmt.Sprintf("m%02d", i)
		r.add(name, 1, "testdata/lazy/"+name+".onnx")
		r.config(name, "buckets:\n  batch: [2]\npad:\n  batch: true\nwarmup: eager\n")
	}
	return r
}

// lazyManager serves r with LoadLazy within budget bytes, on the compile
// cache in cache.
func lazyManager(t *testing.T, r *testRepo, budget int64, cache string) (*Manager, *logBuffer) {
	t.Helper()
	return start(t, r, func(o *Options) {
		o.LoadPolicy = LoadLazy
		o.MemoryBudget = MemoryBudget{Bytes: budget}
		o.CompileCacheDir = cache
	})
}

// checkLazyAnswer runs the example image through model and compares the
// answer with ONNX Runtime's for that model.
func checkLazyAnswer(t *testing.T, m *Manager, model string) {
	t.Helper()
	resp, err := m.Infer(context.Background(), model, 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}})
	if err != nil {
		t.Fatalf("Infer %s: %v", model, err)
	}
	if resp.ModelName != model {
		t.Fatalf("asked %s, answered by %s", model, resp.ModelName)
	}
	assertClose(t, model, resp.Outputs[0].Tensor, readNpy(t, "testdata/lazy/"+model+".probs.npy"), 1e-5)
}

// held lists the READY models.
func held(m *Manager) []string {
	var out []string
	for _, s := range m.Status() {
		if s.State == StateReady {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestLazyLoading: a repository of 20 models (tinycnn with weights of
// their own) on a Manager whose device memory budget holds 5 of them. None
// loads at start, and the server is ready; a round-robin request stream
// over the 20 is answered as ONNX Runtime answers each model, every request
// loading its model and evicting the least recently used one, never more
// than 5 held; /metrics counts the loads, evictions and load waits.
func TestLazyLoading(t *testing.T) {
	r := lazyRepo(t, 20)
	cache := sharedCache(t)
	// One model's share of the budget, as the Manager counts it.
	probe, _ := lazyManager(t, r, 0, cache)
	checkLazyAnswer(t, probe, "m00")
	one := metric(t, probe, `xserve_model_memory_bytes{model="m00"}`)
	if one <= 0 {
		t.Fatalf("xserve_model_memory_bytes of a loaded model is %v", one)
	}
	budget := int64(5.5 * one)

	m, logs := lazyManager(t, r, budget, cache)
	if !m.Ready() {
		t.Fatal("a lazy Manager is not ready before any request")
	}
	for _, s := range m.Status() {
		if s.State != StateUnavailable || !s.Unloaded || !strings.Contains(s.Reason, "loads on its next request") {
			t.Fatalf("before any request: %+v, want UNAVAILABLE, unloaded, loaded on demand", s)
		}
	}
	if got := metric(t, m, "xserve_models_loaded"); got != 0 {
		t.Fatalf("%v models loaded at start, want 0", got)
	}
	const rounds = 2
	for round := range rounds {
		for i := range 20 {
			checkLazyAnswer(t, m, fmt.Sprintf("m%02d", i))
			if h := held(m); len(h) > 5 {
				t.Fatalf("round %d, model %d: %d models held (%v), the budget holds 5", round, i, len(h), h)
			}
			if used := metric(t, m, `xserve_model_memory_used_bytes{device="0"}`); used > float64(budget) {
				t.Fatalf("round %d, model %d: %v bytes held, the budget is %d", round, i, used, budget)
			}
		}
	}
	text := metricsText(t, m)
	sum := func(name string) float64 {
		var s float64
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, name+"{") {
				var v float64
				fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
				s += v
			}
		}
		return s
	}
	// Round robin over 20 with room for 5: every request misses.
	if loads := sum("xserve_model_loads_total"); loads != 20*rounds {
		t.Errorf("xserve_model_loads_total sums to %v, want %d", loads, 20*rounds)
	}
	if ev := sum("xserve_model_evictions_total"); ev != 20*rounds-5 {
		t.Errorf("xserve_model_evictions_total sums to %v, want %d", ev, 20*rounds-5)
	}
	if waits := sum("xserve_model_load_wait_seconds_count"); waits != 20*rounds {
		t.Errorf("xserve_model_load_wait_seconds counts %v waits, want %d", waits, 20*rounds)
	}
	if got := metric(t, m, `xserve_model_memory_budget_bytes{device="0"}`); got != float64(budget) {
		t.Errorf("xserve_model_memory_budget_bytes %v, want %d", got, budget)
	}
	if l := logs.lines("evicting the least recently used model"); len(l) != 20*rounds-5 {
		t.Errorf("%d eviction log lines, want %d", len(l), 20*rounds-5)
	}
	if !m.Ready() {
		t.Error("the lazy Manager is not ready after the stream")
	}

}

// TestLazyLoadingLeastRecentlyUsed: the model evicted is the one used least
// recently, not the one loaded first; a model in use stays.
func TestLazyLoadingLeastRecentlyUsed(t *testing.T) {
	r := lazyRepo(t, 4)
	cache := sharedCache(t)
	probe, _ := lazyManager(t, r, 0, cache)
	checkLazyAnswer(t, probe, "m00")
	budget := int64(3.5 * metric(t, probe, `xserve_model_memory_bytes{model="m00"}`))
	m, _ := lazyManager(t, r, budget, cache)
	for _, name := range []string{"m00", "m01", "m02", "m00", "m03"} {
		checkLazyAnswer(t, m, name)
	}
	if h := strings.Join(held(m), ","); h != "m00,m02,m03" {
		t.Errorf("held %s after m00 m01 m02 m00 m03 with room for 3, want m00,m02,m03 (m01 the least recently used)", h)
	}
	if st, reason := state(m, "m01", 1); st != StateUnavailable || !strings.Contains(reason, "loads on its next request") {
		t.Errorf("evicted m01: %s %q", st, reason)
	}
	if got := metric(t, m, `xserve_model_evictions_total{model="m01"}`); got != 1 {
		t.Errorf("m01 evicted %v times, want 1", got)
	}
}

// TestLazyLoadingConcurrent: requests for 12 models from 8 goroutines at
// once, within room for 4, are all answered correctly.
func TestLazyLoadingConcurrent(t *testing.T) {
	r := lazyRepo(t, 12)
	cache := sharedCache(t)
	probe, _ := lazyManager(t, r, 0, cache)
	checkLazyAnswer(t, probe, "m00")
	one := metric(t, probe, `xserve_model_memory_bytes{model="m00"}`)
	m, _ := lazyManager(t, r, int64(4.5*one), cache)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 10 {
				checkLazyAnswer(t, m, fmt.Sprintf("m%02d", rng.IntN(12)))
			}
		})
	}
	wg.Wait()
	if h := held(m); len(h) > 4 {
		t.Errorf("%d models held, the budget holds 4", len(h))
	}
}

// TestLazyLoadingDeadline: a request whose deadline passes while its model
// loads gets ErrNotReady saying so; the load goes on for the next one. A
// model larger than the whole budget gets an error naming both sizes.
func TestLazyLoadingDeadline(t *testing.T) {
	r := lazyRepo(t, 2)
	m, _ := lazyManager(t, r, 0, "")
	// The input is read before the deadline starts, and the deadline is far
	// shorter than a load (a compile) but long enough that a loaded machine
	// still reaches the load wait before it passes.
	image := readNpy(t, tinyCNNImage)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := m.Infer(ctx, "m00", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"image": image}})
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for it to load") {
		t.Fatalf("request with a 20ms deadline: %v, want ErrNotReady after the deadline", err)
	}
	checkLazyAnswer(t, m, "m00")
	if got := metric(t, m, `xserve_model_loads_total{model="m00"}`); got != 1 {
		t.Errorf("m00 loaded %v times, want 1 (the load the first request started)", got)
	}

	small, _ := lazyManager(t, r, 100, "")
	_, err = small.Infer(context.Background(), "m01", 0, &InferRequest{Inputs: map[string]*tensor.Tensor{"image": readNpy(t, tinyCNNImage)}})
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "more than the whole budget of 100 bytes") {
		t.Errorf("model larger than the budget: %v", err)
	}
	// A model that is not in the repository is not found, not loaded.
	if _, err := m.Infer(context.Background(), "nope", 0, &InferRequest{}); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("unknown model: %v", err)
	}
}
