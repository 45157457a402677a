package pjrt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	gopjrt "github.com/gomlx/go-xla/pkg/pjrt"

	"github.com/xserve/xserve/tensor"
)

// Buffer is an array on the device of a Client: an uploaded tensor or an
// output of Execute. Its dtype and shape are fixed. A Buffer may be passed to
// any number of Execute calls, concurrently; execution never consumes it.
type Buffer struct {
	client *Client
	dtype  tensor.DType
	shape  []int64
	nbytes int64

	// mu is held for reading while the buffer is in use and for writing by
	// Close.
	mu  sync.RWMutex
	buf *gopjrt.Buffer // nil once closed
	// cHandle caches buf's PJRT_Buffer for RunHost (hostrun.go).
	cHandle bufferHandle
}

// Upload copies a host tensor to the client's (first) device. Every dtype XLA
// has is supported (bool, signed and unsigned ints, float16, bfloat16,
// float32, float64, complex64, complex128), as are scalars (empty shape) and
// zero-size tensors. t may be changed or reused as soon as Upload returns.
func (c *Client) Upload(ctx context.Context, t *tensor.Tensor) (*Buffer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: upload: %w", err)
	}
	if t == nil {
		return nil, errors.New("pjrt: upload: nil tensor")
	}
	xdt, err := DTypeToXLA(t.DType)
	if err != nil {
		return nil, fmt.Errorf("pjrt: upload %s: %w", t, err)
	}
	n := tensor.NumElements(t.Shape)
	if n < 0 {
		return nil, fmt.Errorf("pjrt: upload: invalid shape %v", t.Shape)
	}
	nbytes := n * int64(t.DType.Size())
	if int64(len(t.Data)) != nbytes {
		return nil, fmt.Errorf("pjrt: upload %s: needs %d bytes of data, got %d", t, nbytes, len(t.Data))
	}
	dims := make([]int, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = int(d)
	}
	data := t.Data
	if len(data) == 0 {
		// Zero-size tensor: hand the plugin a valid (non-nil) pointer anyway.
		data = make([]byte, 0, 8)
	}

	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("upload", "client")
	}
	// The default host-buffer semantics (ImmutableUntilTransferCompletes) and
	// Done's wait mean the plugin has its own copy when this returns.
	xb, h, err := uploadCaptured(c.c, data, xdt, dims)
	if err != nil {
		return nil, fmt.Errorf("pjrt: upload %s: %w", t, err)
	}
	b := &Buffer{
		client: c,
		dtype:  t.DType,
		shape:  append([]int64{}, t.Shape...),
		nbytes: nbytes,
		buf:    xb,
	}
	if h != nil {
		b.cHandle.Store(&cBuffer{h})
	}
	return b, nil
}

// wrapOutput wraps an output buffer of an execution, reading its dtype and
// shape (which also caches them inside go-xla's Buffer before it is shared).
func wrapOutput(c *Client, xb *gopjrt.Buffer) (*Buffer, error) {
	xdt, err := xb.DType()
	if err != nil {
		return nil, err
	}
	dt, err := DTypeFromXLA(xdt)
	if err != nil {
		return nil, err
	}
	dims, err := xb.Dimensions()
	if err != nil {
		return nil, err
	}
	shape := make([]int64, len(dims))
	for i, d := range dims {
		shape[i] = int64(d)
	}
	return &Buffer{
		client: c,
		dtype:  dt,
		shape:  shape,
		nbytes: tensor.NumElements(shape) * int64(dt.Size()),
		buf:    xb,
	}, nil
}

// DType returns the element type of the buffer.
func (b *Buffer) DType() tensor.DType { return b.dtype }

// Shape returns a copy of the buffer's dimensions (empty for a scalar).
func (b *Buffer) Shape() []int64 { return append([]int64{}, b.shape...) }

// String describes the buffer, e.g. "pjrt buffer float32[2,3]".
func (b *Buffer) String() string {
	s := "pjrt buffer " + b.dtype.String() + tensor.ShapeString(b.shape)
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.buf == nil {
		s += " (closed)"
	}
	return s
}

// ToHost copies the buffer to a new host tensor.
func (b *Buffer) ToHost(ctx context.Context) (*tensor.Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: buffer to host: %w", err)
	}
	c := b.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("buffer to host", "client")
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.buf == nil {
		return nil, errClosed("buffer to host", "buffer")
	}
	t := &tensor.Tensor{DType: b.dtype, Shape: b.Shape(), Data: make([]byte, b.nbytes)}
	if b.nbytes > 0 {
		if err := b.buf.ToHost(t.Data); err != nil {
			return nil, fmt.Errorf("pjrt: buffer %s to host: %w", t, err)
		}
	}
	return t, nil
}

// Close frees the device memory of the buffer. It waits for in-flight
// operations using the buffer; calling it again is a no-op.
func (b *Buffer) Close() error {
	b.client.mu.RLock()
	defer b.client.mu.RUnlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return nil
	}
	// After Client.Close, go-xla knows the buffer went with the client and
	// only drops its reference.
	err := b.buf.Destroy()
	b.buf = nil
	if err != nil {
		return fmt.Errorf("pjrt: close buffer: %w", err)
	}
	return nil
}
