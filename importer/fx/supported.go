package fx

import (
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/decomp"
)

// Supports reports whether the importer converts calls of target, an
// operator as torch.export writes it ("torch.ops.aten.relu_.default" or
// "aten.relu_.default"): through the IR operator of the same name, one of
// the importer's decompositions, an in-place variant of either, the
// runtime checks it drops, the operators on symbolic sizes, or the
// higher-order cond and while_loop. Support for a target does not promise
// support for every argument (a decomposition may still refuse one).
func Supports(target string) bool {
	return supports(fxgraph.NewRegistry(), target)
}

func supports(ir *fxgraph.Registry, target string) bool {
	full := target
	if !strings.HasPrefix(full, "torch.ops.") && (strings.HasPrefix(full, "aten.") || strings.HasPrefix(full, "higher_order.")) {
		full = "torch.ops." + full
	}
	switch {
	case skipTargets[full], symOps[target] != nil, higherOrderSupported(full):
		return true
	case !strings.HasPrefix(full, "torch.ops.aten."):
		return false
	}
	functional, _ := functionalTarget(strings.TrimPrefix(full, "torch.ops."))
	op, known := fxgraph.OpByName(functional)
	if !known {
		return false
	}
	_, ok := decomp.Lookup(op)
	return ok || ir.Has(op)
}

// higherOrderSupported reports whether target is a higher-order operator
// convertNode converts (control flow, map, wrapped regions).
func higherOrderSupported(target string) bool {
	switch target {
	case "torch.ops.higher_order.cond", "torch.ops.higher_order.while_loop", "torch.ops.higher_order.map_impl":
		return true
	}
	return wrapTargets[target] > 0
}
