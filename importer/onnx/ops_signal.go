package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Signal-processing operators (opset 17+): the windows, MelWeightMatrix,
// DFT and STFT. Windows and MelWeightMatrix depend only on scalar operands,
// which must be known at compile time; their tensors are computed here and
// become constants. DFT and STFT multiply by constant cosine and sine
// matrices (a DFT of a statically known length is a matrix product), in
// float64, so the result keeps float32 accuracy even for long transforms.

func registerSignal(cs converters) {
	cs.register("", "HannWindow", 17, sigWindow([]float64{0.5, -0.5}))
	cs.register("", "HammingWindow", 17, sigWindow([]float64{25.0 / 46, -21.0 / 46}))
	cs.register("", "BlackmanWindow", 17, sigWindow([]float64{0.42, -0.5, 0.08}))
	cs.register("", "MelWeightMatrix", 17, sigMelWeightMatrix)
	cs.register("", "DFT", 17, sigDFT)
	cs.register("", "STFT", 17, sigSTFT)
	cs.register("", "Det", 11, sigDet)
}

// sigScalar returns the compile-time value of scalar input i.
func sigScalar(c *Ctx, i int) (float64, error) {
	t, err := c.ConstValue(i)
	if err != nil {
		return 0, err
	}
	if t.NumElements() != 1 {
		return 0, fmt.Errorf("input %d is %s, want a scalar", i, t)
	}
	return t.Float64At(0), nil
}

// sigOutDType reads the output_datatype attribute (default float).
func sigOutDType(c *Ctx) (tensor.DType, error) {
	return shONNXDType(c.AttrInt("output_datatype", 1))
}

// sigWindow converts a generalized cosine window: w[n] = sum_k a[k]
// cos(2 pi k n / N), N the size when periodic, size-1 when symmetric.
func sigWindow(a []float64) Converter {
	return func(c *Ctx, n *Node) error {
		size, err := sigScalar(c, 0)
		if err != nil {
			return err
		}
		if size < 0 || size > 1<<24 {
			return fmt.Errorf("window size %g out of range", size)
		}
		dt, err := sigOutDType(c)
		if err != nil {
			return err
		}
		l := int64(size)
		den := float64(l)
		if c.AttrInt("periodic", 1) == 0 {
			den = float64(l - 1)
		}
		t := tensor.New(dt, l)
		for i := int64(0); i < l; i++ {
			v := 0.0
			for k, ak := range a {
				v += ak * math.Cos(2*math.Pi*float64(k)*float64(i)/den)
			}
			t.SetFloat64(i, v)
		}
		c.SetOutput(0, c.s.modelConstant(n.Outputs[0], t))
		return nil
	}
}

// sigMelWeightMatrix converts MelWeightMatrix: triangular filters between
// num_mel_bins+2 points spaced (upper-lower)/(num_mel_bins+2) apart on the mel scale, each point mapped to
// the DFT bin floor((dft_length+1) * hz / sample_rate).
func sigMelWeightMatrix(c *Ctx, n *Node) error {
	var v [5]float64
	for i := range v {
		x, err := sigScalar(c, i)
		if err != nil {
			return err
		}
		v[i] = x
	}
	mels, dftLen, rate, lo, hi := int64(v[0]), int64(v[1]), v[2], v[3], v[4]
	if mels <= 0 || dftLen <= 0 || rate <= 0 || mels > 1<<16 || dftLen > 1<<24 {
		return fmt.Errorf("MelWeightMatrix: num_mel_bins %d, dft_length %d, sample_rate %g out of range", mels, dftLen, rate)
	}
	dt, err := sigOutDType(c)
	if err != nil {
		return err
	}
	toMel := func(hz float64) float64 { return 2595 * math.Log10(1+hz/700) }
	loMel, hiMel := toMel(lo), toMel(hi)
	// The step divides by the number of points, as the ONNX reference and
	// ONNX Runtime do (the last point lies below upper_edge_hertz).
	step := (hiMel - loMel) / float64(mels+2)
	bins := int64(dftLen/2 + 1)
	pts := make([]int64, mels+2)
	for i := range pts {
		hz := 700 * (math.Pow(10, (float64(i)*step+loMel)/2595) - 1)
		pts[i] = int64(math.Floor(float64(dftLen+1) * hz / rate))
	}
	t := tensor.New(dt, bins, mels)
	set := func(bin, mel int64, w float64) {
		if bin >= 0 && bin < bins {
			t.SetFloat64(bin*mels+mel, w)
		}
	}
	for m := int64(0); m < mels; m++ {
		left, center, right := pts[m], pts[m+1], pts[m+2]
		if center == left {
			set(center, m, 1)
		} else {
			for j := left; j <= center; j++ {
				set(j, m, float64(j-left)/float64(center-left))
			}
		}
		for j := center; j < right; j++ {
			set(j, m, float64(right-j)/float64(right-center))
		}
	}
	c.SetOutput(0, c.s.modelConstant(n.Outputs[0], t))
	return nil
}

// sigDFTMatrices returns the [length, bins] cosine and sine matrices of a
// DFT of the given length: cos(2 pi k j / length) at row j, column k. The
// angle is reduced modulo a full turn first, and values that are zero in
// exact arithmetic are exactly zero.
func sigDFTMatrices(length, bins int64) (cos, sin *tensor.Tensor) {
	cos, sin = tensor.New(tensor.Float64, length, bins), tensor.New(tensor.Float64, length, bins)
	snap := func(v float64) float64 {
		if math.Abs(v) < 1e-12 {
			return 0
		}
		return v
	}
	for j := int64(0); j < length; j++ {
		for k := int64(0); k < bins; k++ {
			a := 2 * math.Pi * float64((j*k)%length) / float64(length)
			cos.SetFloat64(j*bins+k, snap(math.Cos(a)))
			sin.SetFloat64(j*bins+k, snap(math.Sin(a)))
		}
	}
	return cos, sin
}

// dftSpec is one DFT: along axis (of the signal without its trailing
// real/imaginary dim), zero-padded or cut to length, onesided or not.
type dftSpec struct {
	axis     int
	length   int64
	onesided bool
	inverse  bool
}

// sigSplitComplex returns the real and imaginary parts (nil imag for a real
// signal) of x, whose last dim is 1 (real) or 2 (complex), as float64.
func sigSplitComplex(c *Ctx, x *fxgraph.Node) (re, im *fxgraph.Node, err error) {
	s := Meta(x).Shape
	if len(s) < 2 || !s[len(s)-1].IsStatic() || (s[len(s)-1].Size != 1 && s[len(s)-1].Size != 2) {
		return nil, nil, fmt.Errorf("signal is %s, want a last dim of 1 (real) or 2 (complex)", Meta(x))
	}
	x64, err := ewCastTo(c, x, tensor.Float64)
	if err != nil {
		return nil, nil, err
	}
	last := int64(len(s) - 1)
	if re, err = c.Emit(fxgraph.AtenSelectInt, x64, last, int64(0)); err != nil {
		return nil, nil, err
	}
	if s[len(s)-1].Size == 2 {
		if im, err = c.Emit(fxgraph.AtenSelectInt, x64, last, int64(1)); err != nil {
			return nil, nil, err
		}
	}
	return re, im, nil
}

// sigDFTParts computes the DFT of (re, im) along sp.axis and returns the
// real and imaginary parts of the result, axis in place.
func sigDFTParts(c *Ctx, re, im *fxgraph.Node, sp dftSpec) (outRe, outIm *fxgraph.Node, err error) {
	rank := len(Meta(re).Shape)
	// Move the axis last, so the DFT is a product with a [length, bins] matrix.
	perm := make([]any, 0, rank)
	for i := 0; i < rank; i++ {
		if i != sp.axis {
			perm = append(perm, int64(i))
		}
	}
	perm = append(perm, int64(sp.axis))
	inv := make([]any, rank)
	for i, p := range perm {
		inv[p.(int64)] = int64(i)
	}
	size := Meta(re).Shape[sp.axis]
	if !size.IsStatic() {
		return nil, nil, Unsupported("DFT along a dim of symbolic size")
	}
	fit := func(v *fxgraph.Node) (*fxgraph.Node, error) {
		if v == nil {
			return nil, nil
		}
		v, err := c.Emit(fxgraph.AtenPermute, v, perm)
		if err != nil {
			return nil, err
		}
		switch {
		case size.Size > sp.length:
			return c.Emit(fxgraph.AtenSliceTensor, v, int64(-1), int64(0), sp.length, int64(1))
		case size.Size < sp.length:
			return c.Emit(fxgraph.AtenConstantPadNd, v, []any{int64(0), sp.length - size.Size}, 0.0)
		}
		return v, nil
	}
	if re, err = fit(re); err != nil {
		return nil, nil, err
	}
	if im, err = fit(im); err != nil {
		return nil, nil, err
	}
	bins := sp.length
	if sp.onesided {
		bins = sp.length/2 + 1
	}
	cosT, sinT := sigDFTMatrices(sp.length, bins)
	cosN, sinN := c.Constant("dft_cos", cosT), c.Constant("dft_sin", sinT)
	mm := func(a, b *fxgraph.Node) (*fxgraph.Node, error) { return c.Emit(fxgraph.AtenMatmul, a, b) }
	// Forward: (re + i im)(cos - i sin); inverse: (re + i im)(cos + i sin) / length.
	sign := -1.0
	if sp.inverse {
		sign = 1
	}
	rc, err := mm(re, cosN)
	if err != nil {
		return nil, nil, err
	}
	rs, err := mm(re, sinN)
	if err != nil {
		return nil, nil, err
	}
	if outIm, err = c.Emit(fxgraph.AtenMulScalar, rs, sign); err != nil {
		return nil, nil, err
	}
	outRe = rc
	if im != nil {
		ic, err := mm(im, cosN)
		if err != nil {
			return nil, nil, err
		}
		is, err := mm(im, sinN)
		if err != nil {
			return nil, nil, err
		}
		ms, err := c.Emit(fxgraph.AtenMulScalar, is, -sign)
		if err != nil {
			return nil, nil, err
		}
		if outRe, err = c.Emit(fxgraph.AtenAddTensor, rc, ms); err != nil {
			return nil, nil, err
		}
		if outIm, err = c.Emit(fxgraph.AtenAddTensor, outIm, ic); err != nil {
			return nil, nil, err
		}
	}
	back := func(v *fxgraph.Node) (*fxgraph.Node, error) {
		if sp.inverse {
			var err error
			if v, err = c.Emit(fxgraph.AtenDivScalar, v, float64(sp.length)); err != nil {
				return nil, err
			}
		}
		return c.Emit(fxgraph.AtenPermute, v, inv)
	}
	if outRe, err = back(outRe); err != nil {
		return nil, nil, err
	}
	if outIm, err = back(outIm); err != nil {
		return nil, nil, err
	}
	return outRe, outIm, nil
}

// sigJoinComplex stacks re and im on a new last dim and casts to dt.
func sigJoinComplex(c *Ctx, re, im *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	r, err := c.Emit(fxgraph.AtenUnsqueeze, re, int64(-1))
	if err != nil {
		return nil, err
	}
	i, err := c.Emit(fxgraph.AtenUnsqueeze, im, int64(-1))
	if err != nil {
		return nil, err
	}
	out, err := c.Emit(fxgraph.AtenCat, []any{r, i}, int64(-1))
	if err != nil {
		return nil, err
	}
	return ewCastTo(c, out, dt)
}

// sigDFT converts DFT: opset 17 takes the axis as an attribute (default 1),
// opset 20 as input 2 (default -2); dft_length is optional input 1.
func sigDFT(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	dt := Meta(x).DType
	if !dt.IsFloat() {
		return fmt.Errorf("DFT of %s, want a float signal", Meta(x))
	}
	rank := len(Meta(x).Shape) - 1 // without the trailing real/imaginary dim
	axis := c.AttrInt("axis", 1)
	if c.Opset >= 20 {
		axis = -2
		if c.HasInput(2) {
			if axis, err = sigIntInput(c, 2); err != nil {
				return err
			}
		}
	}
	// A negative axis counts from the back of the whole input, the trailing
	// real/imaginary dim included (-2 is the last signal axis).
	if axis < 0 {
		axis += int64(rank) + 1
	}
	if axis < 0 || axis >= int64(rank) {
		return fmt.Errorf("DFT axis %d out of range for signal %s", axis, Meta(x))
	}
	re, im, err := sigSplitComplex(c, x)
	if err != nil {
		return err
	}
	size := Meta(re).Shape[axis]
	if !size.IsStatic() {
		return Unsupported("DFT along a dim of symbolic size")
	}
	sp := dftSpec{axis: int(axis), length: size.Size, onesided: c.AttrInt("onesided", 0) != 0, inverse: c.AttrInt("inverse", 0) != 0}
	if c.HasInput(1) {
		if sp.length, err = sigIntInput(c, 1); err != nil {
			return err
		}
		if sp.length <= 0 {
			return fmt.Errorf("DFT dft_length %d, want > 0", sp.length)
		}
	}
	if sp.onesided && sp.inverse {
		return Unsupported("DFT with both onesided and inverse")
	}
	outRe, outIm, err := sigDFTParts(c, re, im, sp)
	if err != nil {
		return err
	}
	out, err := sigJoinComplex(c, outRe, outIm, dt)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// sigIntInput returns the compile-time value of scalar integer input i.
func sigIntInput(c *Ctx, i int) (int64, error) {
	v, err := c.ConstInts(i)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("input %d has %d values, want a scalar", i, len(v))
	}
	return v[0], nil
}

// sigSTFT converts STFT(signal [batch, length, 1|2], frame_step, window?,
// frame_length?): frames gathered with constant indices, multiplied by the
// window, then a DFT along the frame.
func sigSTFT(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok || len(dims) != 3 || !m.DType.IsFloat() {
		return Unsupported("STFT of %s (want a static float [batch, length, 1|2] signal)", m)
	}
	step, err := sigIntInput(c, 1)
	if err != nil {
		return err
	}
	var window *fxgraph.Node
	frameLen := int64(-1)
	if c.HasInput(2) {
		if window, err = c.Input(2); err != nil {
			return err
		}
		wd, ok := Meta(window).Shape.Static()
		if !ok || len(wd) != 1 {
			return fmt.Errorf("STFT window is %s, want a static 1-D tensor", Meta(window))
		}
		frameLen = wd[0]
	}
	if c.HasInput(3) {
		fl, err := sigIntInput(c, 3)
		if err != nil {
			return err
		}
		if frameLen >= 0 && fl != frameLen {
			return fmt.Errorf("STFT frame_length %d differs from the window's length %d", fl, frameLen)
		}
		frameLen = fl
	}
	if frameLen <= 0 || step <= 0 || frameLen > dims[1] {
		return fmt.Errorf("STFT frame_length %d, frame_step %d for a signal of length %d", frameLen, step, dims[1])
	}
	frames := (dims[1]-frameLen)/step + 1
	idx := make([]int64, 0, frames*frameLen)
	for f := int64(0); f < frames; f++ {
		for j := int64(0); j < frameLen; j++ {
			idx = append(idx, f*step+j)
		}
	}
	g, err := c.Emit(fxgraph.AtenIndexSelect, x, int64(1), c.IntsConst(idx))
	if err != nil {
		return err
	}
	if g, err = c.Emit(fxgraph.AtenView, g, []any{dims[0], frames, frameLen, dims[2]}); err != nil {
		return err
	}
	re, im, err := sigSplitComplex(c, g)
	if err != nil {
		return err
	}
	if window != nil {
		w, err := ewCastTo(c, window, tensor.Float64)
		if err != nil {
			return err
		}
		if re, err = c.Emit(fxgraph.AtenMulTensor, re, w); err != nil {
			return err
		}
		if im != nil {
			if im, err = c.Emit(fxgraph.AtenMulTensor, im, w); err != nil {
				return err
			}
		}
	}
	sp := dftSpec{axis: 2, length: frameLen, onesided: c.AttrInt("onesided", 1) != 0}
	outRe, outIm, err := sigDFTParts(c, re, im, sp)
	if err != nil {
		return err
	}
	out, err := sigJoinComplex(c, outRe, outIm, m.DType)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// sigDet converts Det of [..., n, n] (n static) by Gaussian elimination
// with partial pivoting, unrolled over the n columns: each step picks the
// row of largest magnitude in the column, swaps it up (negating the sign),
// multiplies the determinant by the pivot and eliminates below it, leaving
// an (n-1)x(n-1) trailing matrix. A zero pivot gives a zero determinant.
func sigDet(c *Ctx, _ *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok || len(dims) < 2 || dims[len(dims)-1] != dims[len(dims)-2] || !m.DType.IsFloat() {
		return Unsupported("Det of %s (want a static float [..., n, n] tensor)", m)
	}
	n := dims[len(dims)-1]
	batch := tensor.NumElements(dims[:len(dims)-2])
	a, err := ewCastTo(c, x, tensor.Float64)
	if err != nil {
		return err
	}
	if a, err = c.Emit(fxgraph.AtenView, a, []any{batch, n, n}); err != nil {
		return err
	}
	det := c.Constant("det_one", tensor.New(tensor.Float64, batch))
	if det, err = c.Emit(fxgraph.AtenAddScalar, det, 1.0); err != nil {
		return err
	}
	for k := n; k > 0; k-- { // a is [batch, k, k]
		if det, a, err = sigDetStep(c, det, a, k); err != nil {
			return err
		}
	}
	out, err := c.Emit(fxgraph.AtenView, det, ints(dims[:len(dims)-2]))
	if err != nil {
		return err
	}
	if out, err = ewCastTo(c, out, m.DType); err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// sigDetStep does one elimination step on a [batch, k, k]: it returns the
// determinant so far times the pivot (sign included) and the trailing
// [batch, k-1, k-1] matrix (nil when k is 1).
func sigDetStep(c *Ctx, det, a *fxgraph.Node, k int64) (*fxgraph.Node, *fxgraph.Node, error) {
	e := &sigEmitter{c: c}
	col := e.op(fxgraph.AtenSelectInt, a, int64(2), int64(0)) // [batch, k]
	p := e.op(fxgraph.AtenArgmax, e.op(fxgraph.AtenAbs, col), int64(1), true)
	rows := e.c.Constant("det_rows", tensor.FromInt64s(sigIota(k), 1, k, 1))
	isP := e.op(fxgraph.AtenEqTensor, rows, e.op(fxgraph.AtenUnsqueeze, p, int64(-1))) // [batch, k, 1]
	is0 := e.op(fxgraph.AtenEqScalar, rows, int64(0))
	zero := e.c.ScalarConst(tensor.Float64, 0)
	rowP := e.op(fxgraph.AtenSumDimIntList, e.op(fxgraph.AtenWhereSelf, isP, a, zero), []any{int64(1)}, true) // [batch, 1, k]
	row0 := e.op(fxgraph.AtenSliceTensor, a, int64(1), int64(0), int64(1), int64(1))
	// Swap rows 0 and p.
	a = e.op(fxgraph.AtenWhereSelf, is0, rowP, e.op(fxgraph.AtenWhereSelf, isP, row0, a))
	pivot := e.op(fxgraph.AtenSelectInt, e.op(fxgraph.AtenSelectInt, rowP, int64(1), int64(0)), int64(1), int64(0)) // [batch]
	swapped := e.op(fxgraph.AtenNeScalar, e.op(fxgraph.AtenSqueezeDims, p, []any{int64(1)}), int64(0))
	signed := e.op(fxgraph.AtenWhereSelf, swapped, e.op(fxgraph.AtenNeg, pivot), pivot)
	det = e.op(fxgraph.AtenMulTensor, det, signed)
	if e.err != nil || k == 1 {
		return det, nil, e.err
	}
	isZero := e.op(fxgraph.AtenEqScalar, pivot, 0.0)
	safe := e.op(fxgraph.AtenWhereSelf, isZero, e.c.ScalarConst(tensor.Float64, 1), pivot)
	below := e.op(fxgraph.AtenSliceTensor, a, int64(1), int64(1), k, int64(1))                                                             // [batch, k-1, k]
	f := e.op(fxgraph.AtenDivTensor, e.op(fxgraph.AtenSelectInt, below, int64(2), int64(0)), e.op(fxgraph.AtenUnsqueeze, safe, int64(-1))) // [batch, k-1]
	f = e.op(fxgraph.AtenUnsqueeze, f, int64(-1))                                                                                          // [batch, k-1, 1]
	top := e.op(fxgraph.AtenSliceTensor, rowP, int64(2), int64(1), k, int64(1))                                                            // [batch, 1, k-1]
	rest := e.op(fxgraph.AtenSliceTensor, below, int64(2), int64(1), k, int64(1))                                                          // [batch, k-1, k-1]
	rest = e.op(fxgraph.AtenSubTensor, rest, e.op(fxgraph.AtenMulTensor, f, top))
	return det, rest, e.err
}

// sigIota returns 0, 1, ..., n-1.
func sigIota(n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// sigEmitter emits a chain of ops, keeping the first error.
type sigEmitter struct {
	c   *Ctx
	err error
}

func (e *sigEmitter) op(target *fxgraph.Op, args ...any) *fxgraph.Node {
	if e.err != nil {
		return nil
	}
	n, err := e.c.Emit(target, args...)
	if err != nil {
		e.err = err
	}
	return n
}
