package importer

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/fx"
	"github.com/xserve/xserve/importer/onnx"
)

// Formats lists the model file extensions Load understands.
var Formats = []string{".onnx", ".pt2"}

// Load imports the model file at path into a validated IR graph.
func Load(path string) (*fxgraph.Graph, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".onnx":
		return onnx.ImportFile(path)
	case ".pt2":
		return fx.ImportFile(path)
	default:
		return nil, fmt.Errorf("importer: %s: unknown model format %q (want one of %s)", path, ext, strings.Join(Formats, ", "))
	}
}
