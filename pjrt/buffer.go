package pjrt

/*
#cgo CFLAGS: -I${SRCDIR}/internal/capi
#include "capi.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/xserve/xserve/tensor"
)

// Buffer is an array on the device of a Client: an uploaded tensor or an
// output of Execute. Its dtype and shape are fixed. A Buffer may be passed to
// any number of Execute calls, concurrently; an execution consumes it only
// when donated (ExecuteOptions.Donate).
type Buffer struct {
	client *Client
	dtype  tensor.DType
	shape  []int64
	nbytes int64
	// dev indexes the client's devices: where the buffer is.
	dev int

	// mu is held for reading while the buffer is in use and for writing by
	// Close and by an execution it is donated to.
	mu  sync.RWMutex
	buf *C.PJRT_Buffer // nil once closed or donated
	// donated says an execution consumed the buffer.
	donated bool
}

// zeroSize is handed to the plugin as the data of zero-size host tensors.
var zeroSize [8]byte

// Upload copies a host tensor to the client's first device. Every dtype XLA
// has is supported (bool, signed and unsigned ints, float16, bfloat16,
// float32, float64, complex64, complex128), as are scalars (empty shape) and
// zero-size tensors. t may be changed or reused as soon as Upload returns.
func (c *Client) Upload(ctx context.Context, t *tensor.Tensor) (*Buffer, error) {
	return c.UploadTo(ctx, t, 0)
}

// UploadTo is Upload to device dev (0 ≤ dev < Devices()). An execution
// whose device buffers are on dev runs there.
func (c *Client) UploadTo(ctx context.Context, t *tensor.Tensor, dev int) (*Buffer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pjrt: upload: %w", err)
	}
	if t == nil {
		return nil, errors.New("pjrt: upload: nil tensor")
	}
	bt, err := bufferType(t.DType)
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
	data := unsafe.Pointer(&zeroSize[0])
	if len(t.Data) > 0 {
		data = unsafe.Pointer(&t.Data[0])
	}
	var dims *C.int64_t
	if len(t.Shape) > 0 {
		dims = (*C.int64_t)(unsafe.Pointer(&t.Shape[0]))
	}

	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return nil, errClosed("upload", "client")
	}
	if dev < 0 || dev >= len(c.devices) {
		return nil, fmt.Errorf("pjrt: upload %s: no device %d (the client has %d)", t, dev, len(c.devices))
	}
	// xs_upload returns once the plugin has its own copy.
	var pb *C.PJRT_Buffer
	if perr := C.xs_upload(c.api, c.c, c.devices[dev], data, C.int32_t(bt), dims, C.size_t(len(t.Shape)), &pb); perr != nil {
		return nil, fmt.Errorf("pjrt: upload %s: %w", t, pluginError(c.api, perr))
	}
	c.toDevice.Add(1)
	return &Buffer{client: c, dtype: t.DType, shape: append([]int64{}, t.Shape...), nbytes: nbytes, buf: pb, dev: dev}, nil
}

// wrapOutput wraps an output buffer of an execution on device dev, reading
// its dtype and shape; the caller holds c.mu for reading.
func wrapOutput(c *Client, pb *C.PJRT_Buffer, dev int) (*Buffer, error) {
	var bt C.int32_t
	var dims *C.int64_t
	var rank C.size_t
	if perr := C.xs_buffer_shape(c.api, pb, &bt, &dims, &rank); perr != nil {
		return nil, pluginError(c.api, perr)
	}
	dt, err := dtypeOf(C.PJRT_Buffer_Type(bt))
	if err != nil {
		return nil, err
	}
	shape := make([]int64, int(rank))
	if rank > 0 {
		copy(shape, unsafe.Slice((*int64)(unsafe.Pointer(dims)), int(rank)))
	}
	return &Buffer{client: c, dtype: dt, shape: shape, nbytes: tensor.NumElements(shape) * int64(dt.Size()), buf: pb, dev: dev}, nil
}

// Device returns the index of the device the buffer's memory is on, as the
// plugin reports it (not as recorded when it was made).
func (b *Buffer) Device() (int, error) {
	c := b.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return 0, errClosed("device", "client")
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.liveLocked("device"); err != nil {
		return 0, err
	}
	var d *C.PJRT_Device
	if perr := C.xs_buffer_device(c.api, b.buf, &d); perr != nil {
		return 0, fmt.Errorf("pjrt: buffer device: %w", pluginError(c.api, perr))
	}
	for i, cd := range c.devices {
		if cd == d {
			return i, nil
		}
	}
	return 0, fmt.Errorf("pjrt: buffer %s is on a device the client does not address", b)
}

// DType returns the element type of the buffer.
func (b *Buffer) DType() tensor.DType { return b.dtype }

// Shape returns a copy of the buffer's dimensions (empty for a scalar).
func (b *Buffer) Shape() []int64 { return append([]int64{}, b.shape...) }

// Type returns the buffer's dtype and shape.
func (b *Buffer) Type() Type { return Type{DType: b.dtype, Shape: b.Shape()} }

// String describes the buffer, e.g. "pjrt buffer float32[2,3]".
func (b *Buffer) String() string {
	s := "pjrt buffer " + b.dtype.String() + tensor.ShapeString(b.shape)
	b.mu.RLock()
	defer b.mu.RUnlock()
	switch {
	case b.donated:
		s += " (donated)"
	case b.buf == nil:
		s += " (closed)"
	}
	return s
}

// liveLocked returns an error when b cannot be used: closed or donated. The
// caller holds b.mu.
func (b *Buffer) liveLocked(op string) error {
	switch {
	case b.donated:
		return fmt.Errorf("pjrt: %s: buffer was donated to an execution: %w", op, ErrClosed)
	case b.buf == nil:
		return errClosed(op, "buffer")
	}
	return nil
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
	if err := b.liveLocked("buffer to host"); err != nil {
		return nil, err
	}
	t := &tensor.Tensor{DType: b.dtype, Shape: b.Shape(), Data: make([]byte, b.nbytes)}
	if b.nbytes > 0 {
		perr := C.xs_to_host(c.api, b.buf, unsafe.Pointer(&t.Data[0]), C.size_t(b.nbytes), C.size_t(len(b.shape)))
		if perr != nil {
			return nil, fmt.Errorf("pjrt: buffer %s to host: %w", t, pluginError(c.api, perr))
		}
	}
	c.toHost.Add(1)
	return t, nil
}

// devicePointer returns the address of the buffer's device memory: tests
// see with it where an execution put its output.
func (b *Buffer) devicePointer() (uintptr, error) {
	c := b.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if c.c == nil {
		return 0, errClosed("device pointer", "client")
	}
	if err := b.liveLocked("device pointer"); err != nil {
		return 0, err
	}
	var p unsafe.Pointer
	if perr := C.xs_buffer_pointer(c.api, b.buf, &p); perr != nil {
		return 0, pluginError(c.api, perr)
	}
	return uintptr(p), nil
}

// Close frees the device memory of the buffer. It waits for in-flight
// operations using the buffer; calling it again, or on a donated buffer, is
// a no-op.
func (b *Buffer) Close() error {
	c := b.client
	c.mu.RLock()
	defer c.mu.RUnlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := b.buf
	b.buf = nil
	if pb == nil || c.c == nil {
		return nil // a closed client took its buffers with it
	}
	a := C.PJRT_Buffer_Destroy_Args{buffer: pb}
	if perr := C.xs_PJRT_Buffer_Destroy(c.api, &a); perr != nil {
		return fmt.Errorf("pjrt: close buffer: %w", pluginError(c.api, perr))
	}
	return nil
}
