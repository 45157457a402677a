package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// doubler is a Backend double for protocol tests: model "double" returns
// its float input x doubled as y; every other model is not found.
type doubler struct{}

func (doubler) Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	if model != "double" {
		return nil, fmt.Errorf("%w: no model %q", serving.ErrModelNotFound, model)
	}
	x, ok := req.Inputs["x"]
	if !ok {
		return nil, fmt.Errorf("%w: want an input x", serving.ErrInvalidInput)
	}
	y := x.Clone()
	for i := range y.NumElements() {
		y.SetFloat64(i, 2*x.Float64At(i))
	}
	return &serving.InferResponse{ID: req.ID, ModelName: model, ModelVersion: 1, Outputs: []serving.NamedTensor{{Name: "y", Tensor: y}}}, nil
}

func (doubler) Metadata(model string, version int64) (*serving.Metadata, error) {
	if model != "double" {
		return nil, fmt.Errorf("%w: no model %q", serving.ErrModelNotFound, model)
	}
	return &serving.Metadata{Name: model, Version: 1, Platform: "onnx",
		Inputs:  []serving.TensorSpec{{Name: "x", DType: tensor.Float32, Shape: []int64{-1}, Dims: []string{"batch"}}},
		Outputs: []serving.TensorSpec{{Name: "y", DType: tensor.Float32, Shape: []int64{-1}, Dims: []string{"batch"}}}}, nil
}

func (d doubler) Config(model string, version int64) (*serving.ModelConfig, error) {
	md, err := d.Metadata(model, version)
	if err != nil {
		return nil, err
	}
	return &serving.ModelConfig{Metadata: *md, MaxBatchSize: 4}, nil
}

func (doubler) Statistics(model string, version int64) ([]serving.Statistics, error) {
	return []serving.Statistics{{Name: "double", Version: 1, Success: serving.Duration{Count: 2, Total: time.Millisecond}}}, nil
}
func (doubler) Status() []serving.ModelStatus {
	return []serving.ModelStatus{{Name: "double", Version: 1, State: serving.StateReady}}
}
func (doubler) Readiness() serving.Readiness                   { return serving.Readiness{Ready: true} }
func (doubler) ModelReady(model string, version int64) bool    { return model == "double" }
func (doubler) Load(ctx context.Context, model string) error   { return nil }
func (doubler) Unload(ctx context.Context, model string) error { return nil }

// startServer serves doubler on a loopback port and returns a client.
func startServer(t *testing.T, opts Options) pb.GRPCInferenceServiceClient {
	t.Helper()
	return startServerWith(t, doubler{}, opts)
}

// startServerWith serves backend on a loopback port and returns a client.
func startServerWith(t *testing.T, backend Backend, opts Options) pb.GRPCInferenceServiceClient {
	t.Helper()
	addr := serveLoopback(t, backend, opts)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

// serveLoopback serves backend (logs discarded) on a loopback port until
// the test ends, and returns its address; at the end it checks that the
// server shut down cleanly.
func serveLoopback(t *testing.T, backend Backend, opts Options) string {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(backend, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

func f32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestModelInfer(t *testing.T) {
	c := startServer(t, Options{})
	ctx := context.Background()
	in := &pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "FP32", Shape: []int64{3}}
	raw := &pb.ModelInferRequest{ModelName: "double", Id: "a", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{f32(1, 2, 3)}}
	for _, call := range []grpc.CallOption{grpc.EmptyCallOption{}, grpc.UseCompressor(gzip.Name)} {
		r, err := c.ModelInfer(ctx, raw, call)
		if err != nil {
			t.Fatal(err)
		}
		if r.Id != "a" || r.ModelVersion != "1" || r.Outputs[0].Name != "y" || r.Outputs[0].Datatype != "FP32" || string(r.RawOutputContents[0]) != string(f32(2, 4, 6)) {
			t.Errorf("raw infer: %v", r)
		}
	}
	typed := &pb.ModelInferRequest{ModelName: "double", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{5, 6}}}}}
	r, err := c.ModelInfer(ctx, typed)
	if err != nil || string(r.RawOutputContents[0]) != string(f32(10, 12)) {
		t.Errorf("typed infer: %v, %v", r, err)
	}
}

func TestErrorsAndLimits(t *testing.T) {
	c := startServer(t, Options{MaxMessageBytes: 1 << 10, MaxTensorElements: 100})
	ctx := context.Background()
	x := func(dt string, shape ...int64) []*pb.ModelInferRequest_InferInputTensor {
		return []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: dt, Shape: shape}}
	}
	for _, tc := range []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		msg  string
	}{
		{"unknown model", &pb.ModelInferRequest{ModelName: "nope", Inputs: x("FP32", 1), RawInputContents: [][]byte{f32(1)}}, codes.NotFound, `no model "nope"`},
		{"no inputs", &pb.ModelInferRequest{ModelName: "double"}, codes.InvalidArgument, "no inputs"},
		{"raw count", &pb.ModelInferRequest{ModelName: "double", Inputs: x("FP32", 1), RawInputContents: [][]byte{f32(1), f32(2)}}, codes.InvalidArgument, "raw_input_contents holds 2 tensors for 1 inputs"},
		{"raw size", &pb.ModelInferRequest{ModelName: "double", Inputs: x("FP32", 2), RawInputContents: [][]byte{f32(1)}}, codes.InvalidArgument, "needs 8"},
		{"bad dtype", &pb.ModelInferRequest{ModelName: "double", Inputs: x("FP33", 1), RawInputContents: [][]byte{f32(1)}}, codes.InvalidArgument, `unknown dtype "FP33"`},
		{"too many elements", &pb.ModelInferRequest{ModelName: "double", Inputs: x("FP32", 1000), RawInputContents: [][]byte{f32(1)}}, codes.ResourceExhausted, "limit of 100"},
		{"message too large", &pb.ModelInferRequest{ModelName: "double", Inputs: x("FP32", 512), RawInputContents: [][]byte{make([]byte, 2048)}}, codes.ResourceExhausted, "more than the limit of 1024 (MaxMessageBytes"},
		{"typed count", &pb.ModelInferRequest{ModelName: "double", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{3}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1}}}}}, codes.InvalidArgument, "fp32_contents holds 1 elements, shape [3] wants 3"},
		{"typed range", &pb.ModelInferRequest{ModelName: "double", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "INT8", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{300}}}}}, codes.InvalidArgument, "outside INT8's range"},
		{"bad timeout", &pb.ModelInferRequest{ModelName: "double", Parameters: map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -5}}}, Inputs: x("FP32", 1), RawInputContents: [][]byte{f32(1)}}, codes.InvalidArgument, "parameters.timeout"},
		{"bad version", &pb.ModelInferRequest{ModelName: "double", ModelVersion: "x", Inputs: x("FP32", 1), RawInputContents: [][]byte{f32(1)}}, codes.InvalidArgument, "not a positive integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ModelInfer(ctx, tc.req)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want %v with %q", err, tc.code, tc.msg)
			}
		})
	}
	// The server keeps serving after all of them.
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive after errors: %v %v", r, err)
	}
}

func TestMetadataConfigStatsRepository(t *testing.T) {
	c := startServer(t, Options{Version: "9"})
	ctx := context.Background()
	if r, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{}); err != nil || r.Name != "xserve" || r.Version != "9" {
		t.Errorf("ServerMetadata: %v %v", r, err)
	}
	if r, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "double"}); err != nil || !r.Ready {
		t.Errorf("ModelReady: %v %v", r, err)
	}
	if r, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "double"}); err != nil || r.Inputs[0].Datatype != "FP32" || r.Versions[0] != "1" {
		t.Errorf("ModelMetadata: %v %v", r, err)
	}
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelMetadata(nope): %v", err)
	}
	if r, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "double"}); err != nil || r.Config.MaxBatchSize != 4 || len(r.Config.Input[0].Dims) != 0 {
		t.Errorf("ModelConfig: %v %v", r, err)
	}
	if r, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{}); err != nil || r.ModelStats[0].InferenceStats.Success.Count != 2 {
		t.Errorf("ModelStatistics: %v %v", r, err)
	}
	if r, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{}); err != nil || r.Models[0].State != "READY" {
		t.Errorf("RepositoryIndex: %v %v", r, err)
	}
	if _, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "double", Parameters: map[string]*pb.ModelRepositoryParameter{"config": {}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("load with an empty config: %v", err)
	}
	upload := map[string]*pb.ModelRepositoryParameter{"file:1/model.onnx": {ParameterChoice: &pb.ModelRepositoryParameter_BytesParam{BytesParam: []byte("x")}}}
	if _, err := c.RepositoryModelLoad(ctx, &pb.RepositoryModelLoadRequest{ModelName: "double", Parameters: upload}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not supported by this server") {
		t.Errorf("upload to a backend without uploads: %v", err)
	}
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: "/../etc/passwd", ByteSize: 8}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a shared-memory key is one name") {
		t.Errorf("SystemSharedMemoryRegister: %v", err)
	}
	if r, err := c.TraceSetting(ctx, &pb.TraceSettingRequest{}); err != nil || r.Settings["trace_level"].Value[0] != "OFF" {
		t.Errorf("TraceSetting: %v %v", r, err)
	}
}
