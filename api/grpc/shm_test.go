package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/shm"
)

// TestSharedMemory registers a region over gRPC, runs ModelInfer with the
// input read from it and the output written to it, and checks the
// refusals and unregistering.
func TestSharedMemory(t *testing.T) {
	key := fmt.Sprintf("/xserve-grpc-test-%d", os.Getpid())
	if err := os.WriteFile(shm.Dir+key, make([]byte, 256), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(shm.Dir + key)
	in := make([]byte, 12)
	for i := range 3 {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i+1)))
	}
	f, _ := os.OpenFile(shm.Dir+key, os.O_RDWR, 0)
	f.WriteAt(in, 16)
	f.Close()
	reg := shm.New(shm.Limits{})
	defer reg.Close()
	c := startServer(t, Options{SharedMemory: reg})
	ctx := context.Background()
	if _, err := c.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: key, Offset: 0, ByteSize: 256}); err != nil {
		t.Fatal(err)
	}
	st, err := c.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || st.Regions["r"].GetByteSize() != 256 || st.Regions["r"].GetKey() != key {
		t.Fatalf("status: %v %v", st, err)
	}
	str := func(s string) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: s}}
	}
	i64 := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	req := func(outSize int64) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "double",
			Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{3},
				Parameters: map[string]*pb.InferParameter{"shared_memory_region": str("r"), "shared_memory_byte_size": i64(12), "shared_memory_offset": i64(16)}}},
			Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y",
				Parameters: map[string]*pb.InferParameter{"shared_memory_region": str("r"), "shared_memory_byte_size": i64(outSize), "shared_memory_offset": i64(128)}}}}
	}
	resp, err := c.ModelInfer(ctx, req(64))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != 0 || resp.Outputs[0].Parameters["shared_memory_byte_size"].GetInt64Param() != 12 {
		t.Errorf("response: %v", resp)
	}
	file, _ := os.ReadFile(shm.Dir + key)
	for i := range 3 {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(file[128+4*i:])); got != float32(2*(i+1)) {
			t.Errorf("y[%d] in the region is %v, want %v", i, got, 2*(i+1))
		}
	}
	if _, err := c.ModelInfer(ctx, req(8)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `the result is 12 bytes (float32[3]), more than parameters.shared_memory_byte_size 8 of region "r"`) {
		t.Errorf("output larger than its place: %v", err)
	}
	bad := req(64)
	bad.Inputs[0].Parameters["shared_memory_offset"] = i64(250)
	if _, err := c.ModelInfer(ctx, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "outside the region's 256 bytes") {
		t.Errorf("input outside the region: %v", err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModelInfer(ctx, req(64)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `region "r" is not registered`) {
		t.Errorf("after unregister: %v", err)
	}
	if _, err := c.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{}); err != nil {
		t.Errorf("unregister all: %v", err)
	}
}
