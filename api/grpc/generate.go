package grpcapi

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/api/textgen"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Text generation over ModelStreamInfer, as Triton's decoupled models
// answer it (its vLLM and TensorRT-LLM backends' inputs): a request to a
// generative model with a BYTES input text_input is answered with one
// response per piece of text (output text_output, BYTES [1]) as the tokens
// are generated. The sampling parameters are named as the OpenAI API names
// them (max_tokens, temperature, top_p, top_k, seed, stop, ignore_eos, ...)
// and come from a BYTES input sampling_parameters holding a JSON object
// (the vLLM backend's) and from the request's parameters (which win). A
// BOOL input or parameter stream set to false asks for the whole text in
// one response. The last response carries the parameter
// triton_final_response = true; with the request parameter
// triton_enable_empty_final_response (tritonclient's
// enable_empty_final_response) it is an extra response without outputs,
// as Triton sends it. A client that cancels the stream or goes away ends
// the sequence (its slot is freed at the next step).

const (
	textInput          = "text_input"
	textOutput         = "text_output"
	samplingParameters = "sampling_parameters"
	finalResponse      = "triton_final_response"
	emptyFinalResponse = "triton_enable_empty_final_response"
)

// streamSender serializes the responses of a stream's requests, which run
// concurrently.
type streamSender struct {
	mu     sync.Mutex
	stream pb.GRPCInferenceService_ModelStreamInferServer
}

func (s *streamSender) send(r *pb.ModelStreamInferResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.Send(r)
}

// textRequest is a ModelStreamInfer request to generate text.
type textRequest struct {
	job        *textgen.Job
	text       string
	id         string
	stream     bool
	emptyFinal bool
}

// holdText prepares r as a text generation, or returns nil when r is not
// one (the model is not generative or the request has no text_input): it
// is then an ordinary inference.
func (s *Server) holdText(ctx context.Context, r *pb.ModelInferRequest) (*textRequest, error) {
	b, ok := s.backend.(textgen.Backend)
	if !ok || !hasInput(r, textInput) {
		return nil, nil
	}
	// The prompt's tensors count in the memory budget while they are read.
	lease := s.budget.Lease()
	defer lease.Release()
	req, outs, err := s.decode(r, lease)
	if err != nil {
		return nil, err
	}
	if len(outs) > 0 {
		return nil, payload.BadRequest("a text generation's outputs are streamed; shared-memory outputs are not supported for it")
	}
	text, err := oneString(req, textInput)
	if err != nil {
		return nil, err
	}
	p, stream, err := textParams(req, r.Parameters)
	if err != nil {
		return nil, err
	}
	version, err := payload.ParseVersion(r.ModelVersion)
	if err != nil {
		return nil, err
	}
	job, err := textgen.Hold(ctx, b, r.ModelName, version, p)
	if errors.Is(err, serving.ErrNotGenerative) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &textRequest{job: job, text: text, id: r.Id, stream: stream, emptyFinal: r.Parameters[emptyFinalResponse].GetBoolParam()}, nil
}

func hasInput(r *pb.ModelInferRequest, name string) bool {
	for _, in := range r.Inputs {
		if in.Name == name {
			return true
		}
	}
	return false
}

// oneString returns the single element of a BYTES input.
func oneString(req *serving.InferRequest, name string) (string, error) {
	t := req.Inputs[name]
	if t.DType != tensor.String || len(t.Strings) != 1 {
		return "", payload.BadRequest("input %s must be BYTES holding one element, got %s", name, t)
	}
	return string(t.Strings[0]), nil
}

// textParams reads the sampling parameters: the sampling_parameters
// input's JSON object, the request's parameters over it; and stream.
func textParams(req *serving.InferRequest, params map[string]*pb.InferParameter) (*textgen.Params, bool, error) {
	fields := map[string]any{}
	if _, ok := req.Inputs[samplingParameters]; ok {
		raw, err := oneString(req, samplingParameters)
		if err != nil {
			return nil, false, err
		}
		if err := json.Unmarshal([]byte(raw), &fields); err != nil {
			return nil, false, payload.BadRequest("input %s is not a JSON object: %v", samplingParameters, err)
		}
	}
	for k, v := range params {
		fields[k] = paramValue(v)
	}
	stream := true
	if t, ok := req.Inputs["stream"]; ok {
		if t.DType != tensor.Bool || t.NumElements() != 1 {
			return nil, false, payload.BadRequest("input stream must be BOOL holding one element, got %s", t)
		}
		stream = t.Data[0] != 0
	}
	if v, ok := fields["stream"].(bool); ok {
		stream = v
	}
	data, _ := json.Marshal(fields)
	var p textgen.Params
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, false, payload.BadRequest("sampling parameters: %v", err)
	}
	return &p, stream, nil
}

// paramValue is a request parameter's value for the JSON of Params; a
// string that is a number (a float sent by a client that can only send
// strings) is that number.
func paramValue(p *pb.InferParameter) any {
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_BoolParam:
		return v.BoolParam
	case *pb.InferParameter_Int64Param:
		return v.Int64Param
	case *pb.InferParameter_Uint64Param:
		return v.Uint64Param
	case *pb.InferParameter_DoubleParam:
		return v.DoubleParam
	case *pb.InferParameter_StringParam:
		if f, err := strconv.ParseFloat(v.StringParam, 64); err == nil {
			return f
		}
		return v.StringParam
	}
	return nil
}

// generate runs a text request on the stream, sending its responses; it
// releases the job.
func (s *Server) generate(ctx context.Context, out *streamSender, tr *textRequest) error {
	defer tr.job.Release()
	resp := func(text *string, final bool) *pb.ModelStreamInferResponse {
		r := &pb.ModelInferResponse{ModelName: tr.job.Model(), ModelVersion: strconv.FormatInt(tr.job.Version(), 10), Id: tr.id,
			Parameters: map[string]*pb.InferParameter{finalResponse: {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: final}}}}
		if text != nil {
			t := &tensor.Tensor{DType: tensor.String, Shape: []int64{1}, Strings: [][]byte{[]byte(*text)}}
			r.Outputs = []*pb.ModelInferResponse_InferOutputTensor{{Name: textOutput, Datatype: "BYTES", Shape: t.Shape}}
			r.RawOutputContents = [][]byte{payload.TensorBytes(t)}
		}
		return &pb.ModelStreamInferResponse{InferResponse: r}
	}
	fail := func(err error) error {
		return out.send(&pb.ModelStreamInferResponse{ErrorMessage: err.Error(), InferResponse: &pb.ModelInferResponse{ModelName: tr.job.Model(), Id: tr.id}})
	}
	if err := tr.job.PromptText(tr.text, true); err != nil {
		return fail(err)
	}
	st, err := tr.job.Start(ctx)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	// The last piece of text is held until the next comes, so that the
	// sequence's end can be marked on it.
	var held []byte
	for {
		p, err := st.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return fail(err)
		}
		if p.Done {
			text := string(append(held, p.Text...))
			return sendLast(out, resp, text, tr.emptyFinal)
		}
		if tr.stream && len(held) > 0 {
			text := string(held)
			if err := out.send(resp(&text, false)); err != nil {
				return err
			}
			held = held[:0]
		}
		held = append(held, p.Text...)
	}
}

// sendLast sends a sequence's last text and marks the end: on that
// response, or on an empty one after it when the client asked for it.
func sendLast(out *streamSender, resp func(*string, bool) *pb.ModelStreamInferResponse, text string, emptyFinal bool) error {
	if !emptyFinal {
		return out.send(resp(&text, true))
	}
	if text != "" {
		if err := out.send(resp(&text, false)); err != nil {
			return err
		}
	}
	return out.send(resp(nil, true))
}

// errCanceled says whether err is the stream's end by its client.
func errCanceled(err error) bool {
	return status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled)
}
