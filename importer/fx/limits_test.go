package fx_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/xserve/xserve/importer/fx"
)

// nestConds returns the cond fixture's program with its true branch
// replaced, levels times over, by the program's own graph (inputs in the
// branch's order), so that conds nest levels deep.
func nestConds(t *testing.T, program []byte, levels int) []byte {
	t.Helper()
	var prog map[string]any
	if err := json.Unmarshal(program, &prog); err != nil {
		t.Fatal(err)
	}
	top := prog["graph_module"].(map[string]any)["graph"].(map[string]any)
	trueGraph := func(g map[string]any) map[string]any {
		for _, n := range g["nodes"].([]any) {
			n := n.(map[string]any)
			if n["target"] == "torch.ops.higher_order.cond" {
				return n["inputs"].([]any)[1].(map[string]any)["arg"].(map[string]any)["as_graph"].(map[string]any)
			}
		}
		t.Fatal("no cond node")
		return nil
	}
	copyOf := func(v any) map[string]any {
		b, _ := json.Marshal(v)
		var out map[string]any
		json.Unmarshal(b, &out)
		return out
	}
	branchInputs := trueGraph(top)["graph"].(map[string]any)["inputs"]
	template := copyOf(top)
	cur := top
	for range levels {
		inner := copyOf(template)
		inner["inputs"] = branchInputs
		trueGraph(cur)["graph"] = inner
		cur = inner
	}
	b, err := json.Marshal(prog)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNestingLimits: the program JSON is decoded with a depth limit (a
// program nested two million levels deep is an error, not a stack
// overflow) and subgraphs nest at most 64 deep: conds nested 70 deep are
// refused with an error naming the limit; nested 3 deep they import.
func TestNestingLimits(t *testing.T) {
	data := readFixture(t, "cond")
	program := func(edit func([]byte) []byte) []byte {
		return rewrite(t, data, func(name string, b []byte) []byte {
			if strings.HasSuffix(name, "models/model.json") {
				return edit(b)
			}
			return b
		})
	}
	deep := program(func(b []byte) []byte {
		return []byte(`{"graph_module": ` + strings.Repeat("[", 2_000_000) + strings.Repeat("]", 2_000_000) + `}`)
	})
	if err := importBytes(deep); !errors.Is(err, fx.ErrFormat) || !strings.Contains(err.Error(), "exceeded max depth") {
		t.Errorf("a program nested 2M deep: %v", err)
	}
	if err := importBytes(program(func(b []byte) []byte { return nestConds(t, b, 3) })); err != nil {
		t.Errorf("conds nested 3 deep: %v", err)
	}
	err := importBytes(program(func(b []byte) []byte { return nestConds(t, b, 70) }))
	if !errors.Is(err, fx.ErrFormat) || !strings.Contains(err.Error(), "subgraphs nested more than 64 deep (the limit)") {
		t.Errorf("conds nested 70 deep: %v", err)
	}
}
