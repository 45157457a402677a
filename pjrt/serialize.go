package pjrt

// Serialization of compiled executables (Executable.Serialize and
// Client.Deserialize), through PJRT_Executable_Serialize and
// PJRT_Executable_DeserializeAndLoad. A plugin without those functions
// yields an error wrapping errors.ErrUnsupported.
//
// The data Serialize returns is an envelope around the plugin's bytes: a
// magic number, a JSON header (program name, output count, @main parameter
// types, plugin identity), the plugin's payload and a SHA-256 of all that.
// Deserialize checks the checksum and the plugin identity before the plugin
// sees the payload: a PJRT payload holds native code and must only ever be
// loaded into the plugin build that produced it.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include <stdlib.h>
#include "capi.h"

// xs_api_missing returns the name of the first API function serialization
// needs that the table lacks, or NULL.
static const char* xs_api_missing(const PJRT_Api* api) {
#define XS_NEED(fn) \
	if (api->struct_size < offsetof(PJRT_Api, fn) + sizeof(api->fn) || api->fn == NULL) return #fn
	XS_NEED(PJRT_Executable_Destroy);
	XS_NEED(PJRT_LoadedExecutable_GetExecutable);
	XS_NEED(PJRT_Executable_Serialize);
	XS_NEED(PJRT_Executable_DeserializeAndLoad);
#undef XS_NEED
	return NULL;
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
	if missing := C.xs_api_missing(c.api); missing != nil {
		return fmt.Errorf("plugin %s (PJRT C API %s) has no %s: %w", c.path, c.apiVersion, C.GoString(missing), errors.ErrUnsupported)
	}
	return nil
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
	if e.deserialized {
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
	perr := C.xs_serialize(c.api, e.le, &s)
	defer C.xs_serialized_free(&s)
	if perr != nil {
		return fail(pluginError(c.api, perr))
	}
	if s.bytes == nil || s.size == 0 {
		return fail(errors.New("plugin returned an empty serialization"))
	}
	if uint64(s.size) > uint64(maxPayload) {
		return fail(fmt.Errorf("serialization of %d bytes is too large", uint64(s.size)))
	}
	payload := unsafe.Slice((*byte)(unsafe.Pointer(s.bytes)), int(s.size))
	h.Portable = true
	h.Name = e.name
	h.NumOutputs = e.numOutputs
	if e.params != nil {
		h.Params = make([]paramHeader, len(e.params))
		for i, p := range e.params {
			if p.known() {
				h.Params[i] = paramHeader{DType: p.DType.String(), Shape: append([]int64{}, p.Shape...)}
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
	params, err := h.params()
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
	if !h.Portable {
		return fail(fmt.Errorf("serialized executable is not portable: %w", errors.ErrUnsupported))
	}
	var le *C.PJRT_LoadedExecutable
	if perr := C.xs_deserialize(c.api, c.c, (*C.char)(unsafe.Pointer(&payload[0])), C.size_t(len(payload)), &le); perr != nil {
		return fail(fmt.Errorf("plugin rejected the serialized executable (PJRT_Executable_DeserializeAndLoad): %w", pluginError(c.api, perr)))
	}
	e, err := c.adopt(le, params, true)
	if err != nil {
		return fail(err)
	}
	if e.numOutputs != h.NumOutputs {
		_ = e.destroy()
		c.forget(e)
		return fail(fmt.Errorf("deserialized executable has %d outputs, header says %d", e.numOutputs, h.NumOutputs))
	}
	e.name = h.Name
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

func (h envelopeHeader) params() ([]Type, error) {
	if h.NumOutputs < 0 {
		return nil, fmt.Errorf("corrupt data: %d outputs", h.NumOutputs)
	}
	if h.Params == nil {
		return nil, nil
	}
	params := make([]Type, len(h.Params))
	for i, p := range h.Params {
		if p.Unknown {
			continue
		}
		dt, err := tensor.ParseDType(p.DType)
		if err != nil || dt == tensor.Invalid {
			return nil, fmt.Errorf("corrupt data: parameter %d: dtype %q", i, p.DType)
		}
		for _, d := range p.Shape {
			if d < 0 {
				return nil, fmt.Errorf("corrupt data: parameter %d has shape %v", i, p.Shape)
			}
		}
		params[i] = Type{DType: dt, Shape: append([]int64{}, p.Shape...)}
	}
	return params, nil
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
