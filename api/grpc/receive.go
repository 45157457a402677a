package grpcapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
)

// Requests are read by the server itself, within the memory budget.
//
// grpc-go reads a unary call's request message in full before any handler
// or interceptor runs, so that a burst of large messages is in memory
// before anything can count it: eight 60 MiB requests took the process
// from 175 to 833 MB. The server therefore registers every method of the
// service as a stream (service) and reads each request message itself
// (recv): the 5-byte gRPC message prefix first, then, once the message's
// declared size (twice: the wire bytes and the decoded message) is
// reserved from the budget shared with HTTP and NATS, its bytes. A message
// that does not fit now is refused with UNAVAILABLE (retry), one that
// could never fit with RESOURCE_EXHAUSTED, before its bytes are read.
// HTTP/2 flow control keeps the bytes of a message not yet read at the
// stream's window (streamWindow). A request's bytes are in memory once:
// read a chunk at a time into one buffer (readFull), which its raw tensors
// then alias (unmarshal); read whole into grpc's pool, then copied, then
// decoded into copies, each 60 MiB message of the burst above took 180 MiB
// and left 120 MiB in the pools.

// rawStream is the part of grpc-go's server transport stream (what
// grpc.ServerTransportStreamFromContext returns, *transport.Stream in
// grpc-go 1.67) that reads a stream's message bytes. When the transport
// has no such methods, recv falls back to grpc's RecvMsg and reserves the
// message after it is read (TestReceiveReservesBeforeReading fails then).
type rawStream interface {
	ReadHeader(header []byte) error
	Read(n int) (mem.BufferSlice, error)
	RecvCompress() string
}

// Flow-control windows: without them grpc-go's BDP estimation grows a
// stream's window up to 16 MiB, bytes that arrive before recv can count
// them.
const (
	streamWindow = 256 << 10
	connWindow   = 4 << 20
)

// leaseKey holds a call's *leaseBox in its context.
type leaseKey struct{}

// leaseBox is the lease of the request message being served on a call (a
// stream's changes with each message).
type leaseBox struct{ lease *payload.Lease }

// leaseOf returns the lease of ctx's request (nil, which reserves
// nothing, outside a call).
func leaseOf(ctx context.Context) *payload.Lease {
	if b, ok := ctx.Value(leaseKey{}).(*leaseBox); ok {
		return b.lease
	}
	return nil
}

// service is the inference service as the server registers it: every
// unary method as a stream whose one request message recv reads, and
// ModelStreamInfer with each message read by recv.
func (s *Server) service() *grpc.ServiceDesc {
	desc := pb.GRPCInferenceService_ServiceDesc
	desc.Methods = nil
	desc.Streams = nil
	for _, m := range pb.GRPCInferenceService_ServiceDesc.Methods {
		desc.Streams = append(desc.Streams, grpc.StreamDesc{StreamName: m.MethodName, Handler: s.unaryAsStream(m.Handler)})
	}
	for _, st := range pb.GRPCInferenceService_ServiceDesc.Streams {
		h := st.Handler
		st.Handler = func(srv any, ss grpc.ServerStream) error {
			bs := &budgetStream{ServerStream: ss, s: s, box: &leaseBox{}}
			bs.ctx = context.WithValue(ss.Context(), leaseKey{}, bs.box)
			defer bs.box.lease.Release()
			return h(srv, bs)
		}
		desc.Streams = append(desc.Streams, st)
	}
	return &desc
}

// unaryAsStream serves a unary method on a stream: recv reads its request,
// h (the generated handler) decodes it into its type and calls the method
// through the Options.Interceptors, and the answer is sent.
func (s *Server) unaryAsStream(h func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error)) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		box := &leaseBox{lease: s.budget.Lease()}
		defer box.lease.Release()
		ctx := context.WithValue(ss.Context(), leaseKey{}, box)
		var req any
		dec := func(m any) error {
			req = m
			return s.recv(ss, m.(proto.Message), box.lease)
		}
		resp, err := h(srv, ctx, dec, s.unaryChain)
		if err != nil {
			return s.toStatus(err, clientNames(req)...)
		}
		return ss.SendMsg(resp)
	}
}

// budgetStream is a stream whose messages recv reads, each under a lease
// of its own, held until the next one is read.
type budgetStream struct {
	grpc.ServerStream
	s   *Server
	ctx context.Context
	box *leaseBox
}

func (b *budgetStream) Context() context.Context { return b.ctx }

func (b *budgetStream) RecvMsg(m any) error {
	b.box.lease.Release()
	b.box.lease = b.s.budget.Lease()
	return b.s.recv(b.ServerStream, m.(proto.Message), b.box.lease)
}

// recv reads the next request message of ss into m (see the top of the
// file), leaving m's size reserved on lease. Its errors are statuses.
func (s *Server) recv(ss grpc.ServerStream, m proto.Message, lease *payload.Lease) error {
	rs, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(rawStream)
	if !ok {
		if err := ss.RecvMsg(m); err != nil {
			return err
		}
		return s.reserveStatus(lease.Reserve(int64(proto.Size(m)), "the decoded request message"))
	}
	var hdr [5]byte
	if err := rs.ReadHeader(hdr[:]); err != nil {
		return readStatus(ss.Context(), err)
	}
	n := int64(binary.BigEndian.Uint32(hdr[1:]))
	if n > s.maxMsg {
		return status.Errorf(codes.ResourceExhausted, "the request message is %d bytes, more than the limit of %d (MaxMessageBytes, or half the memory budget)", n, s.maxMsg)
	}
	// The wire bytes and the decoded message: the first goes back once m
	// is decoded.
	if err := s.reserveStatus(lease.Reserve(2*n, "the request message")); err != nil {
		return err
	}
	// One buffer of its own, not grpc's pool: the request's tensors alias
	// it (unmarshal).
	wire := make([]byte, n)
	if err := s.readPaced(ss.Context(), rs, wire); err != nil {
		return err
	}
	if hdr[0]&1 == 1 {
		var err error
		if wire, err = s.decompress(rs.RecvCompress(), wire, lease); err != nil {
			return err
		}
	}
	if err := unmarshal(wire, m); err != nil {
		return status.Errorf(codes.InvalidArgument, "the request message is not a valid %s: %s", m.ProtoReflect().Descriptor().Name(),
			payload.PublicMessage(err.Error(), ""))
	}
	lease.Unreserve(n)
	return nil
}

// readPaced reads the bytes of a message whose size is reserved into buf:
// at MinReadRate or faster, after a grace of ReadGrace, so that a client
// declaring a large message and sending it slowly does not hold its share
// of the budget for long (DEADLINE_EXCEEDED; the call ends, and so does the
// read). A message that fits the stream's window is read at once.
func (s *Server) readPaced(ctx context.Context, rs rawStream, buf []byte) error {
	n := int64(len(buf))
	if n <= streamWindow || s.opts.MinReadRate < 0 {
		if err := readFull(rs, buf); err != nil {
			return readStatus(ctx, err)
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- readFull(rs, buf) }()
	due := s.opts.ReadGrace + time.Duration(float64(n)/float64(s.opts.MinReadRate)*float64(time.Second))
	timer := time.NewTimer(due)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return readStatus(ctx, err)
		}
		return nil
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "the request message of %d bytes did not arrive within %v: slower than the limit of %d bytes/s (MinReadRate) after %v", n, due.Round(time.Millisecond), s.opts.MinReadRate, s.opts.ReadGrace)
	}
}

// readChunk is the most bytes readFull takes from the transport at once.
const readChunk = 1 << 20

// readFull fills buf with the stream's next bytes, a chunk at a time: each
// chunk's frames are copied into buf and go back to grpc's pool at once,
// so that a large message is in memory once while it arrives (read whole,
// its frames and then their copy were in memory together, and the frames
// stayed in the pool after), and the stream's flow-control window grows to
// a chunk, not to the whole message.
func readFull(rs rawStream, buf []byte) error {
	for off := 0; off < len(buf); {
		data, err := rs.Read(min(len(buf)-off, readChunk))
		if err != nil {
			return err
		}
		off += data.CopyTo(buf[off:])
		data.Free()
	}
	return nil
}

// unmarshal decodes wire into m. The raw_input_contents of a
// ModelInferRequest, nearly all the bytes of a large request, are not
// copied: they stay in wire, the message's own buffer, which the request's
// tensors then alias, so that the request is in memory once, not twice
// (proto.Unmarshal copies every bytes field). Any other message, or one
// whose fields do not parse, goes to proto.Unmarshal whole.
func unmarshal(wire []byte, m proto.Message) error {
	r, ok := m.(*pb.ModelInferRequest)
	if !ok {
		return proto.Unmarshal(wire, m)
	}
	rawField := r.ProtoReflect().Descriptor().Fields().ByName("raw_input_contents").Number()
	var raw [][]byte
	var others [][]byte // the other fields, as they are on the wire
	size := 0
	for b := wire; len(b) > 0; {
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return proto.Unmarshal(wire, m)
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[tn:])
		if vn < 0 {
			return proto.Unmarshal(wire, m)
		}
		if num == rawField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[tn : tn+vn])
			raw = append(raw, v[:len(v):len(v)])
		} else {
			others = append(others, b[:tn+vn])
			size += tn + vn
		}
		b = b[tn+vn:]
	}
	if len(raw) == 0 {
		return proto.Unmarshal(wire, m)
	}
	rest := make([]byte, 0, size)
	for _, f := range others {
		rest = append(rest, f...)
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return err
	}
	r.RawInputContents = append(r.RawInputContents, raw...)
	return nil
}

// decompress undoes the message's grpc-encoding, within MaxMessageBytes
// and the budget.
func (s *Server) decompress(name string, wire []byte, lease *payload.Lease) ([]byte, error) {
	c := encoding.GetCompressor(name)
	if c == nil {
		return nil, status.Errorf(codes.Unimplemented, "the request message is compressed with %q, which the server does not support (use gzip)", name)
	}
	r, err := c.Decompress(bytes.NewReader(wire))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the request message is not valid %s: %v", name, err)
	}
	out, err := payload.ReadAll(r, s.maxMsg, lease, "the decompressed request message")
	switch {
	case errors.Is(err, payload.ErrOverLimit):
		return nil, status.Errorf(codes.ResourceExhausted, "the request message is more than %d bytes once decompressed, the limit (MaxMessageBytes, or half the memory budget)", s.maxMsg)
	case errors.Is(err, payload.ErrBudget), errors.Is(err, payload.ErrTooLarge):
		return nil, s.reserveStatus(err)
	case err != nil:
		return nil, status.Errorf(codes.InvalidArgument, "the request message is not valid %s: %v", name, err)
	}
	return out, nil
}

// reserveStatus is the status of a failed reservation: UNAVAILABLE while
// the budget is full (retry), RESOURCE_EXHAUSTED for a message that could
// never fit.
func (s *Server) reserveStatus(err error) error {
	if err == nil {
		return nil
	}
	return s.toStatus(err)
}

// readStatus is the status of a failed read of the request: the call's
// end when the client went away, else the request was cut short.
func readStatus(ctx context.Context, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "the call has no request message")
	}
	return status.Error(codes.InvalidArgument, fmt.Sprintf("reading the request message: %v", err))
}
