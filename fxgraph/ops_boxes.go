package fxgraph

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/xserve/xserve/tensor"
)

// The box operators of image pipelines (ops_image.go documents them):
// a detector's map to boxes, per-box crops, a CTC model's best path.

func boxesFromMapShape(n *Node) (Meta, error) {
	x, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if !x.DType.IsFloat() || (x.Rank() != 3 && !(x.Rank() == 4 && x.Shape[1] == D(1))) {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): prob is %s, want a float map [N, 1, H, W] or [N, H, W]", n.Name, n.Target, x)
	}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: tensor.Float32, Shape: Shape{Unknown, D(5)}},
		{DType: tensor.Float32, Shape: Shape{Unknown}},
	}}, nil
}

// box is one detected box: image index, edges (x1, y1 exclusive), score.
type box struct {
	b              int
	x0, y0, x1, y1 float64
	score          float64
}

type boxParams struct {
	thresh, boxThresh, unclip float64
	minSize, maxBoxes         int64
}

func readBoxParams(n *Node) (boxParams, error) {
	var p boxParams
	var err error
	for _, f := range []struct {
		name string
		dst  *float64
	}{{"thresh", &p.thresh}, {"box_thresh", &p.boxThresh}, {"unclip_ratio", &p.unclip}} {
		if *f.dst, err = n.ParamFloat(f.name); err != nil {
			return p, err
		}
	}
	if p.minSize, err = n.ParamInt("min_size"); err != nil {
		return p, err
	}
	if p.maxBoxes, err = n.ParamInt("max_boxes"); err != nil {
		return p, err
	}
	if p.unclip < 0 || p.minSize < 0 || p.maxBoxes < 1 {
		return p, fmt.Errorf("fxgraph: node %s (%s): unclip_ratio %g, min_size %d, max_boxes %d: want unclip_ratio, min_size >= 0 and max_boxes >= 1",
			n.Name, n.Target, p.unclip, p.minSize, p.maxBoxes)
	}
	return p, nil
}

func boxesFromMapEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	prob, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	p, err := readBoxParams(n)
	if err != nil {
		return nil, err
	}
	s := prob.Shape
	h, w := int(s[len(s)-2]), int(s[len(s)-1])
	vals := prob.Float64s()
	var boxes []box
	for b := range int(s[0]) {
		m := vals[b*h*w : (b+1)*h*w]
		for _, bx := range componentBoxes(m, h, w, p.thresh) {
			bx.b = b
			if keep := p.finish(&bx, m, h, w); keep {
				boxes = append(boxes, bx)
			}
		}
	}
	sort.Slice(boxes, func(i, j int) bool {
		a, c := boxes[i], boxes[j]
		if a.b != c.b {
			return a.b < c.b
		}
		if a.y0 != c.y0 {
			return a.y0 < c.y0
		}
		if a.x0 != c.x0 {
			return a.x0 < c.x0
		}
		return a.score > c.score
	})
	if int64(len(boxes)) > p.maxBoxes {
		boxes = boxes[:p.maxBoxes]
	}
	coords := make([]float32, 0, 5*len(boxes))
	scores := make([]float32, 0, len(boxes))
	for _, bx := range boxes {
		coords = append(coords, float32(bx.b), float32(bx.x0), float32(bx.y0), float32(bx.x1), float32(bx.y1))
		scores = append(scores, float32(bx.score))
	}
	return []*tensor.Tensor{tensor.FromFloat32s(coords, int64(len(boxes)), 5), tensor.FromFloat32s(scores, int64(len(boxes)))}, nil
}

// finish scores bx (the mean of m inside it), filters it and widens it;
// bx holds pixel indices (inclusive) on entry and edges on return.
func (p boxParams) finish(bx *box, m []float64, h, w int) bool {
	var sum float64
	for y := int(bx.y0); y <= int(bx.y1); y++ {
		for x := int(bx.x0); x <= int(bx.x1); x++ {
			sum += m[y*w+x]
		}
	}
	bw, bh := bx.x1-bx.x0+1, bx.y1-bx.y0+1
	bx.score = sum / (bw * bh)
	if bx.score < p.boxThresh || bw < float64(p.minSize) || bh < float64(p.minSize) {
		return false
	}
	d := bw * bh * p.unclip / (2 * (bw + bh))
	bx.x0, bx.y0 = max(0, math.Floor(bx.x0-d)), max(0, math.Floor(bx.y0-d))
	bx.x1, bx.y1 = min(float64(w), math.Ceil(bx.x1+1+d)), min(float64(h), math.Ceil(bx.y1+1+d))
	return true
}

// componentBoxes returns the bounding boxes (inclusive pixel indices) of
// the 8-connected components of m > thresh, in the order their first
// pixel is met in row-major order.
func componentBoxes(m []float64, h, w int, thresh float64) []box {
	seen := make([]bool, len(m))
	var out []box
	var stack []int
	for start, v := range m {
		if seen[start] || v <= thresh {
			continue
		}
		bx := box{x0: float64(w), y0: float64(h), x1: -1, y1: -1}
		seen[start] = true
		stack = append(stack[:0], start)
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			y, x := i/w, i%w
			bx.x0, bx.x1 = min(bx.x0, float64(x)), max(bx.x1, float64(x))
			bx.y0, bx.y1 = min(bx.y0, float64(y)), max(bx.y1, float64(y))
			for dy := -1; dy <= 1; dy++ {
				for dx := -1; dx <= 1; dx++ {
					ny, nx := y+dy, x+dx
					if ny < 0 || ny >= h || nx < 0 || nx >= w {
						continue
					}
					if j := ny*w + nx; !seen[j] && m[j] > thresh {
						seen[j] = true
						stack = append(stack, j)
					}
				}
			}
		}
		out = append(out, bx)
	}
	return out
}

func cropBoxesShape(n *Node) (Meta, error) {
	img, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	boxes, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	p, err := readCropParams(n)
	if err != nil {
		return Meta{}, err
	}
	if err := checkCropInputs(n, img, boxes); err != nil {
		return Meta{}, err
	}
	c := img.Shape[3]
	if p.nchw {
		c = img.Shape[1]
	}
	if c.IsStatic() && (len(p.mean) > 1 && int64(len(p.mean)) != c.Size || len(p.std) > 1 && int64(len(p.std)) != c.Size) {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): mean %v and std %v for %d channels", n.Name, n.Target, p.mean, p.std, c.Size)
	}
	return One(tensor.Float32, Shape{boxes.Shape[0], c, D(p.h), D(p.w)}), nil
}

// checkCropInputs checks crop_boxes' image and boxes.
func checkCropInputs(n *Node, img, boxes TensorMeta) error {
	if img.Rank() != 4 || !(img.DType.IsFloat() || img.DType == tensor.Uint8) {
		return fmt.Errorf("fxgraph: node %s (%s): image is %s, want uint8 or float [N, H, W, C] (layout nhwc) or [N, C, H, W] (nchw)", n.Name, n.Target, img)
	}
	if boxes.Rank() != 2 || !(boxes.Shape[1] == D(4) || boxes.Shape[1] == D(5)) || !boxes.DType.IsFloat() {
		return fmt.Errorf("fxgraph: node %s (%s): boxes is %s, want float [K, 5] (image, x0, y0, x1, y1) or [K, 4]", n.Name, n.Target, boxes)
	}
	return nil
}

type cropParams struct {
	h, w            int64
	keepRatio, nchw bool
	scale           float64
	mean, std       []float64
	flipClass       int64
	flipThreshold   float64
	haveClasses     bool
}

func readCropParams(n *Node) (cropParams, error) {
	var p cropParams
	size, err := intsParam(n, "size")
	if err != nil {
		return p, err
	}
	if len(size) != 2 || size[0] < 1 || size[1] < 1 || size[0] > 1<<12 || size[1] > 1<<12 {
		return p, fmt.Errorf("fxgraph: node %s (%s): size is %v, want [h, w] of positive sizes", n.Name, n.Target, size)
	}
	p.h, p.w = size[0], size[1]
	if p.keepRatio, err = n.ParamBool("keep_ratio"); err != nil {
		return p, err
	}
	layout, err := choice(n, "layout", "nhwc", "nchw")
	if err != nil {
		return p, err
	}
	p.nchw = layout == "nchw"
	if p.scale, err = n.ParamFloat("scale"); err != nil {
		return p, err
	}
	if p.mean, p.std, err = meanStd(n); err != nil {
		return p, err
	}
	if p.flipClass, err = n.ParamInt("flip_class"); err != nil {
		return p, err
	}
	if p.flipThreshold, err = n.ParamFloat("flip_threshold"); err != nil {
		return p, err
	}
	_, p.haveClasses = n.ArgOr(2, "classes", nil).(*Node)
	return p, nil
}

// meanStd reads the mean and std arguments (per channel, or one for all);
// no std may be zero.
func meanStd(n *Node) (mean, std []float64, err error) {
	if mean, err = floatsParam(n, "mean"); err != nil {
		return nil, nil, err
	}
	if std, err = floatsParam(n, "std"); err != nil {
		return nil, nil, err
	}
	for _, s := range std {
		if s == 0 {
			return nil, nil, fmt.Errorf("fxgraph: node %s (%s): std %v has a zero", n.Name, n.Target, std)
		}
	}
	return mean, std, nil
}

// channelValue returns v's per-channel entry c (one value for all when v
// has one), or def.
func channelValue(v []float64, c int, def float64) float64 {
	switch len(v) {
	case 0:
		return def
	case 1:
		return v[0]
	}
	return v[c]
}

func cropBoxesEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	img, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	boxes, err := strValue(n, 1, value)
	if err != nil {
		return nil, err
	}
	p, err := readCropParams(n)
	if err != nil {
		return nil, err
	}
	var classes *tensor.Tensor
	if p.haveClasses {
		if classes, err = strValue(n, 2, value); err != nil {
			return nil, err
		}
	}
	images := splitImages(img, p.nchw)
	k := int(boxes.Shape[0])
	cols := int(boxes.Shape[1])
	bv := boxes.Float64s()
	c := images[0].c
	out := make([]float32, k*c*int(p.h*p.w))
	for i := range k {
		row := bv[i*cols : (i+1)*cols]
		b := 0
		if cols == 5 {
			b, row = int(row[0]), row[1:]
		}
		if b < 0 || b >= len(images) {
			return nil, fmt.Errorf("box %d is of image %d, the request has %d", i, b, len(images))
		}
		flip, err := p.flipped(classes, i)
		if err != nil {
			return nil, err
		}
		crop, err := cutBox(images[b], row, flip)
		if err != nil {
			return nil, fmt.Errorf("box %d: %w", i, err)
		}
		p.place(crop, out[i*c*int(p.h*p.w):(i+1)*c*int(p.h*p.w)])
	}
	return []*tensor.Tensor{tensor.FromFloat32s(out, int64(k), int64(c), p.h, p.w)}, nil
}

// flipped reports whether box i is turned by 180 degrees.
func (p cropParams) flipped(classes *tensor.Tensor, i int) (bool, error) {
	if classes == nil || p.flipClass < 0 {
		return false, nil
	}
	if classes.Rank() != 2 || classes.Shape[0] <= int64(i) || classes.Shape[1] <= p.flipClass {
		return false, fmt.Errorf("classes is %s, want [K, M] with M > flip_class %d", classes, p.flipClass)
	}
	return classes.Float64At(int64(i)*classes.Shape[1]+p.flipClass) > p.flipThreshold, nil
}

// splitImages returns the images of an [N, H, W, C] or [N, C, H, W]
// tensor as planar images.
func splitImages(t *tensor.Tensor, nchw bool) []*planar {
	s := t.Shape
	n, h, w, c := int(s[0]), int(s[1]), int(s[2]), int(s[3])
	if nchw {
		c, h, w = int(s[1]), int(s[2]), int(s[3])
	}
	vals := t.Float64s()
	out := make([]*planar, n)
	for b := range n {
		im := &planar{c: c, h: h, w: w, v: make([]float32, c*h*w)}
		src := vals[b*c*h*w : (b+1)*c*h*w]
		for ch := range c {
			for y := range h {
				for x := range w {
					i := (y*w+x)*c + ch
					if nchw {
						i = (ch*h+y)*w + x
					}
					im.v[(ch*h+y)*w+x] = float32(src[i])
				}
			}
		}
		out[b] = im
	}
	return out
}

// cutBox cuts the pixels of box edges r (x0, y0, x1, y1; rounded to whole
// pixels and clipped to the image) out of im, rotated by 180 degrees with
// flip.
func cutBox(im *planar, r []float64, flip bool) (*planar, error) {
	x0, y0 := max(0, int(math.Floor(r[0]))), max(0, int(math.Floor(r[1])))
	x1, y1 := min(im.w, int(math.Ceil(r[2]))), min(im.h, int(math.Ceil(r[3])))
	if x1 <= x0 || y1 <= y0 {
		return nil, fmt.Errorf("(%g, %g, %g, %g) holds no pixel of the %dx%d image", r[0], r[1], r[2], r[3], im.w, im.h)
	}
	h, w := y1-y0, x1-x0
	out := &planar{c: im.c, h: h, w: w, v: make([]float32, im.c*h*w)}
	for c := range im.c {
		for y := range h {
			for x := range w {
				sy, sx := y0+y, x0+x
				if flip {
					sy, sx = y1-1-y, x1-1-x
				}
				out.v[(c*h+y)*w+x] = im.at(c, sy, sx)
			}
		}
	}
	return out, nil
}

// place resizes crop into dst ([C, h, w], zeros around what it covers) and
// normalizes it.
func (p cropParams) place(crop *planar, dst []float32) {
	h, w := int(p.h), int(p.w)
	rw := w
	if p.keepRatio {
		rw = min(w, int(math.Ceil(float64(h)*float64(crop.w)/float64(crop.h))))
	}
	r := resizePlanar(crop, h, rw, true, false)
	for c := range r.c {
		scale := float32(p.scale)
		mean, std := float32(channelValue(p.mean, c, 0)), float32(channelValue(p.std, c, 1))
		for y := range h {
			for x := range rw {
				dst[(c*h+y)*w+x] = (r.at(c, y, x)*scale - mean) / std
			}
		}
	}
}

func ctcGreedyShape(n *Node) (Meta, error) {
	idx, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	probs, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	labels, err := n.InputMeta(2)
	if err != nil {
		return Meta{}, err
	}
	if idx.Rank() != 2 || !idx.DType.IsInt() || probs.Rank() != 2 || !probs.DType.IsFloat() || labels.Rank() != 1 || labels.DType != tensor.String {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): indices %s, probs %s, labels %s: want int [K, T], float [K, T] and string [C]", n.Name, n.Target, idx, probs, labels)
	}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: tensor.String, Shape: Shape{idx.Shape[0]}},
		{DType: tensor.Float32, Shape: Shape{idx.Shape[0]}},
	}}, nil
}

func ctcGreedyEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	idx, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	probs, err := strValue(n, 1, value)
	if err != nil {
		return nil, err
	}
	labels, err := strValue(n, 2, value)
	if err != nil {
		return nil, err
	}
	blank, err := n.ParamInt("blank")
	if err != nil {
		return nil, err
	}
	if !slices.Equal(idx.Shape, probs.Shape) {
		return nil, fmt.Errorf("indices %s and probs %s differ in shape", idx, probs)
	}
	k, t := int(idx.Shape[0]), int(idx.Shape[1])
	text := tensor.New(tensor.String, int64(k))
	score := make([]float32, k)
	for i := range k {
		var b bytes.Buffer
		var sum float64
		kept := 0
		prev := int64(-1)
		for j := range t {
			c := idx.Int64At(int64(i*t + j))
			if c != prev && c != blank {
				if c < 0 || c >= labels.NumElements() {
					return nil, fmt.Errorf("class %d at row %d step %d is outside the %d labels", c, i, j, labels.NumElements())
				}
				b.Write(labels.Strings[c])
				sum += probs.Float64At(int64(i*t + j))
				kept++
			}
			prev = c
		}
		text.Strings[i] = b.Bytes()
		if kept > 0 {
			score[i] = float32(sum / float64(kept))
		}
	}
	return []*tensor.Tensor{text, tensor.FromFloat32s(score, int64(k))}, nil
}
