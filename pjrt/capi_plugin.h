// Declarations shared by capi_plugin.c and the cgo files of package pjrt.
#ifndef XSERVE_PJRT_CAPI_PLUGIN_H
#define XSERVE_PJRT_CAPI_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include "pjrt_c_api.h"

// Program prefix (see capi.go): 8 bytes of magic, then the address of a
// PJRT_LoadedExecutable* the wrapper stores the new executable's handle in,
// as a native-endian uint64.
#define XS_PREFIX_SIZE 16
#define XS_MAGIC_SIZE 8
extern const char xs_magic_compile[XS_MAGIC_SIZE];
extern const char xs_magic_load[XS_MAGIC_SIZE];

// xs_open_plugin loads the plugin at path (once per process) and returns, in
// *orig, its PJRT_Api table and, in *wrapped, the copy of it whose
// PJRT_Client_Compile also understands prefixed programs. *created is 1 when
// this call made the copy; *slot numbers the plugin. On failure it returns a
// message (static, or written to errbuf).
const char* xs_open_plugin(const char* path, const PJRT_Api** orig, const PJRT_Api** wrapped, int* created,
	int* slot, char* errbuf, size_t errbuf_size);

// xs_take_created_client returns (and forgets) the client the wrapped
// PJRT_Client_Create of plugin slot made last, or NULL.
PJRT_Client* xs_take_created_client(int slot);

// xs_capture_begin starts noting, on the calling thread, the buffer the
// wrapped PJRT_Client_BufferFromHostBuffer makes; xs_capture_end stops and
// returns it (NULL if none was made).
void xs_capture_begin(void);
PJRT_Buffer* xs_capture_end(void);

#endif
