package decomp

import (
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Func converts a call of an operator the IR does not have into IR
// operators and binds the call's outputs.
type Func func(c *Call) error

// decompositions are the importer's own conversions of operators that
// torch.export's training IR (the default since torch 2.6) keeps but the
// IR does not register, so that archives saved without
// ep.run_decompositions() load too. The IR's operator of the same name
// always wins: a target here is used only while the IR lacks it.
var decompositions = joinDecompositions(upsampleDecompositions(), mathDecompositions, shapeDecompositions, moreDecompositions, rnnDecompositions, map[*fxgraph.Op]Func{
	fxgraph.AtenConv1d:                    decConv(1),
	fxgraph.AtenConv2d:                    decConv(2),
	fxgraph.AtenConv3d:                    decConv(3),
	fxgraph.AtenConv1dPadding:             decConv(1),
	fxgraph.AtenConv2dPadding:             decConv(2),
	fxgraph.AtenConv3dPadding:             decConv(3),
	fxgraph.AtenConvTranspose1d:           decConvTranspose(1),
	fxgraph.AtenConvTranspose2dInput:      decConvTranspose(2),
	fxgraph.AtenConvTranspose3dInput:      decConvTranspose(3),
	fxgraph.AtenBatchNorm:                 decBatchNorm,
	fxgraph.AtenLayerNorm:                 decLayerNorm,
	fxgraph.AtenGroupNorm:                 decGroupNorm,
	fxgraph.AtenScaledDotProductAttention: decSDPA,
	fxgraph.AtenDropout:                   decDropout,
	fxgraph.AtenFeatureDropout:            decDropout,
	fxgraph.AtenAlphaDropout:              decDropout,
	fxgraph.AtenFeatureAlphaDropout:       decDropout,
	fxgraph.AtenContiguous:                decIdentity,
	fxgraph.AtenDetach:                    decIdentity,
	fxgraph.AtenFlattenUsingInts:          decFlatten,
	fxgraph.AtenUnflattenInt:              decUnflatten,
	fxgraph.AtenSoftmaxInt:                decSoftmax(fxgraph.Aten_Softmax),
	fxgraph.AtenLogSoftmaxInt:             decSoftmax(fxgraph.Aten_LogSoftmax),
	fxgraph.AtenMaxPool2d:                 decRenameItem(fxgraph.AtenMaxPool2dWithIndices),
	fxgraph.AtenMaxPool3d:                 decRenameItem(fxgraph.AtenMaxPool3dWithIndices),
	fxgraph.AtenAdaptiveAvgPool2d:         decRename(fxgraph.Aten_AdaptiveAvgPool2d),
	fxgraph.AtenAdaptiveAvgPool1d:         decAdaptiveAvgPool1d,
	fxgraph.AtenChunk:                     decChunk,
	fxgraph.AtenUnbindInt:                 decUnbind,
	fxgraph.AtenStack:                     decStack,
	fxgraph.AtenToDtype:                   decTo,
	fxgraph.AtenToDtypeLayout:             decTo,
	fxgraph.AtenToDevice:                  decTo,
	fxgraph.AtenToOther:                   decTo,
	fxgraph.AtenTypeAs:                    decTo,
	fxgraph.AtenEmbedding:                 decEmbedding,
	fxgraph.AtenFullLike:                  decFullLike(nil),
	fxgraph.AtenZerosLike:                 decFullLike(int64(0)),
	fxgraph.AtenOnesLike:                  decFullLike(int64(1)),
	fxgraph.AtenEmptyLike:                 decFullLike(int64(0)),
	fxgraph.AtenZeros:                     decFull(int64(0), false),
	fxgraph.AtenOnes:                      decFull(int64(1), false),
	fxgraph.AtenEmptyMemoryFormat:         decFull(int64(0), false),
	fxgraph.AtenNewZeros:                  decFull(int64(0), true),
	fxgraph.AtenNewOnes:                   decFull(int64(1), true),
	fxgraph.AtenNewEmpty:                  decFull(int64(0), true),
	fxgraph.AtenNewFull:                   decFull(nil, true),
	fxgraph.AtenScalarTensor:              decScalarTensor,
	fxgraph.AtenExpandAs:                  decLikeOther(fxgraph.AtenExpand),
	fxgraph.AtenViewAs:                    decLikeOther(fxgraph.AtenReshape),
	fxgraph.AtenReshapeAs:                 decLikeOther(fxgraph.AtenReshape),
	fxgraph.AtenMaskedFillScalar:          decMaskedFill,
	fxgraph.AtenMaskedFillTensor:          decMaskedFill,
	fxgraph.AtenPad:                       decPad,
	fxgraph.AtenRelu6:                     decRelu6,
	fxgraph.AtenSymNumel:                  decRename(fxgraph.AtenNumel),
	fxgraph.AtenAsStrided:                 decAsStrided,
	fxgraph.AtenClampMin:                  decClampOne("min"),
	fxgraph.AtenClampMax:                  decClampOne("max"),
	fxgraph.AtenFillScalar:                decFill,
	fxgraph.AtenFillTensor:                decFill,
	fxgraph.AtenZero:                      decFill,
	fxgraph.AtenCopy:                      decCopy,
	fxgraph.AtenRoll:                      decRoll,
	fxgraph.AtenSliceScatter:              decSliceScatter,
	fxgraph.AtenBaddbmm:                   decBaddbmm,
	// The full ATen surface of archives saved without run_decompositions
	// (decompose_ops.go, decompose_resample.go).
	fxgraph.AtenAndTensor:            decRename(fxgraph.AtenBitwiseAndTensor),
	fxgraph.AtenAndScalar:            decRename(fxgraph.AtenBitwiseAndScalar),
	fxgraph.AtenOrTensor:             decRename(fxgraph.AtenBitwiseOrTensor),
	fxgraph.AtenOrScalar:             decRename(fxgraph.AtenBitwiseOrScalar),
	fxgraph.AtenXorTensor:            decRename(fxgraph.AtenBitwiseXorTensor),
	fxgraph.AtenXorScalar:            decRename(fxgraph.AtenBitwiseXorScalar),
	fxgraph.AtenLshiftTensor:         decRename(fxgraph.AtenBitwiseLeftShiftTensor),
	fxgraph.AtenLshiftScalar:         decRename(fxgraph.AtenBitwiseLeftShiftTensorScalar),
	fxgraph.AtenRshiftTensor:         decRename(fxgraph.AtenBitwiseRightShiftTensor),
	fxgraph.AtenRshiftScalar:         decRename(fxgraph.AtenBitwiseRightShiftTensorScalar),
	fxgraph.AtenSwapaxes:             decSwap("axis0", "axis1"),
	fxgraph.AtenSwapdims:             decSwap("dim0", "dim1"),
	fxgraph.AtenMovedimInt:           decMovedim,
	fxgraph.AtenMovedimIntlist:       decMovedim,
	fxgraph.AtenMoveaxisInt:          decMovedim,
	fxgraph.AtenMoveaxisIntlist:      decMovedim,
	fxgraph.AtenDiff:                 decDiff,
	fxgraph.Aten_WeightNorm:          decWeightNorm,
	fxgraph.Aten_WeightNormInterface: decWeightNorm,
	fxgraph.AtenTensorSplitIndices:   decTensorSplit,
	fxgraph.AtenTensorSplitSections:  decTensorSplit,
	fxgraph.AtenEinsum:               decEinsum,
	fxgraph.AtenAdaptiveAvgPool3d:    decAdaptivePool(3, true),
	fxgraph.Aten_AdaptiveAvgPool3d:   decAdaptivePool(3, true),
	fxgraph.AtenAdaptiveMaxPool1d:    decAdaptivePool(1, false),
	fxgraph.AtenAdaptiveMaxPool2d:    decAdaptivePool(2, false),
	fxgraph.AtenAdaptiveMaxPool3d:    decAdaptivePool(3, false),
})

// joinDecompositions merges tables of decompositions (a target in two is a
// programming error the tests catch: the later one wins).
func joinDecompositions(tables ...map[*fxgraph.Op]Func) map[*fxgraph.Op]Func {
	out := map[*fxgraph.Op]Func{}
	for _, t := range tables {
		for k, v := range t {
			out[k] = v
		}
	}
	return out
}

// ints64 converts []int64 to an IR list argument.
func ints64(v []int64) []any { return anyList(v) }

// decRename calls the IR operator with the same arguments.
func decRename(target *fxgraph.Op) Func {
	return func(c *Call) error { return c.one(target, c.Pos, c.Kw) }
}

// decRenameItem calls a tuple-returning IR operator with the same arguments
// and takes element 0 (max_pool2d -> max_pool2d_with_indices).
func decRenameItem(target *fxgraph.Op) Func {
	return func(c *Call) error { return c.item(target, c.Pos, c.Kw, 0) }
}

// decIdentity binds the output to the input (contiguous, detach).
func decIdentity(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	return c.alias(x)
}

// decConv maps conv1d/2d/3d (padding given as ints or "valid"/"same") to
// aten.convolution. An unbatched input gets a batch dim of 1 around it.
func decConv(nd int) Func {
	return func(c *Call) error {
		x, err := c.tensor("input")
		if err != nil {
			return err
		}
		w, err := c.tensor("weight")
		if err != nil {
			return err
		}
		bias, err := c.optTensor("bias")
		if err != nil {
			return err
		}
		stride, err := c.ints("stride", nd)
		if err != nil {
			return err
		}
		dil, err := c.ints("dilation", nd)
		if err != nil {
			return err
		}
		groups, err := c.intArg("groups")
		if err != nil {
			return err
		}
		unbatched := x.Val().Rank() == nd+1
		if unbatched {
			if x, err = c.emit("", fxgraph.AtenUnsqueeze, []any{x, int64(0)}, nil); err != nil {
				return err
			}
		}
		var pad []int64
		if s, ok := c.arg("padding").(string); ok {
			if pad, x, err = c.stringPadding(s, x, w, stride, dil); err != nil {
				return err
			}
		} else if pad, err = c.ints("padding", nd); err != nil {
			return err
		}
		args := []any{x, w, nilIfNone(bias), ints64(stride), ints64(pad), ints64(dil), false, ints64(make([]int64, nd)), groups}
		if !unbatched {
			return c.one(fxgraph.AtenConvolution, args, nil)
		}
		y, err := c.emit("", fxgraph.AtenConvolution, args, nil)
		if err != nil {
			return err
		}
		return c.one(fxgraph.AtenSqueezeDim, []any{y, int64(0)}, nil)
	}
}

// nilIfNone turns a nil *Node into an untyped nil argument.
func nilIfNone(n *fxgraph.Node) any {
	if n == nil {
		return nil
	}
	return n
}

// stringPadding resolves conv padding "valid" or "same" (torch pads the
// extra element of an odd total at the end, as F.pad would).
func (c *Call) stringPadding(mode string, x, w *fxgraph.Node, stride, dil []int64) ([]int64, *fxgraph.Node, error) {
	nd := len(stride)
	switch mode {
	case "valid":
		return make([]int64, nd), x, nil
	case "same":
	default:
		return nil, nil, c.errorf(ErrUnsupported, "padding %q (want valid or same)", mode)
	}
	for _, s := range stride {
		if s != 1 {
			return nil, nil, c.errorf(ErrUnsupported, "padding=\"same\" with stride %v", stride)
		}
	}
	wd := w.Val().Shape
	pad := make([]int64, nd)
	extra := make([]int64, 2*nd) // constant_pad_nd order: last dim first, (begin, end)
	needExtra := false
	for i := 0; i < nd; i++ {
		k := wd[len(wd)-nd+i]
		if !k.IsStatic() {
			return nil, nil, c.errorf(ErrUnsupported, "padding=\"same\" with a symbolic kernel size")
		}
		total := dil[i] * (k.Size - 1)
		pad[i] = total / 2
		if total%2 != 0 {
			needExtra = true
			extra[2*(nd-1-i)+1] = 1
		}
	}
	if needExtra {
		var err error
		if x, err = c.emit("", fxgraph.AtenConstantPadNd, []any{x, ints64(extra), 0.0}, nil); err != nil {
			return nil, nil, err
		}
	}
	return pad, x, nil
}

// decConvTranspose maps conv_transpose1d/2d/3d to a transposed convolution.
func decConvTranspose(nd int) Func {
	return func(c *Call) error {
		x, err := c.tensor("input")
		if err != nil {
			return err
		}
		w, err := c.tensor("weight")
		if err != nil {
			return err
		}
		bias, err := c.optTensor("bias")
		if err != nil {
			return err
		}
		var lists [4][]int64
		for i, name := range []string{"stride", "padding", "output_padding", "dilation"} {
			if lists[i], err = c.ints(name, nd); err != nil {
				return err
			}
		}
		groups, err := c.intArg("groups")
		if err != nil {
			return err
		}
		if x.Val().Rank() == nd+1 {
			return c.errorf(ErrUnsupported, "unbatched input %s", x.Val())
		}
		return c.one(fxgraph.AtenConvolution, []any{x, w, nilIfNone(bias), ints64(lists[0]), ints64(lists[1]),
			ints64(lists[3]), true, ints64(lists[2]), groups}, nil)
	}
}

// decBatchNorm maps an inference batch_norm to
// _native_batch_norm_legit_no_training and takes its output.
func decBatchNorm(c *Call) error {
	training, err := c.boolArg("training")
	if err != nil {
		return err
	}
	if training {
		return c.errorf(ErrUnsupported, "batch_norm in training mode (batch statistics): call model.eval() before torch.export.export")
	}
	x, err := c.tensor("input")
	if err != nil {
		return err
	}
	rm, err := c.optTensor("running_mean")
	if err != nil {
		return err
	}
	rv, err := c.optTensor("running_var")
	if err != nil {
		return err
	}
	if rm == nil || rv == nil {
		return c.errorf(ErrUnsupported, "batch_norm without running statistics (track_running_stats=False) uses batch statistics")
	}
	w, err := c.optTensor("weight")
	if err != nil {
		return err
	}
	b, err := c.optTensor("bias")
	if err != nil {
		return err
	}
	mom, err := c.floatArg("momentum")
	if err != nil {
		return err
	}
	eps, err := c.floatArg("eps")
	if err != nil {
		return err
	}
	return c.item(fxgraph.Aten_NativeBatchNormLegitNoTraining,
		[]any{x, nilIfNone(w), nilIfNone(b), rm, rv, mom, eps}, nil, 0)
}

// decLayerNorm maps layer_norm to native_layer_norm and takes its output.
func decLayerNorm(c *Call) error {
	x, err := c.tensor("input")
	if err != nil {
		return err
	}
	ns, err := c.ints("normalized_shape", 0)
	if err != nil {
		return err
	}
	w, err := c.optTensor("weight")
	if err != nil {
		return err
	}
	b, err := c.optTensor("bias")
	if err != nil {
		return err
	}
	eps, err := c.floatArg("eps")
	if err != nil {
		return err
	}
	return c.item(fxgraph.AtenNativeLayerNorm, []any{x, ints64(ns), nilIfNone(w), nilIfNone(b), eps}, nil, 0)
}

// decGroupNorm maps group_norm to native_group_norm(input, weight, bias, N,
// C, HxW, group, eps) and takes its output.
func decGroupNorm(c *Call) error {
	x, err := c.tensor("input")
	if err != nil {
		return err
	}
	groups, err := c.intArg("num_groups")
	if err != nil {
		return err
	}
	w, err := c.optTensor("weight")
	if err != nil {
		return err
	}
	b, err := c.optTensor("bias")
	if err != nil {
		return err
	}
	eps, err := c.floatArg("eps")
	if err != nil {
		return err
	}
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	if len(dims) < 2 {
		return c.errorf(ErrUnsupported, "group_norm of %s", x.Val())
	}
	hw, err := c.product(dims[2:])
	if err != nil {
		return err
	}
	return c.item(fxgraph.AtenNativeGroupNorm, []any{x, nilIfNone(w), nilIfNone(b), dims[0], dims[1], hw, groups, eps}, nil, 0)
}

// product multiplies dims (ints and symbolic size nodes).
func (c *Call) product(dims []any) (any, error) {
	var acc any = int64(1)
	for _, d := range dims {
		switch {
		case isInt(acc) && isInt(d):
			acc = acc.(int64) * d.(int64)
		default:
			a, b := acc, d
			if isInt(a) {
				a, b = b, a
			}
			n, err := c.emit("", fxgraph.AtenMulTensor, []any{a, b}, nil)
			if err != nil {
				return nil, err
			}
			acc = n
		}
	}
	return acc, nil
}

// isInt reports whether v is an int literal.
func isInt(v any) bool {
	_, ok := v.(int64)
	return ok
}

// decDropout is the identity of inference; dropout in training mode is an
// error.
func decDropout(c *Call) error {
	x, err := c.tensor("input")
	if err != nil {
		return err
	}
	train, err := c.boolArg("train")
	if err != nil {
		return err
	}
	p, err := c.floatArg("p")
	if err != nil {
		return err
	}
	if train && p > 0 {
		return c.errorf(ErrUnsupported, "dropout in training mode: call model.eval() before torch.export.export")
	}
	return c.alias(x)
}

// decFlatten reshapes to the kept dims around one flattened dim.
func decFlatten(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	start, err := c.intArg("start_dim")
	if err != nil {
		return err
	}
	end, err := c.intArg("end_dim")
	if err != nil {
		return err
	}
	rank := x.Val().Rank()
	if rank == 0 {
		return c.one(fxgraph.AtenReshape, []any{x, []any{int64(1)}}, nil)
	}
	s, err1 := fxgraph.NormDim(start, rank)
	e, err2 := fxgraph.NormDim(end, rank)
	if err1 != nil || err2 != nil || s > e {
		return c.errorf(ErrFormat, "flatten dims %d..%d of %s", start, end, x.Val())
	}
	if s == e {
		return c.alias(x)
	}
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	flat, err := c.product(dims[s : e+1])
	if err != nil {
		return err
	}
	if !isInt(flat) {
		flat = int64(-1)
	}
	shape := append(append(append([]any{}, dims[:s]...), flat), dims[e+1:]...)
	return c.one(fxgraph.AtenReshape, []any{x, shape}, nil)
}

// decUnflatten reshapes dim into sizes.
func decUnflatten(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	sizes, ok := c.arg("sizes").([]any)
	if !ok {
		return c.errorf(ErrUnsupported, "unflatten sizes %s", fxgraph.FormatArg(c.arg("sizes")))
	}
	k, err := fxgraph.NormDim(d, x.Val().Rank())
	if err != nil {
		return c.errorf(ErrFormat, "%v", err)
	}
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	shape := append(append(append([]any{}, dims[:k]...), sizes...), dims[k+1:]...)
	return c.one(fxgraph.AtenReshape, []any{x, shape}, nil)
}

// decSoftmax maps softmax.int / log_softmax.int (with an optional dtype) to
// _softmax / _log_softmax.
func decSoftmax(target *fxgraph.Op) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		d, err := c.intArg("dim")
		if err != nil {
			return err
		}
		if dt, ok := c.arg("dtype").(tensor.DType); ok && dt != x.Val().DType {
			if x, err = c.emit("", fxgraph.Aten_ToCopy, []any{x}, map[string]any{"dtype": dt}); err != nil {
				return err
			}
		}
		return c.one(target, []any{x, d, false}, nil)
	}
}

// decAdaptiveAvgPool1d pools a [N,]C,L input as a 2-D pool of height 1.
func decAdaptiveAvgPool1d(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	out, err := c.ints("output_size", 1)
	if err != nil {
		return err
	}
	u, err := c.emit("", fxgraph.AtenUnsqueeze, []any{x, int64(-2)}, nil)
	if err != nil {
		return err
	}
	p, err := c.emit("", fxgraph.Aten_AdaptiveAvgPool2d, []any{u, []any{int64(1), out[0]}}, nil)
	if err != nil {
		return err
	}
	return c.one(fxgraph.AtenSqueezeDim, []any{p, int64(-2)}, nil)
}

// decChunk maps chunk to split.Tensor with torch's chunk size
// ceil(size/chunks); the dim must be static.
func decChunk(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	chunks, err := c.intArg("chunks")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	k, err := fxgraph.NormDim(d, x.Val().Rank())
	if err != nil || chunks <= 0 {
		return c.errorf(ErrFormat, "chunk(%d, dim=%d) of %s", chunks, d, x.Val())
	}
	size := x.Val().Shape[k]
	if !size.IsStatic() {
		return c.errorf(ErrUnsupported, "chunk along symbolic dim %d of %s", k, x.Val())
	}
	split := (size.Size + chunks - 1) / chunks
	if split == 0 {
		split = 1
	}
	t, err := c.emit("", fxgraph.AtenSplitTensor, []any{x, split, int64(k)}, nil)
	if err != nil {
		return err
	}
	return c.bindTuple(t)
}

// decUnbind selects each used slice along dim.
func decUnbind(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	for i, name := range c.Outs {
		if name == "" || !c.used(i) {
			continue
		}
		n, err := c.emit(name, fxgraph.AtenSelectInt, []any{x, d, int64(i)}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, n); err != nil {
			return err
		}
	}
	return nil
}

// decStack unsqueezes each tensor at dim and concatenates them.
func decStack(c *Call) error {
	list, ok := c.arg("tensors").([]any)
	if !ok || len(list) == 0 {
		return c.errorf(ErrUnsupported, "stack of %s", fxgraph.FormatArg(c.arg("tensors")))
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	first, ok := list[0].(*fxgraph.Node)
	if !ok {
		return c.errorf(ErrFormat, "stack of %s", fxgraph.FormatArg(list[0]))
	}
	k, err := fxgraph.NormDim(d, first.Val().Rank()+1)
	if err != nil {
		return c.errorf(ErrFormat, "%v", err)
	}
	parts := make([]any, len(list))
	for i, e := range list {
		if parts[i], err = c.emit("", fxgraph.AtenUnsqueeze, []any{e, int64(k)}, nil); err != nil {
			return err
		}
	}
	return c.one(fxgraph.AtenCat, []any{parts, int64(k)}, nil)
}

// decTo maps to(dtype)/to(other)/type_as to _to_copy, or to the identity
// when the dtype does not change (devices and layouts are ignored).
func decTo(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	dt := x.Val().DType
	if other, ok := c.arg("other").(*fxgraph.Node); ok {
		dt = other.Val().DType
	} else if d, ok := c.arg("dtype").(tensor.DType); ok {
		dt = d
	}
	if dt == x.Val().DType {
		return c.alias(x)
	}
	return c.one(fxgraph.Aten_ToCopy, []any{x}, map[string]any{"dtype": dt})
}

// decEmbedding gathers rows of the weight: weight[indices].
func decEmbedding(c *Call) error {
	w, err := c.tensor("weight")
	if err != nil {
		return err
	}
	idx, err := c.tensor("indices")
	if err != nil {
		return err
	}
	return c.one(fxgraph.AtenIndexTensor, []any{w, []any{idx}}, nil)
}

// decFullLike fills a tensor of self's shape with fill (or the fill_value
// argument when fill is nil), in dtype or self's dtype.
func decFullLike(fill any) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		v := fill
		if v == nil {
			v = c.arg("fill_value")
		}
		dt := x.Val().DType
		if d, ok := c.arg("dtype").(tensor.DType); ok {
			dt = d
		}
		dims, err := c.dims(x)
		if err != nil {
			return err
		}
		return c.one(fxgraph.AtenFull, []any{dims, v}, map[string]any{"dtype": dt})
	}
}

// decFull maps zeros/ones/empty (and new_* of self) to full. The dtype
// defaults to float32 (torch's default dtype), or to self's for new_*.
func decFull(fill any, isNew bool) Func {
	return func(c *Call) error {
		v := fill
		if v == nil {
			v = c.arg("fill_value")
		}
		dt := tensor.Float32
		if isNew {
			x, err := c.tensor("self")
			if err != nil {
				return err
			}
			dt = x.Val().DType
		}
		if d, ok := c.arg("dtype").(tensor.DType); ok {
			dt = d
		}
		return c.one(fxgraph.AtenFull, []any{c.arg("size"), v}, map[string]any{"dtype": dt})
	}
}

// decScalarTensor makes a rank-0 tensor of a number (float32 by default).
func decScalarTensor(c *Call) error {
	dt := tensor.Float32
	if d, ok := c.arg("dtype").(tensor.DType); ok {
		dt = d
	}
	switch s := c.arg("s").(type) {
	case *fxgraph.Node:
		if s.Val().DType == dt {
			return c.alias(s)
		}
		return c.one(fxgraph.Aten_ToCopy, []any{s}, map[string]any{"dtype": dt})
	default:
		v, ok := fxgraph.AsFloat(s)
		if !ok {
			return c.errorf(ErrUnsupported, "scalar_tensor of %s", fxgraph.FormatArg(s))
		}
		return c.bind(0, c.scalarConst(dt, v))
	}
}

// decLikeOther applies target (expand, reshape) with other's dims.
func decLikeOther(target *fxgraph.Op) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		o, err := c.tensor("other")
		if err != nil {
			return err
		}
		dims, err := c.dims(o)
		if err != nil {
			return err
		}
		return c.one(target, []any{x, dims}, nil)
	}
}

// decMaskedFill is where(mask, value, self) in self's dtype.
func decMaskedFill(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	mask, err := c.tensor("mask")
	if err != nil {
		return err
	}
	dt := x.Val().DType
	var res *fxgraph.Node
	switch v := c.arg("value").(type) {
	case *fxgraph.Node:
		if v.Val().DType != dt {
			if v, err = c.emit("", fxgraph.Aten_ToCopy, []any{v}, map[string]any{"dtype": dt}); err != nil {
				return err
			}
		}
		res, err = c.emit("", fxgraph.AtenWhereSelf, []any{mask, v, x}, nil)
	default:
		res, err = c.emit("", fxgraph.AtenWhereScalarSelf, []any{mask, v, x}, nil)
	}
	if err != nil {
		return err
	}
	if res.Val().DType != dt {
		return c.one(fxgraph.Aten_ToCopy, []any{res}, map[string]any{"dtype": dt})
	}
	return c.alias(res)
}

// decPad maps F.pad's modes to constant_pad_nd and the reflection and
// replication pads.
func decPad(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	pad, err := c.ints("pad", 0)
	if err != nil {
		return err
	}
	mode, _ := c.arg("mode").(string)
	if mode == "" {
		mode = "constant"
	}
	if mode == "constant" {
		v := c.arg("value")
		if v == nil {
			v = 0.0
		}
		return c.one(fxgraph.AtenConstantPadNd, []any{x, ints64(pad), v}, nil)
	}
	nd := len(pad) / 2
	if mode != "reflect" && mode != "replicate" {
		return c.errorf(ErrUnsupported, "pad mode %q", mode)
	}
	if nd < 1 || nd > 3 || len(pad)%2 != 0 {
		return c.errorf(ErrUnsupported, "pad %v in mode %s", pad, mode)
	}
	op := fxgraph.ReflectionPadOp(nd)
	if mode == "replicate" {
		op = fxgraph.ReplicationPadOp(nd)
	}
	return c.one(op, []any{x, ints64(pad)}, nil)
}

// decRelu6 is hardtanh(x, 0, 6).
func decRelu6(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	return c.one(fxgraph.AtenHardtanh, []any{x, 0.0, 6.0}, nil)
}

// isArange reports whether target is an arange overload.
func isArange(target string) bool { return strings.HasPrefix(target, "aten.arange.") }

// hasNodeArg reports whether a positional argument is a node.
func (c *Call) hasNodeArg() bool {
	for _, a := range c.Pos {
		if _, ok := a.(*fxgraph.Node); ok {
			return true
		}
	}
	return false
}

// decSymbolicArange computes arange(start, end, step) whose bounds are
// symbolic sizes (rank-0 nodes) as cumsum(full([n], step)) + start - step,
// with n = (end - start + step - 1) // step for an integer step > 0.
func decSymbolicArange(c *Call) error {
	var start, end, step any = int64(0), nil, int64(1)
	switch c.Op {
	case fxgraph.AtenArange:
		end = c.arg("end")
	case fxgraph.AtenArangeStart:
		start, end = c.arg("start"), c.arg("end")
	default:
		start, end, step = c.arg("start"), c.arg("end"), c.arg("step")
	}
	st, ok := step.(int64)
	if !ok || st <= 0 {
		return c.errorf(ErrUnsupported, "arange with symbolic bounds and step %s (want an integer step > 0)", fxgraph.FormatArg(step))
	}
	for _, v := range []any{start, end} {
		switch v.(type) {
		case int64, *fxgraph.Node:
		default:
			return c.errorf(ErrUnsupported, "arange with symbolic bounds and bound %s (want integers)", fxgraph.FormatArg(v))
		}
	}
	length, err := c.symArith(fxgraph.AtenSubTensor, end, start)
	if err != nil {
		return err
	}
	if st != 1 {
		if length, err = c.symArith(fxgraph.AtenAddTensor, length, st-1); err != nil {
			return err
		}
		n, err := c.emit("", fxgraph.AtenDivTensorMode, []any{length, st}, map[string]any{"rounding_mode": "floor"})
		if err != nil {
			return err
		}
		length = n
	}
	full, err := c.emit("", fxgraph.AtenFull, []any{[]any{length}, st}, map[string]any{"dtype": tensor.Int64})
	if err != nil {
		return err
	}
	sum, err := c.emit("", fxgraph.AtenCumsum, []any{full, int64(0)}, nil)
	if err != nil {
		return err
	}
	res, err := c.symArith(fxgraph.AtenAddTensor, sum, start)
	if err != nil {
		return err
	}
	if res, err = c.symArith(fxgraph.AtenSubTensor, res, st); err != nil {
		return err
	}
	out := res.(*fxgraph.Node)
	if dt, ok := c.arg("dtype").(tensor.DType); ok && dt != tensor.Int64 {
		return c.one(fxgraph.Aten_ToCopy, []any{out}, map[string]any{"dtype": dt})
	}
	return c.alias(out)
}

// symArith applies a binary IR operator to ints and rank-0 nodes, folding
// int-only cases and additions of zero.
func (c *Call) symArith(target *fxgraph.Op, a, b any) (any, error) {
	ai, aInt := a.(int64)
	bi, bInt := b.(int64)
	switch {
	case aInt && bInt && target == fxgraph.AtenAddTensor:
		return ai + bi, nil
	case aInt && bInt && target == fxgraph.AtenSubTensor:
		return ai - bi, nil
	case bInt && bi == 0:
		return a, nil
	}
	if aInt {
		a = c.scalarConst(tensor.Int64, float64(ai))
	}
	return c.emit("", target, []any{a, b}, nil)
}

// maxGatherIndices bounds the constant index tensor of a general
// as_strided.
const maxGatherIndices = 1 << 22

// decAsStrided handles as_strided on a contiguous input: the identity when
// the view has the input's sizes and row-major strides (dims of size 1 may
// have any stride; run_decompositions emits this for adaptive_avg_pool2d to
// 1x1), else, for static shapes, a gather of the flattened input at the
// view's element offsets.
func decAsStrided(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	size, ok := c.arg("size").([]any)
	if !ok {
		return c.errorf(ErrUnsupported, "as_strided size %s", fxgraph.FormatArg(c.arg("size")))
	}
	stride, err := c.ints("stride", 0)
	if err != nil {
		return err
	}
	offset := int64(0)
	if c.arg("storage_offset") != nil {
		if offset, err = c.intArg("storage_offset"); err != nil {
			return err
		}
	}
	if len(stride) != len(size) || offset < 0 {
		return c.errorf(ErrFormat, "as_strided sizes %s, strides %v, offset %d", fxgraph.FormatArg(size), stride, offset)
	}
	xs := x.Val().Shape
	if offset == 0 && len(size) == len(xs) && c.sameDims(x, size) && rowMajor(xs, stride) {
		return c.alias(x)
	}
	sizes, ok := fxgraph.AsInts(size)
	xdims, xstatic := xs.Static()
	if !ok || !xstatic {
		return c.errorf(ErrUnsupported, "as_strided of %s to sizes %s strides %v: only the identity is supported with symbolic sizes",
			x.Val(), fxgraph.FormatArg(size), stride)
	}
	numel := tensor.NumElements(sizes)
	if numel < 0 || numel > maxGatherIndices {
		return c.errorf(ErrUnsupported, "as_strided to %v: too many elements to gather", sizes)
	}
	avail := tensor.NumElements(xdims)
	idx := make([]int64, numel)
	pos := make([]int64, len(sizes))
	for i := range idx {
		e := offset
		for k, p := range pos {
			e += p * stride[k]
		}
		if e < 0 || e >= avail {
			return c.errorf(ErrFormat, "as_strided reads element %d of %s", e, x.Val())
		}
		idx[i] = e
		for k := len(pos) - 1; k >= 0; k-- {
			pos[k]++
			if pos[k] < sizes[k] {
				break
			}
			pos[k] = 0
		}
	}
	flat, err := c.emit("", fxgraph.AtenReshape, []any{x, []any{int64(-1)}}, nil)
	if err != nil {
		return err
	}
	ix := c.constant("as_strided_index", tensor.FromInt64s(idx))
	g, err := c.emit("", fxgraph.AtenIndexSelect, []any{flat, int64(0), ix}, nil)
	if err != nil {
		return err
	}
	return c.one(fxgraph.AtenReshape, []any{g, ints64(sizes)}, nil)
}

// sameDims reports whether the size list equals x's dims: equal static
// sizes, or x's own aten.sym_size.int nodes for its symbolic dims.
func (c *Call) sameDims(x *fxgraph.Node, size []any) bool {
	xs := x.Val().Shape
	for i, s := range size {
		switch v := s.(type) {
		case int64:
			if !xs[i].IsStatic() || xs[i].Size != v {
				return false
			}
		case *fxgraph.Node:
			if xs[i].IsStatic() || v.Op != fxgraph.AtenSymSizeInt {
				return false
			}
			src, _ := v.Arg(0).(*fxgraph.Node)
			d, _ := fxgraph.AsInt(v.Arg(1))
			if src == nil || src.Val().Rank() <= int(d) || d < 0 || src.Val().Shape[d] != xs[i] {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// rowMajor reports whether strides are the contiguous strides of shape
// (ignoring dims of size 1); every dim inside a non-trivial one must be
// static.
func rowMajor(shape fxgraph.Shape, strides []int64) bool {
	want := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		d := shape[i]
		if d.IsStatic() && d.Size == 1 {
			continue
		}
		if strides[i] != want {
			return false
		}
		if !d.IsStatic() {
			// Only the outermost non-trivial dim may be symbolic.
			for j := 0; j < i; j++ {
				if !(shape[j].IsStatic() && shape[j].Size == 1) {
					return false
				}
			}
			return true
		}
		want *= d.Size
	}
	return true
}

// decClampOne maps clamp_min/clamp_max to clamp with one bound.
func decClampOne(bound string) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		v := c.arg(bound)
		if _, ok := v.(*fxgraph.Node); ok {
			return c.errorf(ErrUnsupported, "clamp_%s with a tensor bound", bound)
		}
		if bound == "min" {
			return c.one(fxgraph.AtenClamp, []any{x, v}, nil)
		}
		return c.one(fxgraph.AtenClamp, []any{x, nil, v}, nil)
	}
}

// broadcastTo casts v (a number or a tensor) to x's dtype and expands it to
// x's shape.
func (c *Call) broadcastTo(x *fxgraph.Node, v any) error {
	dims, err := c.dims(x)
	if err != nil {
		return err
	}
	n, ok := v.(*fxgraph.Node)
	if !ok {
		return c.one(fxgraph.AtenFull, []any{dims, v}, map[string]any{"dtype": x.Val().DType})
	}
	if n.Val().DType != x.Val().DType {
		if n, err = c.emit("", fxgraph.Aten_ToCopy, []any{n}, map[string]any{"dtype": x.Val().DType}); err != nil {
			return err
		}
	}
	return c.one(fxgraph.AtenExpand, []any{n, dims}, nil)
}

// decFill is fill(self, value) and zero(self): value in self's shape and
// dtype.
func decFill(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	var v any = int64(0)
	if c.Op != fxgraph.AtenZero {
		v = c.arg("value")
	}
	return c.broadcastTo(x, v)
}

// decCopy is copy(self, src): src in self's shape and dtype.
func decCopy(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	src, err := c.tensor("src")
	if err != nil {
		return err
	}
	return c.broadcastTo(x, src)
}

// decRoll rolls along static dims by concatenating two slices per dim (a
// roll without dims rolls the flattened tensor).
func decRoll(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	shifts, err := c.ints("shifts", 0)
	if err != nil {
		return err
	}
	dims, err := c.ints("dims", 0)
	if err != nil {
		return err
	}
	if len(dims) == 0 {
		if len(shifts) != 1 {
			return c.errorf(ErrFormat, "roll shifts %v without dims", shifts)
		}
		shape, err := c.dims(x)
		if err != nil {
			return err
		}
		flat, err := c.emit("", fxgraph.AtenReshape, []any{x, []any{int64(-1)}}, nil)
		if err != nil {
			return err
		}
		r, err := c.rollDim(flat, shifts[0], 0)
		if err != nil {
			return err
		}
		return c.one(fxgraph.AtenReshape, []any{r, shape}, nil)
	}
	if len(dims) != len(shifts) {
		return c.errorf(ErrFormat, "roll shifts %v and dims %v differ in length", shifts, dims)
	}
	y := x
	for i := range dims {
		if y, err = c.rollDim(y, shifts[i], dims[i]); err != nil {
			return err
		}
	}
	return c.alias(y)
}

// rollDim rolls x by shift along dim d, which must be static.
func (c *Call) rollDim(x *fxgraph.Node, shift, d int64) (*fxgraph.Node, error) {
	k, err := fxgraph.NormDim(d, x.Val().Rank())
	if err != nil {
		return nil, c.errorf(ErrFormat, "roll dim %d of %s", d, x.Val())
	}
	size := x.Val().Shape[k]
	if !size.IsStatic() {
		return nil, c.errorf(ErrUnsupported, "roll along symbolic dim %d of %s", k, x.Val())
	}
	if size.Size == 0 {
		return x, nil
	}
	s := ((shift % size.Size) + size.Size) % size.Size
	if s == 0 {
		return x, nil
	}
	tail, err := c.emit("", fxgraph.AtenSliceTensor, []any{x, int64(k), size.Size - s, size.Size, int64(1)}, nil)
	if err != nil {
		return nil, err
	}
	head, err := c.emit("", fxgraph.AtenSliceTensor, []any{x, int64(k), int64(0), size.Size - s, int64(1)}, nil)
	if err != nil {
		return nil, err
	}
	return c.emit("", fxgraph.AtenCat, []any{[]any{tail, head}, int64(k)}, nil)
}

// decSliceScatter writes src over self[start:end] along a static dim with
// step 1, as cat(self[:start], src, self[end:]).
func decSliceScatter(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	src, err := c.tensor("src")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	step, err := c.intArg("step")
	if err != nil {
		return err
	}
	k, err := fxgraph.NormDim(d, x.Val().Rank())
	if err != nil {
		return c.errorf(ErrFormat, "slice_scatter dim %d of %s", d, x.Val())
	}
	size := x.Val().Shape[k]
	if !size.IsStatic() || step != 1 {
		return c.errorf(ErrUnsupported, "slice_scatter along dim %d of %s with step %d (want a static dim and step 1)", k, x.Val(), step)
	}
	clampIdx := func(name string, def int64) (int64, error) {
		v := c.arg(name)
		if v == nil {
			return def, nil
		}
		i, err := c.intArg(name)
		if err != nil {
			return 0, err
		}
		if i < 0 {
			i += size.Size
		}
		return min(max(i, 0), size.Size), nil
	}
	start, err := clampIdx("start", 0)
	if err != nil {
		return err
	}
	end, err := clampIdx("end", size.Size)
	if err != nil {
		return err
	}
	end = max(end, start)
	var parts []any
	if start > 0 {
		p, err := c.emit("", fxgraph.AtenSliceTensor, []any{x, int64(k), int64(0), start, int64(1)}, nil)
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	if src.Val().DType != x.Val().DType {
		if src, err = c.emit("", fxgraph.Aten_ToCopy, []any{src}, map[string]any{"dtype": x.Val().DType}); err != nil {
			return err
		}
	}
	parts = append(parts, src)
	if end < size.Size {
		p, err := c.emit("", fxgraph.AtenSliceTensor, []any{x, int64(k), end, size.Size, int64(1)}, nil)
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		return c.alias(src)
	}
	return c.one(fxgraph.AtenCat, []any{parts, int64(k)}, nil)
}

// decBaddbmm is beta*self + alpha*bmm(batch1, batch2).
func decBaddbmm(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	b1, err := c.tensor("batch1")
	if err != nil {
		return err
	}
	b2, err := c.tensor("batch2")
	if err != nil {
		return err
	}
	beta, err := c.floatArg("beta")
	if err != nil {
		return err
	}
	alpha, err := c.floatArg("alpha")
	if err != nil {
		return err
	}
	prod, err := c.emit("", fxgraph.AtenBmm, []any{b1, b2}, nil)
	if err != nil {
		return err
	}
	if alpha != 1 {
		if prod, err = c.emit("", fxgraph.AtenMulScalar, []any{prod, alpha}, nil); err != nil {
			return err
		}
	}
	if beta == 0 {
		return c.alias(prod)
	}
	if beta != 1 {
		if x, err = c.emit("", fxgraph.AtenMulScalar, []any{x, beta}, nil); err != nil {
			return err
		}
	}
	return c.one(fxgraph.AtenAddTensor, []any{x, prod}, nil)
}

// atenOp returns the generated ATen operator called name, for tables built
// from names at start-up; a wrong name is a programming error and panics.
func atenOp(name string) *fxgraph.Op {
	op, ok := fxgraph.OpByName(name)
	if !ok {
		panic("fx: no ATen operator " + name)
	}
	return op
}
