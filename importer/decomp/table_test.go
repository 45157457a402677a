package decomp

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
