package pjrt

// The identity of the machine kind a client compiles for (Client.Target).

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include <stddef.h>
#include <string.h>
#include "pjrt_c_api.h"

static void xs_target_drop(const PJRT_Api* api, PJRT_Error* err) {
	PJRT_Error_Destroy_Args d;
	memset(&d, 0, sizeof d);
	d.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
	d.error = err;
	api->PJRT_Error_Destroy(&d);
}

// xs_device_kind sets *kind (owned by the client) to the kind of the
// client's first addressable device, e.g. "TPU v5 lite"; it returns 0 on
// success and -1 when the plugin cannot say.
static int xs_device_kind(const PJRT_Api* api, PJRT_Client* client, const char** kind, size_t* kind_size) {
	PJRT_Client_AddressableDevices_Args a;
	memset(&a, 0, sizeof a);
	a.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
	a.client = client;
	PJRT_Error* err = api->PJRT_Client_AddressableDevices(&a);
	if (err != NULL) { xs_target_drop(api, err); return -1; }
	if (a.num_addressable_devices == 0) return -1;
	PJRT_Device_GetDescription_Args g;
	memset(&g, 0, sizeof g);
	g.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
	g.device = a.addressable_devices[0];
	err = api->PJRT_Device_GetDescription(&g);
	if (err != NULL) { xs_target_drop(api, err); return -1; }
	PJRT_DeviceDescription_Kind_Args k;
	memset(&k, 0, sizeof k);
	k.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
	k.device_description = g.device_description;
	err = api->PJRT_DeviceDescription_Kind(&k);
	if (err != NULL) { xs_target_drop(api, err); return -1; }
	*kind = k.device_kind;
	*kind_size = k.device_kind_size;
	return 0;
}
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
		if C.xs_device_kind(c.api.api, c.api.client, &k, &n) == 0 {
			kind = C.GoStringN(k, C.int(n))
		}
	}
	return fmt.Sprintf("platform=%s plugin=%s plugin_bytes=%d host=%q device_kind=%q", c.platform, c.version, size, hostIdentity(), kind)
}
