package pjrt

// CPU kernels: custom-call targets xserve provides to XLA CPU.
//
// The library cpukernels/ builds (libxserve_cpukernels.so, `make pjrt`
// installs it next to the CPU plugin) holds XLA FFI handlers, e.g. a oneDNN
// convolution, and a table of them (xserve_cpu_kernels). Open loads it for a
// CPU client and registers each handler with the plugin through the PJRT FFI
// extension; Client.Kernels then names the targets, and the lowering emits
// custom calls to them (lower.Options.Kernels) instead of the StableHLO ops
// XLA CPU computes slowly.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"

// The PJRT FFI extension's ABI (xla/pjrt/c/pjrt_c_api_ffi_extension.h): the
// table and the argument struct of its handler registration.
typedef struct xs_ffi_register_args {
	size_t struct_size;
	const char* target_name;
	size_t target_name_size;
	void* handler;
	const char* platform_name;
	size_t platform_name_size;
	unsigned int traits;
} xs_ffi_register_args;

typedef struct xs_ffi_extension {
	PJRT_Extension_Base base;
	void* type_id_register;
	void* user_data_add;
	PJRT_Error* (*register_handler)(xs_ffi_register_args* args);
} xs_ffi_extension;

typedef struct xs_cpu_kernel {
	const char* name;
	void* handler;
} xs_cpu_kernel;

typedef const xs_cpu_kernel* (*xs_cpu_kernels_fn)(int* n);
typedef int (*xs_cpu_kernels_abi_fn)(void);

// xs_load_kernels opens the kernel library at path (once per process: dlopen
// reference-counts it) and returns its ABI version in *abi, its table in
// *table, *n, and its xserve_cpu_kernels_thread_limit in *limit (NULL if
// it has none); NULL or an error message (static or dlerror's).
static const char* xs_load_kernels(const char* path, int* abi, const xs_cpu_kernel** table, int* n, void** limit) {
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char* e = dlerror();
		return e ? e : "dlopen failed";
	}
	xs_cpu_kernels_fn fn = (xs_cpu_kernels_fn)dlsym(h, "xserve_cpu_kernels");
	xs_cpu_kernels_abi_fn abi_fn = (xs_cpu_kernels_abi_fn)dlsym(h, "xserve_cpu_kernels_abi");
	if (fn == NULL || abi_fn == NULL) {
		return "no symbols xserve_cpu_kernels and xserve_cpu_kernels_abi (not an xserve kernel library)";
	}
	*abi = abi_fn();
	*table = fn(n);
	*limit = dlsym(h, "xserve_cpu_kernels_thread_limit");
	return NULL;
}

// xs_register_ffi registers handler as the FFI target name for the XLA CPU
// ("Host") platform through the plugin's PJRT FFI extension. It returns 1
// when the plugin has no extension able to do it.
static int xs_register_ffi(const PJRT_Api* api, const char* name, void* handler, PJRT_Error** err) {
	const PJRT_Extension_Base* ext = api->extension_start;
	while (ext != NULL && ext->type != PJRT_Extension_Type_FFI) {
		ext = ext->next;
	}
	if (ext == NULL || ext->struct_size < sizeof(xs_ffi_extension)) {
		return 1;
	}
	const xs_ffi_extension* ffi = (const xs_ffi_extension*)ext;
	if (ffi->register_handler == NULL) {
		return 1;
	}
	xs_ffi_register_args a;
	memset(&a, 0, sizeof a);
	a.struct_size = sizeof a;
	a.target_name = name;
	a.target_name_size = strlen(name);
	a.handler = handler;
	a.platform_name = "Host";
	a.platform_name_size = 4;
	*err = ffi->register_handler(&a);
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"
)

// EnvCPUKernels names the CPU kernel library to load, or "off" to load none.
// Unset: the library `make pjrt` installs next to the CPU plugin, if there.
const EnvCPUKernels = "XSERVE_CPU_KERNELS"

// CPUKernelsFile is the file name of the CPU kernel library, installed next
// to the CPU plugin.
const CPUKernelsFile = "libxserve_cpukernels.so"

// cpuKernelsABI is the kernel calling convention (targets, operands,
// attributes) this build's lowering emits: XSERVE_CPU_KERNELS_ABI in
// cpukernels/kernels.c. A library of another one is refused.
const cpuKernelsABI = 9

// registeredKernels maps a plugin table and kernel library to what was
// registered for them: a handler is registered once per process. Guarded
// by registerMu.
var registeredKernels = map[kernelsKey]loadedKernels{}

// loadedKernels is a kernel library registered with a plugin: its targets,
// and its xserve_cpu_kernels_thread_limit (a C function pointer).
type loadedKernels struct {
	names []string
	limit unsafe.Pointer
}

type kernelsKey struct {
	api  *C.PJRT_Api
	file string
}

// findCPUKernels returns the kernel library to load for the CPU plugin at
// pluginPath ("" for none) and whether it was asked for explicitly.
func findCPUKernels(pluginPath string) (string, bool) {
	switch v := os.Getenv(EnvCPUKernels); strings.ToLower(v) {
	case "off", "none", "0", "false":
		return "", false
	case "":
		p := filepath.Join(filepath.Dir(pluginPath), CPUKernelsFile)
		if _, err := os.Stat(p); err != nil {
			return "", false
		}
		return p, false
	default:
		return v, true
	}
}

// openMPSpin is the GOMP_SPINCOUNT the kernels' OpenMP runtime gets unless
// the environment sets it or OMP_WAIT_POLICY: how many times a thread of a
// team polls for the next parallel region before it sleeps, about 0.25 ms
// here instead of libgomp's default 300000 (several milliseconds). After
// an execution whose large kernels ran on a team, its idle threads spun that
// long on the other cores, where a split execution's shards (and the
// server's other threads) needed them: the split chooser, probing split
// runs right after whole ones, measured them slowed and kept buckets whole
// that ran 1.7x faster split (docs/BENCHMARKS.md). Executions themselves
// measured the same either way.
const openMPSpin = "10000"

// setOpenMPSpin sets GOMP_SPINCOUNT to openMPSpin unless the environment
// chose a spin count or wait policy. libgomp reads it when it is loaded,
// which is with the kernel library.
func setOpenMPSpin() {
	if os.Getenv("GOMP_SPINCOUNT") != "" || os.Getenv("OMP_WAIT_POLICY") != "" {
		return
	}
	_ = os.Setenv("GOMP_SPINCOUNT", openMPSpin) // in a cgo binary this sets the C environment too
}

// loadKernels registers the handlers of the kernel library file with the
// plugin whose table is api and returns their target names and the
// library's thread-limit function.
func loadKernels(api *C.PJRT_Api, file string) (loadedKernels, error) {
	var none loadedKernels
	abs, err := filepath.Abs(file)
	if err != nil {
		return none, err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	registerMu.Lock()
	defer registerMu.Unlock()
	key := kernelsKey{api, abs}
	if k, ok := registeredKernels[key]; ok {
		return k, nil
	}
	setOpenMPSpin()
	cpath := C.CString(abs)
	defer C.free(unsafe.Pointer(cpath))
	var table *C.xs_cpu_kernel
	var n, abi C.int
	var limit unsafe.Pointer
	if msg := C.xs_load_kernels(cpath, &abi, &table, &n, &limit); msg != nil {
		return none, fmt.Errorf("load CPU kernels %s: %s", abs, C.GoString(msg))
	}
	if abi != cpuKernelsABI {
		return none, fmt.Errorf("load CPU kernels %s: kernel ABI %d, this build needs %d (rebuild it: make pjrt)", abs, abi, cpuKernelsABI)
	}
	if n < 0 || n > 1024 {
		return none, fmt.Errorf("load CPU kernels %s: implausible table length %d", abs, n)
	}
	if limit == nil {
		return none, fmt.Errorf("load CPU kernels %s: no symbol xserve_cpu_kernels_thread_limit (rebuild it: make pjrt)", abs)
	}
	var names []string
	for _, k := range unsafe.Slice(table, int(n)) {
		name := C.GoString(k.name)
		var perr *C.PJRT_Error
		if C.xs_register_ffi(api, k.name, k.handler, &perr) != 0 {
			return none, errors.New("the PJRT plugin has no FFI extension to register custom-call handlers with")
		}
		if perr != nil {
			return none, fmt.Errorf("register CPU kernel %s: %w", name, pluginError(api, perr))
		}
		names = append(names, name)
	}
	k := loadedKernels{names: names, limit: limit}
	registeredKernels[key] = k
	return k, nil
}

// EnvCPUKernelsSkip lists, comma-separated, kernel targets Client.Kernels
// leaves out although the library has them, so that programs compute those
// ops XLA's way: an A/B switch per kernel (bench/peers.py's baselines).
const EnvCPUKernelsSkip = "XSERVE_CPU_KERNELS_SKIP"

// Kernels returns the custom-call targets this client's plugin has from
// xserve's CPU kernel library (empty when none was loaded), less those
// $XSERVE_CPU_KERNELS_SKIP names; pass them to lower.Options.Kernels.
func (c *Client) Kernels() []string {
	skip := strings.Split(os.Getenv(EnvCPUKernelsSkip), ",")
	var out []string
	for _, k := range c.kernels {
		if !slices.Contains(skip, k) {
			out = append(out, k)
		}
	}
	return out
}

// KernelsFile returns the CPU kernel library loaded, or "".
func (c *Client) KernelsFile() string { return c.kernelsFile }

// KernelsError returns why the CPU kernel library found next to the plugin
// could not be loaded (the client then lowers without its kernels), or nil.
func (c *Client) KernelsError() error { return c.kernelsErr }
