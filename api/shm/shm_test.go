package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// object creates a shared-memory object of size bytes under Dir, as
// shm_open and ftruncate do, and removes it when the test ends.
func object(t *testing.T, size int) string {
	t.Helper()
	key := fmt.Sprintf("/xserve-shm-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(Dir+key, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(Dir + key) })
	return key
}

func TestRegisterReadWrite(t *testing.T) {
	key := object(t, 10000)
	r := New(Limits{})
	defer r.Close()
	// An offset that is not page-aligned.
	if err := r.Register("in", key, 4100, 64); err != nil {
		t.Fatal(err)
	}
	b, err := r.Read("in", 8, 4)
	if err != nil || string(b) != string([]byte{4108 % 256, 4109 % 256, 4110 % 256, 4111 % 256}) {
		t.Fatalf("Read: %v %v", b, err)
	}
	if err := r.Write("in", 60, 4, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(Dir + key)
	if got := file[4160:4164]; string(got) != "\x01\x02\x03\x04" {
		t.Errorf("the object holds %v after Write, want 1 2 3 4", got)
	}
	st, err := r.Status("")
	if err != nil || len(st) != 1 || st[0] != (Region{Name: "in", Key: key, Offset: 4100, ByteSize: 64}) {
		t.Errorf("Status: %+v %v", st, err)
	}
}

func TestRefusals(t *testing.T) {
	key := object(t, 4096)
	link := filepath.Join(Dir, fmt.Sprintf("xserve-shm-test-link-%d", os.Getpid()))
	if err := os.Symlink("/etc/hostname", link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	r := New(Limits{MaxRegions: 2, MaxBytes: 3000})
	defer r.Close()
	if err := r.Register("a", key, 0, 1000); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, region, key string
		offset, size      int64
		want              string
	}{
		{"dot-dot", "b", "/../etc/passwd", 0, 8, "one name"},
		{"nested", "b", "/a/b", 0, 8, "one name"},
		{"dot-dot alone", "b", "..", 0, 8, "one name"},
		{"empty key", "b", "", 0, 8, "shm_open name"},
		{"link", "b", "/" + filepath.Base(link), 0, 8, "too many levels of symbolic links"},
		{"missing", "b", "/xserve-no-such-object", 0, 8, "no such file"},
		{"past the end", "b", key, 4000, 200, "past the end of the object (4096 bytes)"},
		{"zero size", "b", key, 0, 0, "byte_size > 0"},
		{"negative offset", "b", key, -1, 8, "offset >= 0"},
		{"taken name", "a", key, 0, 8, `region "a" is already registered`},
		{"byte limit", "b", key, 0, 2001, "past the limit of 3000"},
		{"empty name", "", key, 0, 8, "region name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Register(tc.region, tc.key, tc.offset, tc.size)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register: %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
	if err := r.Register("b", key, 0, 8); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("c", key, 0, 8); err == nil || !strings.Contains(err.Error(), "2 regions are registered") {
		t.Errorf("third region: %v", err)
	}
	for _, tc := range []struct {
		region       string
		offset, size int64
		want         string
	}{
		{"a", 999, 2, "outside the region's 1000 bytes"},
		{"a", -1, 2, "outside"},
		{"a", 1001, 0, "outside"},
		{"zzz", 0, 1, `region "zzz" is not registered`},
	} {
		if _, err := r.Read(tc.region, tc.offset, tc.size); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Read(%q, %d, %d): %v, want %q", tc.region, tc.offset, tc.size, err, tc.want)
		}
	}
	if err := r.Write("a", 0, 4, make([]byte, 5)); err == nil || !strings.Contains(err.Error(), "the output is 5 bytes, shared_memory_byte_size is 4") {
		t.Errorf("Write past its size: %v", err)
	}
}

func TestUnregisterAndClose(t *testing.T) {
	key := object(t, 4096)
	r := New(Limits{})
	for _, n := range []string{"a", "b", "c"} {
		if err := r.Register(n, key, 0, 16); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Unregister("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Unregister("a"); err == nil {
		t.Error("unregistering a region twice succeeded")
	}
	if _, err := r.Read("a", 0, 1); err == nil {
		t.Error("an unregistered region was read")
	}
	if err := r.Unregister(""); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(""); len(st) != 0 {
		t.Errorf("after unregistering all: %v", st)
	}
	if err := r.Register("d", key, 0, 16); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(""); len(st) != 0 {
		t.Errorf("Close left %v", st)
	}
	if err := r.Register("e", key, 0, 16); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("Register after Close: %v", err)
	}
}

func TestOff(t *testing.T) {
	key := object(t, 4096)
	r := New(Limits{Off: true})
	defer r.Close()
	if err := r.Register("a", key, 0, 8); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "turned off") {
		t.Errorf("Register with the extension off: %v", err)
	}
}
