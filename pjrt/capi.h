// capi.h: xserve's C helpers over the PJRT C API, on the generated calls of
// capi_gen.h: loading a plugin, errors, events, clients, compiling,
// buffers and executions. capi.go and hostrun.c use them; they call nothing
// of either.
#ifndef XSERVE_PJRT_CAPI_H_
#define XSERVE_PJRT_CAPI_H_

#include <stddef.h>
#include <stdint.h>

#include "capi_gen.h"
#include "pjrt_c_api.h"

// xs_load_plugin loads the plugin library at path (dlopen reference-counts
// it: a plugin stays loaded for the life of the process) and returns its
// PJRT_Api table in *api; NULL, or a message (static, or written to errbuf).
const char* xs_load_plugin(const char* path, const PJRT_Api** api, char* errbuf, size_t errbuf_size);

// xs_error_free destroys err; NULL and sentinels (capi_gen.h) are no-ops.
void xs_error_free(const PJRT_Api* api, PJRT_Error* err);

// xs_error_read returns err's PJRT_Error_Code, sets *msg to a malloc'ed
// copy of its message (free it) of *size bytes, and destroys err. A
// sentinel reads as UNIMPLEMENTED, naming the entry the plugin lacks.
int xs_error_read(const PJRT_Api* api, PJRT_Error* err, char** msg, size_t* size);

// xs_await_free waits for ev (NULL: none) and destroys it; its error.
PJRT_Error* xs_await_free(const PJRT_Api* api, PJRT_Event* ev);

// xs_buffer_free destroys b (NULL: none), dropping an error.
void xs_buffer_free(const PJRT_Api* api, PJRT_Buffer* b);

// xs_client_create creates a client; async >= 0 passes the create option
// "asynchronous" (a bool) with that value, async < 0 no option; devices > 0
// passes "cpu_device_count" (an int64, the CPU plugin's number of devices).
PJRT_Error* xs_client_create(const PJRT_Api* api, int async, int64_t devices, PJRT_Client** out);

// xs_client_platform sets *name (owned by the client) to its platform name.
PJRT_Error* xs_client_platform(const PJRT_Api* api, PJRT_Client* c, const char** name, size_t* size);

// xs_client_devices returns the number of addressable devices and their
// array (owned by the client).
PJRT_Error* xs_client_devices(const PJRT_Api* api, PJRT_Client* c, size_t* n, PJRT_Device* const** devs);

// xs_buffer_device sets *dev to the device b's memory is on.
PJRT_Error* xs_buffer_device(const PJRT_Api* api, PJRT_Buffer* b, PJRT_Device** dev);

// xs_device_kind sets *kind (owned by the client) to dev's kind, e.g.
// "TPU v5 lite".
PJRT_Error* xs_device_kind(const PJRT_Api* api, PJRT_Device* dev, const char** kind, size_t* size);

// xs_plugin_attributes writes the plugin's attributes into buf as lines
// "name=value" (int64 lists dotted: 1.13.3), NUL-terminated, truncated to
// size; the plugin's error, if any.
PJRT_Error* xs_plugin_attributes(const PJRT_Api* api, char* buf, size_t size);

// xs_compile compiles code (format "mlir": StableHLO text or bytecode) with
// the serialized xla.CompileOptionsProto opts.
PJRT_Error* xs_compile(const PJRT_Api* api, PJRT_Client* c, const char* code, size_t code_size, const char* opts,
	size_t opts_size, PJRT_LoadedExecutable** out);

// xs_deserialize loads a PJRT_Executable_Serialize payload.
PJRT_Error* xs_deserialize(const PJRT_Api* api, PJRT_Client* c, const char* data, size_t size,
	PJRT_LoadedExecutable** out);

// xs_loaded_free destroys le, dropping an error.
void xs_loaded_free(const PJRT_Api* api, PJRT_LoadedExecutable* le);

// xs_executable_info returns le's name (a malloc'ed copy: free it) and its
// number of outputs.
PJRT_Error* xs_executable_info(const PJRT_Api* api, PJRT_LoadedExecutable* le, char** name, size_t* name_size,
	size_t* num_outputs);

// xs_serialized is a serialization of an executable, owned by handle.
typedef struct {
	const char* bytes;
	size_t size;
	PJRT_SerializedExecutable* handle;
	void (*deleter)(PJRT_SerializedExecutable*);
} xs_serialized;

// xs_serialize serializes le's executable into *out; release it with
// xs_serialized_free (also on error).
PJRT_Error* xs_serialize(const PJRT_Api* api, PJRT_LoadedExecutable* le, xs_serialized* out);
void xs_serialized_free(xs_serialized* s);

// xs_upload copies a host array (type, dims, rank) to dev and returns once
// the plugin holds its own copy.
PJRT_Error* xs_upload(const PJRT_Api* api, PJRT_Client* c, PJRT_Device* dev, const void* data, int32_t type,
	const int64_t* dims, size_t rank, PJRT_Buffer** out);

// xs_buffer_shape returns b's element type and dims (owned by b).
PJRT_Error* xs_buffer_shape(const PJRT_Api* api, PJRT_Buffer* b, int32_t* type, const int64_t** dims, size_t* rank);

// xs_buffer_pointer returns the address of b's device memory (on a CPU,
// host memory).
PJRT_Error* xs_buffer_pointer(const PJRT_Api* api, PJRT_Buffer* b, void** p);

// xs_to_host copies ready-or-not b into dst (size bytes), row-major, and
// waits for the copy.
PJRT_Error* xs_to_host(const PJRT_Api* api, PJRT_Buffer* b, void* dst, size_t size, size_t rank);

// xs_to_host_start is xs_to_host without the wait: *done is the copy's
// event (NULL if none), which the caller awaits (xs_await_free) before dst
// may be read or freed. The plugin copies once b is ready.
PJRT_Error* xs_to_host_start(const PJRT_Api* api, PJRT_Buffer* b, void* dst, size_t size, size_t rank, PJRT_Event** done);

// xs_execute runs le once on dev (execute_device when portable) with the
// device buffers args[0..n), donating those not listed in keep[0..nkeep)
// (the others stay valid), writes its num_outputs results to outs and
// waits for it; *inline_run is 1 when it had completed by the time the
// plugin's execute returned.
PJRT_Error* xs_execute(const PJRT_Api* api, PJRT_LoadedExecutable* le, PJRT_Device* dev, int portable,
	PJRT_Buffer* const* args, size_t n, const int64_t* keep, size_t nkeep, PJRT_Buffer** outs, int* inline_run);

// xs_execute_start is xs_execute without the wait: *complete is the
// execution's completion event (NULL if none), which the caller awaits
// (xs_await_free).
PJRT_Error* xs_execute_start(const PJRT_Api* api, PJRT_LoadedExecutable* le, PJRT_Device* dev, int portable,
	PJRT_Buffer* const* args, size_t n, const int64_t* keep, size_t nkeep, PJRT_Buffer** outs, PJRT_Event** complete,
	int* inline_run);

#endif
