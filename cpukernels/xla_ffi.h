/*
 * xla_ffi.h declares the part of the XLA FFI C ABI (the typed custom-call
 * interface, "API version 4") that the xserve CPU kernels use: the call
 * frame a handler receives, its buffers and attributes, and error creation.
 *
 * The layouts follow XLA's public ABI header xla/ffi/api/c_api.h (FFI API
 * 0.1). Every struct begins with its size, fields are only ever appended,
 * and the kernels read only fields that the oldest supported layout has.
 */
#ifndef XSERVE_CPUKERNELS_XLA_FFI_H_
#define XSERVE_CPUKERNELS_XLA_FFI_H_

#include <stddef.h>
#include <stdint.h>

typedef struct XLA_FFI_Extension_Base {
	size_t struct_size;
	int type; /* 1: metadata */
	struct XLA_FFI_Extension_Base *next;
} XLA_FFI_Extension_Base;

enum { XLA_FFI_Extension_Metadata = 1 };

typedef struct XLA_FFI_Error XLA_FFI_Error;

/* Element types, numbered as xla::PrimitiveType. */
enum {
	XLA_FFI_DataType_S32 = 4,
	XLA_FFI_DataType_S64 = 5,
	XLA_FFI_DataType_F32 = 11,
};

typedef struct XLA_FFI_Buffer {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	int dtype;
	void *data;
	int64_t rank;
	int64_t *dims;
} XLA_FFI_Buffer;

enum { XLA_FFI_ArgType_BUFFER = 1 };
enum { XLA_FFI_RetType_BUFFER = 1 };
enum { XLA_FFI_AttrType_ARRAY = 1, XLA_FFI_AttrType_SCALAR = 3 };

typedef struct XLA_FFI_ByteSpan {
	const char *ptr;
	size_t len;
} XLA_FFI_ByteSpan;

typedef struct XLA_FFI_Scalar {
	int dtype;
	void *value;
} XLA_FFI_Scalar;

typedef struct XLA_FFI_Array {
	int dtype;
	size_t size;
	void *data;
} XLA_FFI_Array;

enum { XLA_FFI_ExecutionStage_EXECUTE = 3 };

typedef struct XLA_FFI_Args {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	int64_t size;
	int *types;
	void **args;
} XLA_FFI_Args;

typedef struct XLA_FFI_Rets {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	int64_t size;
	int *types;
	void **rets;
} XLA_FFI_Rets;

/* Attributes arrive sorted by name. */
typedef struct XLA_FFI_Attrs {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	int64_t size;
	int *types;
	XLA_FFI_ByteSpan **names;
	void **attrs;
} XLA_FFI_Attrs;

typedef struct XLA_FFI_Api XLA_FFI_Api;

typedef struct XLA_FFI_CallFrame {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	const XLA_FFI_Api *api;
	void *ctx;
	int stage;
	XLA_FFI_Args args;
	XLA_FFI_Rets rets;
	XLA_FFI_Attrs attrs;
} XLA_FFI_CallFrame;

typedef struct XLA_FFI_Api_Version {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	int major_version;
	int minor_version;
} XLA_FFI_Api_Version;

/* The metadata extension: XLA calls a handler once with it to learn the
 * FFI version the handler was built against. */
typedef struct XLA_FFI_Metadata {
	size_t struct_size;
	XLA_FFI_Api_Version api_version;
	uint32_t traits;
} XLA_FFI_Metadata;

typedef struct XLA_FFI_Metadata_Extension {
	XLA_FFI_Extension_Base extension_base;
	XLA_FFI_Metadata *metadata;
} XLA_FFI_Metadata_Extension;

typedef struct XLA_FFI_Error_Create_Args {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	const char *message;
	int errc; /* absl status code; 3: invalid argument, 13: internal */
} XLA_FFI_Error_Create_Args;

typedef XLA_FFI_Error *XLA_FFI_Error_Create(XLA_FFI_Error_Create_Args *args);

/* The head of XLA_FFI_Api, up to the error constructor. */
struct XLA_FFI_Api {
	size_t struct_size;
	XLA_FFI_Extension_Base *extension_start;
	XLA_FFI_Api_Version api_version;
	void *internal_api;
	XLA_FFI_Error_Create *XLA_FFI_Error_Create;
};

typedef XLA_FFI_Error *XLA_FFI_Handler(XLA_FFI_CallFrame *call_frame);

#endif
