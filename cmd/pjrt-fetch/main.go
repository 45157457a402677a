// Command pjrt-fetch downloads one pinned PJRT plugin wheel from PyPI, checks
// its sha256 against the pin below, and extracts the plugin library from it.
// The Dockerfile runs it to put exactly one plugin into an image:
//
//	go run ./cmd/pjrt-fetch -platform cpu|tpu|cuda -dest DIR
//
// writes DIR/<plugin file>, DIR/plugin.so (a symlink to it, which the image's
// $XSERVE_PJRT_PLUGIN names) and DIR/VERSION (package, version, wheel,
// sha256). It uses only the standard library, so that it runs in a plain Go
// image without Python or unzip.
package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// wheel is one pinned plugin: a PyPI wheel and the library inside it.
type wheel struct {
	Package, Version string
	URL              string // on files.pythonhosted.org
	SHA256           string
	Member           string // path of the plugin library inside the wheel
}

func (w wheel) file() string { return w.URL[strings.LastIndex(w.URL, "/")+1:] }

// pins are the plugins of the image variants. The CPU one is the plugin
// scripts/pjrt-install.sh installs for development (keep the two equal);
// the TPU and CUDA ones are of the same XLA generation (November 2025).
var pins = map[string]wheel{
	"cpu": {
		Package: "lammps-jax-pjrt-cpu", Version: "0.11.2",
		URL:    "https://files.pythonhosted.org/packages/e5/90/f04e5ea9e56f01965b4cd56bc3cf4801a563cd47b74d4ded5780f19c3a7c/lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl",
		SHA256: "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
		Member: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
	},
	"tpu": {
		Package: "libtpu", Version: "0.0.30",
		URL:    "https://files.pythonhosted.org/packages/b0/2b/1034e6335f12ce636ae68d2795dfe6e15d532a1990f74e0001319798e992/libtpu-0.0.30-cp312-cp312-manylinux_2_31_x86_64.whl",
		SHA256: "26442f0a51d243cf7259407bba8f5d849c9024297efe97044d64b5244283ad63",
		Member: "libtpu/libtpu.so",
	},
	"cuda": {
		Package: "jax-cuda12-pjrt", Version: "0.8.1",
		URL:    "https://files.pythonhosted.org/packages/c1/85/c59752caca94e72861f7a6a42f37485df706e60ec4bb27090081899001d4/jax_cuda12_pjrt-0.8.1-py3-none-manylinux_2_27_x86_64.whl",
		SHA256: "452b70ee10cb9ac5d7dfca55ffbcdb89b6c8bc6ba70a45af7c490d1dcea98eb7",
		Member: "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
	},
}

// onednnWheels are oneDNN 3.2 (GNU OpenMP build): the library and its
// headers, which the CPU image's kernel library (cpukernels/) is built
// against. scripts/cpukernels-install.sh pins the same wheels.
var onednnWheels = []wheel{
	{
		Package: "onednn-cpu-gomp", Version: "2023.2.0",
		URL:    "https://files.pythonhosted.org/packages/65/b4/792e6d3ef02a0e14fdc0392bd378dc78f3c8356e6a40fda8c0b9366628a1/onednn_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl",
		SHA256: "2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb",
		Member: "onednn_cpu_gomp-2023.2.0.data/data/lib/libdnnl.so.3",
	},
	{
		Package: "onednn-devel-cpu-gomp", Version: "2023.2.0",
		URL:    "https://files.pythonhosted.org/packages/d4/26/e1f06fc4810583d892831817e3217d32be475dd740c86c0b4058cec9d172/onednn_devel_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl",
		SHA256: "9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284",
		Member: "onednn_devel_cpu_gomp-2023.2.0.data/data/include/",
	},
}

func main() {
	platform := flag.String("platform", "cpu", "plugin to fetch: "+strings.Join(platformNames(), ", "))
	dest := flag.String("dest", "", "directory to write the plugin into (required)")
	wheelPath := flag.String("wheel", "", "use this already downloaded wheel instead of downloading (its sha256 is checked all the same)")
	onednn := flag.String("onednn", "", "instead of a plugin, fetch oneDNN into this directory (lib/libdnnl.so.3, include/), for building cpukernels/")
	flag.Parse()
	if *onednn != "" {
		if err := fetchOneDNN(*onednn); err != nil {
			fmt.Fprintln(os.Stderr, "pjrt-fetch:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*platform, *dest, *wheelPath); err != nil {
		fmt.Fprintln(os.Stderr, "pjrt-fetch:", err)
		os.Exit(1)
	}
}

func platformNames() []string {
	var names []string
	for k := range pins {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func run(platform, dest, wheelPath string) error {
	w, ok := pins[platform]
	if !ok {
		return fmt.Errorf("-platform %q: want one of %s", platform, strings.Join(platformNames(), ", "))
	}
	if dest == "" {
		return errors.New("-dest DIR is required")
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dest, ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if wheelPath, err = fetchWheel(w, wheelPath, tmp); err != nil {
		return err
	}
	lib := filepath.Base(w.Member)
	if err := extract(wheelPath, w.Member, filepath.Join(dest, lib)); err != nil {
		return err
	}
	link := filepath.Join(dest, "plugin.so")
	os.Remove(link)
	if err := os.Symlink(lib, link); err != nil {
		return err
	}
	version := fmt.Sprintf("%s %s\nwheel %s\nsha256 %s\nplatform %s\n", w.Package, w.Version, w.file(), w.SHA256, platform)
	if err := os.WriteFile(filepath.Join(dest, "VERSION"), []byte(version), 0o644); err != nil {
		return err
	}
	fmt.Printf("pjrt-fetch: installed %s %s at %s\n", w.Package, w.Version, filepath.Join(dest, lib))
	return nil
}

// fetchOneDNN downloads and checks the oneDNN wheels and writes
// dest/lib/libdnnl.so.3 and dest/include/.
func fetchOneDNN(dest string) error {
	tmp, err := os.MkdirTemp("", "onednn-fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, w := range onednnWheels {
		path, err := fetchWheel(w, "", tmp)
		if err != nil {
			return err
		}
		if strings.HasSuffix(w.Member, "/") {
			err = extractTree(path, w.Member, filepath.Join(dest, "include"))
		} else {
			err = extract(path, w.Member, filepath.Join(dest, "lib", filepath.Base(w.Member)))
		}
		if err != nil {
			return err
		}
	}
	fmt.Printf("pjrt-fetch: oneDNN %s at %s\n", onednnWheels[0].Version, dest)
	return nil
}

// fetchWheel returns the path of wheel w, checked against its pinned
// sha256: path when it is set (a wheel downloaded already), else a download
// into dir.
func fetchWheel(w wheel, path, dir string) (string, error) {
	if path == "" {
		path = filepath.Join(dir, w.file())
		fmt.Printf("pjrt-fetch: downloading %s==%s (%s)\n", w.Package, w.Version, w.file())
		if err := download(w.URL, path); err != nil {
			return "", fmt.Errorf("download %s: %w", w.URL, err)
		}
	}
	got, err := fileSHA256(path)
	if err != nil {
		return "", err
	}
	if got != w.SHA256 {
		return "", fmt.Errorf("sha256 mismatch for %s: got %s, want %s", path, got, w.SHA256)
	}
	return path, nil
}

// extractTree copies every file of the zip file at wheelPath under the
// directory prefix into out, keeping the rest of its path.
func extractTree(wheelPath, prefix, out string) error {
	z, err := zip.OpenReader(wheelPath)
	if err != nil {
		return fmt.Errorf("open wheel: %w", err)
	}
	defer z.Close()
	n := 0
	for _, f := range z.File {
		rel, ok := strings.CutPrefix(f.Name, prefix)
		if !ok || rel == "" || strings.HasSuffix(f.Name, "/") {
			continue
		}
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("%s: member %s leaves its directory", filepath.Base(wheelPath), f.Name)
		}
		if err := extract(wheelPath, f.Name, filepath.Join(out, rel)); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s has no files under %s", filepath.Base(wheelPath), prefix)
	}
	return nil
}

func download(url, path string) error {
	client := &http.Client{Timeout: 30 * time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// extract copies member of the zip file at wheelPath to out (mode 0755).
func extract(wheelPath, member, out string) error {
	z, err := zip.OpenReader(wheelPath)
	if err != nil {
		return fmt.Errorf("open wheel: %w", err)
	}
	defer z.Close()
	for _, f := range z.File {
		if f.Name != member {
			continue
		}
		src, err := f.Open()
		if err != nil {
			return err
		}
		defer src.Close()
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		dst, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
		if err != nil {
			return err
		}
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			return err
		}
		return dst.Close()
	}
	return fmt.Errorf("%s has no member %s", filepath.Base(wheelPath), member)
}
