package onnx

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// addSeedFiles adds every testdata file matching pattern to the corpus.
func addSeedFiles(f *testing.F, pattern string) {
	paths, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed files testdata/%s (%v)", pattern, err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// fuzzBaseDir makes a directory holding a small external data file "w.bin".
func fuzzBaseDir(f *testing.F) string {
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), packedFloats(1, 2, 3, 4), 0o644); err != nil {
		f.Fatal(err)
	}
	return dir
}

// fuzzTruncations returns up to 8 proper prefixes of data.
func fuzzTruncations(data []byte) [][]byte {
	var out [][]byte
	for i := 1; i <= 8 && i < len(data); i++ {
		out = append(out, data[:len(data)*i/9])
	}
	if len(data) > 0 {
		out = append(out, data[:len(data)-1])
	}
	return out
}

func FuzzDecode(f *testing.F) {
	addSeedFiles(f, "*.onnx")
	f.Add([]byte(modelPB(simpleGraphPB())))
	f.Add([]byte(modelPB(nestedIfPB(4))))
	f.Add([]byte(externalModel("location", "w.bin", "offset", "0", "length", "16")))
	f.Add([]byte(modelPB(wmsg{}.str(2, "main").bytes(1, nodePB("n", "Custom", nil, []string{"y"},
		wmsg{}.str(1, "floats").bytes(7, packedFloats(1, 2)),
		attrPB("ints", AttrInts).bytes(8, packedVarints(1, -2)),
		wmsg{}.str(1, "t").bytes(5, tensorPB("c", 8, 2).str(6, "a").str(6, "b")),
		wmsg{}.str(1, "tp").bytes(14, wmsg{}.bytes(4, wmsg{}.bytes(1, tensorTypePB(1, -1)))),
	)))))
	f.Add([]byte(wmsg{}.bytes(25, wmsg{}.str(1, "f").str(4, "x").bytes(7, nodePB("", "Relu", []string{"x"}, []string{"y"})))))
	dir := fuzzBaseDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		inputs := append([][]byte{data}, fuzzTruncations(data)...)
		for i, in := range inputs {
			opts := DecodeOptions{}
			if i == 0 {
				opts = DecodeOptions{BaseDir: dir, MaxExternalBytes: 1 << 20}
			}
			m, err := Decode(in, opts)
			fuzzCheckResult(t, err, func() { fuzzCheckModel(t, m) })
			tt, _, err := DecodeTensor(in)
			fuzzCheckResult(t, err, func() { fuzzCheckTensor(t, tt) })
		}
	})
}

func FuzzDecodeTensor(f *testing.F) {
	addSeedFiles(f, "*.pb")
	seeds := []wmsg{
		tensorPB("a", 1, 2).bytes(4, packedFloats(1.5, -2)),
		tensorPB("a", 14, 1).fixed32(4, math.Float32bits(1)).fixed32(4, 0),
		tensorPB("a", 15, 1).bytes(10, packedDoubles(1, 2)),
		tensorPB("a", 3, 3).bytes(5, packedVarints(-128, 127, -1)),
		tensorPB("a", 9, 2).varint(5, 1).varint(5, 0),
		tensorPB("a", 16, 1).bytes(5, packedVarints(0x3F80)),
		tensorPB("a", 7, 2).bytes(7, packedVarints(-5, 1<<40)),
		tensorPB("a", 13, 1).varint(11, math.MaxUint64),
		tensorPB("a", 8, 2).str(6, "x").str(6, "yz"),
		tensorPB("a", 10, 2, 1).bytes(9, u16LE(0x3C00, 0)),
		tensorPB("a", 1, 0, 3),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tt, _, err := DecodeTensor(data)
		fuzzCheckResult(t, err, func() { fuzzCheckTensor(t, tt) })
	})
}

// fuzzCheckResult checks an error's prefix, or runs check on success.
func fuzzCheckResult(t *testing.T, err error, check func()) {
	if err != nil {
		if !strings.HasPrefix(err.Error(), "onnx: ") {
			t.Errorf("error without the onnx: prefix: %v", err)
		}
		return
	}
	check()
}

// fuzzCheckModel checks that every tensor in a decoded model is consistent.
func fuzzCheckModel(t *testing.T, m *Model) {
	if m.Graph != nil {
		fuzzCheckGraph(t, m.Graph)
	}
	for _, fn := range m.Functions {
		for _, n := range fn.Nodes {
			fuzzCheckNode(t, n)
		}
		for _, a := range fn.AttributeProtos {
			fuzzCheckAttr(t, a)
		}
	}
}

func fuzzCheckGraph(t *testing.T, g *Graph) {
	for _, in := range g.Initializers {
		fuzzCheckTensor(t, in.Tensor)
	}
	for _, n := range g.Nodes {
		fuzzCheckNode(t, n)
	}
}

func fuzzCheckNode(t *testing.T, n *Node) {
	for _, a := range n.Attributes {
		fuzzCheckAttr(t, a)
	}
}

func fuzzCheckAttr(t *testing.T, a *Attribute) {
	if a.T != nil {
		fuzzCheckTensor(t, a.T)
	}
	for _, tt := range a.Tensors {
		fuzzCheckTensor(t, tt)
	}
	if a.G != nil {
		fuzzCheckGraph(t, a.G)
	}
	for _, g := range a.Graphs {
		fuzzCheckGraph(t, g)
	}
}

// fuzzCheckTensor checks that a decoded tensor's data matches its shape.
func fuzzCheckTensor(t *testing.T, tt *tensor.Tensor) {
	n := tt.NumElements()
	switch {
	case n < 0:
		t.Errorf("decoded tensor with invalid shape %v", tt.Shape)
	case tt.DType == tensor.String:
		if int64(len(tt.Strings)) != n || len(tt.Data) != 0 {
			t.Errorf("%v: %d strings", tt, len(tt.Strings))
		}
	case tt.DType.Size() == 0:
		t.Errorf("decoded tensor of dtype %v", tt.DType)
	case int64(len(tt.Data)) != n*int64(tt.DType.Size()):
		t.Errorf("%v: %d bytes", tt, len(tt.Data))
	}
}

// FuzzDecodeValue decodes arbitrary bytes as a SequenceProto and an
// OptionalProto of tensors, and of sequences: never a panic, and every
// decoded tensor is consistent.
func FuzzDecodeValue(f *testing.F) {
	addSeedFiles(f, "ort/seq_*/test_data_set_0/*.pb")
	addSeedFiles(f, "ort/optional_*/test_data_set_0/*.pb")
	elem := &TypeInfo{Kind: TypeTensor, Elem: tensor.Float32}
	types := []*TypeInfo{
		{Kind: TypeSequence, ElemType: elem},
		{Kind: TypeOptional, ElemType: elem},
		{Kind: TypeOptional, ElemType: &TypeInfo{Kind: TypeSequence, ElemType: elem}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range types {
			v, err := DecodeValue(data, typ)
			fuzzCheckResult(t, err, func() {
				for _, tt := range v.Flatten() {
					fuzzCheckTensor(t, tt)
				}
			})
		}
	})
}
