package fxgraph

import (
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// shGraph returns a graph with inputs x: float32[N,3,4] and i: int64[5].
func shGraph() (*Graph, *Node, *Node) {
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.Float32, Shape: Shape{S("N"), D(3), D(4)}})
	i := g.AddPlaceholder("i", Static(tensor.Int64, 5))
	return g, x, i
}

func TestShapeOpsShapes(t *testing.T) {
	cases := []struct {
		name  string
		build func(g *Graph, x, i *Node) *Node
		want  string // Meta.String(), or "error: substring"
	}{
		{"view static", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenView, []any{i, []any{int64(2), int64(3)}}, nil)
		}, "error: cannot view"},
		{"view -1 keeps symbol", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenView, []any{x, []any{int64(-1), int64(12)}}, nil)
		}, "float32[N,12]"},
		{"view -1 static from symbol", func(g *Graph, x, i *Node) *Node {
			n := g.AddCall(AtenSymSizeInt, []any{x, int64(0)}, nil)
			return g.AddCall(AtenView, []any{x, []any{n, int64(-1)}}, nil)
		}, "float32[N,12]"},
		{"view -1 with symbol", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenView, []any{x, []any{int64(6), int64(-1)}}, nil)
		}, "float32[6,?]"},
		{"view two -1", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenView, []any{x, []any{int64(-1), int64(-1)}}, nil)
		}, "error: only one -1"},
		{"view tensor size", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenView, []any{x, i}, nil)
		}, "float32[?,?,?,?,?]"},
		{"reshape alias", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenReshape, []any{x, []any{int64(-1)}}, nil)
		}, "float32[?]"},
		{"permute", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenPermute, []any{x, []any{int64(2), int64(0), int64(-2)}}, nil)
		}, "float32[4,N,3]"},
		{"permute not a permutation", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenPermute, []any{x, []any{int64(0), int64(0), int64(1)}}, nil)
		}, "error: not a permutation"},
		{"transpose", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenTransposeInt, []any{x, int64(0), int64(-1)}, nil)
		}, "float32[4,3,N]"},
		{"t of rank 3", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenT, []any{x}, nil)
		}, "error: rank <= 2"},
		{"expand", func(g *Graph, x, i *Node) *Node {
			u := g.AddCall(AtenUnsqueeze, []any{x, int64(1)}, nil)
			return g.AddCall(AtenExpand, []any{u, []any{int64(2), int64(-1), int64(5), int64(-1), int64(4)}}, nil)
		}, "float32[2,N,5,3,4]"},
		{"expand bad", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenExpand, []any{x, []any{int64(-1), int64(5), int64(4)}}, nil)
		}, "error: cannot expand"},
		{"unsqueeze negative", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenUnsqueeze, []any{x, int64(-1)}, nil)
		}, "float32[N,3,4,1]"},
		{"squeeze dims keeps non-1", func(g *Graph, x, i *Node) *Node {
			u := g.AddCall(AtenUnsqueeze, []any{x, int64(0)}, nil)
			return g.AddCall(AtenSqueezeDims, []any{u, []any{int64(0), int64(1), int64(2)}}, nil)
		}, "float32[N,3,4]"},
		{"squeeze default", func(g *Graph, x, i *Node) *Node {
			u := g.AddCall(AtenUnsqueeze, []any{x, int64(3)}, nil)
			return g.AddCall(AtenSqueeze, []any{u}, nil)
		}, "float32[N,3,4]"},
		{"cat symbolic", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenCat, []any{[]any{x, x}, int64(-1)}, nil)
		}, "float32[N,3,8]"},
		{"cat on symbol", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenCat, []any{[]any{x, x}}, nil)
		}, "float32[?,3,4]"},
		{"cat promotes", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenCat, []any{[]any{i, i}}, nil)
		}, "int64[10]"},
		{"split_with_sizes", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSplitWithSizes, []any{x, []any{int64(1), int64(3)}, int64(2)}, nil)
		}, "(float32[N,3,1], float32[N,3,3])"},
		{"split_with_sizes bad sum", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSplitWithSizes, []any{x, []any{int64(1), int64(1)}, int64(2)}, nil)
		}, "error: sum to 2"},
		{"split uneven", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSplitTensor, []any{i, int64(2)}, nil)
		}, "(int64[2], int64[2], int64[1])"},
		{"split symbolic", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSplitTensor, []any{x, int64(2)}, nil)
		}, "error: symbolic dim"},
		{"slice clamps", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSliceTensor, []any{x, int64(2), int64(-3), int64(100), int64(2)}, nil)
		}, "float32[N,3,2]"},
		{"slice whole symbolic", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSliceTensor, []any{x, int64(0), nil, int64(9223372036854775807)}, nil)
		}, "float32[N,3,4]"},
		{"slice part of symbol", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSliceTensor, []any{x, int64(0), int64(1)}, nil)
		}, "float32[?,3,4]"},
		{"slice empty", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSliceTensor, []any{x, int64(1), int64(2), int64(1)}, nil)
		}, "float32[N,0,4]"},
		{"select", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenSelectInt, []any{x, int64(1), int64(-1)}, nil)
		}, "float32[N,4]"},
		{"index_select", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenIndexSelect, []any{x, int64(2), i}, nil)
		}, "float32[N,3,5]"},
		{"index adjacent", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenIndexTensor, []any{x, []any{nil, i}}, nil)
		}, "float32[N,5,4]"},
		{"index non-adjacent goes first", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenIndexTensor, []any{x, []any{i, nil, i}}, nil)
		}, "float32[5,3]"},
		{"index bool mask", func(g *Graph, x, i *Node) *Node {
			m := g.AddPlaceholder("m", Static(tensor.Bool, 3))
			return g.AddCall(AtenIndexTensor, []any{x, []any{nil, m}}, nil)
		}, "error: data-dependent"},
		{"gather", func(g *Graph, x, i *Node) *Node {
			v := g.AddCall(AtenView, []any{i, []any{int64(1), int64(5), int64(1)}}, nil)
			return g.AddCall(AtenGather, []any{x, int64(1), v}, nil)
		}, "float32[1,5,1]"},
		{"scatter_reduce mean", func(g *Graph, x, i *Node) *Node {
			v := g.AddCall(AtenView, []any{i, []any{int64(1), int64(5), int64(1)}}, nil)
			return g.AddCall(AtenScatterReduceTwo, []any{x, int64(1), v, x, "mean"}, nil)
		}, "error: unsupported"},
		{"index_put", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenIndexPut, []any{x, []any{nil, i}, g.AddConstant("v", tensor.Scalar(tensor.Float32, 1))}, nil)
		}, "float32[N,3,4]"},
		{"constant_pad_nd crops", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenConstantPadNd, []any{x, []any{int64(1), int64(-2), int64(2), int64(0)}, 0.5}, nil)
		}, "float32[N,5,3]"},
		{"reflection_pad2d", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenReflectionPad2d, []any{x, []any{int64(3), int64(3), int64(2), int64(1)}}, nil)
		}, "float32[N,6,10]"},
		{"reflection_pad2d too wide", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenReflectionPad2d, []any{x, []any{int64(4), int64(0), int64(0), int64(0)}}, nil)
		}, "error: smaller than"},
		{"replication_pad1d", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenReplicationPad1d, []any{x, []any{int64(5), int64(0)}}, nil)
		}, "float32[N,3,9]"},
		{"full dtype", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenFull, []any{[]any{int64(2), int64(3)}, int64(7)}, map[string]any{"dtype": tensor.Int32})
		}, "int32[2,3]"},
		{"full infers float32", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenFull, []any{[]any{int64(2)}, 1.5}, nil)
		}, "float32[2]"},
		{"full symbolic size", func(g *Graph, x, i *Node) *Node {
			n := g.AddCall(AtenSymSizeInt, []any{x, int64(0)}, nil)
			return g.AddCall(AtenFull, []any{[]any{n, int64(3)}, false}, nil)
		}, "bool[N,3]"},
		{"arange ints", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenArangeStartStep, []any{int64(10), int64(1), int64(-3)}, nil)
		}, "int64[3]"},
		{"arange floats", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenArangeStartStep, []any{0.5, int64(2), 0.5}, nil)
		}, "float32[3]"},
		{"repeat", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenRepeat, []any{x, []any{int64(2), int64(1), int64(2), int64(3)}}, nil)
		}, "float32[2,N,6,12]"},
		{"triu", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenTriu, []any{x, int64(-1)}, nil)
		}, "float32[N,3,4]"},
		{"pixel_shuffle", func(g *Graph, x, i *Node) *Node {
			y := g.AddCall(AtenView, []any{x, []any{int64(-1), int64(12), int64(1), int64(1)}}, nil)
			return g.AddCall(AtenPixelShuffle, []any{y, int64(2)}, nil)
		}, "float32[N,3,2,2]"},
		{"pixel_unshuffle", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenPixelUnshuffle, []any{x, int64(2)}, nil)
		}, "error: not divisible"},
		{"shape_as_tensor", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(Aten_ShapeAsTensor, []any{x}, nil)
		}, "int64[3]"},
		{"numel", func(g *Graph, x, i *Node) *Node {
			return g.AddCall(AtenNumel, []any{x}, nil)
		}, "int64[]"},
	}
	r := NewRegistry()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, x, i := shGraph()
			n := c.build(g, x, i)
			g.SetOutput(n)
			err := r.PropagateShapes(g)
			if want, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("err = %v, want one containing %q", err, want)
				}
				if want == "unsupported" || want == "data-dependent" {
					if !errors.Is(err, ErrUnsupported) {
						t.Errorf("err %v does not wrap ErrUnsupported", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Meta.String(); got != c.want {
				t.Errorf("meta = %s, want %s", got, c.want)
			}
		})
	}
}

// shIota returns a float32 tensor 0, 1, 2, ... of the given shape.
func shIota(dims ...int64) *tensor.Tensor {
	t := tensor.New(tensor.Float32, dims...)
	for k := int64(0); k < t.NumElements(); k++ {
		t.SetFloat64(k, float64(k))
	}
	return t
}

// TestShapeOpsEval folds small graphs and checks the values against
// expectations written out by hand.
func TestShapeOpsEval(t *testing.T) {
	x := shIota(2, 3) // [[0 1 2] [3 4 5]]
	idx := tensor.FromInt64s([]int64{2, -1, 0})
	cases := []struct {
		name  string
		build func(g *Graph, x, idx *Node) *Node
		want  string // shape then values
	}{
		{"permute", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenPermute, []any{x, []any{int64(1), int64(0)}}, nil)
		}, "[3 2] [0 3 1 4 2 5]"},
		{"expand", func(g *Graph, x, idx *Node) *Node {
			s := g.AddCall(AtenSliceTensor, []any{x, int64(0), int64(1), int64(2)}, nil)
			return g.AddCall(AtenExpand, []any{s, []any{int64(2), int64(-1)}}, nil)
		}, "[2 3] [3 4 5 3 4 5]"},
		{"cat", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenCat, []any{[]any{x, x}, int64(1)}, nil)
		}, "[2 6] [0 1 2 0 1 2 3 4 5 3 4 5]"},
		{"slice step", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenSliceTensor, []any{x, int64(1), int64(0), nil, int64(2)}, nil)
		}, "[2 2] [0 2 3 5]"},
		{"flip", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenFlip, []any{x, []any{int64(0), int64(1)}}, nil)
		}, "[2 3] [5 4 3 2 1 0]"},
		{"index_select wraps", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenIndexSelect, []any{x, int64(1), idx}, nil)
		}, "[2 3] [2 2 0 5 5 3]"},
		{"index", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenIndexTensor, []any{x, []any{nil, idx}}, nil)
		}, "[2 3] [2 2 0 5 5 3]"},
		{"gather", func(g *Graph, x, idx *Node) *Node {
			i2 := g.AddConstant("i2", tensor.FromInt64s([]int64{1, 0, 1}, 1, 3))
			return g.AddCall(AtenGather, []any{x, int64(0), i2}, nil)
		}, "[1 3] [3 1 5]"},
		{"scatter_reduce sum", func(g *Graph, x, idx *Node) *Node {
			i2 := g.AddConstant("i2", tensor.FromInt64s([]int64{0, 0, 2}, 1, 3))
			return g.AddCall(AtenScatterReduceTwo, []any{x, int64(1), i2, x, "sum"}, nil)
		}, "[2 3] [1 1 4 3 4 5]"},
		{"index_put accumulate", func(g *Graph, x, idx *Node) *Node {
			v := g.AddConstant("v", tensor.Scalar(tensor.Float32, 10))
			return g.AddCall(AtenIndexPut, []any{x, []any{nil, idx}, v, true}, nil)
		}, "[2 3] [10 1 22 13 4 25]"},
		{"constant pad", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenConstantPadNd, []any{x, []any{int64(1), int64(-1)}, -1.0}, nil)
		}, "[2 3] [-1 0 1 -1 3 4]"},
		{"reflection pad", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenReflectionPad1d, []any{x, []any{int64(2), int64(1)}}, nil)
		}, "[2 6] [2 1 0 1 2 1 5 4 3 4 5 4]"},
		{"replication pad", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenReplicationPad1d, []any{x, []any{int64(1), int64(2)}}, nil)
		}, "[2 6] [0 0 1 2 2 2 3 3 4 5 5 5]"},
		{"repeat", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenRepeat, []any{x, []any{int64(1), int64(2)}}, nil)
		}, "[2 6] [0 1 2 0 1 2 3 4 5 3 4 5]"},
		{"tril", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenTril, []any{x}, nil)
		}, "[2 3] [0 0 0 3 4 0]"},
		{"split getitem", func(g *Graph, x, idx *Node) *Node {
			s := g.AddCall(AtenSplitTensor, []any{x, int64(2), int64(1)}, nil)
			return g.AddCall(GetItem, []any{s, int64(1)}, nil)
		}, "[2 1] [2 5]"},
		{"arange", func(g *Graph, x, idx *Node) *Node {
			return g.AddCall(AtenArangeStartStep, []any{int64(5), int64(-1), int64(-2)}, nil)
		}, "[3] [5 3 1]"},
	}
	r := NewRegistry()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := New()
			xn := g.AddConstant("x", x)
			in := g.AddConstant("idx", idx)
			n := c.build(g, xn, in)
			g.SetOutput(n)
			if err := r.PropagateShapes(g); err != nil {
				t.Fatal(err)
			}
			if _, err := r.FoldConstants(g, 1<<20); err != nil {
				t.Fatal(err)
			}
			outs := g.Outputs()
			v := g.ConstValue(outs[0])
			if v == nil {
				t.Fatalf("output %s was not folded", outs[0])
			}
			got := shFmtInts(v.Shape) + " " + shFmtFloats(v.Float64s())
			if got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func shFmtInts(v []int64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = FormatArg(x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func shFmtFloats(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strings.TrimSuffix(FormatArg(x), ".0")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// TestShapeOpsInt64Exact checks that folding keeps large int64 values exact.
func TestShapeOpsInt64Exact(t *testing.T) {
	big := int64(1)<<62 + 3
	g := New()
	a := g.AddConstant("a", tensor.FromInt64s([]int64{big, -big}))
	c := g.AddCall(AtenCat, []any{[]any{a, a}}, nil)
	f := g.AddCall(AtenFull, []any{[]any{int64(1)}, big}, map[string]any{"dtype": tensor.Int64})
	g.SetOutput(c, f)
	r := NewRegistry()
	if err := r.PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	if _, err := r.FoldConstants(g, 100); err != nil {
		t.Fatal(err)
	}
	outs := g.Outputs()
	if got := g.ConstValue(outs[0]).Int64s(); got[2] != big || got[3] != -big {
		t.Errorf("cat = %v", got)
	}
	if got := g.ConstValue(outs[1]).Int64s(); got[0] != big {
		t.Errorf("full = %v", got)
	}
}

// TestShapeOpsSpecializeShapeSubgraph checks that a reshape whose size is
// computed from a symbolic input shape (Shape -> select -> cat) resolves
// when the graph is specialized.
func TestShapeOpsSpecializeShapeSubgraph(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.Float32, Shape: Shape{S("N"), D(3), D(4)}})
	s := g.AddCall(Aten_ShapeAsTensor, []any{x}, nil)
	n := g.AddCall(AtenSliceTensor, []any{s, int64(0), int64(0), int64(1)}, nil)
	m1 := g.AddConstant("m1", tensor.FromInt64s([]int64{-1}))
	size := g.AddCall(AtenCat, []any{[]any{n, m1}}, nil)
	v := g.AddCall(AtenView, []any{x, size}, nil)
	g.SetOutput(v)
	r := NewRegistry()
	if err := r.PropagateShapes(g); err != nil {
		t.Fatal(err)
	}
	if got := v.Meta.String(); got != "float32[?,?]" {
		t.Errorf("import-time meta = %s", got)
	}
	sg, err := r.Specialize(g, map[string]int64{"N": 5}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := sg.Outputs()[0].Meta.String(); got != "float32[5,12]" {
		t.Errorf("specialized meta = %s", got)
	}
}
