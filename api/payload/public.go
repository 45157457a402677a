package payload

import (
	"path/filepath"
	"regexp"
	"strings"
)

// Rooted is implemented by a backend that serves models from a directory
// (*serving.Manager): PublicMessage makes paths under RepositoryRoot
// relative to it.
type Rooted interface {
	// RepositoryRoot is the absolute path of the model repository.
	RepositoryRoot() string
}

// RootOf returns backend's repository root, "" when it has none.
func RootOf(backend any) string {
	if r, ok := backend.(Rooted); ok {
		return r.RepositoryRoot()
	}
	return ""
}

var (
	// absPath matches an absolute path at the start of a message or after a
	// space, quote, parenthesis or '='.
	absPath = regexp.MustCompile(`(^|[\s"'(=\[])(/[^\s"'()\[\],;:]+)`)
	// pkgPrefix matches the "package: " prefix of this module's errors at
	// the start of a message or of a wrapped part of it.
	pkgPrefix = regexp.MustCompile(`(^|: |\()(?:httpapi|natsapi|payload|serving|batching|modelrepo|importer|onnx|fx|fxgraph|lower|stablehlo|pjrt|tensor): `)
)

// PublicMessage returns an error message as an unauthenticated client may
// see it: paths under root are made relative to it (a model file reads
// "resnet/1/model.onnx"), other absolute paths are cut to their last
// element, and this module's package prefixes ("serving: ", "payload: ")
// are dropped. The server logs the full message.
func PublicMessage(msg, root string) string {
	if root != "" {
		root = filepath.Clean(root)
		msg = strings.ReplaceAll(msg, root+string(filepath.Separator), "")
	}
	msg = absPath.ReplaceAllStringFunc(msg, func(m string) string {
		i := strings.IndexByte(m, '/')
		p := m[i:]
		if root != "" && p == root {
			return m[:i] + "."
		}
		return m[:i] + filepath.Base(p)
	})
	for {
		out := pkgPrefix.ReplaceAllString(msg, "$1")
		if out == msg {
			return out
		}
		msg = out
	}
}
