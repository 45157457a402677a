package pjrt

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Client is a loaded PJRT plugin and a client of it: it compiles programs and
// owns the device buffers and executables made with it. Open one per plugin
// per process and share it; all its methods are safe for concurrent use.
type Client struct {
	path       string
	api        *C.PJRT_Api
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
	cpuExecution string
	// pluginCopies, set by tests before the first execution, has RunHost
	// copy every output through the plugin (PJRT_Buffer_ToHostBuffer, as
	// on a device) instead of with memcpy where the CPU plugin allows.
	pluginCopies     bool
	runs, inlineRuns atomic.Uint64
	// toDevice and toHost count the copies between host and device
	// (Transfers).
	toDevice, toHost atomic.Uint64

	// mu is held for reading by every operation that uses the plugin client
	// (including those on Buffers and Executables), and for writing by Close.
	mu     sync.RWMutex
	c      *C.PJRT_Client // nil once closed
	device *C.PJRT_Device // devices[0], where an execution without device buffers runs
	// devices are the client's addressable devices; a Buffer's dev indexes
	// them.
	devices []*C.PJRT_Device
	// cpuDevices is OpenOptions.CPUDevices; numDevices is len(devices)
	// while open.
	cpuDevices, numDevices int

	// execMu guards execs, the executables not yet closed, which Close closes
	// before destroying the plugin client.
	execMu sync.Mutex
	execs  map[*Executable]struct{}

	// pool is the worker threads of RunHostAll (runall.go), freed by Close.
	pool workerPool
}

// OpenOptions configure the client Open creates.
type OpenOptions struct {
	// CPUDevices is the number of host devices a CPU client has (the CPU
	// plugin's create option cpu_device_count); 0 is the plugin's default
	// (the pinned CPU plugin makes 4). Other platforms refuse it.
	CPUDevices int
}

// Open loads the PJRT plugin at path and creates a client of it. A plugin
// stays loaded for the life of the process, so opening the same path again
// reuses it and only creates a new client.
func Open(path string) (*Client, error) { return OpenWith(path, OpenOptions{}) }

// OpenWith is Open with options.
func OpenWith(path string, o OpenOptions) (*Client, error) {
	if o.CPUDevices < 0 {
		return nil, fmt.Errorf("pjrt: open: CPUDevices %d: want 0 (the plugin's default) or more", o.CPUDevices)
	}
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
	p, err := openPlugin(abs)
	if err != nil {
		return nil, fmt.Errorf("pjrt: %w", err)
	}
	c := &Client{path: abs, api: p.api, apiVersion: p.apiVersion(), version: p.apiVersion() + p.attributes, execs: map[*Executable]struct{}{}, cpuDevices: o.CPUDevices}
	if err := c.create(); err != nil {
		return nil, err
	}
	if c.platform == "cpu" {
		if file, explicit := findCPUKernels(abs); file != "" {
			k, err := loadKernels(c.api, file)
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

// create creates the plugin client of c and reads its platform and device.
// Only the platform name says whether the plugin takes CPU create options
// (other plugins refuse unknown ones), so a CPU client is made again with
// them: that takes milliseconds.
func (c *Client) create() error {
	if err := c.createWith(-1, 0); err != nil {
		return err
	}
	if c.platform != "cpu" {
		if c.cpuDevices > 0 {
			c.destroy()
			return fmt.Errorf("pjrt: plugin %s is for %s: CPU devices (%d asked) are the CPU plugin's", c.path, c.platform, c.cpuDevices)
		}
		return nil
	}
	mode, err := cpuExecution()
	if err != nil {
		c.destroy()
		return fmt.Errorf("pjrt: %w", err)
	}
	c.cpuExecution = mode
	if async := cpuAsyncOption(mode); async >= 0 || c.cpuDevices > 0 {
		c.destroy()
		if err := c.createWith(async, c.cpuDevices); err != nil {
			return fmt.Errorf("pjrt: create client of plugin %s with asynchronous=%v, cpu_device_count=%d: %w", c.path, async != 0, c.cpuDevices, err)
		}
		if c.cpuDevices > 0 && len(c.devices) != c.cpuDevices {
			c.destroy()
			return fmt.Errorf("pjrt: plugin %s made %d CPU devices, %d asked", c.path, len(c.devices), c.cpuDevices)
		}
	}
	return nil
}

// createWith creates the plugin client with the create options
// asynchronous (-1: none) and cpu_device_count (0: none).
func (c *Client) createWith(async, devices int) error {
	var pc *C.PJRT_Client
	if perr := C.xs_client_create(c.api, C.int(async), C.int64_t(devices), &pc); perr != nil {
		return fmt.Errorf("pjrt: create client of plugin %s: %w", c.path, pluginError(c.api, perr))
	}
	var name *C.char
	var size, n C.size_t
	var devs **C.PJRT_Device
	perr := C.xs_client_platform(c.api, pc, &name, &size)
	if perr == nil {
		perr = C.xs_client_devices(c.api, pc, &n, &devs)
	}
	c.c = pc
	if perr != nil {
		c.destroy()
		return fmt.Errorf("pjrt: plugin %s: %w", c.path, pluginError(c.api, perr))
	}
	if n == 0 || devs == nil {
		c.destroy()
		return fmt.Errorf("pjrt: plugin %s has no addressable device", c.path)
	}
	c.platform = strings.ToLower(C.GoStringN(name, C.int(size)))
	c.devices = append([]*C.PJRT_Device(nil), unsafe.Slice(devs, int(n))...)
	c.device, c.numDevices = c.devices[0], len(c.devices)
	return nil
}

// Devices returns the number of devices of the client that executions can
// run on (its addressable devices). Upload's device and a Buffer's Device
// index them.
func (c *Client) Devices() int { return c.numDevices }

// destroy destroys the plugin client; the caller holds mu for writing, or
// owns c alone.
func (c *Client) destroy() error {
	if c.c == nil {
		return nil
	}
	a := C.PJRT_Client_Destroy_Args{client: c.c}
	c.c, c.device, c.devices = nil, nil, nil
	if perr := C.xs_PJRT_Client_Destroy(c.api, &a); perr != nil {
		return fmt.Errorf("pjrt: close client: %w", pluginError(c.api, perr))
	}
	return nil
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
	// The plugin destroys the client's buffers with it; a Buffer closed
	// later only forgets its handle (Buffer.Close).
	if err := c.destroy(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Compile compiles a StableHLO module given as MLIR text (MLIR bytecode is
// accepted too) into an Executable. Its entry function must be @main, and
// params the types of its parameters, in order (lower.Program's): every
// execution checks its arguments against them, since the CPU plugin checks
// only their byte sizes (an int32[2,3] buffer where the program wants
// float32[2,3] would be silently reinterpreted). nil params leaves the
// checks to the plugin. An invalid program is reported as an error.
func (c *Client) Compile(ctx context.Context, module []byte, params []Type) (*Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: compile: %w", err)
	}
	if len(module) == 0 {
		return nil, errors.New("pjrt: compile: empty program")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("compile", "client")
	}
	var le *C.PJRT_LoadedExecutable
	perr := C.xs_compile(c.api, c.c, (*C.char)(unsafe.Pointer(&module[0])), C.size_t(len(module)),
		(*C.char)(unsafe.Pointer(&compileOptions[0])), C.size_t(len(compileOptions)), &le)
	if perr != nil {
		return nil, fmt.Errorf("pjrt: compile: %w", pluginError(c.api, perr))
	}
	return c.adopt(le, cloneTypes(params), false)
}

// adopt makes an Executable of le, compiled or deserialized (which
// Serialize refuses, see there); the caller holds mu for reading. It
// destroys le on failure.
func (c *Client) adopt(le *C.PJRT_LoadedExecutable, params []Type, deserialized bool) (*Executable, error) {
	var name *C.char
	var nameSize, outs C.size_t
	if perr := C.xs_executable_info(c.api, le, &name, &nameSize, &outs); perr != nil {
		C.xs_loaded_free(c.api, le)
		return nil, fmt.Errorf("pjrt: executable: %w", pluginError(c.api, perr))
	}
	e := &Executable{
		client:       c,
		name:         C.GoStringN(name, C.int(nameSize)),
		numOutputs:   int(outs),
		params:       params,
		le:           le,
		deserialized: deserialized,
	}
	C.free(unsafe.Pointer(name))
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
