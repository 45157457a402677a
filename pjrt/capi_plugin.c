// The wrapped PJRT_Api table: a copy of the plugin's own table whose
// PJRT_Client_Compile recognises two program prefixes (capi.go builds them):
//
//   - xs_magic_compile: compile the rest of the program as usual, and also
//     store the handle of the new PJRT_LoadedExecutable where the prefix says;
//   - xs_magic_load: the rest is a PJRT_Executable_Serialize payload: load it
//     with PJRT_Executable_DeserializeAndLoad instead of compiling, and store
//     the handle likewise.
//
// Any other program goes to the plugin's compile unchanged. Its
// PJRT_Client_Create also notes the client it made, which capi.go takes
// (xs_take_created_client) right after go-xla's NewClient returns, while it
// holds the lock that serializes client creation. go-xla is handed
// the copy (pjrt.RegisterPreloadedPlugin), so its public Compile().Done()
// builds its LoadedExecutable around a deserialized executable exactly as
// around a compiled one, and xserve learns the C handle it needs for
// PJRT_Executable_Serialize without reading go-xla's private fields.

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_plugin.h"

const char xs_magic_compile[XS_MAGIC_SIZE] = {0, 'X', 'S', 'C', 'O', 'M', 'P', 1};
const char xs_magic_load[XS_MAGIC_SIZE] = {0, 'X', 'S', 'L', 'O', 'A', 'D', 1};

// The plugins wrapped so far; a slot is written once, under xs_mu, before its
// table is handed out, and never changed after.
#define XS_MAX_PLUGINS 8
typedef struct {
	char* path;
	const PJRT_Api* orig;
	PJRT_Api* wrapped;
	PJRT_Client* created;  // the client the last PJRT_Client_Create made
} xs_plugin;
static xs_plugin xs_plugins[XS_MAX_PLUGINS];
static pthread_mutex_t xs_mu = PTHREAD_MUTEX_INITIALIZER;

#define XS_HAS(api, fn) \
	((api)->struct_size >= offsetof(PJRT_Api, fn) + sizeof((api)->fn) && (api)->fn != NULL)

static PJRT_Error* xs_compile(int slot, PJRT_Client_Compile_Args* args) {
	const PJRT_Api* api = xs_plugins[slot].orig;
	const PJRT_Program* p = args->program;
	int load = 0;
	if (p == NULL || p->code == NULL || p->code_size < XS_PREFIX_SIZE) {
		return api->PJRT_Client_Compile(args);
	}
	if (memcmp(p->code, xs_magic_load, XS_MAGIC_SIZE) == 0) {
		load = 1;
	} else if (memcmp(p->code, xs_magic_compile, XS_MAGIC_SIZE) != 0) {
		return api->PJRT_Client_Compile(args);
	}
	uint64_t addr;
	memcpy(&addr, p->code + XS_MAGIC_SIZE, sizeof addr);
	PJRT_LoadedExecutable** out = (PJRT_LoadedExecutable**)(uintptr_t)addr;
	char* code = p->code + XS_PREFIX_SIZE;
	size_t size = p->code_size - XS_PREFIX_SIZE;
	PJRT_Error* err;
	if (load) {
		// capi.go checks that the plugin has DeserializeAndLoad first.
		PJRT_Executable_DeserializeAndLoad_Args d;
		memset(&d, 0, sizeof d);
		d.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
		d.client = args->client;
		d.serialized_executable = code;
		d.serialized_executable_size = size;
		err = api->PJRT_Executable_DeserializeAndLoad(&d);
		args->executable = err == NULL ? d.loaded_executable : NULL;
	} else {
		PJRT_Program prog;
		memset(&prog, 0, sizeof prog);
		prog.struct_size = PJRT_Program_STRUCT_SIZE;
		prog.code = code;
		prog.code_size = size;
		prog.format = p->format;
		prog.format_size = p->format_size;
		PJRT_Client_Compile_Args c;
		memset(&c, 0, sizeof c);
		c.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
		c.client = args->client;
		c.program = &prog;
		c.compile_options = args->compile_options;
		c.compile_options_size = args->compile_options_size;
		err = api->PJRT_Client_Compile(&c);
		args->executable = err == NULL ? c.executable : NULL;
	}
	if (out != NULL) *out = args->executable;
	return err;
}

static PJRT_Error* xs_create(int slot, PJRT_Client_Create_Args* args) {
	PJRT_Error* err = xs_plugins[slot].orig->PJRT_Client_Create(args);
	if (err == NULL) xs_plugins[slot].created = args->client;
	return err;
}

// Buffer capture: between xs_capture_begin and xs_capture_end on one thread,
// the wrapped PJRT_Client_BufferFromHostBuffer notes the buffer it made, so
// that Client.Upload learns the C handle of the buffer go-xla wraps.
static __thread int xs_capturing;
static __thread PJRT_Buffer* xs_captured;

void xs_capture_begin(void) {
	xs_capturing = 1;
	xs_captured = NULL;
}

PJRT_Buffer* xs_capture_end(void) {
	PJRT_Buffer* b = xs_captured;
	xs_capturing = 0;
	xs_captured = NULL;
	return b;
}

static PJRT_Error* xs_from_host(int slot, PJRT_Client_BufferFromHostBuffer_Args* args) {
	PJRT_Error* err = xs_plugins[slot].orig->PJRT_Client_BufferFromHostBuffer(args);
	if (err == NULL && xs_capturing) xs_captured = args->buffer;
	return err;
}

PJRT_Client* xs_take_created_client(int slot) {
	if (slot < 0 || slot >= XS_MAX_PLUGINS) return NULL;
	PJRT_Client* c = xs_plugins[slot].created;
	xs_plugins[slot].created = NULL;
	return c;
}

#define XS_TRAMPOLINE(i) \
	static PJRT_Error* xs_compile_##i(PJRT_Client_Compile_Args* args) { return xs_compile(i, args); } \
	static PJRT_Error* xs_create_##i(PJRT_Client_Create_Args* args) { return xs_create(i, args); } \
	static PJRT_Error* xs_from_host_##i(PJRT_Client_BufferFromHostBuffer_Args* args) { return xs_from_host(i, args); }
XS_TRAMPOLINE(0)
XS_TRAMPOLINE(1)
XS_TRAMPOLINE(2)
XS_TRAMPOLINE(3)
XS_TRAMPOLINE(4)
XS_TRAMPOLINE(5)
XS_TRAMPOLINE(6)
XS_TRAMPOLINE(7)
static PJRT_Client_Compile* const xs_trampolines[XS_MAX_PLUGINS] = {
	xs_compile_0, xs_compile_1, xs_compile_2, xs_compile_3,
	xs_compile_4, xs_compile_5, xs_compile_6, xs_compile_7,
};
static PJRT_Client_Create* const xs_create_trampolines[XS_MAX_PLUGINS] = {
	xs_create_0, xs_create_1, xs_create_2, xs_create_3,
	xs_create_4, xs_create_5, xs_create_6, xs_create_7,
};
static PJRT_Client_BufferFromHostBuffer* const xs_from_host_trampolines[XS_MAX_PLUGINS] = {
	xs_from_host_0, xs_from_host_1, xs_from_host_2, xs_from_host_3,
	xs_from_host_4, xs_from_host_5, xs_from_host_6, xs_from_host_7,
};

const char* xs_open_plugin(const char* path, const PJRT_Api** orig, const PJRT_Api** wrapped, int* created,
		int* slot_out, char* errbuf, size_t errbuf_size) {
	const char* msg = NULL;
	*slot_out = -1;
	*orig = NULL;
	*wrapped = NULL;
	*created = 0;
	pthread_mutex_lock(&xs_mu);
	int slot = 0;
	for (; slot < XS_MAX_PLUGINS && xs_plugins[slot].path != NULL; slot++) {
		if (strcmp(xs_plugins[slot].path, path) == 0) {
			*orig = xs_plugins[slot].orig;
			*wrapped = xs_plugins[slot].wrapped;
			*slot_out = slot;
			goto done;
		}
	}
	if (slot == XS_MAX_PLUGINS) {
		msg = "too many PJRT plugins in one process (at most 8)";
		goto done;
	}
	// Plugins stay loaded for the life of the process, as in go-xla.
	void* h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		const char* e = dlerror();
		snprintf(errbuf, errbuf_size, "dlopen: %s", e != NULL ? e : "failed");
		msg = errbuf;
		goto done;
	}
	const PJRT_Api* (*get)(void) = (const PJRT_Api* (*)(void))dlsym(h, "GetPjrtApi");
	if (get == NULL) {
		msg = "the library has no GetPjrtApi: not a PJRT plugin";
		goto done;
	}
	const PJRT_Api* api = get();
	if (api == NULL) {
		msg = "GetPjrtApi returned no table";
		goto done;
	}
	if (!XS_HAS(api, PJRT_Client_Compile) || !XS_HAS(api, PJRT_Client_Create) ||
			!XS_HAS(api, PJRT_Client_BufferFromHostBuffer)) {
		msg = "the plugin's PJRT_Api has no PJRT_Client_Compile, PJRT_Client_Create or PJRT_Client_BufferFromHostBuffer";
		goto done;
	}
	// Room for a table of a newer API version than the plugin's or ours
	// (go-xla's header may be newer): what lies past the plugin's table
	// reads as NULL.
	size_t size = api->struct_size > sizeof(PJRT_Api) ? api->struct_size : sizeof(PJRT_Api);
	size += 128 * sizeof(void*);
	PJRT_Api* w = calloc(1, size);
	char* p = strdup(path);
	if (w == NULL || p == NULL) {
		free(w);
		free(p);
		msg = "out of memory";
		goto done;
	}
	memcpy(w, api, api->struct_size);
	w->PJRT_Client_Compile = xs_trampolines[slot];
	w->PJRT_Client_Create = xs_create_trampolines[slot];
	w->PJRT_Client_BufferFromHostBuffer = xs_from_host_trampolines[slot];
	xs_plugins[slot].orig = api;
	xs_plugins[slot].wrapped = w;
	xs_plugins[slot].path = p;
	*orig = api;
	*wrapped = w;
	*created = 1;
	*slot_out = slot;
done:
	pthread_mutex_unlock(&xs_mu);
	return msg;
}
