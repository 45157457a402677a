package pjrt

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCPUKernels: a CPU client loads the kernel library `make pjrt`
// installs next to the plugin and registers its targets; XSERVE_CPU_KERNELS
// turns it off or names another library, and a library that cannot be
// loaded fails Open when named explicitly; XSERVE_CPU_KERNELS_SKIP hides
// targets from Kernels.
func TestCPUKernels(t *testing.T) {
	c := testClient(t)
	if !slices.Contains(c.Kernels(), "xserve_conv_f32") {
		t.Fatalf("Kernels() = %v (error %v), want xserve_conv_f32: run make pjrt", c.Kernels(), c.KernelsError())
	}
	lib := filepath.Join(filepath.Dir(c.PluginPath()), CPUKernelsFile)
	if c.KernelsFile() != lib {
		t.Errorf("KernelsFile() = %q, want %q", c.KernelsFile(), lib)
	}

	t.Run("off", func(t *testing.T) {
		t.Setenv(EnvCPUKernels, "off")
		c2, err := Open(c.PluginPath())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if len(c2.Kernels()) != 0 || c2.KernelsError() != nil {
			t.Errorf("with %s=off: Kernels() = %v, KernelsError() = %v, want none", EnvCPUKernels, c2.Kernels(), c2.KernelsError())
		}
	})
	t.Run("named", func(t *testing.T) {
		t.Setenv(EnvCPUKernels, lib)
		c2, err := Open(c.PluginPath())
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		if !slices.Equal(c2.Kernels(), c.Kernels()) {
			t.Errorf("Kernels() = %v, want %v", c2.Kernels(), c.Kernels())
		}
	})
	t.Run("skip", func(t *testing.T) {
		all := c.Kernels()
		t.Setenv(EnvCPUKernelsSkip, "xserve_matmul_f32,xserve_softmax_f32")
		want := slices.DeleteFunc(slices.Clone(all), func(k string) bool { return k == "xserve_matmul_f32" || k == "xserve_softmax_f32" })
		if got := c.Kernels(); !slices.Equal(got, want) || len(want) != len(all)-2 {
			t.Errorf("with %s: Kernels() = %v, want %v (of %v)", EnvCPUKernelsSkip, got, want, all)
		}
	})
	t.Run("missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), CPUKernelsFile)
		t.Setenv(EnvCPUKernels, missing)
		if c2, err := Open(c.PluginPath()); err == nil {
			c2.Close()
			t.Fatal("Open succeeded with a missing kernel library")
		} else if !strings.Contains(err.Error(), EnvCPUKernels) || !strings.Contains(err.Error(), missing) {
			t.Errorf("error %q does not name %s and the file", err, EnvCPUKernels)
		}
	})
	t.Run("not a kernel library", func(t *testing.T) {
		t.Setenv(EnvCPUKernels, c.PluginPath())
		if c2, err := Open(c.PluginPath()); err == nil {
			c2.Close()
			t.Fatal("Open succeeded with the plugin as the kernel library")
		} else if !strings.Contains(err.Error(), "xserve_cpu_kernels") {
			t.Errorf("error %q does not say the library lacks the kernel table", err)
		}
	})
	if _, err := os.Stat(lib); err != nil {
		t.Fatal(err)
	}
}

// TestOpenMPSpin: loading the kernels sets GOMP_SPINCOUNT for libgomp,
// which reads it as it loads with them, unless the environment chose a
// spin count or a wait policy itself.
func TestOpenMPSpin(t *testing.T) {
	for _, c := range []struct{ spin, policy, want string }{
		{"", "", openMPSpin},
		{"5", "", "5"},
		{"", "passive", ""},
	} {
		t.Run(fmt.Sprintf("GOMP_SPINCOUNT=%q OMP_WAIT_POLICY=%q", c.spin, c.policy), func(t *testing.T) {
			t.Setenv("GOMP_SPINCOUNT", c.spin)
			t.Setenv("OMP_WAIT_POLICY", c.policy)
			setOpenMPSpin()
			if got := os.Getenv("GOMP_SPINCOUNT"); got != c.want {
				t.Errorf("GOMP_SPINCOUNT = %q, want %q", got, c.want)
			}
		})
	}
}
