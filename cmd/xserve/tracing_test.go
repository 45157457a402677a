package main

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
)

// collector is an in-process OTLP/gRPC trace receiver.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *collector) Export(ctx context.Context, r *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range r.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, c)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return c, ln.Addr().String()
}

// TestTraceExport sends one HTTP inference with a traceparent to xserve
// exporting to an in-process OTLP collector, and checks that the trace
// holds the request's server span and its decode, infer, queue, batch,
// execute and encode spans, parented as documented; then the same for one
// gRPC ModelInfer.
func TestTraceExport(t *testing.T) {
	col, addr := startCollector(t)
	p := startXserve(t, tinycnnRepo(t), t.TempDir(), "--otlp-endpoint", addr, "--otlp-insecure")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := []byte(`{"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": [` + zeros(3*32*32) + `]}]}`)
	r := call(t, "POST", p.url+"/v2/models/tinycnn/infer", body, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if r.code != 200 {
		t.Fatalf("infer: %v", r)
	}
	// The same over gRPC, in a second trace.
	const grpcTraceID = "0af7651916cd43dd8448eb211c80319c"
	conn, err := grpc.NewClient(p.grpcAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+grpcTraceID+"-b7ad6b7169203331-01")
	req := &pb.ModelInferRequest{ModelName: "tinycnn",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "image", Datatype: "FP32", Shape: []int64{1, 3, 32, 32}}},
		RawInputContents: [][]byte{make([]byte, 4*3*32*32)}}
	if _, err := pb.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, req); err != nil {
		t.Fatalf("gRPC infer: %v", err)
	}
	p.stop(t) // flushes the exporter
	col.mu.Lock()
	defer col.mu.Unlock()
	checkTrace(t, col.spans, traceID, "POST /v2/models/:model/infer", "00f067aa0ba902b7")
	checkTrace(t, col.spans, grpcTraceID, "/inference.GRPCInferenceService/ModelInfer", "b7ad6b7169203331")
}

func checkTrace(t *testing.T, spans []*tracepb.Span, id, root, clientSpan string) {
	t.Helper()
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) == id {
			byName[s.Name] = s
		}
	}
	r := byName[root]
	if r == nil || hex.EncodeToString(r.ParentSpanId) != clientSpan {
		t.Fatalf("trace %s: no span %q continuing the client's traceparent; got %v", id, root, names(spans))
	}
	parent := map[string]string{"decode": root, "infer": root, "encode": root, "queue": "infer", "batch": "infer", "execute": "batch"}
	for name, want := range parent {
		s := byName[name]
		if s == nil {
			t.Errorf("trace %s: no %q span: %v", id, name, names(spans))
			continue
		}
		if p := byName[want]; p == nil || string(s.ParentSpanId) != string(p.SpanId) {
			t.Errorf("trace %s: span %q is not a child of %q", id, name, want)
		}
		if s.EndTimeUnixNano < s.StartTimeUnixNano {
			t.Errorf("trace %s: span %q ends before it starts", id, name)
		}
	}
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func zeros(n int) string {
	b := make([]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '0')
	}
	return string(b)
}
