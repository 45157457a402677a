package lower_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// rnnRef is ONNX's RNN/GRU/LSTM (default activations) in plain float64:
// x [seq][batch][input], w [dirs][gates*hid][input], r [dirs][gates*hid][hid],
// bias [dirs][2*gates*hid], h0/c0 [dirs][batch][hid], p [dirs][3*hid].
// It returns y [seq, dirs, batch, hid], y_h and y_c [dirs, batch, hid],
// flattened.
func rnnRef(mode string, lbr bool, clip float64, seq, batch, in, hid, dirs int, x, w, r, bias, h0, c0, p []float64) (y, yh, yc []float64) {
	gates := map[string]int{"rnn": 1, "gru": 3, "lstm": 4}[mode]
	gh := gates * hid
	cl := func(v float64) float64 { // clip applies to the gates' activation inputs
		if clip > 0 {
			return math.Max(-clip, math.Min(clip, v))
		}
		return v
	}
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-cl(v))) }
	tanh := func(v float64) float64 { return math.Tanh(cl(v)) }
	y = make([]float64, seq*dirs*batch*hid)
	yh, yc = make([]float64, dirs*batch*hid), make([]float64, dirs*batch*hid)
	for d := 0; d < dirs; d++ {
		for bt := 0; bt < batch; bt++ {
			h, c := make([]float64, hid), make([]float64, hid)
			for k := 0; k < hid; k++ {
				h[k], c[k] = h0[(d*batch+bt)*hid+k], c0[(d*batch+bt)*hid+k]
			}
			for step := 0; step < seq; step++ {
				t := step
				if d == 1 {
					t = seq - 1 - step
				}
				// xg[g] = x_t W_g + Wb_g, hg[g] = h R_g + Rb_g for every gate row g.
				xg, hg := make([]float64, gh), make([]float64, gh)
				for g := 0; g < gh; g++ {
					xg[g], hg[g] = bias[d*2*gh+g], bias[d*2*gh+gh+g]
					for i := 0; i < in; i++ {
						xg[g] += x[(t*batch+bt)*in+i] * w[(d*gh+g)*in+i]
					}
					for i := 0; i < hid; i++ {
						hg[g] += h[i] * r[(d*gh+g)*hid+i]
					}
				}
				nh := make([]float64, hid)
				for k := 0; k < hid; k++ {
					switch mode {
					case "rnn":
						nh[k] = tanh(xg[k] + hg[k])
					case "gru":
						z := sig(xg[k] + hg[k])
						rr := sig(xg[hid+k] + hg[hid+k])
						var hh float64
						if lbr {
							hh = tanh(xg[2*hid+k] + rr*hg[2*hid+k])
						} else {
							s := bias[d*2*gh+gh+2*hid+k]
							for i := 0; i < hid; i++ {
								ri := sig(xg[hid+i] + hg[hid+i])
								s += ri * h[i] * r[(d*gh+2*hid+k)*hid+i]
							}
							hh = tanh(xg[2*hid+k] + s)
						}
						nh[k] = (1-z)*hh + z*h[k]
					case "lstm":
						pi, po, pf := p[d*3*hid+k], p[d*3*hid+hid+k], p[d*3*hid+2*hid+k]
						i := sig(xg[k] + hg[k] + pi*c[k])
						f := sig(xg[2*hid+k] + hg[2*hid+k] + pf*c[k])
						cc := tanh(xg[3*hid+k] + hg[3*hid+k])
						c[k] = f*c[k] + i*cc
						o := sig(xg[hid+k] + hg[hid+k] + po*c[k])
						nh[k] = o * math.Tanh(c[k])
					}
				}
				h = nh
				for k := 0; k < hid; k++ {
					y[((t*dirs+d)*batch+bt)*hid+k] = h[k]
				}
			}
			for k := 0; k < hid; k++ {
				yh[(d*batch+bt)*hid+k] = h[k]
				if mode == "lstm" {
					yc[(d*batch+bt)*hid+k] = c[k]
				}
			}
		}
	}
	return y, yh, yc
}

func TestRNNExecute(t *testing.T) {
	client := nnOpenPlugin(t)
	const seq, batch, in, hid = 4, 2, 3, 5
	f32 := tensor.Float32
	for _, c := range []struct {
		mode, dir string
		lbr       bool
		clip      float64
	}{
		{"rnn", "forward", false, 0}, {"rnn", "bidirectional", false, 0},
		{"gru", "forward", false, 0}, {"gru", "reverse", true, 0}, {"gru", "bidirectional", false, 0.5},
		{"lstm", "forward", false, 0}, {"lstm", "bidirectional", false, 0}, {"lstm", "reverse", false, 0.3},
	} {
		t.Run(fmt.Sprintf("%s %s lbr=%v clip=%v", c.mode, c.dir, c.lbr, c.clip), func(t *testing.T) {
			gates := map[string]int64{"rnn": 1, "gru": 3, "lstm": 4}[c.mode]
			dirs := int64(1)
			if c.dir == "bidirectional" {
				dirs = 2
			}
			gh := gates * hid
			dims := [][]int64{{seq, batch, in}, {dirs, gh, in}, {dirs, gh, hid}, {dirs, 2 * gh}, {dirs, batch, hid}, {dirs, batch, hid}, {dirs, 3 * hid}}
			vals := make([][]float64, len(dims))
			g := fxgraph.New()
			args := make([]any, len(dims))
			var ins []*tensor.Tensor
			for i, d := range dims {
				vals[i] = nnRand(int64(60+i), tensor.NumElements(d))
				if c.mode != "lstm" && i >= 5 {
					vals[i] = make([]float64, tensor.NumElements(d)) // no c0 / peepholes
					continue
				}
				args[i] = g.AddPlaceholder(fmt.Sprintf("in%d", i), fxgraph.Static(f32, d...))
				ins = append(ins, nnTensor(f32, d, vals[i]))
			}
			n := g.AddCall(fxgraph.XserveRNN, args, map[string]any{"mode": c.mode, "hidden_size": int64(hid), "direction": c.dir, "linear_before_reset": c.lbr, "clip": c.clip})
			var outs []*fxgraph.Node
			for i := range 3 {
				outs = append(outs, g.AddCall(fxgraph.GetItem, []any{n, int64(i)}, nil))
			}
			g.SetOutput(outs...)
			prog, err := lower.New(lower.Options{}).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, ins)
			if err != nil {
				t.Fatal(err)
			}
			y, yh, yc := rnnRefDir(c.mode, c.dir, c.lbr, c.clip, seq, batch, in, hid, int(dirs), vals)
			for i, want := range [][]float64{y, yh, yc} {
				for j, w := range want {
					if g := got[i].Float64At(int64(j)); math.Abs(g-w) > 1e-5 {
						t.Fatalf("output %d element %d = %v, want %v", i, j, g, w)
					}
				}
			}
		})
	}
}

// rnnRefDir runs rnnRef; for direction "reverse" it runs the single
// direction backwards (rnnRef runs direction 1 backwards).
func rnnRefDir(mode, dir string, lbr bool, clip float64, seq, batch, in, hid, dirs int, v [][]float64) (y, yh, yc []float64) {
	if dir != "reverse" {
		return rnnRef(mode, lbr, clip, seq, batch, in, hid, dirs, v[0], v[1], v[2], v[3], v[4], v[5], v[6])
	}
	// As direction 1 of a two-direction RNN whose direction 0 is a copy.
	twice := func(s []float64) []float64 { return append(append([]float64{}, s...), s...) }
	y2, yh2, yc2 := rnnRef(mode, lbr, clip, seq, batch, in, hid, 2, v[0], twice(v[1]), twice(v[2]), twice(v[3]), twice(v[4]), twice(v[5]), twice(v[6]))
	for t := 0; t < seq; t++ {
		y = append(y, y2[(t*2+1)*batch*hid:(t*2+2)*batch*hid]...)
	}
	return y, yh2[batch*hid:], yc2[batch*hid:]
}

// mlasFixture reads testdata/mlas_activations.bin: n inputs, then ONNX
// Runtime's logistic and tanh of each.
func mlasFixture(t *testing.T) (vals []float32, n int) {
	t.Helper()
	raw, err := os.ReadFile("testdata/mlas_activations.bin")
	if err != nil {
		t.Fatal(err)
	}
	n = len(raw) / 12
	vals = make([]float32, 3*n)
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return vals, n
}

// TestMLASActivations checks the logistic and tanh the quantized recurrent
// rule uses against ONNX Runtime's own (its MLAS kernels, which its LSTM
// calls), bit for bit, on 4096 inputs over [-24, 24]
// (testdata/gen_mlas_activations.py): the next step's dynamic quantization
// turns a last-bit difference into a different integer.
func TestMLASActivations(t *testing.T) {
	vals, n := mlasFixture(t)
	m := stablehlo.NewModule("mlas")
	f, err := m.Func("main", stablehlo.Param{Type: stablehlo.TensorOf(stablehlo.F32, int64(n))})
	if err != nil {
		t.Fatal(err)
	}
	s, th, err := lower.MLASActivations(f.Body(), f.Param(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Return(s, th); err != nil {
		t.Fatal(err)
	}
	text, err := m.Text()
	if err != nil {
		t.Fatal(err)
	}
	c := openPlugin(t)
	ctx := context.Background()
	exe, err := c.Compile(ctx, text, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	in, err := c.Upload(ctx, tensor.FromFloat32s(vals[:n]))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outs, err := exe.Run(ctx, []*pjrt.Buffer{in})
	if err != nil {
		t.Fatal(err)
	}
	for k, name := range []string{"logistic", "tanh"} {
		want := vals[(k+1)*n : (k+2)*n]
		bad := 0
		for i := range n {
			if got := float32(outs[k].Float64At(int64(i))); got != want[i] {
				if bad++; bad <= 5 {
					t.Errorf("%s(%g) = %g, ONNX Runtime %g", name, vals[i], got, want[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d differ", name, bad, n)
		}
	}
}

// TestORTTanhRun lowers xserve.ort_tanh (ONNX's Tanh) for the CPU platform
// and runs it on the ONNX Runtime tanh outputs of TestMLASActivations'
// fixture: bit for bit, including the ±1.0000002 ONNX Runtime reaches
// near ±8.3 to ±9, which a following dynamic quantization reads as its
// range.
func TestORTTanhRun(t *testing.T) {
	vals, n := mlasFixture(t)
	g := fxgraph.New()
	x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, int64(n)))
	g.SetOutput(g.AddCall(fxgraph.XserveORTTanh, []any{x}, nil))
	prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run, err := compileForTest(ctx, openPlugin(t), prog)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := run(ctx, tensor.FromFloat32s(vals[:n]))
	if err != nil {
		t.Fatal(err)
	}
	want, bad, over := vals[2*n:], 0, 0
	for i := range n {
		got := float32(outs[0].Float64At(int64(i)))
		if got != want[i] && bad < 5 {
			t.Errorf("ort_tanh(%g) = %g, ONNX Runtime %g", vals[i], got, want[i])
		}
		if got != want[i] {
			bad++
		}
		if got > 1 {
			over++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d differ", bad, n)
	}
	if over == 0 {
		t.Errorf("no output above 1, where ONNX Runtime's tanh reaches 1.0000002")
	}
}
