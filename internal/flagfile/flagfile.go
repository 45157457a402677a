package flagfile

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxBytes is the largest file Apply reads.
const MaxBytes = 1 << 20

// Apply reads the YAML file at path and sets each flag of fs it names that
// the command line did not set (fs must already be parsed). Every error
// names path and the line of the key.
func Apply(fs *flag.FlagSet, path string) error {
	data, err := readFile(path)
	if err != nil {
		return err
	}
	return ApplyData(fs, path, data)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, MaxBytes)
	}
	return data, nil
}

// ApplyData is Apply on the file's contents, data; path names it in errors.
func ApplyData(fs *flag.FlagSet, path string, data []byte) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return fmt.Errorf("config %s: %w", path, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s:%d: want a mapping of flag names to values", path, root.Line)
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	a := applier{fs: fs, path: path, skip: onCommandLine, seen: map[string]int{}}
	return a.mapping(root, "")
}

// applier walks one file's mappings.
type applier struct {
	fs   *flag.FlagSet
	path string
	skip map[string]bool // set on the command line
	seen map[string]int  // flag name → line where the file set it
}

// mapping applies the keys of m, each prefixed with prefix and "-".
func (a *applier) mapping(m *yaml.Node, prefix string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name := k.Value
		if prefix != "" {
			name = prefix + "-" + name
		}
		if err := a.key(k, v, name); err != nil {
			return err
		}
	}
	return nil
}

// key applies one key, name being its flag's name once joined.
func (a *applier) key(k, v *yaml.Node, name string) error {
	if k.Kind != yaml.ScalarNode || k.Value == "" {
		return fmt.Errorf("config %s:%d: a key must be a flag name", a.path, k.Line)
	}
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v.Kind == yaml.MappingNode { // no flag's value is a mapping
		return a.mapping(v, name)
	}
	f := a.fs.Lookup(name)
	if f == nil {
		return fmt.Errorf("config %s:%d: unknown key %q (no flag --%s%s)", a.path, k.Line, name, name, a.nearest(name))
	}
	if line, dup := a.seen[name]; dup {
		return fmt.Errorf("config %s:%d: key %q given again (first on line %d)", a.path, k.Line, name, line)
	}
	a.seen[name] = k.Line
	val, err := scalar(v)
	if err != nil {
		return fmt.Errorf("config %s:%d: key %q: %w", a.path, k.Line, name, err)
	}
	if a.skip[name] {
		return nil // the command line wins
	}
	if err := a.fs.Set(name, val); err != nil {
		return fmt.Errorf("config %s:%d: key %q: invalid value %q: %w", a.path, k.Line, name, val, err)
	}
	return nil
}

// scalar is a value node as a flag's text: a scalar as written, a
// sequence of scalars joined with commas.
func scalar(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return v.Value, nil
	case yaml.SequenceNode:
		items := make([]string, len(v.Content))
		for i, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of plain values")
			}
			items[i] = it.Value
		}
		return strings.Join(items, ","), nil
	}
	return "", errors.New("want a value, got a mapping")
}

// nearest suggests the flags sharing name's first word.
func (a *applier) nearest(name string) string {
	first, _, _ := strings.Cut(name, "-")
	var near []string
	a.fs.VisitAll(func(f *flag.Flag) {
		if len(near) < 4 && strings.HasPrefix(f.Name, first) {
			near = append(near, f.Name)
		}
	})
	if len(near) == 0 {
		return ""
	}
	return "; flags starting so: " + strings.Join(near, ", ")
}
