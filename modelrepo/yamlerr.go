package modelrepo

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// nodeIndex maps the key paths of a YAML document ("batching.timeout",
// "inputs[0].dims[1]") to their nodes, so that errors can name keys and lines.
type nodeIndex struct {
	lines map[string]int // path -> line of its key (first occurrence)
	keys  []indexed      // every mapping key node
	vals  []indexed      // every value node: mapping values and sequence items
}

type indexed struct {
	path string
	node *yaml.Node
}

// yamlDepth is the nesting depth of the node tree under doc (1 for a
// scalar document), walked without recursion.
func yamlDepth(doc *yaml.Node) int {
	type item struct {
		n     *yaml.Node
		depth int
	}
	deepest := 0
	stack := []item{{doc, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		deepest = max(deepest, it.depth)
		for _, c := range it.n.Content {
			stack = append(stack, item{c, it.depth + 1})
		}
	}
	return deepest
}

func indexNodes(doc *yaml.Node) *nodeIndex {
	idx := &nodeIndex{lines: map[string]int{}}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		idx.lines[""] = doc.Content[0].Line
		idx.vals = append(idx.vals, indexed{"", doc.Content[0]})
		idx.walk(doc.Content[0], "")
	}
	return idx
}

func (idx *nodeIndex) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := k.Value
			if path != "" {
				kp = path + "." + k.Value
			}
			if _, ok := idx.lines[kp]; !ok {
				idx.lines[kp] = k.Line
			}
			idx.keys = append(idx.keys, indexed{kp, k})
			idx.vals = append(idx.vals, indexed{kp, v})
			idx.walk(v, kp)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := idx.lines[ip]; !ok {
				idx.lines[ip] = item.Line
			}
			idx.vals = append(idx.vals, indexed{ip, item})
			idx.walk(item, ip)
		}
	}
	// Aliases are not followed: an error inside one is reported at its anchor.
}

// line returns the line of key, or of its nearest ancestor present in the
// document (a missing key is reported where its parent is), or 0.
func (idx *nodeIndex) line(key string) int {
	if idx == nil {
		return 0
	}
	for {
		if l, ok := idx.lines[key]; ok {
			return l
		}
		if key == "" {
			return 0
		}
		key = parentKey(key)
	}
}

// parentKey strips the last ".name" or "[i]" of a key path.
func parentKey(key string) string {
	if i := strings.LastIndexAny(key, ".["); i >= 0 {
		return key[:i]
	}
	return ""
}

// problems collects the *ConfigErrors of one file, at most one per key: a key
// that already has an error, or whose ancestor or descendant has one, is not
// reported again (a value that failed to decode reads as zero, and would
// otherwise be reported a second time as impossible).
type problems struct {
	file string
	idx  *nodeIndex
	errs []*ConfigError
	keys map[string]bool
}

func newProblems(file string, idx *nodeIndex) *problems {
	return &problems{file: file, idx: idx, keys: map[string]bool{}}
}

func (p *problems) covered(key string) bool {
	for k := key; ; k = parentKey(k) {
		if p.keys[k] {
			return true
		}
		if k == "" {
			break
		}
	}
	if key == "" {
		return false // whole-file problems are always reported
	}
	for k := range p.keys {
		if strings.HasPrefix(k, key+".") || strings.HasPrefix(k, key+"[") {
			return true
		}
	}
	return false
}

func (p *problems) add(key, format string, args ...any) {
	p.addAt(key, p.idx.line(key), fmt.Sprintf(format, args...))
}

func (p *problems) addAt(key string, line int, reason string) {
	if p.covered(key) {
		return
	}
	p.keys[key] = true
	p.errs = append(p.errs, &ConfigError{File: p.file, Key: key, Line: line, Reason: reason})
}

// err joins the problems in the order of their lines (those without a line
// last), or returns nil.
func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	sort.SliceStable(p.errs, func(i, j int) bool {
		li, lj := p.errs[i].Line, p.errs[j].Line
		if (li == 0) != (lj == 0) {
			return lj == 0
		}
		return li < lj
	})
	errs := make([]error, len(p.errs))
	for i, e := range p.errs {
		errs[i] = e
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

var (
	lineRE      = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownRE   = regexp.MustCompile(`^field (.+) not found in type (\S+)$`)
	dupFieldRE  = regexp.MustCompile(`^field (.+) already set in type (\S+)$`)
	dupKeyRE    = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
	unmarshalRE = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")
)

// addYAML translates one message of a *yaml.TypeError ("line 5: field foo
// not found in type modelrepo.rawBatching") into a ConfigError naming the
// key path.
func (p *problems) addYAML(msg string) {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		p.addAt("", 0, msg)
		return
	}
	line, _ := strconv.Atoi(m[1])
	msg = m[2]
	if m := unknownRE.FindStringSubmatch(msg); m != nil {
		key := p.findKey(line, m[1], m[1])
		reason := "unknown key"
		if known := rawKeys()[m[2]]; known != "" {
			reason += " (want one of " + known + ")"
		}
		p.addAt(key, line, reason)
		return
	}
	if m := dupFieldRE.FindStringSubmatch(msg); m != nil {
		p.addAt(p.findKey(line, m[1], m[1]), line, "duplicate key")
		return
	}
	if m := dupKeyRE.FindStringSubmatch(msg); m != nil {
		name, err := strconv.Unquote(m[1])
		if err != nil {
			name = m[1]
		}
		p.addAt(p.findKey(line, name, name), line, "duplicate key (first at line "+m[2]+")")
		return
	}
	if m := unmarshalRE.FindStringSubmatch(msg); m != nil {
		tag, val, goType := m[1], m[2], m[3]
		got := tag
		if val != "" {
			got = tag + " " + val
		}
		key := ""
		for _, v := range p.idx.vals {
			n := v.node
			if n.Line != line || n.ShortTag() != tag {
				continue
			}
			if n.Kind == yaml.ScalarNode && !truncatedMatch(n.Value, val) {
				continue
			}
			key, got = v.path, describeNode(n)
			break
		}
		p.addAt(key, line, "want "+describeType(goType)+", got "+got)
		return
	}
	p.addAt("", line, msg)
}

// findKey returns the path of the mapping key named name on line, or
// fallback.
func (p *problems) findKey(line int, name, fallback string) string {
	for _, k := range p.idx.keys {
		if k.node.Line == line && k.node.Value == name {
			return k.path
		}
	}
	return fallback
}

// truncatedMatch reports whether yaml's rendering of a value in an error
// (cut to 7 characters and "..." past 10) is v.
func truncatedMatch(v, shown string) bool {
	if len(v) > 10 {
		return strings.HasSuffix(shown, "...") && strings.HasPrefix(v, strings.TrimSuffix(shown, "..."))
	}
	return v == shown
}

// describeNode renders a node's value for an error: "abc" quoted, numbers as
// written, "a list" or "a mapping".
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// describeType names what a Go type of the raw schema expects.
func describeType(goType string) string {
	t := strings.TrimLeft(goType, "*")
	switch {
	case t == "int" || t == "int64":
		return "an integer"
	case t == "float64":
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case t == "[]int64":
		return "a list of integers"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	default:
		return "a mapping"
	}
}

// rawKeys maps each raw schema type's name, as yaml prints it
// ("modelrepo.rawBatching"), to its keys ("enabled, max_batch_size, ...").
func rawKeys() map[string]string {
	out := map[string]string{}
	for _, v := range []any{rawConfig{}, rawInput{}, rawOutput{}, rawVersionPolicy{}, rawBatching{}, rawGenerate{}, rawGenerateInputs{}, rawGenerateOutputs{}, rawCachePair{}, rawEncoder{}, rawPipeline{}, rawStep{}, rawSequence{}, rawState{}} {
		t := reflect.TypeOf(v)
		var keys []string
		for i := range t.NumField() {
			if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" {
				keys = append(keys, tag)
			}
		}
		out[t.String()] = strings.Join(keys, ", ")
	}
	return out
}
