package fxgraph

import (
	"fmt"
	"sort"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// BindDims checks inputs (one per placeholder, in order) against the
// graph's input metas and returns the size each symbol takes. A dtype or
// rank mismatch, a static dim that differs, or a symbol bound to two sizes
// is an error naming the input and dim.
func (g *Graph) BindDims(inputs []*tensor.Tensor) (map[string]int64, error) {
	ph := g.Placeholders()
	if len(inputs) != len(ph) {
		return nil, fmt.Errorf("got %d inputs, the model has %d", len(inputs), len(ph))
	}
	dims := map[string]int64{}
	from := map[string]string{}
	for i, p := range ph {
		m := p.Val()
		t := inputs[i]
		if t.DType != m.DType {
			return nil, fmt.Errorf("input %s is %s, the model wants %s", p.Target, t.DType, m.DType)
		}
		if len(t.Shape) != len(m.Shape) {
			return nil, fmt.Errorf("input %s has shape %v, the model wants rank %d %s", p.Target, t.Shape, len(m.Shape), m.Shape)
		}
		for j, d := range m.Shape {
			got := t.Shape[j]
			if d.IsStatic() {
				if d.Size != got {
					return nil, fmt.Errorf("input %s dim %d is %d, the model wants %d", p.Target, j, got, d.Size)
				}
				continue
			}
			if prev, ok := dims[d.Sym]; ok && prev != got {
				return nil, fmt.Errorf("input %s dim %d (%s) is %d, but %s is %d in another input", p.Target, j, d.Sym, got, d.Sym, prev)
			}
			dims[d.Sym] = got
			if _, ok := from[d.Sym]; !ok {
				from[d.Sym] = fmt.Sprintf("input %s dim %d", p.Target, j)
			}
		}
	}
	if err := g.checkDerived(dims, from); err != nil {
		return nil, err
	}
	return dims, nil
}

// checkDerived checks each bound derived symbol (SymbolExprs) against its
// expression of the plain symbols; a plain symbol that no input carries as
// such is solved from the derived one where the expression allows (s + c,
// c * s).
func (g *Graph) checkDerived(dims map[string]int64, from map[string]string) error {
	for _, name := range sortedExprNames(g.SymbolExprs) {
		e := g.SymbolExprs[name]
		got, ok := dims[name]
		if !ok {
			continue
		}
		for _, s := range e.Symbols() {
			if _, bound := dims[s]; bound {
				continue
			}
			sym, v, solved := e.Solve(got)
			if !solved || sym != s {
				return fmt.Errorf("%s is %s, whose symbol %s no input gives as a plain dim", from[name], e, s)
			}
			dims[s], from[s] = v, from[name]
		}
		want, err := e.Eval(dims)
		if err != nil {
			return err
		}
		if want != got {
			var parts []string
			for _, s := range e.Symbols() {
				parts = append(parts, fmt.Sprintf("%s = %d from %s", s, dims[s], from[s]))
			}
			return fmt.Errorf("%s (%s) is %d, but %s is %d (%s)", from[name], e, got, e, want, strings.Join(parts, ", "))
		}
	}
	return nil
}

func sortedExprNames(m map[string]*SymExpr) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
