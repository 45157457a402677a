package lower

import (
	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/internal/hlo"
	"github.com/xserve/xserve/lower/stablehlo"
)

// registerRNN registers the rule of "xserve.rnn" (ONNX RNN, GRU and LSTM).
func registerRNN(r *Registry) {
	r.Register(fxgraph.XserveRNN, rnnRule)
}

// rnnRule lowers "xserve.rnn" (see fxgraph.RNNArgs) by unrolling it over the
// sequence, whose length is static in every shape bucket: per direction, one
// dot of the whole input with W, then per step one dot of the hidden state
// with R and the gate arithmetic of ONNX's RNN (tanh), GRU (gates z, r, h)
// or LSTM (gates i, o, f, c, with peepholes).
func rnnRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	a, err := fxgraph.RNN(n)
	if err != nil {
		return nil, err
	}
	dt, _ := Out(n, 0)
	_, xd, err := InMeta(n, 0)
	if err != nil {
		return nil, err
	}
	seq, batch, input := xd[0], xd[1], xd[2]
	hid, gates, dirs := a.Hidden, a.Gates(), a.Dirs()
	gh := gates * hid
	cdt := ctx.ComputeDType(dt)
	b := &nnB{ctx: ctx}
	x := b.convert(in[0], cdt)
	// dirSlice takes direction d of v [dirs, rest...] as [rest...].
	dirSlice := func(v *stablehlo.Value, d int64, rest ...int64) *stablehlo.Value {
		if v == nil {
			return nil
		}
		starts, limits := make([]int, len(rest)+1), make([]int, len(rest)+1)
		starts[0], limits[0] = int(d), int(d)+1
		for i, r := range rest {
			limits[i+1] = int(r)
		}
		return b.reshape(b.slice(b.convert(v, cdt), starts, limits, nil), rest)
	}
	// cols takes columns [from, to) of v [rows, cols].
	cols := func(v *stablehlo.Value, rows, from, to int64) *stablehlo.Value {
		return b.slice(v, []int{0, int(from)}, []int{int(rows), int(to)}, nil)
	}
	gate := func(v *stablehlo.Value, k int64) *stablehlo.Value { return cols(v, batch, k*hid, (k+1)*hid) }
	act := func(op func(*stablehlo.Value) (*stablehlo.Value, error), v *stablehlo.Value) *stablehlo.Value {
		if a.Clip > 0 && b.err == nil {
			v = b.set(hlo.Clamp(b.scalar(v, -a.Clip), v, b.scalar(v, a.Clip)))
		}
		return b.un(op, v)
	}
	add := func(vs ...*stablehlo.Value) *stablehlo.Value {
		var s *stablehlo.Value
		for _, v := range vs {
			switch {
			case v == nil:
			case s == nil:
				s = v
			default:
				s = b.bin(hlo.Add, s, v)
			}
		}
		return s
	}
	mul := func(x, y *stablehlo.Value) *stablehlo.Value { return b.bin(hlo.Multiply, x, y) }
	rowVec := func(v *stablehlo.Value) *stablehlo.Value { // [k] -> [batch, k]
		if v == nil {
			return nil
		}
		return b.bcastIn(v, []int64{batch, int64(hlo.ShapeOf(v).Dimensions[0])}, []int{1})
	}

	var ys, hs, cs []*stablehlo.Value
	for d := range dirs {
		w, r := dirSlice(in[1], d, gh, input), dirSlice(in[2], d, gh, hid)
		var wb, rb *stablehlo.Value
		if bias := dirSlice(in[3], d, 2*gh); bias != nil {
			wb = b.slice(bias, []int{0}, []int{int(gh)}, nil)
			rb = b.slice(bias, []int{int(gh)}, []int{int(2 * gh)}, nil)
		}
		h := dirSlice(in[4], d, batch, hid)
		if h == nil {
			h = b.full(x, 0, []int64{batch, hid})
		}
		c := dirSlice(in[5], d, batch, hid)
		if c == nil {
			c = b.full(x, 0, []int64{batch, hid})
		}
		var pi, po, pf *stablehlo.Value
		if p := dirSlice(in[6], d, 3*hid); p != nil {
			pi, po, pf = rowVec(b.slice(p, []int{0}, []int{int(hid)}, nil)), rowVec(b.slice(p, []int{int(hid)}, []int{int(2 * hid)}, nil)), rowVec(b.slice(p, []int{int(2 * hid)}, []int{int(3 * hid)}, nil))
		}
		// x @ w^T (+ wb) for every step at once: [seq, batch, gh].
		xw := b.dot(x, []int{2}, nil, w, []int{1}, nil)
		if wb != nil {
			xw = add(xw, b.bcastIn(wb, []int64{seq, batch, gh}, []int{2}))
		}
		var rh *stablehlo.Value // GRU's R rows of gate h, for linear_before_reset=0
		if a.Mode == "gru" && !a.LinearBeforeReset {
			rh = b.slice(r, []int{int(2 * hid), 0}, []int{int(3 * hid), int(hid)}, nil)
		}
		reverse := a.Direction == "reverse" || d == 1
		steps := make([]*stablehlo.Value, seq)
		for step := range seq {
			t := step
			if reverse {
				t = seq - 1 - step
			}
			xt := b.reshape(b.slice(xw, []int{int(t), 0, 0}, []int{int(t) + 1, int(batch), int(gh)}, nil), []int64{batch, gh})
			hr := add(b.dot(h, []int{1}, nil, r, []int{1}, nil), rowVec(rb))
			switch a.Mode {
			case "rnn":
				h = act(hlo.Tanh, add(xt, hr))
			case "gru":
				z := act(hlo.Logistic, add(gate(xt, 0), gate(hr, 0)))
				rr := act(hlo.Logistic, add(gate(xt, 1), gate(hr, 1)))
				var hh *stablehlo.Value
				if a.LinearBeforeReset {
					hh = act(hlo.Tanh, add(gate(xt, 2), mul(rr, gate(hr, 2))))
				} else {
					var rbh *stablehlo.Value
					if rb != nil {
						rbh = rowVec(b.slice(rb, []int{int(2 * hid)}, []int{int(3 * hid)}, nil))
					}
					hh = act(hlo.Tanh, add(gate(xt, 2), b.dot(mul(rr, h), []int{1}, nil, rh, []int{1}, nil), rbh))
				}
				one := b.full(h, 1, []int64{batch, hid})
				h = add(mul(b.bin(hlo.Subtract, one, z), hh), mul(z, h))
			case "lstm":
				var ic, fc *stablehlo.Value
				if pi != nil {
					ic, fc = mul(pi, c), mul(pf, c)
				}
				i := act(hlo.Logistic, add(gate(xt, 0), gate(hr, 0), ic))
				f := act(hlo.Logistic, add(gate(xt, 2), gate(hr, 2), fc))
				cc := act(hlo.Tanh, add(gate(xt, 3), gate(hr, 3)))
				c = add(mul(f, c), mul(i, cc))
				var oc *stablehlo.Value
				if po != nil {
					oc = mul(po, c)
				}
				o := act(hlo.Logistic, add(gate(xt, 1), gate(hr, 1), oc))
				h = mul(o, b.un(hlo.Tanh, c))
			}
			steps[t] = b.reshape(h, []int64{1, 1, batch, hid})
		}
		if b.err != nil {
			return nil, b.err
		}
		y, err := hlo.Concatenate(0, steps...)
		if err != nil {
			return nil, err
		}
		ys = append(ys, y)
		hs = append(hs, b.reshape(h, []int64{1, batch, hid}))
		if a.Mode != "lstm" {
			c = b.full(x, 0, []int64{batch, hid})
		}
		cs = append(cs, b.reshape(c, []int64{1, batch, hid}))
	}
	if b.err != nil {
		return nil, b.err
	}
	cat := func(axis int, vs []*stablehlo.Value) *stablehlo.Value {
		if len(vs) == 1 || b.err != nil {
			return vs[0]
		}
		return b.set(hlo.Concatenate(axis, vs...))
	}
	return b.out(b.convert(cat(1, ys), dt), b.convert(cat(0, hs), dt), b.convert(cat(0, cs), dt))
}
