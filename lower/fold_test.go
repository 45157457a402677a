package lower_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/internal/onnxtestdata"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// TestCol2imStableHLOText: col2im is one scatter-add of the columns into
// the padded image, then a slice dropping the padding.
func TestCol2imStableHLOText(t *testing.T) {
	g := nnCall(fxgraph.AtenCol2im, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, 1, 5, 15)},
		func(in []*fxgraph.Node) []any {
			return []any{in[0], nnL(5, 5), nnL(1, 5), nnL(1, 1), nnL(0, 1), nnL(1, 1)}
		}, nil, 0)
	p, err := lower.New(lower.Options{}).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	text := string(p.Module)
	for _, w := range []string{`stablehlo.scatter`, `update_window_dims = [0, 1]`, `inserted_window_dims = [2]`,
		`scatter_dims_to_operand_dims = [2]`, `tensor<75x1xi32>`, `stablehlo.add`, `-> tensor<1x1x5x7xf32>`,
		`"stablehlo.slice"`, `-> tensor<1x1x5x5xf32>`} {
		if !strings.Contains(text, w) {
			t.Errorf("module lacks %q:\n%s", w, text)
		}
	}
}

// TestCol2imRun runs ONNX's own Col2Im cases (the onnx wheel's backend
// test data: 2-D and 3-D images, dilations, pads, strides) through the
// importer, this lowering and the PJRT plugin against the ONNX reference's
// outputs.
func TestCol2imRun(t *testing.T) {
	r := conformance.NewRunner(nnOpenPlugin(t))
	dir, err := onnxtestdata.Dir()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"test_col2im", "test_col2im_5d", "test_col2im_dilations", "test_col2im_pads", "test_col2im_strides"} {
		res := r.Run(context.Background(), conformance.Case{Suite: "node", Name: name, Dir: filepath.Join(dir, "node", name)})
		if res.Status != conformance.Passed || !slices.Contains(res.Targets, fxgraph.AtenCol2im.Name) {
			t.Errorf("%s: %s %s (lowered %v)", name, res.Status, res.Detail, res.Targets)
		}
	}
}
