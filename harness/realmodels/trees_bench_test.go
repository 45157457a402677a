package realmodels

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/runner"
	"github.com/xserve/xserve/tensor"
)

// treeBenchModel is the 500-tree LightGBM classifier (20 features) that
// `make bench-trees` makes with python/realmodels/ml.py.
const treeBenchModel = "../../.cache/realmodels/cases/lightgbm_500.onnx-onnxmltools/model.onnx"

// BenchmarkTreeLayouts measures the two layouts of the tree ensemble's
// lowering (fxgraph.TreeLayoutWalk, fxgraph.TreeLayoutCompare) on the
// 500-tree LightGBM model at batch 1 and 1024, called alternately in one
// run (each reports the median of its calls), and ONNX Runtime on the same
// model and input (python/ort_bench.py, its default threads and one
// thread). Both layouts' outputs must be the same bits.
//
//	make bench-trees
func BenchmarkTreeLayouts(b *testing.B) {
	model := os.Getenv("XSERVE_TREE_MODEL")
	if model == "" {
		model = treeBenchModel
	}
	if _, err := os.Stat(model); err != nil {
		b.Fatalf("%v (run make bench-trees)", err)
	}
	r := newRunner(b)
	for _, batch := range []int64{1, 1024} {
		b.Run("batch"+strconv.FormatInt(batch, 10), func(b *testing.B) { benchTreeBatch(b, r, model, batch) })
	}
}

func benchTreeBatch(b *testing.B, r *runner.Runner, model string, batch int64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(batch), 1))
	vals := make([]float32, batch*20)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * 1.5)
	}
	x := tensor.FromFloat32s(vals, batch, 20)
	var runs []*runner.Compiled
	var outs [][]*tensor.Tensor
	for _, layout := range []string{fxgraph.TreeLayoutWalk, fxgraph.TreeLayoutCompare} {
		g, err := runner.Import(model)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range g.Nodes() {
			if n.Op == fxgraph.XserveTreeEnsemble {
				n.Kwargs["layout"] = layout
			}
		}
		m, err := r.Model(g)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		dims, err := m.Bind([]*tensor.Tensor{x})
		if err != nil {
			b.Fatal(err)
		}
		prog, err := m.Lower(dims)
		if err != nil {
			b.Fatal(err)
		}
		c, err := m.Compile(ctx, prog)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		out, err := c.Run(ctx, []*tensor.Tensor{x})
		if err != nil {
			b.Fatal(err)
		}
		runs, outs = append(runs, c), append(outs, out)
	}
	for i := range outs[0] {
		if !bytes.Equal(outs[0][i].Data, outs[1][i].Data) {
			b.Fatalf("output %d differs between the layouts", i)
		}
	}
	times := make([][]time.Duration, len(runs))
	b.ResetTimer()
	for range b.N {
		for k, c := range runs {
			start := time.Now()
			if _, err := c.Run(ctx, []*tensor.Tensor{x}); err != nil {
				b.Fatal(err)
			}
			times[k] = append(times[k], time.Since(start))
		}
	}
	b.StopTimer()
	walk, compare := treeMedianMs(times[0]), treeMedianMs(times[1])
	b.ReportMetric(walk, "walk-ms")
	b.ReportMetric(compare, "compare-ms")
	b.ReportMetric(compare/walk, "compare/walk")
	in := filepath.Join(b.TempDir(), "x.npy")
	if err := tensor.WriteNpyFile(in, x); err != nil {
		b.Fatal(err)
	}
	for _, threads := range []string{"0", "1"} {
		ort := treeORTMs(b, model, "input="+in, threads)
		name := "onnxruntime-ms"
		if threads == "1" {
			name = "onnxruntime-1thread-ms"
		}
		b.ReportMetric(ort, name)
		if threads == "0" {
			b.ReportMetric(min(walk, compare)/ort, "xla/onnxruntime")
		}
	}
}

func treeMedianMs(d []time.Duration) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Nanoseconds()) / 1e6
}

// treeORTMs times ONNX Runtime through python/ort_bench.py (the project
// venv's, or $XSERVE_PYTHON).
func treeORTMs(b *testing.B, model, input, threads string) float64 {
	py := os.Getenv("XSERVE_PYTHON")
	if py == "" {
		py = "../../.venv/bin/python"
	}
	out, err := exec.Command(py, "../../python/ort_bench.py", model, input, "--runs", "50", "--threads", threads).Output()
	if err != nil {
		b.Fatalf("ort_bench.py: %v (run make venv)", err)
	}
	var res struct {
		Median float64 `json:"median_ms"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("ort_bench.py printed %q: %v", out, err)
	}
	return res.Median
}
