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
// -bench filters) checks that they lowered a node of every target with a
// rule: every op has at least one lowering test, and the tests that lower
// ops run them on the PJRT plugin.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.bench").Value.String() == "" {
		var never []string
		for _, target := range lower.NewRegistry().Targets() {
			if _, ok := lower.LoweredTargets.Load(target); !ok {
				never = append(never, target)
			}
		}
		if len(never) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test of package lower lowers a node of: %s\n", strings.Join(never, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

// TestEveryOpHasARule checks that the IR and the lowering agree on the set
// of operators: every op fxgraph knows (with its shape rule) has a lowering
// rule, and every lowering rule is for an op fxgraph knows.
func TestEveryOpHasARule(t *testing.T) {
	ir, rules := fxgraph.NewRegistry(), lower.NewRegistry()
	for _, target := range ir.Targets() {
		if _, ok := rules.Lookup(target); !ok {
			t.Errorf("IR op %s has no lowering rule (add one with Registry.Register in package lower)", target)
		}
	}
	for _, target := range rules.Targets() {
		if _, ok := ir.Lookup(target); !ok {
			t.Errorf("lowering rule for %s, which the IR does not know (no shape rule in fxgraph)", target)
		}
	}
}
