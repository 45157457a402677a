package xserve_test

// Checks of the project's structure (docs/DESIGN's layer order), so that
// it stays true: which top-level directory may import which, who may use
// cgo (and that none imports go-xla), and that no two C files call or include each other, in
// any cycle.
//
//	go test -run Structure .

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/xserve/xserve"

// layers lists, for each top-level directory (a unit), the units its
// packages may import (tests aside, which sit above what they test). The
// order is DESIGN.md's: importer → fxgraph ← lower; engine → importer,
// lower, pjrt; pipeline → modelrepo, fxgraph; serving → engine, pipeline,
// batching, modelrepo; runner → engine;
// api → serving; harnesses and cmd on top. Nothing imports api or cmd.
var layers = map[string][]string{
	"tensor":    nil,
	"batching":  nil,
	"internal":  nil, // small utilities: metrics, request ids, tracing, test certificates
	"fxgraph":   {"tensor"},
	"pjrt":      {"tensor"},
	"importer":  {"fxgraph", "tensor"},
	"lower":     {"fxgraph", "tensor"},
	"modelrepo": {"fxgraph", "tensor"},
	"loadtest":  {"tensor"},
	"engine":    {"importer", "lower", "pjrt", "fxgraph", "tensor"},
	"pipeline":  {"modelrepo", "fxgraph", "tensor"},
	"serving":   {"engine", "pipeline", "batching", "modelrepo", "internal", "lower", "pjrt", "fxgraph", "tensor"},
	"runner":    {"engine", "importer", "lower", "pjrt", "fxgraph", "tensor"},
	// clustercache: the engine's compile cache in a JetStream object store.
	"clustercache": {"engine", "internal"},
	"api":          {"serving", "batching", "modelrepo", "internal", "fxgraph", "tensor"},
	"harness":      {"runner", "engine", "serving", "importer", "lower", "pjrt", "modelrepo", "fxgraph", "tensor"},
	"cmd":          {"api", "clustercache", "harness", "runner", "serving", "engine", "loadtest", "importer", "lower", "pjrt", "modelrepo", "batching", "internal", "fxgraph", "tensor"},
}

// protocols are generated wire-format packages that any client may import
// whatever its layer (loadtest speaks KServe gRPC); they import nothing of
// the module.
var protocols = map[string]bool{
	module + "/api/grpc/inferencepb": true,
}

// pending are imports the layers forbid that another change removes; each
// names it. A pending import that is gone is reported, to be dropped here.
var pending = map[[2]string]string{}

type goPackage struct {
	ImportPath string
	Imports    []string
	CgoFiles   []string
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	pkgs, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// goList lists the module's packages once per test binary.
var goList = sync.OnceValues(func() ([]goPackage, error) {
	cmd := exec.Command("go", "list", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
})

// unit returns the top-level directory of a package of the module, or "".
func unit(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	u, _, _ := strings.Cut(rest, "/")
	return u
}

// TestStructureLayers checks every import between top-level directories
// against layers, and that they form no cycle.
func TestStructureLayers(t *testing.T) {
	seen := map[[2]string]bool{}
	for _, p := range listPackages(t) {
		from := unit(p.ImportPath)
		if p.ImportPath == module {
			continue // this test
		}
		allowed, known := layers[from]
		if !known {
			t.Errorf("%s: top-level directory %q is not in the layer table (structure_test.go)", p.ImportPath, from)
			continue
		}
		for _, imp := range p.Imports {
			to := unit(imp)
			if protocols[p.ImportPath] && to != "" {
				t.Errorf("%s imports %s: a protocol package imports nothing of the module", p.ImportPath, imp)
			}
			if to == "" || to == from || protocols[imp] {
				continue
			}
			edge := [2]string{from, to}
			seen[edge] = true
			if slices.Contains(allowed, to) {
				continue
			}
			if why, ok := pending[edge]; ok {
				t.Logf("%s imports %s: allowed until %s", p.ImportPath, imp, why)
				continue
			}
			t.Errorf("%s imports %s: %s may import only %v", p.ImportPath, imp, from, allowed)
		}
	}
	for edge, why := range pending {
		if !seen[edge] {
			t.Logf("%s no longer imports %s (%s): drop it from pending", edge[0], edge[1], why)
		}
	}
	if cycle := findCycle(seen); cycle != nil {
		t.Errorf("top-level directories import each other: %s", strings.Join(cycle, " → "))
	}
}

// TestStructureBindings checks that only pjrt uses cgo among the packages
// below cmd, and that none imports go-xla (the PJRT binding is ours).
func TestStructureBindings(t *testing.T) {
	for _, p := range listPackages(t) {
		u := unit(p.ImportPath)
		if len(p.CgoFiles) > 0 && u != "pjrt" {
			t.Errorf("%s uses cgo (%v): only package pjrt binds C", p.ImportPath, p.CgoFiles)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/gomlx/go-xla") {
				t.Errorf("%s imports %s: the PJRT binding is package pjrt's own", p.ImportPath, imp)
			}
		}
	}
}

// TestStructureC checks, in each directory of C sources, that no two files
// call each other (a file calls another when it names a function the other
// defines and exports), in any cycle, and that no header includes another
// in a cycle.
func TestStructureC(t *testing.T) {
	for _, dir := range []string{"cpukernels", "pjrt"} {
		calls, includes, err := cGraphs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if dir == "cpukernels" && !calls[[2]string{"band.c", "common.c"}] {
			t.Errorf("%s: band.c calls nothing of common.c: is the parser broken?", dir)
		}
		if cycle := findCycle(calls); cycle != nil {
			t.Errorf("%s: C files call each other: %s", dir, strings.Join(cycle, " → "))
		}
		if cycle := findCycle(includes); cycle != nil {
			t.Errorf("%s: C files include each other: %s", dir, strings.Join(cycle, " → "))
		}
	}
}

var (
	cComment    = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	cString     = regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'`)
	cFuncDef    = regexp.MustCompile(`(?m)^(static\s+)?[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{)]*(?:\([^)]*\)[^;{)]*)*\)\s*\{`)
	cIdent      = regexp.MustCompile(`\b[A-Za-z_]\w*\b`)
	cInclude    = regexp.MustCompile(`(?m)^\s*#\s*include\s*"([^"]+)"`)
	cKeywordDef = map[string]bool{"if": true, "for": true, "while": true, "switch": true, "return": true, "sizeof": true}
)

// cGraphs returns the call graph between the .c files of dir (file → files
// defining the non-static functions it names) and its include graph.
func cGraphs(dir string) (calls, includes map[[2]string]bool, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.[ch]"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	src := map[string]string{}
	defs := map[string]string{} // exported function -> defining file
	includes = map[[2]string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		name := filepath.Base(f)
		for _, m := range cInclude.FindAllStringSubmatch(string(data), -1) {
			if _, err := os.Stat(filepath.Join(dir, m[1])); err == nil {
				includes[[2]string{name, m[1]}] = true
			}
		}
		code := cString.ReplaceAllString(cComment.ReplaceAllString(string(data), " "), `""`)
		if !strings.HasSuffix(name, ".c") {
			continue
		}
		src[name] = code
		for _, m := range cFuncDef.FindAllStringSubmatch(code, -1) {
			if m[1] == "" && !cKeywordDef[m[2]] {
				if other, dup := defs[m[2]]; dup && other != name {
					return nil, nil, fmt.Errorf("%s: function %s defined in %s and %s", dir, m[2], other, name)
				}
				defs[m[2]] = name
			}
		}
	}
	calls = map[[2]string]bool{}
	for name, code := range src {
		for _, id := range cIdent.FindAllString(code, -1) {
			if def, ok := defs[id]; ok && def != name {
				calls[[2]string{name, def}] = true
			}
		}
	}
	return calls, includes, nil
}

// findCycle returns a cycle of the graph's edges (its nodes, the first
// repeated last), or nil.
func findCycle(edges map[[2]string]bool) []string {
	next := map[string][]string{}
	for e := range edges {
		next[e[0]] = append(next[e[0]], e[1])
	}
	nodes := make([]string, 0, len(next))
	for n := range next {
		nodes = append(nodes, n)
		sort.Strings(next[n])
	}
	sort.Strings(nodes)
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = active
		stack = append(stack, n)
		for _, m := range next[n] {
			switch state[m] {
			case active:
				i := slices.Index(stack, m)
				return append(slices.Clone(stack[i:]), m)
			case unvisited:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return nil
	}
	for _, n := range nodes {
		if state[n] == unvisited {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}
