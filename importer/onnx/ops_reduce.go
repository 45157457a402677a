package onnx

import (
	"errors"
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerReductions registers converters of reductions, ArgMax/ArgMin,
// TopK, CumSum and the NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss
// losses.
func registerReductions(cs converters) {
	// The opset from which each reduction takes its axes as input 1 rather
	// than as the "axes" attribute.
	for _, r := range []struct {
		op    string
		since int64
		emit  rdEmitFunc
	}{
		{"ReduceSum", 13, rdEmitSum},
		{"ReduceMean", 18, rdEmitMean},
		{"ReduceMax", 18, rdEmitSimple(fxgraph.AtenAmax)},
		{"ReduceMin", 18, rdEmitSimple(fxgraph.AtenAmin)},
		{"ReduceProd", 18, rdEmitProd},
		{"ReduceL1", 18, rdEmitL1},
		{"ReduceL2", 18, rdEmitL2},
		{"ReduceSumSquare", 18, rdEmitSumSquare},
		{"ReduceLogSum", 18, rdEmitLogSum},
		{"ReduceLogSumExp", 18, rdEmitLogSumExp},
	} {
		cs.add(r.op, rdReduceConverter(r.op, r.since, r.emit))
	}
	cs.add("ArgMax", rdArgConverter(fxgraph.AtenArgmax))
	cs.add("ArgMin", rdArgConverter(fxgraph.AtenArgmin))
	cs.add("TopK", convertTopK(false))
	cs.register("", "TopK", 10, convertTopK(true))
	cs.register("", "CumSum", 11, convertCumSum)
	cs.register("", "NegativeLogLikelihoodLoss", 12, convertNLLLoss)
	cs.register("", "SoftmaxCrossEntropyLoss", 12, convertSoftmaxCrossEntropyLoss)
}

// rdReduction is a decoded ONNX reduction: the input and the dims to reduce
// (normalized, increasing; every dim when the model gives none).
type rdReduction struct {
	x    *fxgraph.Node
	meta fxgraph.TensorMeta
	axes []int64
	keep bool
}

// rdEmitFunc emits the IR of one reduction kind and returns its result.
type rdEmitFunc func(c *Ctx, r rdReduction) (*fxgraph.Node, error)

// rdReduceConverter decodes the common attributes of the Reduce* operators:
// axes (attribute before opset axesInputSince, optional input 1 from then
// on), keepdims (default 1) and noop_with_empty_axes.
func rdReduceConverter(op string, axesInputSince int64, emit rdEmitFunc) Converter {
	return func(c *Ctx, _ *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		r := rdReduction{x: x, meta: Meta(x), keep: c.AttrInt("keepdims", 1) != 0}
		rank := r.meta.Rank()
		var axes []int64
		if c.Opset >= axesInputSince {
			if c.HasInput(1) {
				ax, err := c.Input(1)
				if err != nil {
					return err
				}
				// An axes input known to be empty needs no value.
				if s := Meta(ax).Shape; !(len(s) == 1 && s[0] == fxgraph.D(0)) {
					if axes, err = c.ConstInts(1); err != nil {
						return err
					}
				}
			}
		} else {
			axes = c.AttrInts("axes", nil)
		}
		if len(axes) == 0 {
			if c.AttrInt("noop_with_empty_axes", 0) != 0 {
				switch op {
				case "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd":
					c.SetOutput(0, x) // reducing no dim is the identity
					return nil
				}
				return Unsupported("%s with noop_with_empty_axes and no axes", op)
			}
			for i := 0; i < rank; i++ {
				axes = append(axes, int64(i))
			}
		}
		seen := map[int]bool{}
		for _, a := range axes {
			k, err := fxgraph.NormDim(a, rank)
			if err != nil {
				return fmt.Errorf("axes %v: %w", axes, err)
			}
			if seen[k] {
				return fmt.Errorf("axes %v name dim %d twice", axes, k)
			}
			seen[k] = true
		}
		for i := 0; i < rank; i++ {
			if seen[i] {
				r.axes = append(r.axes, int64(i))
			}
		}
		out, err := emit(c, r)
		if err != nil {
			return err
		}
		if got := Meta(out).DType; got != r.meta.DType {
			return fmt.Errorf("%s produced %s, want %s", op, got, r.meta.DType)
		}
		c.SetOutput(0, out)
		return nil
	}
}

// all reports whether r reduces every dim.
func (r rdReduction) all() bool { return len(r.axes) == r.meta.Rank() }

// rdSum emits aten.sum.dim_IntList of x over r's axes in dtype dt.
func rdSum(c *Ctx, x *fxgraph.Node, r rdReduction, dt tensor.DType) (*fxgraph.Node, error) {
	return c.EmitKw(fxgraph.AtenSumDimIntList, []any{x, ints(r.axes), r.keep}, map[string]any{"dtype": dt})
}

func rdEmitSum(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	if r.meta.DType == tensor.Bool || r.meta.DType == tensor.String {
		return nil, Unsupported("ReduceSum of %s", r.meta.DType)
	}
	return rdSum(c, r.x, r, r.meta.DType)
}

// rdEmitMean emits aten.mean.dim; integer inputs are averaged in float64 and
// truncated back, as the ONNX reference (numpy mean then astype) does.
func rdEmitMean(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	dt := r.meta.DType
	switch {
	case dt.IsFloat():
		return c.Emit(fxgraph.AtenMeanDim, r.x, ints(r.axes), r.keep)
	case dt.IsInt():
		xf, err := c.EmitKw(fxgraph.Aten_ToCopy, []any{r.x}, map[string]any{"dtype": tensor.Float64})
		if err != nil {
			return nil, err
		}
		m, err := c.Emit(fxgraph.AtenMeanDim, xf, ints(r.axes), r.keep)
		if err != nil {
			return nil, err
		}
		return c.EmitKw(fxgraph.Aten_ToCopy, []any{m}, map[string]any{"dtype": dt})
	}
	return nil, Unsupported("ReduceMean of %s", dt)
}

// rdEmitSimple emits target(x, axes, keepdim) (amax, amin).
func rdEmitSimple(target *fxgraph.Op) rdEmitFunc {
	return func(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
		if r.meta.DType == tensor.String || r.meta.DType.IsComplex() {
			return nil, Unsupported("%s of %s", target, r.meta.DType)
		}
		return c.Emit(target, r.x, ints(r.axes), r.keep)
	}
}

// rdEmitProd emits aten.prod.default for a full reduction without keepdims,
// else one aten.prod.dim_int per axis (highest first, so the lower axes keep
// their positions when dims are dropped).
func rdEmitProd(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	dt := r.meta.DType
	if dt == tensor.Bool || dt == tensor.String || dt.IsComplex() {
		return nil, Unsupported("ReduceProd of %s", dt)
	}
	kw := map[string]any{"dtype": dt}
	if r.all() && !r.keep {
		return c.EmitKw(fxgraph.AtenProd, []any{r.x}, kw)
	}
	out := r.x
	for i := len(r.axes) - 1; i >= 0; i-- {
		var err error
		if out, err = c.EmitKw(fxgraph.AtenProdDimInt, []any{out, r.axes[i], r.keep}, kw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rdEmitL1 emits linalg_vector_norm(x, 1) for floats and sum(abs(x)) for
// integers.
func rdEmitL1(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	dt := r.meta.DType
	switch {
	case dt.IsFloat():
		return c.Emit(fxgraph.AtenLinalgVectorNorm, r.x, 1.0, ints(r.axes), r.keep)
	case dt.IsInt():
		a, err := c.Emit(fxgraph.AtenAbs, r.x)
		if err != nil {
			return nil, err
		}
		return rdSum(c, a, r, dt)
	}
	return nil, Unsupported("ReduceL1 of %s", dt)
}

// rdEmitL2 emits linalg_vector_norm(x, 2) (floats only).
func rdEmitL2(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	if !r.meta.DType.IsFloat() {
		return nil, Unsupported("ReduceL2 of %s", r.meta.DType)
	}
	return c.Emit(fxgraph.AtenLinalgVectorNorm, r.x, 2.0, ints(r.axes), r.keep)
}

// rdEmitSumSquare emits sum(x * x).
func rdEmitSumSquare(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	dt := r.meta.DType
	if !dt.IsFloat() && !dt.IsInt() {
		return nil, Unsupported("ReduceSumSquare of %s", dt)
	}
	sq, err := c.Emit(fxgraph.AtenMulTensor, r.x, r.x)
	if err != nil {
		return nil, err
	}
	return rdSum(c, sq, r, dt)
}

// rdEmitLogSum emits log(sum(x)) (floats only; log of an empty sum is -inf).
func rdEmitLogSum(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	if !r.meta.DType.IsFloat() {
		return nil, Unsupported("ReduceLogSum of %s", r.meta.DType)
	}
	s, err := rdSum(c, r.x, r, r.meta.DType)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenLog, s)
}

// rdEmitLogSumExp emits aten.logsumexp (floats only).
func rdEmitLogSumExp(c *Ctx, r rdReduction) (*fxgraph.Node, error) {
	if !r.meta.DType.IsFloat() {
		return nil, Unsupported("ReduceLogSumExp of %s", r.meta.DType)
	}
	return c.Emit(fxgraph.AtenLogsumexp, r.x, ints(r.axes), r.keep)
}

// rdArgConverter converts ArgMax / ArgMin (axis default 0, keepdims default
// 1). select_last_index=1 is argmax of the input flipped along axis, mapped
// back with (n - 1) - index.
func rdArgConverter(target *fxgraph.Op) Converter {
	return func(c *Ctx, _ *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		m := Meta(x)
		if m.DType == tensor.String || m.DType.IsComplex() {
			return Unsupported("%s of %s", target, m.DType)
		}
		axis, err := fxgraph.NormDim(c.AttrInt("axis", 0), max(m.Rank(), 1))
		if err != nil {
			return err
		}
		keep := c.AttrInt("keepdims", 1) != 0
		if c.AttrInt("select_last_index", 0) == 0 {
			out, err := c.Emit(target, x, int64(axis), keep)
			if err != nil {
				return err
			}
			c.SetOutput(0, out)
			return nil
		}
		if m.Rank() == 0 {
			out, err := c.Emit(target, x, int64(axis), keep)
			if err != nil {
				return err
			}
			c.SetOutput(0, out)
			return nil
		}
		size := m.Shape[axis]
		if !size.IsStatic() {
			return Unsupported("%s with select_last_index over symbolic dim %s", target, size)
		}
		flipped, err := c.Emit(fxgraph.AtenFlip, x, ints([]int64{int64(axis)}))
		if err != nil {
			return err
		}
		idx, err := c.Emit(target, flipped, int64(axis), keep)
		if err != nil {
			return err
		}
		out, err := c.Emit(fxgraph.AtenSubTensor, c.ScalarConst(tensor.Int64, float64(size.Size-1)), idx)
		if err != nil {
			return err
		}
		c.SetOutput(0, out)
		return nil
	}
}

// convertCumSum converts CumSum(x, axis) with the exclusive and reverse
// attributes: reverse flips along axis before and after the scan; exclusive
// scans the input shifted by one (its last element dropped, a zero padded in
// front). An axis that is not a constant is handled by scanning along every
// dim and selecting the one the axis names at run time.
func convertCumSum(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	if !m.DType.IsFloat() && !m.DType.IsInt() {
		return Unsupported("CumSum of %s", m.DType)
	}
	if m.Rank() == 0 {
		return Unsupported("CumSum of a scalar")
	}
	cs := cumSum{c: c, x: x, m: m, rank: m.Rank(), exclusive: c.AttrInt("exclusive", 0) != 0, reverse: c.AttrInt("reverse", 0) != 0}
	var out *fxgraph.Node
	if t := c.Const(1); t != nil {
		if t.NumElements() != 1 || !t.DType.IsInt() {
			return fmt.Errorf("axis is %s, want one integer", t)
		}
		axis, err := fxgraph.NormDim(t.Int64At(0), cs.rank)
		if err != nil {
			return err
		}
		out, err = cs.scan(axis)
		if err != nil {
			return err
		}
	} else if out, err = cs.anyAxis(); err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// cumSum is one CumSum being converted.
type cumSum struct {
	c                  *Ctx
	x                  *fxgraph.Node
	m                  fxgraph.TensorMeta
	rank               int
	exclusive, reverse bool
}

// scan is the CumSum along axis.
func (cs cumSum) scan(axis int) (*fxgraph.Node, error) {
	c, v := cs.c, cs.x
	var err error
	if d := cs.m.Shape[axis]; d.IsStatic() && d.Size == 0 {
		return cs.x, nil
	}
	if cs.reverse {
		if v, err = c.Emit(fxgraph.AtenFlip, v, ints([]int64{int64(axis)})); err != nil {
			return nil, err
		}
	}
	if cs.exclusive {
		if v, err = c.Emit(fxgraph.AtenSliceTensor, v, int64(axis), int64(0), int64(-1), int64(1)); err != nil {
			return nil, err
		}
		pad := make([]int64, 2*(cs.rank-axis))
		pad[len(pad)-2] = 1
		if v, err = c.Emit(fxgraph.AtenConstantPadNd, v, ints(pad), 0.0); err != nil {
			return nil, err
		}
	}
	if v, err = c.EmitKw(fxgraph.AtenCumsum, []any{v, int64(axis)}, map[string]any{"dtype": cs.m.DType}); err != nil {
		return nil, err
	}
	if cs.reverse {
		if v, err = c.Emit(fxgraph.AtenFlip, v, ints([]int64{int64(axis)})); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// anyAxis is the CumSum along the axis input 1 names at run time:
// where(axis == i || axis == i - rank, scan(i), ...).
func (cs cumSum) anyAxis() (*fxgraph.Node, error) {
	c, rank := cs.c, cs.rank
	axisNode, err := c.Input(1)
	if err != nil {
		return nil, err
	}
	if am := Meta(axisNode); am.Rank() > 1 || !am.DType.IsInt() {
		return nil, fmt.Errorf("axis is %s, want an integer scalar", am)
	}
	if Meta(axisNode).Rank() == 1 {
		if axisNode, err = c.Emit(fxgraph.AtenSqueezeDims, axisNode, ints([]int64{0})); err != nil {
			return nil, err
		}
	}
	var out *fxgraph.Node
	for i := rank - 1; i >= 0; i-- {
		s, err := cs.scan(i)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = s // the last dim also stands for out-of-range axes
			continue
		}
		pos, err := c.Emit(fxgraph.AtenEqScalar, axisNode, int64(i))
		if err != nil {
			return nil, err
		}
		neg, err := c.Emit(fxgraph.AtenEqScalar, axisNode, int64(i-rank))
		if err != nil {
			return nil, err
		}
		cond, err := c.Emit(fxgraph.AtenLogicalOr, pos, neg)
		if err != nil {
			return nil, err
		}
		if out, err = c.Emit(fxgraph.AtenWhereSelf, cond, s, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rdReductionCode maps ONNX's reduction attribute to PyTorch's numbering.
func rdReductionCode(c *Ctx) (int64, error) {
	switch s := c.AttrString("reduction", "mean"); s {
	case "none":
		return 0, nil
	case "mean":
		return 1, nil
	case "sum":
		return 2, nil
	default:
		return 0, Unsupported("reduction %q", s)
	}
}

// rdNoIgnoreIndex stands for an absent ignore_index: a class index no valid
// target has (PyTorch's default).
const rdNoIgnoreIndex = -100

// rdEmitNLL emits aten.nll_loss_forward(logp, target, weight, reduction,
// ignore_index) and returns its loss.
func rdEmitNLL(c *Ctx, logp, target, weight *fxgraph.Node) (*fxgraph.Node, error) {
	if dt := Meta(logp).DType; !dt.IsFloat() {
		return nil, Unsupported("loss of %s", dt)
	}
	if dt := Meta(target).DType; !dt.IsInt() {
		return nil, Unsupported("loss targets of %s", dt)
	}
	red, err := rdReductionCode(c)
	if err != nil {
		return nil, err
	}
	ignore := int64(rdNoIgnoreIndex)
	if a := c.Attr("ignore_index"); a != nil {
		ignore = a.I
	}
	var w any
	if weight != nil {
		w = weight
	}
	t, err := c.Emit(fxgraph.AtenNllLossForward, logp, target, w, red, ignore)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.GetItem, t, int64(0))
}

// convertNLLLoss converts NegativeLogLikelihoodLoss(input, target, weight?).
func convertNLLLoss(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	target, err := c.Input(1)
	if err != nil {
		return err
	}
	weight, err := c.OptInput(2)
	if err != nil {
		return err
	}
	out, err := rdEmitNLL(c, x, target, weight)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// convertSoftmaxCrossEntropyLoss converts SoftmaxCrossEntropyLoss(scores,
// labels, weights?) to log_softmax over the class dim (1) followed by the NLL
// loss; the optional second output is the log-probabilities.
func convertSoftmaxCrossEntropyLoss(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	labels, err := c.Input(1)
	if err != nil {
		return err
	}
	weight, err := c.OptInput(2)
	if err != nil {
		return err
	}
	if Meta(x).Rank() < 2 {
		return fmt.Errorf("scores have shape %s, want (N, C, ...)", Meta(x).Shape)
	}
	logp, err := c.Emit(fxgraph.Aten_LogSoftmax, x, int64(1), false)
	if err != nil {
		return err
	}
	out, err := rdEmitNLL(c, logp, labels, weight)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	if c.HasOutput(1) {
		c.SetOutput(1, logp)
	}
	return nil
}

// convertTopK converts TopK to aten.topk.default: k is the "k" attribute
// before opset 10 and constant input 1 (one int64) from then on; axis,
// largest and sorted (opset 11) are attributes. The lowering sorts
// (stablehlo.sort), so k is only bounded by the axis. A K computed from
// graph inputs' values at run time gives outputs of data-dependent size
// (topKRunTime).
func convertTopK(kInput bool) Converter {
	return func(c *Ctx, _ *Node) error {
		x, err := c.Input(0)
		if err != nil {
			return err
		}
		k := c.AttrInt("k", -1)
		if kInput {
			ks, err := c.ConstInts(1)
			var nv *NeedsValueError
			if errors.As(err, &nv) && len(nv.Inputs) > 0 {
				return topKRunTime(c, x)
			}
			if err != nil {
				return err
			}
			if len(ks) != 1 {
				return fmt.Errorf("TopK: K has %d values, want 1", len(ks))
			}
			k = ks[0]
		}
		if k < 0 {
			return fmt.Errorf("TopK: k must be >= 0, got %d", k)
		}
		m := Meta(x)
		if m.DType == tensor.Bool || m.DType == tensor.String || m.DType.IsComplex() {
			return Unsupported("TopK of %s", m.DType)
		}
		top, err := c.Emit(fxgraph.AtenTopk, x, k, c.AttrInt("axis", -1), c.AttrInt("largest", 1) != 0, c.AttrInt("sorted", 1) != 0)
		if err != nil {
			return err
		}
		_, err = setItems(c, top, 2)
		return err
	}
}

// setItems sets output i of the node to element i of tuple, for the first
// n outputs the model uses, and returns them (nil where unused).
func setItems(c *Ctx, tuple *fxgraph.Node, n int) ([]*fxgraph.Node, error) {
	outs := make([]*fxgraph.Node, n)
	for i := range n {
		if !c.HasOutput(i) {
			continue
		}
		out, err := c.Emit(fxgraph.GetItem, tuple, int64(i))
		if err != nil {
			return nil, err
		}
		c.SetOutput(i, out)
		outs[i] = out
	}
	return outs, nil
}

// topKRunTime converts TopK whose K is a run-time value: the whole axis
// sorted (its static size n is the bound), the outputs bounded values
// (docs/DATA-DEPENDENT.md) along the axis counted by min(max(K, 0), n), so
// that the answer holds exactly the K best.
func topKRunTime(c *Ctx, x *fxgraph.Node) error {
	m := Meta(x)
	axis, err := fxgraph.NormDim(c.AttrInt("axis", -1), m.Rank())
	if err != nil {
		return fmt.Errorf("TopK: %w", err)
	}
	if c.s.bounded == nil || !m.Shape[axis].IsStatic() {
		return Unsupported("TopK with a run-time K over a symbolic axis %s of %s (or inside a subgraph): its outputs' size would have no static bound", m.Shape[axis], m)
	}
	n := m.Shape[axis].Size
	top, err := c.Emit(fxgraph.AtenTopk, x, n, int64(axis), c.AttrInt("largest", 1) != 0, true)
	if err != nil {
		return err
	}
	kv, err := c.Input(1)
	if err != nil {
		return err
	}
	if kv, err = c.Emit(fxgraph.AtenView, kv, ints(nil)); err != nil {
		return err
	}
	if kv, err = nnCast(c, kv, tensor.Int64); err != nil {
		return err
	}
	count, err := c.Emit(fxgraph.AtenClamp, kv, int64(0), n)
	if err != nil {
		return err
	}
	outs, err := setItems(c, top, 2)
	for _, out := range outs {
		if out != nil {
			*c.s.bounded = append(*c.s.bounded, boundedValue{value: out, count: count, axis: int(axis), op: "TopK"})
		}
	}
	return err
}
