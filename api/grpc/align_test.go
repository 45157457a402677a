package grpcapi

import (
	"context"
	"strings"
	"sync"
	"testing"
	"unsafe"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/serving"
)

// addrRecorder is doubler that keeps where its last input x's bytes were.
type addrRecorder struct {
	doubler
	mu   sync.Mutex
	addr uintptr
}

func (a *addrRecorder) Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	if x := req.Inputs["x"]; x != nil {
		a.mu.Lock()
		a.addr = uintptr(unsafe.Pointer(unsafe.SliceData(x.Data)))
		a.mu.Unlock()
	}
	return a.doubler.Infer(ctx, model, version, req)
}

// TestRawInputAligned: a small raw_input_contents tensor reaches the
// backend on a 64-byte boundary wherever protobuf placed it in the message
// (ids of every length shift it), so that the PJRT CPU plugin reads it in
// place; its values are unchanged.
func TestRawInputAligned(t *testing.T) {
	b := &addrRecorder{}
	c := startServerWith(t, b, Options{})
	for n := range 64 {
		r, err := c.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "double", Id: strings.Repeat("i", n),
			Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{3}}},
			RawInputContents: [][]byte{f32(1, 2, 3)}})
		if err != nil {
			t.Fatal(err)
		}
		if string(r.RawOutputContents[0]) != string(f32(2, 4, 6)) {
			t.Fatalf("id of %d bytes: output %v", n, r.RawOutputContents[0])
		}
		b.mu.Lock()
		addr := b.addr
		b.mu.Unlock()
		if addr%64 != 0 {
			t.Errorf("id of %d bytes: the tensor's bytes are at %#x, not 64-byte aligned", n, addr)
		}
	}
}
