package grpcapi

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/serving"
)

// gated is doubler whose Infer waits for release (closed) while entered
// is signalled.
type gated struct {
	doubler
	entered chan struct{}
	release chan struct{}
}

func (g gated) Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.doubler.Infer(ctx, model, version, req)
}

// inferOf is a request for double with n float32s.
func inferOf(n int) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{ModelName: "double",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{int64(n)}}},
		RawInputContents: [][]byte{make([]byte, 4*n)}}
}

// TestReceiveReservesBeforeReading: a request message is reserved (twice
// its size: wire bytes and decoded message) from the memory budget shared
// with HTTP and NATS as soon as its size is declared, before its bytes are
// read: while one 3 MiB request holds its reservation, another is refused
// UNAVAILABLE (retry), one that could never fit RESOURCE_EXHAUSTED, and
// everything is given back once the requests are answered.
func TestReceiveReservesBeforeReading(t *testing.T) {
	budget, err := payload.NewBudget(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	g := gated{entered: make(chan struct{}, 4), release: make(chan struct{})}
	c := startServerWith(t, g, Options{Budget: budget})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.ModelInfer(ctx, inferOf(3<<18)); err != nil {
			t.Errorf("the first request: %v", err)
		}
	})
	<-g.entered
	if used := budget.Used(); used < 3<<20 || used > 7<<20 {
		t.Errorf("one 3 MiB request in flight holds %d bytes of the budget", used)
	}
	_, err = c.ModelInfer(ctx, inferOf(3<<18))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the request message needs 6291") || !strings.Contains(err.Error(), "retry later") {
		t.Errorf("a second request while the budget is full: %v", err)
	}
	_, err = c.ModelInfer(ctx, inferOf(5<<18))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "more than the limit of 4194304 (MaxMessageBytes, or half the memory budget)") {
		t.Errorf("a request larger than half the budget: %v", err)
	}
	close(g.release)
	wg.Wait()
	if _, err := c.ModelInfer(ctx, inferOf(3<<18)); err != nil {
		t.Errorf("after the first request: %v", err)
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("%d bytes still reserved after every request was answered", used)
	}
}

// TestNestedGroupsAreInvalidArgument: two million nested groups of an
// unknown field in a request message (8 MB) are INVALID_ARGUMENT, on the
// unary and the streaming call, and the server keeps serving.
func TestNestedGroupsAreInvalidArgument(t *testing.T) {
	c := startServer(t, Options{})
	ctx := context.Background()
	var groups []byte
	for range 2_000_000 {
		groups = protowire.AppendTag(groups, 99, protowire.StartGroupType)
	}
	for range 2_000_000 {
		groups = protowire.AppendTag(groups, 99, protowire.EndGroupType)
	}
	req := inferOf(1)
	req.ProtoReflect().SetUnknown(protoreflect.RawFields(groups))
	_, err := c.ModelInfer(ctx, req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the request message is not a valid ModelInferRequest") {
		t.Errorf("unary: %v", err)
	}
	stream, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("stream: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r, err := c.ModelInfer(sctx, inferOf(2)); err != nil || len(r.RawOutputContents) != 1 {
		t.Errorf("after the nested groups: %v %v", r, err)
	}
}

// slowConn writes at about 100 KB/s.
type slowConn struct{ net.Conn }

func (c slowConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 8<<10)
		m, err := c.Conn.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
		time.Sleep(80 * time.Millisecond)
	}
	return n, nil
}

// TestSlowMessageEnds: a message larger than the stream's window that
// comes slower than MinReadRate (after ReadGrace) ends its call with
// DEADLINE_EXCEEDED, and gives its reservation back.
func TestSlowMessageEnds(t *testing.T) {
	budget, err := payload.NewBudget(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveLoopback(t, doubler{}, Options{Budget: budget, MinReadRate: 10 << 20, ReadGrace: 100 * time.Millisecond})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			return slowConn{c}, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = pb.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, inferOf(1<<18)) // 1 MiB at 100 KB/s
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "(MinReadRate)") {
		t.Errorf("a slow 1 MiB message: %v after %v", err, time.Since(start))
	}
	waitUntil(t, func() bool { return budget.Used() == 0 })
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// TestUnmarshalAliasesRawContents: recv's unmarshal decodes a
// ModelInferRequest as proto.Unmarshal does (raw_input_contents in order
// among the other fields, unknown fields kept, the same failures) while its
// raw_input_contents stay in the wire buffer instead of being copied.
func TestUnmarshalAliasesRawContents(t *testing.T) {
	marshal := func(m *pb.ModelInferRequest) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := &pb.ModelInferRequest{ModelName: "double", Id: "a",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{2}}},
		RawInputContents: [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}, {}}}
	second := &pb.ModelInferRequest{ModelVersion: "1",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "y", Datatype: "INT8", Shape: []int64{3}}},
		Parameters:       map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 2}}},
		RawInputContents: [][]byte{{9, 10, 11}}}
	typed := &pb.ModelInferRequest{ModelName: "double",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1.5}}}}}
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("kept"))
	var deep []byte
	for range 20000 {
		deep = protowire.AppendTag(deep, 99, protowire.StartGroupType)
	}
	for range 20000 {
		deep = protowire.AppendTag(deep, 99, protowire.EndGroupType)
	}
	interleaved := append(append(marshal(first), unknown...), marshal(second)...)
	for _, c := range []struct {
		name    string
		wire    []byte
		aliased int // non-empty raw contents expected inside the wire buffer
	}{
		{"raw contents between other fields", interleaved, 2},
		{"typed contents", marshal(typed), 0},
		{"truncated", interleaved[:len(interleaved)-2], 0},
		{"raw contents then groups nested 20000 deep", append(marshal(first), deep...), 0},
		{"empty", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := &pb.ModelInferRequest{}
			wantErr := proto.Unmarshal(c.wire, want)
			got := &pb.ModelInferRequest{}
			err := unmarshal(c.wire, got)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, proto.Unmarshal's %v", err, wantErr)
			}
			if err != nil {
				return
			}
			if !proto.Equal(got, want) || !bytes.Equal(got.ProtoReflect().GetUnknown(), want.ProtoReflect().GetUnknown()) {
				t.Fatalf("decoded %v, proto.Unmarshal decodes %v", got, want)
			}
			inWire := 0
			for _, r := range got.RawInputContents {
				if len(r) > 0 && uintptr(unsafe.Pointer(&r[0])) >= uintptr(unsafe.Pointer(&c.wire[0])) &&
					uintptr(unsafe.Pointer(&r[0])) < uintptr(unsafe.Pointer(&c.wire[0]))+uintptr(len(c.wire)) {
					inWire++
				}
			}
			if inWire != c.aliased {
				t.Errorf("%d of %d raw contents are in the wire buffer, want %d", inWire, len(got.RawInputContents), c.aliased)
			}
		})
	}
}
