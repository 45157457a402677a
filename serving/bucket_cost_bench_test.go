package serving

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/tensor"
)

// BenchmarkBatchBucketCost measures what one row costs in each batch bucket:
// for every "<name>_unbatched" model of the repository $XSERVE_BATCH_MODELS
// (written by bench/make_batching_models.py, batching off), it runs a full
// batch of zeros in each batch bucket, one request at a time, and reports
// the median time per row in milliseconds (ms/row). This is the curve the
// batch size learner (sizer.go) follows at run time:
//
//	.venv/bin/python bench/make_batching_models.py --out .cache/bench-batching
//	XSERVE_BATCH_MODELS=$PWD/.cache/bench-batching/models \
//	  go test -run '^$' -bench BatchBucketCost -benchtime 10x ./serving
func BenchmarkBatchBucketCost(b *testing.B) {
	dir := os.Getenv("XSERVE_BATCH_MODELS")
	if dir == "" {
		b.Fatal("XSERVE_BATCH_MODELS is not set: see the benchmark's comment")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	r := &testRepo{t: b, root: b.TempDir()}
	var models []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), "_unbatched"); ok && e.IsDir() {
			r.add(name, 1, filepath.Join(dir, e.Name(), "1", "model.onnx"))
			cfg, err := os.ReadFile(filepath.Join(dir, e.Name(), "config.yaml"))
			if err != nil {
				b.Fatal(err)
			}
			r.config(name, string(cfg))
			models = append(models, name)
		}
	}
	if len(models) == 0 {
		b.Fatalf("no *_unbatched model in %s", dir)
	}
	m, _ := start(b, r, nil)
	for _, name := range models {
		md, err := m.Metadata(name, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, rows := range md.Buckets["batch"] {
			in := map[string]*tensor.Tensor{}
			for _, spec := range md.Inputs {
				shape := slices.Clone(spec.Shape)
				for d, dim := range spec.Dims {
					if sizes, ok := md.Buckets[dim]; ok {
						shape[d] = sizes[len(sizes)-1]
					}
				}
				shape[0] = rows
				in[spec.Name] = tensor.New(spec.DType, shape...)
			}
			b.Run(fmt.Sprintf("%s/batch=%d", name, rows), func(b *testing.B) {
				var times []time.Duration
				for b.Loop() {
					resp, err := m.Infer(context.Background(), name, 0, &InferRequest{Inputs: in})
					if err != nil {
						b.Fatal(err)
					}
					times = append(times, resp.ComputeTime)
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2])/1e6/float64(rows), "ms/row")
			})
		}
	}
}
