package serving

import (
	"errors"
	"testing"

	"github.com/xserve/xserve/tensor"
)

func TestCheckInput(t *testing.T) {
	r := newRepo(t)
	r.add("tinycnn", 1, tinyCNN)
	r.config("tinycnn", "buckets:\n  batch: [1, 2]\n")
	m, _ := start(t, r, nil)
	for _, tc := range []struct {
		name, input string
		dt          tensor.DType
		shape       []int64
		want        error
	}{
		{"fits", "image", tensor.Float32, []int64{2, 3, 32, 32}, nil},
		{"unknown input", "picture", tensor.Float32, []int64{1, 3, 32, 32}, ErrInvalidInput},
		{"dtype", "image", tensor.Float64, []int64{1, 3, 32, 32}, ErrInvalidInput},
		{"rank", "image", tensor.Float32, []int64{3, 32, 32}, ErrInvalidInput},
		{"static dim", "image", tensor.Float32, []int64{1, 4, 32, 32}, ErrInvalidInput},
		{"batch over the buckets", "image", tensor.Float32, []int64{20000, 3, 32, 32}, ErrNoBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.CheckInput("tinycnn", 0, tc.input, tc.dt, tc.shape)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("CheckInput: %v, want %v", err, tc.want)
			}
		})
	}
	if err := m.CheckInput("nope", 0, "image", tensor.Float32, []int64{1, 3, 32, 32}); !errors.Is(err, ErrModelNotFound) {
		t.Errorf("unknown model: %v", err)
	}
}
