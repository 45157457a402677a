package fxgraph

import (
	"fmt"

	"github.com/xserve/xserve/tensor"
)

// registerReductions registers reductions (sum, mean, amax, argmax, ...),
// cumulative ops and losses.
//
// Signatures follow PyTorch's native_functions.yaml:
//
//	aten.sum.default(self, *, dtype=None)
//	aten.sum.dim_IntList(self, dim, keepdim=False, *, dtype=None)
//	aten.mean.default(self, *, dtype=None)
//	aten.mean.dim(self, dim, keepdim=False, *, dtype=None)
//	aten.prod.default(self, *, dtype=None)
//	aten.prod.dim_int(self, dim, keepdim=False, *, dtype=None)
//	aten.amax.default(self, dim=[], keepdim=False)
//	aten.amin.default(self, dim=[], keepdim=False)
//	aten.max.default(self) / aten.min.default(self)
//	aten.max.dim(self, dim, keepdim=False) -> (values, indices)
//	aten.min.dim(self, dim, keepdim=False) -> (values, indices)
//	aten.argmax.default(self, dim=None, keepdim=False)
//	aten.argmin.default(self, dim=None, keepdim=False)
//	aten.any.default(self) / aten.any.dim(self, dim, keepdim=False) / aten.any.dims(self, dim=None, keepdim=False)
//	aten.all.default(self) / aten.all.dim(self, dim, keepdim=False) / aten.all.dims(self, dim=None, keepdim=False)
//	aten.cumsum.default(self, dim, *, dtype=None)
//	aten.cumprod.default(self, dim, *, dtype=None)
//	aten.logsumexp.default(self, dim, keepdim=False)
//	aten.var.correction(self, dim=None, *, correction=None, keepdim=False)
//	aten.std.correction(self, dim=None, *, correction=None, keepdim=False)
//	aten.linalg_vector_norm.default(self, ord=2, dim=None, keepdim=False, *, dtype=None)
//	aten.nll_loss_forward.default(self, target, weight, reduction, ignore_index) -> (output, total_weight)
//	aten.nll_loss2d_forward.default(self, target, weight, reduction, ignore_index) -> (output, total_weight)
//
// A dim list of None or [] reduces every dim, as in PyTorch. Dim lists may
// also be nodes holding constant integer tensors.
func registerReductions(r *Registry) {
	sumLike := func(n *Node) (Meta, error) { return rdReduceMeta(n, 1, 2, rdSumDType) }
	sumAll := func(n *Node) (Meta, error) { return rdReduceMeta(n, -1, -1, rdSumDType) }
	r.define(AtenSum, sumAll, rdEvalReduce(rdSum, -1, -1))
	r.define(AtenSumDimIntList, sumLike, rdEvalReduce(rdSum, 1, 2))
	r.define(AtenProd, sumAll, rdEvalReduce(rdProd, -1, -1))
	r.define(AtenProdDimInt, sumLike, rdEvalReduce(rdProd, 1, 2))

	r.define(AtenMean,
		func(n *Node) (Meta, error) { return rdReduceMeta(n, -1, -1, rdMeanDType) },
		rdEvalReduce(rdMean, -1, -1),
	)
	r.define(AtenMeanDim,
		func(n *Node) (Meta, error) { return rdReduceMeta(n, 1, 2, rdMeanDType) },
		rdEvalReduce(rdMean, 1, 2),
	)

	sameDT := func(in TensorMeta, _ *Node) (tensor.DType, error) { return in.DType, nil }
	for _, k := range []struct {
		target *Op
		kind   rdKind
		dimArg int
	}{
		{AtenAmax, rdMax, 1},
		{AtenAmin, rdMin, 1},
		{AtenMax, rdMax, -1},
		{AtenMin, rdMin, -1},
	} {
		dimArg, keepArg := k.dimArg, k.dimArg+1
		if dimArg < 0 {
			keepArg = -1
		}
		r.define(k.target,
			func(n *Node) (Meta, error) { return rdReduceMeta(n, dimArg, keepArg, sameDT) },
			rdEvalReduce(k.kind, dimArg, keepArg),
		)
	}

	boolDT := func(TensorMeta, *Node) (tensor.DType, error) { return tensor.Bool, nil }
	for _, k := range []struct {
		target *Op
		kind   rdKind
		dimArg int
	}{
		{AtenAny, rdAny, -1},
		{AtenAnyDim, rdAny, 1},
		{AtenAnyDims, rdAny, 1},
		{AtenAll, rdAll, -1},
		{AtenAllDim, rdAll, 1},
		{AtenAllDims, rdAll, 1},
	} {
		dimArg, keepArg := k.dimArg, k.dimArg+1
		if dimArg < 0 {
			keepArg = -1
		}
		r.define(k.target,
			func(n *Node) (Meta, error) { return rdReduceMeta(n, dimArg, keepArg, boolDT) },
			rdEvalReduce(k.kind, dimArg, keepArg),
		)
	}

	for _, k := range []struct {
		target *Op
		kind   rdKind
	}{{AtenMaxDim, rdMax}, {AtenMinDim, rdMin}} {
		r.define(k.target, rdMaxDimMeta, rdEvalMaxDim(k.kind))
	}
	for _, k := range []struct {
		target *Op
		kind   rdKind
	}{{AtenArgmax, rdMax}, {AtenArgmin, rdMin}} {
		r.define(k.target, rdArgMeta, rdEvalArg(k.kind))
	}

	r.define(AtenTopk, rdTopKMeta, nil)
	r.define(AtenSort, rdSortMeta, nil)
	r.define(AtenSortStable, rdSortMeta, nil)
	r.define(AtenCumsum, rdCumMeta, rdEvalCum(rdSum))
	r.define(AtenCumprod, rdCumMeta, rdEvalCum(rdProd))

	floatDT := func(in TensorMeta, n *Node) (tensor.DType, error) {
		if dt, ok := n.Kwargs["dtype"].(tensor.DType); ok {
			return dt, nil
		}
		if in.DType.IsFloat() || in.DType.IsComplex() {
			return in.DType, nil
		}
		return tensor.Float32, nil
	}
	r.define(AtenLogsumexp,
		func(n *Node) (Meta, error) { return rdReduceMeta(n, 1, 2, floatDT) },
		nil,
	)
	varMeta := func(n *Node) (Meta, error) {
		m, err := rdReduceMeta(n, 1, rdKwOnly, rdMeanDType)
		if err != nil {
			return Meta{}, err
		}
		if _, err := n.ParamFloat("correction"); err != nil {
			return Meta{}, err
		}
		return m, nil
	}
	r.define(AtenVarCorrection, varMeta, nil)
	r.define(AtenStdCorrection, varMeta, nil)
	r.define(AtenLinalgVectorNorm,
		func(n *Node) (Meta, error) {
			if _, err := n.ParamFloat("ord"); err != nil {
				return Meta{}, err
			}
			return rdReduceMeta(n, 2, 3, floatDT)
		},
		nil,
	)

	r.define(AtenNllLossForward, rdNLLMeta, nil)
	r.define(AtenNllLoss2dForward, rdNLLMeta, nil)
}

// rdKwOnly is an argument index past any positional argument: it makes
// Node.ArgOr read a keyword-only argument.
const rdKwOnly = 1 << 20

// rdKind names the combining operation of a host-evaluated reduction.
type rdKind int

const (
	rdSum rdKind = iota
	rdProd
	rdMean
	rdMax
	rdMin
	rdAny
	rdAll
)

// rdSpec is the normalized reduction a reduce node performs: which
// dims of its input it reduces and whether they stay as size-1 dims.
type rdSpec struct {
	reduced []bool // per input dim
	keepdim bool
}

// dims returns the reduced dims in increasing order.
func (s rdSpec) dims() []int {
	var out []int
	for i, r := range s.reduced {
		if r {
			out = append(out, i)
		}
	}
	return out
}

// outShape applies the spec to an input shape.
func (s rdSpec) outShape(in Shape) Shape {
	out := Shape{}
	for i, d := range in {
		switch {
		case !s.reduced[i]:
			out = append(out, d)
		case s.keepdim:
			out = append(out, D(1))
		}
	}
	return out
}

// rdReduceSpec reads the dims (argument dimArg, or every dim when dimArg is
// negative or the argument is None or []) and keepdim (argument keepArg;
// keepArg -1 means false, rdKwOnly means the "keepdim" kwarg only) of
// a reduce node whose input has the given rank.
func rdReduceSpec(n *Node, dimArg, keepArg, rank int) (rdSpec, error) {
	s := rdSpec{reduced: make([]bool, rank)}
	var dims []int64
	if dimArg >= 0 {
		vals, known, err := n.ConstInts(dimArg, "dim")
		if err != nil {
			return s, err
		}
		if !known {
			return s, fmt.Errorf("fxgraph: node %s (%s): dim must be a constant", n.Name, n.Target)
		}
		dims = vals
	}
	if len(dims) == 0 {
		for i := range s.reduced {
			s.reduced[i] = true
		}
	}
	for _, d := range dims {
		if rank == 0 {
			// A scalar reduces like a 1-element vector along dim 0 / -1.
			if d != 0 && d != -1 {
				return s, fmt.Errorf("fxgraph: node %s (%s): dim %d out of range for a scalar", n.Name, n.Target, d)
			}
			continue
		}
		k, err := NormDim(d, rank)
		if err != nil {
			return s, fmt.Errorf("fxgraph: node %s (%s): %w", n.Name, n.Target, err)
		}
		if s.reduced[k] {
			return s, fmt.Errorf("fxgraph: node %s (%s): dim %d appears twice", n.Name, n.Target, d)
		}
		s.reduced[k] = true
	}
	if keepArg >= 0 {
		k, err := n.BoolArg(keepArg, "keepdim", false)
		if err != nil {
			return s, err
		}
		s.keepdim = k
	}
	return s, nil
}

// rdDTypeFunc picks the result dtype of a reduction from its input.
type rdDTypeFunc func(in TensorMeta, n *Node) (tensor.DType, error)

// rdSumDType is the result dtype of sum/prod/cumsum: the dtype kwarg, else
// int64 for integral and bool inputs, else the input dtype.
func rdSumDType(in TensorMeta, n *Node) (tensor.DType, error) {
	if dt, ok := n.Kwargs["dtype"].(tensor.DType); ok {
		return dt, nil
	}
	if in.DType.IsInt() || in.DType == tensor.Bool {
		return tensor.Int64, nil
	}
	return in.DType, nil
}

// rdMeanDType is the result dtype of mean/var/std: the dtype kwarg or the
// (floating) input dtype; integral inputs are an error as in PyTorch.
func rdMeanDType(in TensorMeta, n *Node) (tensor.DType, error) {
	dt := in.DType
	if k, ok := n.Kwargs["dtype"].(tensor.DType); ok {
		dt = k
	}
	if !dt.IsFloat() && !dt.IsComplex() {
		return tensor.Invalid, fmt.Errorf("fxgraph: node %s (%s): could not infer output dtype: input is %s, want a floating point dtype (give dtype=)", n.Name, n.Target, dt)
	}
	return dt, nil
}

// rdReduceMeta is the shape function of single-result reductions.
func rdReduceMeta(n *Node, dimArg, keepArg int, dtf rdDTypeFunc) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	s, err := rdReduceSpec(n, dimArg, keepArg, in.Rank())
	if err != nil {
		return Meta{}, err
	}
	dt, err := dtf(in, n)
	if err != nil {
		return Meta{}, err
	}
	return One(dt, s.outShape(in.Shape)), nil
}

// rdOneDim reads the single dim argument (index 1) of max.dim, argmax
// and cumsum-like ops: None (nil) for argmax means the flattened input.
func rdOneDim(n *Node, rank int) (int, error) {
	d, err := n.IntArg(1, "dim", 0)
	if err != nil {
		return 0, err
	}
	if rank == 0 {
		if d != 0 && d != -1 {
			return 0, fmt.Errorf("fxgraph: node %s (%s): dim %d out of range for a scalar", n.Name, n.Target, d)
		}
		return 0, nil
	}
	k, err := NormDim(d, rank)
	if err != nil {
		return 0, fmt.Errorf("fxgraph: node %s (%s): %w", n.Name, n.Target, err)
	}
	return k, nil
}

// rdMaxDimMeta is the shape function of aten.max.dim / aten.min.dim.
func rdMaxDimMeta(n *Node) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	s, err := rdReduceSpec(n, 1, 2, in.Rank())
	if err != nil {
		return Meta{}, err
	}
	if _, ok := AsInt(n.ArgOr(1, "dim", nil)); !ok {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): dim must be one int", n.Name, n.Target)
	}
	out := s.outShape(in.Shape)
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: in.DType, Shape: out},
		{DType: tensor.Int64, Shape: out.Clone()},
	}}, nil
}

// TopKArgs are the arguments of aten.topk.default: k, the normalized dim,
// largest and sorted.
type TopKArgs struct {
	K       int64
	Dim     int
	Largest bool
	Sorted  bool
}

// TopK reads the arguments of topk node n whose input has the given rank.
func TopK(n *Node, rank int) (TopKArgs, error) {
	var a TopKArgs
	k, err := n.IntArg(1, "k", -1)
	if err != nil {
		return a, err
	}
	dim, err := n.IntArg(2, "dim", -1)
	if err != nil {
		return a, err
	}
	if a.Largest, err = n.BoolArg(3, "largest", true); err != nil {
		return a, err
	}
	if a.Sorted, err = n.BoolArg(4, "sorted", true); err != nil {
		return a, err
	}
	r := int64(max(rank, 1))
	if dim < -r || dim >= r {
		return a, fmt.Errorf("fxgraph: node %s (%s): dim %d out of range for rank %d", n.Name, n.Target, dim, rank)
	}
	if dim < 0 {
		dim += r
	}
	if k < 0 {
		return a, fmt.Errorf("fxgraph: node %s (%s): k must be >= 0, got %d", n.Name, n.Target, k)
	}
	a.K, a.Dim = k, int(dim)
	return a, nil
}

// rdTopKMeta: values of the input's dtype and int64 indices, the input's
// shape with dim of size k (which must not exceed the dim, when static).
func rdTopKMeta(n *Node) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	a, err := TopK(n, in.Rank())
	if err != nil {
		return Meta{}, err
	}
	out := in.Shape.Clone()
	if len(out) == 0 {
		if a.K > 1 {
			return Meta{}, fmt.Errorf("fxgraph: node %s (%s): k %d of a scalar", n.Name, n.Target, a.K)
		}
	} else {
		if d := out[a.Dim]; d.IsStatic() && a.K > d.Size {
			return Meta{}, fmt.Errorf("fxgraph: node %s (%s): k %d is larger than dim %d of size %d", n.Name, n.Target, a.K, a.Dim, d.Size)
		}
		out[a.Dim] = D(a.K)
	}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: in.DType, Shape: out},
		{DType: tensor.Int64, Shape: out.Clone()},
	}}, nil
}

// Sort reads the dim (normalized) and descending flag of sort node n
// (aten.sort.default(self, dim=-1, descending=False), or aten.sort.stable
// with dim and descending keyword-only) whose input has the given rank.
func Sort(n *Node, rank int) (dim int, descending bool, err error) {
	d, err := n.IntArg(1, "dim", -1)
	if err != nil {
		return 0, false, err
	}
	if descending, err = n.BoolArg(2, "descending", false); err != nil {
		return 0, false, err
	}
	r := int64(max(rank, 1))
	if d < -r || d >= r {
		return 0, false, fmt.Errorf("fxgraph: node %s (%s): dim %d out of range for rank %d", n.Name, n.Target, d, rank)
	}
	if d < 0 {
		d += r
	}
	return int(d), descending, nil
}

// rdSortMeta: values of the input's dtype and shape, and int64 indices.
func rdSortMeta(n *Node) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if _, _, err := Sort(n, in.Rank()); err != nil {
		return Meta{}, err
	}
	return Meta{Tuple: true, Vals: []TensorMeta{
		{DType: in.DType, Shape: in.Shape.Clone()},
		{DType: tensor.Int64, Shape: in.Shape.Clone()},
	}}, nil
}

// rdArgSpec reads argmax/argmin's dim (None = the flattened input, giving a
// scalar, or a [1,...,1] shape with keepdim) and keepdim.
func rdArgSpec(n *Node, rank int) (rdSpec, error) {
	if n.ArgOr(1, "dim", nil) == nil {
		s, err := rdReduceSpec(n, -1, 2, rank)
		return s, err
	}
	if _, ok := AsInt(n.ArgOr(1, "dim", nil)); !ok {
		return rdSpec{}, fmt.Errorf("fxgraph: node %s (%s): dim must be one int or None", n.Name, n.Target)
	}
	return rdReduceSpec(n, 1, 2, rank)
}

// rdArgMeta is the shape function of aten.argmax / aten.argmin.
func rdArgMeta(n *Node) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	s, err := rdArgSpec(n, in.Rank())
	if err != nil {
		return Meta{}, err
	}
	return One(tensor.Int64, s.outShape(in.Shape)), nil
}

// rdCumMeta is the shape function of aten.cumsum / aten.cumprod.
func rdCumMeta(n *Node) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	if _, err := rdOneDim(n, in.Rank()); err != nil {
		return Meta{}, err
	}
	dt, err := rdSumDType(in, n)
	if err != nil {
		return Meta{}, err
	}
	return One(dt, in.Shape.Clone()), nil
}

// NLL reductions, as PyTorch numbers them (at::Reduction).
const (
	rdReductionNone = 0
	rdReductionMean = 1
	rdReductionSum  = 2
)

// rdNLLMeta is the shape function of aten.nll_loss_forward: self is (C),
// (N, C) or (N, C, d1, ..., dk) log-probabilities and target is (), (N) or
// (N, d1, ..., dk) class indices (the N-d form generalizes PyTorch's 2-D
// nll_loss_forward and 4-D nll_loss2d_forward). It returns the loss (the
// target's shape for reduction none, else a scalar) and the total weight.
func rdNLLMeta(n *Node) (Meta, error) {
	in, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	tg, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if !in.DType.IsFloat() {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): input is %s, want floating point", n.Name, n.Target, in.DType)
	}
	if !tg.DType.IsInt() {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): target is %s, want integers", n.Name, n.Target, tg.DType)
	}
	if in.Rank() == 0 || tg.Rank() != in.Rank()-1 {
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): input %s and target %s do not match", n.Name, n.Target, in.Shape, tg.Shape)
	}
	want := rdNLLTargetShape(in.Shape)
	for i, d := range tg.Shape {
		w := want[i]
		if d.IsStatic() && w.IsStatic() && d.Size != w.Size {
			return Meta{}, fmt.Errorf("fxgraph: node %s (%s): input %s and target %s do not match", n.Name, n.Target, in.Shape, tg.Shape)
		}
	}
	if err := rdNLLCheckWeight(n, in); err != nil {
		return Meta{}, err
	}
	red, err := n.ParamInt("reduction")
	if err != nil {
		return Meta{}, err
	}
	if _, err := n.ParamInt("ignore_index"); err != nil {
		return Meta{}, err
	}
	out := Shape{}
	switch red {
	case rdReductionNone:
		out = tg.Shape.Clone()
	case rdReductionMean, rdReductionSum:
	default:
		return Meta{}, fmt.Errorf("fxgraph: node %s (%s): reduction %d is not 0 (none), 1 (mean) or 2 (sum)", n.Name, n.Target, red)
	}
	return Meta{Tuple: true, Vals: []TensorMeta{{DType: in.DType, Shape: out}, {DType: in.DType, Shape: Shape{}}}}, nil
}

// rdNLLCheckWeight checks the class weights of an NLL node (argument 2,
// when given) against the classes of its input in.
func rdNLLCheckWeight(n *Node, in TensorMeta) error {
	w, ok := n.Arg(2).(*Node)
	if !ok {
		return nil
	}
	wm, err := n.InputMeta(2)
	if err != nil {
		return err
	}
	c := in.Shape[0]
	if in.Rank() > 1 {
		c = in.Shape[1]
	}
	if wm.Rank() != 1 || (wm.Shape[0].IsStatic() && c.IsStatic() && wm.Shape[0] != c) {
		return fmt.Errorf("fxgraph: node %s (%s): weight %s (%s) does not match %d classes", n.Name, n.Target, w.Name, wm.Shape, c.Size)
	}
	return nil
}

// rdNLLTargetShape is the target shape an NLL input shape implies: the
// input without its class dim (dim 1, or dim 0 for a 1-D input).
func rdNLLTargetShape(in Shape) Shape {
	if len(in) == 1 {
		return Shape{}
	}
	out := Shape{in[0]}
	return append(out, in[2:]...)
}
