package fx

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
)

// TestSchemasCover checks that the generated schema table covers every
// operator the importer decomposes and every ATen target of the IR, so
// that arguments given by keyword land in their ATen position.
func TestSchemasCover(t *testing.T) {
	for target := range decompositions {
		if _, ok := atenSchemas[target]; !ok {
			t.Errorf("decomposed %s has no schema (add it to EXTRA in gen_schemas.py)", target)
		}
	}
	for _, target := range fxgraph.NewRegistry().Targets() {
		if !strings.HasPrefix(target, "aten.") {
			continue
		}
		if _, ok := atenSchemas[target]; !ok {
			// Not fatal: the serialized argument kinds still place the
			// arguments of archives written by torch >= 2.6.
			t.Logf("IR target %s has no schema (add it to EXTRA in gen_schemas.py)", target)
		}
	}
}

// TestDecompositionsDefer checks that no decomposition shadows an IR
// operator: the IR's own operator is used when it exists, so such an
// entry would be dead code to delete.
func TestDecompositionsDefer(t *testing.T) {
	ir := fxgraph.NewRegistry()
	for target := range decompositions {
		if _, ok := ir.Lookup(target); ok {
			t.Logf("the IR now registers %s: the importer's decomposition of it is unused", target)
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
