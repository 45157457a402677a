package zoo

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/lower/platforms"
)

// TestZooPlatforms lowers every committed zoo fixture, in both formats at
// its first reference case's sizes, for the cuda and tpu platforms: no
// program has a custom call (the CPU kernels' or any other) and none uses
// what the platform lacks (lower.Platform.Check). The same model lowered
// for the CPU with its kernels, checked as a CUDA program, lacks the
// kernels' custom calls: the check sees what it must refuse.
func TestZooPlatforms(t *testing.T) {
	withKernels := 0 // models whose cpu program calls the kernels
	for _, model := range zooModels {
		dir := filepath.Join(fixtureDir, model)
		m, err := ReadManifest(dir)
		if err != nil {
			t.Errorf("%s: %v", model, err)
			continue
		}
		for _, format := range Formats {
			t.Run(model+"/"+format, func(t *testing.T) {
				g, dims := importAtFirstCase(t, dir, m, format)
				for _, name := range []string{"cuda", "tpu"} {
					p, err := platforms.Named(name)
					if err != nil {
						t.Fatal(err)
					}
					prog, err := platforms.New(lower.Options{Platform: name}).Lower(g, dims)
					if err != nil {
						t.Fatalf("lower for %s: %v", name, err)
					}
					if n := prog.Usage.Ops["stablehlo.custom_call"]; n > 0 || bytes.Contains(prog.Module, []byte("custom_call")) {
						t.Errorf("%s: %d custom calls %v", name, n, prog.Usage.CustomCalls)
					}
					for _, f := range p.Check(prog.Usage) {
						if f.Lacks {
							t.Errorf("%s lacks %s (%d)", name, f.What, f.Count)
						}
					}
				}
				kernels := []string{cpu.ConvKernel, cpu.MatmulKernel}
				prog, err := platforms.New(lower.Options{Platform: "cpu", Kernels: kernels}).Lower(g, dims)
				if err != nil {
					t.Fatalf("lower for cpu: %v", err)
				}
				calls := prog.Usage.CustomCalls[cpu.ConvKernel] + prog.Usage.CustomCalls[cpu.MatmulKernel]
				if calls == 0 {
					return // the kernels took nothing (no float32 product big enough)
				}
				withKernels++
				cuda, _ := platforms.Named("cuda")
				lacked := 0
				for _, f := range cuda.Check(prog.Usage) {
					if f.Lacks {
						lacked += f.Count
					}
				}
				if lacked != calls {
					t.Errorf("the cpu program has %d kernel calls, checked for cuda %d are lacked: %v", calls, lacked, cuda.Check(prog.Usage))
				}
			})
		}
	}
	if withKernels == 0 {
		t.Error("no cpu program called the kernels: the check of what cuda lacks was not exercised")
	}
	t.Logf("%d of %d cpu programs call the kernels, each lacked on cuda", withKernels, 2*len(zooModels))
}

// importAtFirstCase imports the model's format and binds the sizes of its
// first reference case.
func importAtFirstCase(t *testing.T, dir string, m *Manifest, format string) (*fxgraph.Graph, map[string]int64) {
	t.Helper()
	file := "model." + format
	if info, ok := m.Formats[format]; ok && info.File != "" {
		file = info.File
	}
	model, err := importer.Open(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) == 0 {
		t.Fatal("the manifest has no reference case")
	}
	inputs, err := bindInputs(dir, model.Graph, m.Cases[0].Inputs)
	if err != nil {
		t.Fatal(err)
	}
	dims, err := model.Graph.BindDims(inputs)
	if err != nil {
		t.Fatal(err)
	}
	g, err := model.At(dims)
	if err != nil {
		t.Fatal(err)
	}
	return g, dims
}
