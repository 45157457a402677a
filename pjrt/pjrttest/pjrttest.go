// Package pjrttest opens the real XLA CPU plugin for the tests of other
// packages: one client shared by a test binary's tests, or one of a
// test's own with options (several host devices). A missing plugin fails
// the test with what to run (`make pjrt`): tests never skip for it.
package pjrttest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/xserve/xserve/pjrt"
)

// Shared is one client of the CPU plugin that a test binary's tests
// share, opened on first use. Declare it as a package variable of the
// tests and close it from TestMain after the tests ran.
type Shared struct {
	// RepoRoot is the path from the test's package directory to the
	// repository root, where `make pjrt` installs the plugin.
	RepoRoot string

	once   sync.Once
	client *pjrt.Client
	err    error
}

// Client returns the shared client; a plugin that cannot be found or
// opened fails t.
func (s *Shared) Client(t testing.TB) *pjrt.Client {
	t.Helper()
	s.once.Do(func() {
		var path string
		if path, s.err = find(s.RepoRoot); s.err == nil {
			s.client, s.err = pjrt.Open(path)
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.client
}

// Close closes the shared client if it was opened.
func (s *Shared) Close() error {
	if s.client == nil {
		return nil
	}
	return s.client.Close()
}

// Open opens a client of the CPU plugin of t's own with opts (such as
// pjrt.OpenOptions{CPUDevices: 2}), closed when t ends.
func Open(t testing.TB, repoRoot string, opts pjrt.OpenOptions) *pjrt.Client {
	t.Helper()
	path, err := find(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pjrt.OpenWith(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func find(repoRoot string) (string, error) {
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: repoRoot})
	if err != nil {
		return "", fmt.Errorf("%w\n\nthese tests need the real XLA CPU plugin: run `make pjrt` first", err)
	}
	return path, nil
}
