package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// rowPrograms holds the small programs Concat and Split run, compiled once
// per (dtype, shapes, axis) and kept for the engine's life (the client
// frees them when it closes).
type rowPrograms struct {
	mu   sync.Mutex
	exes map[string]*pjrt.Executable
}

// Concat joins device buffers of one dtype along axis into one buffer, on
// the device: several sequences' states stacked for one batched execution.
// The inputs stay valid.
func (e *Engine) Concat(ctx context.Context, bufs []*pjrt.Buffer, axis int) (*pjrt.Buffer, error) {
	if len(bufs) == 0 {
		return nil, fmt.Errorf("engine: concat of no buffers")
	}
	types := make([]pjrt.Type, len(bufs))
	for i, b := range bufs {
		types[i] = b.Type()
	}
	key := fmt.Sprintf("concat %d %v", axis, types)
	exe, err := e.rowProgram(ctx, key, types, func(b *stablehlo.Block, xs []*stablehlo.Value) ([]*stablehlo.Value, error) {
		y, err := b.Concatenate(axis, xs...)
		return []*stablehlo.Value{y}, err
	})
	if err != nil {
		return nil, err
	}
	outs, err := exe.Execute(ctx, bufs, pjrt.ExecuteOptions{})
	if err != nil {
		return nil, fmt.Errorf("engine: concat: %w", err)
	}
	return outs[0], nil
}

// Split cuts a device buffer along axis into parts of the given sizes
// (summing to its size there), on the device. The input stays valid.
func (e *Engine) Split(ctx context.Context, buf *pjrt.Buffer, axis int, sizes []int64) ([]*pjrt.Buffer, error) {
	t := buf.Type()
	if axis < 0 || axis >= len(t.Shape) {
		return nil, fmt.Errorf("engine: split %s along axis %d", buf, axis)
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	if total != t.Shape[axis] {
		return nil, fmt.Errorf("engine: split %s along axis %d into %v: sizes sum to %d", buf, axis, sizes, total)
	}
	key := fmt.Sprintf("split %d %v %v", axis, sizes, t)
	exe, err := e.rowProgram(ctx, key, []pjrt.Type{t}, func(b *stablehlo.Block, xs []*stablehlo.Value) ([]*stablehlo.Value, error) {
		parts := make([]*stablehlo.Value, len(sizes))
		start, limit, strides := make([]int64, len(t.Shape)), append([]int64(nil), t.Shape...), make([]int64, len(t.Shape))
		for d := range strides {
			strides[d] = 1
		}
		for i, n := range sizes {
			limit[axis] = start[axis] + n
			p, err := b.Slice(xs[0], start, limit, strides)
			if err != nil {
				return nil, err
			}
			parts[i] = p
			start[axis] = limit[axis]
		}
		return parts, nil
	})
	if err != nil {
		return nil, err
	}
	outs, err := exe.Execute(ctx, []*pjrt.Buffer{buf}, pjrt.ExecuteOptions{})
	if err != nil {
		return nil, fmt.Errorf("engine: split: %w", err)
	}
	return outs, nil
}

// rowProgram returns the compiled program of key, building it with body
// (from parameters of the given types) on first use.
func (e *Engine) rowProgram(ctx context.Context, key string, types []pjrt.Type, body func(*stablehlo.Block, []*stablehlo.Value) ([]*stablehlo.Value, error)) (*pjrt.Executable, error) {
	e.rows.mu.Lock()
	defer e.rows.mu.Unlock()
	if exe := e.rows.exes[key]; exe != nil {
		return exe, nil
	}
	text, err := rowModule(types, body)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", key, err)
	}
	exe, err := e.client.Compile(ctx, text, types)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", key, err)
	}
	if e.rows.exes == nil {
		e.rows.exes = map[string]*pjrt.Executable{}
	}
	e.rows.exes[key] = exe
	return exe, nil
}

func rowModule(types []pjrt.Type, body func(*stablehlo.Block, []*stablehlo.Value) ([]*stablehlo.Value, error)) ([]byte, error) {
	m := stablehlo.NewModule("rows")
	params := make([]stablehlo.Param, len(types))
	for i, t := range types {
		el, err := lower.ElementType(t.DType)
		if err != nil {
			return nil, err
		}
		params[i] = stablehlo.Param{Type: stablehlo.TensorOf(el, t.Shape...)}
	}
	f, err := m.Func("main", params...)
	if err != nil {
		return nil, err
	}
	outs, err := body(f.Body(), f.Params())
	if err != nil {
		return nil, err
	}
	if err := f.Return(outs...); err != nil {
		return nil, err
	}
	return m.Text()
}

// Zeros returns a device buffer of zeros of the given dtype and shape.
func (e *Engine) Zeros(ctx context.Context, dt tensor.DType, shape ...int64) (*pjrt.Buffer, error) {
	return e.client.Upload(ctx, tensor.New(dt, shape...))
}
