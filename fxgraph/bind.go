package fxgraph

import (
	"fmt"

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
		}
	}
	return dims, nil
}
