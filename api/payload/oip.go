package payload

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// oipRequest is an Open Inference Protocol inference request as
// jsonReader reads it. Unknown fields are ignored, as the protocol's clients
// may send extensions.
type oipRequest struct {
	ID         string
	Parameters map[string]json.RawMessage
	Inputs     []tensorIn
	Outputs    []oipOutput
}

type oipOutput struct {
	Name       string
	Parameters map[string]json.RawMessage
}

// readOIPRequest reads the JSON header of a /v2/models/{m}/infer request in
// one pass; each input's data stays a slice of header.
func readOIPRequest(header []byte) (*oipRequest, error) {
	r := &jsonReader{buf: header, what: "the request"}
	req := &oipRequest{}
	err := r.object("the request", func(key string) error {
		var err error
		switch {
		case fieldIs(key, "id"):
			req.ID, err = r.stringField("id")
		case fieldIs(key, "parameters"):
			req.Parameters, err = r.rawMap("parameters")
		case fieldIs(key, "inputs"):
			req.Inputs = nil
			err = r.array("inputs", func(int) error {
				in, err := readOIPInput(r)
				req.Inputs = append(req.Inputs, in)
				return err
			})
		case fieldIs(key, "outputs"):
			req.Outputs = nil
			err = r.array("outputs", func(int) error {
				var o oipOutput
				err := r.object("outputs", func(key string) error {
					var err error
					switch {
					case fieldIs(key, "name"):
						o.Name, err = r.stringField("outputs.name")
					case fieldIs(key, "parameters"):
						o.Parameters, err = r.rawMap("outputs.parameters")
					default:
						_, err = r.skip()
					}
					return err
				})
				req.Outputs = append(req.Outputs, o)
				return err
			})
		default:
			_, err = r.skip()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return req, r.end()
}

// readOIPInput reads one entry of "inputs".
func readOIPInput(r *jsonReader) (tensorIn, error) {
	var in tensorIn
	err := r.object("inputs", func(key string) error {
		var err error
		switch {
		case fieldIs(key, "name"):
			in.name, err = r.stringField("inputs.name")
		case fieldIs(key, "shape"):
			in.shape, err = r.int64s("inputs.shape")
		case fieldIs(key, "datatype"):
			in.dtype, err = r.stringField("inputs.datatype")
		case fieldIs(key, "parameters"):
			in.params, err = r.rawMap("inputs.parameters")
		case fieldIs(key, "data"):
			in.data, err = r.data()
		default:
			_, err = r.skip()
		}
		return err
	})
	return in, err
}

// DecodeOIP decodes the body of an Open Inference Protocol request for model
// version (0: latest), as /v2/models/{model}[/versions/{version}]/infer
// receives it: JSON, or with the binary tensor extension a JSON header of
// headerLen bytes followed by the inputs' raw bytes in input order. Tensors
// may point into body. No tensor declares more than maxElems elements.
func DecodeOIP(model string, version int64, body []byte, headerLen string, maxElems int64) (*Request, error) {
	return DecodeOIPWithin(model, version, body, headerLen, Limits{MaxElems: maxElems})
}

// DecodeOIPWithin is DecodeOIP with lim's checks before each input's data
// is decoded.
func DecodeOIPWithin(model string, version int64, body []byte, headerLen string, lim Limits) (*Request, error) {
	header, rest, err := splitBody(body, headerLen)
	if err != nil {
		return nil, err
	}
	br := &binaryReader{rest: rest, hasHdr: strings.TrimSpace(headerLen) != ""}
	return decodeOIP(model, version, header, br, &lim)
}

// decodeOIP decodes the JSON header of a /v2/models/{m}/infer request and
// takes the binary input bytes from br, in input order.
func decodeOIP(model string, version int64, header []byte, br *binaryReader, lim *Limits) (*Request, error) {
	r, err := readOIPRequest(header)
	if err != nil {
		return nil, err
	}
	d := &Request{Model: model, Version: version, Infer: &serving.InferRequest{ID: r.ID, Inputs: map[string]*tensor.Tensor{}}, binaryOut: map[string]bool{}}
	d.shared = lim.Shared
	if err := requestParams(d, r.Parameters, true); err != nil {
		return nil, err
	}
	for _, o := range r.Outputs {
		if err := outputParams(d, o.Name, o.Parameters); err != nil {
			return nil, err
		}
	}
	if len(r.Inputs) == 0 {
		return nil, badRequest(`the request has no "inputs" (want [{"name", "shape", "datatype", "data"}, ...])`)
	}
	for i, in := range r.Inputs {
		if in.name == "" {
			return nil, badRequest("inputs[%d] has no name", i)
		}
		if _, dup := d.Infer.Inputs[in.name]; dup {
			return nil, badRequest("input %q is given twice", in.name)
		}
		t, err := decodeInput(in, br, lim, model, version)
		if err != nil {
			return nil, err
		}
		d.Infer.Inputs[in.name] = t
	}
	if err := br.finish(); err != nil {
		return nil, err
	}
	return d, nil
}

// EncodeOIP encodes an Open Inference Protocol inference response to d.
func EncodeOIP(d *Request, resp *serving.InferResponse) (Response, error) {
	b := make([]byte, 0, 256+outputSizeHint(resp))
	b = append(b, `{"model_name":`...)
	b = appendJSONString(b, resp.ModelName)
	b = append(b, `,"model_version":`...)
	b = appendJSONString(b, strconv.FormatInt(resp.ModelVersion, 10))
	if resp.ID != "" {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, resp.ID)
	}
	b = append(b, `,"outputs":[`...)
	var bin [][]byte
	var err error
	for i, nt := range resp.Outputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, nt.Name)
		b = append(b, ',')
		if ref, ok := d.sharedOut[nt.Name]; ok {
			if b, err = appendSharedOutput(b, d, nt, ref); err != nil {
				return Response{}, err
			}
			b = append(b, '}')
			continue
		}
		dt := tensor.Invalid
		if nt.Tensor != nil {
			dt = nt.Tensor.DType
		}
		if b, err = appendOutputFields(b, nt, "datatype", OIPDatatype(dt), d.WantsBinary(nt.Name), &bin); err != nil {
			return Response{}, err
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	return finishResponse(b, bin), nil
}
