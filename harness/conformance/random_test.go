package conformance

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/internal/onnxtestdata"
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
	cases, err := ListCases(dataDir(t))
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

// dataDir is the onnx wheel's backend test data (make venv installs it).
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := onnxtestdata.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
