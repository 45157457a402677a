package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// The preprocessing and linear operators of ai.onnx.ml, written with IR
// ops as ONNX Runtime computes them (onnxruntime/core/providers/cpu/ml):
// float32 outputs from inputs converted to float32 (float64 kept where
// ONNX Runtime computes in double), and the same choices of label.

const mlDomain = "ai.onnx.ml"

func registerML(cs converters) {
	cs.register(mlDomain, "Scaler", 1, scalerConvert)
	cs.register(mlDomain, "Normalizer", 1, normalizerConvert)
	cs.register(mlDomain, "Binarizer", 1, binarizerConvert)
	cs.register(mlDomain, "Imputer", 1, imputerConvert)
	cs.register(mlDomain, "LinearRegressor", 1, linearRegressorConvert)
	cs.register(mlDomain, "LinearClassifier", 1, linearClassifierConvert)
	cs.register(mlDomain, "ArrayFeatureExtractor", 1, arrayFeatureExtractorConvert)
	cs.register(mlDomain, "FeatureVectorizer", 1, featureVectorizerConvert)
	cs.register(mlDomain, "ZipMap", 1, zipMapConvert)
	cs.register(mlDomain, "SVMRegressor", 1, svmRegressorConvert)
	cs.register(mlDomain, "SVMClassifier", 1, svmClassifierConvert)
	registerMLTrees(cs)
	registerMLEncoders(cs)
}

// floatInput returns input 0 converted to float32, or kept as float64.
func floatInput(b *mlBuild) *fxgraph.Node {
	x, err := b.c.Input(0)
	if err != nil {
		b.err = err
		return nil
	}
	switch dt := Meta(x).DType; {
	case dt == tensor.Float64 || dt == tensor.Float32:
		return x
	case dt.IsInt() || dt.IsFloat():
		return b.to(x, tensor.Float32)
	default:
		b.err = Unsupported("%s input (want a number tensor)", Meta(x))
		return nil
	}
}

// vectorConst is a 1-D constant of v in dtype dt.
func vectorConst(c *Ctx, name string, dt tensor.DType, v []float64) *fxgraph.Node {
	t := tensor.New(dt, int64(len(v)))
	for i, e := range v {
		t.SetFloat64(int64(i), e)
	}
	return c.Constant(name, t)
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, e := range v {
		out[i] = float64(e)
	}
	return out
}

func scalerConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x := floatInput(b)
	if b.err != nil {
		return b.err
	}
	dt := Meta(x).DType
	offset := vectorConst(c, "offset", dt, f64s(c.AttrFloats("offset", []float32{0})))
	scale := vectorConst(c, "scale", dt, f64s(c.AttrFloats("scale", []float32{1})))
	c.SetOutput(0, b.to(b.mul(b.sub(x, offset), scale), tensor.Float32))
	return b.err
}

func normalizerConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	if Meta(x).Rank() == 1 {
		x = b.emit(fxgraph.AtenUnsqueeze, x, int64(0))
	}
	norm := c.AttrString("norm", "MAX")
	f := b.to(x, tensor.Float32)
	zero := b.f32(0)
	var div *fxgraph.Node
	switch norm {
	case "MAX":
		m := b.emit(fxgraph.AtenAmax, f, []any{int64(1)}, true)
		div = b.emit(fxgraph.AtenMaximum, m, b.f32(-math.MaxFloat32))
	case "L1":
		div = b.emit(fxgraph.AtenSumDimIntList, b.abs(f), []any{int64(1)}, true)
	case "L2":
		sq := b.to(b.mul(x, x), tensor.Float32)
		sum := b.emit(fxgraph.AtenSumDimIntList, sq, []any{int64(1)}, true)
		r := b.sqrt(b.div(sq, sum))
		r = b.where(b.lt(f, zero), b.neg(r), r)
		c.SetOutput(0, b.reshapeLike(b.where(b.eq(sum, zero), f, r), Meta(x)))
		return b.err
	default:
		return fmt.Errorf("norm %q, want MAX, L1 or L2", norm)
	}
	y := b.where(b.eq(div, zero), f, b.div(f, div))
	c.SetOutput(0, b.reshapeLike(y, Meta(x)))
	return b.err
}

// reshapeLike gives y the shape of the node's input 0 when that is 1-D.
func (b *mlBuild) reshapeLike(y *fxgraph.Node, _ fxgraph.TensorMeta) *fxgraph.Node {
	in, err := b.c.Input(0)
	if err != nil || y == nil || Meta(in).Rank() != 1 {
		return y
	}
	return b.emit(fxgraph.AtenSqueezeDim, y, int64(0))
}

func binarizerConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	dt := Meta(x).DType
	t := b.scalar(tensor.Float32, c.AttrFloat("threshold", 0))
	one, zero := b.scalar(dt, 1), b.scalar(dt, 0)
	c.SetOutput(0, b.where(b.gt(b.to(x, tensor.Float32), t), one, zero))
	return b.err
}

func imputerConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	dt := Meta(x).DType
	var values []float64
	var replaced float64
	if dt.IsFloat() {
		values, replaced = f64s(c.AttrFloats("imputed_value_floats", nil)), c.AttrFloat("replaced_value_float", 0)
	} else {
		for _, v := range c.AttrInts("imputed_value_int64s", nil) {
			values = append(values, float64(v))
		}
		replaced = float64(c.AttrInt("replaced_value_int64", 0))
	}
	if len(values) == 0 {
		return fmt.Errorf("Imputer without imputed values for %s input", dt)
	}
	fill := vectorConst(c, "imputed", dt, values)
	var hit *fxgraph.Node
	if math.IsNaN(replaced) {
		hit = b.isnan(x)
	} else {
		hit = b.eq(x, b.scalar(dt, replaced))
	}
	c.SetOutput(0, b.where(hit, fill, x))
	return b.err
}

// linearScores returns X [N, F] (as float32) times coefficients [T, F]
// transposed, plus intercepts: [N, T].
func (b *mlBuild) linearScores(targets int64) *fxgraph.Node {
	x := b.rows(floatInput(b))
	if b.err != nil {
		return nil
	}
	x = b.to(x, tensor.Float32)
	coef := f64s(b.c.AttrFloats("coefficients", nil))
	if targets < 1 || int64(len(coef))%targets != 0 {
		b.err = fmt.Errorf("%d coefficients for %d targets", len(coef), targets)
		return nil
	}
	feats := int64(len(coef)) / targets
	if f := Meta(x).Shape[1]; f.IsStatic() && f.Size != feats {
		b.err = fmt.Errorf("input has %d features, the coefficients %d", f.Size, feats)
		return nil
	}
	w := tensor.New(tensor.Float32, feats, targets)
	for t := range targets {
		for f := range feats {
			w.SetFloat64(f*targets+t, coef[t*feats+f])
		}
	}
	s := b.mm(x, b.c.Constant("coefficients", w))
	if icpt := b.c.AttrFloats("intercepts", nil); len(icpt) > 0 {
		s = b.add(s, vectorConst(b.c, "intercepts", tensor.Float32, f64s(icpt)))
	}
	return s
}

func linearRegressorConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	pt, err := postTransformAttr(c)
	if err != nil {
		return err
	}
	targets := c.AttrInt("targets", 1)
	s := b.linearScores(targets)
	if targets == 1 && pt != "PROBIT" {
		pt = "NONE" // ONNX Runtime transforms a single target only by PROBIT
	}
	c.SetOutput(0, b.transform(pt, s))
	return b.err
}

func linearClassifierConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	pt, err := postTransformAttr(c)
	if err != nil {
		return err
	}
	ints, strs := classLabels(c)
	if ints == nil && strs == nil {
		ints = c.AttrInts("classlabels_ints", nil)
	}
	labels := int64(len(ints) + len(strs))
	targets := int64(len(c.AttrFloats("intercepts", nil)))
	s := b.linearScores(targets)
	if b.err != nil {
		return b.err
	}
	if targets == 1 {
		// One score: the positive label where it is > 0; with two labels
		// a second column 1 - score (no transform but PROBIT).
		pos := b.gt(b.squeeze1(s), b.f32(0))
		idx := b.where(pos, b.scalar(tensor.Int64, 1), b.scalar(tensor.Int64, 0))
		if labels == 2 {
			c.SetOutput(0, b.labels(idx, ints, strs))
		} else {
			c.SetOutput(0, b.rawBinaryLabel(idx, strs != nil))
		}
		switch {
		case pt == "PROBIT":
			s = b.probit(s)
			if labels == 2 {
				s = b.cat(1, s, b.mul(s, b.f32(0)))
			}
		case labels == 2:
			s = b.cat(1, b.sub(b.f32(1), s), s)
		}
		c.SetOutput(1, s)
		return b.err
	}
	if labels != targets {
		return fmt.Errorf("%d class labels for %d intercepts", labels, targets)
	}
	c.SetOutput(0, b.labels(b.emit(fxgraph.AtenArgmax, s, int64(1)), ints, strs))
	c.SetOutput(1, b.transform(pt, s))
	return b.err
}

// rawBinaryLabel is ONNX Runtime's label when a binary score has no two
// labels to name: 1 or 0 (as strings for a string classifier).
func (b *mlBuild) rawBinaryLabel(idx *fxgraph.Node, strings bool) *fxgraph.Node {
	if !strings {
		return idx
	}
	return b.stringLabels(idx, [][]byte{[]byte("0"), []byte("1")})
}

func arrayFeatureExtractorConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	idx, err := c.Input(1)
	if err != nil {
		return err
	}
	if Meta(x).Rank() == 1 {
		x = b.emit(fxgraph.AtenUnsqueeze, x, int64(0))
	}
	idx = b.emit(fxgraph.AtenReshape, b.to(idx, tensor.Int64), []any{int64(-1)})
	c.SetOutput(0, b.emit(fxgraph.AtenIndexSelect, x, int64(Meta(x).Rank()-1), idx))
	return b.err
}

func featureVectorizerConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	dims := c.AttrInts("inputdimensions", nil)
	ins, err := c.Inputs()
	if err != nil {
		return err
	}
	if len(dims) != len(ins) {
		return fmt.Errorf("%d inputdimensions for %d inputs", len(dims), len(ins))
	}
	var parts []*fxgraph.Node
	for i, x := range ins {
		x = b.to(b.rows(x), tensor.Float32)
		if b.err != nil {
			return b.err
		}
		have := Meta(x).Shape[1]
		switch {
		case !have.IsStatic():
			return Unsupported("FeatureVectorizer input %d with a symbolic width", i)
		case have.Size > dims[i]:
			x = b.emit(fxgraph.AtenSliceTensor, x, int64(1), int64(0), dims[i])
		case have.Size < dims[i]:
			x = b.emit(fxgraph.AtenConstantPadNd, x, []any{int64(0), dims[i] - have.Size}, 0.0)
		}
		parts = append(parts, x)
	}
	c.SetOutput(0, b.cat(1, parts...))
	return b.err
}

// zipMapConvert serves ZipMap's sequence of maps in its tensor form: the
// probabilities [N, C] themselves, column j for the j-th class label
// (docs/ONNX-ML.md); the labels are the node's attribute.
func zipMapConvert(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	ints, strs := classLabels(c)
	if m.Rank() != 2 || !m.Shape[1].IsStatic() || m.Shape[1].Size != int64(len(ints)+len(strs)) {
		return fmt.Errorf("ZipMap of %s with %d class labels", m, len(ints)+len(strs))
	}
	c.SetOutput(0, x)
	return nil
}
