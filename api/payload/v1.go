package payload

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// v1Request is the JSON of POST /v1/infer (see docs/HTTP.md).
type v1Request struct {
	Model      string                     `json:"model"`
	Version    json.RawMessage            `json:"version"`
	ID         string                     `json:"id"`
	Inputs     json.RawMessage            `json:"inputs"`
	Outputs    []v1Output                 `json:"outputs"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// v1Input is one entry of v1Request.Inputs.
type v1Input struct {
	DType      string                     `json:"dtype"`
	Shape      []int64                    `json:"shape"`
	Data       json.RawMessage            `json:"data"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// v1Output is a requested output: a name, or {"name": ..., "binary_data":
// bool, "parameters": {...}}.
type v1Output struct {
	Name       string
	BinaryData *bool
	Parameters map[string]json.RawMessage
}

// UnmarshalJSON reads either form of v1Output.
func (o *v1Output) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &o.Name)
	}
	var p struct {
		Name       string                     `json:"name"`
		BinaryData *bool                      `json:"binary_data"`
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := UnmarshalJSON(b, &p, "an output", true); err != nil {
		return err
	}
	o.Name, o.BinaryData, o.Parameters = p.Name, p.BinaryData, p.Parameters
	return nil
}

// DecodeV1 decodes the body of a /v1/infer request: JSON, or with the binary
// tensor extension a JSON header of headerLen bytes (the value of the
// Inference-Header-Content-Length header; "" when there is none) followed by
// the inputs' raw bytes. model is the model the transport names (a NATS
// subject); "" means the body must name it, and a body that names another
// one is refused. Tensors may point into body, which the caller must not
// reuse. No tensor declares more than maxElems elements.
func DecodeV1(body []byte, headerLen, model string, maxElems int64) (*Request, error) {
	return DecodeV1Within(body, headerLen, model, Limits{MaxElems: maxElems})
}

// DecodeV1Within is DecodeV1 with lim's checks before each input's data is
// decoded.
func DecodeV1Within(body []byte, headerLen, model string, lim Limits) (*Request, error) {
	header, rest, err := splitBody(body, headerLen)
	if err != nil {
		return nil, err
	}
	br := &binaryReader{rest: rest, hasHdr: strings.TrimSpace(headerLen) != ""}
	return decodeV1(header, br, model, &lim)
}

// decodeV1 decodes the JSON header of a /v1/infer request and takes the
// binary input bytes from br.
func decodeV1(header []byte, br *binaryReader, model string, lim *Limits) (*Request, error) {
	var r v1Request
	if err := UnmarshalJSON(header, &r, "the request", true); err != nil {
		return nil, err
	}
	switch {
	case r.Model == "" && model == "":
		return nil, badRequest(`the request names no "model"`)
	case r.Model == "":
		r.Model = model
	case model != "" && r.Model != model:
		return nil, badRequest("the request names model %q but was sent to model %q", r.Model, model)
	}
	d := &Request{Model: r.Model, Infer: &serving.InferRequest{ID: r.ID, Inputs: map[string]*tensor.Tensor{}}, binaryOut: map[string]bool{}}
	var err error
	if d.Version, err = versionFromJSON(r.Version); err != nil {
		return nil, err
	}
	if err := requestParams(d, r.Parameters, false); err != nil {
		return nil, err
	}
	for _, o := range r.Outputs {
		params := o.Parameters
		if o.BinaryData != nil {
			if params == nil {
				params = map[string]json.RawMessage{}
			}
			params["binary_data"] = json.RawMessage(strconv.FormatBool(*o.BinaryData))
		}
		if err := outputParams(d, o.Name, params); err != nil {
			return nil, err
		}
	}
	if len(r.Inputs) == 0 || string(r.Inputs) == "null" {
		return nil, badRequest(`the request has no "inputs" (want {"name": {"dtype": ..., "shape": [...], "data": [...]}, ...})`)
	}
	// Walk the inputs object in its written order: binary data follows it.
	dec := json.NewDecoder(bytes.NewReader(r.Inputs))
	dec.DisallowUnknownFields()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, badRequest(`"inputs" must be an object mapping input names to {"dtype", "shape", "data"}`)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(err, `"inputs"`)
		}
		name, _ := tok.(string)
		var in v1Input
		if err := dec.Decode(&in); err != nil {
			return nil, jsonError(err, "input "+strconv.Quote(name))
		}
		if _, dup := d.Infer.Inputs[name]; dup {
			return nil, badRequest("input %q is given twice", name)
		}
		t, err := decodeInput(tensorIn{name: name, dtype: in.DType, shape: in.Shape, data: in.Data, params: in.Parameters}, br, lim, d.Model, d.Version)
		if err != nil {
			return nil, err
		}
		d.Infer.Inputs[name] = t
	}
	if err := br.finish(); err != nil {
		return nil, err
	}
	return d, nil
}

// versionFromJSON reads "version": "2", 2, "" or null.
func versionFromJSON(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, badRequest("invalid JSON in \"version\": %v", err)
		}
	} else {
		s = string(raw)
	}
	return ParseVersion(s)
}

// EncodeV1 encodes the response of a /v1/infer request d: JSON, with the
// outputs d asks for in binary after the JSON header.
func EncodeV1(d *Request, resp *serving.InferResponse) (Response, error) {
	b := make([]byte, 0, 256+outputSizeHint(resp))
	b = append(b, `{"model":`...)
	b = appendJSONString(b, resp.ModelName)
	b = append(b, `,"version":`...)
	b = appendJSONString(b, strconv.FormatInt(resp.ModelVersion, 10))
	b = append(b, `,"id":`...)
	b = appendJSONString(b, resp.ID)
	b = append(b, `,"outputs":{`...)
	var bin [][]byte
	var err error
	for i, nt := range resp.Outputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, nt.Name)
		b = append(b, ":{"...)
		dt := tensor.Invalid
		if nt.Tensor != nil {
			dt = nt.Tensor.DType
		}
		if b, err = appendOutputFields(b, nt, "dtype", dt.String(), d.WantsBinary(nt.Name), &bin); err != nil {
			return Response{}, err
		}
		b = append(b, '}')
	}
	b = append(b, "}}"...)
	return finishResponse(b, bin), nil
}

// outputSizeHint guesses the JSON size of the outputs (about 12 bytes per
// element).
func outputSizeHint(resp *serving.InferResponse) int {
	n := 0
	for _, o := range resp.Outputs {
		if o.Tensor != nil {
			n += int(o.Tensor.NumElements()) * 12
		}
	}
	return min(n, 64<<20)
}
