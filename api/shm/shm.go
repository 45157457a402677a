// Package shm is the registry of Triton's system shared-memory extension:
// clients on the server's host create a POSIX shared-memory object
// (shm_open, a file under /dev/shm), register a region of it under a name,
// and then bind inference inputs and outputs to that region by parameters
// (shared_memory_region, shared_memory_byte_size, shared_memory_offset)
// instead of sending tensor bytes over the wire.
//
// A Registry maps each region once, at registration, and serves every
// protocol (api/http and api/grpc share one). Reads and writes are bounds
// checked against the registered region, which is checked against the
// object's size when it is mapped: no request reads or writes outside it.
// Unregister and Close unmap; an access in flight holds the registry's
// read lock, so a region is never unmapped under it.
package shm

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// Dir is where POSIX shared-memory objects live on Linux: shm_open("/k")
// opens Dir/k. Keys name files in it and nowhere else.
const Dir = "/dev/shm"

// Defaults of Limits.
const (
	DefaultMaxRegions = 256
	DefaultMaxBytes   = 64 << 30
)

// ErrInvalid is wrapped by every error of a request the registry refuses:
// a bad key or name, an unknown region, an access outside a region, a
// limit reached.
var ErrInvalid = errors.New("shm: invalid shared-memory request")

// Limits bound what clients may register.
type Limits struct {
	// MaxRegions is the most regions registered at once (0: DefaultMaxRegions).
	MaxRegions int
	// MaxBytes bounds the sum of the registered regions' byte sizes (0:
	// DefaultMaxBytes).
	MaxBytes int64
	// Off refuses every registration: the extension is turned off.
	Off bool
}

// Region is a registered region as Triton's status calls report it.
type Region struct {
	Name     string
	Key      string
	Offset   int64
	ByteSize int64
}

// mapping is a registered region and the memory it is mapped to.
type mapping struct {
	Region
	mem  []byte // the whole mapping, from the page below Offset
	data []byte // the region: mem[Offset-pageStart:][:ByteSize]
}

// Registry holds the registered regions. It is safe for concurrent use.
type Registry struct {
	lim Limits

	mu      sync.RWMutex
	regions map[string]*mapping
	bytes   int64
	closed  bool
}

// New returns an empty registry with lim's limits.
func New(lim Limits) *Registry {
	if lim.MaxRegions <= 0 {
		lim.MaxRegions = DefaultMaxRegions
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	return &Registry{lim: lim, regions: map[string]*mapping{}}
}

// OrNew returns r, or a new registry with the default limits when r is
// nil; owned reports the latter: the caller closes it.
func OrNew(r *Registry) (reg *Registry, owned bool) {
	if r != nil {
		return r, false
	}
	return New(Limits{}), true
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// checkName validates a region name.
func checkName(name string) error {
	if name == "" || len(name) > 256 {
		return invalid("a region name must be 1 to 256 bytes, got %d", len(name))
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return invalid("region name %q has a control character", name)
		}
	}
	return nil
}

// objectPath returns the file of shared-memory key (shm_open's name: "/k"
// or "k"), refusing keys that would leave Dir.
func objectPath(key string) (string, error) {
	k := strings.TrimPrefix(key, "/")
	switch {
	case k == "" || len(k) > 255:
		return "", invalid("key %q: want a shm_open name such as \"/my_region\" (1 to 255 bytes)", key)
	case k == "." || k == ".." || strings.ContainsAny(k, "/\x00"):
		return "", invalid("key %q: a shared-memory key is one name (shm_open's), with no '/' but a leading one", key)
	}
	return Dir + "/" + k, nil
}

// Register maps byteSize bytes at offset of the shared-memory object key
// under name. The object must exist, be a regular file under Dir (not a
// link), and hold offset+byteSize bytes.
func (r *Registry) Register(name, key string, offset, byteSize int64) error {
	if err := checkName(name); err != nil {
		return err
	}
	path, err := objectPath(key)
	if err != nil {
		return fmt.Errorf("region %q: %w", name, err)
	}
	if offset < 0 || byteSize <= 0 || offset > (1<<62)-byteSize {
		return invalid("region %q: offset %d and byte_size %d: want offset >= 0 and byte_size > 0", name, offset, byteSize)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admitLocked(name, byteSize); err != nil {
		return err
	}
	m, err := mapObject(path, offset, byteSize)
	if err != nil {
		return fmt.Errorf("%w: region %q (key %q): %v", ErrInvalid, name, key, err)
	}
	m.Region = Region{Name: name, Key: key, Offset: offset, ByteSize: byteSize}
	r.regions[name] = m
	r.bytes += byteSize
	return nil
}

// admitLocked checks that name is free and the limits allow byteSize more.
func (r *Registry) admitLocked(name string, byteSize int64) error {
	switch {
	case r.lim.Off:
		return invalid("region %q: system shared memory is turned off on this server (--shared-memory-regions 0)", name)
	case r.closed:
		return invalid("region %q: the server is shutting down", name)
	case r.regions[name] != nil:
		return invalid("region %q is already registered; unregister it first", name)
	case len(r.regions) >= r.lim.MaxRegions:
		return invalid("region %q: %d regions are registered, the most allowed; unregister one first", name, len(r.regions))
	case byteSize > r.lim.MaxBytes-r.bytes:
		return invalid("region %q: byte_size %d would take the registered bytes past the limit of %d (%d registered)", name, byteSize, r.lim.MaxBytes, r.bytes)
	}
	return nil
}

// mapObject maps [offset, offset+byteSize) of the regular file at path.
func mapObject(path string, offset, byteSize int64) (*mapping, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a shared-memory object (%s)", path, st.Mode().Type())
	}
	if end := offset + byteSize; end > st.Size() {
		return nil, fmt.Errorf("offset %d + byte_size %d = %d is past the end of the object (%d bytes)", offset, byteSize, end, st.Size())
	}
	page := int64(os.Getpagesize())
	start := offset / page * page
	mem, err := syscall.Mmap(int(f.Fd()), start, int(offset+byteSize-start), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	d := mem[offset-start:]
	return &mapping{mem: mem, data: d[:byteSize:byteSize]}, nil
}

// Unregister unmaps region name; "" unregisters every region. Unknown
// names are an error, as in Triton.
func (r *Registry) Unregister(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" {
		return r.unmapAllLocked()
	}
	m := r.regions[name]
	if m == nil {
		return invalid("region %q is not registered", name)
	}
	delete(r.regions, name)
	r.bytes -= m.ByteSize
	return syscall.Munmap(m.mem)
}

func (r *Registry) unmapAllLocked() error {
	var errs []error
	for name, m := range r.regions {
		if err := syscall.Munmap(m.mem); err != nil {
			errs = append(errs, fmt.Errorf("region %q: %w", name, err))
		}
		delete(r.regions, name)
	}
	r.bytes = 0
	return errors.Join(errs...)
}

// Close unregisters every region and refuses new ones: the server is
// shutting down.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.unmapAllLocked()
}

// Status returns region name, or every region ("") sorted by name.
func (r *Registry) Status(name string) ([]Region, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if name != "" {
		m := r.regions[name]
		if m == nil {
			return nil, invalid("region %q is not registered", name)
		}
		return []Region{m.Region}, nil
	}
	out := make([]Region, 0, len(r.regions))
	for _, m := range r.regions {
		out = append(out, m.Region)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// sliceLocked returns size bytes at offset of region name.
func (r *Registry) sliceLocked(name string, offset, size int64) ([]byte, error) {
	m := r.regions[name]
	if m == nil {
		return nil, invalid("shared-memory region %q is not registered", name)
	}
	if offset < 0 || size < 0 || offset > m.ByteSize || size > m.ByteSize-offset {
		return nil, invalid("shared-memory region %q: shared_memory_offset %d + shared_memory_byte_size %d is outside the region's %d bytes", name, offset, size, m.ByteSize)
	}
	return m.data[offset : offset+size : offset+size], nil
}

// Check reports whether size bytes at offset lie inside region name.
func (r *Registry) Check(name string, offset, size int64) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, err := r.sliceLocked(name, offset, size)
	return err
}

// Read returns a copy of size bytes at offset of region name. The copy is
// the request's own: a request whose caller gave up (a timeout) may still
// be in a batch when its region is unregistered and unmapped.
func (r *Registry) Read(name string, offset, size int64) ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, err := r.sliceLocked(name, offset, size)
	if err != nil {
		return nil, err
	}
	return append(make([]byte, 0, len(b)), b...), nil
}

// Write copies data to offset of region name, where size bytes were
// given for it; data longer than size is an error naming both sizes.
func (r *Registry) Write(name string, offset, size int64, data []byte) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, err := r.sliceLocked(name, offset, size)
	if err != nil {
		return err
	}
	if int64(len(data)) > size {
		return invalid("shared-memory region %q: the output is %d bytes, shared_memory_byte_size is %d", name, len(data), size)
	}
	copy(b, data)
	return nil
}
