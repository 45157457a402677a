// capi.c: see capi.h.
#include "capi.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char* xs_load_plugin(const char* path, const PJRT_Api** api, char* errbuf, size_t errbuf_size) {
	*api = NULL;
	void* h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		const char* e = dlerror();
		snprintf(errbuf, errbuf_size, "dlopen: %s", e != NULL ? e : "failed");
		return errbuf;
	}
	const PJRT_Api* (*get)(void) = (const PJRT_Api* (*)(void))dlsym(h, "GetPjrtApi");
	if (get == NULL) return "the library has no GetPjrtApi: not a PJRT plugin";
	const PJRT_Api* a = get();
	if (a == NULL) return "GetPjrtApi returned no table";
	if (a->struct_size < offsetof(PJRT_Api, PJRT_LoadedExecutable_Execute) + sizeof(void*)) {
		return "the plugin's PJRT_Api table is too old (no PJRT_LoadedExecutable_Execute)";
	}
	*api = a;
	return NULL;
}

void xs_error_free(const PJRT_Api* api, PJRT_Error* err) {
	if (err == NULL || xs_missing(err) != NULL) return;
	PJRT_Error_Destroy_Args d = {0};
	d.error = err;
	xs_PJRT_Error_Destroy(api, &d);
}

int xs_error_read(const PJRT_Api* api, PJRT_Error* err, char** msg, size_t* size) {
	const char* missing = xs_missing(err);
	if (missing != NULL) {
		const char* pre = "the plugin's PJRT API table has no ";
		*size = strlen(pre) + strlen(missing);
		*msg = malloc(*size + 1);
		if (*msg == NULL) {
			*size = 0;
		} else {
			snprintf(*msg, *size + 1, "%s%s", pre, missing);
		}
		return PJRT_Error_Code_UNIMPLEMENTED;
	}
	PJRT_Error_Message_Args m = {0};
	m.error = err;
	xs_PJRT_Error_Message(api, &m);
	*size = m.message_size;
	*msg = malloc(m.message_size + 1);
	if (*msg != NULL) {
		if (m.message_size > 0) memcpy(*msg, m.message, m.message_size);
		(*msg)[m.message_size] = 0;
	} else {
		*size = 0;
	}
	PJRT_Error_GetCode_Args c = {0};
	c.error = err;
	int code = PJRT_Error_Code_UNKNOWN;
	PJRT_Error* e2 = xs_PJRT_Error_GetCode(api, &c);
	if (e2 == NULL) code = c.code;
	xs_error_free(api, e2);
	xs_error_free(api, err);
	return code;
}

PJRT_Error* xs_await_free(const PJRT_Api* api, PJRT_Event* ev) {
	if (ev == NULL) return NULL;
	PJRT_Event_Await_Args a = {0};
	a.event = ev;
	PJRT_Error* err = xs_PJRT_Event_Await(api, &a);
	PJRT_Event_Destroy_Args d = {0};
	d.event = ev;
	xs_error_free(api, xs_PJRT_Event_Destroy(api, &d));
	return err;
}

void xs_buffer_free(const PJRT_Api* api, PJRT_Buffer* b) {
	if (b == NULL) return;
	PJRT_Buffer_Destroy_Args d = {0};
	d.buffer = b;
	xs_error_free(api, xs_PJRT_Buffer_Destroy(api, &d));
}

PJRT_Error* xs_client_create(const PJRT_Api* api, int async, int64_t devices, PJRT_Client** out) {
	PJRT_NamedValue opts[2] = {{0}, {0}};
	size_t n = 0;
	if (async >= 0) {
		PJRT_NamedValue* o = &opts[n++];
		o->struct_size = PJRT_NamedValue_STRUCT_SIZE;
		o->name = "asynchronous";
		o->name_size = strlen(o->name);
		o->type = PJRT_NamedValue_kBool;
		o->bool_value = async != 0;
		o->value_size = 1;
	}
	if (devices > 0) {
		PJRT_NamedValue* o = &opts[n++];
		o->struct_size = PJRT_NamedValue_STRUCT_SIZE;
		o->name = "cpu_device_count";
		o->name_size = strlen(o->name);
		o->type = PJRT_NamedValue_kInt64;
		o->int64_value = devices;
		o->value_size = 1;
	}
	PJRT_Client_Create_Args a = {0};
	if (n > 0) {
		a.create_options = opts;
		a.num_options = n;
	}
	PJRT_Error* err = xs_PJRT_Client_Create(api, &a);
	*out = err == NULL ? a.client : NULL;
	return err;
}

PJRT_Error* xs_client_platform(const PJRT_Api* api, PJRT_Client* c, const char** name, size_t* size) {
	PJRT_Client_PlatformName_Args a = {0};
	a.client = c;
	PJRT_Error* err = xs_PJRT_Client_PlatformName(api, &a);
	if (err == NULL) {
		*name = a.platform_name;
		*size = a.platform_name_size;
	}
	return err;
}

PJRT_Error* xs_client_devices(const PJRT_Api* api, PJRT_Client* c, size_t* n, PJRT_Device* const** devs) {
	PJRT_Client_AddressableDevices_Args a = {0};
	a.client = c;
	PJRT_Error* err = xs_PJRT_Client_AddressableDevices(api, &a);
	if (err != NULL) return err;
	*n = a.num_addressable_devices;
	*devs = a.addressable_devices;
	return NULL;
}

PJRT_Error* xs_buffer_device(const PJRT_Api* api, PJRT_Buffer* b, PJRT_Device** dev) {
	PJRT_Buffer_Device_Args a = {0};
	a.buffer = b;
	PJRT_Error* err = xs_PJRT_Buffer_Device(api, &a);
	*dev = err == NULL ? a.device : NULL;
	return err;
}

PJRT_Error* xs_device_kind(const PJRT_Api* api, PJRT_Device* dev, const char** kind, size_t* size) {
	PJRT_Device_GetDescription_Args g = {0};
	g.device = dev;
	PJRT_Error* err = xs_PJRT_Device_GetDescription(api, &g);
	if (err != NULL) return err;
	PJRT_DeviceDescription_Kind_Args k = {0};
	k.device_description = g.device_description;
	if ((err = xs_PJRT_DeviceDescription_Kind(api, &k)) != NULL) return err;
	*kind = k.device_kind;
	*size = k.device_kind_size;
	return NULL;
}

// xs_append appends the formatted text to buf (size bytes, *used so far),
// truncating.
__attribute__((format(printf, 4, 5))) static void xs_append(char* buf, size_t size, size_t* used, const char* fmt, ...) {
	if (*used + 1 >= size) return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *used, size - *used, fmt, ap);
	va_end(ap);
	if (n > 0) *used = *used + (size_t)n < size ? *used + (size_t)n : size - 1;
}

PJRT_Error* xs_plugin_attributes(const PJRT_Api* api, char* buf, size_t size) {
	size_t used = 0;
	if (size > 0) buf[0] = 0;
	PJRT_Plugin_Attributes_Args a = {0};
	PJRT_Error* err = xs_PJRT_Plugin_Attributes(api, &a);
	if (err != NULL) return err;
	for (size_t i = 0; i < a.num_attributes; i++) {
		const PJRT_NamedValue* v = &a.attributes[i];
		xs_append(buf, size, &used, "%.*s=", (int)v->name_size, v->name);
		switch (v->type) {
		case PJRT_NamedValue_kString:
			xs_append(buf, size, &used, "%.*s", (int)v->value_size, v->string_value);
			break;
		case PJRT_NamedValue_kInt64:
			xs_append(buf, size, &used, "%" PRId64, v->int64_value);
			break;
		case PJRT_NamedValue_kInt64List:
			for (size_t k = 0; k < v->value_size; k++) {
				xs_append(buf, size, &used, "%s%" PRId64, k > 0 ? "." : "", v->int64_array_value[k]);
			}
			break;
		case PJRT_NamedValue_kFloat:
			xs_append(buf, size, &used, "%g", (double)v->float_value);
			break;
		case PJRT_NamedValue_kBool:
			xs_append(buf, size, &used, "%s", v->bool_value ? "true" : "false");
			break;
		default:
			xs_append(buf, size, &used, "?");
		}
		xs_append(buf, size, &used, "\n");
	}
	return NULL;
}

PJRT_Error* xs_compile(const PJRT_Api* api, PJRT_Client* c, const char* code, size_t code_size, const char* opts,
		size_t opts_size, PJRT_LoadedExecutable** out) {
	PJRT_Program p = {0};
	p.struct_size = PJRT_Program_STRUCT_SIZE;
	p.code = (char*)code;
	p.code_size = code_size;
	p.format = "mlir";
	p.format_size = 4;
	PJRT_Client_Compile_Args a = {0};
	a.client = c;
	a.program = &p;
	a.compile_options = opts;
	a.compile_options_size = opts_size;
	PJRT_Error* err = xs_PJRT_Client_Compile(api, &a);
	*out = err == NULL ? a.executable : NULL;
	return err;
}

PJRT_Error* xs_deserialize(const PJRT_Api* api, PJRT_Client* c, const char* data, size_t size,
		PJRT_LoadedExecutable** out) {
	PJRT_Executable_DeserializeAndLoad_Args a = {0};
	a.client = c;
	a.serialized_executable = data;
	a.serialized_executable_size = size;
	PJRT_Error* err = xs_PJRT_Executable_DeserializeAndLoad(api, &a);
	*out = err == NULL ? a.loaded_executable : NULL;
	return err;
}

void xs_loaded_free(const PJRT_Api* api, PJRT_LoadedExecutable* le) {
	if (le == NULL) return;
	PJRT_LoadedExecutable_Destroy_Args d = {0};
	d.executable = le;
	xs_error_free(api, xs_PJRT_LoadedExecutable_Destroy(api, &d));
}

// xs_executable returns le's PJRT_Executable, which the caller destroys
// (xs_executable_free).
static PJRT_Error* xs_executable(const PJRT_Api* api, PJRT_LoadedExecutable* le, PJRT_Executable** out) {
	PJRT_LoadedExecutable_GetExecutable_Args g = {0};
	g.loaded_executable = le;
	PJRT_Error* err = xs_PJRT_LoadedExecutable_GetExecutable(api, &g);
	*out = err == NULL ? g.executable : NULL;
	return err;
}

static void xs_executable_free(const PJRT_Api* api, PJRT_Executable* e) {
	if (e == NULL) return;
	PJRT_Executable_Destroy_Args d = {0};
	d.executable = e;
	xs_error_free(api, xs_PJRT_Executable_Destroy(api, &d));
}

PJRT_Error* xs_executable_info(const PJRT_Api* api, PJRT_LoadedExecutable* le, char** name, size_t* name_size,
		size_t* num_outputs) {
	*name = NULL;
	*name_size = 0;
	PJRT_Executable* e;
	PJRT_Error* err = xs_executable(api, le, &e);
	if (err != NULL) return err;
	PJRT_Executable_Name_Args na = {0};
	na.executable = e;
	err = xs_PJRT_Executable_Name(api, &na);
	if (err == NULL) {
		*name = malloc(na.executable_name_size + 1);
		if (*name != NULL) {
			if (na.executable_name_size > 0) memcpy(*name, na.executable_name, na.executable_name_size);
			(*name)[na.executable_name_size] = 0;
			*name_size = na.executable_name_size;
		}
		PJRT_Executable_NumOutputs_Args no = {0};
		no.executable = e;
		err = xs_PJRT_Executable_NumOutputs(api, &no);
		*num_outputs = err == NULL ? no.num_outputs : 0;
	}
	xs_executable_free(api, e);
	return err;
}

PJRT_Error* xs_serialize(const PJRT_Api* api, PJRT_LoadedExecutable* le, xs_serialized* out) {
	memset(out, 0, sizeof *out);
	PJRT_Executable* e;
	PJRT_Error* err = xs_executable(api, le, &e);
	if (err != NULL) return err;
	PJRT_Executable_Serialize_Args s = {0};
	s.executable = e;
	err = xs_PJRT_Executable_Serialize(api, &s);
	if (err == NULL) {
		out->bytes = s.serialized_bytes;
		out->size = s.serialized_bytes_size;
		out->handle = s.serialized_executable;
		out->deleter = s.serialized_executable_deleter;
	}
	xs_executable_free(api, e);
	return err;
}

void xs_serialized_free(xs_serialized* s) {
	if (s->handle != NULL && s->deleter != NULL) s->deleter(s->handle);
	memset(s, 0, sizeof *s);
}

PJRT_Error* xs_upload(const PJRT_Api* api, PJRT_Client* c, PJRT_Device* dev, const void* data, int32_t type,
		const int64_t* dims, size_t rank, PJRT_Buffer** out) {
	PJRT_Client_BufferFromHostBuffer_Args h = {0};
	h.client = c;
	h.data = data;
	h.type = (PJRT_Buffer_Type)type;
	h.dims = dims;
	h.num_dims = rank;
	h.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
	h.device = dev;
	*out = NULL;
	PJRT_Error* err = xs_PJRT_Client_BufferFromHostBuffer(api, &h);
	if (err != NULL) return err;
	if ((err = xs_await_free(api, h.done_with_host_buffer)) != NULL) {
		xs_buffer_free(api, h.buffer);
		return err;
	}
	*out = h.buffer;
	return NULL;
}

PJRT_Error* xs_buffer_shape(const PJRT_Api* api, PJRT_Buffer* b, int32_t* type, const int64_t** dims, size_t* rank) {
	PJRT_Buffer_ElementType_Args et = {0};
	et.buffer = b;
	PJRT_Error* err = xs_PJRT_Buffer_ElementType(api, &et);
	if (err != NULL) return err;
	PJRT_Buffer_Dimensions_Args dm = {0};
	dm.buffer = b;
	if ((err = xs_PJRT_Buffer_Dimensions(api, &dm)) != NULL) return err;
	*type = (int32_t)et.type;
	*dims = dm.dims;
	*rank = dm.num_dims;
	return NULL;
}

PJRT_Error* xs_buffer_pointer(const PJRT_Api* api, PJRT_Buffer* b, void** p) {
	PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args dp = {0};
	dp.buffer = b;
	PJRT_Error* err = xs_PJRT_Buffer_OpaqueDeviceMemoryDataPointer(api, &dp);
	*p = err == NULL ? dp.device_memory_ptr : NULL;
	return err;
}

PJRT_Error* xs_to_host(const PJRT_Api* api, PJRT_Buffer* b, void* dst, size_t size, size_t rank) {
	PJRT_Event* done = NULL;
	PJRT_Error* err = xs_to_host_start(api, b, dst, size, rank, &done);
	if (err != NULL) return err;
	return xs_await_free(api, done);
}

PJRT_Error* xs_to_host_start(const PJRT_Api* api, PJRT_Buffer* b, void* dst, size_t size, size_t rank, PJRT_Event** done) {
	*done = NULL;
	PJRT_Buffer_ToHostBuffer_Args th = {0};
	th.src = b;
	th.dst = dst;
	th.dst_size = size;
	// Row-major (major-to-minor) on the host, whatever the device layout.
	int64_t m2m[rank > 0 ? rank : 1];
	for (size_t k = 0; k < rank; k++) m2m[k] = (int64_t)(rank - 1 - k);
	PJRT_Buffer_MemoryLayout layout = {0};
	layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
	layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
	layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
	layout.tiled.minor_to_major_size = rank;
	layout.tiled.minor_to_major = m2m;
	th.host_layout = &layout;
	PJRT_Error* err = xs_PJRT_Buffer_ToHostBuffer(api, &th);
	if (err != NULL) return err;
	*done = th.event;
	return NULL;
}

PJRT_Error* xs_execute(const PJRT_Api* api, PJRT_LoadedExecutable* le, PJRT_Device* dev, int portable,
		PJRT_Buffer* const* args, size_t n, const int64_t* keep, size_t nkeep, PJRT_Buffer** outs, int* inline_run) {
	PJRT_Event* complete = NULL;
	PJRT_Error* err = xs_execute_start(api, le, dev, portable, args, n, keep, nkeep, outs, &complete, inline_run);
	if (err != NULL) return err;
	return xs_await_free(api, complete);
}

PJRT_Error* xs_execute_start(const PJRT_Api* api, PJRT_LoadedExecutable* le, PJRT_Device* dev, int portable,
		PJRT_Buffer* const* args, size_t n, const int64_t* keep, size_t nkeep, PJRT_Buffer** outs, PJRT_Event** complete_out,
		int* inline_run) {
	*complete_out = NULL;
	PJRT_ExecuteOptions opts = {0};
	opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
	opts.non_donatable_input_indices = keep;
	opts.num_non_donatable_input_indices = nkeep;
	PJRT_Buffer* const* arg_lists[1] = {args};
	PJRT_Buffer** out_lists[1] = {outs};
	PJRT_Event* complete[1] = {NULL};
	PJRT_LoadedExecutable_Execute_Args ex = {0};
	ex.executable = le;
	ex.options = &opts;
	ex.argument_lists = arg_lists;
	ex.num_devices = 1;
	ex.num_args = n;
	ex.output_lists = out_lists;
	ex.device_complete_events = complete;
	if (portable) ex.execute_device = dev;
	*inline_run = 0;
	PJRT_Error* err = xs_PJRT_LoadedExecutable_Execute(api, &ex);
	if (err != NULL) return err;
	if (complete[0] != NULL) {
		PJRT_Event_IsReady_Args r = {0};
		r.event = complete[0];
		PJRT_Error* rerr = xs_PJRT_Event_IsReady(api, &r);
		if (rerr == NULL) *inline_run = r.is_ready ? 1 : 0;
		xs_error_free(api, rerr);
	}
	*complete_out = complete[0];
	return NULL;
}
