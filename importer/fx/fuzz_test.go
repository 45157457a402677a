package fx_test

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"testing"
)

// fuzzFixtures are the fixtures the fuzz targets start from (resnet18 is
// left out: building its 45 MB of weights makes each run slow).
var fuzzFixtures = []string{"cnn", "cnn_train", "block", "block_train", "tied", "kwargs", "kwargs_train", "interp", "mutation", "mutation_train", "inplace_view_train"}

// FuzzImport feeds whole archives, seeded with the fixtures and truncations
// of them: the importer must return a package error or a graph, never panic.
func FuzzImport(f *testing.F) {
	for _, name := range fuzzFixtures {
		data := readFixture(f, name)
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := importBytes(data); err != nil {
			checkClean(t, err)
		}
	})
}

// archiveParts holds a fixture's entries with its program JSON apart.
type archiveParts struct {
	entries []entry
	model   string // the name of models/model.json
}

type entry struct {
	name string
	data []byte
}

func splitArchive(t testing.TB, data []byte) (archiveParts, []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var p archiveParts
	var program []byte
	for _, zf := range zr.File {
		rc, err := zf.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(zf.Name, "models/model.json") {
			p.model, program = zf.Name, b
			continue
		}
		p.entries = append(p.entries, entry{zf.Name, b})
	}
	return p, program
}

// build makes a valid zip of the parts with program as models/model.json.
func (p archiveParts) build(program []byte) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range append(p.entries, entry{p.model, program}) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		if err != nil {
			panic(err)
		}
		w.Write(e.data)
	}
	zw.Close()
	return buf.Bytes()
}

// FuzzImportProgram feeds program JSON inside an otherwise valid archive
// (the weights of fixture k), so that the fuzzer reaches the graph builder
// rather than stopping at zip checksums.
func FuzzImportProgram(f *testing.F) {
	var parts []archiveParts
	for k, name := range fuzzFixtures {
		p, program := splitArchive(f, readFixture(f, name))
		parts = append(parts, p)
		f.Add(program, uint8(k))
	}
	f.Add([]byte(`{"schema_version": {"major": 8, "minor": 1}, "graph_module": {"graph": {"nodes": [{}]}, "signature": {}}}`), uint8(0))
	f.Fuzz(func(t *testing.T, program []byte, k uint8) {
		p := parts[int(k)%len(parts)]
		if err := importBytes(p.build(program)); err != nil {
			checkClean(t, err)
		}
	})
}

// jsonSite is one value of a parsed JSON document: the container that holds
// it and its key or index there.
type jsonSite struct {
	parent any // map[string]any or []any
	key    string
	index  int
}

// jsonSites lists every value below v in a fixed order (object keys
// sorted), so that a fuzzer's index means the same value on every run.
func jsonSites(v any, out []jsonSite) []jsonSite {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, jsonSite{parent: x, key: k})
			out = jsonSites(x[k], out)
		}
	case []any:
		for i := range x {
			out = append(out, jsonSite{parent: x, index: i})
			out = jsonSites(x[i], out)
		}
	}
	return out
}

func (s jsonSite) set(v any) {
	switch p := s.parent.(type) {
	case map[string]any:
		p[s.key] = v
	case []any:
		p[s.index] = v
	}
}

// FuzzImportMeta changes one value of a fixture's graph JSON
// (models/model.json: nodes, arguments, tensor metadata of every value) or
// of its weights' tensor metadata (model_weights_config.json) to a value the
// fuzzer picks, and imports the archive. The input is a few bytes (fixture,
// document, which value, the new value), so the fuzzer explores what the
// importer does with each field instead of re-mutating whole archives.
func FuzzImportMeta(f *testing.F) {
	type fixture struct {
		data  []byte
		docs  [2]string // the entries holding the program and the weights' metadata
		sites [2]int    // values in each document
	}
	var fixtures []fixture
	for _, name := range fuzzFixtures {
		data := readFixture(f, name)
		fx := fixture{data: data}
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			f.Fatal(err)
		}
		for _, zf := range zr.File {
			for d, suffix := range []string{"models/model.json", "model_weights_config.json"} {
				if strings.HasSuffix(zf.Name, suffix) {
					fx.docs[d] = zf.Name
					rc, _ := zf.Open()
					var v any
					if err := json.NewDecoder(rc).Decode(&v); err != nil {
						f.Fatal(err)
					}
					rc.Close()
					fx.sites[d] = len(jsonSites(v, nil))
				}
			}
		}
		fixtures = append(fixtures, fx)
	}
	for k := range fixtures {
		f.Add(uint8(k), false, uint32(7*k+3), []byte(`-1`))
		f.Add(uint8(k), false, uint32(101*k), []byte(`[{"as_int": 1000000000000}]`))
		f.Add(uint8(k), true, uint32(13*k+1), []byte(`{"as_int": 2}`))
		f.Add(uint8(k), true, uint32(k), []byte(`"aten.relu.default"`))
	}
	f.Fuzz(func(t *testing.T, k uint8, weights bool, pick uint32, value []byte) {
		fx := fixtures[int(k)%len(fixtures)]
		d := 0
		if weights {
			d = 1
		}
		if fx.docs[d] == "" || fx.sites[d] == 0 {
			return
		}
		var nv any
		if json.Unmarshal(value, &nv) != nil {
			nv = string(value)
		}
		data := rewrite(t, fx.data, func(name string, b []byte) []byte {
			if name != fx.docs[d] {
				return b
			}
			var doc any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			sites := jsonSites(doc, nil)
			sites[int(pick%uint32(len(sites)))].set(nv)
			out, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			return out
		})
		if err := importBytes(data); err != nil {
			checkClean(t, err)
		}
	})
}
