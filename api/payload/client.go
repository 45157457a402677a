package payload

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xserve/xserve/serving"
)

// EncodeV1Request encodes a /v1/infer request body: model ("" when the
// transport names it, as a NATS subject does), version (0: latest), the
// request id and the inputs, in order. With binary set, the inputs travel as
// raw bytes after the JSON header (the binary tensor extension) and the
// outputs are asked for in binary too; headerLen is then the JSON header's
// length (the Inference-Header-Content-Length value), else -1.
func EncodeV1Request(model string, version int64, id string, inputs []serving.NamedTensor, binary bool) (body []byte, headerLen int, err error) {
	b := []byte(`{`)
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	if model != "" {
		b = append(b, `"model":`...)
		b = appendJSONString(b, model)
	}
	if version > 0 {
		sep()
		b = append(b, `"version":`...)
		b = appendJSONString(b, strconv.FormatInt(version, 10))
	}
	if id != "" {
		sep()
		b = append(b, `"id":`...)
		b = appendJSONString(b, id)
	}
	sep()
	b = append(b, `"inputs":{`...)
	var bin [][]byte
	for i, in := range inputs {
		t := in.Tensor
		if t == nil {
			return nil, 0, fmt.Errorf("payload: input %q has no tensor", in.Name)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, in.Name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, t.DType.String())
		b = append(b, `,"shape":`...)
		b = appendShape(b, t.Shape)
		if binary {
			raw := binaryBytes(t)
			bin = append(bin, raw)
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(raw)), 10)
			b = append(b, "}}"...)
			continue
		}
		b = append(b, `,"data":`...)
		if b, err = appendJSONData(b, in.Name, t); err != nil {
			return nil, 0, fmt.Errorf("payload: input %q: %w", in.Name, err)
		}
		b = append(b, '}')
	}
	b = append(b, '}')
	if binary {
		b = append(b, `,"parameters":{"binary_data_output":true}`...)
	}
	b = append(b, '}')
	r := finishResponse(b, bin)
	return r.Body, r.HeaderLen, nil
}

// DecodeV1Response decodes the answer to a /v1/infer request: JSON, or
// with the binary tensor extension a JSON header of headerLen bytes (""
// when all JSON) followed by the binary outputs' raw bytes. No output may
// declare more than maxElems elements. The outputs keep the response's
// order; their tensors may point into body.
func DecodeV1Response(body []byte, headerLen string, maxElems int64) (*serving.InferResponse, error) {
	header, rest, err := splitBody(body, headerLen)
	if err != nil {
		return nil, fmt.Errorf("payload: response: %w", err)
	}
	r := &jsonReader{buf: header, what: "the response"}
	resp := &serving.InferResponse{}
	var version string
	var outs []tensorIn
	hasOutputs := false
	err = r.object("the response", func(key string) error {
		var err error
		switch {
		case fieldIs(key, "model"):
			resp.ModelName, err = r.stringField("model")
		case fieldIs(key, "version"):
			version, err = r.stringField("version")
		case fieldIs(key, "id"):
			resp.ID, err = r.stringField("id")
		case fieldIs(key, "outputs"):
			outs, hasOutputs = nil, r.peek() == '{'
			if !hasOutputs {
				_, err = r.skip()
				return err
			}
			err = r.object("outputs", func(name string) error {
				out, err := readV1Input(r, name, "output", false)
				outs = append(outs, out)
				return err
			})
		default:
			_, err = r.skip()
		}
		return err
	})
	if err == nil {
		err = r.end()
	}
	if err != nil {
		return nil, fmt.Errorf("payload: response: %w", err)
	}
	if resp.ModelVersion, err = ParseVersion(version); err != nil {
		return nil, fmt.Errorf("payload: response: %w", err)
	}
	if !hasOutputs {
		return nil, badRequest(`response: "outputs" is not an object of outputs by name`)
	}
	br := &binaryReader{rest: rest, hasHdr: strings.TrimSpace(headerLen) != ""}
	for _, out := range outs {
		t, err := decodeInput(out, br, &Limits{MaxElems: maxElems}, "", 0)
		if err != nil {
			return nil, fmt.Errorf("payload: response output %q: %w", out.name, err)
		}
		resp.Outputs = append(resp.Outputs, serving.NamedTensor{Name: out.name, Tensor: t})
	}
	if err := br.finish(); err != nil {
		return nil, fmt.Errorf("payload: response: %w", err)
	}
	return resp, nil
}
