package pjrt

// The fixed-cost execution path of RunHost: one cgo call per execution that
// hands the host inputs to the plugin (zero-copy where it can), executes,
// copies the outputs into Go memory allocated beforehand and frees every
// plugin object it made, instead of one call (and one Go wrapper and event
// wait) per upload, execution and download. An executable's first run takes
// the portable path (Upload, Execute, ToHost), which records the output
// types.

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include "hostrun.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/xserve/xserve/tensor"
)

// outputType is the dtype and shape of one output, recorded at the first run.
type outputType struct {
	dtype  tensor.DType
	xla    int32
	shape  []int64
	nbytes int64
}

// fastPath is what the one-call path needs of an executable: the output
// types. It is made once per Executable, after the first run.
type fastPath struct {
	outputs []outputType
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
	outs, _, err := e.runHost(ctx, bufs, hosts, false, nil)
	return outs, err
}

// RunHostTimed is RunHost that also returns the execution's core time: the
// CPU time the thread that ran it spent from upload to download (a thread
// CPU clock, so time the thread waited descheduled is not counted, nor are
// the helper threads of a multi-threaded kernel). It is 0 for a run that
// did not take the one-call path (an executable's first). Reading the
// clock costs two system calls, which RunHost spares.
func (e *Executable) RunHostTimed(ctx context.Context, bufs []*Buffer, hosts []*tensor.Tensor) ([]*tensor.Tensor, time.Duration, error) {
	return e.runHost(ctx, bufs, hosts, true, nil)
}

// RunTrace is when the steps of one execution of RunHostTraced happened, as
// instants of the host's monotonic clock (CLOCK_MONOTONIC, from an
// arbitrary origin): comparable between the executions of a process,
// whatever their threads. All are 0 for a run that did not take the
// one-call path (an executable's first).
type RunTrace struct {
	// Start is when the execution began: before its first upload.
	Start time.Duration
	// Uploaded is when every host input had been handed to the plugin
	// (PJRT_Client_BufferFromHostBuffer returned for each; the plugin may
	// still be copying: a device plugin's transfer runs on, ordered before
	// the execution on the device).
	Uploaded time.Duration
	// Executed is when the execution had completed (its completion event
	// awaited).
	Executed time.Duration
	// Downloaded is when every output was in its host tensor.
	Downloaded time.Duration
}

// RunHostTraced is RunHost that also returns when its uploads, execution
// and downloads ended: tests see with it which steps of executions running
// at once overlapped.
func (e *Executable) RunHostTraced(ctx context.Context, bufs []*Buffer, hosts []*tensor.Tensor) ([]*tensor.Tensor, RunTrace, error) {
	var tr RunTrace
	outs, _, err := e.runHost(ctx, bufs, hosts, false, &tr)
	return outs, tr, err
}

func (e *Executable) runHost(ctx context.Context, bufs []*Buffer, hosts []*tensor.Tensor, timed bool, trace *RunTrace) ([]*tensor.Tensor, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("pjrt: execute %s: %w", e.name, err)
	}
	if len(bufs) != len(hosts) {
		return nil, 0, fmt.Errorf("pjrt: execute %s: %d buffers but %d host tensors", e.name, len(bufs), len(hosts))
	}
	if fp := e.fast.Load(); fp != nil {
		return e.runFast(fp, bufs, hosts, timed, trace)
	}
	outs, err := e.runPortable(ctx, bufs, hosts)
	return outs, 0, err
}

// runPortable uploads the host inputs, executes, downloads the outputs and
// records what the fast path needs.
func (e *Executable) runPortable(ctx context.Context, bufs []*Buffer, hosts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	dev, err := e.argsDevice(bufs)
	if err != nil {
		return nil, err
	}
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
		b, err := e.client.UploadTo(ctx, hosts[i], dev)
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
		bt, err := bufferType(o.dtype)
		if err != nil {
			return nil, fmt.Errorf("pjrt: run %s: output %d: %w", e.name, i, err)
		}
		types[i] = outputType{dtype: o.dtype, xla: int32(bt), shape: o.Shape(), nbytes: o.nbytes}
	}
	e.fast.CompareAndSwap(nil, &fastPath{outputs: types})
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
	if e.params != nil && i < len(e.params) && !e.params[i].matches(h.DType, h.Shape) {
		return fmt.Errorf("pjrt: execute %s: argument %d is %s%s, program wants %s",
			e.name, i, h.DType, tensor.ShapeString(h.Shape), e.params[i])
	}
	if n := tensor.NumElements(h.Shape); n < 0 || int64(len(h.Data)) != n*int64(h.DType.Size()) {
		return fmt.Errorf("pjrt: execute %s: argument %d: %s needs %d bytes of data, got %d",
			e.name, i, h, n*int64(h.DType.Size()), len(h.Data))
	}
	return nil
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
	// hostIn counts the host arguments of the execution.
	hostIn int
	// locks, when set, is the scratch of another execution of the same
	// RunHostAll, whose lock set this one shares: executions that share a
	// buffer (weights) read-lock it once.
	locks *runScratch
}

var scratchPool = sync.Pool{New: func() any { return &runScratch{args: new(C.xs_run_args)} }}

// runFast is RunHost in one plugin call.
func (e *Executable) runFast(fp *fastPath, bufs []*Buffer, hosts []*tensor.Tensor, timed bool, trace *RunTrace) ([]*tensor.Tensor, time.Duration, error) {
	c := e.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, 0, errClosed("execute "+e.name, "client")
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.le == nil {
		return nil, 0, errClosed("execute "+e.name, "executable")
	}
	s := scratchPool.Get().(*runScratch)
	defer scratchPool.Put(s)
	var pin runtime.Pinner
	defer pin.Unpin()
	defer s.unlock()
	outs, err := s.prepare(e, fp, bufs, hosts, &pin)
	if err != nil {
		s.drop()
		return nil, 0, err
	}
	s.args.timed = cBool(timed)
	s.args.trace = cBool(trace != nil)
	perr := C.xs_run(s.args)
	cpu := time.Duration(s.args.cpu_ns)
	if trace != nil {
		ns := s.args.trace_ns
		*trace = RunTrace{time.Duration(ns[0]), time.Duration(ns[1]), time.Duration(ns[2]), time.Duration(ns[3])}
	}
	if err := s.finish(e, perr); err != nil {
		return nil, 0, err
	}
	return outs, cpu, nil
}

// prepare checks the arguments of one execution of e and fills s.args: the
// handles and pinned data of the arguments, and the output tensors it
// returns. The caller holds e.client.mu and e.mu for reading and the live
// executable.
func (s *runScratch) prepare(e *Executable, fp *fastPath, bufs []*Buffer, hosts []*tensor.Tensor, pin *runtime.Pinner) ([]*tensor.Tensor, error) {
	if e.params != nil && len(bufs) != len(e.params) {
		return nil, fmt.Errorf("pjrt: execute %s: got %d arguments, program wants %d", e.name, len(bufs), len(e.params))
	}
	if err := s.setArgs(e, bufs, hosts, pin); err != nil {
		return nil, err
	}
	dev, err := e.argsDevice(bufs)
	if err != nil {
		return nil, err
	}
	outs := s.setOutputs(fp, pin)
	a := s.args
	c := e.client
	*a = C.xs_run_args{
		api: c.api, client: c.c, device: c.devices[dev], le: e.le, portable: 1,
		num_args:    C.size_t(len(bufs)),
		host_dims:   (*C.int64_t)(unsafe.Pointer(&s.dims[0])),
		num_outputs: C.size_t(len(outs)),
		zero_copy:   1,
		direct:      cBool(!c.pluginCopies),
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
func (s *runScratch) finish(e *Executable, perr *C.PJRT_Error) error {
	a := s.args
	c := e.client
	c.countRun(a.ran_inline != 0)
	c.toDevice.Add(uint64(s.hostIn))
	if perr == nil && a.fail == nil {
		c.toHost.Add(uint64(a.num_outputs))
	}
	s.drop()
	if perr != nil {
		err := pluginError(e.client.api, perr)
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
func (s *runScratch) setArgs(e *Executable, bufs []*Buffer, hosts []*tensor.Tensor, pin *runtime.Pinner) error {
	n := len(bufs)
	s.in = resize(s.in, n)
	s.hostData = resize(s.hostData, n)
	s.hostType = resize(s.hostType, n)
	s.dimOff = resize(s.dimOff, n)
	s.rank = resize(s.rank, n)
	s.dims = s.dims[:0]
	s.hostIn = 0
	for i := range bufs {
		if err := e.checkArg(i, bufs[i], hosts[i]); err != nil {
			return err
		}
		s.dimOff[i] = int64(len(s.dims))
		s.in[i], s.hostData[i] = nil, nil
		if b := bufs[i]; b != nil {
			if e.params != nil && !e.params[i].matches(b.dtype, b.shape) {
				return fmt.Errorf("pjrt: execute %s: argument %d is %s%s, program wants %s",
					e.name, i, b.dtype, tensor.ShapeString(b.shape), e.params[i])
			}
			s.lock(b)
			if err := b.liveLocked("execute"); err != nil {
				return fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, err)
			}
			s.in[i] = b.buf
			continue
		}
		h := hosts[i]
		s.hostIn++
		bt, err := bufferType(h.DType)
		if err != nil {
			return fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, err)
		}
		s.hostType[i] = int32(bt)
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

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// cBool is b as a C int.
func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
