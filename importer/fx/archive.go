package fx

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// Limits on what an archive may make the importer read or allocate. A
// hostile or corrupt archive gets an error before it exceeds them.
const (
	// maxModelJSON bounds models/<name>.json (the serialized program).
	maxModelJSON = 256 << 20
	// maxConfigJSON bounds the weights and constants configs.
	maxConfigJSON = 64 << 20
	// maxSmallFile bounds archive_format, archive_version and byteorder.
	maxSmallFile = 64
	// maxEntries bounds the number of entries in the zip directory.
	maxEntries = 1 << 20
	// maxDeflateRatio is the largest expansion DEFLATE can achieve (about
	// 1032:1); a compressed entry claiming more is corrupt.
	maxDeflateRatio = 1100
	// materializeBase and materializeFactor bound the bytes of the tensors
	// built from storages: base + factor × the storage bytes read. Views may
	// be larger than their storage (an expanded buffer), but not unboundedly.
	materializeBase   = 256 << 20
	materializeFactor = 16
)

// Names inside the archive root, as torch/csrc/export/pt2_archive_constants.h
// defines them.
const (
	archiveFormatPath  = "archive_format"
	archiveFormatValue = "pt2"
	archiveVersionPath = "archive_version"
	byteorderPath      = "byteorder"
	modelsDir          = "models/"
	weightsDir         = "data/weights/"
	constantsDir       = "data/constants/"
	weightsConfigFmt   = "data/weights/%s_weights_config.json"
	constantsConfigFmt = "data/constants/%s_constants_config.json"
)

// pickledHint is the advice for archives whose tensors are pickled.
const pickledHint = "pickled state dicts are not supported; re-export with torch.export.save (torch >= 2.9)"

// archive is an opened .pt2 zip: its entries by name relative to the root
// folder, and the storages read so far.
type archive struct {
	size    int64  // of the whole zip
	root    string // "name/" of the root folder, or "" for a rootless archive
	files   map[string]*zip.File
	storage map[string][]byte // by entry name, read once and shared
	// storageBytes is the total size of the storages read; materialized
	// counts the bytes of tensors built from them.
	storageBytes, materialized int64
}

// openArchive reads the zip directory of r, finds the root folder and checks
// the archive format, version and byte order.
func openArchive(r io.ReaderAt, size int64) (*archive, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative archive size %d", ErrFormat, size)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: not a zip archive: %v", ErrFormat, err)
	}
	if len(zr.File) > maxEntries {
		return nil, fmt.Errorf("%w: %d zip entries (limit %d)", ErrFormat, len(zr.File), maxEntries)
	}
	all := map[string]*zip.File{}
	for _, f := range zr.File {
		if _, dup := all[f.Name]; dup {
			return nil, fmt.Errorf("%w: zip entry %q appears twice", ErrFormat, f.Name)
		}
		all[f.Name] = f
	}
	if err := checkPickled(all); err != nil {
		return nil, err
	}
	root, err := findRoot(all)
	if err != nil {
		return nil, err
	}
	a := &archive{size: size, root: root, files: map[string]*zip.File{}, storage: map[string][]byte{}}
	for name, f := range all {
		if strings.HasPrefix(name, root) {
			a.files[strings.TrimPrefix(name, root)] = f
		}
	}
	format, err := a.readSmall(archiveFormatPath)
	if err != nil {
		return nil, err
	}
	if format != archiveFormatValue {
		return nil, fmt.Errorf("%w: %s says %q, want %q (%s)", ErrFormat, a.entry(archiveFormatPath), format, archiveFormatValue, pickledHint)
	}
	if _, ok := a.files[archiveVersionPath]; ok {
		v, err := a.readSmall(archiveVersionPath)
		if err != nil {
			return nil, err
		}
		if v != "0" {
			return nil, fmt.Errorf("%w: %s is %q; this importer reads archive version 0", ErrUnsupported, a.entry(archiveVersionPath), v)
		}
	}
	if _, ok := a.files[byteorderPath]; ok {
		bo, err := a.readSmall(byteorderPath)
		if err != nil {
			return nil, err
		}
		if bo != "little" {
			return nil, fmt.Errorf("%w: %s is %q; only little-endian archives are supported", ErrUnsupported, a.entry(byteorderPath), bo)
		}
	}
	return a, nil
}

// checkPickled rejects the layouts that keep tensors in pickles: torch.save
// files (a zip holding data.pkl) and torch.export.save before torch 2.8
// (serialized_state_dict.pt next to serialized_exported_program.json).
func checkPickled(all map[string]*zip.File) error {
	for name := range all {
		base := path.Base(name)
		if base == "data.pkl" || base == "serialized_state_dict.pt" || base == "serialized_exported_program.json" {
			return fmt.Errorf("%w: the zip holds %s: %s", ErrFormat, name, pickledHint)
		}
	}
	return nil
}

// findRoot returns the folder holding archive_format: "" when it is at the
// top of the zip (archives written before torch 2.8's root folder), else
// "<name>/".
func findRoot(all map[string]*zip.File) (string, error) {
	var roots []string
	for name := range all {
		if name == archiveFormatPath {
			roots = append(roots, "")
			continue
		}
		dir, base := path.Split(name)
		if base == archiveFormatPath && strings.Count(dir, "/") == 1 {
			roots = append(roots, dir)
		}
	}
	sort.Strings(roots)
	switch len(roots) {
	case 0:
		return "", fmt.Errorf("%w: no archive_format entry: not a torch.export .pt2 archive (%s)", ErrFormat, pickledHint)
	case 1:
		return roots[0], nil
	}
	return "", fmt.Errorf("%w: several archive roots (%s)", ErrFormat, strings.Join(roots, ", "))
}

// entry returns the full zip name of an entry, for error messages.
func (a *archive) entry(name string) string { return a.root + name }

// has reports whether the archive holds name.
func (a *archive) has(name string) bool {
	_, ok := a.files[name]
	return ok
}

// read returns the contents of entry name, at most max bytes. The size the
// zip directory declares is checked before anything is allocated, and the
// bytes read must match it.
func (a *archive) read(name string, max int64) ([]byte, error) {
	f, ok := a.files[name]
	if !ok {
		return nil, fmt.Errorf("%w: the archive has no entry %s", ErrFormat, a.entry(name))
	}
	declared := f.UncompressedSize64
	if declared > uint64(max) {
		return nil, fmt.Errorf("%w: %s is %d bytes (limit %d)", ErrFormat, a.entry(name), declared, max)
	}
	switch f.Method {
	case zip.Store:
		if f.CompressedSize64 != declared {
			return nil, fmt.Errorf("%w: %s is stored with %d bytes but declares %d", ErrFormat, a.entry(name), f.CompressedSize64, declared)
		}
	case zip.Deflate:
		if declared/maxDeflateRatio > f.CompressedSize64+1 {
			return nil, fmt.Errorf("%w: %s claims %d bytes from %d compressed", ErrFormat, a.entry(name), declared, f.CompressedSize64)
		}
	default:
		return nil, fmt.Errorf("%w: %s uses zip compression method %d (want stored or deflate)", ErrUnsupported, a.entry(name), f.Method)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, a.entry(name), err)
	}
	defer rc.Close()
	var data []byte
	if off, err := f.DataOffset(); err == nil && f.Method == zip.Store && off >= 0 && declared <= uint64(a.size-min(off, a.size)) {
		// A stored entry's bytes are all in the file: read them in place.
		data = make([]byte, declared)
		if _, err := io.ReadFull(rc, data); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, a.entry(name), err)
		}
	} else {
		// Grow the buffer as bytes arrive: a wrong declared size costs no
		// more than the bytes actually there.
		var buf bytes.Buffer
		if declared <= 1<<20 {
			buf.Grow(int(declared))
		}
		if _, err := io.Copy(&buf, io.LimitReader(rc, int64(declared))); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, a.entry(name), err)
		}
		data = buf.Bytes()
	}
	if uint64(len(data)) != declared {
		return nil, fmt.Errorf("%w: %s holds %d bytes, its zip header says %d", ErrFormat, a.entry(name), len(data), declared)
	}
	// Reading past the end makes archive/zip check the CRC-32.
	var one [1]byte
	if n, err := rc.Read(one[:]); n != 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			err = errors.New("more bytes than its zip header says")
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, a.entry(name), err)
	}
	return data, nil
}

// readSmall reads a short text entry and trims surrounding white space.
func (a *archive) readSmall(name string) (string, error) {
	b, err := a.read(name, maxSmallFile)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readJSON decodes entry name into v.
func (a *archive) readJSON(name string, max int64, v any) error {
	b, err := a.read(name, max)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrFormat, a.entry(name), err)
	}
	return nil
}

// modelNames returns the names of the programs in models/ ("model" for a
// torch.export.save archive).
func (a *archive) modelNames() []string {
	var out []string
	for name := range a.files {
		rest, ok := strings.CutPrefix(name, modelsDir)
		if ok && strings.HasSuffix(rest, ".json") && !strings.Contains(rest, "/") {
			out = append(out, strings.TrimSuffix(rest, ".json"))
		}
	}
	sort.Strings(out)
	return out
}

// readStorage returns the bytes of a storage entry (data/weights/weight_0),
// reading it once however many tensors view it.
func (a *archive) readStorage(name string) ([]byte, error) {
	if b, ok := a.storage[name]; ok {
		return b, nil
	}
	f, ok := a.files[name]
	if !ok {
		return nil, fmt.Errorf("%w: the archive has no entry %s", ErrFormat, a.entry(name))
	}
	b, err := a.read(name, int64(min(f.UncompressedSize64, 1<<62)))
	if err != nil {
		return nil, err
	}
	a.storage[name] = b
	a.storageBytes += int64(len(b))
	return b, nil
}

// reserve counts n more bytes of materialized tensors against the limit.
func (a *archive) reserve(n int64, what string) error {
	limit := materializeBase + materializeFactor*a.storageBytes
	if n < 0 || n > limit-a.materialized {
		return fmt.Errorf("%w: %s needs %d bytes; the archive's tensors may take %d in all (its storages hold %d)",
			ErrFormat, what, n, limit, a.storageBytes)
	}
	a.materialized += n
	return nil
}
