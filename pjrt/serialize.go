package pjrt

// Serialization of compiled executables (Executable.Serialize and
// Client.Deserialize).
//
// go-xla v0.1.4 binds neither PJRT_Executable_Serialize nor
// PJRT_Executable_DeserializeAndLoad. This file calls them itself, on the C
// handles capi.go obtains through go-xla's public API: Serialize passes the
// PJRT_LoadedExecutable handle the wrapped compile recorded to the plugin's
// own PJRT_Executable_Serialize; Deserialize has go-xla "compile" a program
// the wrapped compile recognises as a payload to load with
// PJRT_Executable_DeserializeAndLoad, so the result is an ordinary go-xla
// LoadedExecutable. A plugin without those functions yields an error
// wrapping errors.ErrUnsupported. The C declarations come from the PJRT C API
// header of the XLA CPU plugin wheel, vendored in internal/capi.
//
// The data Serialize returns is an envelope around the plugin's bytes: a
// magic number, a JSON header (program name, output count, @main parameter
// types, plugin identity), the plugin's payload and a SHA-256 of all that.
// Deserialize checks the checksum and the plugin identity before the plugin
// sees the payload: a PJRT payload holds native code and must only ever be
// loaded into the plugin build that produced it.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#cgo LDFLAGS: -ldl
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"

#define XS_HAS(api, fn) \
	((api)->struct_size >= offsetof(PJRT_Api, fn) + sizeof((api)->fn) && (api)->fn != NULL)

// xs_api_missing returns the name of the first API function this file needs
// that the table lacks, or NULL.
static const char* xs_api_missing(const PJRT_Api* api) {
#define XS_NEED(fn) if (!XS_HAS(api, fn)) return #fn
	XS_NEED(PJRT_Error_Destroy);
	XS_NEED(PJRT_Error_Message);
	XS_NEED(PJRT_Error_GetCode);
	XS_NEED(PJRT_Executable_Destroy);
	XS_NEED(PJRT_Executable_Name);
	XS_NEED(PJRT_LoadedExecutable_GetExecutable);
	XS_NEED(PJRT_Executable_Serialize);
	XS_NEED(PJRT_Executable_DeserializeAndLoad);
#undef XS_NEED
	return NULL;
}

// xs_error consumes err: it returns its code and a malloc'ed copy of its
// message (free it), and destroys it.
static int xs_error(const PJRT_Api* api, PJRT_Error* err, char** msg, size_t* msg_size) {
	PJRT_Error_Message_Args ma;
	memset(&ma, 0, sizeof ma);
	ma.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
	ma.error = err;
	api->PJRT_Error_Message(&ma);
	*msg_size = ma.message_size;
	*msg = malloc(ma.message_size + 1);
	if (*msg != NULL) {
		if (ma.message_size > 0) memcpy(*msg, ma.message, ma.message_size);
		(*msg)[ma.message_size] = 0;
	} else {
		*msg_size = 0;
	}
	PJRT_Error_GetCode_Args ca;
	memset(&ca, 0, sizeof ca);
	ca.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
	ca.error = err;
	int code = PJRT_Error_Code_UNKNOWN;
	PJRT_Error* e2 = api->PJRT_Error_GetCode(&ca);
	if (e2 == NULL) {
		code = ca.code;
	} else {
		PJRT_Error_Destroy_Args d2;
		memset(&d2, 0, sizeof d2);
		d2.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
		d2.error = e2;
		api->PJRT_Error_Destroy(&d2);
	}
	PJRT_Error_Destroy_Args da;
	memset(&da, 0, sizeof da);
	da.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
	da.error = err;
	api->PJRT_Error_Destroy(&da);
	return code;
}

typedef struct {
	char* name;  // malloc'ed copy of the executable's name; free it
	size_t name_size;
	const char* bytes;  // the serialization, owned by handle
	size_t size;
	PJRT_SerializedExecutable* handle;
	void (*deleter)(PJRT_SerializedExecutable*);
} xs_serialized;

// xs_serialize serializes the executable of a loaded executable into *out,
// which must then be released with xs_serialized_free (also on error).
static PJRT_Error* xs_serialize(const PJRT_Api* api, PJRT_LoadedExecutable* le, xs_serialized* out) {
	memset(out, 0, sizeof *out);
	PJRT_LoadedExecutable_GetExecutable_Args ga;
	memset(&ga, 0, sizeof ga);
	ga.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
	ga.loaded_executable = le;
	PJRT_Error* err = api->PJRT_LoadedExecutable_GetExecutable(&ga);
	if (err != NULL) return err;

	PJRT_Executable_Name_Args na;
	memset(&na, 0, sizeof na);
	na.struct_size = PJRT_Executable_Name_Args_STRUCT_SIZE;
	na.executable = ga.executable;
	err = api->PJRT_Executable_Name(&na);
	if (err == NULL) {
		out->name = malloc(na.executable_name_size + 1);
		if (out->name != NULL) {
			if (na.executable_name_size > 0) memcpy(out->name, na.executable_name, na.executable_name_size);
			out->name[na.executable_name_size] = 0;
			out->name_size = na.executable_name_size;
		}

		PJRT_Executable_Serialize_Args sa;
		memset(&sa, 0, sizeof sa);
		sa.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
		sa.executable = ga.executable;
		err = api->PJRT_Executable_Serialize(&sa);
		if (err == NULL) {
			out->bytes = sa.serialized_bytes;
			out->size = sa.serialized_bytes_size;
			out->handle = sa.serialized_executable;
			out->deleter = sa.serialized_executable_deleter;
		}
	}

	PJRT_Executable_Destroy_Args da;
	memset(&da, 0, sizeof da);
	da.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
	da.executable = ga.executable;
	PJRT_Error* derr = api->PJRT_Executable_Destroy(&da);
	if (err == NULL) {
		err = derr;
	} else if (derr != NULL) {
		PJRT_Error_Destroy_Args ea;
		memset(&ea, 0, sizeof ea);
		ea.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
		ea.error = derr;
		api->PJRT_Error_Destroy(&ea);
	}
	return err;
}

static void xs_serialized_free(xs_serialized* s) {
	if (s->handle != NULL && s->deleter != NULL) s->deleter(s->handle);
	free(s->name);
	memset(s, 0, sizeof *s);
}

*/
import "C"

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/xserve/xserve/tensor"
)

// missingAPI returns an error wrapping errors.ErrUnsupported if the plugin
// lacks a function serialization needs.
func (c *Client) missingAPI() error {
	if missing := C.xs_api_missing(c.api.api); missing != nil {
		major, minor := c.plugin.Version()
		return fmt.Errorf("plugin %s (PJRT C API %d.%d) has no %s: %w", c.path, major, minor, C.GoString(missing), errors.ErrUnsupported)
	}
	return nil
}

// pluginErr is an error returned by the plugin.
type pluginErr struct {
	code int
	msg  string
}

// The PJRT_Error_Code names, indexed by code (they follow absl::StatusCode).
var pjrtCodes = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func (e *pluginErr) Error() string {
	code := fmt.Sprintf("code %d", e.code)
	if e.code >= 0 && e.code < len(pjrtCodes) {
		code = pjrtCodes[e.code]
	}
	return fmt.Sprintf("plugin error %s: %s", code, e.msg)
}

// Is makes an UNIMPLEMENTED error match errors.ErrUnsupported.
func (e *pluginErr) Is(target error) bool {
	return target == errors.ErrUnsupported && e.code == C.PJRT_Error_Code_UNIMPLEMENTED
}

// pluginError converts and destroys a PJRT_Error.
func pluginError(api *C.PJRT_Api, perr *C.PJRT_Error) error {
	var msg *C.char
	var size C.size_t
	code := C.xs_error(api, perr, &msg, &size)
	defer C.free(unsafe.Pointer(msg))
	return &pluginErr{code: int(code), msg: C.GoStringN(msg, C.int(size))}
}

// Serialize returns the compiled executable in a form Client.Deserialize can
// load into a client of the same plugin build on the same kind of host,
// skipping compilation (e.g. for an on-disk compile cache). The data starts
// with the plugin's identity and ends with a checksum; it holds native code,
// so only load data from a trusted source. It fails with an error wrapping
// errors.ErrUnsupported when the plugin cannot serialize.
func (e *Executable) Serialize() ([]byte, error) {
	c := e.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("serialize "+e.name, "client")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.le == nil {
		return nil, errClosed("serialize "+e.name, "executable")
	}
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("pjrt: serialize executable %s: %w", e.name, err)
	}
	if e.handle.deserialized {
		return fail(fmt.Errorf("it was deserialized, and re-serializing is not supported "+
			"(the XLA CPU plugin's serialization of a deserialized executable lacks the compiled kernels): "+
			"keep the data it was deserialized from: %w", errors.ErrUnsupported))
	}
	if err := c.missingAPI(); err != nil {
		return fail(err)
	}
	h, err := c.identity()
	if err != nil {
		return fail(err)
	}
	var s C.xs_serialized
	perr := C.xs_serialize(c.api.api, e.handle.le, &s)
	defer C.xs_serialized_free(&s)
	runtime.KeepAlive(e.le) // owns the handle
	if perr != nil {
		return fail(pluginError(c.api.api, perr))
	}
	if name := C.GoStringN(s.name, C.int(s.name_size)); name != e.le.Name {
		return fail(fmt.Errorf("the executable handle recorded at compile time is named %q, go-xla's executable %q", name, e.le.Name))
	}
	if s.bytes == nil || s.size == 0 {
		return fail(errors.New("plugin returned an empty serialization"))
	}
	if uint64(s.size) > uint64(maxPayload) {
		return fail(fmt.Errorf("serialization of %d bytes is too large", uint64(s.size)))
	}
	payload := unsafe.Slice((*byte)(unsafe.Pointer(s.bytes)), int(s.size))

	if reps, parts, _, err := e.le.GetDeviceAssignment(); err != nil {
		return fail(err)
	} else if reps*parts != 1 {
		return fail(fmt.Errorf("executable runs on %d replicas x %d partitions, only single-device executables can be serialized: %w", reps, parts, errors.ErrUnsupported))
	}
	h.Portable = e.le.IsPortable()
	h.Name = e.name
	h.NumOutputs = e.numOutputs
	if e.paramsKnown {
		h.Params = make([]paramHeader, len(e.params))
		for i, p := range e.params {
			if p.known {
				h.Params[i] = paramHeader{DType: p.dtype.String(), Shape: append([]int64{}, p.shape...)}
			} else {
				h.Params[i] = paramHeader{Unknown: true}
			}
		}
	}
	data, err := marshalEnvelope(h, payload)
	if err != nil {
		return fail(err)
	}
	return data, nil
}

// Deserialize loads an executable serialized by Executable.Serialize into
// this client, without compiling it. The data must come from a client of the
// same plugin build (same file size and version) on the same kind of host;
// corrupt or foreign data is reported as an error. The data holds native code:
// only load data from a trusted source. It fails with an error wrapping
// errors.ErrUnsupported when the plugin cannot deserialize; compile the
// StableHLO instead then.
func (c *Client) Deserialize(ctx context.Context, data []byte) (*Executable, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: deserialize: %w", err)
	}
	fail := func(err error) (*Executable, error) {
		return nil, fmt.Errorf("pjrt: deserialize executable: %w", err)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("deserialize", "client")
	}
	// Unsupported is said whatever the data.
	if err := c.missingAPI(); err != nil {
		return fail(err)
	}
	h, payload, err := unmarshalEnvelope(data)
	if err != nil {
		return fail(err)
	}
	params, paramsKnown, err := h.params()
	if err != nil {
		return fail(err)
	}
	mine, err := c.identity()
	if err != nil {
		return fail(err)
	}
	if err := mine.compatible(h); err != nil {
		return fail(err)
	}

	le, handle, err := compileProgram(c.c, payload, true)
	if err != nil {
		// go-xla words it as a compile error; it is the plugin's
		// PJRT_Executable_DeserializeAndLoad that failed.
		return fail(fmt.Errorf("plugin rejected the serialized executable (PJRT_Executable_DeserializeAndLoad): %w", err))
	}
	handle.deserialized = true
	if le.NumOutputs != h.NumOutputs {
		_ = le.Destroy()
		return fail(fmt.Errorf("deserialized executable has %d outputs, header says %d", le.NumOutputs, h.NumOutputs))
	}
	if le.IsPortable() != h.Portable {
		_ = le.Destroy()
		return fail(fmt.Errorf("serialized executable portable=%v, loaded as portable=%v: %w", h.Portable, le.IsPortable(), errors.ErrUnsupported))
	}
	e := &Executable{
		client:      c,
		name:        h.Name,
		numOutputs:  le.NumOutputs,
		params:      params,
		paramsKnown: paramsKnown,
		le:          le,
		handle:      handle,
	}
	c.execMu.Lock()
	c.execs[e] = struct{}{}
	c.execMu.Unlock()
	return e, nil
}

// Envelope: magic, uint32 header length, JSON header, uint64 payload length,
// payload, SHA-256 of everything before it. Integers are little-endian.
const (
	envelopeMagic = "XSPJRTX1"
	maxHeader     = 1 << 24
	maxPayload    = 1 << 40
)

// envelopeHeader describes the executable and the plugin that produced it.
type envelopeHeader struct {
	Platform      string        `json:"platform"`
	PluginVersion string        `json:"plugin_version"`
	PluginSize    int64         `json:"plugin_size"`
	Host          string        `json:"host"`
	Name          string        `json:"name"`
	NumOutputs    int           `json:"num_outputs"`
	Portable      bool          `json:"portable"` // compiled to run on any one device
	Params        []paramHeader `json:"params"`   // nil: unknown
}

type paramHeader struct {
	DType   string  `json:"dtype,omitempty"`
	Shape   []int64 `json:"shape,omitempty"`
	Unknown bool    `json:"unknown,omitempty"`
}

// identity returns the header fields that identify the client's plugin.
func (c *Client) identity() (envelopeHeader, error) {
	fi, err := os.Stat(c.path)
	if err != nil {
		return envelopeHeader{}, fmt.Errorf("plugin identity: %w", err)
	}
	return envelopeHeader{
		Platform:      c.platform,
		PluginVersion: c.version,
		PluginSize:    fi.Size(),
		Host:          hostIdentity(),
	}, nil
}

// compatible reports whether data serialized as described by h may be loaded
// by the plugin mine describes.
func (mine envelopeHeader) compatible(h envelopeHeader) error {
	switch {
	case h.Platform != mine.Platform:
		return fmt.Errorf("serialized for platform %q, this client is %q", h.Platform, mine.Platform)
	case h.PluginVersion != mine.PluginVersion || h.PluginSize != mine.PluginSize:
		return fmt.Errorf("serialized by plugin %s of %d bytes, this client's is %s of %d bytes",
			h.PluginVersion, h.PluginSize, mine.PluginVersion, mine.PluginSize)
	case h.Host != mine.Host:
		return fmt.Errorf("serialized on host %q, this one is %q", h.Host, mine.Host)
	}
	return nil
}

func (h envelopeHeader) params() ([]paramType, bool, error) {
	if h.NumOutputs < 0 {
		return nil, false, fmt.Errorf("corrupt data: %d outputs", h.NumOutputs)
	}
	if h.Params == nil {
		return nil, false, nil
	}
	params := make([]paramType, len(h.Params))
	for i, p := range h.Params {
		if p.Unknown {
			continue
		}
		dt, err := tensor.ParseDType(p.DType)
		if err != nil {
			return nil, false, fmt.Errorf("corrupt data: parameter %d: %w", i, err)
		}
		for _, d := range p.Shape {
			if d < 0 {
				return nil, false, fmt.Errorf("corrupt data: parameter %d has shape %v", i, p.Shape)
			}
		}
		params[i] = paramType{known: true, dtype: dt, shape: append([]int64{}, p.Shape...)}
	}
	return params, true, nil
}

func marshalEnvelope(h envelopeHeader, payload []byte) ([]byte, error) {
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	n := len(envelopeMagic) + 4 + len(hj) + 8 + len(payload) + sha256.Size
	out := make([]byte, 0, n)
	out = append(out, envelopeMagic...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(hj)))
	out = append(out, hj...)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(payload)))
	out = append(out, payload...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

// unmarshalEnvelope checks data and returns its header and payload (a
// sub-slice of data).
func unmarshalEnvelope(data []byte) (envelopeHeader, []byte, error) {
	var h envelopeHeader
	corrupt := func(what string) (envelopeHeader, []byte, error) {
		return h, nil, fmt.Errorf("not data from Executable.Serialize, or corrupt: %s", what)
	}
	if len(data) < len(envelopeMagic)+4+8+sha256.Size || !bytes.HasPrefix(data, []byte(envelopeMagic)) {
		return corrupt("bad magic number or too short")
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return corrupt("checksum mismatch")
	}
	rest := body[len(envelopeMagic):]
	hlen := uint64(binary.LittleEndian.Uint32(rest))
	rest = rest[4:]
	if hlen > maxHeader || hlen+8 > uint64(len(rest)) {
		return corrupt("bad header length")
	}
	hj := rest[:hlen]
	rest = rest[hlen:]
	plen := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	if plen != uint64(len(rest)) || plen == 0 {
		return corrupt("bad payload length")
	}
	dec := json.NewDecoder(bytes.NewReader(hj))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return corrupt("bad header: " + err.Error())
	}
	return h, rest, nil
}

// hostIdentity names the machine kind native code was compiled for: OS,
// architecture and a digest of the CPU feature flags the kernel reports. XLA
// compiles CPU code for the host's features.
var hostIdentity = sync.OnceValue(func() string {
	id := runtime.GOOS + "/" + runtime.GOARCH
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return id
	}
	for line := range strings.Lines(string(info)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k == "flags" || k == "Features" {
			f := strings.Fields(v)
			sum := sha256.Sum256([]byte(strings.Join(f, " ")))
			return fmt.Sprintf("%s cpu:%x", id, sum[:8])
		}
	}
	return id
})
