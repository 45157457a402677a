package pjrt

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Environment variables read by FindPlugin.
const (
	// EnvPlugin names a plugin file, or a platform ("cpu", "cuda", "tpu") to
	// search for; it is used when FindOptions.Path is empty.
	EnvPlugin = "XSERVE_PJRT_PLUGIN"
	// EnvCache is the xserve cache root (default <repo>/.cache); `make pjrt`
	// installs the CPU plugin under $XSERVE_CACHE/pjrt/.
	EnvCache = "XSERVE_CACHE"
)

// CPUPluginFile is the file name `make pjrt` gives the XLA CPU plugin, in
// <cache>/pjrt/<package>-<version>/.
const CPUPluginFile = "pjrt_c_api_cpu_plugin.so"

// FindOptions says where FindPlugin looks for a PJRT plugin.
type FindOptions struct {
	// Path is an explicit choice (typically a flag value): the path of a plugin
	// file, or a platform name ("cpu", "cuda" or "gpu", "tpu") to search the
	// known places of that platform only. Empty means: $XSERVE_PJRT_PLUGIN, or
	// else every known place.
	Path string
	// RepoRoot, if set, is an xserve checkout whose .cache/pjrt/ (and .venv)
	// are searched.
	RepoRoot string
}

// platforms FindPlugin knows, in the order it searches them when no platform
// is named.
var platforms = []string{"cpu", "tpu", "cuda"}

// Overridable in tests, so that they do not depend on what the machine has
// installed.
var (
	// systemSitePackages are globs of Python site-packages directories outside
	// the user's home and virtual environments.
	systemSitePackages = []string{
		"/usr/local/lib/python3*/site-packages",
		"/usr/local/lib/python3*/dist-packages",
		"/usr/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages",
		"/opt/conda/lib/python3*/site-packages",
	}
	// executableDir returns the directory of the running binary ("" if unknown).
	executableDir = func() string {
		exe, err := os.Executable()
		if err != nil {
			return ""
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		return filepath.Dir(exe)
	}
)

// FindPlugin returns the absolute path of a PJRT plugin. It tries, in order:
//
//  1. opts.Path: a plugin file, or a platform name ("cpu", "cuda"/"gpu",
//     "tpu") whose known places are searched;
//  2. $XSERVE_PJRT_PLUGIN, read the same way;
//  3. the known places of every platform: for cpu, the plugin `make pjrt`
//     installs, $XSERVE_CACHE/pjrt/*/pjrt_c_api_cpu_plugin.so, then the same
//     under <RepoRoot>/.cache, under .cache in the current directory and each
//     of its parents, under .cache in the executable's directory and each of
//     its parents, and under ~/.cache/xserve; for tpu, libtpu/libtpu.so from
//     the pip package libtpu; for cuda, JAX's jax_plugins/xla_cuda13 and
//     xla_cuda12 plugins. Python packages are looked for in the site-packages
//     of $VIRTUAL_ENV, $CONDA_PREFIX, <RepoRoot>/.venv, ~/.local, /usr/local,
//     /usr and /opt/conda.
//
// A path or variable that names a missing file is an error; so is finding
// nothing, and that error (wrapping ErrPluginNotFound) lists every place
// looked in and says to run `make pjrt`.
func FindPlugin(opts FindOptions) (string, error) {
	if opts.Path != "" {
		return resolvePlugin(opts.Path, "given path", opts)
	}
	if v := os.Getenv(EnvPlugin); v != "" {
		return resolvePlugin(v, "$"+EnvPlugin, opts)
	}
	return searchPlugin(platforms, opts)
}

// resolvePlugin reads v as a plugin file or, failing that, a platform name.
func resolvePlugin(v, origin string, opts FindOptions) (string, error) {
	fi, err := os.Stat(v)
	if err == nil {
		if fi.IsDir() {
			return "", fmt.Errorf("pjrt: plugin %q (%s) is a directory, want a PJRT plugin .so file", v, origin)
		}
		return filepath.Abs(v)
	}
	if p := platformName(v); p != "" {
		return searchPlugin([]string{p}, opts)
	}
	return "", fmt.Errorf("pjrt: plugin %q (%s): want a PJRT plugin file or one of cpu, cuda, tpu: %w", v, origin, err)
}

// platformName returns the canonical platform for a name FindOptions.Path
// accepts, or "".
func platformName(s string) string {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "cpu":
		return "cpu"
	case "cuda", "gpu":
		return "cuda"
	case "tpu":
		return "tpu"
	}
	return ""
}

// searchPlugin returns the first plugin found in the known places of the
// given platforms, in order.
func searchPlugin(plats []string, opts FindOptions) (string, error) {
	var looked []string
	for _, plat := range plats {
		for _, pattern := range pluginPlaces(plat, opts) {
			looked = append(looked, pattern)
			if p := globPlugin(pattern); p != "" {
				return p, nil
			}
		}
	}
	what := "PJRT plugin"
	if len(plats) == 1 {
		what = plats[0] + " PJRT plugin"
	}
	return "", &notFoundError{what: what, looked: looked}
}

// globPlugin returns the last (highest-sorting) regular file matching pattern,
// ignoring matches under hidden directories (such as the install script's
// temporary directory), or "".
func globPlugin(pattern string) string {
	matches, _ := filepath.Glob(pattern)
	slices.Sort(matches)
	for i := len(matches) - 1; i >= 0; i-- {
		m := matches[i]
		if strings.Contains(filepath.Base(filepath.Dir(pattern)), "*") && strings.HasPrefix(filepath.Base(filepath.Dir(m)), ".") {
			continue
		}
		if fi, err := os.Stat(m); err == nil && fi.Mode().IsRegular() {
			if abs, err := filepath.Abs(m); err == nil {
				return abs
			}
			return m
		}
	}
	return ""
}

// pluginPlaces returns the glob patterns searched for one platform, in order,
// without duplicates.
func pluginPlaces(plat string, opts FindOptions) []string {
	var places []string
	add := func(p string) {
		if p != "" && !slices.Contains(places, p) {
			places = append(places, p)
		}
	}
	switch plat {
	case "cpu":
		cached := func(cacheRoot string) string {
			if cacheRoot == "" {
				return ""
			}
			return filepath.Join(cacheRoot, "pjrt", "*", CPUPluginFile)
		}
		add(cached(absOrEmpty(os.Getenv(EnvCache))))
		if opts.RepoRoot != "" {
			add(cached(filepath.Join(absOrEmpty(opts.RepoRoot), ".cache")))
		}
		if wd, err := os.Getwd(); err == nil {
			for _, d := range ancestors(wd) {
				add(cached(filepath.Join(d, ".cache")))
			}
		}
		if exe := executableDir(); exe != "" {
			for _, d := range ancestors(exe) {
				add(cached(filepath.Join(d, ".cache")))
			}
		}
		if dir, err := os.UserCacheDir(); err == nil {
			add(cached(filepath.Join(dir, "xserve")))
		}
	case "tpu":
		for _, sp := range sitePackages(opts) {
			add(filepath.Join(sp, "libtpu", "libtpu.so"))
		}
	case "cuda":
		for _, sp := range sitePackages(opts) {
			add(filepath.Join(sp, "jax_plugins", "xla_cuda13", "xla_cuda_plugin.so"))
			add(filepath.Join(sp, "jax_plugins", "xla_cuda12", "xla_cuda_plugin.so"))
		}
	}
	return places
}

// sitePackages returns globs of the Python site-packages directories to
// search, most specific first.
func sitePackages(opts FindOptions) []string {
	var dirs []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if prefix := os.Getenv(env); prefix != "" {
			dirs = append(dirs, filepath.Join(prefix, "lib", "python3*", "site-packages"))
		}
	}
	if opts.RepoRoot != "" {
		dirs = append(dirs, filepath.Join(absOrEmpty(opts.RepoRoot), ".venv", "lib", "python3*", "site-packages"))
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		dirs = append(dirs, filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	}
	return append(dirs, systemSitePackages...)
}

// ancestors returns dir and each of its parents up to the root.
func ancestors(dir string) []string {
	var out []string
	dir = filepath.Clean(dir)
	for {
		out = append(out, dir)
		parent := filepath.Dir(dir)
		if parent == dir {
			return out
		}
		dir = parent
	}
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// CompatCPUPlugin returns the oldest XLA CPU plugin xserve's programs are
// tested on, which `make pjrt-compat` installs: xla-cpu-pjrt 0.0.1 (PJRT C
// API 0.81, StableHLO 1.13.3, the vintage of the CUDA and TPU plugins the
// images ship), at <cache>/pjrt-compat/xla-cpu-pjrt-0.0.1/, the cache being
// $XSERVE_CACHE or else <repoRoot>/.cache. FindPlugin never returns it.
func CompatCPUPlugin(repoRoot string) (string, error) {
	cache := absOrEmpty(os.Getenv(EnvCache))
	if cache == "" {
		cache = filepath.Join(absOrEmpty(repoRoot), ".cache")
	}
	p := filepath.Join(cache, "pjrt-compat", "xla-cpu-pjrt-0.0.1", CPUPluginFile)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("pjrt: the compat CPU plugin (run make pjrt-compat): %w", err)
	}
	return p, nil
}
