package pjrt

// The fixed-cost execution path of RunHost: one cgo call per execution that
// hands the host inputs to the plugin (zero-copy where it can), executes,
// copies the outputs into Go memory allocated beforehand and frees every
// plugin object it made, instead of go-xla's one call (and one Go wrapper,
// finalizer and event wait) per upload, execution and download.
//
// The C handles come from xserve's wrapped PJRT_Api table (capi.go): the
// client's and each executable's are noted when they are made, and a
// Buffer's when Upload makes it. A buffer without one (an output of Execute)
// sends the call down the portable path (Upload, Execute, ToHost), as does
// an executable's first run, which records the output types.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "pjrt_c_api.h"

// xs_run_args is one execution: in[i] is a device buffer, or NULL where
// host input i (host_data, host_type, host_rank and its dims at
// host_dims[host_dim_off[i]]) is to be uploaded. out_data[i] receives output
// i, which must have type out_type[i] and out_size[i] bytes.
typedef struct {
	const PJRT_Api* api;
	PJRT_Client* client;
	PJRT_Device* device;
	PJRT_LoadedExecutable* le;
	int portable;  // run on device (a portable executable has no device assignment)
	size_t num_args;
	PJRT_Buffer** in;
	void** host_data;
	const int32_t* host_type;
	const int64_t* host_dims;
	const int64_t* host_dim_off;
	const int64_t* host_rank;
	size_t num_outputs;
	void** out_data;
	const int64_t* out_size;
	const int32_t* out_type;
	const int64_t* out_rank;
	int zero_copy;
	int direct;  // copy ready CPU outputs with memcpy (xs_copy_direct)
	// Set on failure that is not a PJRT_Error: a static message and the
	// index of the argument or output concerned.
	const char* fail;
	int64_t fail_index;
	int fail_stage;  // 0 upload of argument fail_index, 1 execute, 2 download of output fail_index
	// Set to 1 when the execution had completed by the time
	// PJRT_LoadedExecutable_Execute returned: the plugin ran it on the
	// calling thread (CPU client with asynchronous=false, or a program XLA
	// deems too cheap to hand off).
	int ran_inline;
} xs_run_args;

static PJRT_Error* xs_await_destroy(const PJRT_Api* api, PJRT_Event* ev) {
	if (ev == NULL) return NULL;
	PJRT_Event_Await_Args aw = {0};
	aw.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
	aw.event = ev;
	PJRT_Error* err = api->PJRT_Event_Await(&aw);
	PJRT_Event_Destroy_Args d = {0};
	d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
	d.event = ev;
	api->PJRT_Event_Destroy(&d);
	return err;
}

static void xs_buffer_destroy(const PJRT_Api* api, PJRT_Buffer* b) {
	if (b == NULL) return;
	PJRT_Buffer_Destroy_Args d = {0};
	d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
	d.buffer = b;
	PJRT_Error* err = api->PJRT_Buffer_Destroy(&d);
	if (err != NULL) {
		PJRT_Error_Destroy_Args ed = {0};
		ed.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
		ed.error = err;
		api->PJRT_Error_Destroy(&ed);
	}
}

#define XS_HAS(api, fn) \
	((api)->struct_size >= offsetof(PJRT_Api, fn) + sizeof((api)->fn) && (api)->fn != NULL)

static void xs_error_destroy(const PJRT_Api* api, PJRT_Error* err) {
	if (err == NULL) return;
	PJRT_Error_Destroy_Args ed = {0};
	ed.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
	ed.error = err;
	api->PJRT_Error_Destroy(&ed);
}

// xs_copy_direct copies b into dst with memcpy when b lives in host memory
// in row-major order with no tiling and exactly size bytes (the XLA CPU
// plugin's outputs), and returns 1; otherwise it returns 0 and the caller
// uses PJRT_Buffer_ToHostBuffer, which on the CPU plugin costs tens of
// microseconds of dispatch even for a few bytes. b must be ready.
static int xs_copy_direct(const PJRT_Api* api, PJRT_Buffer* b, void* dst, size_t size, size_t rank) {
	if (!XS_HAS(api, PJRT_Buffer_IsOnCpu) || !XS_HAS(api, PJRT_Buffer_GetMemoryLayout) ||
	    !XS_HAS(api, PJRT_Buffer_OnDeviceSizeInBytes) || !XS_HAS(api, PJRT_Buffer_OpaqueDeviceMemoryDataPointer)) {
		return 0;
	}
	PJRT_Buffer_IsOnCpu_Args oc = {0};
	oc.struct_size = PJRT_Buffer_IsOnCpu_Args_STRUCT_SIZE;
	oc.buffer = b;
	PJRT_Error* err = api->PJRT_Buffer_IsOnCpu(&oc);
	if (err != NULL || !oc.is_on_cpu) { xs_error_destroy(api, err); return 0; }
	PJRT_Buffer_GetMemoryLayout_Args ml = {0};
	ml.struct_size = PJRT_Buffer_GetMemoryLayout_Args_STRUCT_SIZE;
	ml.buffer = b;
	if ((err = api->PJRT_Buffer_GetMemoryLayout(&ml)) != NULL) { xs_error_destroy(api, err); return 0; }
	if (ml.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || ml.layout.tiled.num_tiles != 0 ||
	    ml.layout.tiled.minor_to_major_size != rank) {
		return 0;
	}
	for (size_t k = 0; k < rank; k++) {
		if (ml.layout.tiled.minor_to_major[k] != (int64_t)(rank - 1 - k)) return 0;
	}
	PJRT_Buffer_OnDeviceSizeInBytes_Args sz = {0};
	sz.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
	sz.buffer = b;
	if ((err = api->PJRT_Buffer_OnDeviceSizeInBytes(&sz)) != NULL) { xs_error_destroy(api, err); return 0; }
	if (sz.on_device_size_in_bytes != size) return 0;
	PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args dp = {0};
	dp.struct_size = PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args_STRUCT_SIZE;
	dp.buffer = b;
	if ((err = api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&dp)) != NULL) { xs_error_destroy(api, err); return 0; }
	if (dp.device_memory_ptr == NULL) return 0;
	memcpy(dst, dp.device_memory_ptr, size);
	return 1;
}

// xs_download checks output b against what the caller expects and copies it
// into dst; it does not destroy b.
static PJRT_Error* xs_download(xs_run_args* a, size_t i, PJRT_Buffer* b) {
	const PJRT_Api* api = a->api;
	PJRT_Buffer_ElementType_Args et = {0};
	et.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
	et.buffer = b;
	PJRT_Error* err = api->PJRT_Buffer_ElementType(&et);
	if (err != NULL) return err;
	PJRT_Buffer_Dimensions_Args dm = {0};
	dm.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
	dm.buffer = b;
	if ((err = api->PJRT_Buffer_Dimensions(&dm)) != NULL) return err;
	if ((int32_t)et.type != a->out_type[i] || (int64_t)dm.num_dims != a->out_rank[i]) {
		a->fail = "output type differs from the one recorded at the first run";
		a->fail_index = (int64_t)i;
		return NULL;
	}
	int64_t n = 1;
	for (size_t k = 0; k < dm.num_dims; k++) n *= dm.dims[k];
	if (n == 0) return NULL;
	if (a->direct && xs_copy_direct(api, b, a->out_data[i], (size_t)a->out_size[i], dm.num_dims)) return NULL;
	PJRT_Buffer_ToHostBuffer_Args th = {0};
	th.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
	th.src = b;
	th.dst = a->out_data[i];
	th.dst_size = (size_t)a->out_size[i];
	// Row-major (major-to-minor) on the host, whatever the device layout.
	int64_t m2m[dm.num_dims > 0 ? dm.num_dims : 1];
	PJRT_Buffer_MemoryLayout layout = {0};
	layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
	layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
	layout.tiled.minor_to_major_size = dm.num_dims;
	for (size_t k = 0; k < dm.num_dims; k++) m2m[k] = (int64_t)(dm.num_dims - 1 - k);
	layout.tiled.minor_to_major = m2m;
	th.host_layout = &layout;
	if ((err = api->PJRT_Buffer_ToHostBuffer(&th)) != NULL) return err;
	return xs_await_destroy(api, th.event);
}

// xs_run does the whole execution of a; see xs_run_args.
static PJRT_Error* xs_run(xs_run_args* a) {
	const PJRT_Api* api = a->api;
	size_t n = a->num_args, nout = a->num_outputs;
	PJRT_Buffer* made[n > 0 ? n : 1];
	PJRT_Event* done[n > 0 ? n : 1];
	PJRT_Buffer* argv[n > 0 ? n : 1];
	int64_t keep[n > 0 ? n : 1];
	PJRT_Buffer* outv[nout > 0 ? nout : 1];
	PJRT_Error* err = NULL;
	memset(made, 0, sizeof(made));
	memset(done, 0, sizeof(done));
	memset(outv, 0, sizeof(outv));

	for (size_t i = 0; i < n; i++) {
		keep[i] = (int64_t)i;
		if (a->in[i] != NULL) {
			argv[i] = a->in[i];
			continue;
		}
		PJRT_Client_BufferFromHostBuffer_Args h = {0};
		h.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
		h.client = a->client;
		h.data = a->host_data[i];
		h.type = (PJRT_Buffer_Type)a->host_type[i];
		h.dims = a->host_dims + a->host_dim_off[i];
		h.num_dims = (size_t)a->host_rank[i];
		h.host_buffer_semantics = a->zero_copy ? PJRT_HostBufferSemantics_kImmutableZeroCopy
			: PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
		h.device = a->device;
		if ((err = api->PJRT_Client_BufferFromHostBuffer(&h)) != NULL) {
			a->fail_index = (int64_t)i;
			a->fail_stage = 0;
			goto cleanup;
		}
		made[i] = h.buffer;
		done[i] = h.done_with_host_buffer;
		argv[i] = h.buffer;
	}

	{
		PJRT_ExecuteOptions opts = {0};
		opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
		opts.non_donatable_input_indices = keep;
		opts.num_non_donatable_input_indices = n;
		PJRT_Buffer* const* arg_lists[1] = {argv};
		PJRT_Buffer** out_lists[1] = {outv};
		PJRT_Event* complete[1] = {NULL};
		PJRT_LoadedExecutable_Execute_Args ex = {0};
		ex.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
		ex.executable = a->le;
		ex.options = &opts;
		ex.argument_lists = arg_lists;
		ex.num_devices = 1;
		ex.num_args = n;
		ex.output_lists = out_lists;
		ex.device_complete_events = complete;
		if (a->portable) ex.execute_device = a->device;
		if ((err = api->PJRT_LoadedExecutable_Execute(&ex)) != NULL) {
			a->fail_stage = 1;
			goto cleanup;
		}
		if (complete[0] != NULL) {
			PJRT_Event_IsReady_Args r = {0};
			r.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
			r.event = complete[0];
			PJRT_Error* rerr = api->PJRT_Event_IsReady(&r);
			if (rerr == NULL) a->ran_inline = r.is_ready ? 1 : 0;
			xs_error_destroy(api, rerr);
		}
		if ((err = xs_await_destroy(api, complete[0])) != NULL) {
			a->fail_stage = 1;
			goto cleanup;
		}
	}
	for (size_t i = 0; i < nout; i++) {
		if ((err = xs_download(a, i, outv[i])) != NULL || a->fail != NULL) {
			a->fail_index = (int64_t)i;
			a->fail_stage = 2;
			goto cleanup;
		}
	}

cleanup:
	for (size_t i = 0; i < nout; i++) xs_buffer_destroy(api, outv[i]);
	for (size_t i = 0; i < n; i++) xs_buffer_destroy(api, made[i]);
	// With zero-copy semantics the plugin is done with the host memory
	// once the buffer is gone; wait for it before Go may reuse that memory.
	for (size_t i = 0; i < n; i++) {
		PJRT_Error* e2 = xs_await_destroy(api, done[i]);
		if (e2 != NULL) {
			if (err == NULL) err = e2;
			else {
				PJRT_Error_Destroy_Args ed = {0};
				ed.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
				ed.error = e2;
				api->PJRT_Error_Destroy(&ed);
			}
		}
	}
	return err;
}

// xs_first_device returns the client's first addressable device.
static PJRT_Error* xs_first_device(const PJRT_Api* api, PJRT_Client* client, PJRT_Device** dev) {
	PJRT_Client_AddressableDevices_Args a = {0};
	a.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
	a.client = client;
	PJRT_Error* err = api->PJRT_Client_AddressableDevices(&a);
	if (err != NULL) return err;
	*dev = a.num_addressable_devices > 0 ? a.addressable_devices[0] : NULL;
	return NULL;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xserve/xserve/tensor"
)

// bufferHandle caches the PJRT_Buffer of a Buffer.
type bufferHandle = atomic.Pointer[cBuffer]

type cBuffer struct{ c *C.PJRT_Buffer }

// outputType is the dtype and shape of one output, recorded at the first run.
type outputType struct {
	dtype  tensor.DType
	xla    int32
	shape  []int64
	nbytes int64
}

// fastPath is what the one-call path needs of an executable: the C handles
// and the output types. It is made once per Executable, after the first run.
type fastPath struct {
	api    *C.PJRT_Api
	client *C.PJRT_Client
	device *C.PJRT_Device
	le     *C.PJRT_LoadedExecutable
	// portable executables name their device at each execution.
	portable bool
	outputs  []outputType
}

// RunHost executes the program with, at each parameter position i, either
// the device buffer bufs[i] or the host tensor hosts[i] (exactly one of them
// non-nil), and returns the outputs as new host tensors. Host tensors are
// handed to the device for this execution only (without a copy where the
// plugin can read them in place) and must not change until RunHost returns.
//
// After a first run through Upload, Execute and ToHost, which records the
// output types, it makes one call into the plugin per execution. Its errors
// and argument checks are those of Execute.
func (e *Executable) RunHost(ctx context.Context, bufs []*Buffer, hosts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: execute %s: %w", e.name, err)
	}
	if len(bufs) != len(hosts) {
		return nil, fmt.Errorf("pjrt: execute %s: %d buffers but %d host tensors", e.name, len(bufs), len(hosts))
	}
	if fp := e.fast.Load(); fp != nil && haveHandles(bufs) {
		return e.runFast(fp, bufs, hosts)
	}
	return e.runPortable(ctx, bufs, hosts)
}

// runPortable uploads the host inputs, executes, downloads the outputs and
// records what the fast path needs.
func (e *Executable) runPortable(ctx context.Context, bufs []*Buffer, hosts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	args := make([]*Buffer, len(bufs))
	var uploaded []*Buffer
	defer func() {
		for _, b := range uploaded {
			_ = b.Close()
		}
	}()
	for i := range bufs {
		if err := e.checkArg(i, bufs[i], hosts[i]); err != nil {
			return nil, err
		}
		if bufs[i] != nil {
			args[i] = bufs[i]
			continue
		}
		b, err := e.client.Upload(ctx, hosts[i])
		if err != nil {
			return nil, fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, err)
		}
		uploaded = append(uploaded, b)
		args[i] = b
	}
	outs, err := e.Execute(ctx, args)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, o := range outs {
			_ = o.Close()
		}
	}()
	ts := make([]*tensor.Tensor, len(outs))
	types := make([]outputType, len(outs))
	for i, o := range outs {
		if ts[i], err = o.ToHost(context.WithoutCancel(ctx)); err != nil {
			return nil, fmt.Errorf("pjrt: run %s: output %d: %w", e.name, i, err)
		}
		xdt, err := DTypeToXLA(o.dtype)
		if err != nil {
			return nil, fmt.Errorf("pjrt: run %s: output %d: %w", e.name, i, err)
		}
		types[i] = outputType{dtype: o.dtype, xla: int32(xdt), shape: o.Shape(), nbytes: o.nbytes}
	}
	if fp, err := e.makeFastPath(types); err == nil {
		e.fast.CompareAndSwap(nil, fp)
	}
	return ts, nil
}

// checkArg checks argument i, given as a device buffer or a host tensor,
// against the program's parameter.
func (e *Executable) checkArg(i int, b *Buffer, h *tensor.Tensor) error {
	if (b == nil) == (h == nil) {
		return fmt.Errorf("pjrt: execute %s: argument %d: want exactly one of a buffer and a host tensor", e.name, i)
	}
	if b != nil {
		if b.client != e.client {
			return fmt.Errorf("pjrt: execute %s: argument %d belongs to another client", e.name, i)
		}
		return nil
	}
	if e.paramsKnown && i < len(e.params) {
		if p := e.params[i]; p.known && (p.dtype != h.DType || !slices.Equal(p.shape, h.Shape)) {
			return fmt.Errorf("pjrt: execute %s: argument %d is %s%s, program wants %s",
				e.name, i, h.DType, tensor.ShapeString(h.Shape), p)
		}
	}
	if n := tensor.NumElements(h.Shape); n < 0 || int64(len(h.Data)) != n*int64(h.DType.Size()) {
		return fmt.Errorf("pjrt: execute %s: argument %d: %s needs %d bytes of data, got %d",
			e.name, i, h, n*int64(h.DType.Size()), len(h.Data))
	}
	return nil
}

// makeFastPath reads the C handles of e. The caller must not hold c.mu or
// e.mu for writing.
func (e *Executable) makeFastPath(types []outputType) (*fastPath, error) {
	c := e.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("execute", "client")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.le == nil {
		return nil, errClosed("execute", "executable")
	}
	a := c.api
	fp := &fastPath{api: a.api, client: a.client, le: e.handle.le, outputs: types, portable: e.le.IsPortable()}
	if perr := C.xs_first_device(a.api, a.client, &fp.device); perr != nil {
		return nil, pluginError(a.api, perr)
	}
	if fp.device == nil || fp.le == nil {
		return nil, errors.New("no device or executable handle")
	}
	return fp, nil
}

// runScratch is the per-call memory of runFast, pooled.
type runScratch struct {
	// args is allocated on its own: cgo checks the whole object a pointer
	// argument points into, and the rest of runScratch holds Go pointers.
	args     *C.xs_run_args
	in       []*C.PJRT_Buffer
	hostData []unsafe.Pointer
	hostType []int32
	dims     []int64
	dimOff   []int64
	rank     []int64
	outData  []unsafe.Pointer
	outSize  []int64
	outType  []int32
	outRank  []int64
	// locked are the device buffers read-locked by this call; seen indexes
	// them once there are many.
	locked []*Buffer
	seen   map[*Buffer]struct{}
}

var scratchPool = sync.Pool{New: func() any { return &runScratch{args: new(C.xs_run_args)} }}

// zeroSize is handed to the plugin as the data of zero-size host tensors.
var zeroSize [8]byte

// runFast is RunHost in one plugin call.
func (e *Executable) runFast(fp *fastPath, bufs []*Buffer, hosts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	c := e.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("execute "+e.name, "client")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.le == nil {
		return nil, errClosed("execute "+e.name, "executable")
	}
	if e.paramsKnown && len(bufs) != len(e.params) {
		return nil, fmt.Errorf("pjrt: execute %s: got %d arguments, program wants %d", e.name, len(bufs), len(e.params))
	}
	s := scratchPool.Get().(*runScratch)
	defer scratchPool.Put(s)
	var pin runtime.Pinner
	defer pin.Unpin()
	defer s.unlock()
	if err := s.setArgs(e, fp, bufs, hosts, &pin); err != nil {
		return nil, err
	}
	outs := s.setOutputs(fp, &pin)
	a := s.args
	*a = C.xs_run_args{
		api: fp.api, client: fp.client, device: fp.device, le: fp.le, portable: C.int(boolInt(fp.portable)),
		num_args:    C.size_t(len(bufs)),
		host_dims:   (*C.int64_t)(unsafe.Pointer(&s.dims[0])),
		num_outputs: C.size_t(len(outs)),
		zero_copy:   1,
		direct:      1,
	}
	if len(bufs) > 0 {
		a.in = (**C.PJRT_Buffer)(unsafe.Pointer(&s.in[0]))
		a.host_data = (*unsafe.Pointer)(unsafe.Pointer(&s.hostData[0]))
		a.host_type = (*C.int32_t)(unsafe.Pointer(&s.hostType[0]))
		a.host_dim_off = (*C.int64_t)(unsafe.Pointer(&s.dimOff[0]))
		a.host_rank = (*C.int64_t)(unsafe.Pointer(&s.rank[0]))
	}
	if len(outs) > 0 {
		a.out_data = (*unsafe.Pointer)(unsafe.Pointer(&s.outData[0]))
		a.out_size = (*C.int64_t)(unsafe.Pointer(&s.outSize[0]))
		a.out_type = (*C.int32_t)(unsafe.Pointer(&s.outType[0]))
		a.out_rank = (*C.int64_t)(unsafe.Pointer(&s.outRank[0]))
	}
	perr := C.xs_run(a)
	e.client.countRun(a.ran_inline != 0)
	clear(s.hostData)
	clear(s.outData)
	clear(s.in)
	if perr != nil {
		err := pluginError(fp.api, perr)
		switch a.fail_stage {
		case 0:
			return nil, fmt.Errorf("pjrt: execute %s: upload argument %d: %w", e.name, int(a.fail_index), err)
		case 2:
			return nil, fmt.Errorf("pjrt: run %s: output %d: %w", e.name, int(a.fail_index), err)
		default:
			return nil, fmt.Errorf("pjrt: execute %s: %w", e.name, err)
		}
	}
	if a.fail != nil {
		return nil, fmt.Errorf("pjrt: execute %s: output %d: %s", e.name, int(a.fail_index), C.GoString(a.fail))
	}
	return outs, nil
}

// setArgs checks the arguments and fills the argument arrays: the handles
// of the device buffers (each read-locked once, until unlock) and the
// pinned data, type and dims of the host tensors.
func (s *runScratch) setArgs(e *Executable, fp *fastPath, bufs []*Buffer, hosts []*tensor.Tensor, pin *runtime.Pinner) error {
	n := len(bufs)
	s.in = resize(s.in, n)
	s.hostData = resize(s.hostData, n)
	s.hostType = resize(s.hostType, n)
	s.dimOff = resize(s.dimOff, n)
	s.rank = resize(s.rank, n)
	s.dims = s.dims[:0]
	for i := range bufs {
		if err := e.checkArg(i, bufs[i], hosts[i]); err != nil {
			return err
		}
		s.dimOff[i] = int64(len(s.dims))
		s.in[i], s.hostData[i] = nil, nil
		if b := bufs[i]; b != nil {
			if e.paramsKnown {
				if p := e.params[i]; p.known && (p.dtype != b.dtype || !slices.Equal(p.shape, b.shape)) {
					return fmt.Errorf("pjrt: execute %s: argument %d is %s%s, program wants %s",
						e.name, i, b.dtype, tensor.ShapeString(b.shape), p)
				}
			}
			s.lock(b)
			if b.buf == nil {
				return fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, errClosed("execute", "buffer"))
			}
			s.in[i] = b.handle()
			continue
		}
		h := hosts[i]
		xdt, err := DTypeToXLA(h.DType)
		if err != nil {
			return fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, err)
		}
		s.hostType[i] = int32(xdt)
		s.rank[i] = int64(len(h.Shape))
		s.dims = append(s.dims, h.Shape...)
		s.hostData[i] = unsafe.Pointer(&zeroSize[0])
		if len(h.Data) > 0 {
			s.hostData[i] = unsafe.Pointer(unsafe.SliceData(h.Data))
			pin.Pin(s.hostData[i])
		}
	}
	if len(s.dims) == 0 {
		s.dims = append(s.dims, 0)
	}
	pin.Pin(&s.dims[0])
	if n > 0 {
		pin.Pin(&s.in[0])
		pin.Pin(&s.hostData[0])
		pin.Pin(&s.hostType[0])
		pin.Pin(&s.dimOff[0])
		pin.Pin(&s.rank[0])
	}
	return nil
}

// setOutputs allocates the output tensors and fills the output arrays with
// their pinned data and expected types.
func (s *runScratch) setOutputs(fp *fastPath, pin *runtime.Pinner) []*tensor.Tensor {
	no := len(fp.outputs)
	s.outData = resize(s.outData, no)
	s.outSize = resize(s.outSize, no)
	s.outType = resize(s.outType, no)
	s.outRank = resize(s.outRank, no)
	outs := make([]*tensor.Tensor, no)
	for i, ot := range fp.outputs {
		outs[i] = &tensor.Tensor{DType: ot.dtype, Shape: slices.Clone(ot.shape), Data: make([]byte, ot.nbytes)}
		s.outType[i] = ot.xla
		s.outRank[i] = int64(len(ot.shape))
		s.outSize[i] = ot.nbytes
		s.outData[i] = nil
		if ot.nbytes > 0 {
			s.outData[i] = unsafe.Pointer(unsafe.SliceData(outs[i].Data))
			pin.Pin(s.outData[i])
		}
	}
	if no > 0 {
		pin.Pin(&s.outData[0])
		pin.Pin(&s.outSize[0])
		pin.Pin(&s.outType[0])
		pin.Pin(&s.outRank[0])
	}
	return outs
}

// lock read-locks b unless this call already holds it: a second RLock of
// the same mutex could deadlock against a waiting Close.
func (s *runScratch) lock(b *Buffer) {
	if len(s.locked) < 16 {
		if slices.Contains(s.locked, b) {
			return
		}
	} else {
		if s.seen == nil {
			s.seen = map[*Buffer]struct{}{}
		}
		if len(s.seen) == 0 {
			for _, l := range s.locked {
				s.seen[l] = struct{}{}
			}
		}
		if _, ok := s.seen[b]; ok {
			return
		}
		s.seen[b] = struct{}{}
	}
	b.mu.RLock()
	s.locked = append(s.locked, b)
}

// unlock releases the locks taken by lock.
func (s *runScratch) unlock() {
	for _, b := range s.locked {
		b.mu.RUnlock()
	}
	clear(s.locked)
	s.locked = s.locked[:0]
	clear(s.seen)
}

// handle returns the PJRT_Buffer of b, which haveHandles checked it has;
// the caller holds b.mu for reading and b is not closed.
func (b *Buffer) handle() *C.PJRT_Buffer {
	return b.cHandle.Load().c
}

// haveHandles reports whether every device buffer in bufs has its
// PJRT_Buffer handle, noted when Upload made it; buffers made otherwise
// (outputs of Execute) take the portable path.
func haveHandles(bufs []*Buffer) bool {
	for _, b := range bufs {
		if b != nil && b.cHandle.Load() == nil {
			return false
		}
	}
	return true
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
