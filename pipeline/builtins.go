package pipeline

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// placement says where a built-in step's nodes run.
type placement int

const (
	// onDevice: the step's nodes are lowered into the program.
	onDevice placement = iota
	// onHost: the step runs on the host (data-dependent sizes, strings).
	onHost
	// deviceThenHost: device nodes, then host nodes reading their results
	// (the labels of top-k, the text of a CTC path).
	deviceThenHost
)

func (p placement) String() string {
	return [...]string{"device", "host", "device+host"}[p]
}

// builtin is one built-in step: its input and output names (an input
// ending in "?" is optional), where it runs, its parameters and how it
// adds its nodes to a graph.
type builtin struct {
	inputs, outputs []string
	place           placement
	params          []string
	// build returns one node per output (nil for an output it does not
	// make with these params).
	build func(c *stepCtx) ([]*fxgraph.Node, error)
}

// Builtins lists the built-in steps' names.
func Builtins() []string { return slices.Sorted(maps.Keys(builtins)) }

var builtins = map[string]*builtin{
	"image_decode": {
		inputs: []string{"bytes"}, outputs: []string{"image"}, place: onHost,
		params: imageDecodeParams,
		build:  buildImageDecode,
	},
	"normalize": {
		inputs: []string{"x"}, outputs: []string{"y"}, place: onDevice,
		params: []string{"mean", "std", "scale", "layout", "to_nchw"},
		build:  buildNormalize,
	},
	"resize": {
		inputs: []string{"x"}, outputs: []string{"y"}, place: onDevice,
		params: []string{"size", "interpolation", "layout"},
		build:  buildResize,
	},
	"center_crop": {
		inputs: []string{"x"}, outputs: []string{"y"}, place: onDevice,
		params: []string{"size", "layout"},
		build:  buildCenterCrop,
	},
	"softmax": {
		inputs: []string{"x"}, outputs: []string{"y"}, place: onDevice,
		params: []string{"dim"},
		build:  buildSoftmax,
	},
	"topk": {
		inputs: []string{"x"}, outputs: []string{"values", "indices", "labels"}, place: deviceThenHost,
		params: []string{"k", "dim", "labels"},
		build:  buildTopK,
	},
	"boxes_from_map": {
		inputs: []string{"map"}, outputs: []string{"boxes", "scores"}, place: onHost,
		params: boxesParams,
		build:  buildBoxesFromMap,
	},
	"crop_boxes": {
		inputs: []string{"image", "boxes", "classes?"}, outputs: []string{"crops"}, place: onHost,
		params: cropParams,
		build:  buildCropBoxes,
	},
	"ctc_decode": {
		inputs: []string{"probs"}, outputs: []string{"text", "score"}, place: deviceThenHost,
		params: []string{"labels", "blank"},
		build:  buildCTCDecode,
	},
}

// The params the host operators take as they are.
var (
	imageDecodeParams = []string{"channels", "order", "resize", "multiple", "interpolation", "antialias", "crop", "layout", "dtype", "scale"}
	boxesParams       = []string{"thresh", "box_thresh", "unclip_ratio", "min_size", "max_boxes"}
	cropParams        = []string{"size", "keep_ratio", "layout", "scale", "mean", "std", "flip_class", "flip_threshold"}
)

// inputNames returns b's input names without the optional mark.
func (b *builtin) inputNames() []string {
	out := make([]string, len(b.inputs))
	for i, n := range b.inputs {
		out[i] = strings.TrimSuffix(n, "?")
	}
	return out
}

func (b *builtin) optional(name string) bool { return slices.Contains(b.inputs, name+"?") }

// stepCtx is what a built-in's build sees: its graph (through an emitter
// that derives each node's Meta), its inputs and parameters.
type stepCtx struct {
	e    *fxgraph.Emitter
	in   map[string]*fxgraph.Node
	p    *params
	name string
}

func (c *stepCtx) emit(op *fxgraph.Op, args []any, kw map[string]any) (*fxgraph.Node, error) {
	n, err := c.e.Emit(c.name, op, args, kw)
	if err != nil {
		return nil, fmt.Errorf("built-in step %s: %w", c.name, err)
	}
	return n, nil
}

func (c *stepCtx) item(n *fxgraph.Node, i int) (*fxgraph.Node, error) {
	return c.emit(fxgraph.GetItem, []any{n, int64(i)}, nil)
}

func (c *stepCtx) constant(what string, t *tensor.Tensor) *fxgraph.Node {
	return c.e.Graph.AddConstant(c.name+"_"+what, t)
}

// kwargs copies the given params into an op's kwargs (ints as int64).
func (c *stepCtx) kwargs(names ...string) map[string]any {
	kw := map[string]any{}
	for _, n := range names {
		v, ok := c.p.raw[n]
		if !ok {
			continue
		}
		kw[n] = literal(v)
	}
	return kw
}

// literal turns YAML's values into the IR's literals: ints as int64,
// lists as []any.
func literal(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = literal(e)
		}
		return out
	}
	return v
}

func buildImageDecode(c *stepCtx) ([]*fxgraph.Node, error) {
	n, err := c.emit(fxgraph.XserveImageDecode, []any{c.in["bytes"]}, c.kwargs(imageDecodeParams...))
	return []*fxgraph.Node{n}, err
}

// channelShape is the shape of a per-channel constant of c channels for
// a value of rank r whose channels are at dim 1 (nchw) or last (nhwc).
func channelShape(c, r int, nchw bool) []int64 {
	if !nchw {
		return []int64{int64(c)}
	}
	s := []int64{int64(c)}
	for range r - 2 {
		s = append(s, 1)
	}
	return s
}

func buildNormalize(c *stepCtx) ([]*fxgraph.Node, error) {
	p := c.p
	mean, std, scale := p.floats("mean"), p.floats("std"), p.float("scale", 1)
	nchw := p.str("layout", "nchw", "nchw", "nhwc") == "nchw"
	toNCHW := p.bool("to_nchw", false)
	if p.err != nil {
		return nil, p.err
	}
	x := c.in["x"]
	m := x.Val()
	if toNCHW && (nchw || m.Rank() != 4) {
		p.fail("to_nchw", "turns an [N, H, W, C] input (layout nhwc) into [N, C, H, W]; the input is %s, layout %s", m, map[bool]string{true: "nchw", false: "nhwc"}[nchw])
		return nil, p.err
	}
	var err error
	if m.DType != tensor.Float32 {
		if x, err = c.emit(fxgraph.Aten_ToCopy, []any{x}, map[string]any{"dtype": tensor.Float32}); err != nil {
			return nil, err
		}
	}
	if scale != 1 {
		if x, err = c.emit(fxgraph.AtenMulTensor, []any{x, c.constant("scale", tensor.FromFloat32s([]float32{float32(scale)}))}, nil); err != nil {
			return nil, err
		}
	}
	if x, err = c.subDiv(x, mean, std, channelShape(len(mean), m.Rank(), nchw), channelShape(len(std), m.Rank(), nchw)); err != nil {
		return nil, err
	}
	if toNCHW {
		if x, err = c.emit(fxgraph.AtenPermute, []any{x, []any{int64(0), int64(3), int64(1), int64(2)}}, nil); err != nil {
			return nil, err
		}
	}
	return []*fxgraph.Node{x}, nil
}

// subDiv emits (x - mean) / std, each a per-channel constant of the given
// shape (a scalar when it has one value), or nothing when not given.
func (c *stepCtx) subDiv(x *fxgraph.Node, mean, std []float64, meanShape, stdShape []int64) (*fxgraph.Node, error) {
	var err error
	for _, op := range []struct {
		what  string
		vals  []float64
		shape []int64
		op    *fxgraph.Op
	}{{"mean", mean, meanShape, fxgraph.AtenSubTensor}, {"std", std, stdShape, fxgraph.AtenDivTensor}} {
		if op.vals == nil {
			continue
		}
		vals := make([]float32, len(op.vals))
		for i, v := range op.vals {
			vals[i] = float32(v)
		}
		shape := op.shape
		if len(vals) == 1 {
			shape = nil
		}
		if x, err = c.emit(op.op, []any{x, c.constant(op.what, tensor.FromFloat32s(vals, shape...))}, nil); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// imageDims returns the H and W axes of a rank-4 image value in layout.
func imageDims(c *stepCtx, m fxgraph.TensorMeta) (hAxis, wAxis int, ok bool) {
	nchw := c.p.str("layout", "nchw", "nchw", "nhwc") == "nchw"
	if m.Rank() != 4 {
		c.p.fail("layout", "wants an image batch [N, C, H, W] or [N, H, W, C], the input is %s", m)
		return 0, 0, false
	}
	if nchw {
		return 2, 3, true
	}
	return 1, 2, true
}

// hw reads a size parameter: [S] (both sides) or [H, W].
func hw(p *params, name string) (int64, int64, bool) {
	s := p.ints(name)
	if len(s) == 1 {
		s = []int64{s[0], s[0]}
	}
	if len(s) != 2 || s[0] < 1 || s[1] < 1 {
		p.fail(name, "want [H, W] or [S] of positive sizes, got %v", p.raw[name])
		return 0, 0, false
	}
	return s[0], s[1], true
}

func buildResize(c *stepCtx) ([]*fxgraph.Node, error) {
	x := c.in["x"]
	m := x.Val()
	h, w, ok := hw(c.p, "size")
	mode := c.p.str("interpolation", "bilinear", "bilinear", "nearest")
	hAxis, wAxis, ok2 := imageDims(c, m)
	if !ok || !ok2 || c.p.err != nil {
		return nil, c.p.err
	}
	sizes := make([]any, 4)
	for i := range sizes {
		sizes[i] = int64(-1)
	}
	sizes[hAxis], sizes[wAxis] = h, w
	// torch's interpolate(align_corners=False): bilinear samples at
	// half-pixel centers (ONNX's pytorch_half_pixel), nearest at
	// floor(i * in/out) (asymmetric, floor).
	onnxMode, coords := "linear", "pytorch_half_pixel"
	if mode == "nearest" {
		onnxMode, coords = "nearest", "asymmetric"
	}
	y, err := c.emit(fxgraph.XserveResize, []any{x, sizes, nil, nil, onnxMode, coords, "floor", -0.75, false, 0.0}, nil)
	return []*fxgraph.Node{y}, err
}

func buildCenterCrop(c *stepCtx) ([]*fxgraph.Node, error) {
	x := c.in["x"]
	m := x.Val()
	h, w, ok := hw(c.p, "size")
	hAxis, wAxis, ok2 := imageDims(c, m)
	if !ok || !ok2 || c.p.err != nil {
		return nil, c.p.err
	}
	for _, a := range []struct {
		axis int
		size int64
	}{{hAxis, h}, {wAxis, w}} {
		d := m.Shape[a.axis]
		if !d.IsStatic() {
			c.p.fail("size", "center_crop needs the input's sizes, but dim %d of %s depends on the data: crop in image_decode (params crop)", a.axis, m)
			return nil, c.p.err
		}
		if a.size > d.Size {
			c.p.fail("size", "%d is larger than dim %d of the input %s", a.size, a.axis, m)
			return nil, c.p.err
		}
		// torchvision's CenterCrop: int(round((in - out) / 2)), half to even.
		start := int64(roundHalfEven(float64(d.Size-a.size) / 2))
		var err error
		if x, err = c.emit(fxgraph.AtenSliceTensor, []any{x, int64(a.axis), start, start + a.size, int64(1)}, nil); err != nil {
			return nil, err
		}
	}
	return []*fxgraph.Node{x}, nil
}

func roundHalfEven(v float64) float64 {
	f := float64(int64(v))
	switch d := v - f; {
	case d > 0.5 || (d == 0.5 && int64(f)%2 == 1):
		return f + 1
	}
	return f
}

func buildSoftmax(c *stepCtx) ([]*fxgraph.Node, error) {
	dim := c.p.int("dim", -1)
	if c.p.err != nil {
		return nil, c.p.err
	}
	y, err := c.emit(fxgraph.Aten_Softmax, []any{c.in["x"], dim, false}, nil)
	return []*fxgraph.Node{y}, err
}

func buildTopK(c *stepCtx) ([]*fxgraph.Node, error) {
	k, dim := c.p.int("k", 0), c.p.int("dim", -1)
	if k < 1 {
		c.p.fail("k", "required: the number of classes to keep (>= 1)")
	}
	var labels *tensor.Tensor
	if c.p.has("labels") {
		labels = c.p.labels("labels")
	}
	if c.p.err != nil {
		return nil, c.p.err
	}
	top, err := c.emit(fxgraph.AtenTopk, []any{c.in["x"], k, dim, true, true}, nil)
	if err != nil {
		return nil, err
	}
	values, err := c.item(top, 0)
	if err != nil {
		return nil, err
	}
	indices, err := c.item(top, 1)
	if err != nil {
		return nil, err
	}
	if labels == nil {
		return []*fxgraph.Node{values, indices, nil}, nil
	}
	names, err := c.emit(fxgraph.XserveStringTake, []any{c.constant("labels", labels), indices}, map[string]any{"default": ""})
	return []*fxgraph.Node{values, indices, names}, err
}

func buildBoxesFromMap(c *stepCtx) ([]*fxgraph.Node, error) {
	kw := c.kwargs(boxesParams...)
	n, err := c.emit(fxgraph.XserveBoxesFromMap, []any{c.in["map"]}, kw)
	if err != nil {
		return nil, err
	}
	boxes, err := c.item(n, 0)
	if err != nil {
		return nil, err
	}
	scores, err := c.item(n, 1)
	return []*fxgraph.Node{boxes, scores}, err
}

func buildCropBoxes(c *stepCtx) ([]*fxgraph.Node, error) {
	kw := c.kwargs(cropParams...)
	args := []any{c.in["image"], c.in["boxes"]}
	if cl := c.in["classes"]; cl != nil {
		args = append(args, cl)
	}
	n, err := c.emit(fxgraph.XserveCropBoxes, args, kw)
	return []*fxgraph.Node{n}, err
}

func buildCTCDecode(c *stepCtx) ([]*fxgraph.Node, error) {
	labels := c.p.labels("labels")
	blank := c.p.int("blank", 0)
	if c.p.err != nil {
		return nil, c.p.err
	}
	best, err := c.emit(fxgraph.AtenMaxDim, []any{c.in["probs"], int64(-1), false}, nil)
	if err != nil {
		return nil, err
	}
	probs, err := c.item(best, 0)
	if err != nil {
		return nil, err
	}
	idx, err := c.item(best, 1)
	if err != nil {
		return nil, err
	}
	path, err := c.emit(fxgraph.XserveCTCGreedy, []any{idx, probs, c.constant("labels", labels)}, map[string]any{"blank": blank})
	if err != nil {
		return nil, err
	}
	text, err := c.item(path, 0)
	if err != nil {
		return nil, err
	}
	score, err := c.item(path, 1)
	return []*fxgraph.Node{text, score}, err
}
