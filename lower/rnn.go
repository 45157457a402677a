package lower

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// registerRNN registers the rule of "xserve.rnn" (ONNX RNN, GRU and LSTM,
// DynamicQuantizeLSTM, torch's recurrent layers).
func registerRNN(r *Registry) {
	r.Register(fxgraph.XserveRNN, rnnRule)
}

// rnnRule lowers "xserve.rnn" (see fxgraph.RNNArgs): per direction, one
// product of the whole input with W, then a stablehlo.while over the steps
// (compiled once, whatever the sequence length) whose body multiplies the
// hidden state with R and applies the gate arithmetic of ONNX's RNN, GRU or
// LSTM, writing each step's hidden state into y. sequence_lens masks the
// steps past each entry's length; the reverse direction reads each entry
// backwards from its own last step (ONNX's ReverseSequence, a gather).
func rnnRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	a, err := fxgraph.RNN(n)
	if err != nil {
		return nil, err
	}
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	arg := func(i int) *stablehlo.Value {
		if i < len(in) {
			return in[i]
		}
		return nil
	}
	dt, _ := Out(n, 0)
	out := in[0].Type().Elem
	ce := out
	if ctx.ComputeDType(dt) != dt {
		ce = stablehlo.F32 // half precision computed in float32
	}
	l := &rnnLayer{
		b: &rnnB{blk: ctx.Fn.Block(), unfused: fxgraph.RNNQuantized(n)}, a: a,
		seq: xd[0], batch: xd[1], input: xd[2], hid: a.Hidden, gh: a.Gates() * a.Hidden,
		ce: ce, quant: fxgraph.RNNQuantized(n),
	}
	b := l.b
	x := b.convert(in[0], ce)
	if lens := arg(fxgraph.RNNSequenceLens); lens != nil {
		l.lens = b.convert(lens, stablehlo.I32)
	}
	var ys, hs, cs []*stablehlo.Value
	for d := range a.Dirs() {
		reverse := a.Direction == "reverse" || d == 1
		y, h, c := l.direction(x, d, reverse, func(i int) *stablehlo.Value { return arg(i) })
		ys, hs, cs = append(ys, y), append(hs, h), append(cs, c)
	}
	if b.err != nil {
		return nil, b.err
	}
	cat := func(axis int, vs []*stablehlo.Value) *stablehlo.Value {
		if len(vs) == 1 {
			return b.convert(vs[0], out)
		}
		return b.convert(b.v(b.blk.Concatenate(axis, vs...)), out)
	}
	res := []*stablehlo.Value{cat(1, ys), cat(0, hs), cat(0, cs)}
	return res, b.err
}

// rnnLayer is one "xserve.rnn" node being lowered.
type rnnLayer struct {
	b                            *rnnB
	a                            fxgraph.RNNArgs
	seq, batch, input, hid, gh   int64
	ce                           stablehlo.ElementType // the float type computed in
	quant                        bool
	lens                         *stablehlo.Value // i32 [batch], or nil
	wScale, wZero, rScale, rZero *stablehlo.Value // this direction's, quantized only
	wWeights, rWeights           *stablehlo.Value
	wBias, rBias                 *stablehlo.Value // [gh] each, or nil
	peepI, peepO, peepF          *stablehlo.Value // [hid] each, or nil
}

// direction lowers direction d: y [seq, 1, batch, hid], y_h and y_c [1,
// batch, hid].
func (l *rnnLayer) direction(x *stablehlo.Value, d int64, reverse bool, arg func(int) *stablehlo.Value) (y, yh, yc *stablehlo.Value) {
	b := l.b
	gh, hid, batch := l.gh, l.hid, l.batch
	weights := func(v *stablehlo.Value, cols int64) *stablehlo.Value {
		v = b.dirSlice(v, d, gh, cols)
		if !l.quant {
			v = b.convert(v, l.ce)
		}
		return v
	}
	l.wWeights, l.rWeights = weights(arg(1), l.input), weights(arg(2), hid)
	if l.quant {
		param := func(i int) *stablehlo.Value {
			v := arg(i)
			if v == nil || b.err != nil {
				return nil
			}
			if v.Type().Rank() == 1 {
				return b.dirSlice(v, d)
			}
			return b.dirSlice(v, d, gh)
		}
		l.wScale, l.wZero = param(fxgraph.RNNWScale), param(fxgraph.RNNWZeroPoint)
		l.rScale, l.rZero = param(fxgraph.RNNRScale), param(fxgraph.RNNRZeroPoint)
	}
	l.wBias, l.rBias = nil, nil
	if bias := b.dirSlice(b.convert(arg(3), l.ce), d, 2*gh); bias != nil {
		l.wBias, l.rBias = b.slice1(bias, 0, gh), b.slice1(bias, gh, 2*gh)
	}
	l.peepI, l.peepO, l.peepF = nil, nil, nil
	if p := b.dirSlice(b.convert(arg(6), l.ce), d, 3*hid); p != nil {
		l.peepI, l.peepO, l.peepF = b.slice1(p, 0, hid), b.slice1(p, hid, 2*hid), b.slice1(p, 2*hid, 3*hid)
	}
	state := func(i int) *stablehlo.Value {
		if v := b.dirSlice(b.convert(arg(i), l.ce), d, batch, hid); v != nil {
			return v
		}
		return b.full(l.ce, 0, batch, hid)
	}
	h, c := state(4), state(5)

	if reverse {
		x = l.reverseSeq(x)
	}
	xw := l.inputProjection(x)
	y, yh, yc = l.loop(xw, h, c)
	if reverse {
		y = l.reverseSeq(y)
	}
	if l.a.Mode != "lstm" {
		yc = b.full(l.ce, 0, batch, hid)
	}
	return b.reshape(y, l.seq, 1, batch, hid), b.reshape(yh, 1, batch, hid), b.reshape(yc, 1, batch, hid)
}

// inputProjection returns x @ w^T for every step: [seq, batch, gh].
func (l *rnnLayer) inputProjection(x *stablehlo.Value) *stablehlo.Value {
	b := l.b
	rows := l.seq * l.batch
	x2 := b.reshape(x, rows, l.input)
	var xw *stablehlo.Value
	if l.quant {
		var mask *stablehlo.Value
		if l.lens != nil {
			// ONNX Runtime quantizes the steps up to the longest sequence.
			step := b.iota(stablehlo.I32, 0, l.seq, l.batch, l.input)
			longest := b.reduce(l.lens, "max", []int64{0})
			mask = b.reshape(b.cmp(step, b.bcast(longest, nil, l.seq, l.batch, l.input), stablehlo.LT), rows, l.input)
		}
		xw = l.qdot(x2, mask, b.shiftedWeights(l.wWeights, l.wZero), l.wScale)
	} else {
		xw = b.dot(x2, l.wWeights)
	}
	return b.reshape(xw, l.seq, l.batch, l.gh)
}

// qdot is ONNX Runtime's dynamically quantized GEMM of a float a [m, k]
// with int32 weights wi [n, k] already shifted by their zero point: a is
// quantized to uint8 over its range (the elements mask selects, when
// given; the range always includes 0), the product accumulated in int32
// and scaled by a's scale times ws (a scalar or one per row of wi).
func (l *rnnLayer) qdot(a, mask, wi, ws *stablehlo.Value) *stablehlo.Value {
	b := l.b
	if b.err != nil {
		return nil
	}
	dims := a.Type().Dims
	ranged := a
	if mask != nil {
		ranged = b.sel(mask, a, b.full(l.ce, 0, dims...))
	}
	zero := b.scalar(l.ce, 0)
	mn, mx := b.reduce(ranged, "min", []int64{0, 1}), b.reduce(ranged, "max", []int64{0, 1})
	span := b.sub(mx, mn)
	scale := b.ieeeDiv(span, b.scalar(l.ce, 255))
	scale = b.sel(b.cmp(span, zero, stablehlo.EQ), b.scalar(l.ce, 1), scale) // an all-zero a: scale 1
	zp := b.round(b.clamp(b.ieeeDiv(b.neg(mn), scale), 0, 255))
	q := b.add(b.round(b.ieeeDiv(a, b.bcast(scale, nil, dims...))), b.bcast(zp, nil, dims...))
	q = b.clamp(q, 0, 255)
	qi := b.sub(b.convert(q, stablehlo.I32), b.bcast(b.convert(zp, stablehlo.I32), nil, dims...))
	acc := b.v(b.blk.DotGeneral(qi, wi, stablehlo.DotDims{LhsContract: []int64{1}, RhsContract: []int64{1}}, stablehlo.PrecisionNone, stablehlo.I32))
	outDims := []int64{dims[0], wi.Type().Dims[0]}
	mult := b.mul(b.bcast(ws, nil, ws.Type().Dims...), b.bcast(scale, nil, ws.Type().Dims...))
	if mult.Type().Rank() == 0 {
		mult = b.bcast(mult, nil, outDims...)
	} else {
		mult = b.bcast(mult, []int64{1}, outDims...)
	}
	return b.product(b.convert(acc, l.ce), mult)
}

// loop runs the steps over xw [seq, batch, gh] from the initial state h, c
// [batch, hid] in a stablehlo.while; it returns y [seq, batch, hid] and the
// final (or, with sequence_lens, each entry's last) h and c.
func (l *rnnLayer) loop(xw, h, c *stablehlo.Value) (y, yh, yc *stablehlo.Value) {
	b := l.b
	if b.err != nil {
		return nil, nil, nil
	}
	// Loop values: step, h (fed to the next step), c, y, h and c at each
	// entry's last step, then the invariants.
	ys := b.full(l.ce, 0, l.seq, l.batch, l.hid)
	inv := []*stablehlo.Value{xw}
	r := l.rWeights
	if l.quant {
		r = b.shiftedWeights(r, l.rZero)
		inv = append(inv, l.rScale)
	}
	inv = append(inv, r)
	for _, v := range []*stablehlo.Value{l.wBias, l.rBias, l.peepI, l.peepO, l.peepF, l.lens} {
		if v != nil {
			inv = append(inv, v)
		}
	}
	carried := []*stablehlo.Value{b.scalar(stablehlo.I32, 0), h, c, ys, h, c}
	res := b.while(append(carried, inv...), l.seq, func(body *rnnB, vals []*stablehlo.Value) []*stablehlo.Value {
		return l.step(body, vals[:len(carried)], vals[len(carried):])
	})
	if b.err != nil {
		return nil, nil, nil
	}
	if l.lens == nil {
		return res[3], res[1], res[2]
	}
	return res[3], res[4], res[5]
}

// stepVals are the values one step's gate arithmetic reads.
type stepVals struct {
	b                 *rnnB
	xt, hr, h, c, r   *stablehlo.Value
	wBias, rBias      *stablehlo.Value
	pi, po, pf        *stablehlo.Value
	sigmoid, tanh     func(*stablehlo.Value) (*stablehlo.Value, error)
	batch, hid        int64
	clip              float64
	linearBeforeReset bool
	relu              bool
}

// step is the loop body: it returns the next carried values.
func (l *rnnLayer) step(b *rnnB, cv, inv []*stablehlo.Value) []*stablehlo.Value {
	step, h, c, ys, hLast, cLast := cv[0], cv[1], cv[2], cv[3], cv[4], cv[5]
	k := 0
	next := func(present bool) *stablehlo.Value {
		if !present {
			return nil
		}
		k++
		return inv[k-1]
	}
	xw, rScale := next(true), next(l.quant)
	sv := &stepVals{b: b, h: h, c: c, r: next(true), batch: l.batch, hid: l.hid, clip: l.a.Clip,
		linearBeforeReset: l.a.LinearBeforeReset, relu: l.a.Activation == "relu", sigmoid: b.blk.Logistic, tanh: b.blk.Tanh}
	sv.wBias, sv.rBias = next(l.wBias != nil), next(l.rBias != nil)
	sv.pi, sv.po, sv.pf = next(l.peepI != nil), next(l.peepO != nil), next(l.peepF != nil)
	lens := next(l.lens != nil)
	batch, hid := l.batch, l.hid
	zero := b.scalar(stablehlo.I32, 0)
	sv.xt = b.reshape(b.v(b.blk.DynamicSlice(xw, []*stablehlo.Value{step, zero, zero}, []int64{1, batch, l.gh})), batch, l.gh)
	if l.quant {
		sub := &rnnLayer{b: b, ce: l.ce}
		sv.hr = sub.qdot(h, nil, sv.r, rScale)
		// ONNX Runtime's own approximations: the quantization of the next
		// step's state amplifies the last bit of every activation.
		sv.sigmoid, sv.tanh = b.mlasLogistic, b.mlasTanh
	} else {
		sv.hr = b.dot(h, sv.r)
	}
	var hn, cn *stablehlo.Value
	switch l.a.Mode {
	case "rnn":
		hn, cn = sv.rnnCell(), c
	case "gru":
		hn, cn = sv.gruCell(), c
	default:
		hn, cn = sv.lstmCell()
	}
	if lens != nil {
		// Past its length an entry's output is zero (which is what ONNX
		// Runtime multiplies R with next), and its last h and c stay.
		valid := b.cmp(b.bcast(step, nil, batch), lens, stablehlo.LT)
		valid = b.bcast(valid, []int64{0}, batch, hid)
		zeros := b.full(l.ce, 0, batch, hid)
		hLast, cLast = b.sel(valid, hn, hLast), b.sel(valid, cn, cLast)
		hn, cn = b.sel(valid, hn, zeros), b.sel(valid, cn, c)
	}
	ys = b.v(b.blk.DynamicUpdateSlice(ys, b.reshape(hn, 1, batch, hid), []*stablehlo.Value{step, zero, zero}))
	next1 := b.add(step, b.scalar(stablehlo.I32, 1))
	return []*stablehlo.Value{next1, hn, cn, ys, hLast, cLast}
}

// gate returns gate g's columns of v ([batch, gates*hid], or a bias
// [gates*hid] broadcast over the batch).
func (sv *stepVals) gate(v *stablehlo.Value, g int64) *stablehlo.Value {
	b, hid := sv.b, sv.hid
	if v == nil {
		return nil
	}
	if v.Type().Rank() == 1 {
		return b.bcast(b.slice1(v, g*hid, (g+1)*hid), []int64{1}, sv.batch, hid)
	}
	return b.v(b.blk.Slice(v, []int64{0, g * hid}, []int64{sv.batch, (g + 1) * hid}, []int64{1, 1}))
}

// act applies f after the clip.
func (sv *stepVals) act(f func(*stablehlo.Value) (*stablehlo.Value, error), v *stablehlo.Value) *stablehlo.Value {
	if sv.clip > 0 {
		v = sv.b.clamp(v, -sv.clip, sv.clip)
	}
	return sv.b.v(f(v))
}

// pre is gate g's input, in ONNX Runtime's order: (x W + h R) [+ the
// peephole term] + (Wb + Rb).
func (sv *stepVals) pre(g int64, peep *stablehlo.Value) *stablehlo.Value {
	b := sv.b
	v := b.add(sv.gate(sv.xt, g), sv.gate(sv.hr, g))
	if peep != nil {
		v = b.add(v, peep)
	}
	if sv.wBias != nil {
		v = b.add(v, b.add(sv.gate(sv.wBias, g), sv.gate(sv.rBias, g)))
	}
	return v
}

func (sv *stepVals) rnnCell() *stablehlo.Value {
	f := sv.tanh
	if sv.relu {
		zeros := sv.b.full(sv.xt.Type().Elem, 0, sv.batch, sv.hid)
		f = func(v *stablehlo.Value) (*stablehlo.Value, error) { return sv.b.blk.Maximum(v, zeros) }
	}
	return sv.act(f, sv.pre(0, nil))
}

func (sv *stepVals) gruCell() *stablehlo.Value {
	b, hid := sv.b, sv.hid
	z, rr := sv.act(sv.sigmoid, sv.pre(0, nil)), sv.act(sv.sigmoid, sv.pre(1, nil))
	hg := sv.gate(sv.xt, 2)
	if sv.wBias != nil {
		hg = b.add(hg, sv.gate(sv.wBias, 2))
	}
	var rh *stablehlo.Value
	if sv.linearBeforeReset {
		rh = sv.gate(sv.hr, 2) // r ⊙ (h Rh + Rbh)
	} else {
		// (r ⊙ h) Rh, plus Rbh.
		rw := b.v(b.blk.Slice(sv.r, []int64{2 * hid, 0}, []int64{3 * hid, hid}, []int64{1, 1}))
		rh, rr = b.dot(b.mul(rr, sv.h), rw), nil
	}
	if sv.rBias != nil {
		rh = b.add(rh, sv.gate(sv.rBias, 2))
	}
	if rr != nil {
		rh = b.mul(rr, rh)
	}
	hh := sv.act(sv.tanh, b.add(hg, rh))
	one := b.full(sv.xt.Type().Elem, 1, sv.batch, hid)
	return b.add(b.mul(b.sub(one, z), hh), b.mul(z, sv.h))
}

// lstmCell returns the new h and c (gates i, o, f, c).
func (sv *stepVals) lstmCell() (h, c *stablehlo.Value) {
	b := sv.b
	row := func(v *stablehlo.Value) *stablehlo.Value { return b.bcast(v, []int64{1}, sv.batch, sv.hid) }
	var ip, fp *stablehlo.Value
	if sv.pi != nil {
		ip, fp = b.product(sv.c, row(sv.pi)), b.product(sv.c, row(sv.pf))
	}
	i, f := sv.act(sv.sigmoid, sv.pre(0, ip)), sv.act(sv.sigmoid, sv.pre(2, fp))
	cc := sv.act(sv.tanh, sv.pre(3, nil))
	c = b.add(b.product(sv.c, f), b.product(i, cc))
	var op *stablehlo.Value
	if sv.po != nil {
		op = b.product(c, row(sv.po))
	}
	return b.product(b.v(sv.tanh(c)), sv.act(sv.sigmoid, sv.pre(1, op))), c
}

// reverseSeq reverses v [seq, batch, f] along the sequence: each entry
// within its own length when sequence_lens is given (the steps past it stay
// in place), else the whole axis.
func (l *rnnLayer) reverseSeq(v *stablehlo.Value) *stablehlo.Value {
	b := l.b
	if b.err != nil {
		return nil
	}
	if l.lens == nil {
		return b.v(b.blk.Reverse(v, 0))
	}
	f := v.Type().Dims[2]
	t := b.iota(stablehlo.I32, 0, l.seq, l.batch)
	n := b.bcast(l.lens, []int64{1}, l.seq, l.batch)
	rev := b.sub(b.sub(n, b.full(stablehlo.I32, 1, l.seq, l.batch)), t)
	idx := b.sel(b.cmp(t, n, stablehlo.LT), rev, t)
	entry := b.iota(stablehlo.I32, 1, l.seq, l.batch)
	starts := b.v(b.blk.Concatenate(2, b.reshape(idx, l.seq, l.batch, 1), b.reshape(entry, l.seq, l.batch, 1)))
	return b.v(b.blk.Gather(v, starts, stablehlo.GatherDims{
		OffsetDims: []int64{2}, CollapsedSliceDims: []int64{0, 1}, StartIndexMap: []int64{0, 1}, IndexVectorDim: 2,
	}, []int64{1, 1, f}, false))
}

// rnnB emits ops into one block and keeps the first error: once an op
// fails every later call returns nil.
type rnnB struct {
	blk *stablehlo.Block
	err error
	// unfused makes product round each float32 product on its own: XLA CPU
	// contracts a product feeding an addition into a fused multiply-add,
	// which ONNX Runtime's LSTM does not do.
	unfused bool
}

func (b *rnnB) v(v *stablehlo.Value, err error) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	if err != nil {
		b.err = err
		return nil
	}
	return v
}

func (b *rnnB) ok(vs ...*stablehlo.Value) bool {
	if b.err != nil {
		return false
	}
	for _, v := range vs {
		if v == nil {
			b.err = fmt.Errorf("lower: xserve.rnn: missing operand")
			return false
		}
	}
	return true
}

func (b *rnnB) convert(v *stablehlo.Value, e stablehlo.ElementType) *stablehlo.Value {
	if v == nil || b.err != nil || v.Type().Elem == e {
		return v
	}
	return b.v(b.blk.Convert(v, e))
}

func (b *rnnB) reshape(v *stablehlo.Value, dims ...int64) *stablehlo.Value {
	if !b.ok(v) {
		return nil
	}
	return b.v(b.blk.Reshape(v, dims...))
}

// dirSlice takes direction d of v [dirs, rest...] as [rest...]; nil stays
// nil.
func (b *rnnB) dirSlice(v *stablehlo.Value, d int64, rest ...int64) *stablehlo.Value {
	if v == nil || b.err != nil {
		return nil
	}
	start, limit, strides := make([]int64, len(rest)+1), make([]int64, len(rest)+1), make([]int64, len(rest)+1)
	start[0], limit[0] = d, d+1
	for i := range strides {
		strides[i] = 1
		if i > 0 {
			limit[i] = rest[i-1]
		}
	}
	return b.reshape(b.v(b.blk.Slice(v, start, limit, strides)), rest...)
}

// slice1 takes [from, to) of a vector.
func (b *rnnB) slice1(v *stablehlo.Value, from, to int64) *stablehlo.Value {
	if !b.ok(v) {
		return nil
	}
	return b.v(b.blk.Slice(v, []int64{from}, []int64{to}, []int64{1}))
}

func (b *rnnB) scalar(e stablehlo.ElementType, x float64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.v(b.blk.ScalarConstant(e, x))
}

func (b *rnnB) full(e stablehlo.ElementType, x float64, dims ...int64) *stablehlo.Value {
	return b.bcast(b.scalar(e, x), nil, dims...)
}

// bcast broadcasts v to dims, its dims becoming bdims (nil: the trailing
// ones).
func (b *rnnB) bcast(v *stablehlo.Value, bdims []int64, dims ...int64) *stablehlo.Value {
	if !b.ok(v) {
		return nil
	}
	if bdims == nil {
		r := v.Type().Rank()
		for i := range r {
			bdims = append(bdims, int64(len(dims)-r+i))
		}
	}
	if v.Type().Equal(stablehlo.TensorOf(v.Type().Elem, dims...)) {
		return v
	}
	return b.v(b.blk.BroadcastInDim(v, dims, bdims))
}

func (b *rnnB) iota(e stablehlo.ElementType, dim int, dims ...int64) *stablehlo.Value {
	if b.err != nil {
		return nil
	}
	return b.v(b.blk.Iota(stablehlo.TensorOf(e, dims...), dim))
}

func (b *rnnB) bin(f func(x, y *stablehlo.Value) (*stablehlo.Value, error), x, y *stablehlo.Value) *stablehlo.Value {
	if !b.ok(x, y) {
		return nil
	}
	return b.v(f(x, y))
}

func (b *rnnB) add(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(b.blk.Add, x, y) }
func (b *rnnB) sub(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(b.blk.Subtract, x, y) }
func (b *rnnB) mul(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(b.blk.Multiply, x, y) }
func (b *rnnB) div(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(b.blk.Divide, x, y) }
func (b *rnnB) min(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(b.blk.Minimum, x, y) }
func (b *rnnB) max(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(b.blk.Maximum, x, y) }

// ieeeDiv divides float32 x by y as IEEE division rounds it: XLA CPU
// compiles a float32 divide as a product with the reciprocal, one rounding
// too many for quantization, whose integers flip on the last bit of a scale
// or quotient; in float64, rounded once to float32, the result is exact.
func (b *rnnB) ieeeDiv(x, y *stablehlo.Value) *stablehlo.Value {
	if !b.ok(x, y) {
		return nil
	}
	e := x.Type().Elem
	return b.convert(b.div(b.convert(x, stablehlo.F64), b.convert(y, stablehlo.F64)), e)
}

// product is x * y; with b.unfused, behind an optimization barrier, so
// that it is rounded on its own before any addition uses it.
func (b *rnnB) product(x, y *stablehlo.Value) *stablehlo.Value {
	m := b.mul(x, y)
	if !b.unfused || !b.ok(m) {
		return m
	}
	kept, err := b.blk.OptimizationBarrier(m)
	if b.v(nil, err); b.err != nil {
		return nil
	}
	return kept[0]
}

func (b *rnnB) neg(x *stablehlo.Value) *stablehlo.Value {
	if !b.ok(x) {
		return nil
	}
	return b.v(b.blk.Negate(x))
}

// round rounds half to even, as ONNX Runtime's quantization does.
func (b *rnnB) round(x *stablehlo.Value) *stablehlo.Value {
	if !b.ok(x) {
		return nil
	}
	return b.v(b.blk.RoundNearestEven(x))
}

func (b *rnnB) cmp(x, y *stablehlo.Value, dir stablehlo.Direction) *stablehlo.Value {
	if !b.ok(x, y) {
		return nil
	}
	return b.v(b.blk.Compare(x, y, dir, stablehlo.CompareDefault))
}

func (b *rnnB) sel(pred, x, y *stablehlo.Value) *stablehlo.Value {
	if !b.ok(pred, x, y) {
		return nil
	}
	return b.v(b.blk.Select(pred, x, y))
}

// clamp bounds x to [lo, hi].
func (b *rnnB) clamp(x *stablehlo.Value, lo, hi float64) *stablehlo.Value {
	if !b.ok(x) {
		return nil
	}
	return b.v(b.blk.Clamp(b.scalar(x.Type().Elem, lo), x, b.scalar(x.Type().Elem, hi)))
}

// dot is x [m, k] @ y^T for y [n, k].
func (b *rnnB) dot(x, y *stablehlo.Value) *stablehlo.Value {
	if !b.ok(x, y) {
		return nil
	}
	return b.v(b.blk.DotGeneral(x, y, stablehlo.DotDims{LhsContract: []int64{1}, RhsContract: []int64{1}}, stablehlo.PrecisionNone, stablehlo.Invalid))
}

// reduce reduces x over dims with kind "min" or "max", starting from 0:
// the range of a quantized operand includes 0, and sequence lengths are
// not negative.
func (b *rnnB) reduce(x *stablehlo.Value, kind string, dims []int64) *stablehlo.Value {
	if !b.ok(x) {
		return nil
	}
	e := x.Type().Elem
	body := b.blk.Region(stablehlo.TensorOf(e), stablehlo.TensorOf(e))
	f := body.Maximum
	if kind == "min" {
		f = body.Minimum
	}
	m, err := f(body.Arg(0), body.Arg(1))
	if err == nil {
		err = body.Return(m)
	}
	start := b.scalar(e, 0)
	if b.v(nil, err); !b.ok(start) {
		return nil
	}
	res, err := b.blk.Reduce([]*stablehlo.Value{x}, []*stablehlo.Value{start}, dims, body)
	if b.v(nil, err); b.err != nil {
		return nil
	}
	return res[0]
}

// shiftedWeights returns int32 w [n, k] minus its zero point z (a scalar
// or one per row).
func (b *rnnB) shiftedWeights(w, z *stablehlo.Value) *stablehlo.Value {
	if !b.ok(w, z) {
		return nil
	}
	dims := w.Type().Dims
	zi := b.convert(z, stablehlo.I32)
	if zi.Type().Rank() == 0 {
		zi = b.bcast(zi, nil, dims...)
	} else {
		zi = b.bcast(zi, []int64{0}, dims...)
	}
	return b.sub(b.convert(w, stablehlo.I32), zi)
}

// while runs body while the step (the first value, an i32 scalar) is below
// steps; body gets the values and returns the next carried ones (a prefix
// of the values: the rest pass through unchanged).
func (b *rnnB) while(vals []*stablehlo.Value, steps int64, body func(*rnnB, []*stablehlo.Value) []*stablehlo.Value) []*stablehlo.Value {
	if !b.ok(vals...) {
		return nil
	}
	types := make([]stablehlo.Type, len(vals))
	for i, v := range vals {
		types[i] = v.Type()
	}
	cond := &rnnB{blk: b.blk.Region(types...), unfused: b.unfused}
	more := cond.cmp(cond.blk.Arg(0), cond.scalar(stablehlo.I32, float64(steps)), stablehlo.LT)
	if cond.ok(more) {
		cond.v(nil, cond.blk.Return(more))
	}
	bb := &rnnB{blk: b.blk.Region(types...), unfused: b.unfused}
	args := bb.blk.Args()
	next := body(bb, args)
	if bb.ok(next...) {
		bb.v(nil, bb.blk.Return(append(next, args[len(next):]...)...))
	}
	for _, e := range []error{cond.err, bb.err} {
		if e != nil {
			b.err = fmt.Errorf("lower: xserve.rnn loop: %w", e)
			return nil
		}
	}
	res, err := b.blk.While(vals, cond.blk, bb.blk)
	if b.v(nil, err); b.err != nil {
		return nil
	}
	return res
}

// The rational approximations of ONNX Runtime's CPU logistic and tanh
// (MLAS, Eigen's coefficients): numerator coefficients of x² from the
// highest power, then the denominator's; the input clamped to ±bound.
var (
	mlasLogisticP     = []float32{4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05, 8.51377133304701e-03, 2.48287947061529e-01}
	mlasLogisticQ     = []float32{6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06, 1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01}
	mlasTanhP         = []float32{-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03}
	mlasTanhQ         = []float32{1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03}
	mlasLogisticBound = 18.0
	mlasTanhBound     = 9.0
)

// mlasLogistic is ONNX Runtime's logistic on x86-64: p(x)/q(x) + 0.5
// clamped to [0, 1], each polynomial step a fused multiply-add.
func (b *rnnB) mlasLogistic(x *stablehlo.Value) (*stablehlo.Value, error) {
	r := b.mlasRational(x, mlasLogisticBound, mlasLogisticP, mlasLogisticQ)
	if !b.ok(r) {
		return nil, b.err
	}
	return b.clamp(b.add(r, b.full(r.Type().Elem, 0.5, r.Type().Dims...)), 0, 1), b.err
}

// mlasTanh is ONNX Runtime's tanh on x86-64: p(x)/q(x).
func (b *rnnB) mlasTanh(x *stablehlo.Value) (*stablehlo.Value, error) {
	r := b.mlasRational(x, mlasTanhBound, mlasTanhP, mlasTanhQ)
	return r, b.err
}

// mlasRational evaluates x·P(x²)/Q(x²) on x clamped to ±bound in float32,
// the Horner steps as fused multiply-adds (a product exact in float64, one
// rounding of the sum), as ONNX Runtime's FMA3 kernels compute them.
func (b *rnnB) mlasRational(x *stablehlo.Value, bound float64, p, q []float32) *stablehlo.Value {
	if !b.ok(x) {
		return nil
	}
	dims := x.Type().Dims
	v := b.clamp(x, -bound, bound)
	v2 := b.mul(v, v)
	c := func(k float32) *stablehlo.Value { return b.full(stablehlo.F64, float64(k), dims...) }
	fma := func(a, m *stablehlo.Value, k float32) *stablehlo.Value {
		return b.convert(b.add(b.mul(b.convert(a, stablehlo.F64), b.convert(m, stablehlo.F64)), c(k)), stablehlo.F32)
	}
	horner := func(coef []float32) *stablehlo.Value {
		acc := fma(v2, b.convert(c(coef[0]), stablehlo.F32), coef[1])
		for _, k := range coef[2:] {
			acc = fma(acc, v2, k)
		}
		return acc
	}
	return b.div(b.mul(horner(p), v), horner(q))
}
