package serving

import (
	"errors"
	"time"

	"github.com/xserve/xserve/tensor"
)

// Sentinel errors of the package. The api packages map them to protocol
// status codes (HTTP 400/404/429/503, NATS error headers); every error the
// package returns wraps one of them and says what was wrong and what was
// expected.
var (
	// ErrModelNotFound: no model (or version) of that name in the repository.
	ErrModelNotFound = errors.New("serving: model not found")
	// ErrNotReady: the model exists but is loading, unloading or failed to load.
	ErrNotReady = errors.New("serving: model not ready")
	// ErrInvalidInput: a request input is missing, unknown, or has the wrong
	// dtype or rank.
	ErrInvalidInput = errors.New("serving: invalid input")
	// ErrNoBucket: the request's shape fits no configured shape bucket; it is
	// rejected rather than compiled.
	ErrNoBucket = errors.New("serving: shape fits no bucket")
	// ErrOverloaded: the model's queue is full (see batching); retry later.
	ErrOverloaded = errors.New("serving: overloaded")
	// ErrClosed: the server is shutting down.
	ErrClosed = errors.New("serving: closed")
	// ErrSequence: a request names a sequence that is not active (never
	// started, ended, expired, or its state was lost), or a stateful model
	// got a request outside a sequence.
	ErrSequence = errors.New("serving: sequence")
)

// ModelState is a model version's lifecycle state, as the Open Inference
// Protocol's repository index reports it.
type ModelState string

// Model states.
const (
	StateLoading     ModelState = "LOADING"
	StateReady       ModelState = "READY"
	StateUnloading   ModelState = "UNLOADING"
	StateUnavailable ModelState = "UNAVAILABLE"
)

// ModelStatus describes one model version for the repository index.
type ModelStatus struct {
	Name    string
	Version int64
	State   ModelState
	// Reason explains UNAVAILABLE (the load error) and, on a READY version
	// whose changed model file or config failed to reload, says so (the
	// version serves what it loaded before; see the package doc).
	Reason string
	// Unloaded says an UNAVAILABLE version was unloaded (by the repository
	// API, or because it left the repository or the version policy), not
	// broken: strict readiness does not wait for it.
	Unloaded bool
}

// TensorSpec is one input or output of a model's signature. Shape uses -1
// for a symbolic dim; Dims keeps the symbols.
type TensorSpec struct {
	Name  string
	DType tensor.DType
	Shape []int64
	Dims  []string // "batch", "3", ... one per dim
}

// Metadata is a model version's signature and serving configuration.
type Metadata struct {
	Name     string
	Version  int64
	Versions []int64 // all versions of the model being served
	Platform string  // "onnx", "pt2" or "ensemble" (a pipeline)
	Inputs   []TensorSpec
	Outputs  []TensorSpec
	// Buckets maps each symbol to its bucket sizes.
	Buckets map[string][]int64
	// Symbols describes each served symbol, sorted by name.
	Symbols []SymbolInfo
	// Pipeline, for a pipeline, says how its steps are served: which share
	// one executable per bucket (fused) and which run as executions of
	// their own. nil for a model.
	Pipeline *PipelineInfo
	// Stateful says the model keeps its sequences' state between requests
	// (requests carry a sequence id: SequenceStep).
	Stateful bool
	// MemoryBytes is the device memory the version takes, all its devices
	// together, as the memory budget counts it: its weights (an
	// encoder-decoder's encoder included), or its model files while larger.
	MemoryBytes int64
}

// SymbolInfo is one served symbol of a model version: its role, buckets,
// the sizes the model allows, and how requests' sizes map to executables.
type SymbolInfo struct {
	Name string
	// Role is "batch" (requests stack along it) or "dynamic".
	Role string
	// ModelSymbols are the model file's names for it (e.g. "s43").
	ModelSymbols []string
	Buckets      []int64
	// Min and Max bound the sizes the model allows (Max -1: no bound).
	Min, Max int64
	// Pad is "pad" (padded up to the smallest bucket that holds the request)
	// or "exact" (one executable per distinct size); PadReason says why.
	Pad       string
	PadReason string
}

// InferRequest is one inference call.
type InferRequest struct {
	// ID is the client's request id, echoed in the response.
	ID string
	// Inputs by name; every model input must be given.
	Inputs map[string]*tensor.Tensor
	// Outputs restricts the response to these names (nil = all).
	Outputs []string
	// Priority for the batcher (0 = highest).
	Priority int
	// Sequence, for a stateful model, is the step of a sequence this
	// request is: the server keeps the model's state between the steps
	// (nil: a stateless request, every input given).
	Sequence *SequenceStep
}

// NamedTensor is a tensor with its name.
type NamedTensor struct {
	Name   string
	Tensor *tensor.Tensor
}

// InferResponse is the result of an InferRequest.
type InferResponse struct {
	ID           string
	ModelName    string
	ModelVersion int64
	// Outputs in the model's output order (filtered by InferRequest.Outputs).
	Outputs []NamedTensor
	// Bucket names the shape bucket that ran, e.g. "batch=4,sequence=128";
	// an execution split across cores adds its shards' buckets:
	// "batch=4 split batch=2+batch=2" (serving/rowsplit.go).
	Bucket string
	// QueueTime is the time spent waiting for a batch; ComputeTime the
	// execution (upload, execute, download).
	QueueTime, ComputeTime time.Duration
}
