package triton

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

func tinyConfig(maxBatch int64) *serving.ModelConfig {
	return &serving.ModelConfig{
		Metadata: serving.Metadata{
			Name: "m", Version: 2, Versions: []int64{1, 2}, Platform: "onnx",
			Inputs:  []serving.TensorSpec{{Name: "x", DType: tensor.Float32, Shape: []int64{-1, 3, -1}, Dims: []string{"batch", "3", "seq"}}},
			Outputs: []serving.TensorSpec{{Name: "y", DType: tensor.Int64, Shape: []int64{-1}, Dims: []string{"batch"}}},
			Buckets: map[string][]int64{"batch": {1, 4, 16}, "seq": {8, 32}},
		},
		MaxBatchSize:    maxBatch,
		DynamicBatching: maxBatch > 0,
		Batching:        modelrepo.BatchingConfig{MaxQueueDelay: 2 * time.Millisecond, MaxQueueSize: 64, Timeout: time.Second, PriorityLevels: 1},
	}
}

func TestConfigJSON(t *testing.T) {
	got := string(JSON(Config(tinyConfig(4))))
	for _, want := range []string{
		`"name":"m","platform":"onnx","backend":"xserve"`,
		`"version_policy":{"specific":{"versions":[1,2]}}`,
		`"max_batch_size":4`,
		`"input":[{"name":"x","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[3,-1]`,
		`"output":[{"name":"y","data_type":"TYPE_INT64","dims":[]`,
		`"dynamic_batching":{"preferred_batch_size":[1,4],"max_queue_delay_microseconds":2000`,
		`"default_queue_policy":{"timeout_action":"REJECT","default_timeout_microseconds":1000000,"allow_timeout_override":false,"max_queue_size":64}`,
		`"parameters":{"xserve.buckets.batch":{"string_value":"1,4,16"},"xserve.buckets.seq":{"string_value":"8,32"}}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("config JSON lacks %s:\n%s", want, got)
		}
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	unbatched := string(JSON(Config(tinyConfig(0))))
	if !strings.Contains(unbatched, `"max_batch_size":0`) || !strings.Contains(unbatched, `"dims":[-1,3,-1]`) || strings.Contains(unbatched, "dynamic_batching") {
		t.Errorf("a model without batching: %s", unbatched)
	}
}

func TestStatisticsJSON(t *testing.T) {
	last := time.UnixMilli(1700000000123)
	got := string(JSON(Statistics([]serving.Statistics{{
		Name: "m", Version: 1, LastInference: last, InferenceCount: 10, ExecutionCount: 3,
		Success: serving.Duration{Count: 4, Total: 4 * time.Millisecond}, Queue: serving.Duration{Count: 4, Total: 400},
		Compute: serving.Duration{Count: 4, Total: 2 * time.Millisecond},
		Batches: []serving.BatchStatistics{{BatchSize: 4, Compute: serving.Duration{Count: 2, Total: time.Millisecond}}},
	}})))
	for _, want := range []string{
		`"name":"m","version":"1","last_inference":1700000000123,"inference_count":10,"execution_count":3`,
		`"success":{"count":4,"ns":4000000}`,
		`"fail":{"count":0,"ns":0}`,
		`"queue":{"count":4,"ns":400}`,
		`"compute_input":{"count":4,"ns":0},"compute_infer":{"count":4,"ns":2000000},"compute_output":{"count":4,"ns":0}`,
		`"batch_stats":[{"batch_size":4,"compute_input":{"count":2,"ns":0},"compute_infer":{"count":2,"ns":1000000}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("statistics JSON lacks %s:\n%s", want, got)
		}
	}
	if empty := string(JSON(Statistics(nil))); empty != `{"model_stats":[]}` {
		t.Errorf("no statistics: %s", empty)
	}
}
