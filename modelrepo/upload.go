package modelrepo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// fileRE is an uploaded file's name inside its version directory.
var fileRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Upload is a model's files as a client sends them (Triton's load request
// with "file:<path>" and "config" overrides).
type Upload struct {
	// Files maps paths inside the model's directory, "<version>/<file>"
	// such as "1/model.pt2", to their contents.
	Files map[string][]byte
	// Config, when not nil, is the new config.yaml (YAML, or JSON as
	// Triton's clients send it: JSON is YAML).
	Config []byte
}

// Write stores an upload in the repository, the one method of Repository
// that writes: the config is parsed first (a bad one writes nothing), each
// version directory is written under a dot-name that scans ignore and then
// renamed into place (a version that exists is replaced: renamed away,
// then removed), and config.yaml is replaced by a rename. Errors wrap
// ErrInvalidName, ErrLayout (a bad file path), ErrConfig or ErrOutsideRoot.
func (r *Repository) Write(name string, up Upload) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	versions, err := uploadVersions(up.Files)
	if err != nil {
		return err
	}
	if len(versions) == 0 && up.Config == nil {
		return fmt.Errorf("%w: upload of %q has neither files nor a config", ErrLayout, name)
	}
	dir := filepath.Join(r.root, name)
	if up.Config != nil {
		if _, err := ParseConfig(filepath.Join(dir, ConfigFile), up.Config); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("modelrepo: upload %s: %w", name, err)
	}
	if _, err := r.Resolve(name); err != nil { // a symbolic link out of the repository
		return err
	}
	for _, v := range sortedVersions(versions) {
		if err := writeVersion(dir, v, versions[v]); err != nil {
			return fmt.Errorf("modelrepo: upload %s version %s: %w", name, v, err)
		}
	}
	if up.Config != nil {
		if err := writeFileAtomic(dir, ConfigFile, up.Config); err != nil {
			return fmt.Errorf("modelrepo: upload %s: %w", name, err)
		}
	}
	return nil
}

// uploadVersions groups upload paths by version, checking each path.
func uploadVersions(files map[string][]byte) (map[string]map[string][]byte, error) {
	out := map[string]map[string][]byte{}
	for p, data := range files {
		v, file, ok := strings.Cut(p, "/")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 1 || strconv.FormatInt(n, 10) != v || !fileRE.MatchString(file) {
			return nil, fmt.Errorf("%w: uploaded file %s: want <version>/<file> such as 1/%s (a positive version, a plain file name)", ErrLayout, quoteShort(p), ModelFilePT2)
		}
		if out[v] == nil {
			out[v] = map[string][]byte{}
		}
		out[v][file] = data
	}
	for v, fs := range out {
		if fs[ModelFileONNX] == nil && fs[ModelFilePT2] == nil {
			return nil, fmt.Errorf("%w: uploaded version %s has no %s or %s", ErrLayout, v, ModelFileONNX, ModelFilePT2)
		}
	}
	return out, nil
}

func sortedVersions(m map[string]map[string][]byte) []string {
	vs := make([]string, 0, len(m))
	for v := range m {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return len(vs[i]) < len(vs[j]) || (len(vs[i]) == len(vs[j]) && vs[i] < vs[j]) })
	return vs
}

// writeVersion writes dir/.v.upload-*/ and renames it to dir/v, moving an
// existing dir/v away first.
func writeVersion(dir, v string, files map[string][]byte) error {
	tmp, err := os.MkdirTemp(dir, "."+v+".upload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up after a failure
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil {
			return err
		}
	}
	final := filepath.Join(dir, v)
	if _, err := os.Lstat(final); err == nil {
		old, err := os.MkdirTemp(dir, "."+v+".old-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(old)
		if err := os.Rename(final, filepath.Join(old, v)); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(tmp, final)
}

// writeFileAtomic replaces dir/name by writing a temporary file and
// renaming it.
func writeFileAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}
