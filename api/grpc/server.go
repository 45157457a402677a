package grpcapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor
	"google.golang.org/grpc/status"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/shm"
	"github.com/xserve/xserve/api/triton"
	"github.com/xserve/xserve/internal/tracing"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Backend is what the server needs of the model server; *serving.Manager
// implements it. The methods have the contract of api/http's Backend.
type Backend interface {
	Infer(ctx context.Context, model string, version int64, req *serving.InferRequest) (*serving.InferResponse, error)
	Metadata(model string, version int64) (*serving.Metadata, error)
	Config(model string, version int64) (*serving.ModelConfig, error)
	Statistics(model string, version int64) ([]serving.Statistics, error)
	Status() []serving.ModelStatus
	Readiness() serving.Readiness
	ModelReady(model string, version int64) bool
	Load(ctx context.Context, model string) error
	Unload(ctx context.Context, model string) error
}

var _ Backend = (*serving.Manager)(nil)

// Server is the gRPC API server. Create it with New, run it with Serve,
// stop it with Shutdown.
type Server struct {
	pb.UnimplementedGRPCInferenceServiceServer
	backend Backend
	opts    Options
	log     *slog.Logger
	grpc    *grpc.Server
	closing atomic.Bool
	root    string        // the backend's repository root, for payload.Public
	shm     *shm.Registry // Triton's system shared-memory regions
	ownShm  bool          // shm is the server's own: Shutdown closes it
	budget  *payload.Budget
	// maxMsg is the largest request message: MaxMessageBytes, or half the
	// budget (a message is held twice while it is decoded).
	maxMsg int64
	// unaryChain runs Options.Interceptors around a unary method; nil
	// without any.
	unaryChain grpc.UnaryServerInterceptor

	mu sync.Mutex   // guards ln
	ln net.Listener // set by Serve
}

// New returns a server answering from backend; opts' zero fields take their
// defaults.
func New(backend Backend, opts Options) (*Server, error) {
	if backend == nil {
		return nil, errors.New("grpcapi: New: backend is nil")
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{backend: backend, opts: opts, log: opts.Logger, root: payload.RootOf(backend), budget: opts.Budget}
	if s.budget == nil {
		var err error
		if s.budget, err = payload.NewBudget(opts.MemoryBudget); err != nil {
			return nil, err
		}
	}
	s.maxMsg = min(opts.MaxMessageBytes, s.budget.Limit()/2)
	s.shm, s.ownShm = shm.OrNew(opts.SharedMemory)
	s.unaryChain = chainUnary(opts.Interceptors)
	so := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(s.maxMsg)),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Calls run on long-lived goroutines whose stacks have grown to
		// what a call needs: a goroutine per call starts small and copies
		// its stack as it grows, several times a call (the execute's
		// frames are deep). A call that finds them all busy gets a
		// goroutine of its own, as without workers.
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		// Every method is served as a stream (see receive.go).
		grpc.ChainStreamInterceptor(append(append([]grpc.StreamServerInterceptor{s.observeStream}, opts.StreamInterceptors...), s.authStream, s.recoverStream)...),
	}
	if opts.TLS != nil {
		so = append(so, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s.grpc = grpc.NewServer(so...)
	s.grpc.RegisterService(s.service(), s)
	return s, nil
}

// Serve serves gRPC on ln until Shutdown, then returns ErrServerClosed.
// Serve takes ownership of ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	if s.ln != nil {
		s.mu.Unlock()
		return errors.New("grpcapi: Serve called twice")
	}
	s.ln = ln
	s.mu.Unlock()
	addr := ln.Addr().String()
	s.log.Info("gRPC listening on "+addr, "addr", addr, "tls", s.opts.TLS != nil)
	err := s.grpc.Serve(ln)
	if s.closing.Load() || errors.Is(err, grpc.ErrServerStopped) {
		return ErrServerClosed
	}
	return err
}

// Addr returns the address the server listens on, nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Shutdown stops accepting connections and waits for the calls in flight
// to finish; when ctx ends first it cancels them and returns ctx's error.
// ServerReady answers false from the moment Shutdown starts.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		err = ctx.Err()
	}
	if s.ownShm {
		err = errors.Join(err, s.shm.Close())
	}
	return err
}

// recoverStream turns a handler's panic into codes.Internal and every
// other error into its status (toStatus), logging the error as it was.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("grpcapi: handler panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, payload.InternalMessage)
		}
	}()
	err = h(srv, ss)
	if err != nil {
		if code := status.Code(err); code == codes.Internal || code == codes.Unknown {
			s.log.Error("request failed", "method", info.FullMethod, "err", err, "request_id", RequestID(ss.Context()))
		} else {
			s.log.Debug("request rejected", "method", info.FullMethod, "err", err, "request_id", RequestID(ss.Context()))
		}
	}
	return s.toStatus(err)
}

// chainUnary returns one interceptor running ics in order, nil for none.
func chainUnary(ics []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(ics) == 0 {
		return nil
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		for i := len(ics) - 1; i > 0; i-- {
			ic, next := ics[i], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return ics[0](ctx, req, info, h)
	}
}

// ServerLive implements the protocol's liveness check.
func (s *Server) ServerLive(ctx context.Context, _ *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

// ServerReady is the backend's readiness (the same as HTTP's and NATS'),
// false from the moment Shutdown starts.
func (s *Server) ServerReady(ctx context.Context, _ *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: !s.closing.Load() && s.backend.Readiness().Ready}, nil
}

// ModelReady reports whether a model version can take requests.
func (s *Server) ModelReady(ctx context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	v, err := payload.ParseVersion(r.Version)
	if err != nil {
		return nil, err
	}
	return &pb.ModelReadyResponse{Ready: s.backend.ModelReady(r.Name, v)}, nil
}

// Extensions are the protocol extensions the server implements.
var Extensions = []string{"system_shared_memory", "model_repository", "model_configuration", "statistics"}

// ServerMetadata names the server and its extensions.
func (s *Server) ServerMetadata(ctx context.Context, _ *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "xserve", Version: s.opts.Version, Extensions: Extensions}, nil
}

// ModelMetadata describes a model version's inputs and outputs.
func (s *Server) ModelMetadata(ctx context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	v, err := payload.ParseVersion(r.Version)
	if err != nil {
		return nil, err
	}
	m, err := s.backend.Metadata(r.Name, v)
	if err != nil {
		return nil, err
	}
	out := &pb.ModelMetadataResponse{Name: m.Name, Platform: m.Platform}
	for _, n := range m.Versions {
		out.Versions = append(out.Versions, strconv.FormatInt(n, 10))
	}
	if len(out.Versions) == 0 && m.Version > 0 {
		out.Versions = []string{strconv.FormatInt(m.Version, 10)}
	}
	conv := func(specs []serving.TensorSpec) []*pb.ModelMetadataResponse_TensorMetadata {
		var r []*pb.ModelMetadataResponse_TensorMetadata
		for _, t := range specs {
			r = append(r, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: payload.OIPDatatype(t.DType), Shape: t.Shape})
		}
		return r
	}
	out.Inputs, out.Outputs = conv(m.Inputs), conv(m.Outputs)
	return out, nil
}

// ModelConfig answers Triton's model configuration extension.
func (s *Server) ModelConfig(ctx context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	v, err := payload.ParseVersion(r.Version)
	if err != nil {
		return nil, err
	}
	c, err := s.backend.Config(r.Name, v)
	if err != nil {
		return nil, err
	}
	return &pb.ModelConfigResponse{Config: triton.Config(c)}, nil
}

// ModelStatistics answers Triton's statistics extension; an empty name
// means every model.
func (s *Server) ModelStatistics(ctx context.Context, r *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	v, err := payload.ParseVersion(r.Version)
	if err != nil {
		return nil, err
	}
	sts, err := s.backend.Statistics(r.Name, v)
	if err != nil {
		return nil, err
	}
	return triton.Statistics(sts), nil
}

// ModelInfer runs one inference request.
func (s *Server) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	version, err := payload.ParseVersion(r.ModelVersion)
	if err != nil {
		return nil, err
	}
	var req *serving.InferRequest
	var outs map[string]shmPlace
	err = tracing.Phase(ctx, s.opts.Tracer, "decode", func(context.Context) error {
		var err error
		req, outs, err = s.decode(r, leaseOf(ctx))
		return err
	})
	if err != nil {
		return nil, err
	}
	if p := r.Parameters["timeout"]; p != nil {
		us := p.GetInt64Param()
		if us <= 0 {
			return nil, payload.BadRequest("parameters.timeout is %v, want a positive int64_param in microseconds", p)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(us)*time.Microsecond)
		defer cancel()
	}
	inferCtx, span := tracing.StartInfer(ctx, s.opts.Tracer, r.ModelName, version)
	resp, err := s.backend.Infer(inferCtx, r.ModelName, version, req)
	span.End(payload.TraceTimes(resp), err)
	if err != nil {
		return nil, err
	}
	var out *pb.ModelInferResponse
	err = tracing.Phase(ctx, s.opts.Tracer, "encode", func(context.Context) error {
		var err error
		out, err = s.encode(resp, outs)
		return err
	})
	return out, err
}

// ModelStreamInfer runs each request of the stream in turn and sends its
// response; a failed request is answered with error_message and the stream
// goes on. A request to generate text (generate.go) runs alongside the
// next ones, its responses sent as its text comes.
func (s *Server) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	out := &streamSender{stream: stream}
	ctx := stream.Context()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		tr, err := s.holdText(ctx, r)
		if err == nil && tr != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.generate(ctx, out, tr); err != nil && !errCanceled(err) {
					s.log.Debug("grpc generate stream ended", "model", r.ModelName, "error", err)
				}
			}()
			continue
		}
		var resp *pb.ModelInferResponse
		if err == nil {
			resp, err = s.ModelInfer(ctx, r)
		}
		msg := &pb.ModelStreamInferResponse{InferResponse: resp}
		if err != nil {
			s.log.Debug("request rejected", "method", "ModelStreamInfer", "err", err, "request_id", RequestID(stream.Context()))
			msg.ErrorMessage = status.Convert(s.toStatus(err, r.ModelName)).Message()
		}
		if err := out.send(msg); err != nil {
			return err
		}
	}
}

// decode builds the serving request from r: each input from its slot of
// raw_input_contents, its typed contents or its shared-memory region (one
// of them); the outputs bound to shared-memory regions are returned too.
func (s *Server) decode(r *pb.ModelInferRequest, lease *payload.Lease) (*serving.InferRequest, map[string]shmPlace, error) {
	if r.ModelName == "" {
		return nil, nil, payload.BadRequest("model_name is empty")
	}
	if len(r.Inputs) == 0 {
		return nil, nil, payload.BadRequest("the request has no inputs")
	}
	req := &serving.InferRequest{ID: r.Id, Inputs: make(map[string]*tensor.Tensor, len(r.Inputs))}
	if p := r.Parameters["priority"]; p != nil {
		req.Priority = int(p.GetInt64Param())
	}
	seq, err := sequenceStep(r.Parameters)
	if err != nil {
		return nil, nil, err
	}
	req.Sequence = seq
	if err := s.decodeInputs(r, req, lease); err != nil {
		return nil, nil, err
	}
	outs, err := s.decodeOutputs(r, req)
	return req, outs, err
}

// decodeInputs makes req's inputs. raw_input_contents, when given, holds
// one tensor per input not in shared memory, in input order (as Triton's
// clients send it).
func (s *Server) decodeInputs(r *pb.ModelInferRequest, req *serving.InferRequest, lease *payload.Lease) error {
	inRaw := 0
	for _, in := range r.Inputs {
		if _, ok := in.Parameters[paramShmRegion]; !ok {
			inRaw++
		}
	}
	raw := r.RawInputContents
	if len(raw) > 0 && len(raw) != inRaw {
		return payload.BadRequest("raw_input_contents holds %d tensors for %d inputs not in shared memory; give one per input, in input order", len(raw), inRaw)
	}
	k := 0
	for i, in := range r.Inputs {
		if in.Name == "" {
			return payload.BadRequest("inputs[%d] has no name", i)
		}
		if _, dup := req.Inputs[in.Name]; dup {
			return payload.BadRequest("input %q is given twice", in.Name)
		}
		var rawData []byte
		if _, shared := in.Parameters[paramShmRegion]; !shared && len(raw) > 0 {
			rawData = raw[k]
			k++
		}
		t, err := s.inputTensor(in, rawData, len(raw) > 0, lease)
		if err != nil {
			return err
		}
		req.Inputs[in.Name] = t
	}
	return nil
}

// inputTensor makes one input from its shared-memory region, its raw
// bytes (hasRaw: the request has raw_input_contents) or its contents.
func (s *Server) inputTensor(in *pb.ModelInferRequest_InferInputTensor, raw []byte, hasRaw bool, lease *payload.Lease) (*tensor.Tensor, error) {
	shape := in.Shape
	if shape == nil {
		shape = []int64{} // protobuf cannot tell [] from unset: a scalar, as tritonclient sends it
	}
	place, shared, err := shmParams(in.Parameters, "input "+strconv.Quote(in.Name))
	if err != nil {
		return nil, err
	}
	var data []byte
	switch {
	case shared && in.Contents != nil:
		return nil, payload.BadRequest("input %q has both contents and parameters.%s; give one", in.Name, paramShmRegion)
	case shared:
		return payload.SharedInput(s.shm, in.Name, in.Datatype, shape, place.region, place.offset, place.size, s.opts.MaxTensorElements)
	case hasRaw && in.Contents != nil:
		return nil, payload.BadRequest("input %q has both contents and raw_input_contents; give one", in.Name)
	case hasRaw:
		// raw is a slice of the message wherever protobuf placed it.
		data = payload.AlignSmall(raw)
	case in.Contents == nil:
		return nil, payload.BadRequest("input %q has no data (give contents, raw_input_contents or parameters.%s)", in.Name, paramShmRegion)
	default:
		if data, err = contentsBytes(in, s.opts.MaxTensorElements, lease); err != nil {
			return nil, err
		}
	}
	return payload.RawTensor(in.Name, in.Datatype, shape, data, s.opts.MaxTensorElements)
}

// decodeOutputs lists the requested outputs in req and returns those bound
// to shared-memory regions, their places checked before the model runs.
func (s *Server) decodeOutputs(r *pb.ModelInferRequest, req *serving.InferRequest) (map[string]shmPlace, error) {
	var outs map[string]shmPlace
	for _, o := range r.Outputs {
		if o.Name == "" {
			return nil, payload.BadRequest("a requested output has no name")
		}
		req.Outputs = append(req.Outputs, o.Name)
		where := "output " + strconv.Quote(o.Name)
		place, shared, err := shmParams(o.Parameters, where)
		if err != nil || !shared {
			if err != nil {
				return nil, err
			}
			continue
		}
		if err := s.shm.Check(place.region, place.offset, place.size); err != nil {
			return nil, payload.BadRequest("%s: %v", where, err)
		}
		if outs == nil {
			outs = map[string]shmPlace{}
		}
		outs[o.Name] = place
	}
	return outs, nil
}

// sequenceStep reads Triton's sequence parameters: sequence_id (int64,
// uint64 or string), sequence_start and sequence_end (bool).
func sequenceStep(params map[string]*pb.InferParameter) (*serving.SequenceStep, error) {
	var id string
	switch p := params["sequence_id"].GetParameterChoice().(type) {
	case nil:
	case *pb.InferParameter_Int64Param:
		id = strconv.FormatInt(p.Int64Param, 10)
	case *pb.InferParameter_Uint64Param:
		id = strconv.FormatUint(p.Uint64Param, 10)
	case *pb.InferParameter_StringParam:
		id = p.StringParam
	default:
		return nil, payload.BadRequest("parameters.sequence_id is %v, want an int64_param, uint64_param or string_param", params["sequence_id"])
	}
	return payload.SequenceStep(id, params["sequence_start"].GetBoolParam(), params["sequence_end"].GetBoolParam())
}

// encode is the protocol's response to resp: outputs in
// raw_output_contents, as Triton answers, except those bound to
// shared-memory regions (outs), which are written there and leave an
// empty slot so that the slots still match the outputs' order.
func (s *Server) encode(resp *serving.InferResponse, outs map[string]shmPlace) (*pb.ModelInferResponse, error) {
	out := &pb.ModelInferResponse{
		ModelName:    resp.ModelName,
		ModelVersion: strconv.FormatInt(resp.ModelVersion, 10),
		Id:           resp.ID,
	}
	for _, nt := range resp.Outputs {
		o := &pb.ModelInferResponse_InferOutputTensor{
			Name: nt.Name, Datatype: payload.OIPDatatype(nt.Tensor.DType), Shape: nt.Tensor.Shape,
		}
		out.Outputs = append(out.Outputs, o)
		place, shared := outs[nt.Name]
		if !shared {
			out.RawOutputContents = append(out.RawOutputContents, payload.TensorBytes(nt.Tensor))
			continue
		}
		n, err := payload.WriteShared(s.shm, nt, place.region, place.offset, place.size)
		if err != nil {
			return nil, err
		}
		o.Parameters = place.params(n)
		out.RawOutputContents = append(out.RawOutputContents, []byte{})
	}
	return out, nil
}

// RepositoryIndex lists the models of the repository.
func (s *Server) RepositoryIndex(ctx context.Context, r *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	out := &pb.RepositoryIndexResponse{}
	for _, st := range s.backend.Status() {
		if r.Ready && st.State != serving.StateReady {
			continue
		}
		out.Models = append(out.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: st.Name, Version: strconv.FormatInt(st.Version, 10), State: string(st.State), Reason: payload.PublicMessage(st.Reason, s.root, st.Name)})
	}
	return out, nil
}

// Uploader is a Backend that can also load a model from uploaded files
// (Triton's load request with "file:" and "config" parameters); a bad path
// or config wraps serving.ErrInvalidInput. *serving.Manager has it.
type Uploader interface {
	Upload(ctx context.Context, model string, up modelrepo.Upload) error
}

// uploadParams reads a load request's parameters as Triton sends them:
// "file:<version>/<file>" as bytes_param, "config" (the model's config,
// xserve's config.yaml keys as JSON or YAML) as string_param. It returns nil
// when they upload nothing.
func uploadParams(params map[string]*pb.ModelRepositoryParameter) (*modelrepo.Upload, error) {
	var up modelrepo.Upload
	for k, p := range params {
		switch {
		case k == "config":
			text := p.GetStringParam()
			if text == "" && p.GetBytesParam() != nil {
				text = string(p.GetBytesParam())
			}
			if text == "" {
				return nil, payload.BadRequest("parameters.config: want the model config as string_param")
			}
			up.Config = []byte(text)
		case strings.HasPrefix(k, "file:"):
			data := p.GetBytesParam()
			if data == nil {
				return nil, payload.BadRequest("parameters.%s: want the file's bytes as bytes_param", k)
			}
			if up.Files == nil {
				up.Files = map[string][]byte{}
			}
			up.Files[strings.TrimPrefix(k, "file:")] = data
		}
	}
	if up.Files == nil && up.Config == nil {
		return nil, nil
	}
	return &up, nil
}

// RepositoryModelLoad (re)loads a model from the repository, or from the
// uploaded files and config of its parameters.
func (s *Server) RepositoryModelLoad(ctx context.Context, r *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	up, err := uploadParams(r.Parameters)
	if err != nil {
		return nil, err
	}
	switch u, ok := s.backend.(Uploader); {
	case up != nil && !ok:
		return nil, payload.BadRequest("parameters: loading a model from uploaded files or config is not supported by this server; change the model repository instead")
	case up != nil:
		err = u.Upload(ctx, r.ModelName, *up)
	default:
		err = s.backend.Load(ctx, r.ModelName)
	}
	if err != nil {
		return nil, err
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

// RepositoryModelUnload unloads a model after its requests in flight.
func (s *Server) RepositoryModelUnload(ctx context.Context, r *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if err := s.backend.Unload(ctx, r.ModelName); err != nil {
		return nil, err
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}

func unsupported(what string) error {
	return status.Errorf(codes.Unimplemented, "xserve does not support %s; send tensors in raw_input_contents", what)
}

// CudaSharedMemoryStatus reports no regions.
func (s *Server) CudaSharedMemoryStatus(context.Context, *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	return &pb.CudaSharedMemoryStatusResponse{}, nil
}

// CudaSharedMemoryRegister is not supported.
func (s *Server) CudaSharedMemoryRegister(context.Context, *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	return nil, unsupported("CUDA shared memory")
}

// CudaSharedMemoryUnregister has nothing to unregister.
func (s *Server) CudaSharedMemoryUnregister(context.Context, *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	return &pb.CudaSharedMemoryUnregisterResponse{}, nil
}

// TraceSetting reports tracing off; changes are not supported.
func (s *Server) TraceSetting(ctx context.Context, r *pb.TraceSettingRequest) (*pb.TraceSettingResponse, error) {
	if len(r.Settings) > 0 {
		return nil, status.Error(codes.Unimplemented, "xserve does not support changing Triton's trace settings")
	}
	val := func(v ...string) *pb.TraceSettingResponse_SettingValue {
		return &pb.TraceSettingResponse_SettingValue{Value: v}
	}
	return &pb.TraceSettingResponse{Settings: map[string]*pb.TraceSettingResponse_SettingValue{
		"trace_level": val("OFF"), "trace_rate": val("1000"), "trace_count": val("-1"),
		"log_frequency": val("0"), "trace_file": val(""), "trace_mode": val("triton"),
	}}, nil
}

// LogSettings reports the log settings; changes are not supported.
func (s *Server) LogSettings(ctx context.Context, r *pb.LogSettingsRequest) (*pb.LogSettingsResponse, error) {
	if len(r.Settings) > 0 {
		return nil, status.Error(codes.Unimplemented, "xserve does not support changing its log settings at run time; restart it with --log-level and --log-format")
	}
	b := func(v bool) *pb.LogSettingsResponse_SettingValue {
		return &pb.LogSettingsResponse_SettingValue{ParameterChoice: &pb.LogSettingsResponse_SettingValue_BoolParam{BoolParam: v}}
	}
	return &pb.LogSettingsResponse{Settings: map[string]*pb.LogSettingsResponse_SettingValue{
		"log_file":          {ParameterChoice: &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: ""}},
		"log_info":          b(true),
		"log_warning":       b(true),
		"log_error":         b(true),
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsResponse_SettingValue_Uint32Param{Uint32Param: 0}},
		"log_format":        {ParameterChoice: &pb.LogSettingsResponse_SettingValue_StringParam{StringParam: "default"}},
	}}, nil
}

// streamWorkers is how many goroutines serve calls: a few per core, so
// that calls waiting in a batch queue seldom leave a new call without one.
func streamWorkers() int { return 4 * runtime.GOMAXPROCS(0) }
