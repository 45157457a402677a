package importer

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/xserve/xserve/importer/fx"
	"github.com/xserve/xserve/importer/onnx"
)

// Unsupported is one operator of a model file that xserve cannot import,
// with the nodes that use it.
type Unsupported struct {
	Op     string   // operator: an ONNX op type, or an ATen / custom target of a .pt2
	Domain string   // ONNX domain ("" default), or the .pt2 operator's namespace (aten, mylib)
	Opset  int64    // the ONNX model's opset for Domain; 0 for .pt2
	Nodes  []string // names of the nodes that use it
}

// UnsupportedOps lists every operator of the model file at path that has no
// converter, all at once (Load stops at the first). An empty list means
// every operator is known; Load may still refuse particular attributes or
// shapes.
func UnsupportedOps(path string) ([]Unsupported, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".onnx":
		m, err := onnx.ReadModelFile(path)
		if err != nil {
			return nil, err
		}
		var out []Unsupported
		for _, u := range onnx.NewImporter().UnsupportedOps(m) {
			out = append(out, Unsupported{Op: u.Op, Domain: u.Domain, Opset: u.Opset, Nodes: u.Nodes})
		}
		return out, nil
	case ".pt2":
		ops, err := fx.UnsupportedOpsFile(path)
		if err != nil {
			return nil, err
		}
		var out []Unsupported
		for _, u := range ops {
			ns, _, _ := strings.Cut(strings.TrimPrefix(u.Target, "torch.ops."), ".")
			out = append(out, Unsupported{Op: u.Target, Domain: ns, Nodes: u.Nodes})
		}
		return out, nil
	default:
		return nil, fmt.Errorf("importer: %s: unknown model format %q (want one of %s)", path, ext, strings.Join(Formats, ", "))
	}
}
