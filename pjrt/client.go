package pjrt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	gopjrt "github.com/gomlx/go-xla/pkg/pjrt"
)

// Client is a loaded PJRT plugin and a client of it: it compiles programs and
// owns the device buffers and executables made with it. Open one per plugin
// per process and share it; all its methods are safe for concurrent use.
type Client struct {
	path       string
	plugin     *gopjrt.Plugin
	api        pluginTable // the plugin's own PJRT_Api table (capi.go)
	platform   string
	apiVersion string // "0.81"
	version    string // apiVersion plus the plugin's version attributes

	// kernels are the custom-call targets registered from the CPU kernel
	// library kernelsFile (kernels.go); kernelsErr says why none were
	// loaded when a library was found but failed.
	kernels     []string
	kernelsFile string
	kernelsErr  error
	// kernelsLimit is the library's xserve_cpu_kernels_thread_limit (C),
	// which RunHostAll's worker pool calls around each shard; nil without
	// the library.
	kernelsLimit unsafe.Pointer

	// cpuExecution is how a CPU client runs programs (cpuexec.go); runs
	// and inlineRuns count RunHost executions (RunCounts).
	cpuExecution     string
	runs, inlineRuns atomic.Uint64

	// mu is held for reading by every operation that uses the plugin client
	// (including those on Buffers and Executables), and for writing by Close.
	mu sync.RWMutex
	c  *gopjrt.Client // nil once closed

	// execMu guards execs, the executables not yet closed, which Close closes
	// before destroying the plugin client.
	execMu sync.Mutex
	execs  map[*Executable]struct{}

	// pool is the worker threads of RunHostAll (runall.go), freed by Close.
	pool workerPool
}

// Open loads the PJRT plugin at path and creates a client of it. go-xla keeps
// loaded plugins for the life of the process, so opening the same path again
// reuses the plugin and only creates a new client.
func Open(path string) (*Client, error) {
	if path == "" {
		return nil, errors.New("pjrt: open: empty plugin path (see FindPlugin)")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("pjrt: open %s: %w", path, err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r // one plugin per file, however it is named
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("pjrt: open plugin: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("pjrt: open plugin %s: not a regular file", abs)
	}
	plugin, api, err := openPlugin(abs)
	if err != nil {
		return nil, fmt.Errorf("pjrt: %w", err)
	}
	xc, api, err := api.newClient(plugin, nil)
	if err != nil {
		return nil, fmt.Errorf("pjrt: create client of plugin %s: %w", abs, err)
	}
	// Only the platform name says whether the plugin takes CPU create
	// options (other plugins refuse unknown ones), so a CPU client is made
	// again with them: that takes milliseconds.
	var cpuExec string
	if strings.EqualFold(xc.Platform(), "cpu") {
		if cpuExec, err = cpuExecution(); err != nil {
			_ = xc.Destroy()
			return nil, fmt.Errorf("pjrt: %w", err)
		}
		if opts := cpuCreateOptions(cpuExec); opts != nil {
			if err := xc.Destroy(); err != nil {
				return nil, fmt.Errorf("pjrt: recreate client of plugin %s: %w", abs, err)
			}
			if xc, api, err = api.newClient(plugin, opts); err != nil {
				return nil, fmt.Errorf("pjrt: create client of plugin %s with %v: %w", abs, opts, err)
			}
		}
	}
	if xc.NumDevices() == 0 {
		_ = xc.Destroy()
		return nil, fmt.Errorf("pjrt: plugin %s has no addressable device", abs)
	}
	major, minor := plugin.Version()
	c := &Client{
		path:         abs,
		plugin:       plugin,
		api:          api,
		platform:     strings.ToLower(xc.Platform()),
		apiVersion:   fmt.Sprintf("%d.%d", major, minor),
		cpuExecution: cpuExec,
		c:            xc,
		execs:        map[*Executable]struct{}{},
	}
	c.version = c.apiVersion + formatAttributes(plugin.Attributes())
	if c.platform == "cpu" {
		if file, explicit := findCPUKernels(abs); file != "" {
			k, err := loadKernels(api.api, file)
			switch {
			case err != nil && explicit:
				_ = c.Close()
				return nil, fmt.Errorf("pjrt: %s=%s: %w", EnvCPUKernels, file, err)
			case err != nil:
				c.kernelsErr = err
			default:
				c.kernels, c.kernelsFile, c.kernelsLimit = k.names, file, k.limit
			}
		}
	}
	return c, nil
}

// formatAttributes renders plugin attributes as " (k=v, ...)", sorted by
// name, with integer lists written as dotted versions.
func formatAttributes(attrs gopjrt.NamedValuesMap) string {
	if len(attrs) == 0 {
		return ""
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := attrs[k]
		if list, ok := v.([]int64); ok {
			s := make([]string, len(list))
			for j, n := range list {
				s[j] = fmt.Sprint(n)
			}
			v = strings.Join(s, ".")
		}
		parts[i] = fmt.Sprintf("%s=%v", k, v)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Platform returns the plugin's platform name in lower case, e.g. "cpu",
// "cuda" or "tpu".
func (c *Client) Platform() string { return c.platform }

// PluginVersion returns the PJRT C API version the plugin implements, followed
// by the version attributes it reports, e.g.
// "0.81 (stablehlo_current_version=1.13.3, stablehlo_minimum_version=0.9.0, xla_version=2)".
func (c *Client) PluginVersion() string { return c.version }

// PluginPath returns the absolute path of the plugin file.
func (c *Client) PluginPath() string { return c.path }

// String describes the client, e.g. "pjrt cpu (api 0.81) /path/plugin.so".
func (c *Client) String() string {
	return fmt.Sprintf("pjrt %s (api %s) %s", c.platform, c.apiVersion, c.path)
}

// Close closes the client's executables and destroys the client. Its buffers
// become unusable (operations on them return ErrClosed). The plugin itself
// stays loaded. Close waits for in-flight operations; calling it again is a
// no-op.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	c.execMu.Lock()
	execs := make([]*Executable, 0, len(c.execs))
	for e := range c.execs {
		execs = append(execs, e)
	}
	c.execs = nil
	c.execMu.Unlock()

	var errs []error
	for _, e := range execs {
		if err := e.destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	c.pool.free() // no RunHostAll runs: each holds c.mu
	if err := c.c.Destroy(); err != nil {
		errs = append(errs, fmt.Errorf("pjrt: close client: %w", err))
	}
	c.c = nil
	return errors.Join(errs...)
}

// Compile compiles a StableHLO module given as MLIR text (MLIR bytecode is
// accepted too) into an Executable. Its entry function must be @main. An
// invalid program is reported as an error.
func (c *Client) Compile(ctx context.Context, stablehloText []byte) (*Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: compile: %w", err)
	}
	if len(stablehloText) == 0 {
		return nil, errors.New("pjrt: compile: empty program")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("compile", "client")
	}
	le, h, err := compileProgram(c.c, stablehloText, false)
	if err != nil {
		return nil, fmt.Errorf("pjrt: compile: %w", err)
	}
	e := &Executable{
		client:     c,
		name:       le.Name,
		numOutputs: le.NumOutputs,
		le:         le,
		handle:     h,
	}
	if params, ok := parseMainParams(stablehloText); ok {
		e.params = params
		e.paramsKnown = true
	}
	c.execMu.Lock()
	c.execs[e] = struct{}{}
	c.execMu.Unlock()
	return e, nil
}

// forget drops a closed executable from the set Close destroys.
func (c *Client) forget(e *Executable) {
	c.execMu.Lock()
	delete(c.execs, e)
	c.execMu.Unlock()
}
