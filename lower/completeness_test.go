package lower_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
)

// TestMain runs the package's tests, then (on a full run, without -run or
// -bench filters) walks every op of the IR and checks that the tests lowered
// a node of it: every op has at least one lowering test, and the tests that
// lower ops run them on the PJRT plugin.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.bench").Value.String() == "" {
		var never []string
		for _, op := range fxgraph.Ops() {
			if _, ok := lower.LoweredOps.Load(op); !ok && !op.Host {
				never = append(never, op.Name)
			}
		}
		if len(never) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test of package lower lowers a node of: %s\n", strings.Join(never, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

// TestEveryOpIsComplete walks every op of the IR (fxgraph.Ops) and checks
// that it has a shape rule and a lowering rule (host ops, which the program
// never holds, an Eval instead), and that every lowering rule is for an op
// of the IR. (That each op is lowered and run on PJRT by
// some test is checked by TestMain after the whole package ran.)
func TestEveryOpIsComplete(t *testing.T) {
	rules := lower.NewRegistry()
	known := map[*fxgraph.Op]bool{}
	for _, op := range fxgraph.Ops() {
		known[op] = true
		if op.Shape == nil {
			t.Errorf("op %s has no shape rule (set Op.Shape in package fxgraph)", op.Name)
		}
		_, ok := rules.Lookup(op)
		switch {
		case op.Host && ok:
			t.Errorf("op %s runs on the host (Op.Host) but has a lowering rule", op.Name)
		case op.Host && op.Eval == nil:
			t.Errorf("op %s runs on the host (Op.Host) but has no Eval", op.Name)
		case !op.Host && !ok:
			t.Errorf("op %s has no lowering rule (add one with Registry.Register in package lower)", op.Name)
		}
		if got, ok := fxgraph.OpByName(op.Name); !ok || got != op {
			t.Errorf("op %s is not what fxgraph.OpByName(%q) returns", op.Name, op.Name)
		}
	}
	for _, op := range rules.Ops() {
		if !known[op] {
			t.Errorf("lowering rule for %s, which is not an op of the IR (fxgraph.Ops)", op.Name)
		}
	}
}
