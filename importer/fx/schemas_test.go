package fx

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
)

// TestSchemasCover checks that every operator the importer decomposes and
// every ATen operator of the IR carries torch's schema (fxgraph's generated
// ATen table), so that arguments given by keyword land in their ATen
// position.
func TestSchemasCover(t *testing.T) {
	for op := range decompositions {
		if len(op.Args) == 0 {
			t.Errorf("decomposed %s has no schema (add it to EXTRA in fxgraph/gen_aten.py)", op)
		}
	}
	for _, op := range fxgraph.Ops() {
		if strings.HasPrefix(op.Name, "aten.") && len(op.Args) == 0 {
			t.Errorf("IR operator %s has no schema (add it to EXTRA in fxgraph/gen_aten.py)", op)
		}
	}
}

// TestDecompositionsDefer checks that no decomposition shadows an IR
// operator: the IR's own operator is used when it exists, so such an
// entry would be dead code to delete.
func TestDecompositionsDefer(t *testing.T) {
	ir := fxgraph.NewRegistry()
	for op := range decompositions {
		if ir.Has(op) {
			t.Logf("the IR now registers %s: the importer's decomposition of it is unused", op)
		}
	}
}

func TestFunctionalTarget(t *testing.T) {
	for in, want := range map[string]string{
		"aten.relu_.default":    "aten.relu.default",
		"aten.add_.Tensor":      "aten.add.Tensor",
		"aten._softmax.default": "aten._softmax.default",
		"aten.__and__.Tensor":   "aten.__and__.Tensor",
		"aten.relu.default":     "aten.relu.default",
	} {
		if got, _ := functionalTarget(in); got != want {
			t.Errorf("functionalTarget(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestParseSymbol(t *testing.T) {
	for in, want := range map[string]string{
		"Symbol('s77', positive=True, integer=True)": "s77",
		"s0":                         "s0",
		"Symbol('u0', integer=True)": "u0",
		"2*s0":                       "",
		"Mul(Integer(2), Symbol('s0', positive=True, integer=True))": "",
	} {
		if got := parseSymbol(in); got != want {
			t.Errorf("parseSymbol(%q) = %q, want %q", in, got, want)
		}
	}
}
