package fx

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/importer/decomp"
)

// UnsupportedOp is one operator of an exported program that the importer
// cannot convert, with every node that calls it.
type UnsupportedOp struct {
	Target string   // e.g. "aten.__and__.Tensor" or "torch.ops.mylib.op.default"
	Nodes  []string // node names
}

// UnsupportedOpsFile lists every operator of the .pt2 archive at path that
// neither the IR nor the importer's decompositions handle (custom operators
// and higher-order operators other than cond and while_loop included),
// sorted by target. It reads the program without importing it, so it
// reports them all at once; an operator it does not list may still fail on
// particular arguments, which only ImportFile finds.
func UnsupportedOpsFile(path string) ([]UnsupportedOp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fx: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fx: %w", err)
	}
	a, err := openArchive(f, fi.Size())
	if err != nil {
		return nil, err
	}
	b, err := newBuilder(a)
	if err != nil {
		return nil, err
	}
	if err := b.readProgram(); err != nil {
		return nil, err
	}
	found := map[string]*UnsupportedOp{}
	for _, n := range b.gr.Nodes {
		target := n.Target
		if b.targetSupported(target) {
			continue
		}
		if t, ok := strings.CutPrefix(target, "torch.ops."); ok && strings.HasPrefix(t, "aten.") {
			target = t
		}
		u := found[target]
		if u == nil {
			u = &UnsupportedOp{Target: target}
			found[target] = u
		}
		name := "?"
		if n.Name != nil {
			name = *n.Name
		} else if outs, err := outputNames(&n); err == nil && len(outs) > 0 {
			name = outs[0]
		}
		u.Nodes = append(u.Nodes, name)
	}
	out := make([]UnsupportedOp, 0, len(found))
	for _, u := range found {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out, nil
}

// targetSupported mirrors convertNode's dispatch on the target alone.
func (b *builder) targetSupported(target string) bool {
	switch {
	case skipTargets[target], higherOrderSupported(target):
		return true
	case symOps[target] != nil:
		return true
	case strings.HasPrefix(target, "torch.ops.aten."):
		functional, _ := functionalTarget(strings.TrimPrefix(target, "torch.ops."))
		op, known := fxgraph.OpByName(functional)
		if !known {
			return false
		}
		_, ok := decomp.Lookup(op)
		return ok || b.ir.Has(op)
	}
	return false
}
