package fx

import (
	"math"
	"slices"

	"github.com/xserve/xserve/fxgraph"
)

// viewStep records how a view value was taken from its base (slice.Tensor
// or select.int), so that an in-place write into the view can be written
// back into the base the way functionalization does (slice_scatter,
// select_scatter): x = new_zeros(...); x[:, a:b] = v (slice then fill_)
// keeps x's new contents.
type viewStep struct {
	base     string // the archive name of the base value
	isSelect bool   // select.int (index) rather than slice.Tensor (start:end)
	dim      int64
	start    any // slice start (nil: 0) or select index
	end      any // slice end (nil: the dim's size)
	step     any // slice step
}

// recordView remembers the step of a slice or select call.
func (c *call) recordView() {
	if len(c.outs) != 1 || c.outs[0] == "" {
		return
	}
	base := c.refs[c.selfArg()]
	if base == "" {
		return
	}
	d, ok := fxgraph.AsInt(c.arg("dim"))
	if !ok {
		return
	}
	switch c.op {
	case fxgraph.AtenSliceTensor:
		c.b.views[c.outs[0]] = viewStep{base: base, dim: d, start: c.arg("start"), end: c.arg("end"), step: c.arg("step")}
	case fxgraph.AtenSelectInt:
		c.b.views[c.outs[0]] = viewStep{base: base, isSelect: true, dim: d, start: c.arg("index")}
	}
}

// writeBack writes the new value res of the view selfName back through its
// chain of slice/select steps into the chain's root, rebinding every name
// of the chain. It fails, naming the value, when a value sharing memory
// with selfName that is not on the chain (a sibling view taken before the
// write) is read later, or when the root is a parameter or buffer.
func (c *call) writeBack(selfName string, res *fxgraph.Node, later []string) error {
	chain := []string{selfName}
	for name := selfName; ; {
		v, ok := c.b.views[name]
		if !ok {
			break
		}
		name = v.base
		chain = append(chain, name)
	}
	for _, m := range later {
		if !slices.Contains(chain, m) {
			return c.errorf(ErrUnsupported, "in-place %s writes %s, which shares memory with %s, read later; export with ep.run_decompositions() so that torch functionalizes the program",
				c.n.Target, selfName, m)
		}
	}
	root, ok := c.b.env[chain[len(chain)-1]].(*fxgraph.Node)
	if !ok || c.b.state[root] {
		return c.errorf(ErrUnsupported, "in-place %s writes into %s (%s); xserve serves stateless programs: export without state updates",
			c.n.Target, chain[len(chain)-1], fxgraph.FormatArg(c.b.env[chain[len(chain)-1]]))
	}
	val := res
	for i, name := range chain[:len(chain)-1] {
		c.b.rebind(name, val)
		v := c.b.views[name]
		base, ok := c.b.env[chain[i+1]].(*fxgraph.Node)
		if !ok {
			return c.errorf(ErrFormat, "view base %s is not a tensor", chain[i+1])
		}
		var err error
		if val, err = c.scatterStep(base, val, v); err != nil {
			return err
		}
	}
	c.b.rebind(chain[len(chain)-1], val)
	return nil
}

// scatterStep puts src into base where step's view of base lies.
func (c *call) scatterStep(base, src *fxgraph.Node, v viewStep) (*fxgraph.Node, error) {
	k, err := fxgraph.NormDim(v.dim, base.Val().Rank())
	if err != nil {
		return nil, c.errorf(ErrFormat, "view dim %d of %s", v.dim, base.Val())
	}
	size := base.Val().Shape[k]
	if !size.IsStatic() {
		return c.scatterSymbolic(base, src, k, v)
	}
	norm := func(x any, def int64) (int64, bool) {
		if x == nil {
			return def, true
		}
		i, ok := fxgraph.AsInt(x)
		if !ok {
			return 0, false
		}
		if i < 0 {
			i += size.Size
		}
		return min(max(i, 0), size.Size), true
	}
	start, ok1 := norm(v.start, 0)
	end, ok2 := norm(v.end, size.Size)
	step, ok3 := int64(1), true
	if v.step != nil {
		step, ok3 = fxgraph.AsInt(v.step)
	}
	if !ok1 || !ok2 || !ok3 || step != 1 {
		return nil, c.errorf(ErrUnsupported, "writing into a view of %s with symbolic bounds or a step other than 1", base.Val())
	}
	if v.isSelect {
		end = start + 1
		if src, err = c.emit("", fxgraph.AtenUnsqueeze, []any{src, int64(k)}, nil); err != nil {
			return nil, err
		}
	}
	return c.sliceScatter(base, src, k, start, max(end, start))
}

// sliceScatter is base with src in place of base[start:end] along static
// dim k: a cat of the slices around src.
func (c *call) sliceScatter(base, src *fxgraph.Node, k int, start, end int64) (*fxgraph.Node, error) {
	size := base.Val().Shape[k].Size
	var err error
	if src.Val().DType != base.Val().DType {
		if src, err = c.emit("", fxgraph.Aten_ToCopy, []any{src}, map[string]any{"dtype": base.Val().DType}); err != nil {
			return nil, err
		}
	}
	var parts []any
	if start > 0 {
		p, err := c.emit("", fxgraph.AtenSliceTensor, []any{base, int64(k), int64(0), start, int64(1)}, nil)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	parts = append(parts, src)
	if end < size {
		p, err := c.emit("", fxgraph.AtenSliceTensor, []any{base, int64(k), end, size, int64(1)}, nil)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		return src, nil
	}
	return c.emit("", fxgraph.AtenCat, []any{parts, int64(k)}, nil)
}

// scatterSymbolic writes src into a view along a symbolic dim: a slice
// from a non-negative start to the end (x[:, a:] += y) or a select at a
// non-negative index, as a cat of the static-bounded slices around src.
func (c *call) scatterSymbolic(base, src *fxgraph.Node, k int, v viewStep) (*fxgraph.Node, error) {
	start, ok := int64(0), true
	if v.start != nil {
		start, ok = fxgraph.AsInt(v.start)
	}
	toEnd := v.end == nil
	if e, isInt := fxgraph.AsInt(v.end); isInt && e >= math.MaxInt32 {
		toEnd = true
	}
	step, okStep := int64(1), true
	if v.step != nil {
		step, okStep = fxgraph.AsInt(v.step)
	}
	if !ok || start < 0 || !okStep || step != 1 || (!v.isSelect && !toEnd) {
		return nil, c.errorf(ErrUnsupported, "writing into a view along symbolic dim %d of %s (only x[a:] and x[i] with a static non-negative a, i are supported)", k, base.Val())
	}
	var err error
	emit := func(op *fxgraph.Op, kw map[string]any, args ...any) *fxgraph.Node {
		var n *fxgraph.Node
		if err == nil {
			n, err = c.emit("", op, args, kw)
		}
		return n
	}
	if src.Val().DType != base.Val().DType {
		src = emit(fxgraph.Aten_ToCopy, map[string]any{"dtype": base.Val().DType}, src)
	}
	var parts []any
	if start > 0 {
		parts = append(parts, emit(fxgraph.AtenSliceTensor, nil, base, int64(k), int64(0), start, int64(1)))
	}
	if v.isSelect {
		parts = append(parts, emit(fxgraph.AtenUnsqueeze, nil, src, int64(k)),
			emit(fxgraph.AtenSliceTensor, nil, base, int64(k), start+1, int64(math.MaxInt64), int64(1)))
	} else {
		parts = append(parts, src)
	}
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return src, nil
	}
	return c.emit("", fxgraph.AtenCat, []any{parts, int64(k)}, nil)
}
