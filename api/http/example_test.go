package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// doubler stands in for a *serving.Manager in this example: one model,
// "double", whose output y is twice its float32 input x.
type doubler struct{}

func (doubler) Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	if model != "double" {
		return nil, fmt.Errorf("%w: no model %q", serving.ErrModelNotFound, model)
	}
	x, ok := req.Inputs["x"]
	if !ok || x.DType != tensor.Float32 {
		return nil, fmt.Errorf("%w: want a float32 input x", serving.ErrInvalidInput)
	}
	y := x.Clone()
	for i := range y.NumElements() {
		y.SetFloat64(i, 2*x.Float64At(i))
	}
	return &serving.InferResponse{ID: req.ID, ModelName: model, ModelVersion: 1, Outputs: []serving.NamedTensor{{Name: "y", Tensor: y}}}, nil
}

func (doubler) Metadata(model string, version int64) (*serving.Metadata, error) {
	return nil, serving.ErrModelNotFound
}
func (doubler) Status() []serving.ModelStatus                  { return nil }
func (doubler) Readiness() serving.Readiness                   { return serving.Readiness{Ready: true} }
func (doubler) ModelReady(model string, version int64) bool    { return model == "double" }
func (doubler) Load(ctx context.Context, model string) error   { return nil }
func (doubler) Unload(ctx context.Context, model string) error { return nil }
func (doubler) WriteMetrics(w io.Writer) error                 { return nil }
func (doubler) Config(model string, version int64) (*serving.ModelConfig, error) {
	return nil, serving.ErrModelNotFound
}
func (doubler) Statistics(model string, version int64) ([]serving.Statistics, error) {
	return nil, nil
}

func Example() {
	srv, err := httpapi.New(doubler{}, httpapi.Options{
		MaxBodyBytes: 1 << 20,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	url := "http://" + ln.Addr().String()

	post := func(path, body string) {
		res, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		fmt.Println(res.StatusCode, string(b))
	}
	// xserve's protocol, with nested data.
	post("/v1/infer", `{"model": "double", "inputs": {"x": {"dtype": "float32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}}}`)
	// The Open Inference Protocol.
	post("/v2/models/double/infer", `{"id": "7", "inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [0.5, 1, 1.5]}]}`)
	// A clear error.
	post("/v1/infer", `{"model": "double", "inputs": {"x": {"dtype": "float32", "shape": [2, 2], "data": [[1, 2], [3]]}}}`)
	// Output:
	// 200 {"model":"double","version":"1","id":"","outputs":{"y":{"dtype":"float32","shape":[2,2],"data":[2,4,6,8]}}}
	// 200 {"model_name":"double","model_version":"1","id":"7","outputs":[{"name":"y","datatype":"FP32","shape":[3],"data":[1,2,3]}]}
	// 400 {"error":"bad request: input \"x\": data: at [1]: 1 element; dim 1 of shape [2 2] is 2"}
}
