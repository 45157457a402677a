package fxgraph

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // image.Decode reads JPEG
	_ "image/png"  // and PNG
	"math"

	"github.com/xserve/xserve/tensor"
)

// Image operators: the built-in steps of pipelines that work on pictures
// of data-dependent sizes, so they run on the host only (Op.Host), before
// the program (decoding, resizing) or between programs (boxes and their
// crops). Their names:
//
//	xserve.image_decode(x, channels=3, order="rgb", resize=[], multiple=0,
//	  interpolation="bilinear", antialias=True, crop=[], layout="nhwc",
//	  dtype="uint8", scale=1.0): x is a string tensor [N] or [N, 1] of
//	  encoded images (JPEG or PNG); each is decoded to channels (1: gray,
//	  3: "rgb" or "bgr"), its values multiplied by scale (float32 output),
//	  resized (resize [S]: the shorter side to S, the longer to
//	  int(S*long/short), as torchvision's Resize(S); [H, W]: to H x W;
//	  multiple M: each side rounded to a multiple of M), center-cropped
//	  (crop [H, W] or [S], torchvision's CenterCrop) and stacked:
//	  [N, H, W, C] ("nhwc") or [N, C, H, W] ("nchw"), uint8 or float32.
//	  Without resize and crop the images of one request must share a size.
//	  Resizing is bilinear with torch's half-pixel centers, antialiased when
//	  shrinking as torch's interpolate(antialias=True); uint8 results are
//	  rounded from float32.
//	xserve.boxes_from_map(prob, thresh=0.3, box_thresh=0.5, unclip_ratio=1.6,
//	  min_size=3, max_boxes=1000): a text detector's probability map
//	  [N, 1, H, W] or [N, H, W] to boxes [K, 5] (image index, x0, y0, x1, y1;
//	  pixel edges, x1 and y1 exclusive) and scores [K]: the 8-connected
//	  components of prob > thresh, each one's bounding box scored by the mean
//	  of prob inside it, kept when the score is >= box_thresh and both sides
//	  are >= min_size, widened on every side by area*unclip_ratio/perimeter
//	  (floor and ceil, clipped to the map), sorted by image, y0, x0.
//	xserve.crop_boxes(image, boxes, classes=None, size, keep_ratio=True,
//	  layout="nhwc", scale=1.0, mean=[], std=[], flip_class=-1,
//	  flip_threshold=0.9): per-box crops of image [N, H, W, C] ("nhwc") or
//	  [N, C, H, W] at boxes [K, 5] (or [K, 4], all of image 0) resized to
//	  size [h, w] bilinearly (half-pixel centers, no antialiasing; with
//	  keep_ratio the width is min(w, ceil(h*box_w/box_h)) and the rest is
//	  zeros), normalized ((v*scale - mean)/std per channel): float32
//	  [K, C, h, w]. With classes [K, M] and flip_class, a box whose classes
//	  value at flip_class is above flip_threshold is rotated by 180 degrees
//	  first (a text line an angle classifier found upside down).
//	xserve.ctc_greedy(indices, probs, labels, blank=0): the best path of a
//	  CTC model, indices and probs [K, T] (argmax and max over classes),
//	  with repeats merged and blanks dropped: text [K] (labels of the kept
//	  indices joined) and score [K] (the mean of their probs, 0 for none).

// MaxImagePixels bounds the pixels of one decoded image (width times
// height): a larger image is refused before it is decoded.
const MaxImagePixels = 1 << 25

// The image operators, run on the host only.
var (
	XserveImageDecode  = &Op{Name: "xserve.image_decode", Host: true, Args: imageArgs}
	XserveBoxesFromMap = &Op{Name: "xserve.boxes_from_map", Host: true, Args: []ArgSpec{
		{"prob", 0, ArgTensor, nil, false},
		{"thresh", KwOnly, ArgFloat, 0.3, true},
		{"box_thresh", KwOnly, ArgFloat, 0.5, true},
		{"unclip_ratio", KwOnly, ArgFloat, 1.6, true},
		{"min_size", KwOnly, ArgInt, int64(3), true},
		{"max_boxes", KwOnly, ArgInt, int64(1000), true},
	}}
	XserveCropBoxes = &Op{Name: "xserve.crop_boxes", Host: true, Args: []ArgSpec{
		{"image", 0, ArgTensor, nil, false},
		{"boxes", 1, ArgTensor, nil, false},
		{"classes", 2, ArgTensor, nil, true},
		{"size", KwOnly, ArgInts, nil, false},
		{"keep_ratio", KwOnly, ArgBool, true, true},
		{"layout", KwOnly, ArgAny, "nhwc", true},
		{"scale", KwOnly, ArgFloat, 1.0, true},
		{"mean", KwOnly, ArgAny, nil, true},
		{"std", KwOnly, ArgAny, nil, true},
		{"flip_class", KwOnly, ArgInt, int64(-1), true},
		{"flip_threshold", KwOnly, ArgFloat, 0.9, true},
	}}
	XserveCTCGreedy = &Op{Name: "xserve.ctc_greedy", Host: true, Args: []ArgSpec{
		{"indices", 0, ArgTensor, nil, false},
		{"probs", 1, ArgTensor, nil, false},
		{"labels", 2, ArgTensor, nil, false},
		{"blank", KwOnly, ArgInt, int64(0), true},
	}}
)

var imageArgs = []ArgSpec{
	{"x", 0, ArgTensor, nil, false},
	{"channels", KwOnly, ArgInt, int64(3), true},
	{"order", KwOnly, ArgAny, "rgb", true},
	{"resize", KwOnly, ArgInts, nil, true},
	{"multiple", KwOnly, ArgInt, int64(0), true},
	{"interpolation", KwOnly, ArgAny, "bilinear", true},
	{"antialias", KwOnly, ArgBool, true, true},
	{"crop", KwOnly, ArgInts, nil, true},
	{"layout", KwOnly, ArgAny, "nhwc", true},
	{"dtype", KwOnly, ArgAny, "uint8", true},
	{"scale", KwOnly, ArgFloat, 1.0, true},
}

// imageOps lists them for the op table.
var imageOps = []*Op{XserveImageDecode, XserveBoxesFromMap, XserveCropBoxes, XserveCTCGreedy}

func registerImages(r *Registry) {
	r.define(XserveImageDecode, imgDecodeShape, imgDecodeEval)
	r.define(XserveBoxesFromMap, boxesFromMapShape, boxesFromMapEval)
	r.define(XserveCropBoxes, cropBoxesShape, cropBoxesEval)
	r.define(XserveCTCGreedy, ctcGreedyShape, ctcGreedyEval)
}

// ImageParams are the normalized arguments of an xserve.image_decode node.
type ImageParams struct {
	Channels      int
	BGR           bool
	Resize        []int64 // nil, [S] (shorter side) or [H, W]
	Multiple      int64
	Nearest       bool // interpolation "nearest", else bilinear
	Antialias     bool
	Crop          []int64 // nil or [H, W]
	NCHW          bool
	Float         bool // float32 output, else uint8
	Scale         float64
	resizeIsShort bool
}

func strParam(n *Node, name string) (string, error) {
	v, err := n.Param(name)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a string", n.Name, n.Target, name, FormatArg(v))
	}
	return s, nil
}

func intsParam(n *Node, name string) ([]int64, error) {
	v, err := n.Param(name)
	if err != nil || v == nil {
		return nil, err
	}
	out, ok := AsInts(v)
	if !ok {
		return nil, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a list of ints", n.Name, n.Target, name, FormatArg(v))
	}
	return out, nil
}

func floatsParam(n *Node, name string) ([]float64, error) {
	v, err := n.Param(name)
	if err != nil || v == nil {
		return nil, err
	}
	if f, ok := AsFloat(v); ok {
		return []float64{f}, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a list of numbers", n.Name, n.Target, name, FormatArg(v))
	}
	out := make([]float64, len(list))
	for i, e := range list {
		if out[i], ok = AsFloat(e); !ok {
			return nil, fmt.Errorf("fxgraph: node %s (%s): argument %s element %d is %s, want a number", n.Name, n.Target, name, i, FormatArg(e))
		}
	}
	return out, nil
}

// choice reads string argument name, one of allowed (the first is taken
// as true by the caller).
func choice(n *Node, name string, allowed ...string) (string, error) {
	s, err := strParam(n, name)
	if err != nil {
		return "", err
	}
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	return "", fmt.Errorf("fxgraph: node %s (%s): %s is %q, want one of %q", n.Name, n.Target, name, s, allowed)
}

// ReadImageParams returns the arguments of an xserve.image_decode node,
// checked.
func ReadImageParams(n *Node) (ImageParams, error) {
	var p ImageParams
	ch, err := n.ParamInt("channels")
	if err != nil {
		return p, err
	}
	if ch != 1 && ch != 3 {
		return p, fmt.Errorf("fxgraph: node %s (%s): channels is %d, want 1 or 3", n.Name, n.Target, ch)
	}
	p.Channels = int(ch)
	order, err := choice(n, "order", "rgb", "bgr")
	if err != nil {
		return p, err
	}
	p.BGR = order == "bgr"
	if p.Resize, err = intsParam(n, "resize"); err != nil {
		return p, err
	}
	if p.Crop, err = intsParam(n, "crop"); err != nil {
		return p, err
	}
	if len(p.Crop) == 1 {
		p.Crop = []int64{p.Crop[0], p.Crop[0]}
	}
	if p.Multiple, err = n.ParamInt("multiple"); err != nil {
		return p, err
	}
	if err := p.checkSizes(n); err != nil {
		return p, err
	}
	return p, p.readOutput(n)
}

// readOutput reads the arguments of how images are resampled and laid
// out.
func (p *ImageParams) readOutput(n *Node) error {
	interp, err := choice(n, "interpolation", "bilinear", "nearest")
	if err != nil {
		return err
	}
	p.Nearest = interp == "nearest"
	if p.Antialias, err = n.ParamBool("antialias"); err != nil {
		return err
	}
	layout, err := choice(n, "layout", "nhwc", "nchw")
	if err != nil {
		return err
	}
	p.NCHW = layout == "nchw"
	dt, err := choice(n, "dtype", "uint8", "float32")
	if err != nil {
		return err
	}
	p.Float = dt == "float32"
	if p.Scale, err = n.ParamFloat("scale"); err != nil {
		return err
	}
	if p.Scale != 1 && !p.Float {
		return fmt.Errorf("fxgraph: node %s (%s): scale %g needs dtype float32", n.Name, n.Target, p.Scale)
	}
	return nil
}

func (p *ImageParams) checkSizes(n *Node) error {
	bad := func(what string, v []int64) error {
		return fmt.Errorf("fxgraph: node %s (%s): %s is %v, want [S] or [H, W] of positive sizes", n.Name, n.Target, what, v)
	}
	if len(p.Resize) > 2 {
		return bad("resize", p.Resize)
	}
	for _, s := range p.Resize {
		if s < 1 || s > 1<<15 {
			return bad("resize", p.Resize)
		}
	}
	p.resizeIsShort = len(p.Resize) == 1
	if len(p.Crop) != 0 && len(p.Crop) != 2 {
		return bad("crop", p.Crop)
	}
	for _, s := range p.Crop {
		if s < 1 || s > 1<<15 {
			return bad("crop", p.Crop)
		}
	}
	if p.Multiple < 0 || p.Multiple > 1<<12 {
		return fmt.Errorf("fxgraph: node %s (%s): multiple is %d, want 0..4096", n.Name, n.Target, p.Multiple)
	}
	return nil
}

// outSize returns the size of the output images when every input's size
// is the same (static), or ok false when it depends on the images.
func (p ImageParams) outSize() (h, w int64, ok bool) {
	switch {
	case p.Crop != nil:
		return p.Crop[0], p.Crop[1], true
	case len(p.Resize) == 2 && p.Multiple <= 1:
		return p.Resize[0], p.Resize[1], true
	}
	return 0, 0, false
}

// imageBatch returns the images' count of a string tensor [N] or [N, 1].
func imageBatch(n *Node, x TensorMeta) (Dim, error) {
	if x.DType != tensor.String {
		return Dim{}, fmt.Errorf("fxgraph: node %s (%s): x is %s, want a string tensor of encoded images", n.Name, n.Target, x)
	}
	switch {
	case x.Rank() == 1:
		return x.Shape[0], nil
	case x.Rank() == 2 && x.Shape[1] == D(1):
		return x.Shape[0], nil
	}
	return Dim{}, fmt.Errorf("fxgraph: node %s (%s): x is %s, want [N] or [N, 1] (one encoded image per row)", n.Name, n.Target, x)
}

func imgDecodeShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	batch, err := imageBatch(n, x)
	if err != nil {
		return Meta{}, err
	}
	p, err := ReadImageParams(n)
	if err != nil {
		return Meta{}, err
	}
	hd, wd, c := Unknown, Unknown, D(int64(p.Channels))
	if h, w, ok := p.outSize(); ok {
		hd, wd = D(h), D(w)
	}
	dt := tensor.Uint8
	if p.Float {
		dt = tensor.Float32
	}
	if p.NCHW {
		return One(dt, Shape{batch, c, hd, wd}), nil
	}
	return One(dt, Shape{batch, hd, wd, c}), nil
}

func imgDecodeEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	p, err := ReadImageParams(n)
	if err != nil {
		return nil, err
	}
	imgs := make([]*planar, len(x.Strings))
	for i, data := range x.Strings {
		img, err := DecodeImage(data, p.Channels, p.BGR)
		if err != nil {
			return nil, fmt.Errorf("image %d: %w", i, err)
		}
		if imgs[i], err = p.transform(img); err != nil {
			return nil, fmt.Errorf("image %d: %w", i, err)
		}
		if f := imgs[0]; imgs[i].h != f.h || imgs[i].w != f.w {
			return nil, fmt.Errorf("image %d is %dx%d, image 0 %dx%d: the images of one request must come out at one size (resize or crop them)", i, imgs[i].w, imgs[i].h, f.w, f.h)
		}
	}
	return []*tensor.Tensor{p.stack(imgs)}, nil
}

// planar is an image of float32 values, channel-major: c planes of h x w.
type planar struct {
	c, h, w int
	v       []float32
}

func (im *planar) at(c, y, x int) float32 { return im.v[(c*im.h+y)*im.w+x] }

// DecodeImage decodes a JPEG or PNG into channels planes (1: gray, 3: RGB,
// or BGR with bgr) of values 0..255. Images of more than MaxImagePixels
// are refused before decoding.
func DecodeImage(data []byte, channels int, bgr bool) (*planar, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not a JPEG or PNG image: %w", err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return nil, fmt.Errorf("%s image of %dx%d pixels: the limit is %d pixels", format, cfg.Width, cfg.Height, MaxImagePixels)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s image: %w", format, err)
	}
	if y, ok := img.(*image.YCbCr); ok && format == "jpeg" {
		img = LibjpegRGB(y) // libjpeg's chroma upsampling and color tables, as PIL and torchvision decode
	}
	b := img.Bounds()
	out := &planar{c: channels, h: b.Dy(), w: b.Dx()}
	out.v = make([]float32, channels*out.h*out.w)
	plane := out.h * out.w
	for y := range out.h {
		for x := range out.w {
			r, g, bl := rgbAt(img, b.Min.X+x, b.Min.Y+y)
			i := y*out.w + x
			switch {
			case channels == 1:
				out.v[i] = float32(gray(r, g, bl))
			case bgr:
				out.v[i], out.v[plane+i], out.v[2*plane+i] = float32(bl), float32(g), float32(r)
			default:
				out.v[i], out.v[plane+i], out.v[2*plane+i] = float32(r), float32(g), float32(bl)
			}
		}
	}
	return out, nil
}

// rgbAt returns the 8-bit RGB of one pixel, read straight from the common
// decoded layouts (YCbCr from JPEG, paletted and RGBA from PNG); alpha is
// dropped (PNG's non-premultiplied values are kept).
func rgbAt(img image.Image, x, y int) (r, g, b uint8) {
	switch m := img.(type) {
	case *image.YCbCr:
		yi, ci := m.YOffset(x, y), m.COffset(x, y)
		return color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
	case *image.Gray:
		v := m.Pix[m.PixOffset(x, y)]
		return v, v, v
	case *image.NRGBA:
		i := m.PixOffset(x, y)
		return m.Pix[i], m.Pix[i+1], m.Pix[i+2]
	case *image.RGBA:
		i := m.PixOffset(x, y)
		return m.Pix[i], m.Pix[i+1], m.Pix[i+2]
	}
	c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
	return c.R, c.G, c.B
}

// gray is ITU-R 601 luma, as PIL's convert("L").
func gray(r, g, b uint8) uint8 {
	return uint8((int(r)*299 + int(g)*587 + int(b)*114 + 500) / 1000)
}

// transform scales, resizes and crops one decoded image.
func (p ImageParams) transform(im *planar) (*planar, error) {
	if p.Scale != 1 {
		s := float32(p.Scale)
		for i := range im.v {
			im.v[i] *= s
		}
	}
	h, w := p.resizedSize(im.h, im.w)
	if h != im.h || w != im.w {
		im = resizePlanar(im, h, w, !p.Nearest, p.Antialias)
	}
	if p.Crop != nil {
		return centerCrop(im, int(p.Crop[0]), int(p.Crop[1]))
	}
	return im, nil
}

// resizedSize is the size an image of h x w is resized to.
func (p ImageParams) resizedSize(h, w int) (int, int) {
	switch {
	case p.resizeIsShort:
		s := int(p.Resize[0])
		if w <= h {
			h, w = int(float64(s)*float64(h)/float64(w)), s
		} else {
			h, w = s, int(float64(s)*float64(w)/float64(h))
		}
	case len(p.Resize) == 2:
		h, w = int(p.Resize[0]), int(p.Resize[1])
	}
	if m := int(p.Multiple); m > 1 {
		// Python's round(h / m) * m, as rapidocr's detector input.
		h, w = max(m, int(math.RoundToEven(float64(h)/float64(m)))*m), max(m, int(math.RoundToEven(float64(w)/float64(m)))*m)
	}
	return h, w
}

// centerCrop cuts the h x w center of im, as torchvision's CenterCrop
// (offsets rounded half to even, as Python's round).
func centerCrop(im *planar, h, w int) (*planar, error) {
	if h > im.h || w > im.w {
		return nil, fmt.Errorf("crop %dx%d is larger than the resized image (%dx%d)", h, w, im.h, im.w)
	}
	top := int(math.RoundToEven(float64(im.h-h) / 2))
	left := int(math.RoundToEven(float64(im.w-w) / 2))
	out := &planar{c: im.c, h: h, w: w, v: make([]float32, im.c*h*w)}
	for c := range im.c {
		for y := range h {
			copy(out.v[(c*h+y)*w:(c*h+y+1)*w], im.v[(c*im.h+top+y)*im.w+left:])
		}
	}
	return out, nil
}

// stack puts the images into one tensor in p's layout and dtype; they must
// have one size.
func (p ImageParams) stack(imgs []*planar) *tensor.Tensor {
	dt := tensor.Uint8
	if p.Float {
		dt = tensor.Float32
	}
	if len(imgs) == 0 {
		h, w, _ := p.outSize()
		if p.NCHW {
			return tensor.New(dt, 0, int64(p.Channels), h, w)
		}
		return tensor.New(dt, 0, h, w, int64(p.Channels))
	}
	c, h, w := imgs[0].c, imgs[0].h, imgs[0].w
	shape := []int64{int64(len(imgs)), int64(h), int64(w), int64(c)}
	if p.NCHW {
		shape = []int64{int64(len(imgs)), int64(c), int64(h), int64(w)}
	}
	vals := make([]float32, 0, len(imgs)*c*h*w)
	for _, im := range imgs {
		if p.NCHW {
			vals = append(vals, im.v...)
			continue
		}
		for y := range h {
			for x := range w {
				for ch := range c {
					vals = append(vals, im.at(ch, y, x))
				}
			}
		}
	}
	if p.Float {
		return tensor.FromFloat32s(vals, shape...)
	}
	out := tensor.New(tensor.Uint8, shape...)
	for i, v := range vals {
		out.Data[i] = uint8(min(255, max(0, math.Round(float64(v)))))
	}
	return out
}
