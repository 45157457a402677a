package main

import (
	"strings"
	"testing"
)

// TestInspectUnsupportedListsEveryOp runs `xserve inspect --unsupported` on
// real exporter output (python/realmodels/custom_ops.py: torch.export and
// the TorchScript ONNX exporter over a model with two custom operators, one
// called twice): every unsupported op is listed at once with its domain,
// opset, count and nodes, the command fails, and loading the model fails
// naming the first op, its domain and node. A model without such ops passes.
func TestInspectUnsupportedListsEveryOp(t *testing.T) {
	cases := []struct {
		model string
		lines []string // each must appear as one table row (fields split on spaces)
		load  []string // substrings of the error `xserve run` gives
	}{
		{
			model: "../../testdata/unsupported/custom_ops.onnx",
			lines: []string{"Enigma xtest 1 1 /Enigma", "Mystery xtest 1 2 /Mystery, /Mystery_1"},
			load:  []string{"unsupported", "xtest.Mystery", `node "/Mystery"`},
		},
		{
			model: "../../testdata/unsupported/custom_ops.pt2",
			lines: []string{"torch.ops.xtest.enigma.default xtest - 1 enigma", "torch.ops.xtest.mystery.default xtest - 2 mystery, mystery_1"},
			load:  []string{"unsupported", "torch.ops.xtest.mystery.default", "node mystery"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.model[strings.LastIndex(tc.model, ".")+1:], func(t *testing.T) {
			out, _, err := xserve(t, "inspect", "--unsupported", tc.model)
			if err == nil || !strings.Contains(err.Error(), "2 unsupported operators (3 nodes)") {
				t.Errorf("inspect --unsupported: error %v, want one counting 2 operators in 3 nodes", err)
			}
			rows := map[string]bool{}
			for _, l := range strings.Split(out, "\n") {
				rows[strings.Join(strings.Fields(l), " ")] = true
			}
			if !rows["OP DOMAIN OPSET COUNT NODES"] {
				t.Errorf("no header row in:\n%s", out)
			}
			for _, want := range tc.lines {
				if !rows[want] {
					t.Errorf("no row %q in:\n%s", want, out)
				}
			}
			if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 3 {
				t.Errorf("%d lines, want a header and 2 rows:\n%s", n, out)
			}
			_, _, err = xserve(t, "run", tc.model, "--input", "x=unused.npy", "--output", t.TempDir())
			if err == nil {
				t.Fatal("run: a model with unsupported ops loaded")
			}
			for _, want := range tc.load {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("load error %q lacks %q", err, want)
				}
			}
		})
	}
	out, _, err := xserve(t, "inspect", "--unsupported", example+"/1/model.onnx")
	if err != nil || !strings.Contains(out, "no unsupported operators") {
		t.Errorf("inspect --unsupported on the example: %q, %v; want no unsupported operators", out, err)
	}
}
