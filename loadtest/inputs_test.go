package loadtest

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/xserve/xserve/tensor"
)

func writeNpy(t *testing.T, tt *tensor.Tensor) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.npy")
	if err := tensor.WriteNpyFile(path, tt); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInputsFromNpy(t *testing.T) {
	// Three rows of two: row r holds r*10, r*10+1.
	path := writeNpy(t, tensor.FromFloat32s([]float32{0, 1, 10, 11, 20, 21}, 3, 2))
	for _, tc := range []struct {
		batch int
		want  []string // each sample's shape and values
	}{
		{0, []string{"[3 2] [0 1 10 11 20 21]"}},
		{1, []string{"[1 2] [0 1]", "[1 2] [10 11]", "[1 2] [20 21]"}},
		{2, []string{"[2 2] [0 1 10 11]", "[2 2] [20 21 0 1]"}},
		{5, []string{"[5 2] [0 1 10 11 20 21 0 1 10 11]"}},
	} {
		samples, err := (&Inputs{Files: map[string]string{"x": path}, Batch: tc.batch}).Samples()
		if err != nil {
			t.Fatalf("batch %d: %v", tc.batch, err)
		}
		var got []string
		for _, s := range samples {
			got = append(got, fmt.Sprint(s["x"].Shape, " ", s["x"].Float64s()))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("batch %d: samples %v, want %v", tc.batch, got, tc.want)
		}
	}
}

func TestInputsRandom(t *testing.T) {
	spec, err := ParseRandomSpec("image=float32:1x3x32x32")
	if err != nil {
		t.Fatal(err)
	}
	if spec.String() != "image=float32:1x3x32x32" {
		t.Errorf("spec %s", spec)
	}
	ids, err := ParseRandomSpec("ids=int64:[1,7]")
	if err != nil {
		t.Fatal(err)
	}
	in := &Inputs{Random: []RandomSpec{spec, ids}, Batch: 4, Variants: 2, Seed: 3}
	a, err := in.Samples()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2 {
		t.Fatalf("%d samples, want 2", len(a))
	}
	if got := a[0]["image"].String(); got != "float32[4,3,32,32]" {
		t.Errorf("image %s, want float32[4,3,32,32]", got)
	}
	if got := a[1]["ids"].String(); got != "int64[4,7]" {
		t.Errorf("ids %s, want int64[4,7]", got)
	}
	for _, v := range a[0]["image"].Float64s() {
		if v < -1 || v >= 1 {
			t.Fatalf("random float %v outside [-1, 1)", v)
		}
	}
	for _, v := range a[0]["ids"].Int64s() {
		if v < 0 || v >= 10 {
			t.Fatalf("random int %v outside [0, 10)", v)
		}
	}
	if fmt.Sprint(a[0]["image"].Data) == fmt.Sprint(a[1]["image"].Data) {
		t.Errorf("two variants have the same random data")
	}
	b, _ := in.Samples()
	if fmt.Sprint(a[1]["image"].Data) != fmt.Sprint(b[1]["image"].Data) {
		t.Errorf("same seed, different data")
	}
}

func TestInputErrors(t *testing.T) {
	for _, s := range []string{"image", "=float32:1", "image=float32", "image=nope:1x2", "image=float32:1xa", "image=float32:-1", "s=string:2", "x=float32:1000000x1000000"} {
		if _, err := ParseRandomSpec(s); !errors.Is(err, ErrInput) {
			t.Errorf("ParseRandomSpec(%q) error %v, want ErrInput", s, err)
		}
	}
	scalar := writeNpy(t, tensor.Scalar(tensor.Float32, 1))
	for name, in := range map[string]*Inputs{
		"nothing":       {},
		"missing file":  {Files: map[string]string{"x": filepath.Join(t.TempDir(), "none.npy")}},
		"batch scalar":  {Files: map[string]string{"x": scalar}, Batch: 1},
		"random scalar": {Random: []RandomSpec{{Name: "x", DType: tensor.Float32}}, Batch: 2},
		"both":          {Files: map[string]string{"x": scalar}, Random: []RandomSpec{{Name: "x", DType: tensor.Float32}}},
		"twice":         {Random: []RandomSpec{{Name: "x", DType: tensor.Float32}, {Name: "x", DType: tensor.Float32}}},
	} {
		if _, err := in.Samples(); !errors.Is(err, ErrInput) {
			t.Errorf("%s: Samples error %v, want ErrInput", name, err)
		}
	}
}
