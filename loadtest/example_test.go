package loadtest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/xserve/xserve/loadtest"
	"github.com/xserve/xserve/tensor"
)

// A closed-loop run of 20 requests at concurrency 2 against a stand-in for
// xserve's /v1/infer.
func ExampleRun() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"model":"tinycnn","outputs":{"probs":{"dtype":"float32","shape":[1,2],"data":[0.25,0.75]}}}`))
	}))
	defer srv.Close()

	target, err := loadtest.NewHTTPTarget(context.Background(), loadtest.HTTPOptions{
		URL:           srv.URL,
		Model:         "tinycnn",
		Protocol:      loadtest.ProtocolV1JSON,
		ExpectOutputs: map[string][]int64{"probs": {1, 2}},
		Conns:         2,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer target.Close()
	sum, err := loadtest.Run(context.Background(), loadtest.Options{
		Target:      target,
		Inputs:      &loadtest.Inputs{Random: []loadtest.RandomSpec{{Name: "image", DType: tensor.Float32, Shape: []int64{1, 3, 32, 32}}}},
		Concurrency: 2,
		MaxRequests: 20,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d requests, %d ok, %d failed\n", sum.Requests, sum.Successes, sum.Failures)
	fmt.Println(sum.Latency.P50 <= sum.Latency.P99)
	// Output:
	// 20 requests, 20 ok, 0 failed
	// true
}
