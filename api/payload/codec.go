package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// Limits are what the decoders enforce beyond a request's own consistency.
type Limits struct {
	// MaxElems bounds each tensor's declared elements.
	MaxElems int64
	// Check, when set, is called with each input's declared dtype and shape
	// before its data is decoded (serving.Manager.CheckInput), so that a
	// tensor the model refuses is never allocated.
	Check func(model string, version int64, name string, dt tensor.DType, shape []int64) error
	// Lease, when set, is charged with each tensor decoded from JSON before
	// it is allocated (binary tensors point into the body).
	Lease *Lease
	// Shared, when set, resolves Triton's system shared-memory parameters
	// (api/shm's Registry); without it they are refused.
	Shared SharedMemory
}

// SharedMemory is the registry of the system shared-memory extension as
// the decoders and encoders use it (api/shm.Registry implements it).
type SharedMemory interface {
	// Read returns a copy of size bytes at offset of region.
	Read(region string, offset, size int64) ([]byte, error)
	// Write copies data to offset of region, where size bytes are given.
	Write(region string, offset, size int64, data []byte) error
	// Check reports whether size bytes at offset lie inside region.
	Check(region string, offset, size int64) error
}

// shmRef is a tensor's place in a shared-memory region.
type shmRef struct {
	region       string
	offset, size int64
}

// Request is an inference request as every transport decodes it: the
// model and version it names, the serving request, and how its outputs are
// to be encoded.
type Request struct {
	// Model is the model the request is for: named by the body (/v1/infer),
	// the URL (/v2/models/{m}/infer) or the NATS subject.
	Model string
	// Version is the model version; 0 means the latest ready one.
	Version int64
	// Infer is the request for serving.
	Infer *serving.InferRequest
	// Timeout is the request's parameters.timeout; 0 means none.
	Timeout time.Duration
	// binaryOut says, per requested output name, whether to send it as
	// binary data; binaryDefault applies to outputs not listed.
	binaryOut     map[string]bool
	binaryDefault bool
	// shared and sharedOut: the outputs written to shared-memory regions
	// instead of the response.
	shared    SharedMemory
	sharedOut map[string]shmRef
}

// WantsBinary reports whether output name is sent as binary data (the
// binary tensor extension) rather than as JSON.
func (d *Request) WantsBinary(name string) bool {
	if b, ok := d.binaryOut[name]; ok {
		return b
	}
	return d.binaryDefault
}

// tensorIn is one input tensor as either format (v1, OIP) gives it.
type tensorIn struct {
	name   string
	dtype  string
	shape  []int64
	data   json.RawMessage
	params map[string]json.RawMessage
}

// decodeInput makes the input's tensor from its JSON data or its binary bytes.
func decodeInput(in tensorIn, br *binaryReader, lim *Limits, model string, version int64) (*tensor.Tensor, error) {
	dt, err := parseDType(in.name, in.dtype)
	if err != nil {
		return nil, err
	}
	n, err := checkShape(in.name, in.shape, lim.MaxElems)
	if err != nil {
		return nil, err
	}
	if lim.Check != nil {
		if err := lim.Check(model, version, in.name, dt, in.shape); err != nil {
			return nil, err
		}
	}
	where := "input " + strconv.Quote(in.name)
	ref, hasShm, err := shmParams(in.params, where, lim.Shared)
	if err != nil {
		return nil, err
	}
	size, hasSize, err := paramInt(in.params, "binary_data_size", where)
	if err != nil {
		return nil, err
	}
	hasData := len(in.data) > 0 && string(in.data) != "null"
	switch {
	case hasShm && (hasSize || hasData):
		return nil, badRequest("input %q has parameters.shared_memory_region and also \"data\" or parameters.binary_data_size; give one", in.name)
	case hasShm:
		return sharedTensor(in.name, dt, in.shape, ref, lim)
	case hasSize && hasData:
		return nil, badRequest("input %q has both \"data\" and parameters.binary_data_size; give one", in.name)
	case hasSize:
		b, err := br.take(in.name, size)
		if err != nil {
			return nil, err
		}
		return binaryTensor(in.name, dt, in.shape, b)
	case hasData:
		if err := lim.Lease.Reserve(n*int64(max(dt.Size(), 1)), where); err != nil {
			return nil, err
		}
		return decodeJSONData(in.name, dt, in.shape, in.data)
	}
	return nil, badRequest("input %q has no data (give \"data\": [...], or parameters.binary_data_size with the binary tensor extension)", in.name)
}

// paramInt reads an integer parameter; where names the owner for messages.
func paramInt(params map[string]json.RawMessage, key, where string) (int64, bool, error) {
	raw, ok := params[key]
	if !ok {
		return 0, false, nil
	}
	if jsonInteger(raw) {
		if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return v, true, nil // the common case, without reflection
		}
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, false, badRequest("%s: parameters.%s is %s, want an integer", where, key, quoteTok(raw))
	}
	return v, true, nil
}

// jsonInteger reports whether raw is a JSON integer: an optional minus,
// then 0 or digits that do not start with 0.
func jsonInteger(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 || raw[0] == '0' && len(raw) > 1 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// paramBool reads a boolean parameter.
func paramBool(params map[string]json.RawMessage, key, where string) (bool, bool, error) {
	raw, ok := params[key]
	if !ok {
		return false, false, nil
	}
	switch string(raw) { // the common cases, without reflection
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, false, badRequest("%s: parameters.%s is %s, want true or false", where, key, quoteTok(raw))
	}
	return v, true, nil
}

// requestParams applies the request-level parameters both formats share:
// binary_data_output, priority, timeout (microseconds), and rejects the ones
// xserve does not implement. oipPriority maps OIP's priority (0 = default,
// 1 = highest) onto serving's (0 = highest).
func requestParams(d *Request, params map[string]json.RawMessage, oipPriority bool) error {
	var err error
	if d.binaryDefault, _, err = paramBool(params, "binary_data_output", "request"); err != nil {
		return err
	}
	p, ok, err := paramInt(params, "priority", "request")
	if err != nil {
		return err
	}
	if ok {
		if oipPriority && p > 0 {
			p--
		}
		if p < 0 {
			return badRequest("request: parameters.priority is %d, want >= 0", p)
		}
		d.Infer.Priority = int(p)
	}
	us, ok, err := paramInt(params, "timeout", "request")
	if err != nil {
		return err
	}
	if ok {
		if us < 0 {
			return badRequest("request: parameters.timeout is %d, want microseconds >= 0", us)
		}
		d.Timeout = time.Duration(us) * time.Microsecond
	}
	seq, err := sequenceParams(params)
	if err != nil {
		return err
	}
	d.Infer.Sequence = seq
	return nil
}

// sequenceParams reads Triton's sequence parameters: sequence_id (an
// integer or a string; 0 and "" mean none), sequence_start, sequence_end.
func sequenceParams(params map[string]json.RawMessage) (*serving.SequenceStep, error) {
	start, _, err := paramBool(params, "sequence_start", "request")
	if err != nil {
		return nil, err
	}
	end, _, err := paramBool(params, "sequence_end", "request")
	if err != nil {
		return nil, err
	}
	raw, ok := params["sequence_id"]
	var id string
	if ok {
		var n json.Number
		if err := json.Unmarshal(raw, &id); err != nil {
			if err := json.Unmarshal(raw, &n); err != nil || strings.ContainsAny(n.String(), ".eE-") {
				return nil, badRequest("request: parameters.sequence_id is %s, want an integer or a string", quoteTok(raw))
			}
			id = n.String()
		}
	}
	return SequenceStep(id, start, end)
}

// SequenceStep returns the serving step of Triton's sequence parameters as
// every protocol reads them: nil without a sequence id (id "" or "0"),
// an error when sequence_start or sequence_end come without one.
func SequenceStep(id string, start, end bool) (*serving.SequenceStep, error) {
	if id == "" || id == "0" {
		if start || end {
			return nil, badRequest("request: parameters.sequence_start or sequence_end without a sequence_id")
		}
		return nil, nil
	}
	if len(id) > 256 {
		return nil, badRequest("request: parameters.sequence_id is %d bytes long, want at most 256", len(id))
	}
	return &serving.SequenceStep{ID: id, Start: start, End: end}, nil
}

// outputParams reads one requested output's parameters.
func outputParams(d *Request, name string, params map[string]json.RawMessage) error {
	where := "output " + strconv.Quote(name)
	if name == "" {
		return badRequest("requested output with no name")
	}
	if _, ok := params["classification"]; ok {
		return badRequest("%s: parameters.classification: the classification extension is not supported", where)
	}
	if containsString(d.Infer.Outputs, name) {
		return badRequest("output %q is requested twice", name)
	}
	shared, err := sharedOutput(d, name, params)
	if err != nil {
		return err
	}
	b, ok, err := paramBool(params, "binary_data", where)
	if err != nil {
		return err
	}
	if shared && ok && b {
		return badRequest("%s: parameters.binary_data and parameters.%s: an output goes to shared memory or into the response, not both", where, paramShmRegion)
	}
	if ok {
		d.binaryOut[name] = b
	}
	d.Infer.Outputs = append(d.Infer.Outputs, name)
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// UnmarshalJSON decodes JSON into v, refusing trailing data and, when
// strict, unknown fields; its errors wrap ErrBadRequest and say where in
// what (e.g. "the request") the JSON went wrong.
func UnmarshalJSON(data []byte, v any, what string, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err, what)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid JSON: %s is followed by more data at byte %d", what, dec.InputOffset())
	}
	return nil
}

// jsonError turns an encoding/json error into a bad request that says where
// and what.
func jsonError(err error, what string) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrTooLarge): // ours, from an UnmarshalJSON
		return err
	case errors.As(err, &se):
		return badRequest("invalid JSON in %s at byte %d: %s", what, se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = what
		}
		return badRequest("invalid JSON in %s: %s is a JSON %s, want %s", what, field, te.Value, jsonTypeName(te.Type.String()))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("invalid JSON in %s: unexpected end of data", what)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return badRequest("invalid JSON in %s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
	}
	return badRequest("invalid JSON in %s: %v", what, err)
}

func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	}
	return goType
}

// ParseVersion reads a model version from a URL segment, a header or a JSON
// value ("" or absent = 0, the latest); anything but a positive integer is
// ErrBadRequest.
func ParseVersion(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, badRequest("model version %s is not a positive integer", quoteTok([]byte(s)))
	}
	return v, nil
}

// Response is an encoded inference response, ready to send.
type Response struct {
	// Body is the JSON response, followed by the raw bytes of the binary
	// outputs when HeaderLen >= 0.
	Body []byte
	// HeaderLen is the length of the JSON part when binary data follows it
	// (the value of the Inference-Header-Content-Length header), else -1.
	HeaderLen int
}

// appendOutputFields writes the dtype/shape/data (or binary_data_size) of an
// output and collects its binary bytes.
func appendOutputFields(b []byte, nt serving.NamedTensor, dtypeKey, dtype string, binary bool, bin *[][]byte) ([]byte, error) {
	t := nt.Tensor
	if t == nil {
		return nil, fmt.Errorf("payload: output %q: the backend returned no tensor", nt.Name)
	}
	b = append(b, '"')
	b = append(b, dtypeKey...)
	b = append(b, `":`...)
	b = appendJSONString(b, dtype)
	b = append(b, `,"shape":`...)
	b = appendShape(b, t.Shape)
	if binary {
		raw := binaryBytes(t)
		*bin = append(*bin, raw)
		b = append(b, `,"parameters":{"binary_data_size":`...)
		b = strconv.AppendInt(b, int64(len(raw)), 10)
		return append(b, '}'), nil
	}
	b = append(b, `,"data":`...)
	return appendJSONData(b, nt.Name, t)
}

// finishResponse appends the binary parts after the JSON header: in the
// header's own buffer when its spare capacity holds them (the encoders size
// it for the outputs, so a response is one allocation and the header is not
// copied), else in a new buffer.
func finishResponse(header []byte, bin [][]byte) Response {
	if len(bin) == 0 {
		return Response{Body: header, HeaderLen: -1}
	}
	size := len(header)
	for _, p := range bin {
		size += len(p)
	}
	body := header
	if cap(header) < size {
		body = make([]byte, 0, size)
		body = append(body, header...)
	}
	for _, p := range bin {
		body = append(body, p...)
	}
	return Response{Body: body, HeaderLen: len(header)}
}
