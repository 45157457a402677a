package lower

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/xserve/xserve/lower/stablehlo"
)

// Finding is one thing a program uses that its platform lacks or runs
// slowly.
type Finding struct {
	// Lacks is true when the platform cannot run it; false when it runs
	// slowly.
	Lacks bool
	// What names it: "custom call xserve_conv_f32", "f64 values",
	// "i64 arithmetic".
	What string
	// Count is how many ops (or values) use it.
	Count int
}

func (f Finding) String() string {
	how := "slow"
	if f.Lacks {
		how = "lacks"
	}
	return fmt.Sprintf("%s\t%s\t%d", how, f.What, f.Count)
}

// Check lists what a program with usage u uses that platform p lacks or
// runs slowly: custom calls it does not provide (host callbacks named as
// such), element types it cannot hold, and arithmetic on element types it
// computes slowly. The things it lacks come first.
func (p *Platform) Check(u stablehlo.Usage) []Finding {
	var out []Finding
	for target, n := range u.CustomCalls {
		if slices.Contains(p.CustomCalls, target) {
			continue
		}
		what := "custom call " + target
		if strings.Contains(target, "callback") {
			what = "host callback " + target
		}
		out = append(out, Finding{Lacks: true, What: what, Count: n})
	}
	for _, e := range p.Lacks {
		if n := u.Values[e]; n > 0 {
			out = append(out, Finding{Lacks: true, What: e.String() + " values", Count: n})
		}
	}
	for _, e := range p.Slow {
		if n := u.Compute[e]; n > 0 {
			out = append(out, Finding{What: e.String() + " arithmetic", Count: n})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Lacks != out[j].Lacks {
			return out[i].Lacks
		}
		return out[i].What < out[j].What
	})
	return out
}
