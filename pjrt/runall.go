package pjrt

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

// HostRun is one execution of Client.RunHostAll: an executable of the
// client and its arguments, as Executable.RunHost takes them. RunHostAll
// sets Outs, or Err.
type HostRun struct {
	Exe   *Executable
	Bufs  []*Buffer
	Hosts []*tensor.Tensor
	// Threads, when above 0, is the most threads the execution's CPU
	// kernels run on (the kernel library's thread limit): 1 keeps them on
	// the calling thread (no OpenMP team, no bands on the library's band
	// workers), as for every execution of a RunHostAll of several. 0: as
	// many as the library uses. For an execution run alone: where its
	// caller finds that those threads cost more than they save, or knows
	// that other executions hold some of the cores.
	Threads int

	Outs []*tensor.Tensor
	Err  error
	// Timed asks for CPU, the execution's core time (see
	// Executable.RunHostTimed); CPU is 0 without it.
	Timed bool
	CPU   time.Duration
}

// RunHostAll runs the executions of runs at once, each as RunHost would,
// and returns when all are done. The first runs on the calling thread, each
// other on a worker thread of the client's own (native threads, one fewer
// than the CPUs, started on first use), or after the first on the calling
// thread when no worker is idle. One call into the plugin makes them all:
// handing an execution to a worker and waiting for it costs a futex wake at
// most, where a goroutine each costs the Go scheduler's hand-offs (tens of
// microseconds on a small VM, and more when the scheduler puts two on one
// core).
//
// Executions that cannot take the one-call path (an executable's first
// run) run as RunHost, each on a goroutine.
func (c *Client) RunHostAll(ctx context.Context, runs []HostRun) {
	if len(runs) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		failAll(runs, func(name string) error { return fmt.Errorf("pjrt: execute %s: %w", name, err) })
		return
	}
	limited := len(runs) == 1 && runs[0].Threads > 0
	if len(runs) == 1 && !limited || !c.allFast(runs) {
		runEach(ctx, runs)
		return
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		failAll(runs, func(name string) error { return errClosed("execute "+name, "client") })
		return
	}
	unlock, live := lockExecutables(runs)
	defer unlock()
	if !live {
		failAll(runs, func(name string) error { return errClosed("execute "+name, "executable") })
		return
	}
	threads := 0 // a RunHostAll of several runs each on one thread (xs_run_all)
	if limited {
		threads = runs[0].Threads
	}
	c.runLocked(runs, threads)
}

// lockExecutables read-locks each executable of runs once (a second RLock
// of a mutex could deadlock against a waiting Close) and reports whether
// all are open; unlock releases them.
func lockExecutables(runs []HostRun) (unlock func(), live bool) {
	var exes []*Executable
	for _, r := range runs {
		if !slices.Contains(exes, r.Exe) {
			exes = append(exes, r.Exe)
		}
	}
	for i, e := range exes {
		e.mu.RLock()
		if e.le == nil {
			exes = exes[:i+1]
			live = false
			break
		}
		live = true
	}
	return func() {
		for _, e := range exes {
			e.mu.RUnlock()
		}
	}, live
}

// runLocked runs the executions in one call into the plugin; the caller
// holds the client's and the executables' locks for reading. A run whose
// arguments do not check out fails alone.
func (c *Client) runLocked(runs []HostRun, threads int) {
	var pin runtime.Pinner
	defer pin.Unpin()
	scratch := make([]*runScratch, len(runs))
	for i := range scratch {
		scratch[i] = scratchPool.Get().(*runScratch)
		if i > 0 {
			scratch[i].locks = scratch[0]
		}
	}
	defer func() {
		scratch[0].unlock()
		for _, s := range scratch {
			s.locks = nil
			scratchPool.Put(s)
		}
	}()
	argv := make([]*C.xs_run_args, 0, len(runs))
	ok := make([]int, 0, len(runs))
	for i := range runs {
		r := &runs[i]
		outs, err := scratch[i].prepare(r.Exe, r.Exe.fast.Load(), r.Bufs, r.Hosts, &pin)
		if err != nil {
			scratch[i].drop()
			r.Outs, r.Err = nil, err
			continue
		}
		r.Outs = outs
		scratch[i].args.timed = cBool(r.Timed)
		argv = append(argv, scratch[i].args)
		pin.Pin(scratch[i].args)
		ok = append(ok, i)
	}
	if len(ok) == 0 {
		return
	}
	errs := make([]*C.PJRT_Error, len(ok))
	C.xs_run_all(c.pool.get(c.kernelsLimit), (**C.xs_run_args)(unsafe.Pointer(&argv[0])), (**C.PJRT_Error)(unsafe.Pointer(&errs[0])), C.int(len(ok)), C.int(threads))
	for k, i := range ok {
		runs[i].CPU = time.Duration(scratch[i].args.cpu_ns)
		if err := scratch[i].finish(runs[i].Exe, errs[k]); err != nil {
			runs[i].Outs, runs[i].Err = nil, err
		}
	}
}

// failAll sets the error of every run to what fail makes of its
// executable's name.
func failAll(runs []HostRun, fail func(name string) error) {
	for i := range runs {
		name := "(no executable)"
		if runs[i].Exe != nil {
			name = runs[i].Exe.name
		}
		runs[i].Err = fail(name)
	}
}

// allFast reports whether every run can take the one-call path: an
// executable of c that has run once, exactly one argument per position.
func (c *Client) allFast(runs []HostRun) bool {
	for _, r := range runs {
		if r.Exe == nil || r.Exe.client != c || r.Exe.fast.Load() == nil || len(r.Bufs) != len(r.Hosts) {
			return false
		}
	}
	return true
}

// runEach runs each execution with RunHost, the first on the calling
// goroutine and each other on a goroutine of its own.
func runEach(ctx context.Context, runs []HostRun) {
	var wg sync.WaitGroup
	for i := 1; i < len(runs); i++ {
		r := &runs[i]
		wg.Go(func() { runHost(ctx, r) })
	}
	runHost(ctx, &runs[0])
	wg.Wait()
}

func runHost(ctx context.Context, r *HostRun) {
	if r.Exe == nil {
		r.Err = fmt.Errorf("pjrt: execute: no executable")
		return
	}
	r.Outs, r.CPU, r.Err = r.Exe.runHost(ctx, r.Bufs, r.Hosts, r.Timed, nil)
}

// workerPool is a client's worker threads for RunHostAll, made on first
// use.
type workerPool struct {
	once sync.Once
	p    *C.xs_pool
}

// get returns the pool, made on first use with the CPU kernels' thread
// limit (nil for none); nil (every execution on the calling thread) when it
// cannot be made. The caller holds the client's mu for reading.
func (w *workerPool) get(limit unsafe.Pointer) *C.xs_pool {
	w.once.Do(func() { w.p = C.xs_pool_new(C.int(max(runtime.NumCPU()-1, 1)), limit) })
	return w.p
}

// free stops the threads; the caller holds the client's mu for writing.
func (w *workerPool) free() {
	w.once.Do(func() {}) // a later get makes no pool
	if w.p != nil {
		C.xs_pool_free(w.p)
		w.p = nil
	}
}
