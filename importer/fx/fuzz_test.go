package fx_test

import (
	"archive/zip"
	"bytes"
	"io"
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
