package serving

import (
	"os"
	"slices"
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/internal/onnxtestdata"
	"github.com/xserve/xserve/tensor"
)

// nonzeroCase returns ONNX's own NonZero conformance case (in the onnx
// wheel make venv installs).
func nonzeroCase(t *testing.T) string {
	t.Helper()
	dir, err := onnxtestdata.Case("node/test_nonzero_example")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func readTensorPB(t *testing.T, path string) *tensor.Tensor {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (make venv installs the ONNX test data)", err)
	}
	x, _, err := onnx.DecodeTensor(data)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestDataDependentOutputSizes serves a model whose output size depends on
// the values (NonZero): the program returns the output padded to a bound
// with a count, and the server answers with exactly the counted entries
// and no count output.
func TestDataDependentOutputSizes(t *testing.T) {
	r := newRepo(t)
	nz := nonzeroCase(t)
	r.add("nonzero", 1, nz+"/model.onnx")
	m, _ := start(t, r, nil)
	md, err := m.Metadata("nonzero", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Outputs) != 1 || md.Outputs[0].Name != "result" {
		t.Fatalf("outputs %+v: want the model's one output, no count", md.Outputs)
	}
	in := readTensorPB(t, nz+"/test_data_set_0/input_0.pb")
	want := readTensorPB(t, nz+"/test_data_set_0/output_0.pb")
	got := infer(t, m, "nonzero", 0, map[string]*tensor.Tensor{"condition": in}).Outputs
	if len(got) != 1 || !slices.Equal(got[0].Tensor.Shape, want.Shape) || !slices.Equal(got[0].Tensor.Data, want.Data) {
		t.Errorf("NonZero: got %v %v, want ONNX's %v %v", got[0].Tensor, got[0].Tensor.Data, want, want.Data)
	}
	for _, c := range []struct {
		fill bool
		rows int64
	}{{true, 4}, {false, 0}} {
		x := tensor.New(tensor.Bool, 2, 2)
		for i := range x.Data {
			if c.fill {
				x.Data[i] = 1
			}
		}
		out := infer(t, m, "nonzero", 0, map[string]*tensor.Tensor{"condition": x}).Outputs[0].Tensor
		if !slices.Equal(out.Shape, []int64{2, c.rows}) {
			t.Errorf("NonZero of all %v: shape %v, want [2 %d]", c.fill, out.Shape, c.rows)
		}
	}
}
