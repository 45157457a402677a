package pjrt

// The binding of the PJRT C API: capi_gen.h and capi_gen.c, generated from
// the header (internal/capigen), call the plugin's table; capi.c holds the
// C helpers the Go side and hostrun.c share. This file loads plugins and
// converts their errors.

//go:generate go run ./internal/capigen -header internal/capi/pjrt_c_api.h -out .

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// plugin is a loaded PJRT plugin: its API table, initialized once.
type plugin struct {
	path         string
	api          *C.PJRT_Api
	major, minor int
	attributes   string // " (k=v, ...)", sorted by name, or ""
}

// registerMu serializes plugin loading and kernel registration, which
// happen once per process per plugin (plugins).
var registerMu sync.Mutex

// plugins are the plugins loaded, by absolute path: a plugin stays loaded
// for the life of the process. Guarded by registerMu.
var plugins = map[string]*plugin{}

// openPlugin loads the plugin file abs (an absolute, symlink-free path)
// once per process and initializes it.
func openPlugin(abs string) (*plugin, error) {
	registerMu.Lock()
	defer registerMu.Unlock()
	if p, ok := plugins[abs]; ok {
		return p, nil
	}
	cpath := C.CString(abs)
	defer C.free(unsafe.Pointer(cpath))
	var api *C.PJRT_Api
	var errbuf [512]C.char
	if msg := C.xs_load_plugin(cpath, &api, &errbuf[0], C.size_t(len(errbuf))); msg != nil {
		return nil, fmt.Errorf("load PJRT plugin %s: %s", abs, C.GoString(msg))
	}
	var init C.PJRT_Plugin_Initialize_Args
	if perr := C.xs_PJRT_Plugin_Initialize(api, &init); perr != nil {
		if err := pluginError(api, perr); !errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("initialize PJRT plugin %s: %w", abs, err)
		}
	}
	p := &plugin{
		path:  abs,
		api:   api,
		major: int(api.pjrt_api_version.major_version),
		minor: int(api.pjrt_api_version.minor_version),
	}
	var buf [4096]C.char
	if perr := C.xs_plugin_attributes(api, &buf[0], C.size_t(len(buf))); perr != nil {
		_ = pluginError(api, perr) // a plugin without attributes
	} else {
		p.attributes = formatAttributes(C.GoString(&buf[0]))
	}
	plugins[abs] = p
	return p, nil
}

// apiVersion returns the PJRT C API version the plugin implements, "0.81".
func (p *plugin) apiVersion() string { return fmt.Sprintf("%d.%d", p.major, p.minor) }

// formatAttributes renders the "name=value" lines of xs_plugin_attributes
// as " (k=v, ...)", sorted by name.
func formatAttributes(lines string) string {
	attrs := strings.Split(strings.TrimSpace(lines), "\n")
	if attrs[0] == "" {
		return ""
	}
	slices.Sort(attrs)
	return " (" + strings.Join(attrs, ", ") + ")"
}

// pluginErr is an error returned by the plugin.
type pluginErr struct {
	code int
	msg  string
}

func (e *pluginErr) Error() string {
	code, ok := enumNames["PJRT_Error_Code"][e.code]
	if !ok {
		code = fmt.Sprintf("code %d", e.code)
	}
	return fmt.Sprintf("plugin error %s: %s", code, e.msg)
}

// Is makes an UNIMPLEMENTED error (an entry the plugin's table lacks among
// them) match errors.ErrUnsupported.
func (e *pluginErr) Is(target error) bool {
	return target == errors.ErrUnsupported && e.code == C.PJRT_Error_Code_UNIMPLEMENTED
}

// pluginError converts and destroys a PJRT_Error (or a sentinel of
// capi_gen.h).
func pluginError(api *C.PJRT_Api, perr *C.PJRT_Error) error {
	var msg *C.char
	var size C.size_t
	code := C.xs_error_read(api, perr, &msg, &size)
	defer C.free(unsafe.Pointer(msg))
	return &pluginErr{code: int(code), msg: C.GoStringN(msg, C.int(size))}
}

// compileOptions is the serialized xla.CompileOptionsProto every program is
// compiled with: a portable executable (it runs on the device each
// execution names) for one replica and one partition.
var compileOptions = func() []byte {
	var build []byte
	build = protowire.AppendTag(build, 1, protowire.VarintType) // device_ordinal: -1, not set
	build = protowire.AppendVarint(build, uint64(0xffffffffffffffff))
	build = protowire.AppendTag(build, 4, protowire.VarintType) // num_replicas
	build = protowire.AppendVarint(build, 1)
	build = protowire.AppendTag(build, 5, protowire.VarintType) // num_partitions
	build = protowire.AppendVarint(build, 1)
	var opts []byte
	opts = protowire.AppendTag(opts, 3, protowire.BytesType) // executable_build_options
	opts = protowire.AppendBytes(opts, build)
	opts = protowire.AppendTag(opts, 4, protowire.VarintType) // compile_portable_executable
	opts = protowire.AppendVarint(opts, 1)
	return opts
}()
