package onnx

import (
	"errors"
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Values whose sizes follow the data (docs/DATA-DEPENDENT.md, "Values of
// run-time extent").
//
// torchvision's Mask R-CNN pastes each mask into the image in a Loop body
// that resizes the mask to its box's size, slices it by the box's corners
// clipped to the image and pads it with zeros back to the image size: the
// values in between have sizes computed from the box, along two axes, and
// only the body's result has a static shape. Such a value is held as a
// window: its run-time extent along each axis and a function giving its
// elements at integer coordinates. Resize, Slice and ConstantOfShape make
// windows where their sizes are run-time values; Gather, Slice, Concat and
// Cast compose them and Shape reads their extents. A window becomes a
// tensor once every axis has a static bound (a Slice to a constant end):
// its function evaluated over the bound's coordinates, zero beyond the
// extent, with a run-time guard that the extent reached the bound (a value
// that falls short would have another shape in ONNX Runtime).

// winMarker is the Target of the env entries that stand for windows.
const winMarker = "onnx.window"

// window is a value of run-time extent.
type window struct {
	g      *fxgraph.Graph
	dtype  tensor.DType
	extent []*fxgraph.Node // int64 scalars, one per axis
	bound  []int64         // static upper bound per axis, -1 where none
	// at returns the elements at the integer coordinates co (int64 tensors
	// of one shape, one per axis), anything where a coordinate is outside
	// [0, extent); it must not fail for any coordinate.
	at func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error)
	// why is the error of the operator that made the window without static
	// sizes: returned where the window is used as a tensor.
	why error
}

func newWindowMarker(w *window) *fxgraph.Node {
	return &fxgraph.Node{Opcode: fxgraph.CallFunction, Name: "window", Target: winMarker, Kwargs: map[string]any{"window": w}}
}

// windowOf returns the window n stands for, or nil.
func windowOf(n *fxgraph.Node) *window {
	if n == nil || n.Graph() != nil || n.Target != winMarker {
		return nil
	}
	w, _ := n.Kwargs["window"].(*window)
	return w
}

// windowSources make windows of operators whose output sizes are run-time
// values; windowOps take windows as inputs.
var (
	windowSources = map[string]func(c *Ctx) (*window, error){
		"Resize":          resizeWindow,
		"ConstantOfShape": zerosWindow,
		"Slice":           sliceWindow,
	}
	windowOps = map[string]func(c *Ctx) (*window, error){
		"Slice":  sliceWindow,
		"Gather": gatherWindow,
		"Concat": concatWindow,
		"Cast":   castWindow,
	}
)

// windowed reports whether node takes a window where windowOps (or Shape)
// can, or may make one. Windows are made only in a while_loop body, where
// no value can be given at compile time (elsewhere NeedsValueError lets the
// caller compile for the values).
func (s *scope) windowed(node *Node) bool {
	if !s.carriesGuards {
		return false
	}
	if s.takesWindow(node) {
		_, ok := windowOps[node.OpType]
		return ok || node.OpType == "Shape"
	}
	_, ok := windowSources[node.OpType]
	return ok
}

// convertWindowed converts a node windowed accepts. A window source
// converts as usual unless that fails for want of a value known at compile
// time; then it makes a window if it can, or reports that failure. (Other
// operators given a window fail in Ctx.Input with the window's cause.)
func (s *scope) convertWindowed(c *Ctx, node *Node, conv Converter) error {
	if s.takesWindow(node) {
		if node.OpType == "Shape" {
			return windowShape(c)
		}
		w, err := windowOps[node.OpType](c)
		if err != nil {
			return err
		}
		if w == nil {
			return Unsupported("%s of a value of run-time size with these operands", node.OpType)
		}
		return c.setWindow(w)
	}
	err := conv(c, node)
	var nv *NeedsValueError
	if err == nil || !errors.As(err, &nv) {
		return err
	}
	w, werr := windowSources[node.OpType](c)
	if werr != nil || w == nil {
		return err
	}
	w.why = err
	return c.setWindow(w)
}

func (s *scope) takesWindow(node *Node) bool {
	for _, name := range node.Inputs {
		if windowOf(s.env[name]) != nil {
			return true
		}
	}
	return false
}

// windowInput returns input i as a window: a window, or a tensor of static
// shape read at its coordinates.
func (c *Ctx) windowInput(i int) (*window, error) {
	if !c.HasInput(i) {
		return nil, fmt.Errorf("input %d is required", i)
	}
	if w := windowOf(c.s.env[c.node.Inputs[i]]); w != nil {
		if w.g != c.s.g {
			return nil, w.why
		}
		return w, nil
	}
	x, err := c.Input(i)
	if err != nil {
		return nil, err
	}
	return tensorWindow(c, x)
}

// tensorWindow is x (static shape) as a window.
func tensorWindow(c *Ctx, x *fxgraph.Node) (*window, error) {
	d, ok := Meta(x).Shape.Static()
	if !ok {
		return nil, Unsupported("a value of symbolic shape %s with one of run-time size", Meta(x).Shape)
	}
	w := &window{g: c.s.g, dtype: Meta(x).DType, bound: d}
	for _, n := range d {
		w.extent = append(w.extent, c.ScalarConst(tensor.Int64, float64(n)))
	}
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		return gatherAt(c, x, co)
	}
	return w, nil
}

// gatherAt reads x (static shape d) at integer coordinates co, clamped into
// x.
func gatherAt(c *Ctx, x *fxgraph.Node, co []*fxgraph.Node) (*fxgraph.Node, error) {
	d, _ := Meta(x).Shape.Static()
	flat, err := c.Emit(fxgraph.AtenReshape, x, []any{int64(-1)})
	if err != nil {
		return nil, err
	}
	var idx *fxgraph.Node
	for k, ck := range co {
		cl, err := c.Emit(fxgraph.AtenClamp, ck, int64(0), d[k]-1)
		if err != nil {
			return nil, err
		}
		if idx == nil {
			idx = cl
			continue
		}
		if idx, err = c.Emit(fxgraph.AtenMulScalar, idx, d[k]); err != nil {
			return nil, err
		}
		if idx, err = c.Emit(fxgraph.AtenAddTensor, idx, cl); err != nil {
			return nil, err
		}
	}
	if idx == nil { // a scalar
		return c.Emit(fxgraph.AtenExpand, x, ints(nil))
	}
	shape := Meta(idx).Shape
	lin, err := c.Emit(fxgraph.AtenReshape, idx, []any{int64(-1)})
	if err != nil {
		return nil, err
	}
	g, err := c.Emit(fxgraph.AtenIndexSelect, flat, int64(0), lin)
	if err != nil {
		return nil, err
	}
	s, _ := shape.Static()
	return c.Emit(fxgraph.AtenReshape, g, ints(s))
}

// setWindow binds the node's output to w, or to the tensor it becomes when
// every axis has a static bound.
func (c *Ctx) setWindow(w *window) error {
	for _, b := range w.bound {
		if b < 0 {
			c.s.env[c.node.Outputs[0]] = newWindowMarker(w)
			return nil
		}
	}
	t, err := c.materialize(w)
	if err != nil {
		return err
	}
	c.SetOutput(0, t)
	return nil
}

// materialize evaluates w over the coordinates of its bound, zero beyond
// its extent, and guards that the extent is the bound.
func (c *Ctx) materialize(w *window) (*fxgraph.Node, error) {
	r := len(w.bound)
	co := make([]*fxgraph.Node, r)
	var inside, short *fxgraph.Node
	for k := range r {
		p := positions(c, w.bound[k], k, r)
		var err error
		if co[k], err = c.Emit(fxgraph.AtenExpand, p, ints(w.bound)); err != nil {
			return nil, err
		}
		in, err := c.Emit(fxgraph.AtenLtTensor, p, w.extent[k])
		if err != nil {
			return nil, err
		}
		ne, err := c.Emit(fxgraph.AtenNeScalar, w.extent[k], w.bound[k])
		if err != nil {
			return nil, err
		}
		if inside, err = orAnd(c, fxgraph.AtenLogicalAnd, inside, in); err != nil {
			return nil, err
		}
		if short, err = orAnd(c, fxgraph.AtenLogicalOr, short, ne); err != nil {
			return nil, err
		}
	}
	v, err := w.at(c, co)
	if err != nil {
		return nil, err
	}
	if inside == nil { // rank 0
		return v, nil
	}
	if v, err = c.Emit(fxgraph.AtenWhereSelf, inside, v, c.ScalarConst(w.dtype, 0)); err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("node %q: a value of run-time size (%v) is smaller than the %v it is used at", c.node.Name, w.why, w.bound)
	if err := c.s.addWindowGuard(short, msg); err != nil {
		return nil, err
	}
	return v, nil
}

func orAnd(c *Ctx, op *fxgraph.Op, acc, v *fxgraph.Node) (*fxgraph.Node, error) {
	if acc == nil {
		return v, nil
	}
	return c.Emit(op, acc, v)
}

// addWindowGuard records a run-time check that fails the run when short is
// true: a guard of the main graph, or, in a loop body, a flag the loop
// carries out (windowGuards) to its scope.
func (s *scope) addWindowGuard(short *fxgraph.Node, message string) error {
	switch {
	case s.guards != nil:
		*s.guards = append(*s.guards, guardValue{node: short, message: message})
	case s.carriesGuards:
		s.windowGuards = append(s.windowGuards, guardValue{node: short, message: message})
	default:
		return Unsupported("a value of run-time size used at a static size inside a subgraph that cannot check it at run time (%s)", message)
	}
	return nil
}

// orGuards returns flag or any of the guards' nodes.
func orGuards(e fxgraph.Emitter, flag *fxgraph.Node, guards []guardValue) (*fxgraph.Node, error) {
	for _, g := range guards {
		var err error
		if flag, err = e.Emit("", fxgraph.AtenLogicalOr, []any{flag, g.node}, nil); err != nil {
			return nil, err
		}
	}
	return flag, nil
}

// mayMakeWindows reports whether gr (or a subgraph of its nodes) has a
// window source.
func mayMakeWindows(gr *Graph) bool {
	for _, n := range gr.Nodes {
		if _, ok := windowSources[n.OpType]; ok {
			return true
		}
		for _, a := range n.Attributes {
			if a.G != nil && mayMakeWindows(a.G) {
				return true
			}
			for _, g := range a.Graphs {
				if mayMakeWindows(g) {
					return true
				}
			}
		}
	}
	return false
}

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

// resizeWindow is Resize (linear, half_pixel or pytorch_half_pixel) of a
// float32 tensor of static shape to run-time sizes along its last two
// axes, with ONNX Runtime's bilinear arithmetic (upsample.cc): the source
// coordinate per output index in float32, clamped into the input, the two
// neighbours' weights |in - i1| and |in - i2| (both 0.5 where the
// neighbours coincide), and the four products summed in ORT's order.
func resizeWindow(c *Ctx) (*window, error) {
	coord := c.AttrString("coordinate_transformation_mode", "half_pixel")
	if c.Opset < 11 || c.AttrString("mode", "nearest") != "linear" || (coord != "half_pixel" && coord != "pytorch_half_pixel") ||
		c.AttrInt("antialias", 0) != 0 || c.Attr("axes") != nil || c.AttrString("keep_aspect_ratio_policy", "stretch") != "stretch" ||
		!c.HasInput(3) || c.HasInput(2) && c.Const(2) != nil && c.Const(2).NumElements() != 0 {
		return nil, nil
	}
	x, err := c.Input(0)
	if err != nil {
		return nil, err
	}
	d, ok := Meta(x).Shape.Static()
	sizes, err := c.Input(3)
	if err != nil || !ok || len(d) < 2 || Meta(x).DType != tensor.Float32 {
		return nil, err
	}
	r := len(d)
	w := &window{g: c.s.g, dtype: tensor.Float32, bound: make([]int64, r)}
	if w.extent, err = elements(c, sizes, int64(r)); err != nil {
		return nil, err
	}
	for k := range r {
		w.bound[k] = staticBound(c.s.g, sizes, int64(k))
		if k < r-2 && w.bound[k] != d[k] {
			return nil, nil // ORT interpolates other axes another way
		}
	}
	var axes [2]*linearAxis
	for j := range axes {
		k := r - 2 + j
		if axes[j], err = newLinearAxis(c, w.extent[k], d[k], coord == "pytorch_half_pixel"); err != nil {
			return nil, err
		}
	}
	w.at = func(c *Ctx, co []*fxgraph.Node) (*fxgraph.Node, error) {
		return bilinearAt(c, x, co, axes)
	}
	return w, nil
}

// linearAxis is one interpolated axis of Resize: input size n, output size
// out (run time), scale out/n in float32.
type linearAxis struct {
	n        int64
	out      *fxgraph.Node
	scale    *fxgraph.Node
	pytorchH bool
}

func newLinearAxis(c *Ctx, out *fxgraph.Node, n int64, pytorch bool) (*linearAxis, error) {
	of, err := nnCast(c, out, tensor.Float32)
	if err != nil {
		return nil, err
	}
	scale, err := ieeeDivide(c, of, c.ScalarConst(tensor.Float32, float64(n)))
	if err != nil {
		return nil, err
	}
	return &linearAxis{n: n, out: out, scale: scale, pytorchH: pytorch}, nil
}

// taps returns, per output index i (int64), the two input indices and
// their weights: i1, i2, d1 = |in - i1|, d2 = |in - i2|.
func (a *linearAxis) taps(c *Ctx, i *fxgraph.Node) (i1, i2, d1, d2 *fxgraph.Node, err error) {
	e := &emitChain{c: c}
	f := e.cast(i, tensor.Float32)
	half := c.ScalarConst(tensor.Float32, 0.5)
	in := e.op(fxgraph.AtenSubTensor, e.divide(e.op(fxgraph.AtenAddTensor, f, half), a.scale), half)
	if a.pytorchH {
		one := e.op(fxgraph.AtenGtScalar, a.out, int64(1))
		in = e.op(fxgraph.AtenWhereSelf, one, in, c.ScalarConst(tensor.Float32, 0))
	}
	in = e.op(fxgraph.AtenClamp, in, 0.0, float64(a.n-1))
	i1 = e.op(fxgraph.AtenMinimum, e.cast(in, tensor.Int64), c.ScalarConst(tensor.Int64, float64(a.n-1)))
	i2 = e.op(fxgraph.AtenMinimum, e.op(fxgraph.AtenAddScalar, i1, int64(1)), c.ScalarConst(tensor.Int64, float64(a.n-1)))
	d1 = e.op(fxgraph.AtenAbs, e.op(fxgraph.AtenSubTensor, in, e.cast(i1, tensor.Float32)))
	d2 = e.op(fxgraph.AtenAbs, e.op(fxgraph.AtenSubTensor, in, e.cast(i2, tensor.Float32)))
	same := e.op(fxgraph.AtenEqTensor, i1, i2)
	d1 = e.op(fxgraph.AtenWhereSelf, same, half, d1)
	d2 = e.op(fxgraph.AtenWhereSelf, same, half, d2)
	return i1, i2, d1, d2, e.err
}

// bilinearAt reads Resize's output at coordinates co: the leading axes as
// they are, the last two interpolated.
func bilinearAt(c *Ctx, x *fxgraph.Node, co []*fxgraph.Node, axes [2]*linearAxis) (*fxgraph.Node, error) {
	r := len(co)
	y1, y2, dy1, dy2, err := axes[0].taps(c, co[r-2])
	if err != nil {
		return nil, err
	}
	x1, x2, dx1, dx2, err := axes[1].taps(c, co[r-1])
	if err != nil {
		return nil, err
	}
	e := &emitChain{c: c}
	tap := func(yi, xi, wy, wx *fxgraph.Node) *fxgraph.Node {
		at := append(append([]*fxgraph.Node{}, co[:r-2]...), yi, xi)
		v, err := gatherAt(c, x, at)
		if err != nil {
			e.err = err
			return nil
		}
		return e.op(fxgraph.AtenMulTensor, e.op(fxgraph.AtenMulTensor, wx, wy), v)
	}
	sum := e.op(fxgraph.AtenAddTensor, tap(y1, x1, dy2, dx2), tap(y1, x2, dy2, dx1))
	sum = e.op(fxgraph.AtenAddTensor, sum, tap(y2, x1, dy1, dx2))
	sum = e.op(fxgraph.AtenAddTensor, sum, tap(y2, x2, dy1, dx1))
	return sum, e.err
}

func (e *emitChain) cast(v *fxgraph.Node, dt tensor.DType) *fxgraph.Node {
	if e.err != nil || v == nil {
		return nil
	}
	n, err := nnCast(e.c, v, dt)
	e.err = err
	return n
}

func (e *emitChain) divide(a, b *fxgraph.Node) *fxgraph.Node {
	if e.err != nil || a == nil {
		return nil
	}
	n, err := ieeeDivide(e.c, a, b)
	e.err = err
	return n
}
