package pjrt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPluginPackage(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, body string) string {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	site := "venv/lib/python3.12/site-packages/"
	cuda := write(site+"jax_plugins/xla_cuda13/xla_cuda_plugin.so", "")
	write(site+"jax-0.11.2.dist-info/RECORD", "jax/__init__.py,sha256=x,1\n")
	write(site+"jax_cuda13_pjrt-0.11.2.dist-info/RECORD",
		"jax_plugins/xla_cuda13/__init__.py,sha256=a,1\njax_plugins/xla_cuda13/xla_cuda_plugin.so,sha256=b,2\n")
	tpu := write(site+"libtpu/libtpu.so", "")
	write(site+"libtpu-0.0.30.dist-info/RECORD", "libtpu/libtpu.so,sha256=c,3\n")
	lone := write("elsewhere/plugin.so", "")
	image := write("opt/pjrt/libtpu.so", "")
	write("opt/pjrt/VERSION", "libtpu 0.0.30\nwheel libtpu-0.0.30-cp312-cp312-manylinux_2_31_x86_64.whl\n")
	link := filepath.Join(dir, "opt/pjrt/plugin.so")
	if err := os.Symlink("libtpu.so", link); err != nil {
		t.Fatal(err)
	}
	linkElsewhere := filepath.Join(dir, "bin/plugin.so")
	if err := os.MkdirAll(filepath.Dir(linkElsewhere), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cuda, linkElsewhere); err != nil {
		t.Fatal(err)
	}

	// The CPU plugin `make pjrt` installed: its VERSION file.
	real, err := FindPlugin(FindOptions{RepoRoot: ".."})
	if err != nil {
		t.Fatalf("the PJRT CPU plugin (make pjrt): %v", err)
	}
	dirName := filepath.Base(filepath.Dir(real)) // <package>-<version>
	i := strings.LastIndex(dirName, "-")

	for _, tc := range []struct{ name, path, want string }{
		{"make pjrt's CPU plugin", real, dirName[:i] + " " + dirName[i+1:]},
		{"JAX's CUDA plugin", cuda, "jax-cuda13-pjrt 0.11.2"},
		{"libtpu", tpu, "libtpu 0.0.30"},
		{"image's VERSION", image, "libtpu 0.0.30"},
		{"image's plugin.so symlink", link, "libtpu 0.0.30"},
		{"a link to a site-packages plugin", linkElsewhere, "jax-cuda13-pjrt 0.11.2"},
		{"nothing says", lone, ""},
		{"missing file", filepath.Join(dir, "nosuch.so"), ""},
	} {
		if got := PluginPackage(tc.path); got != tc.want {
			t.Errorf("%s: PluginPackage(%s) = %q, want %q", tc.name, tc.path, got, tc.want)
		}
	}
}
