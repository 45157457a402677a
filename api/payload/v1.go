package payload

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// v1Request is POST /v1/infer's JSON (see docs/HTTP.md) as jsonReader
// reads it; unknown fields are refused.
type v1Request struct {
	Model      string
	Version    json.RawMessage
	ID         string
	Inputs     []tensorIn // in their written order: binary data follows it
	HasInputs  bool       // "inputs" was an object
	Outputs    []v1Output
	Parameters map[string]json.RawMessage
}

// v1Output is a requested output: a name, or {"name": ..., "binary_data":
// bool, "parameters": {...}}.
type v1Output struct {
	Name       string
	BinaryData *bool
	Parameters map[string]json.RawMessage
}

// readV1Request reads the JSON header of a /v1/infer request in one pass;
// each input's data stays a slice of header.
func readV1Request(header []byte) (*v1Request, error) {
	r := &jsonReader{buf: header, what: "the request"}
	req := &v1Request{}
	err := r.object("the request", func(key string) error {
		var err error
		switch {
		case fieldIs(key, "model"):
			req.Model, err = r.stringField("model")
		case fieldIs(key, "version"):
			req.Version, err = r.raw()
		case fieldIs(key, "id"):
			req.ID, err = r.stringField("id")
		case fieldIs(key, "parameters"):
			req.Parameters, err = r.rawMap("parameters")
		case fieldIs(key, "outputs"):
			req.Outputs = nil
			err = r.array("outputs", func(int) error {
				o, err := readV1Output(r)
				req.Outputs = append(req.Outputs, o)
				return err
			})
		case fieldIs(key, "inputs"):
			req.Inputs, req.HasInputs = nil, false
			if r.null() {
				return nil
			}
			if r.peek() != '{' {
				if err := r.checkValue(); err != nil {
					return err
				}
				return badRequest(`"inputs" must be an object mapping input names to {"dtype", "shape", "data"}`)
			}
			req.HasInputs = true
			err = r.object("inputs", func(name string) error {
				in, err := readV1Input(r, name, "input", true)
				req.Inputs = append(req.Inputs, in)
				return err
			})
		default:
			err = r.unknown(key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return req, r.end()
}

// readV1Input reads the value of inputs[name] (or of a response's
// outputs[name]); unknown fields are refused when strict.
func readV1Input(r *jsonReader, name, kind string, strict bool) (tensorIn, error) {
	in := tensorIn{name: name}
	what := r.what
	r.what = kind + " " + strconv.Quote(name)
	defer func() { r.what = what }()
	err := r.object(r.what, func(key string) error {
		var err error
		switch {
		case fieldIs(key, "dtype"):
			in.dtype, err = r.stringField("dtype")
		case fieldIs(key, "shape"):
			in.shape, err = r.int64s("shape")
		case fieldIs(key, "parameters"):
			in.params, err = r.rawMap("parameters")
		case fieldIs(key, "data"):
			in.data, err = r.data()
		case strict:
			err = r.unknown(key)
		default:
			_, err = r.skip()
		}
		return err
	})
	return in, err
}

// readV1Output reads either form of a requested output.
func readV1Output(r *jsonReader) (v1Output, error) {
	var o v1Output
	if r.peek() == '"' {
		s, err := r.str()
		o.Name = s
		return o, err
	}
	what := r.what
	r.what = "an output"
	defer func() { r.what = what }()
	err := r.object("an output", func(key string) error {
		var err error
		switch {
		case fieldIs(key, "name"):
			o.Name, err = r.stringField("name")
		case fieldIs(key, "binary_data"):
			if r.null() {
				o.BinaryData = nil
				return nil
			}
			switch r.peek() {
			case 't', 'f':
				v := r.buf[r.pos] == 't'
				if _, err := r.skip(); err != nil {
					return err
				}
				o.BinaryData = &v
			default:
				return r.typeErr("binary_data", "true or false")
			}
		case fieldIs(key, "parameters"):
			o.Parameters, err = r.rawMap("parameters")
		default:
			err = r.unknown(key)
		}
		return err
	})
	return o, err
}

// DecodeV1 decodes the body of a /v1/infer request: JSON, or with the binary
// tensor extension a JSON header of headerLen bytes (the value of the
// Inference-Header-Content-Length header; "" when there is none) followed by
// the inputs' raw bytes. model is the model the transport names (a NATS
// subject); "" means the body must name it, and a body that names another
// one is refused. Tensors may point into body, which the caller must not
// reuse. No tensor declares more than maxElems elements. With an error, the
// Request returned (when not nil) only names the model the body named,
// which the error's public message quotes as sent (payload.Public).
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
	r, err := readV1Request(header)
	if err != nil {
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
	if d.Version, err = versionFromJSON(r.Version); err != nil {
		return d, err
	}
	if err := requestParams(d, r.Parameters, false); err != nil {
		return d, err
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
			return d, err
		}
	}
	if !r.HasInputs {
		return d, badRequest(`the request has no "inputs" (want {"name": {"dtype": ..., "shape": [...], "data": [...]}, ...})`)
	}
	for _, in := range r.Inputs {
		if _, dup := d.Infer.Inputs[in.name]; dup {
			return d, badRequest("input %q is given twice", in.name)
		}
		t, err := decodeInput(in, br, lim, d.Model, d.Version)
		if err != nil {
			return d, err
		}
		d.Infer.Inputs[in.name] = t
	}
	if err := br.finish(); err != nil {
		return d, err
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
