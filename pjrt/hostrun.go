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
#include "hostrun.h"
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
	// locks, when set, is the scratch of another execution of the same
	// RunHostAll, whose lock set this one shares: executions that share a
	// buffer (weights) read-lock it once.
	locks *runScratch
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
	s := scratchPool.Get().(*runScratch)
	defer scratchPool.Put(s)
	var pin runtime.Pinner
	defer pin.Unpin()
	defer s.unlock()
	outs, err := s.prepare(e, fp, bufs, hosts, &pin)
	if err != nil {
		s.drop()
		return nil, err
	}
	if err := s.finish(e, fp, C.xs_run(s.args)); err != nil {
		return nil, err
	}
	return outs, nil
}

// prepare checks the arguments of one execution of e and fills s.args: the
// handles and pinned data of the arguments, and the output tensors it
// returns. The caller holds e.client.mu and e.mu for reading and the live
// executable.
func (s *runScratch) prepare(e *Executable, fp *fastPath, bufs []*Buffer, hosts []*tensor.Tensor, pin *runtime.Pinner) ([]*tensor.Tensor, error) {
	if e.paramsKnown && len(bufs) != len(e.params) {
		return nil, fmt.Errorf("pjrt: execute %s: got %d arguments, program wants %d", e.name, len(bufs), len(e.params))
	}
	if err := s.setArgs(e, fp, bufs, hosts, pin); err != nil {
		return nil, err
	}
	outs := s.setOutputs(fp, pin)
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
	return outs, nil
}

// finish counts the execution s.args described, drops its pointers into
// Go memory, and returns its error: perr, the plugin's, or a check of
// xs_run's.
func (s *runScratch) finish(e *Executable, fp *fastPath, perr *C.PJRT_Error) error {
	a := s.args
	e.client.countRun(a.ran_inline != 0)
	s.drop()
	if perr != nil {
		err := pluginError(fp.api, perr)
		switch a.fail_stage {
		case 0:
			return fmt.Errorf("pjrt: execute %s: upload argument %d: %w", e.name, int(a.fail_index), err)
		case 2:
			return fmt.Errorf("pjrt: run %s: output %d: %w", e.name, int(a.fail_index), err)
		default:
			return fmt.Errorf("pjrt: execute %s: %w", e.name, err)
		}
	}
	if a.fail != nil {
		return fmt.Errorf("pjrt: execute %s: output %d: %s", e.name, int(a.fail_index), C.GoString(a.fail))
	}
	return nil
}

// drop forgets the Go memory the last prepare pointed s at.
func (s *runScratch) drop() {
	clear(s.hostData)
	clear(s.outData)
	clear(s.in)
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
	if s.locks != nil {
		s.locks.lock(b)
		return
	}
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
