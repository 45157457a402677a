package pjrt

// The identity of the machine kind a client compiles for (Client.Target).

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include "capi.h"
*/
import "C"

import (
	"fmt"
	"os"
)

// Target identifies what an executable compiled by this client is native
// code for: the platform, the plugin (its version and file size), the host
// (OS, architecture and CPU feature set) and the kind of the first device
// (e.g. "cpu", "TPU v5 lite", "NVIDIA H100 80GB HBM3"). Executables compiled
// under one Target must not be loaded under another: compile caches put it
// in their keys.
func (c *Client) Target() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	size := int64(-1)
	if fi, err := os.Stat(c.path); err == nil {
		size = fi.Size()
	}
	kind := "unknown"
	if c.c != nil {
		var k *C.char
		var n C.size_t
		if perr := C.xs_device_kind(c.api, c.device, &k, &n); perr == nil {
			kind = C.GoStringN(k, C.int(n))
		} else {
			_ = pluginError(c.api, perr) // the plugin cannot say
		}
	}
	return fmt.Sprintf("platform=%s plugin=%s plugin_bytes=%d host=%q device_kind=%q", c.platform, c.version, size, hostIdentity(), kind)
}

// DeviceKind returns the kind of the client's device d (0 ≤ d < Devices()),
// as its plugin describes it: "cpu", "TPU v5 lite", "NVIDIA H200"…
func (c *Client) DeviceKind(d int) (string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return "", fmt.Errorf("pjrt: device %d: client closed", d)
	}
	if d < 0 || d >= len(c.devices) {
		return "", fmt.Errorf("pjrt: no device %d (the %s client has %d)", d, c.platform, len(c.devices))
	}
	var k *C.char
	var n C.size_t
	if perr := C.xs_device_kind(c.api, c.devices[d], &k, &n); perr != nil {
		return "", fmt.Errorf("pjrt: device %d: kind: %w", d, pluginError(c.api, perr))
	}
	return C.GoStringN(k, C.int(n)), nil
}
