package engine

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestDirCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := OpenDirCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("ab", 32) + ".stablehlo"
	if _, ok, err := c.Get(key); ok || err != nil {
		t.Fatalf("Get on an empty cache: %v %v", ok, err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Put(key, bytes.Repeat([]byte{byte('a' + i)}, 1<<16)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	data, ok, err := c.Get(key)
	if !ok || err != nil || len(data) != 1<<16 || bytes.Count(data, data[:1]) != len(data) {
		t.Fatalf("Get after concurrent Puts: ok %v err %v, %d bytes (a torn write?)", ok, err, len(data))
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("cache directory holds %d files, want 1 (temporary files left?)", len(ents))
	}
	// A one-byte change: reported as corrupt, deleted, then a plain miss.
	p := filepath.Join(dir, key)
	raw, _ := os.ReadFile(p)
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Get(key); ok || !errors.Is(err, ErrCorruptEntry) {
		t.Errorf("Get of a changed entry: ok %v, err %v; want ErrCorruptEntry", ok, err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("corrupt entry not deleted: %v", err)
	}
	if _, ok, err := c.Get(key); ok || err != nil {
		t.Errorf("Get after the corrupt entry was deleted: %v %v", ok, err)
	}
	if err := c.Delete(key); err != nil {
		t.Errorf("Delete of a missing entry: %v", err)
	}
	for _, bad := range []string{"../x.pjrt", "ab.pjrt", strings.Repeat("ab", 32) + ".so", strings.Repeat("AB", 32) + ".pjrt"} {
		if err := c.Put(bad, nil); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
		if _, _, err := c.Get(bad); err == nil {
			t.Errorf("Get(%q) accepted", bad)
		}
	}
}

func TestUnsupportedSerializationIsLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lines := func(parts ...string) (n int) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if l != "" && !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
				n++
			}
		}
		return n
	}
	e := &Engine{}
	for range 3 {
		e.unsupported(log, fmt.Errorf("pjrt: serialize executable: %w", errors.ErrUnsupported), "compile cache: cannot serialize executables; caching StableHLO only")
	}
	e.unsupported(log, errors.New("disk on fire"), "compile cache: cannot serialize executables; caching StableHLO only")
	if n := lines("level=DEBUG", "cannot serialize executables"); n != 1 {
		t.Errorf("%d debug lines, want 1\n%s", n, logs.String())
	}
	if n := lines("level=WARN", "failed to serialize executables", "disk on fire"); n != 1 {
		t.Errorf("%d warning lines, want 1\n%s", n, logs.String())
	}
}
