package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCPUPinMatchesInstallScript: the image's CPU plugin is the one `make
// pjrt` installs for development and CI.
func TestCPUPinMatchesInstallScript(t *testing.T) {
	script, err := os.ReadFile("../../scripts/pjrt-install.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The pins are the script's "current" case (its "compat" case is the
	// oldest plugin, never an image's); WHEEL is a readonly after the case.
	current := regexp.MustCompile(`(?s)\ncurrent\)\n(.*?);;`).FindSubmatch(script)
	if current == nil {
		t.Fatal(`scripts/pjrt-install.sh has no "current)" case`)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + name + `="([^"]+)"`).FindSubmatch(current[1])
		if m == nil {
			m = regexp.MustCompile(`readonly ` + name + `="([^"]+)"`).FindSubmatch(script)
		}
		if m == nil {
			t.Fatalf("scripts/pjrt-install.sh has no %s", name)
		}
		return string(m[1])
	}
	cpu := pins["cpu"]
	if got := field("PKG_VERSION"); got != cpu.Version {
		t.Errorf("pjrt-install.sh installs %s %s, the image %s", field("PKG_NAME"), got, cpu.Version)
	}
	if got := field("WHEEL_SHA256"); got != cpu.SHA256 {
		t.Errorf("pjrt-install.sh pins sha256 %s, the image %s", got, cpu.SHA256)
	}
	if got := field("MEMBER"); got != cpu.Member {
		t.Errorf("pjrt-install.sh extracts %s, the image %s", got, cpu.Member)
	}
	if !strings.HasSuffix(cpu.URL, "/"+strings.NewReplacer("${PKG_NAME//-/_}", strings.ReplaceAll(field("PKG_NAME"), "-", "_"), "${PKG_VERSION}", cpu.Version).Replace(field("WHEEL"))) {
		t.Errorf("the image's URL %s is not of the wheel pjrt-install.sh names", cpu.URL)
	}
}

// fakeWheel writes a zip with member holding body and returns its path and
// sha256.
func fakeWheel(t *testing.T, member, body string) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.whl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	w, err := z.Create(member)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(body))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, _ := os.ReadFile(path)
	sum := sha256.Sum256(data)
	return path, hex.EncodeToString(sum[:])
}

func TestRunWithWheel(t *testing.T) {
	saved := pins["cpu"]
	defer func() { pins["cpu"] = saved }()
	wheel, sum := fakeWheel(t, saved.Member, "ELF plugin bytes")

	// A wheel whose sha256 is not the pin's is refused.
	dest := t.TempDir()
	if err := run("cpu", dest, wheel); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Fatalf("wrong sha256: %v", err)
	}

	pin := saved
	pin.SHA256 = sum
	pins["cpu"] = pin
	if err := run("cpu", dest, wheel); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dest, "plugin.so")) // through the symlink
	if err != nil || string(got) != "ELF plugin bytes" {
		t.Fatalf("plugin.so: %q, %v", got, err)
	}
	version, _ := os.ReadFile(filepath.Join(dest, "VERSION"))
	if !strings.Contains(string(version), "lammps-jax-pjrt-cpu 0.11.2") || !strings.Contains(string(version), sum) {
		t.Errorf("VERSION:\n%s", version)
	}

	pin.Member = "elsewhere/plugin.so"
	pins["cpu"] = pin
	if err := run("cpu", t.TempDir(), wheel); err == nil || !strings.Contains(err.Error(), "has no member elsewhere/plugin.so") {
		t.Errorf("missing member: %v", err)
	}
	if err := run("rocm", dest, wheel); err == nil || !strings.Contains(err.Error(), "want one of cpu, cuda, tpu") {
		t.Errorf("unknown platform: %v", err)
	}
	if err := run("cpu", "", wheel); err == nil || !strings.Contains(err.Error(), "-dest DIR is required") {
		t.Errorf("no dest: %v", err)
	}
}

// TestOneDNNPinsMatchInstallScript: the image's kernel library is built
// against the oneDNN wheels `make pjrt` uses (scripts/cpukernels-install.sh).
func TestOneDNNPinsMatchInstallScript(t *testing.T) {
	script, err := os.ReadFile("../../scripts/cpukernels-install.sh")
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`readonly ` + name + `="([^"]+)"`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("scripts/cpukernels-install.sh has no %s", name)
		}
		return strings.ReplaceAll(string(m[1]), "${ONEDNN_VERSION}", field0(t, script))
	}
	for i, names := range [][2]string{{"LIB_WHEEL", "LIB_SHA256"}, {"DEV_WHEEL", "DEV_SHA256"}} {
		w := onednnWheels[i]
		if w.Version != field0(t, script) {
			t.Errorf("%s: version %s, the script's %s", w.Package, w.Version, field0(t, script))
		}
		if !strings.HasSuffix(w.URL, "/"+field(names[0])) {
			t.Errorf("%s: URL %s is not of the script's %s", w.Package, w.URL, field(names[0]))
		}
		if got := field(names[1]); got != w.SHA256 {
			t.Errorf("%s: the script pins sha256 %s, the image %s", w.Package, got, w.SHA256)
		}
	}
}

// field0 is the ONEDNN_VERSION the install script pins.
func field0(t *testing.T, script []byte) string {
	m := regexp.MustCompile(`readonly ONEDNN_VERSION="([^"]+)"`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/cpukernels-install.sh has no ONEDNN_VERSION")
	}
	return string(m[1])
}
