package tokenizer

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// The C ABI of tokenizer/ffi (the tokenizers crate), loaded with dlopen.
typedef struct {
	void* handle;
	uint32_t (*abi_version)(void);
	void* (*from_bytes)(const uint8_t*, size_t, char**);
	void (*free_tok)(void*);
	uint32_t* (*encode)(const void*, const uint8_t*, size_t, bool, size_t*, char**);
	void (*free_ids)(uint32_t*, size_t);
	char* (*decode)(const void*, const uint32_t*, size_t, bool, char**);
	void (*free_string)(char*);
	size_t (*vocab_size)(const void*, bool);
	int64_t (*token_to_id)(const void*, const char*);
	int64_t (*max_id)(const void*);
} xs_tok_lib;

static int xs_tok_open(const char* path, xs_tok_lib* l, char* errbuf, size_t n) {
	// Never unloaded: a Rust library registers thread-local destructors
	// and keeps lazily built statics, which must outlive every thread.
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (h == NULL) {
		const char* e = dlerror();
		snprintf(errbuf, n, "dlopen: %s", e != NULL ? e : "failed");
		return -1;
	}
	l->handle = h;
	#define XS_SYM(field, name) l->field = dlsym(h, name); if (l->field == NULL) { snprintf(errbuf, n, "%s has no symbol %s", path, name); dlclose(h); return -1; }
	XS_SYM(abi_version, "xs_tok_abi_version")
	XS_SYM(from_bytes, "xs_tok_from_bytes")
	XS_SYM(free_tok, "xs_tok_free")
	XS_SYM(encode, "xs_tok_encode")
	XS_SYM(free_ids, "xs_tok_free_ids")
	XS_SYM(decode, "xs_tok_decode")
	XS_SYM(free_string, "xs_tok_free_string")
	XS_SYM(vocab_size, "xs_tok_vocab_size")
	XS_SYM(token_to_id, "xs_tok_token_to_id")
	XS_SYM(max_id, "xs_tok_max_id")
	#undef XS_SYM
	return 0;
}

static uint32_t xs_tok_call_abi(xs_tok_lib* l) { return l->abi_version(); }
static void* xs_tok_call_from_bytes(xs_tok_lib* l, const uint8_t* b, size_t n, char** err) { return l->from_bytes(b, n, err); }
static void xs_tok_call_free(xs_tok_lib* l, void* t) { l->free_tok(t); }
static uint32_t* xs_tok_call_encode(xs_tok_lib* l, const void* t, const uint8_t* s, size_t n, bool special, size_t* out, char** err) {
	return l->encode(t, s, n, special, out, err);
}
static void xs_tok_call_free_ids(xs_tok_lib* l, uint32_t* ids, size_t n) { l->free_ids(ids, n); }
static char* xs_tok_call_decode(xs_tok_lib* l, const void* t, const uint32_t* ids, size_t n, bool skip, char** err) {
	return l->decode(t, ids, n, skip, err);
}
static void xs_tok_call_free_string(xs_tok_lib* l, char* s) { l->free_string(s); }
static size_t xs_tok_call_vocab_size(xs_tok_lib* l, const void* t, bool added) { return l->vocab_size(t, added); }
static int64_t xs_tok_call_token_to_id(xs_tok_lib* l, const void* t, const char* s) { return l->token_to_id(t, s); }
static int64_t xs_tok_call_max_id(xs_tok_lib* l, const void* t) { return l->max_id(t); }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// abiVersion is the version of tokenizer/ffi's C ABI this package speaks.
const abiVersion = 1

// library is the loaded tokenizers library. dlopen counts references, so
// loading it again is cheap; it stays loaded for the life of the process
// (RTLD_NODELETE).
type library struct {
	c C.xs_tok_lib
}

func openLibrary(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [512]C.char
	l := &library{}
	if C.xs_tok_open(cpath, &l.c, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		return nil, fmt.Errorf("tokenizer: load %s: %s", path, C.GoString(&errbuf[0]))
	}
	if v := C.xs_tok_call_abi(&l.c); v != abiVersion {
		return nil, fmt.Errorf("tokenizer: %s speaks ABI %d, want %d: rebuild it (make tokenizers-lib)", path, v, abiVersion)
	}
	return l, nil
}

// takeErr returns the library's error string as an error and frees it.
func (l *library) takeErr(cerr *C.char, what string) error {
	if cerr == nil {
		return fmt.Errorf("tokenizer: %s failed", what)
	}
	msg := C.GoString(cerr)
	C.xs_tok_call_free_string(&l.c, cerr)
	return fmt.Errorf("tokenizer: %s: %s", what, msg)
}

func (l *library) parse(json []byte) (unsafe.Pointer, error) {
	if len(json) == 0 {
		return nil, errors.New("tokenizer: empty tokenizer.json")
	}
	var cerr *C.char
	p := C.CBytes(json)
	defer C.free(p)
	h := C.xs_tok_call_from_bytes(&l.c, (*C.uint8_t)(p), C.size_t(len(json)), &cerr)
	if h == nil {
		return nil, l.takeErr(cerr, "parse tokenizer.json")
	}
	return h, nil
}

func (l *library) free(h unsafe.Pointer) { C.xs_tok_call_free(&l.c, h) }

func (l *library) encode(h unsafe.Pointer, text string, special bool) ([]int64, error) {
	var cerr *C.char
	var n C.size_t
	var p unsafe.Pointer
	if len(text) > 0 {
		p = C.CBytes([]byte(text))
		defer C.free(p)
	} else {
		p = C.malloc(1)
		defer C.free(p)
	}
	ids := C.xs_tok_call_encode(&l.c, h, (*C.uint8_t)(p), C.size_t(len(text)), C.bool(special), &n, &cerr)
	if ids == nil {
		return nil, l.takeErr(cerr, "encode")
	}
	defer C.xs_tok_call_free_ids(&l.c, ids, n)
	src := unsafe.Slice((*uint32)(unsafe.Pointer(ids)), int(n))
	out := make([]int64, len(src))
	for i, v := range src {
		out[i] = int64(v)
	}
	return out, nil
}

func (l *library) decode(h unsafe.Pointer, ids []int64, skipSpecial bool) (string, error) {
	buf := C.malloc(C.size_t(4 * max(len(ids), 1)))
	defer C.free(buf)
	dst := unsafe.Slice((*uint32)(buf), max(len(ids), 1))
	for i, id := range ids {
		if id < 0 || id > 1<<32-1 {
			return "", fmt.Errorf("tokenizer: decode: token id %d out of range", id)
		}
		dst[i] = uint32(id)
	}
	var cerr *C.char
	s := C.xs_tok_call_decode(&l.c, h, (*C.uint32_t)(buf), C.size_t(len(ids)), C.bool(skipSpecial), &cerr)
	if s == nil {
		return "", l.takeErr(cerr, "decode")
	}
	defer C.xs_tok_call_free_string(&l.c, s)
	return C.GoString(s), nil
}

func (l *library) vocabSize(h unsafe.Pointer, added bool) int {
	return int(C.xs_tok_call_vocab_size(&l.c, h, C.bool(added)))
}

func (l *library) tokenID(h unsafe.Pointer, token string) (int64, bool) {
	cs := C.CString(token)
	defer C.free(unsafe.Pointer(cs))
	id := int64(C.xs_tok_call_token_to_id(&l.c, h, cs))
	return id, id >= 0
}

func (l *library) maxID(h unsafe.Pointer) int64 { return int64(C.xs_tok_call_max_id(&l.c, h)) }
