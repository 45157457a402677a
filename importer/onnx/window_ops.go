package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// The operators on windows (values of run-time extent, window.go) other
// than Resize (window_resize.go).

// windowShape converts Shape of a window: its run-time extents.
func windowShape(c *Ctx) error {
	w, err := c.windowInput(0)
	if err != nil {
		return err
	}
	r := int64(len(w.extent))
	start, end := c.AttrInt("start", 0), c.AttrInt("end", r)
	start, end = clampAxis(start, r), clampAxis(end, r)
	var parts []any
	for k := start; k < end; k++ {
		u, err := c.Emit(fxgraph.AtenReshape, w.extent[k], []any{int64(1)})
		if err != nil {
			return err
		}
		parts = append(parts, u)
	}
	if len(parts) == 0 {
		c.SetOutput(0, c.Constant("shape", tensor.New(tensor.Int64, 0)))
		return nil
	}
	out, err := c.Emit(fxgraph.AtenCat, parts, int64(0))
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

func clampAxis(a, r int64) int64 {
	if a < 0 {
		a += r
	}
	return min(max(a, 0), r)
}

// elements returns the int64 scalars of 1-D v, n of them.
func elements(c *Ctx, v *fxgraph.Node, n int64) ([]*fxgraph.Node, error) {
	v, err := ewCastTo(c, v, tensor.Int64)
	if err != nil {
		return nil, err
	}
	out := make([]*fxgraph.Node, n)
	for j := range n {
		if out[j], err = c.Emit(fxgraph.AtenSelectInt, v, int64(0), j); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// constElement returns element j of 1-D v when it is a constant, following
// views, casts and concatenations of pieces.
func constElement(g *fxgraph.Graph, v *fxgraph.Node, j int64, depth int) (int64, bool) {
	if v == nil || depth > 32 {
		return 0, false
	}
	if t := g.ConstValue(v); t != nil {
		if j >= int64(t.NumElements()) {
			return 0, false
		}
		return t.Int64s()[j], true
	}
	arg0, _ := argNode(v, 0)
	switch v.Op {
	case fxgraph.AtenView, fxgraph.AtenReshape, fxgraph.AtenClone, fxgraph.Aten_ToCopy:
		return constElement(g, arg0, j, depth+1)
	case fxgraph.AtenCat:
		list, ok := v.Args[0].([]any)
		if !ok || Meta(v).Rank() != 1 {
			return 0, false
		}
		for _, a := range list {
			p, ok := a.(*fxgraph.Node)
			if !ok || Meta(p).Rank() != 1 || !Meta(p).Shape[0].IsStatic() {
				return 0, false
			}
			if size := Meta(p).Shape[0].Size; j >= size {
				j -= size
				continue
			}
			return constElement(g, p, j, depth+1)
		}
	}
	return 0, false
}

// staticBound returns element j of v when it is a constant, else -1.
func staticBound(g *fxgraph.Graph, v *fxgraph.Node, j int64) int64 {
	if b, ok := constElement(g, v, j, 0); ok {
		return b
	}
	return -1
}

// zerosWindow is ConstantOfShape of a run-time shape of static length.
func zerosWindow(c *Ctx) (*window, error) {
	shape, err := c.Input(0)
	if err != nil {
		return nil, err
	}
	d, ok := Meta(shape).Shape.Static()
	if !ok || len(d) != 1 || d[0] == 0 {
		return nil, nil
	}
	fill := tensor.Scalar(tensor.Float32, 0)
	if a := c.Attr("value"); a != nil && a.T != nil {
		fill = a.T
	}
	w := &window{g: c.s.g, dtype: fill.DType}
	if w.extent, err = elements(c, shape, d[0]); err != nil {
		return nil, err
	}
	for j := range d[0] {
		w.bound = append(w.bound, staticBound(c.s.g, shape, j))
	}
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		s, _ := Meta(co[0]).Shape.Static()
		return c.EmitKw(fxgraph.AtenFull, []any{ints(s), shLiteral(fill)}, map[string]any{"dtype": fill.DType})
	}
	return w, nil
}

// castWindow is Cast of a window.
func castWindow(c *Ctx) (*window, error) {
	in, err := c.windowInput(0)
	if err != nil {
		return nil, err
	}
	dt, err := ewCastDType(c.AttrInt("to", 0))
	if err != nil {
		return nil, err
	}
	w := *in
	w.dtype = dt
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		v, err := in.at(c, co)
		if err != nil {
			return nil, err
		}
		return nnCast(c, v, dt)
	}
	return &w, nil
}

// gatherWindow is Gather of a window at a constant scalar index: the axis
// dropped.
func gatherWindow(c *Ctx) (*window, error) {
	if windowOf(c.s.env[c.node.Inputs[1]]) != nil {
		return nil, Unsupported("Gather indices of run-time size")
	}
	in, err := c.windowInput(0)
	if err != nil {
		return nil, err
	}
	t := c.Const(1)
	r := len(in.extent)
	if t == nil || t.Rank() != 0 || r < 2 {
		return nil, in.why
	}
	axis, err := fxgraph.NormDim(c.AttrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	i := t.Int64s()[0]
	idx := c.ScalarConst(tensor.Int64, float64(i))
	if i < 0 {
		if idx, err = c.Emit(fxgraph.AtenAddTensor, idx, in.extent[axis]); err != nil {
			return nil, err
		}
	}
	w := &window{g: in.g, dtype: in.dtype, why: in.why}
	w.extent = append(append(w.extent, in.extent[:axis]...), in.extent[axis+1:]...)
	w.bound = append(append(w.bound, in.bound[:axis]...), in.bound[axis+1:]...)
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		s, _ := Meta(co[0]).Shape.Static()
		fixed, err := c.Emit(fxgraph.AtenExpand, idx, ints(s))
		if err != nil {
			return nil, err
		}
		full := append(append(append([]*fxgraph.Node{}, co[:axis]...), fixed), co[axis:]...)
		return in.at(c, full)
	}
	return w, nil
}

// sliceWindow is Slice (steps of 1) of a window, or of a tensor by run-time
// starts and ends.
func sliceWindow(c *Ctx) (*window, error) {
	in, err := c.windowInput(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(in.extent))
	starts, err := c.Input(1)
	if err != nil {
		return nil, err
	}
	ends, err := c.Input(2)
	if err != nil {
		return nil, err
	}
	d, ok := Meta(starts).Shape.Static()
	if !ok || len(d) != 1 {
		return nil, nil
	}
	n := d[0]
	axes := make([]int64, n)
	for j := range axes {
		axes[j] = int64(j)
	}
	if c.HasInput(3) {
		if axes, err = c.ConstInts(3); err != nil {
			return nil, err
		}
	}
	if c.HasInput(4) {
		steps, err := c.ConstInts(4)
		if err != nil {
			return nil, err
		}
		for _, st := range steps {
			if st != 1 {
				return nil, nil
			}
		}
	}
	if int64(len(axes)) != n {
		return nil, fmt.Errorf("Slice: %d axes for %d starts", len(axes), n)
	}
	ss, err := elements(c, starts, n)
	if err != nil {
		return nil, err
	}
	es, err := elements(c, ends, n)
	if err != nil {
		return nil, err
	}
	w := &window{g: in.g, dtype: in.dtype, why: in.why}
	w.extent = append([]*fxgraph.Node{}, in.extent...)
	w.bound = append([]int64{}, in.bound...)
	offset := make([]*fxgraph.Node, r)
	for j, a := range axes {
		k, err := fxgraph.NormDim(a, int(r))
		if err != nil {
			return nil, err
		}
		var ext *fxgraph.Node
		if offset[k], ext, err = sliceAxis(c, ss[j], es[j], in.extent[k]); err != nil {
			return nil, err
		}
		w.extent[k] = ext
		w.bound[k] = windowSliceBound(in.bound[k], staticBound(c.s.g, starts, int64(j)), staticBound(c.s.g, ends, int64(j)))
	}
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		moved := append([]*fxgraph.Node{}, co...)
		for k, o := range offset {
			if o == nil {
				continue
			}
			var err error
			if moved[k], err = c.Emit(fxgraph.AtenAddTensor, co[k], o); err != nil {
				return nil, err
			}
		}
		return in.at(c, moved)
	}
	return w, nil
}

// sliceAxis returns the first index and the size of ONNX Slice(start, end)
// along an axis of run-time size size.
func sliceAxis(c *Ctx, start, end, size *fxgraph.Node) (first, ext *fxgraph.Node, err error) {
	wrap := func(v *fxgraph.Node) (*fxgraph.Node, error) {
		neg, err := c.Emit(fxgraph.AtenLtScalar, v, int64(0))
		if err != nil {
			return nil, err
		}
		plus, err := c.Emit(fxgraph.AtenAddTensor, v, size)
		if err != nil {
			return nil, err
		}
		v, err = c.Emit(fxgraph.AtenWhereSelf, neg, plus, v)
		if err != nil {
			return nil, err
		}
		if v, err = c.Emit(fxgraph.AtenMaximum, v, c.ScalarConst(tensor.Int64, 0)); err != nil {
			return nil, err
		}
		return c.Emit(fxgraph.AtenMinimum, v, size)
	}
	if first, err = wrap(start); err != nil {
		return nil, nil, err
	}
	last, err := wrap(end)
	if err != nil {
		return nil, nil, err
	}
	if ext, err = c.Emit(fxgraph.AtenSubTensor, last, first); err != nil {
		return nil, nil, err
	}
	ext, err = c.Emit(fxgraph.AtenMaximum, ext, c.ScalarConst(tensor.Int64, 0))
	return first, ext, err
}

// windowSliceBound is the static bound of a slice's size: the input's bound less
// a constant start, at most a constant end less the start (-1 for
// unknown).
func windowSliceBound(in, start, end int64) int64 {
	if start < 0 {
		start = 0 // a run-time or negative start: at least 0 after wrapping
	}
	b := int64(-1)
	if in >= 0 {
		b = max(in-start, 0)
	}
	if end >= 0 && end < math.MaxInt32 && (b < 0 || end-start < b) { // INT64_MAX: "to the end"
		b = max(end-start, 0)
	}
	return b
}

// concatWindow is Concat of windows and tensors.
func concatWindow(c *Ctx) (*window, error) {
	var parts []*window
	for i := range c.node.Inputs {
		if !c.HasInput(i) {
			continue
		}
		p, err := c.windowInput(i)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	r := len(parts[0].extent)
	axis, err := fxgraph.NormDim(c.AttrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	w := &window{g: c.s.g, dtype: parts[0].dtype, extent: append([]*fxgraph.Node{}, parts[0].extent...), bound: make([]int64, r)}
	offsets := make([]*fxgraph.Node, len(parts))
	offsets[0] = c.ScalarConst(tensor.Int64, 0)
	sum := int64(0)
	for k := range w.bound {
		w.bound[k] = -1
	}
	for i, p := range parts {
		if len(p.extent) != r {
			return nil, fmt.Errorf("Concat of ranks %d and %d", r, len(p.extent))
		}
		if w.why == nil {
			w.why = p.why
		}
		for k, b := range p.bound {
			if k != axis && b >= 0 && (w.bound[k] < 0 || b < w.bound[k]) {
				w.bound[k] = b
			}
		}
		if sum >= 0 && p.bound[axis] >= 0 {
			sum += p.bound[axis]
		} else {
			sum = -1
		}
		if i > 0 {
			if offsets[i], err = c.Emit(fxgraph.AtenAddTensor, offsets[i-1], parts[i-1].extent[axis]); err != nil {
				return nil, err
			}
		}
	}
	w.bound[axis] = sum
	if w.extent[axis], err = c.Emit(fxgraph.AtenAddTensor, offsets[len(parts)-1], parts[len(parts)-1].extent[axis]); err != nil {
		return nil, err
	}
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		var out *fxgraph.Node
		for i, p := range parts {
			moved := append([]*fxgraph.Node{}, co...)
			var err error
			if moved[axis], err = c.Emit(fxgraph.AtenSubTensor, co[axis], offsets[i]); err != nil {
				return nil, err
			}
			v, err := p.at(c, moved)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = v
				continue
			}
			past, err := c.Emit(fxgraph.AtenGeTensor, co[axis], offsets[i])
			if err != nil {
				return nil, err
			}
			if out, err = c.Emit(fxgraph.AtenWhereSelf, past, v, out); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return w, nil
}
