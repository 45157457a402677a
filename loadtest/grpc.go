package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/tensor"
)

// GRPCOptions configures a GRPCTarget. Zero values mean the defaults.
type GRPCOptions struct {
	// Addr is the server's KServe v2 gRPC address, host:port (xserve's
	// --grpc-addr). Required.
	Addr string
	// Model is the model to infer with. Required.
	Model string
	// Version is the model version; empty for the server's choice.
	Version string
	// Outputs names the outputs to ask for; nil asks for all.
	Outputs []string
	// Validate checks every successful response: each output's raw bytes
	// must match its shape and datatype. ExpectOutputs also checks the
	// named outputs' shapes (-1 matches any size); it implies Validate.
	Validate      bool
	ExpectOutputs map[string][]int64
	// Conns is the number of HTTP/2 connections the requests are spread
	// over. Default 1: gRPC multiplexes calls on one connection.
	Conns int
	// Timeout bounds each call. Default 30s.
	Timeout time.Duration
	// MaxResponseBytes bounds a response message. Default 256 MiB.
	MaxResponseBytes int64
	// AllowRemote lets the target connect to addresses other than loopback.
	AllowRemote bool
}

func (o *GRPCOptions) setDefaults() {
	if o.Conns == 0 {
		o.Conns = 1
	}
	responseDefaults(&o.Timeout, &o.MaxResponseBytes, &o.Validate, o.ExpectOutputs)
}

func (o *GRPCOptions) validate() error {
	if o.Model == "" {
		return fmt.Errorf("%w: GRPCOptions.Model is empty", ErrOptions)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return fmt.Errorf("%w: GRPCOptions.Addr %q: want host:port: %v", ErrOptions, o.Addr, err)
	}
	if o.Conns < 0 || o.Timeout < 0 || o.MaxResponseBytes < 0 || o.MaxResponseBytes > 1<<31-1 {
		return fmt.Errorf("%w: GRPCOptions Conns %d, Timeout %v and MaxResponseBytes %d must not be negative (nor MaxResponseBytes above 2 GiB)", ErrOptions, o.Conns, o.Timeout, o.MaxResponseBytes)
	}
	return nil
}

// GRPCTarget sends ModelInfer calls of the KServe v2 gRPC protocol (Triton's
// GRPCInferenceService) with the tensors in raw_input_contents, as Triton's
// clients send them. It is a Target and a Preparer, safe for concurrent
// use; Close it when done.
type GRPCTarget struct {
	opts    GRPCOptions
	conns   []*grpc.ClientConn
	clients []pb.GRPCInferenceServiceClient
	next    atomic.Uint64
	closed  sync.Once
}

// NewGRPCTarget checks opts (including, unless AllowRemote, that the
// address is a loopback one) and opens the connections lazily: the first
// call connects.
func NewGRPCTarget(ctx context.Context, opts GRPCOptions) (*GRPCTarget, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(opts.Addr)
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !opts.AllowRemote {
		if err := checkLoopbackHost(ctx, host); err != nil {
			return nil, err
		}
		dialer.Control = loopbackOnly
	}
	t := &GRPCTarget{opts: opts}
	for range opts.Conns {
		cc, err := grpc.NewClient("passthrough:///"+opts.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr)
			}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(int(opts.MaxResponseBytes)), grpc.MaxCallSendMsgSize(1<<31-1)),
		)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("%w: gRPC address %q: %v", ErrOptions, opts.Addr, err)
		}
		t.conns = append(t.conns, cc)
		t.clients = append(t.clients, pb.NewGRPCInferenceServiceClient(cc))
	}
	return t, nil
}

// String describes the target, e.g. "grpc ModelInfer 127.0.0.1:8001 (model tinycnn)".
func (t *GRPCTarget) String() string {
	s := fmt.Sprintf("grpc ModelInfer %s (model %s", t.opts.Addr, t.opts.Model)
	if t.opts.Version != "" {
		s += " version " + t.opts.Version
	}
	s += ")"
	if t.opts.Validate {
		s += ", validated"
	}
	return s
}

// Close closes the connections. It is safe to call more than once; the
// target must not be used after it.
func (t *GRPCTarget) Close() error {
	var errs []error
	t.closed.Do(func() {
		for _, cc := range t.conns {
			errs = append(errs, cc.Close())
		}
	})
	return errors.Join(errs...)
}

// Prepare builds req's ModelInferRequest once.
func (t *GRPCTarget) Prepare(req *Request) error {
	m, err := t.Encode(req.Inputs)
	if err != nil {
		return err
	}
	req.Payload = m
	return nil
}

// Encode returns the ModelInferRequest the target sends for inputs: one
// input tensor per name, in name order, its bytes in raw_input_contents.
func (t *GRPCTarget) Encode(inputs Sample) (*pb.ModelInferRequest, error) {
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	m := &pb.ModelInferRequest{ModelName: t.opts.Model, ModelVersion: t.opts.Version}
	for _, name := range names {
		in := inputs[name]
		dt, err := v2DataType(in.DType)
		if err != nil || in.DType == tensor.String || in.DType.IsComplex() {
			return nil, fmt.Errorf("%w: input %s: cannot send %s as raw contents", ErrInput, name, in.DType)
		}
		m.Inputs = append(m.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: in.Shape})
		m.RawInputContents = append(m.RawInputContents, in.Data)
	}
	for _, o := range t.opts.Outputs {
		m.Outputs = append(m.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o})
	}
	return m, nil
}

// Do sends one ModelInfer call. A call that ends with a gRPC status other
// than OK fails with a *GRPCStatusError; with Validate set, so does a
// malformed response (with ErrInvalidResponse).
func (t *GRPCTarget) Do(ctx context.Context, req *Request) (*Result, error) {
	m, ok := req.Payload.(*pb.ModelInferRequest)
	if !ok {
		var err error
		if m, err = t.Encode(req.Inputs); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.Timeout)
	defer cancel()
	c := t.clients[t.next.Add(1)%uint64(len(t.clients))]
	resp, err := c.ModelInfer(ctx, m)
	res := &Result{BytesSent: int64(proto.Size(m))}
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Canceled && st.Code() != codes.DeadlineExceeded {
			return res, &GRPCStatusError{Code: st.Code(), Message: st.Message()}
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, err
	}
	res.BytesReceived = int64(proto.Size(resp))
	if t.opts.Validate {
		if err := validateGRPCResponse(resp, t.opts.ExpectOutputs); err != nil {
			return res, err
		}
	}
	return res, nil
}

// GRPCStatusError is a call that ended with a gRPC status other than OK.
// Its failure kind is "grpc " and the code's name ("grpc Unavailable").
type GRPCStatusError struct {
	Code    codes.Code
	Message string
}

func (e *GRPCStatusError) Error() string {
	return fmt.Sprintf("loadtest: grpc status %s: %s", e.Code, e.Message)
}

// Kind returns the failure kind, e.g. "grpc ResourceExhausted".
func (e *GRPCStatusError) Kind() string { return "grpc " + e.Code.String() }

// validateGRPCResponse checks that every output's raw bytes hold exactly its
// shape's elements of its datatype, and the expected outputs' shapes.
func validateGRPCResponse(resp *pb.ModelInferResponse, expect map[string][]int64) error {
	if len(resp.Outputs) == 0 {
		return fmt.Errorf("%w: no outputs", ErrInvalidResponse)
	}
	if len(resp.RawOutputContents) != len(resp.Outputs) {
		return fmt.Errorf("%w: %d outputs but %d raw output contents", ErrInvalidResponse, len(resp.Outputs), len(resp.RawOutputContents))
	}
	seen := map[string]bool{}
	for i, o := range resp.Outputs {
		dt, err := tensor.ParseDType(o.Datatype)
		if err != nil || dt == tensor.String {
			return fmt.Errorf("%w: output %s: datatype %q", ErrInvalidResponse, o.Name, o.Datatype)
		}
		n := int64(1)
		for _, d := range o.Shape {
			if d < 0 {
				return fmt.Errorf("%w: output %s: shape %v", ErrInvalidResponse, o.Name, o.Shape)
			}
			n *= d
		}
		if got := int64(len(resp.RawOutputContents[i])); got != n*int64(dt.Size()) {
			return fmt.Errorf("%w: output %s: %d bytes for %s%v", ErrInvalidResponse, o.Name, got, o.Datatype, o.Shape)
		}
		if want, ok := expect[o.Name]; ok && !shapeMatches(o.Shape, want) {
			return fmt.Errorf("%w: output %s has shape %v, want %v", ErrInvalidResponse, o.Name, o.Shape, want)
		}
		seen[o.Name] = true
	}
	for name := range expect {
		if !seen[name] {
			return fmt.Errorf("%w: no output %s", ErrInvalidResponse, name)
		}
	}
	return nil
}
