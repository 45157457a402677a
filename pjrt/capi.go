package pjrt

// How this package reaches PJRT C API functions go-xla does not bind
// (PJRT_Executable_Serialize and PJRT_Executable_DeserializeAndLoad) using
// only go-xla's public API.
//
// Open loads the plugin itself (capi_plugin.c) and hands go-xla a copy of the
// plugin's PJRT_Api table through pjrt.RegisterPreloadedPlugin. The copy
// differs in one entry: its PJRT_Client_Compile reads a 16-byte prefix that
// this package puts before every program it compiles:
//
//	magic (8 bytes) | address of a C PJRT_LoadedExecutable* slot (uint64, native endian)
//
// With the compile magic the wrapper compiles the rest and stores the new
// executable's handle in the slot, so that Executable.Serialize can pass it
// to PJRT_Executable_Serialize. With the load magic the rest is a serialized
// executable, which the wrapper loads with PJRT_Executable_DeserializeAndLoad
// instead of compiling it. Either way go-xla's own Compile().Done() builds
// the LoadedExecutable, exactly as for any compiled program. Programs
// without a prefix (other users of the table) are compiled unchanged.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#include "capi_plugin.h"

// xs_client_platform returns the client's platform name (owned by the
// client) in *name, *name_size.
static PJRT_Error* xs_client_platform(const PJRT_Api* api, PJRT_Client* client,
		const char** name, size_t* name_size) {
	PJRT_Client_PlatformName_Args a;
	memset(&a, 0, sizeof a);
	a.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
	a.client = client;
	PJRT_Error* err = api->PJRT_Client_PlatformName(&a);
	if (err == NULL) {
		*name = a.platform_name;
		*name_size = a.platform_name_size;
	}
	return err;
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	gopjrt "github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/go-xla/pkg/types/dtypes"
)

// pluginTable is the plugin's own PJRT_Api table (not the wrapped copy), and
// once newClient has made one, the PJRT_Client of a Client.
type pluginTable struct {
	api    *C.PJRT_Api
	slot   C.int
	client *C.PJRT_Client
}

// loadedHandle is the PJRT_LoadedExecutable of an Executable, owned by its
// go-xla LoadedExecutable.
type loadedHandle struct {
	le *C.PJRT_LoadedExecutable
	// deserialized marks an executable made by Client.Deserialize, which
	// Serialize refuses: with the XLA CPU plugin (PJRT C API 0.81),
	// serializing a deserialized executable succeeds but leaves out the
	// object code of its kernels, so that the executable deserialized from
	// that fails to execute ("Function ... not found").
	deserialized bool
}

// registerMu serializes plugin registration (go-xla's
// RegisterPreloadedPlugin writes its plugin map without a lock) and client
// creation (the wrapped PJRT_Client_Create notes one client per plugin).
var registerMu sync.Mutex

// openPlugin loads the plugin file abs (an absolute, symlink-free path) once
// per process and returns go-xla's Plugin for its wrapped table, and the
// plugin's own table.
func openPlugin(abs string) (*gopjrt.Plugin, pluginTable, error) {
	registerMu.Lock()
	defer registerMu.Unlock()
	cpath := C.CString(abs)
	defer C.free(unsafe.Pointer(cpath))
	var orig, wrapped *C.PJRT_Api
	var created, slot C.int
	var errbuf [512]C.char
	if msg := C.xs_open_plugin(cpath, &orig, &wrapped, &created, &slot, &errbuf[0], C.size_t(len(errbuf))); msg != nil {
		return nil, pluginTable{}, fmt.Errorf("load PJRT plugin %s: %s", abs, C.GoString(msg))
	}
	name := "xserve:" + abs
	if created != 0 {
		if err := gopjrt.RegisterPreloadedPlugin(name, uintptr(unsafe.Pointer(wrapped))); err != nil {
			return nil, pluginTable{}, fmt.Errorf("initialize PJRT plugin %s: %w", abs, err)
		}
	}
	plugin, err := gopjrt.GetPlugin(name)
	if err != nil {
		return nil, pluginTable{}, fmt.Errorf("PJRT plugin %s (its initialization failed earlier in this process?): %w", abs, err)
	}
	return plugin, pluginTable{api: orig, slot: slot}, nil
}

// newClient creates a go-xla client of plugin (opened by openPlugin, whose
// table t is) with the PJRT_Client_Create options opts (nil for none) and
// returns it with t completed by its PJRT_Client handle.
func (t pluginTable) newClient(plugin *gopjrt.Plugin, opts gopjrt.NamedValuesMap) (*gopjrt.Client, pluginTable, error) {
	registerMu.Lock()
	defer registerMu.Unlock()
	C.xs_take_created_client(t.slot)
	xc, err := plugin.NewClient(opts)
	if err != nil {
		return nil, t, err
	}
	t.client = C.xs_take_created_client(t.slot)
	if t.client == nil {
		_ = xc.Destroy()
		return nil, t, fmt.Errorf("the PJRT plugin table in use is not xserve's wrapped one (no client handle recorded)")
	}
	// Cross-check the handle against what go-xla read from its client.
	var name *C.char
	var size C.size_t
	if perr := C.xs_client_platform(t.api, t.client, &name, &size); perr != nil {
		_ = xc.Destroy()
		return nil, t, pluginError(t.api, perr)
	}
	if got := C.GoStringN(name, C.int(size)); got != xc.Platform() {
		_ = xc.Destroy()
		return nil, t, fmt.Errorf("the client handle recorded reports platform %q, go-xla's client %q", got, xc.Platform())
	}
	return xc, t, nil
}

// compileProgram has go-xla compile program (StableHLO text or bytecode) or,
// if load, load it as a PJRT_Executable_Serialize payload, through the
// wrapped table; it returns go-xla's executable and its C handle.
func compileProgram(xc *gopjrt.Client, program []byte, load bool) (*gopjrt.LoadedExecutable, loadedHandle, error) {
	slot := (**C.PJRT_LoadedExecutable)(C.calloc(1, C.size_t(unsafe.Sizeof((*C.PJRT_LoadedExecutable)(nil)))))
	if slot == nil {
		return nil, loadedHandle{}, fmt.Errorf("out of C memory")
	}
	defer C.free(unsafe.Pointer(slot))
	magic := C.xs_magic_compile
	if load {
		magic = C.xs_magic_load
	}
	prefixed := make([]byte, C.XS_PREFIX_SIZE, C.XS_PREFIX_SIZE+len(program))
	for i := range C.XS_MAGIC_SIZE {
		prefixed[i] = byte(magic[i])
	}
	binary.NativeEndian.PutUint64(prefixed[C.XS_MAGIC_SIZE:], uint64(uintptr(unsafe.Pointer(slot))))
	prefixed = append(prefixed, program...)
	le, err := xc.Compile().WithStableHLO(prefixed).Done()
	if err != nil {
		return nil, loadedHandle{}, err
	}
	h := loadedHandle{le: *slot}
	if h.le == nil {
		_ = le.Destroy()
		return nil, loadedHandle{}, fmt.Errorf("the PJRT plugin table in use is not xserve's wrapped one (no executable handle recorded)")
	}
	return le, h, nil
}

// uploadCaptured has go-xla copy data to xc's first device (waiting until
// the plugin holds its own copy) and returns the buffer with its
// PJRT_Buffer handle, noted by the wrapped PJRT_Client_BufferFromHostBuffer
// on this thread (nil where the table in use is not the wrapped one).
func uploadCaptured(xc *gopjrt.Client, data []byte, xdt dtypes.DType, dims []int) (*gopjrt.Buffer, *C.PJRT_Buffer, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	C.xs_capture_begin()
	xb, err := xc.BufferFromHost().FromRawData(data, xdt, dims).Done()
	h := C.xs_capture_end()
	if err != nil {
		return nil, nil, err
	}
	return xb, h, nil
}
