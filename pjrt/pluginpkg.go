package pjrt

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// PluginPackage names the package a plugin file came from, as
// "NAME VERSION" ("libtpu 0.0.30", "jax-cuda13-pjrt 0.11.2"), or "" when
// nothing says. It reads, in order:
//
//   - the first line of a VERSION file beside path (what `make pjrt` and
//     the image's cmd/pjrt-fetch write next to the plugin they install);
//   - the pip distribution whose RECORD lists the file, when the plugin
//     sits in a Python site-packages directory (JAX's jax_plugins/xla_cuda13,
//     libtpu/libtpu.so), from the name of its .dist-info directory.
//
// path may be a symlink: a VERSION file is looked for beside the link and
// beside its target, a RECORD entry for the target.
func PluginPackage(path string) string {
	dirs := []string{filepath.Dir(path)}
	target, err := filepath.EvalSymlinks(path)
	if err == nil && filepath.Dir(target) != dirs[0] {
		dirs = append(dirs, filepath.Dir(target))
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "VERSION")); err == nil {
			if line, _, _ := strings.Cut(string(b), "\n"); strings.TrimSpace(line) != "" {
				return strings.TrimSpace(line)
			}
		}
	}
	if err != nil {
		return ""
	}
	// A package's files sit one or more levels below site-packages:
	// libtpu/libtpu.so, jax_plugins/xla_cuda13/xla_cuda_plugin.so.
	for site, depth := filepath.Dir(filepath.Dir(target)), 0; depth < 3; site, depth = filepath.Dir(site), depth+1 {
		rel, err := filepath.Rel(site, target)
		if err != nil {
			return ""
		}
		if pkg := recordOwner(site, filepath.ToSlash(rel)); pkg != "" {
			return pkg
		}
	}
	return ""
}

// recordOwner returns "name version" of the distribution in site whose
// .dist-info/RECORD lists rel, or "".
func recordOwner(site, rel string) string {
	infos, _ := filepath.Glob(filepath.Join(site, "*.dist-info"))
	for _, info := range infos {
		f, err := os.Open(filepath.Join(info, "RECORD"))
		if err != nil {
			continue
		}
		found := false
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), rel+",") {
				found = true
				break
			}
		}
		f.Close()
		if found {
			// <name>-<version>.dist-info, the name normalized with "_".
			name, version, ok := strings.Cut(strings.TrimSuffix(filepath.Base(info), ".dist-info"), "-")
			if !ok {
				return name
			}
			return strings.ReplaceAll(name, "_", "-") + " " + version
		}
	}
	return ""
}
