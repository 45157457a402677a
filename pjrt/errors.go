package pjrt

import (
	"errors"
	"strings"
)

// ErrClosed is wrapped by the errors returned when a closed Client, Buffer or
// Executable (or one whose Client was closed) is used.
var ErrClosed = errors.New("pjrt: closed")

// ErrPluginNotFound is wrapped by FindPlugin's error when no plugin is found.
var ErrPluginNotFound = errors.New("pjrt: plugin not found")

// closedError reads "pjrt: <op>: <what> is closed" and matches ErrClosed.
type closedError struct{ op, what string }

func (e *closedError) Error() string        { return "pjrt: " + e.op + ": " + e.what + " is closed" }
func (e *closedError) Is(target error) bool { return target == ErrClosed }

func errClosed(op, what string) error { return &closedError{op: op, what: what} }

// notFoundError lists the places FindPlugin looked in and matches
// ErrPluginNotFound.
type notFoundError struct {
	what   string
	looked []string
}

func (e *notFoundError) Error() string {
	var b strings.Builder
	b.WriteString("pjrt: no ")
	b.WriteString(e.what)
	b.WriteString(" found; looked in:")
	for _, l := range e.looked {
		b.WriteString("\n\t")
		b.WriteString(l)
	}
	b.WriteString("\nrun `make pjrt` to install the XLA CPU plugin, or give the plugin's path explicitly (or in $")
	b.WriteString(EnvPlugin)
	b.WriteString(")")
	return b.String()
}

func (e *notFoundError) Is(target error) bool { return target == ErrPluginNotFound }
