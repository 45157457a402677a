package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// The post transforms of ai.onnx.ml's classifiers and regressors, computed
// the way ONNX Runtime computes them (onnxruntime/core/providers/cpu/ml,
// ml_common.h) in float32: a logistic of |x| mirrored for negative x, a
// softmax from the maximum, a softmax that leaves zeros out, and PROBIT
// through ONNX Runtime's approximation of erfinv (not the exact inverse),
// so that probabilities agree with ONNX Runtime's to float rounding.

// postTransforms are the names ONNX-ML's post_transform attribute takes.
var postTransforms = map[string]bool{"NONE": true, "LOGISTIC": true, "SOFTMAX": true, "SOFTMAX_ZERO": true, "PROBIT": true}

// postTransformAttr returns the node's post_transform, checked.
func postTransformAttr(c *Ctx) (string, error) {
	pt := c.AttrString("post_transform", "NONE")
	if !postTransforms[pt] {
		return "", fmt.Errorf("post_transform %q, want NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO or PROBIT", pt)
	}
	return pt, nil
}

// transform applies post transform pt to the scores x [N, C] (float32):
// elementwise for LOGISTIC and PROBIT, across each row for the softmaxes.
func (b *mlBuild) transform(pt string, x *fxgraph.Node) *fxgraph.Node {
	switch pt {
	case "LOGISTIC":
		return b.logistic(x)
	case "PROBIT":
		return b.probit(x)
	case "SOFTMAX":
		return b.softmax(x)
	case "SOFTMAX_ZERO":
		return b.softmaxZero(x)
	}
	return x
}

func (b *mlBuild) f32(v float64) *fxgraph.Node { return b.scalar(tensor.Float32, v) }

// logistic is ONNX Runtime's ComputeLogistic: v = 1 / (1 + exp(-|x|)),
// 1 - v for negative x.
func (b *mlBuild) logistic(x *fxgraph.Node) *fxgraph.Node {
	one := b.f32(1)
	v := b.div(one, b.add(one, b.exp(b.neg(b.abs(x)))))
	return b.where(b.lt(x, b.f32(0)), b.sub(one, v), v)
}

// probit is ONNX Runtime's ComputeProbit: sqrt(2) * ErfInv(2x - 1) with its
// approximation of ErfInv, every constant rounded to float32 as C++ does.
func (b *mlBuild) probit(x *fxgraph.Node) *fxgraph.Node {
	one := b.f32(1)
	y := b.sub(b.mul(b.f32(2), x), one)
	sgn := b.where(b.lt(y, b.f32(0)), b.f32(-1), one)
	lg := b.log(b.mul(b.sub(one, y), b.add(one, y)))
	c1 := float32(2) / (float32(3.14159) * float32(0.147))
	c2 := float32(1) / float32(0.147)
	v := b.add(b.f32(float64(c1)), b.mul(b.f32(0.5), lg))
	v2 := b.mul(b.f32(float64(c2)), lg)
	v3 := b.add(b.neg(v), b.sqrt(b.sub(b.mul(v, v), v2)))
	return b.mul(b.f32(float64(float32(math.Sqrt2))), b.mul(sgn, b.sqrt(v3)))
}

func (b *mlBuild) rowMax(x *fxgraph.Node) *fxgraph.Node {
	m := b.emit(fxgraph.AtenAmax, x, []any{int64(1)}, true)
	// ONNX Runtime starts its maximum at -FLT_MAX.
	return b.emit(fxgraph.AtenMaximum, m, b.f32(-math.MaxFloat32))
}

func (b *mlBuild) rowSum(x *fxgraph.Node) *fxgraph.Node {
	return b.emit(fxgraph.AtenSumDimIntList, x, []any{int64(1)}, true)
}

// softmax is ONNX Runtime's ComputeSoftmax of each row.
func (b *mlBuild) softmax(x *fxgraph.Node) *fxgraph.Node {
	e := b.exp(b.sub(x, b.rowMax(x)))
	return b.div(e, b.rowSum(e))
}

// softmaxZero is ComputeSoftmaxZero: entries within 1e-7 of zero are
// scaled by exp(-max) instead of exponentiated, and left out of the sum.
func (b *mlBuild) softmaxZero(x *fxgraph.Node) *fxgraph.Node {
	mx := b.rowMax(x)
	eps := b.f32(float64(float32(1e-7)))
	nz := b.or(b.gt(x, eps), b.lt(x, b.neg(eps)))
	e := b.exp(b.sub(x, mx))
	zero := b.mul(x, b.exp(b.neg(mx)))
	s := b.rowSum(b.where(nz, e, b.f32(0)))
	return b.div(b.where(nz, e, zero), s)
}
