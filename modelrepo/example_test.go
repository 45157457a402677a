package modelrepo_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/xserve/xserve/modelrepo"
)

func ExampleParseConfig() {
	cfg, err := modelrepo.ParseConfig("models/tinycnn/config.yaml", []byte(`
inputs:
  - name: image
    dtype: float32
    dims: [batch, 3, 32, 32]
buckets:
  batch: [1, 2, 4, 8]
warmup: eager
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Name, cfg.Inputs[0].Dims, cfg.Warmup, cfg.VersionPolicy)
	fmt.Println(cfg.Batching.MaxBatchSize, cfg.Batching.MaxQueueDelay, cfg.Batching.Timeout)

	_, err = modelrepo.ParseConfig("models/tinycnn/config.yaml", []byte(`
buckets:
  batch: [4, 2]
batching:
  max_delay: 1ms
`))
	fmt.Println(err)
	// Output:
	// tinycnn [batch,3,32,32] eager latest: 1
	// 8 2ms 30s
	// modelrepo: models/tinycnn/config.yaml: buckets.batch: sizes must be ascending and positive, got [4 2] (line 3)
	// modelrepo: models/tinycnn/config.yaml: batching.max_delay: unknown key (want one of enabled, max_batch_size, max_queue_delay, max_queue_size, timeout, priority_levels) (line 5)
}

func ExampleDiff() {
	root, err := os.MkdirTemp("", "models")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	write := func(path string) {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(p, []byte("model"), 0o644); err != nil {
			panic(err)
		}
	}

	write("resnet/1/model.onnx")
	repo, err := modelrepo.Open(root)
	if err != nil {
		panic(err)
	}
	before, _ := repo.Scan()

	write("resnet/2/model.onnx")
	write("bert/1/model.pt2")
	after, _ := repo.Scan()

	for _, c := range modelrepo.Diff(before, after) {
		fmt.Println(c)
	}
	m, _ := after.Model("resnet")
	for _, v := range m.Selected() {
		fmt.Println("serve", m.Name, v.Version, v.Format)
	}
	// Output:
	// model added: bert
	// version added: resnet 2
	// serve resnet 2 onnx
}
