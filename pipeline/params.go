package pipeline

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// params reads a built-in step's parameters (config.yaml's params:),
// recording the first problem, which names the file and the key.
type params struct {
	raw  map[string]any
	file string // the config file, for errors
	key  string // the step's key, e.g. "pipeline.steps[2]"
	read func(name string) ([]byte, error)
	err  error
}

func (p *params) fail(name, format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: %s: %s.params.%s: %s", ErrConfig, p.file, p.key, name, fmt.Sprintf(format, args...))
	}
}

// known reports the params not in names.
func (p *params) known(names ...string) {
	for _, k := range slices.Sorted(maps.Keys(p.raw)) {
		if !slices.Contains(names, k) {
			p.fail(k, "unknown parameter (want one of %s)", strings.Join(names, ", "))
		}
	}
}

func (p *params) has(name string) bool {
	_, ok := p.raw[name]
	return ok
}

func (p *params) int(name string, def int64) int64 {
	v, ok := p.raw[name]
	if !ok {
		return def
	}
	switch x := v.(type) {
	case int:
		return int64(x)
	case int64:
		return x
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	}
	p.fail(name, "want an integer, got %v", v)
	return def
}

func (p *params) float(name string, def float64) float64 {
	v, ok := p.raw[name]
	if !ok {
		return def
	}
	if f, ok := number(v); ok {
		return f
	}
	p.fail(name, "want a number, got %v", v)
	return def
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func (p *params) bool(name string, def bool) bool {
	v, ok := p.raw[name]
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		p.fail(name, "want true or false, got %v", v)
	}
	return b
}

func (p *params) str(name, def string, allowed ...string) string {
	v, ok := p.raw[name]
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok || (len(allowed) > 0 && !slices.Contains(allowed, s)) {
		p.fail(name, "want one of %q, got %v", allowed, v)
		return def
	}
	return s
}

// floats reads a number or a list of numbers.
func (p *params) floats(name string) []float64 {
	v, ok := p.raw[name]
	if !ok {
		return nil
	}
	if f, ok := number(v); ok {
		return []float64{f}
	}
	list, ok := v.([]any)
	if !ok {
		p.fail(name, "want a number or a list of numbers, got %v", v)
		return nil
	}
	out := make([]float64, len(list))
	for i, e := range list {
		if out[i], ok = number(e); !ok {
			p.fail(name, "element %d is %v, want a number", i, e)
			return nil
		}
	}
	return out
}

// ints reads an integer or a list of integers.
func (p *params) ints(name string) []int64 {
	fs := p.floats(name)
	out := make([]int64, len(fs))
	for i, f := range fs {
		if f != float64(int64(f)) {
			p.fail(name, "element %d is %v, want an integer", i, f)
			return nil
		}
		out[i] = int64(f)
	}
	if fs == nil {
		return nil
	}
	return out
}

// labels reads the labels file a parameter names (relative to the
// pipeline's model directory): one label per line, as Triton's
// label_filename.
func (p *params) labels(name string) *tensor.Tensor {
	v, ok := p.raw[name]
	if !ok {
		p.fail(name, "required: a labels file, one label per line")
		return nil
	}
	f, ok := v.(string)
	if !ok || f == "" {
		p.fail(name, "want a file name, got %v", v)
		return nil
	}
	if p.read == nil {
		p.fail(name, "no files can be read here")
		return nil
	}
	data, err := p.read(f)
	if err != nil {
		p.fail(name, "%v", err)
		return nil
	}
	lines := bytes.Split(data, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	if len(lines) == 0 {
		p.fail(name, "%s holds no labels", f)
		return nil
	}
	t := tensor.New(tensor.String, int64(len(lines)))
	for i, l := range lines {
		t.Strings[i] = bytes.TrimSuffix(l, []byte("\r"))
	}
	return t
}
