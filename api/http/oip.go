package httpapi

import (
	"strconv"

	"github.com/xserve/xserve/api/payload"
	"github.com/xserve/xserve/serving"
)

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
			r = append(r, oipTensorMeta{Name: s.Name, Datatype: payload.OIPDatatype(s.DType), Shape: shape})
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
