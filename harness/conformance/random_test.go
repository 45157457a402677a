package conformance

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/onnx"
	"github.com/xserve/xserve/tensor"
)

func f32(vals ...float64) *tensor.Tensor {
	t := tensor.New(tensor.Float32, int64(len(vals)))
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return t
}

func bools(vals ...bool) *tensor.Tensor {
	t := tensor.New(tensor.Bool, int64(len(vals)))
	for i, v := range vals {
		if v {
			t.Data[i] = 1
		}
	}
	return t
}

// TestPropertyChecks checks that the property checks of the random cases
// accept outputs with the properties and reject each violation.
func TestPropertyChecks(t *testing.T) {
	x, ratio := f32(1, -2, 3, 4), tensor.Scalar(tensor.Float32, 0.5)
	for _, c := range []struct {
		name    string
		check   propertyCheck
		inputs  []*tensor.Tensor
		got     []*tensor.Tensor
		want    []*tensor.Tensor
		wantErr string // "" for accepted
	}{
		{"bernoulli ok", checkBernoulli, nil, []*tensor.Tensor{f32(0, 1, 1, 0)}, []*tensor.Tensor{f32(1, 0, 0, 0)}, ""},
		{"bernoulli non-binary", checkBernoulli, nil, []*tensor.Tensor{f32(0, 0.5, 1, 0)}, []*tensor.Tensor{f32(1, 0, 0, 0)}, "want 0 or 1"},
		{"bernoulli constant", checkBernoulli, nil, []*tensor.Tensor{f32(1, 1, 1, 1)}, []*tensor.Tensor{f32(1, 0, 0, 0)}, "all 4 samples"},
		{"bernoulli dtype", checkBernoulli, nil, []*tensor.Tensor{tensor.New(tensor.Float64, 4)}, []*tensor.Tensor{f32(1, 0, 0, 0)}, "want float32"},
		{"dropout ok", checkDropout, []*tensor.Tensor{x, ratio}, []*tensor.Tensor{f32(2, 0, 6, 0), bools(true, false, true, false)},
			[]*tensor.Tensor{f32(0, 0, 0, 0), bools(false, false, false, false)}, ""},
		{"dropout unscaled", checkDropout, []*tensor.Tensor{x, ratio}, []*tensor.Tensor{f32(1, 0, 3, 0)}, []*tensor.Tensor{f32(0, 0, 0, 0)}, "want 0 or x/(1-ratio)"},
		{"dropout mask disagrees", checkDropout, []*tensor.Tensor{x, ratio}, []*tensor.Tensor{f32(2, 0, 6, 0), bools(true, true, true, false)},
			[]*tensor.Tensor{f32(0, 0, 0, 0), bools(false, false, false, false)}, "where the mask is true"},
		{"dropout keeps all", checkDropout, []*tensor.Tensor{x, ratio}, []*tensor.Tensor{f32(2, -4, 6, 8)}, []*tensor.Tensor{f32(0, 0, 0, 0)}, "0 dropped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.check(c.inputs, c.got, c.want, 1e-3, 1e-5)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("error %v, want %q", err, c.wantErr)
			}
		})
	}
}

// TestRandomCasesExist checks that every case checked by properties is in
// the test data, so the list cannot go stale.
func TestRandomCasesExist(t *testing.T) {
	cases, err := ListCases(DefaultDataDir)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, c := range cases {
		ids[c.ID()] = true
	}
	for id := range BadData {
		if !ids[id] {
			t.Errorf("BadData lists %s, which the test data does not have", id)
		}
	}
	for id := range RandomCases {
		if !ids[id] {
			t.Errorf("RandomCases lists %s, which the test data does not have", id)
		}
		if randomCheck(id) == nil {
			t.Errorf("%s has no check", id)
		}
	}
}

// TestRedeclareContradictedInputs checks the workaround for test data that
// contradicts its model's declared input shapes, on the real cases: only
// the contradicted input changes, and the note names it.
func TestRedeclareContradictedInputs(t *testing.T) {
	for _, c := range []struct{ dir, note string }{
		{"node/test_castlike_FLOAT_to_BFLOAT16", "input like declared [3,4], the test data is [1]: declared shape replaced"},
		{"node/test_castlike_FLOAT_to_DOUBLE", ""},
		{"node/test_sequence_insert_at_back", ""},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dir := filepath.Join(DefaultDataDir, c.dir)
			m, err := onnx.ReadModelFile(filepath.Join(dir, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			note, err := redeclareContradictedInputs(m, dir)
			if err != nil || note != c.note {
				t.Fatalf("note %q, error %v; want %q", note, err, c.note)
			}
			if c.note != "" && len(m.Graph.Inputs[1].Type.Dims) != 1 {
				t.Errorf("like is declared %v after the workaround, want the data's [1]", m.Graph.Inputs[1].Type.Dims)
			}
		})
	}
}
