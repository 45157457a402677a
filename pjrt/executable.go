package pjrt

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	gopjrt "github.com/gomlx/go-xla/pkg/pjrt"

	"github.com/xserve/xserve/tensor"
)

// Executable is a compiled program, ready to run on the client's (first)
// device. It is safe to Execute or Run concurrently from many goroutines.
type Executable struct {
	client     *Client
	name       string
	numOutputs int
	// params are the @main parameter types read from the program text;
	// paramsKnown is false when the text could not be parsed.
	params      []paramType
	paramsKnown bool

	// mu is held for reading by executions and for writing by Close.
	mu     sync.RWMutex
	le     *gopjrt.LoadedExecutable // nil once closed
	handle loadedHandle             // le's C handle, for Serialize (capi.go)

	// fast is set after the first RunHost: the one-call path (hostrun.go).
	fast atomic.Pointer[fastPath]
}

// Name returns the program's name (the MLIR module name, e.g. "m" for
// "module @m").
func (e *Executable) Name() string { return e.name }

// NumOutputs returns the number of results of the program's @main function,
// which is the number of Buffers Execute returns.
func (e *Executable) NumOutputs() int { return e.numOutputs }

// String describes the executable, e.g. `pjrt executable "m" (3 inputs, 1 output)`.
func (e *Executable) String() string {
	in := "? inputs"
	if e.paramsKnown {
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

// Execute runs the program on args and returns its outputs as new Buffers,
// which the caller must Close. Arguments are never donated: they stay valid
// and may be reused by later or concurrent calls (e.g. weights uploaded
// once). Each argument must have the dtype and shape of the corresponding
// @main parameter.
//
// Execution is synchronous and cannot be interrupted: ctx is checked before
// it starts.
func (e *Executable) Execute(ctx context.Context, args []*Buffer) ([]*Buffer, error) {
	return e.execute(ctx, args, nil)
}

// ExecuteDonate is Execute with the arguments marked in donate given to
// the execution: the plugin may write the outputs the program aliases to
// them (see lower.Program.Aliases) into their memory, so that state kept on
// the device (a decoder's key/value cache) is updated in place instead of
// copied. A donated Buffer is closed by the call, whether it succeeds or
// not, and must not be used again; it must not be passed twice, nor be in
// use by another call.
func (e *Executable) ExecuteDonate(ctx context.Context, args []*Buffer, donate []bool) ([]*Buffer, error) {
	if len(donate) != len(args) {
		return nil, fmt.Errorf("pjrt: execute %s: %d donate flags for %d arguments", e.name, len(donate), len(args))
	}
	for i, d := range donate {
		if d && slices.Index(args, args[i]) != i {
			return nil, fmt.Errorf("pjrt: execute %s: donated argument %d is passed twice", e.name, i)
		}
	}
	outs, err := e.execute(ctx, args, donate)
	for i, d := range donate {
		if d && args[i] != nil {
			args[i].dropDonated()
		}
	}
	return outs, err
}

// dropDonated frees what is left of a buffer given to an execution.
func (b *Buffer) dropDonated() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf != nil {
		_ = b.buf.Destroy()
		b.buf = nil
	}
}

func (e *Executable) execute(ctx context.Context, args []*Buffer, donate []bool) ([]*Buffer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: execute %s: %w", e.name, err)
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
	if e.paramsKnown && len(args) != len(e.params) {
		return nil, fmt.Errorf("pjrt: execute %s: got %d arguments, program wants %d", e.name, len(args), len(e.params))
	}

	raw := make([]*gopjrt.Buffer, len(args))
	locked := make([]*Buffer, 0, len(args))
	defer func() {
		for _, b := range locked {
			b.mu.RUnlock()
		}
	}()
	for i, b := range args {
		if err := e.checkExecuteArg(i, b); err != nil {
			return nil, err
		}
		// Lock each distinct buffer once: a second RLock of the same mutex
		// could deadlock against a waiting Close.
		if !slices.Contains(locked, b) {
			b.mu.RLock()
			locked = append(locked, b)
		}
		if b.buf == nil {
			return nil, fmt.Errorf("pjrt: execute %s: argument %d: %w", e.name, i, errClosed("execute", "buffer"))
		}
		raw[i] = b.buf
	}

	run := e.le.Execute(raw...)
	if donate == nil {
		run = run.DonateNone()
	} else {
		run = run.SetDonate(donate)
	}
	xouts, err := run.Done()
	if err != nil {
		return nil, fmt.Errorf("pjrt: execute %s: %w", e.name, err)
	}
	outs := make([]*Buffer, len(xouts))
	for i, xb := range xouts {
		if outs[i], err = wrapOutput(c, xb); err != nil {
			for _, xb := range xouts {
				_ = xb.Destroy()
			}
			return nil, fmt.Errorf("pjrt: execute %s: output %d: %w", e.name, i, err)
		}
	}
	return outs, nil
}

// checkExecuteArg checks argument i of an execution against the program.
func (e *Executable) checkExecuteArg(i int, b *Buffer) error {
	if b == nil {
		return fmt.Errorf("pjrt: execute %s: argument %d is nil", e.name, i)
	}
	if b.client != e.client {
		return fmt.Errorf("pjrt: execute %s: argument %d belongs to another client", e.name, i)
	}
	if e.paramsKnown {
		if p := e.params[i]; p.known && (p.dtype != b.dtype || !slices.Equal(p.shape, b.shape)) {
			return fmt.Errorf("pjrt: execute %s: argument %d is %s%s, program wants %s",
				e.name, i, b.dtype, tensor.ShapeString(b.shape), p)
		}
	}
	return nil
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
	err := e.le.Destroy()
	e.le = nil
	if err != nil {
		return fmt.Errorf("pjrt: close executable %s: %w", e.name, err)
	}
	return nil
}
