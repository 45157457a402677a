package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Weights holds a model version's weights on the device, uploaded on first
// use and shared by all executables compiled for that version. Weights are
// keyed by name and content, so two buckets' programs share one buffer for
// the same tensor, while a constant that folding made differently for two
// buckets (same name, other values or shape) gets its own.
type Weights struct {
	client *pjrt.Client
	device int // where they are uploaded

	mu    sync.Mutex // guards bufs, bytes and sums
	bufs  map[string]*pjrt.Buffer
	bytes int64 // the host bytes of the tensors in bufs
	// sums caches each host tensor's content hash by identity: the model's
	// own weights are the same *tensor.Tensor in every bucket's program.
	sums map[*tensor.Tensor]string
}

// NewWeights returns an empty weight store on client's first device.
func NewWeights(c *pjrt.Client) *Weights { return NewWeightsOn(c, 0) }

// NewWeightsOn returns an empty weight store on device dev of client: the
// executions bound to these weights run there.
func NewWeightsOn(c *pjrt.Client, dev int) *Weights {
	return &Weights{client: c, device: dev, bufs: map[string]*pjrt.Buffer{}, sums: map[*tensor.Tensor]string{}}
}

// Device returns the index of the client's device the weights are on.
func (w *Weights) Device() int { return w.device }

// keyLocked returns the store key of weight parameter p.
func (w *Weights) keyLocked(p lower.Param) string {
	sum, ok := w.sums[p.Value]
	if !ok {
		h := sha256.Sum256(p.Value.Data)
		sum = hex.EncodeToString(h[:])
		w.sums[p.Value] = sum
	}
	return p.Name + "|" + p.Value.String() + "|" + fmt.Sprint(p.Perm) + "|" + sum
}

// Get returns the device buffer of weight parameter p, uploading it the first
// time.
func (w *Weights) Get(ctx context.Context, p lower.Param) (*pjrt.Buffer, error) {
	if p.Value == nil {
		return nil, fmt.Errorf("engine: weight %s has no value", p.Name)
	}
	if p.Value.DType != p.DType || tensor.ShapeString(lower.PermutedShape(p.Value.Shape, p.Perm)) != tensor.ShapeString(p.Shape) {
		return nil, fmt.Errorf("engine: weight %s holds %s (dims permuted by %v) but the program wants %s%v", p.Name, p.Value, p.Perm, p.DType, p.Shape)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	key := w.keyLocked(p)
	if b, ok := w.bufs[key]; ok {
		return b, nil
	}
	hv := p.HostValue()
	b, err := w.client.UploadTo(ctx, hv, w.device)
	if err != nil {
		return nil, fmt.Errorf("engine: upload weight %s: %w", p.Name, err)
	}
	w.bufs[key] = b
	w.bytes += int64(len(hv.Data))
	return b, nil
}

// Len returns the number of weights on the device.
func (w *Weights) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bufs)
}

// Bytes returns the size of the weights on the device (their host bytes:
// what a model's memory budget counts).
func (w *Weights) Bytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// Close frees every weight buffer. It is safe to call twice.
func (w *Weights) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first error
	for k, b := range w.bufs {
		if err := b.Close(); err != nil && first == nil {
			first = err
		}
		delete(w.bufs, k)
	}
	w.bytes = 0
	clear(w.sums)
	return first
}
