package payload

import (
	"errors"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The error vocabulary every transport (api/http, api/grpc, api/nats)
// answers with. An error that reaches a client is split in two: a status
// (Status, or the transport's own) and a public message, made by Public;
// the error itself, with its absolute paths and package prefixes, is the
// private cause that only the server's log gets. One function makes the
// message for all three protocols, so that they never disagree on what
// leaves the process.

// Rooted is implemented by a backend that serves models from a directory
// (*serving.Manager): Public makes paths under RepositoryRoot relative to
// it.
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

// PublicError is an error that says itself what a client may see of it:
// Msg is the public message, Cause the private one (logged, never sent).
type PublicError struct {
	Msg   string
	Cause error
}

// WithPublic wraps cause with the public message msg.
func WithPublic(cause error, msg string) error { return &PublicError{Msg: msg, Cause: cause} }

func (e *PublicError) Error() string {
	if e.Cause == nil {
		return e.Msg
	}
	return e.Msg + ": " + e.Cause.Error()
}

func (e *PublicError) Unwrap() error { return e.Cause }

// InternalMessage is the public message of every error answered 500 (or
// gRPC's INTERNAL, or a NATS 500): what failed inside the server is for its
// log, which has it under the request's id.
const InternalMessage = "internal error; the server's log has the cause under this request's id"

// Public is the message a client gets for err, answered with status code
// (an HTTP status; the gRPC and NATS transports map theirs to it):
//
//   - the Msg of the outermost *PublicError in err's chain, when it has one;
//   - InternalMessage for a 500;
//   - else err's message scrubbed (see PublicMessage).
//
// keep lists strings the client sent (the request's model name): they are
// left as they are wherever they appear.
func Public(err error, code int, root string, keep ...string) string {
	var pe *PublicError
	switch {
	case errors.As(err, &pe):
		return pe.Msg
	case code == http.StatusInternalServerError:
		return InternalMessage
	}
	return PublicMessage(err.Error(), root, keep...)
}

// packages lists the prefixes ("serving: ") that errors of this module's
// packages, and of the libraries they wrap, start with.
const packages = `httpapi|grpcapi|natsapi|payload|serving|engine|runner|batching|modelrepo|importer|onnx|fx|fxgraph|lower|stablehlo|hlo|pjrt|tensor|auth|triton|tracing|cpukernels|grpc|nats|jetstream|micro|proto|protowire|yaml|json|zip|gzip|flate|zstd`

var (
	// absPath matches an absolute path at the start of a message or after a
	// space, quote, parenthesis or '='.
	absPath = regexp.MustCompile(`(^|[\s"'(=\[])(/[^\s"'()\[\],;:]+)`)
	// pkgPrefix matches a "package: " prefix at the start of a message or of
	// a wrapped part of it.
	pkgPrefix = regexp.MustCompile(`(^|: |\()(?:` + packages + `): `)
	// pkgQualified matches a package-qualified Go name ("modelrepo.rawConfig"
	// in an encoding/json or yaml type error).
	pkgQualified = regexp.MustCompile(`\*?\b(?:` + packages + `)\.([A-Za-z_])`)
)

// PublicMessage returns an error message as an unauthenticated client may
// see it: paths under root are made relative to it (a model file reads
// "resnet/1/model.onnx"), other absolute paths are cut to their last
// element, and package prefixes ("serving: ", "payload: ") and qualifiers
// ("modelrepo.rawConfig") are dropped. The strings in keep (what the
// client sent: a model name) are not rewritten. The server logs the full
// message.
func PublicMessage(msg, root string, keep ...string) string {
	msg, restore := protect(msg, keep)
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
	msg = pkgQualified.ReplaceAllString(msg, "$1")
	for {
		out := pkgPrefix.ReplaceAllString(msg, "$1")
		if out == msg {
			break
		}
		msg = out
	}
	return restore(msg)
}

// protect replaces each string of keep in msg, quoted as %q quotes it,
// and bare when a rewrite could touch it (it holds a '/' or ':'), by a
// placeholder no rewrite touches, and returns the function that puts them
// back.
func protect(msg string, keep []string) (string, func(string) string) {
	var pairs []string
	for _, k := range keep {
		forms := []string{strconv.Quote(k)}
		if strings.ContainsAny(k, "/:") {
			forms = append(forms, k)
		}
		for _, f := range forms {
			if k == "" || !strings.Contains(msg, f) {
				continue
			}
			ph := "\x00" + strconv.Itoa(len(pairs)/2) + "\x00"
			msg = strings.ReplaceAll(msg, f, ph)
			pairs = append(pairs, ph, f)
		}
	}
	if pairs == nil {
		return msg, func(s string) string { return s }
	}
	return msg, strings.NewReplacer(pairs...).Replace
}
