package pjrt

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include "capi.h"
*/
import "C"

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xserve/xserve/tensor"
)

// Type is the dtype and shape of an array: a program parameter's (Compile)
// or a buffer's.
type Type struct {
	DType tensor.DType
	Shape []int64
}

func (t Type) String() string {
	if t.DType == tensor.Invalid {
		return "?"
	}
	return t.DType.String() + tensor.ShapeString(t.Shape)
}

// known reports whether arguments are checked against t (a type read from
// an old serialized executable may be unknown).
func (t Type) known() bool { return t.DType != tensor.Invalid }

// matches reports whether an array of dtype dt and shape shape fits t.
func (t Type) matches(dt tensor.DType, shape []int64) bool {
	return !t.known() || t.DType == dt && slices.Equal(t.Shape, shape)
}

func cloneTypes(ts []Type) []Type {
	if ts == nil {
		return nil
	}
	out := make([]Type, len(ts))
	for i, t := range ts {
		out[i] = Type{DType: t.DType, Shape: slices.Clone(t.Shape)}
	}
	return out
}

// Executable is a compiled program, ready to run on the client's (first)
// device. It is safe to Execute or Run concurrently from many goroutines.
type Executable struct {
	client     *Client
	name       string
	numOutputs int
	// params are the @main parameter types Compile was given; nil: not
	// checked.
	params []Type

	// mu is held for reading by executions and for writing by Close.
	mu sync.RWMutex
	le *C.PJRT_LoadedExecutable // nil once closed
	// deserialized marks an executable made by Client.Deserialize, which
	// Serialize refuses: with the XLA CPU plugin (PJRT C API 0.81),
	// serializing a deserialized executable succeeds but leaves out the
	// object code of its kernels, so that the executable deserialized from
	// that fails to execute ("Function ... not found").
	deserialized bool

	// fast is set after the first RunHost: the one-call path (hostrun.go).
	fast atomic.Pointer[fastPath]
}

// Name returns the program's name (the MLIR module name, e.g. "m" for
// "module @m").
func (e *Executable) Name() string { return e.name }

// NumOutputs returns the number of results of the program's @main function,
// which is the number of Buffers Execute returns.
func (e *Executable) NumOutputs() int { return e.numOutputs }

// Params returns the parameter types the executable checks arguments
// against (nil: none).
func (e *Executable) Params() []Type { return cloneTypes(e.params) }

// String describes the executable, e.g. `pjrt executable "m" (3 inputs, 1 output)`.
func (e *Executable) String() string {
	in := "? inputs"
	if e.params != nil {
		in = plural(len(e.params), "input")
	}
	s := fmt.Sprintf("pjrt executable %q (%s, %s)", e.name, in, plural(e.numOutputs, "output"))
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.le == nil {
		s += " (closed)"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ExecuteOptions configure one Execute.
type ExecuteOptions struct {
	// Donate lists the arguments (by index) the execution consumes: each
	// is invalid afterwards (its Close is a no-op, any other use an error
	// wrapping ErrClosed), and where the program aliases it to an output
	// (the tf.aliasing_output attribute of its @main parameter), the
	// plugin permitting, that output reuses its memory instead of a new
	// allocation: a value updated in place on the device. The others stay
	// valid and may be reused by later or concurrent calls.
	Donate []int
}

// Execute runs the program on args and returns its outputs as new Buffers,
// which the caller must Close: inputs and outputs stay on the device.
// Arguments are not donated unless opts says so. Each argument must have
// the dtype and shape of its parameter (when Compile was given them).
//
// Execution is synchronous and cannot be interrupted: ctx is checked before
// it starts.
func (e *Executable) Execute(ctx context.Context, args []*Buffer, opts ...ExecuteOptions) ([]*Buffer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: execute %s: %w", e.name, err)
	}
	var donate []int
	for _, o := range opts {
		donate = append(donate, o.Donate...)
	}
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
	if e.params != nil && len(args) != len(e.params) {
		return nil, fmt.Errorf("pjrt: execute %s: got %d arguments, program wants %d", e.name, len(args), len(e.params))
	}
	give, keep, err := donation(e.name, len(args), donate)
	if err != nil {
		return nil, err
	}
	release, err := e.lockArgs(args, give)
	defer release()
	if err != nil {
		return nil, err
	}
	return e.execute(args, give, keep)
}

// donation returns, for n arguments, which are donated and the indices of
// the others (the non-donatable ones of PJRT_ExecuteOptions).
func donation(name string, n int, donate []int) (give []bool, keep []int64, err error) {
	give = make([]bool, n)
	for _, i := range donate {
		if i < 0 || i >= n || give[i] {
			return nil, nil, fmt.Errorf("pjrt: execute %s: cannot donate argument %d of %d (out of range or twice)", name, i, n)
		}
		give[i] = true
	}
	for i := range n {
		if !give[i] {
			keep = append(keep, int64(i))
		}
	}
	return give, keep, nil
}

// lockArgs checks the arguments and locks each distinct buffer once: for
// reading, or for writing when donated (no other use may overlap the
// execution that consumes it). release unlocks them.
func (e *Executable) lockArgs(args []*Buffer, give []bool) (release func(), err error) {
	type lock struct {
		b     *Buffer
		write bool
	}
	var locked []lock
	release = func() {
		for _, l := range locked {
			if l.write {
				l.b.mu.Unlock()
			} else {
				l.b.mu.RUnlock()
			}
		}
	}
	for i, b := range args {
		if b == nil {
			return release, fmt.Errorf("pjrt: execute %s: argument %d is nil", e.name, i)
		}
		if b.client != e.client {
			return release, fmt.Errorf("pjrt: execute %s: argument %d belongs to another client", e.name, i)
		}
		if e.params != nil && !e.params[i].matches(b.dtype, b.shape) {
			return release, fmt.Errorf("pjrt: execute %s: argument %d is %s%s, program wants %s",
				e.name, i, b.dtype, tensor.ShapeString(b.shape), e.params[i])
		}
		// A second lock of the same mutex could deadlock against a
		// waiting Close; a donated buffer must appear once.
		if k := slices.IndexFunc(locked, func(l lock) bool { return l.b == b }); k >= 0 {
			if give[i] || locked[k].write {
				return release, fmt.Errorf("pjrt: execute %s: argument %d is donated and passed again", e.name, i)
			}
			continue
		}
		if give[i] {
			b.mu.Lock()
		} else {
			b.mu.RLock()
		}
		locked = append(locked, lock{b, give[i]})
		if err := b.liveLocked("execute"); err != nil {
			return release, fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, err)
		}
	}
	return release, nil
}

// execute runs e on the locked args; the caller holds the client's and e's
// mu for reading. The donated arguments are gone afterwards, whether the
// execution succeeded or not.
func (e *Executable) execute(args []*Buffer, give []bool, keep []int64) ([]*Buffer, error) {
	c := e.client
	dev, err := e.argsDevice(args)
	if err != nil {
		return nil, err
	}
	raw := make([]*C.PJRT_Buffer, max(len(args), 1))
	for i, b := range args {
		raw[i] = b.buf
	}
	outs := make([]*C.PJRT_Buffer, max(e.numOutputs, 1))
	keepPtr := (*C.int64_t)(nil)
	if len(keep) > 0 {
		keepPtr = (*C.int64_t)(unsafe.Pointer(&keep[0]))
	}
	var inline C.int
	perr := C.xs_execute(c.api, e.le, c.devices[dev], 1, (**C.PJRT_Buffer)(unsafe.Pointer(&raw[0])), C.size_t(len(args)),
		keepPtr, C.size_t(len(keep)), (**C.PJRT_Buffer)(unsafe.Pointer(&outs[0])), &inline)
	for i, b := range args {
		if give[i] {
			// The plugin consumed its memory (or, unaliased, left it):
			// the buffer itself is still to be destroyed.
			C.xs_buffer_free(c.api, b.buf)
			b.buf, b.donated = nil, true
		}
	}
	if perr != nil {
		return nil, fmt.Errorf("pjrt: execute %s: %w", e.name, pluginError(c.api, perr))
	}
	res := make([]*Buffer, e.numOutputs)
	for i := range res {
		var err error
		if res[i], err = wrapOutput(c, outs[i], dev); err != nil {
			for _, pb := range outs[:e.numOutputs] {
				C.xs_buffer_free(c.api, pb)
			}
			return nil, fmt.Errorf("pjrt: execute %s: output %d: %w", e.name, i, err)
		}
	}
	return res, nil
}

// argsDevice is the device an execution on args runs on: the one its device
// buffers are on (nil ones aside), all the same one; device 0 without any.
func (e *Executable) argsDevice(args []*Buffer) (int, error) {
	dev, first := 0, -1
	for i, b := range args {
		switch {
		case b == nil:
		case first < 0:
			dev, first = b.dev, i
		case b.dev != dev:
			return 0, fmt.Errorf("pjrt: execute %s: argument %d is on device %d, argument %d on device %d: an execution runs on one device", e.name, first, dev, i, b.dev)
		}
	}
	return dev, nil
}

// Run executes the program on args (see Execute), copies its outputs to host
// tensors and frees the device outputs. After the first call it takes
// RunHost's one-call path.
func (e *Executable) Run(ctx context.Context, args []*Buffer) ([]*tensor.Tensor, error) {
	if !slices.Contains(args, nil) {
		return e.RunHost(ctx, args, make([]*tensor.Tensor, len(args)))
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
	for i, o := range outs {
		if ts[i], err = o.ToHost(context.WithoutCancel(ctx)); err != nil {
			return nil, fmt.Errorf("pjrt: run %s: output %d: %w", e.name, i, err)
		}
	}
	return ts, nil
}

// Close frees the executable. It waits for in-flight executions; calling it
// again is a no-op. Buffers it returned stay valid.
func (e *Executable) Close() error {
	e.client.mu.RLock()
	defer e.client.mu.RUnlock()
	err := e.destroy()
	e.client.forget(e)
	return err
}

// destroy frees the plugin executable; the caller holds e.client.mu.
func (e *Executable) destroy() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.le == nil {
		return nil
	}
	le := e.le
	e.le = nil
	if e.client.c == nil {
		return nil // went with the client
	}
	a := C.PJRT_LoadedExecutable_Destroy_Args{executable: le}
	if perr := C.xs_PJRT_LoadedExecutable_Destroy(e.client.api, &a); perr != nil {
		return fmt.Errorf("pjrt: close executable %s: %w", e.name, pluginError(e.client.api, perr))
	}
	return nil
}
