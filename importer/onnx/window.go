package onnx

import (
	"errors"
	"fmt"

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
	// sizes: returned where the window is used as a tensor without a
	// static bound on every axis.
	why error
	// mat is the window as a tensor, once made.
	mat *fxgraph.Node
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

// setWindow binds the node's output to w.
func (c *Ctx) setWindow(w *window) error {
	c.s.env[c.node.Outputs[0]] = newWindowMarker(w)
	return nil
}

// windowTensor returns w as a tensor for an operator that takes no window:
// w evaluated at its static bound (see materialize), once per window.
func (c *Ctx) windowTensor(w *window) (*fxgraph.Node, error) {
	if w.mat != nil {
		return w.mat, nil
	}
	if w.g != c.s.g {
		return nil, w.why
	}
	for _, b := range w.bound {
		if b < 0 {
			return nil, w.why
		}
	}
	t, err := c.materialize(w)
	if err != nil {
		return nil, err
	}
	w.mat = t
	return t, nil
}

// windowTensor is Ctx.windowTensor for a value the scope reads directly
// (a body output, a grown row), named name.
func (s *scope) windowTensor(w *window, name string) (*fxgraph.Node, error) {
	c := &Ctx{s: s, node: &Node{Name: name, Outputs: []string{name}}}
	return c.windowTensor(w)
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
	msg := fmt.Sprintf("value %q, whose size is computed at run time, is smaller than the %v it is used at (ONNX Runtime fails there)", c.node.Outputs[0], w.bound)
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
