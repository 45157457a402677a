package fx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/xserve/xserve/fxgraph"
)

// Sentinel errors. Every error the package returns wraps one of them (or an
// *os.PathError from ImportFile) and starts with "fx: ".
var (
	// ErrUnsupported is wrapped by errors about valid archives that use
	// something the importer does not handle: an operator the IR does not
	// know (the message names the nearest known targets), a dtype, a
	// higher-order op, a mutated buffer, a schema version.
	ErrUnsupported = errors.New("fx: unsupported")
	// ErrFormat is wrapped by errors about archives that are not valid
	// torch.export .pt2 archives: not a zip, truncated or corrupt entries,
	// pickled layouts, JSON that does not follow the schema, tensors whose
	// bytes lie outside their storage, metadata that contradicts itself.
	ErrFormat = errors.New("fx: invalid archive")
)

// ImportFile reads the .pt2 archive at path (written by torch.export.save)
// and returns its program as a validated IR graph.
func ImportFile(path string) (*fxgraph.Graph, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fx: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fx: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrFormat, path)
	}
	g, err := Import(f, fi.Size())
	if err != nil {
		return nil, &fileError{path: path, err: err}
	}
	return g, nil
}

// fileError puts the file name into an import error.
type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string {
	return "fx: " + e.path + ": " + strings.TrimPrefix(e.err.Error(), "fx: ")
}

func (e *fileError) Unwrap() error { return e.err }

// Import reads a .pt2 archive of size bytes from r and returns its program as
// a validated IR graph: user inputs become placeholders (with their torch
// names), parameters, buffers and tensor constants become get_attr nodes,
// and every operator node becomes Core ATen IR nodes with Meta set by the
// IR's shape functions and checked against the archive's tensor metadata.
func Import(r io.ReaderAt, size int64) (g *fxgraph.Graph, err error) {
	defer func() {
		if p := recover(); p != nil {
			g = nil
			err = fmt.Errorf("%w: internal error while importing (please report): %v\n%s", ErrFormat, p, debug.Stack())
		}
	}()
	a, err := openArchive(r, size)
	if err != nil {
		return nil, err
	}
	b, err := newBuilder(a)
	if err != nil {
		return nil, err
	}
	return b.build()
}
