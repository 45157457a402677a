package generate

import (
	"errors"
	"fmt"

	"github.com/xserve/xserve/modelrepo"
)

// Errors of the package; each matches with errors.Is.
var (
	// ErrConfig: the generate: section does not fit the model (an input or
	// output it names is missing, a role has the wrong rank or dtype, an
	// input has no role). It wraps modelrepo.ErrConfig.
	ErrConfig = fmt.Errorf("generate: %w", modelrepo.ErrConfig)
	// ErrInvalidRequest: a request the model cannot run (an empty prompt,
	// a prompt longer than the largest prefill bucket or than
	// max_seq_len, a token id outside the vocabulary, a bad sampling
	// parameter). Protocols answer it as a client error (HTTP 400).
	ErrInvalidRequest = errors.New("generate: invalid request")
	// ErrOverloaded: max_queue requests already wait for a slot (HTTP 429).
	ErrOverloaded = errors.New("generate: too many requests waiting for a slot")
	// ErrClosed: the model is shutting down (HTTP 503).
	ErrClosed = errors.New("generate: model is closed")
)
