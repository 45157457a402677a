package cpu

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"
)

var update = flag.Bool("update", false, "rewrite cpukernels/kernel_abi.h from abi.go")

// cpukernels is the C source directory of the kernels.
const cpukernels = "../../cpukernels"

// TestKernelABIHeader: the committed cpukernels/kernel_abi.h is the header
// abi.go generates (-update rewrites it), and common.h takes the activation
// codes from it rather than defining its own.
func TestKernelABIHeader(t *testing.T) {
	path := filepath.Join(cpukernels, "kernel_abi.h")
	if *update {
		if err := os.WriteFile(path, []byte(ABIHeader()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != ABIHeader() {
		t.Errorf("%s differs from what lower/cpu/abi.go generates: run go test ./lower/cpu -run TestKernelABIHeader -update", path)
	}
	common, err := os.ReadFile(filepath.Join(cpukernels, "common.h"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`#include "kernel_abi.h"`).Match(common) || regexp.MustCompile(`ACT_[A-Z_]+ = [0-9]`).Match(common) {
		t.Errorf("common.h must include kernel_abi.h and define no ACT_ values of its own")
	}
}

// macroOf is the kernel_abi.h macro suffix of target.
func macroOf(target string) string {
	for _, k := range kernels {
		if k.name == target {
			return k.macro
		}
	}
	return "?"
}

// TestKernelAttributes: each kernel's C source registers its target name
// and reads exactly the attributes the lowering emits (kernelAttrs), those
// common.c reads for every kernel with operands beyond two (has_bias,
// residual) included.
func TestKernelAttributes(t *testing.T) {
	read := regexp.MustCompile(`attr_[a-z]+\(f, "([a-z_]+)"`)
	attrsOf := func(file string) []string {
		t.Helper()
		src, err := os.ReadFile(filepath.Join(cpukernels, file))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range read.FindAllSubmatch(src, -1) {
			out = append(out, string(m[1]))
		}
		return out
	}
	common := attrsOf("common.c") // has_bias, residual (read_operands), site
	for _, c := range []struct {
		file     string
		targets  []string
		operands bool // reads has_bias and residual through read_operands
	}{
		{"conv.c", []string{ConvKernel}, true},
		{"matmul.c", []string{MatmulKernel}, true},
		{"pool.c", []string{PoolKernel, AvgPoolKernel}, false},
		{"norm.c", []string{SoftmaxKernel, LayerNormKernel}, false},
		{"qconv.c", []string{QConvKernel}, false},
	} {
		src, err := os.ReadFile(filepath.Join(cpukernels, c.file))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, target := range c.targets {
			if table, err := os.ReadFile(filepath.Join(cpukernels, "kernels.c")); err != nil || !regexp.MustCompile(`\{KERNEL_[A-Z]+, `+target+`\}`).Match(table) {
				t.Errorf("kernels.c does not list %s under its KERNEL_ name (%v)", target, err)
			}
			if !regexp.MustCompile(`\.kernel = (KERNEL_` + macroOf(target) + `|"` + target + `")`).Match(src) {
				t.Errorf("%s does not register kernel %s", c.file, target)
			}
			want = append(want, kernelAttrs[target]...)
		}
		got := attrsOf(c.file)
		if c.operands {
			if !regexp.MustCompile(`read_operands\(`).Match(src) {
				t.Errorf("%s does not read its operands with read_operands", c.file)
			}
			for _, a := range common {
				if a != "site" {
					got = append(got, a)
				}
			}
		}
		sort.Strings(got)
		slices.Sort(want)
		want = slices.Compact(want) // attributes two kernels of a file both read
		got = slices.Compact(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s reads attributes %v; the lowering emits %v", c.file, got, want)
		}
	}
}
