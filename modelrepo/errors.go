package modelrepo

import (
	"errors"
	"fmt"
	"strings"
)

// The sentinel errors of package modelrepo. Each error of this package wraps
// at most one of them (test with errors.Is) and adds the file, model or
// version involved to the message; ModelEntry.Err joins the errors of one
// model, so it may match several.
var (
	// ErrInvalidName: a model name (a directory in the repository, a name
	// given to Resolve, or the name key of config.yaml) does not match
	// ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$, or contains "..".
	ErrInvalidName = errors.New("modelrepo: invalid model name")

	// ErrNotFound: the repository root, a model directory or a version named
	// by a "specific" version policy does not exist.
	ErrNotFound = errors.New("modelrepo: not found")

	// ErrConfig: config.yaml is not valid YAML, has unknown or duplicate
	// keys, values of the wrong type or impossible values. Each problem is a
	// *ConfigError; a file with several problems gives them joined
	// (errors.Join), in the order of their lines.
	ErrConfig = errors.New("modelrepo: invalid config")

	// ErrLayout: the directory tree does not follow the repository layout: a
	// model directory holds a directory that is not a version number, a
	// version directory holds no model file or both model.onnx and model.pt2,
	// a model file is not a regular file, a symbolic link is broken, or the
	// model's format contradicts the platform in config.yaml. The root given
	// to Open not being a directory is also ErrLayout.
	ErrLayout = errors.New("modelrepo: bad repository layout")

	// ErrOutsideRoot: a symbolic link inside the repository resolves to a
	// place outside it. The message does not say where the link points, since
	// it may reach a client.
	ErrOutsideRoot = errors.New("modelrepo: path leaves the model repository")
)

// ConfigError is one problem in a config file. It matches ErrConfig under
// errors.Is.
type ConfigError struct {
	// File is the config file's path as given to ParseConfig or LoadConfig
	// ("" for a Config validated in memory).
	File string
	// Key is the path of the offending key, such as "buckets.batch",
	// "batching.max_queue_delay" or "inputs[1].dims[0]"; "" for the whole
	// file.
	Key string
	// Line is the 1-based line of the key in File, 0 when unknown.
	Line int
	// Reason says what is wrong and what was expected.
	Reason string
}

// Error reads "modelrepo: models/resnet/config.yaml: buckets.batch: sizes
// must be ascending and positive, got [4 2] (line 7)".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("modelrepo: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// Is reports whether target is ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }
