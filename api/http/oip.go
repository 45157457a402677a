package httpapi

import (
	"encoding/json"
	"strconv"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// oipRequest is the JSON of an Open Inference Protocol inference request.
// Unknown fields are ignored, as the protocol's clients may send extensions.
type oipRequest struct {
	ID         string                     `json:"id"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Inputs     []oipInput                 `json:"inputs"`
	Outputs    []oipOutput                `json:"outputs"`
}

type oipInput struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

type oipOutput struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// decodeOIP decodes the JSON header of a /v2/models/{m}/infer request and
// takes the binary input bytes from br, in input order.
func decodeOIP(model string, version int64, header []byte, br *binaryReader, maxElems int64) (*decoded, error) {
	var r oipRequest
	if err := unmarshalJSON(header, &r, "the request", false); err != nil {
		return nil, err
	}
	d := &decoded{model: model, version: version, req: &serving.InferRequest{ID: r.ID, Inputs: map[string]*tensor.Tensor{}}, binaryOut: map[string]bool{}}
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
		if in.Name == "" {
			return nil, badRequest("inputs[%d] has no name", i)
		}
		if _, dup := d.req.Inputs[in.Name]; dup {
			return nil, badRequest("input %q is given twice", in.Name)
		}
		t, err := decodeInput(tensorIn{name: in.Name, dtype: in.Datatype, shape: in.Shape, data: in.Data, params: in.Parameters}, br, maxElems)
		if err != nil {
			return nil, err
		}
		d.req.Inputs[in.Name] = t
	}
	if err := br.finish(); err != nil {
		return nil, err
	}
	return d, nil
}

// encodeOIP writes an Open Inference Protocol inference response.
func encodeOIP(d *decoded, resp *serving.InferResponse) (encodedResponse, error) {
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
		dt := tensor.Invalid
		if nt.Tensor != nil {
			dt = nt.Tensor.DType
		}
		if b, err = appendOutputFields(b, nt, "datatype", oipDatatype(dt), d.wantsBinary(nt.Name), &bin); err != nil {
			return encodedResponse{}, err
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	return finishResponse(b, bin), nil
}

// oipTensorMeta is a tensor of model metadata.
type oipTensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// oipModelMeta is the model metadata response.
type oipModelMeta struct {
	Name     string          `json:"name"`
	Versions []string        `json:"versions"`
	Platform string          `json:"platform"`
	Inputs   []oipTensorMeta `json:"inputs"`
	Outputs  []oipTensorMeta `json:"outputs"`
}

func modelMeta(m *serving.Metadata) oipModelMeta {
	out := oipModelMeta{Name: m.Name, Platform: m.Platform, Versions: []string{}, Inputs: []oipTensorMeta{}, Outputs: []oipTensorMeta{}}
	for _, v := range m.Versions {
		out.Versions = append(out.Versions, strconv.FormatInt(v, 10))
	}
	if len(out.Versions) == 0 && m.Version > 0 {
		out.Versions = append(out.Versions, strconv.FormatInt(m.Version, 10))
	}
	conv := func(specs []serving.TensorSpec) []oipTensorMeta {
		r := []oipTensorMeta{}
		for _, s := range specs {
			shape := s.Shape
			if shape == nil {
				shape = []int64{}
			}
			r = append(r, oipTensorMeta{Name: s.Name, Datatype: oipDatatype(s.DType), Shape: shape})
		}
		return r
	}
	out.Inputs, out.Outputs = conv(m.Inputs), conv(m.Outputs)
	return out
}

// oipIndexEntry is one entry of the repository index.
type oipIndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}
