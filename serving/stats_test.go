package serving

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestStatisticsAndConfig runs requests of 1 and 3 rows on a batching model
// and checks the counters Triton's statistics extension reports, and the
// configuration its model configuration extension reports.
func TestStatisticsAndConfig(t *testing.T) {
	r := newRepo(t)
	r.add("pair", 1, pairModel)
	r.config("pair", "buckets:\n  batch: [1, 2, 4, 8]\n  seq: [8]\nbatching:\n  max_batch_size: 4\n  max_queue_delay: 0s\n")
	m, _ := start(t, r, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	infer(t, m, "pair", 0, pairInputs(rng, 1, 8))
	infer(t, m, "pair", 0, pairInputs(rng, 3, 8))
	bad := pairInputs(rng, 1, 8)
	delete(bad, "y")
	if _, err := m.Infer(t.Context(), "pair", 0, &InferRequest{Inputs: bad}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("a request without input y: %v", err)
	}
	sts, err := m.Statistics("pair", 0)
	if err != nil || len(sts) != 1 {
		t.Fatalf("Statistics: %v, %v", sts, err)
	}
	st := sts[0]
	if st.Name != "pair" || st.Version != 1 || st.Success.Count != 2 || st.Fail.Count != 1 || st.InferenceCount != 4 || st.Queue.Count != 2 || st.Compute.Count != 2 || st.Compute.Total <= 0 || st.LastInference.IsZero() {
		t.Errorf("statistics %+v", st)
	}
	var rows, execs uint64
	for _, b := range st.Batches {
		rows += uint64(b.BatchSize) * b.Compute.Count
		execs += b.Compute.Count
	}
	if rows != 4 || execs != st.ExecutionCount || execs == 0 {
		t.Errorf("batch statistics %+v: %d rows in %d executions, want 4 rows in ExecutionCount %d", st.Batches, rows, execs, st.ExecutionCount)
	}
	if all, err := m.Statistics("", 0); err != nil || len(all) != 1 {
		t.Errorf("Statistics of every model: %v, %v", all, err)
	}
	if _, err := m.Statistics("nope", 0); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("Statistics of an unknown model: %v", err)
	}
	if _, err := m.Statistics("pair", 7); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("Statistics of an unknown version: %v", err)
	}
	c, err := m.Config("pair", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxBatchSize != 4 || !c.DynamicBatching || c.Batching.MaxBatchSize != 4 || len(c.Inputs) != 2 {
		t.Errorf("config %+v", c)
	}
}
