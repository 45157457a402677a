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

// Load imports the model file at path into a validated IR graph (a
// deferred one for a model whose import waits for its input sizes: see
// Open).
func Load(path string) (*fxgraph.Graph, error) {
	m, err := Open(path)
	if err != nil {
		return nil, err
	}
	return m.Graph, nil
}

// Model is an imported model file: its graph and what its importer needs
// to import it again at concrete input sizes, for a model whose graph waits
// for them (an ONNX model whose shape computations decide its control
// flow: fxgraph.Graph.IsDeferred). The importer hands it over whole: nothing
// below calls back into the importer.
type Model struct {
	// Graph is the model's graph: deferred, or the one for every size.
	Graph *fxgraph.Graph
	// onnx is the decoded ONNX model of a deferred graph.
	onnx *onnx.Model
	im   *onnx.Importer
}

// Open imports the model file at path.
func Open(path string) (*Model, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".onnx":
		m, err := onnx.ReadModelFile(path)
		if err != nil {
			return nil, err
		}
		im := onnx.NewImporter()
		g, err := im.Import(m)
		if err != nil {
			return nil, err
		}
		out := &Model{Graph: g}
		if g.IsDeferred() {
			out.onnx, out.im = m, im
		}
		return out, nil
	case ".pt2":
		g, err := fx.ImportFile(path)
		if err != nil {
			return nil, err
		}
		return &Model{Graph: g}, nil
	default:
		return nil, fmt.Errorf("importer: %s: unknown model format %q (want one of %s)", path, ext, strings.Join(Formats, ", "))
	}
}

// At returns the model's graph for the sizes dims gives its symbols: Graph
// itself, or, for a deferred graph, the model imported at those sizes (its
// inputs and outputs those of Graph; the counts of outputs whose size
// depends on the data and guard outputs may follow).
func (m *Model) At(dims map[string]int64) (*fxgraph.Graph, error) {
	if m.onnx == nil {
		return m.Graph, nil
	}
	g, err := m.im.ImportAt(m.onnx, onnx.ImportOptions{}, dims)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	if g.DeclaredOutputs() != m.Graph.DeclaredOutputs() || len(g.Placeholders()) != len(m.Graph.Placeholders()) {
		return nil, fmt.Errorf("importer: import at %v: %d inputs and %d outputs, the model declares %d and %d",
			dims, len(g.Placeholders()), g.DeclaredOutputs(), len(m.Graph.Placeholders()), m.Graph.DeclaredOutputs())
	}
	return g, nil
}
