package platforms_test

import (
	"slices"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/platforms"
	"github.com/xserve/xserve/tensor"
)

// addGraph is a + b of dtype dt, [4].
func addGraph(dt tensor.DType) *fxgraph.Graph {
	g := fxgraph.New()
	a := g.AddPlaceholder("a", fxgraph.Static(dt, 4))
	b := g.AddPlaceholder("b", fxgraph.Static(dt, 4))
	g.SetOutput(g.AddCall(fxgraph.AtenAddTensor, []any{a, b}, nil))
	return g
}

// TestCheck lowers a float64 and an int64 sum for each platform and checks
// what Platform.Check says of the program: the TPU narrows both (nothing
// lacked, nothing slow), CUDA keeps them and computes them slowly, the CPU
// computes them natively.
func TestCheck(t *testing.T) {
	cases := []struct {
		platform string
		dt       tensor.DType
		want     []string // findings, "lacks|slow what"
	}{
		{"cpu", tensor.Float64, nil},
		{"cpu", tensor.Int64, nil},
		{"cuda", tensor.Float64, []string{"slow f64 arithmetic"}},
		{"cuda", tensor.Int64, []string{"slow i64 arithmetic"}},
		{"tpu", tensor.Float64, nil},
		{"tpu", tensor.Int64, nil},
	}
	for _, c := range cases {
		t.Run(c.platform+"/"+c.dt.String(), func(t *testing.T) {
			prog, err := platforms.New(lower.Options{Platform: c.platform}).Lower(addGraph(c.dt), nil)
			if err != nil {
				t.Fatal(err)
			}
			p, err := platforms.Named(c.platform)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range p.Check(prog.Usage) {
				how := "slow"
				if f.Lacks {
					how = "lacks"
				}
				got = append(got, how+" "+f.What)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %q, want %q\n%s", got, c.want, prog.Module)
			}
		})
	}
}

// TestCheckLacks: a program lowered for the CPU without narrowing, checked
// as a TPU program, lacks its f64 values; its custom calls to the CPU
// kernels, checked as a CUDA program, are lacked too (harness/zoo's
// TestZooPlatforms checks those on the zoo).
func TestCheckLacks(t *testing.T) {
	prog, err := platforms.New(lower.Options{Platform: "cpu"}).Lower(addGraph(tensor.Float64), nil)
	if err != nil {
		t.Fatal(err)
	}
	tpu, _ := platforms.Named("tpu")
	f := tpu.Check(prog.Usage)
	if len(f) == 0 || !f[0].Lacks || f[0].What != "f64 values" || f[0].Count != 3 {
		t.Errorf("tpu check of a cpu f64 program: %v, want f64 values lacked (3: two parameters, one sum)", f)
	}
	if _, err := platforms.Named("metal"); err == nil {
		t.Error("platform metal found")
	}
}
