package serving

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

	mu   sync.Mutex // guards bufs and sums
	bufs map[string]*pjrt.Buffer
	// sums caches each host tensor's content hash by identity: the model's
	// own weights are the same *tensor.Tensor in every bucket's program.
	sums map[*tensor.Tensor]string
}

// NewWeights returns an empty weight store on client.
func NewWeights(c *pjrt.Client) *Weights {
	return &Weights{client: c, bufs: map[string]*pjrt.Buffer{}, sums: map[*tensor.Tensor]string{}}
}

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
		return nil, fmt.Errorf("serving: weight %s has no value", p.Name)
	}
	if p.Value.DType != p.DType || tensor.ShapeString(lower.PermutedShape(p.Value.Shape, p.Perm)) != tensor.ShapeString(p.Shape) {
		return nil, fmt.Errorf("serving: weight %s holds %s (dims permuted by %v) but the program wants %s%v", p.Name, p.Value, p.Perm, p.DType, p.Shape)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	key := w.keyLocked(p)
	if b, ok := w.bufs[key]; ok {
		return b, nil
	}
	b, err := w.client.Upload(ctx, p.HostValue())
	if err != nil {
		return nil, fmt.Errorf("serving: upload weight %s: %w", p.Name, err)
	}
	w.bufs[key] = b
	return b, nil
}

// Len returns the number of weights on the device.
func (w *Weights) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bufs)
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
	clear(w.sums)
	return first
}

// Executable is a compiled program bound to its weights on the device.
// Run is safe for concurrent use.
type Executable struct {
	Program *lower.Program
	exe     *pjrt.Executable
	client  *pjrt.Client
	// args holds the weight buffers at their parameter positions; input
	// positions are nil and filled per call.
	args []*pjrt.Buffer
}

// Compile compiles prog on c and binds its weight parameters from w
// (uploading those not yet on the device).
func Compile(ctx context.Context, c *pjrt.Client, prog *lower.Program, w *Weights) (*Executable, error) {
	exe, err := c.Compile(ctx, prog.Module)
	if err != nil {
		return nil, fmt.Errorf("serving: compile: %w", err)
	}
	return bind(ctx, c, exe, prog, w)
}

// bind makes an Executable of exe, compiled from prog (or deserialized from
// a cache), binding its weight parameters from w. It closes exe on failure.
func bind(ctx context.Context, c *pjrt.Client, exe *pjrt.Executable, prog *lower.Program, w *Weights) (*Executable, error) {
	e := &Executable{Program: prog, exe: exe, client: c, args: make([]*pjrt.Buffer, len(prog.Params))}
	for i, p := range prog.Params {
		if p.Kind != lower.Weight {
			continue
		}
		b, err := w.Get(ctx, p)
		if err != nil {
			exe.Close()
			return nil, err
		}
		e.args[i] = b
	}
	return e, nil
}

// Run executes on inputs (in the order of the program's input parameters)
// and returns the outputs copied to the host. Inputs whose dtype differs
// from the parameter's only by int64 narrowing are converted. The inputs go
// to the device for this call only (pjrt.Executable.RunHost), read in place
// where the plugin can.
func (e *Executable) Run(ctx context.Context, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	hosts, err := e.hostArgs(inputs)
	if err != nil {
		return nil, err
	}
	outs, err := e.exe.RunHost(ctx, e.args, hosts)
	if err != nil {
		return nil, err
	}
	// A guard result says the run reached a part of the model that could
	// not be built: an error, never the stand-in's result.
	return e.Program.CheckGuards(outs)
}

// hostRun is the execution Run makes, for pjrt.Client.RunHostAll; its
// outputs still need Program.CheckGuards.
func (e *Executable) hostRun(inputs []*tensor.Tensor) (pjrt.HostRun, error) {
	hosts, err := e.hostArgs(inputs)
	if err != nil {
		return pjrt.HostRun{}, err
	}
	return pjrt.HostRun{Exe: e.exe, Bufs: e.args, Hosts: hosts}, nil
}

// hostArgs places inputs at the program's input parameters (nil at its
// weights, which e.args holds), converting int64 narrowing as Run says.
func (e *Executable) hostArgs(inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	hosts := make([]*tensor.Tensor, len(e.args))
	in := 0
	for i, p := range e.Program.Params {
		if p.Kind != lower.Input {
			continue
		}
		if in >= len(inputs) {
			return nil, fmt.Errorf("serving: got %d inputs, the program takes more", len(inputs))
		}
		t := inputs[in]
		in++
		if t.DType != p.DType {
			t = t.Convert(p.DType)
		}
		hosts[i] = t
	}
	if in != len(inputs) {
		return nil, fmt.Errorf("serving: got %d inputs, the program takes %d", len(inputs), in)
	}
	return hosts, nil
}

// Serialize returns the compiled executable in the plugin's format (see
// pjrt.Executable.Serialize); the error wraps errors.ErrUnsupported where
// the plugin binding cannot serialize.
func (e *Executable) Serialize() ([]byte, error) { return e.exe.Serialize() }

// Close frees the compiled executable (not the shared weights).
func (e *Executable) Close() error { return e.exe.Close() }
