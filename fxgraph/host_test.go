package fxgraph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

func strTensor(shape []int64, vals ...string) *tensor.Tensor {
	t := tensor.New(tensor.String, shape...)
	for i, v := range vals {
		t.Strings[i] = []byte(v)
	}
	return t
}

func strs(t *tensor.Tensor) []string {
	var out []string
	for _, s := range t.Strings {
		out = append(out, string(s))
	}
	return out
}

// emit adds a node through an Emitter (shape rule run), failing the test
// on error.
func emit(t *testing.T, g *Graph, target *Op, args []any, kw map[string]any) *Node {
	t.Helper()
	n, err := (&Emitter{Graph: g, IR: NewRegistry(), MaxFoldElements: -1}).Emit("", target, args, kw)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSplitHostRunsStringsAroundTheDevice builds a string classifier:
// strings -> index (host), index * 2 + 1 (device), a string label of the
// result (host), plus a reshape of the input strings (host, through int64
// stand-ins), and checks the cut and a run with a fake device.
func TestSplitHostRunsStringsAroundTheDevice(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.String, Shape: Shape{S("n")}})
	keys := g.AddConstant("keys", strTensor([]int64{3}, "a", "b", "c"))
	idx := emit(t, g, XserveStringLookup, []any{x, keys}, nil)
	dev := emit(t, g, AtenAddTensor, []any{emit(t, g, AtenMulTensor, []any{idx, int64(2)}, nil), int64(1)}, nil)
	labels := g.AddConstant("labels", strTensor([]int64{8}, "l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7"))
	out := emit(t, g, XserveStringTake, []any{labels, dev}, map[string]any{"default": "?"})
	col := emit(t, g, AtenUnsqueeze, []any{x, int64(1)}, nil)
	g.SetOutput(out, dev, col)
	s, err := SplitHost(g)
	if err != nil {
		t.Fatal(err)
	}
	names := func(ns []*Node) (out []string) {
		for _, n := range ns {
			out = append(out, n.Target)
		}
		return out
	}
	if got := names(s.Pre); !slices.Equal(got, []string{"xserve.string_lookup", "aten.unsqueeze.default"}) {
		t.Errorf("pre %v", got)
	}
	if got := names(s.Post); !slices.Equal(got, []string{"xserve.string_take"}) {
		t.Errorf("post %v", got)
	}
	if len(s.DeviceIn) != 1 || s.DeviceIn[0] != idx || len(s.DeviceOut) != 1 || s.DeviceOut[0] != dev {
		t.Fatalf("device in %v out %v", s.DeviceIn, s.DeviceOut)
	}
	calls := 0
	device := func(_ context.Context, in []*tensor.Tensor) ([]*tensor.Tensor, error) {
		calls++
		o := tensor.New(tensor.Int64, in[0].Shape...)
		for i := range in[0].NumElements() {
			o.SetInt64(i, in[0].Int64At(i)*2+1)
		}
		return []*tensor.Tensor{o}, nil
	}
	res, err := s.Run(context.Background(), []*tensor.Tensor{strTensor([]int64{4}, "c", "a", "zz", "b")}, device)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("device ran %d times", calls)
	}
	if got := strs(res[0]); !slices.Equal(got, []string{"l5", "l1", "?", "l3"}) { // "zz": index -1 -> -1*2+1 = -1
		t.Errorf("labels %v", got)
	}
	if got := res[1].Int64s(); !slices.Equal(got, []int64{5, 1, -1, 3}) {
		t.Errorf("device output %v", got)
	}
	if res[2].DType != tensor.String || !slices.Equal(res[2].Shape, []int64{4, 1}) || strs(res[2])[2] != "zz" {
		t.Errorf("reshaped strings %s %v", res[2], strs(res[2]))
	}
}

// TestSplitHostRefusesHostBetweenDeviceStages: a string computed from a
// device result that feeds the device again cannot run around one program.
func TestSplitHostRefusesHostBetweenDeviceStages(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", Static(tensor.Int64, 2))
	d := emit(t, g, AtenAddTensor, []any{x, int64(1)}, nil)
	s := emit(t, g, XserveStringFormat, []any{d}, nil)
	keys := g.AddConstant("keys", strTensor([]int64{1}, "3"))
	back := emit(t, g, XserveStringLookup, []any{s, keys}, nil)
	g.SetOutput(emit(t, g, AtenMulTensor, []any{back, int64(2)}, nil))
	_, err := SplitHost(g)
	if err == nil || !strings.Contains(err.Error(), "only before and after the XLA program") {
		t.Fatalf("err %v", err)
	}
	if g2 := New(); true {
		g2.SetOutput(g2.AddPlaceholder("y", Static(tensor.Float32, 1)))
		if s, err := SplitHost(g2); s != nil || err != nil {
			t.Errorf("numeric graph: split %v, %v", s, err)
		}
	}
}

// TestStringOps evaluates each string op on the host.
func TestStringOps(t *testing.T) {
	run := func(target *Op, kw map[string]any, ins ...*tensor.Tensor) []*tensor.Tensor {
		t.Helper()
		g := New()
		var args []any
		for i, in := range ins {
			args = append(args, g.AddPlaceholder(fmt.Sprintf("in%d", i), TensorMeta{DType: in.DType, Shape: StaticShape(in.Shape...)}))
		}
		n := emit(t, g, target, args, kw)
		outs, err := EvalOnHost(n, ins)
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
	for _, tc := range []struct {
		name   string
		target *Op
		kw     map[string]any
		ins    []*tensor.Tensor
		want   string
	}{
		{"normalize", XserveStringNormalize, map[string]any{"case": "UPPER", "stopwords": []any{"monday"}},
			[]*tensor.Tensor{strTensor([]int64{3}, "Monday", "tuesday", "wed")}, "[2] TUESDAY WED"},
		{"normalize all stopwords", XserveStringNormalize, map[string]any{"case_sensitive": true, "stopwords": []any{"a"}},
			[]*tensor.Tensor{strTensor([]int64{1, 1}, "a")}, "[1 1] "},
		{"split", XserveStringSplit, map[string]any{"delimiter": "-", "maxsplit": int64(1)},
			[]*tensor.Tensor{strTensor([]int64{2}, "a-b-c", "d")}, "[2 2] a b-c d  | [2] 2 1"},
		{"split whitespace", XserveStringSplit, nil,
			[]*tensor.Tensor{strTensor([]int64{1}, "  x  y ")}, "[1 2] x y | [1] 2"},
		{"concat", XserveStringConcat, nil,
			[]*tensor.Tensor{strTensor([]int64{2}, "a", "b"), strTensor(nil, "!")}, "[2] a! b!"},
		{"equal", XserveStringEqual, nil,
			[]*tensor.Tensor{strTensor([]int64{2}, "a", "b"), strTensor([]int64{1}, "b")}, "[2] 0 1"},
		{"regex", XserveRegexFullMatch, map[string]any{"pattern": `[a-z]+@\w+\.com`},
			[]*tensor.Tensor{strTensor([]int64{2}, "me@x.com", "me@x.com.au")}, "[2] 1 0"},
		{"format", XserveStringFormat, nil,
			[]*tensor.Tensor{tensor.FromFloat32s([]float32{0.1, -2, float32(1e30)})}, "[3] 0.1 -2 1e+30"},
		{"parse", XserveStringParse, map[string]any{"dtype": tensor.Float32},
			[]*tensor.Tensor{strTensor([]int64{3}, "0.5", "-INF", " 7 ")}, "[3] 0.5 -Inf 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for _, o := range run(tc.target, tc.kw, tc.ins...) {
				var vals []string
				if o.DType == tensor.String {
					vals = strs(o)
				} else {
					for i := range o.NumElements() {
						vals = append(vals, fmt.Sprint(o.Float64At(i)))
					}
				}
				parts = append(parts, fmt.Sprint(o.Shape)+" "+strings.Join(vals, " "))
			}
			if got := strings.Join(parts, " | "); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	g := New()
	parse := emit(t, g, XserveStringParse, []any{g.AddPlaceholder("s", Static(tensor.String, 1))}, map[string]any{"dtype": tensor.Int64})
	if _, err := EvalOnHost(parse, []*tensor.Tensor{strTensor([]int64{1}, "x1")}); err == nil || !strings.Contains(err.Error(), `"x1" is not an integer`) {
		t.Errorf("parse of text that is no number: %v", err)
	}
}

// TestHostNodeErrorsAreMarked: text that is no number fails the run with
// an error wrapping ErrHostNode (serving answers it as a bad request).
func TestHostNodeErrorsAreMarked(t *testing.T) {
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.String, Shape: Shape{S("n")}})
	f := emit(t, g, XserveStringParse, []any{x}, map[string]any{"dtype": tensor.Float32})
	g.SetOutput(emit(t, g, AtenMulTensor, []any{f, 2.0}, nil))
	s, err := SplitHost(g)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Run(context.Background(), []*tensor.Tensor{strTensor([]int64{2}, "1.5", "abc")},
		func(context.Context, []*tensor.Tensor) ([]*tensor.Tensor, error) {
			return nil, fmt.Errorf("not reached")
		})
	if !errors.Is(err, ErrHostNode) || !strings.Contains(err.Error(), `"abc" is not a number`) {
		t.Fatalf("err %v, want an ErrHostNode naming the text", err)
	}
}
