package modelrepo

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxNameLen is the longest model name, in bytes.
const MaxNameLen = 128

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidateName checks a model name: it matches
// ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$ and contains no "..". The error wraps
// ErrInvalidName and says which rule the name breaks. Names from requests
// must pass it before they touch the file system (Resolve does).
func ValidateName(name string) error {
	var reason string
	switch {
	case name == "":
		reason = "is empty"
	case strings.ContainsAny(name, `/\`):
		reason = "must not contain a path separator"
	case strings.Contains(name, ".."):
		reason = `must not contain ".."`
	case len(name) > MaxNameLen:
		reason = fmt.Sprintf("is longer than %d bytes", MaxNameLen)
	case !nameRE.MatchString(name):
		reason = "must start with a letter or digit and hold only letters, digits, '_', '.' and '-'"
	default:
		return nil
	}
	return fmt.Errorf("%w %s: %s", ErrInvalidName, quoteShort(name), reason)
}

// quoteShort quotes s for a message, cut to 64 bytes: names may come from
// clients.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// Repository is a model repository on disk. Its methods other than Write
// (upload.go) only read the file system, and all are safe for concurrent use.
type Repository struct {
	root string // as given to Open, cleaned; prefixes every path we return
	abs  string // absolute root
}

// Open returns the repository rooted at root, which must exist and be a
// directory. Paths in Snapshots and errors start with root as given
// (cleaned), so a relative root gives relative paths.
func Open(root string) (*Repository, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: model repository path is empty", ErrNotFound)
	}
	root = filepath.Clean(root)
	fi, err := os.Stat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: model repository %s does not exist", ErrNotFound, root)
	}
	if err != nil {
		return nil, fmt.Errorf("modelrepo: open repository: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: model repository %s is not a directory", ErrLayout, root)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("modelrepo: open repository: %w", err)
	}
	r := &Repository{root: root, abs: abs}
	if _, err := r.scanner(); err != nil {
		return nil, err
	}
	return r, nil
}

// Root returns the repository's root directory as given to Open (cleaned).
func (r *Repository) Root() string { return r.root }

// String reads "modelrepo.Repository(models)".
func (r *Repository) String() string { return "modelrepo.Repository(" + r.root + ")" }

// Resolve returns the directory of the model called name, after checking the
// name with ValidateName (so "../etc", "/etc", "a/b" and "" are rejected with
// ErrInvalidName), that the directory exists (ErrNotFound) and that it does
// not lead outside the repository through a symbolic link (ErrOutsideRoot).
// It is meant for names taken from requests.
func (r *Repository) Resolve(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	dir := filepath.Join(r.root, name)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: model %q is not in the repository", ErrNotFound, name)
	}
	sc, err := r.scanner()
	if err != nil {
		return "", err
	}
	if err := sc.inside(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// scanner checks paths against the root as it resolves now: the root may be
// a symbolic link that a deployment swaps atomically.
type scanner struct {
	realRoot string // absolute, symlinks resolved
}

func (r *Repository) scanner() (*scanner, error) {
	real, err := filepath.EvalSymlinks(r.abs)
	if err != nil {
		return nil, fmt.Errorf("modelrepo: model repository %s: %w", r.root, err)
	}
	return &scanner{realRoot: real}, nil
}

// inside checks that path resolves (following every symbolic link) to a
// place inside the repository.
func (sc *scanner) inside(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if _, lerr := os.Lstat(path); lerr == nil && errors.Is(err, fs.ErrNotExist) {
			// Don't say where the link points: the message may reach a client.
			return fmt.Errorf("%w: %s is a broken symbolic link", ErrLayout, path)
		}
		return fmt.Errorf("modelrepo: %w", err)
	}
	if !filepath.IsAbs(real) {
		if real, err = filepath.Abs(real); err != nil {
			return fmt.Errorf("modelrepo: %s: %w", path, err)
		}
	}
	rel, err := filepath.Rel(sc.realRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("%w: %s is a symbolic link to a place outside the repository", ErrOutsideRoot, path)
	}
	return nil
}

// Snapshot is the state of a repository at one Scan.
type Snapshot struct {
	// Root is the repository's root as given to Open.
	Root string
	// Models lists every model directory, sorted by name, including those
	// in error.
	Models []ModelEntry
}

// Model returns the entry of the model called name.
func (s *Snapshot) Model(name string) (*ModelEntry, bool) {
	if s == nil {
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(s.Models, name, func(m ModelEntry, n string) int { return strings.Compare(m.Name, n) })
	if !ok {
		return nil, false
	}
	return &s.Models[i], true
}

// ModelEntry is one model directory of a Snapshot.
type ModelEntry struct {
	// Name is the directory's name.
	Name string
	// Dir is the model's directory (Root joined with Name).
	Dir string
	// Config is the parsed config.yaml, or DefaultConfig(Name) when there is
	// none. It is nil when config.yaml could not be read or is invalid (Err
	// then says why).
	Config *Config
	// Versions lists the valid versions, ascending; the broken ones are in
	// VersionErrors instead.
	Versions []VersionEntry
	// VersionErrors holds the problem of each broken version (no model file,
	// two model files, a symbolic link leaving the repository), and
	// ErrNotFound for a version that a "specific" policy names but the
	// repository lacks. It is nil when there are none.
	VersionErrors map[int64]error
	// Err is a problem with the model as a whole: an invalid name, an
	// invalid config.yaml, or a directory that is not a version number. A
	// model with Err set is reported, and Selected returns nothing for it;
	// the repository's other models are unaffected.
	Err error
}

// Selected returns the versions the model's version policy serves, among its
// valid Versions, ascending: latest: N takes the N highest, specific takes
// those listed that exist, all takes every one. It returns nil when Err is
// set. A broken newer version does not hide an older valid one: latest: 1
// with version 3 broken serves version 2.
func (m ModelEntry) Selected() []VersionEntry {
	if m.Err != nil || m.Config == nil {
		return nil
	}
	have := make([]int64, len(m.Versions))
	for i, v := range m.Versions {
		have[i] = v.Version
	}
	var out []VersionEntry
	for _, n := range m.Config.VersionPolicy.Select(have) {
		i := slices.IndexFunc(m.Versions, func(v VersionEntry) bool { return v.Version == n })
		out = append(out, m.Versions[i])
	}
	return out
}

// Version returns the valid version numbered v.
func (m ModelEntry) Version(v int64) (VersionEntry, bool) {
	for _, e := range m.Versions {
		if e.Version == v {
			return e, true
		}
	}
	return VersionEntry{}, false
}

// VersionEntry is one valid version of a model.
type VersionEntry struct {
	// Version is the version number (the directory's name).
	Version int64
	// Path is the model file, Dir/<version>/model.onnx or model.pt2.
	Path string
	// Format is FormatONNX or FormatPT2, from the file's name.
	Format string
	// ModTime is the model file's modification time.
	ModTime time.Time
	// Size is the model file's size in bytes.
	Size int64
	// Steps, for a pipeline's version (Format FormatEnsemble), are the
	// versions of the models its steps run, in step order (built-in steps
	// have none): a change to one of them changes the pipeline's version.
	Steps []VersionEntry
}

// Same reports whether e and o are the same model file, unchanged (and, for
// a pipeline, the same step model files, unchanged).
func (e VersionEntry) Same(o VersionEntry) bool {
	return e.Version == o.Version && e.Path == o.Path && e.Format == o.Format && e.Size == o.Size && e.ModTime.Equal(o.ModTime) &&
		slices.EqualFunc(e.Steps, o.Steps, VersionEntry.Same)
}

// Scan reads the repository. It fails only when the root itself cannot be
// read; a problem with one model or version is recorded on its entry.
// Entries whose names start with "." and plain files at the top level are
// ignored.
func (r *Repository) Scan() (*Snapshot, error) {
	sc, err := r.scanner()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(r.root)
	if err != nil {
		return nil, fmt.Errorf("modelrepo: scan %s: %w", r.root, err)
	}
	snap := &Snapshot{Root: r.root}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		dir := filepath.Join(r.root, name)
		if e.Type()&fs.ModeSymlink != 0 {
			if err := sc.inside(dir); err != nil {
				if !vanished(dir, err) {
					snap.Models = append(snap.Models, ModelEntry{Name: name, Dir: dir, Err: err})
				}
				continue
			}
			fi, err := os.Stat(dir)
			if err != nil || !fi.IsDir() {
				continue // a link to a plain file, like a plain file
			}
		} else if !e.IsDir() {
			continue
		}
		if err := ValidateName(name); err != nil {
			snap.Models = append(snap.Models, ModelEntry{Name: name, Dir: dir, Err: fmt.Errorf("%w (directory %s)", err, dir)})
			continue
		}
		if m, ok := sc.scanModel(name, dir); ok {
			snap.Models = append(snap.Models, m)
		}
	}
	// Models that vanished because the whole root did are not removed: the
	// scan fails instead, and Watch keeps its last good snapshot.
	if _, err := os.Stat(r.root); err != nil {
		return nil, fmt.Errorf("modelrepo: scan %s: %w", r.root, err)
	}
	// os.ReadDir sorts by name already; keep the order explicit.
	slices.SortFunc(snap.Models, func(a, b ModelEntry) int { return strings.Compare(a.Name, b.Name) })
	snap.linkPipelines()
	return snap, nil
}

// scanModel reads one model directory; ok is false when the directory
// vanished while being read.
func (sc *scanner) scanModel(name, dir string) (m ModelEntry, ok bool) {
	m = ModelEntry{Name: name, Dir: dir}
	var errs []error

	ents, err := os.ReadDir(dir)
	if err != nil {
		if vanished(dir, err) {
			return m, false
		}
		errs = append(errs, fmt.Errorf("modelrepo: scan model %s: %w", name, err))
	}

	cfg, err := sc.modelConfig(name, dir)
	if err != nil {
		errs = append(errs, err)
	}
	m.Config = cfg

	for _, e := range ents {
		if err := sc.scanEntry(&m, dir, e); err != nil {
			errs = append(errs, err)
		}
	}
	slices.SortFunc(m.Versions, func(a, b VersionEntry) int { return cmp.Compare(a.Version, b.Version) })
	m.pipelineVersion(dir)
	m.missingSpecific()
	m.Err = errors.Join(errs...)
	return m, true
}

// scanEntry reads one entry of model directory dir into m: a version
// directory (its entry, or its error in m.VersionErrors); other files are
// skipped. It returns a layout error of the model.
func (sc *scanner) scanEntry(m *ModelEntry, dir string, e fs.DirEntry) error {
	n := e.Name()
	if strings.HasPrefix(n, ".") {
		return nil
	}
	p := filepath.Join(dir, n)
	isDir := e.IsDir()
	if e.Type()&fs.ModeSymlink != 0 {
		fi, err := os.Stat(p)
		isDir = err == nil && fi.IsDir()
	}
	if !isDir {
		if n == ModelFileONNX || n == ModelFilePT2 {
			return fmt.Errorf("%w: %s: a model file belongs in a version directory, e.g. %s", ErrLayout, p, filepath.Join(dir, "1", n))
		}
		return nil // config.yaml, README, ...
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v < 1 || strconv.FormatInt(v, 10) != n {
		return fmt.Errorf("%w: %s: directory %q is not a version number (want a positive integer such as 1)", ErrLayout, dir, n)
	}
	ve, err := sc.versionEntry(m.Config, v, p)
	switch {
	case vanished(p, err):
	case err != nil:
		m.versionError(v, err)
	default:
		m.Versions = append(m.Versions, ve)
	}
	return nil
}

// versionError records the error of version v.
func (m *ModelEntry) versionError(v int64, err error) {
	if m.VersionErrors == nil {
		m.VersionErrors = map[int64]error{}
	}
	m.VersionErrors[v] = err
}

// missingSpecific records an error for each version that
// version_policy.specific lists and no directory holds.
func (m *ModelEntry) missingSpecific() {
	if m.Config == nil {
		return
	}
	for _, v := range m.Config.VersionPolicy.Specific {
		if _, ok := m.Version(v); ok {
			continue
		}
		if _, broken := m.VersionErrors[v]; broken {
			continue
		}
		m.versionError(v, fmt.Errorf("%w: model %s: version %d, listed in version_policy.specific, has no directory", ErrNotFound, m.Name, v))
	}
}

// pipelineVersion makes a pipeline without version directories version 1
// (Triton's ensembles have an empty 1/, or none).
func (m *ModelEntry) pipelineVersion(dir string) {
	if m.Config != nil && m.Config.Pipeline != nil && len(m.Versions) == 0 && len(m.VersionErrors) == 0 {
		m.Versions = []VersionEntry{{Version: 1, Path: dir, Format: FormatEnsemble}}
	}
}

// modelConfig reads the model's config.yaml, else its config.pbtxt
// (Triton's), else gives the default config; a directory with both is an
// error. A config that cannot be read is nil with the error.
func (sc *scanner) modelConfig(name, dir string) (*Config, error) {
	var found []string
	for _, f := range []string{ConfigFile, ConfigFileTriton} {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("modelrepo: %w", err)
		}
		found = append(found, p)
	}
	switch len(found) {
	case 0:
		return DefaultConfig(name), nil
	case 2:
		return nil, fmt.Errorf("%w: %s holds both %s (xserve's) and %s (Triton's); keep one", ErrLayout, dir, ConfigFile, ConfigFileTriton)
	}
	path := found[0]
	if err := sc.inside(path); err != nil {
		return nil, err
	}
	load := LoadConfig
	if filepath.Base(path) == ConfigFileTriton {
		load = LoadTritonConfig
	}
	cfg, err := load(path)
	if vanished(path, err) {
		return DefaultConfig(name), nil
	}
	return cfg, err
}

// vanished reports whether err comes from path (or a file inside it) having
// been removed while the scan read it: such entries are left out rather than
// reported, since the next scan no longer sees them. A dangling symbolic link
// has not vanished.
func vanished(path string, err error) bool {
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	_, lerr := os.Lstat(path)
	return errors.Is(lerr, fs.ErrNotExist)
}

// versionEntry reads version directory dir: a pipeline's holds no model
// file.
func (sc *scanner) versionEntry(cfg *Config, v int64, dir string) (VersionEntry, error) {
	if cfg != nil && cfg.Pipeline != nil {
		return VersionEntry{Version: v, Path: dir, Format: FormatEnsemble}, sc.inside(dir)
	}
	return sc.scanVersion(cfg, v, dir)
}

// scanVersion reads one version directory; cfg may be nil.
func (sc *scanner) scanVersion(cfg *Config, v int64, dir string) (VersionEntry, error) {
	if err := sc.inside(dir); err != nil {
		return VersionEntry{}, err
	}
	var found []VersionEntry
	for _, f := range []struct{ file, format string }{{ModelFileONNX, FormatONNX}, {ModelFilePT2, FormatPT2}} {
		p := filepath.Join(dir, f.file)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return VersionEntry{}, fmt.Errorf("modelrepo: %w", err)
		}
		if err := sc.inside(p); err != nil {
			if vanished(p, err) {
				continue
			}
			return VersionEntry{}, err
		}
		fi, err := os.Stat(p)
		if err != nil {
			if vanished(p, err) {
				continue
			}
			return VersionEntry{}, fmt.Errorf("modelrepo: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return VersionEntry{}, fmt.Errorf("%w: %s is not a regular file", ErrLayout, p)
		}
		found = append(found, VersionEntry{Version: v, Path: p, Format: f.format, ModTime: fi.ModTime(), Size: fi.Size()})
	}
	switch len(found) {
	case 0:
		if _, err := os.Lstat(dir); err != nil {
			return VersionEntry{}, fmt.Errorf("modelrepo: %w", err) // vanished meanwhile
		}
		return VersionEntry{}, fmt.Errorf("%w: %s: no model file (want %s or %s)", ErrLayout, dir, ModelFileONNX, ModelFilePT2)
	case 2:
		return VersionEntry{}, fmt.Errorf("%w: %s: holds both %s and %s; keep one", ErrLayout, dir, ModelFileONNX, ModelFilePT2)
	}
	ve := found[0]
	if cfg != nil && cfg.Platform != "" && cfg.Platform != ve.Format {
		return VersionEntry{}, fmt.Errorf("%w: %s: config.yaml says platform %s but the version holds %s", ErrLayout, dir, cfg.Platform, filepath.Base(ve.Path))
	}
	return ve, nil
}

// MaxModelFileSize bounds the files ReadModelFile reads.
const MaxModelFileSize = 16 << 20

// ReadModelFile reads a file a model's config names (a labels file), at
// rel inside the model's directory: rel must be a relative path that
// stays in the directory (no "..", no symbolic link out of the
// repository), and the file at most MaxModelFileSize bytes.
func (r *Repository) ReadModelFile(model, rel string) ([]byte, error) {
	dir, err := r.Resolve(model)
	if err != nil {
		return nil, err
	}
	clean := filepath.Clean(rel)
	if rel == "" || filepath.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("%w: %q is not a path inside the model's directory", ErrOutsideRoot, rel)
	}
	path := filepath.Join(dir, clean)
	sc, err := r.scanner()
	if err != nil {
		return nil, err
	}
	if err := sc.inside(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotFound, filepath.Join(model, clean), errors.Unwrap(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxModelFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("modelrepo: read %s: %w", filepath.Join(model, clean), err)
	}
	if len(data) > MaxModelFileSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrLayout, filepath.Join(model, clean), MaxModelFileSize)
	}
	return data, nil
}
