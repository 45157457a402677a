package lower_test

import (
	"context"
	"math"
	"math/rand"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/harness/conformance"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/lower/cpu"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// nnCall builds a graph of placeholders with the given metas and one call
// of target; with tupleLen > 0 the outputs are its tuple elements.
func nnCall(target *fxgraph.Op, metas []fxgraph.TensorMeta, args func(in []*fxgraph.Node) []any, kwargs map[string]any, tupleLen int) *fxgraph.Graph {
	g := fxgraph.New()
	var in []*fxgraph.Node
	for i, m := range metas {
		in = append(in, g.AddPlaceholder(string(rune('a'+i)), m))
	}
	n := g.AddCall(target, args(in), kwargs)
	if tupleLen == 0 {
		g.SetOutput(n)
		return g
	}
	var outs []*fxgraph.Node
	for i := 0; i < tupleLen; i++ {
		outs = append(outs, g.AddCall(fxgraph.GetItem, []any{n, int64(i)}, nil))
	}
	g.SetOutput(outs...)
	return g
}

func nnL(v ...int64) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

func TestNNStableHLOText(t *testing.T) {
	f32 := tensor.Float32
	cases := []struct {
		name  string
		g     *fxgraph.Graph
		wants []string
	}{
		{"mm", nnCall(fxgraph.AtenMm, []fxgraph.TensorMeta{fxgraph.Static(f32, 2, 3), fxgraph.Static(f32, 3, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1]} }, nil, 0),
			[]string{`"stablehlo.dot_general"(%a, %b)`, "lhs_contracting_dimensions = [1]", "rhs_contracting_dimensions = [0]",
				"precision HIGHEST", "-> tensor<2x4xf32>"}},
		{"conv2d groups", nnCall(fxgraph.AtenConvolution, []fxgraph.TensorMeta{fxgraph.Static(f32, 1, 4, 5, 5), fxgraph.Static(f32, 6, 2, 3, 3)},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(2, 2), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), int64(2)}
			}, nil, 0),
			[]string{`"stablehlo.convolution"(%a, %b)`, "#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>",
				"feature_group_count = 2", "window_strides = array<i64: 2, 2>", "padding = dense<[[1, 1], [1, 1]]> : tensor<2x2xi64>", "-> tensor<1x6x3x3xf32>"}},
		{"conv transposed", nnCall(fxgraph.AtenConvolution, []fxgraph.TensorMeta{fxgraph.Static(f32, 1, 2, 3, 3), fxgraph.Static(f32, 2, 3, 3, 3)},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(2, 2), nnL(1, 1), nnL(1, 1), true, nnL(1, 1), int64(1)}
			}, nil, 0),
			[]string{`"stablehlo.reverse"(%b)`, "dimensions = array<i64: 2, 3>", "lhs_dilation = array<i64: 2, 2>",
				"#stablehlo.conv<[b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1]>", "dense<[[1, 2], [1, 2]]> : tensor<2x2xi64>", "-> tensor<1x3x6x6xf32>"}},
		{"max_pool2d", nnCall(fxgraph.AtenMaxPool2dWithIndices, []fxgraph.TensorMeta{fxgraph.Static(f32, 1, 1, 4, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(2, 2), nnL(2, 2)} }, nil, 2),
			[]string{"stablehlo.reduce_window", "window_dimensions = array<i64: 1, 1, 2, 2>", "window_strides = array<i64: 1, 1, 2, 2>",
				"stablehlo.iota", "-> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)"}},
		{"softmax", nnCall(fxgraph.Aten_Softmax, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float16, 2, 3)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1), false} }, nil, 0),
			[]string{`"stablehlo.convert"(%a) : (tensor<2x3xf16>) -> tensor<2x3xf32>`, "stablehlo.maximum", "stablehlo.exponential",
				"stablehlo.divide", "-> tensor<2x3xf16>"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := lower.New(lower.Options{}, cpu.Platform()).Lower(c.g, nil)
			if err != nil {
				t.Fatal(err)
			}
			text := string(p.Module)
			for _, w := range c.wants {
				if !strings.Contains(text, w) {
					t.Errorf("module lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

// TestMaxPoolUnusedIndices: with no user of the indices, max_pool lowers to
// a single-result reduce_window (XLA cannot drop one result of a variadic
// one, so the indices would be computed on every call).
func TestMaxPoolUnusedIndices(t *testing.T) {
	for _, c := range []struct {
		tuple       int
		wantIndices bool
	}{{1, false}, {2, true}} {
		g := nnCall(fxgraph.AtenMaxPool2dWithIndices, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, 1, 1, 4, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(2, 2), nnL(2, 2)} }, nil, c.tuple)
		p, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		text := string(p.Module)
		variadic := strings.Contains(text, "-> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>)")
		if variadic != c.wantIndices || strings.Contains(text, "stablehlo.iota") != c.wantIndices {
			t.Errorf("%d outputs used: variadic reduce_window %v, want %v:\n%s", c.tuple, variadic, c.wantIndices, text)
		}
	}
}

func nnOpenPlugin(t *testing.T) *pjrt.Client {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: ".."})
	if err != nil {
		t.Fatalf("no PJRT plugin (run make pjrt): %v", err)
	}
	c, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nnRand returns n reproducible values in [-2, 2).
func nnRand(seed int64, n int64) []float64 {
	r := rand.New(rand.NewSource(seed))
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Round((r.Float64()*4-2)*64) / 64 // exact in float16 too
	}
	return out
}

func nnTensor(dt tensor.DType, dims []int64, vals []float64) *tensor.Tensor {
	t := tensor.New(dt, dims...)
	for i, v := range vals {
		t.SetFloat64(int64(i), v)
	}
	return t
}

// nnRefConv2d is a direct float64 convolution of x [N,C,H,W] with w:
// [Cout, C/g, kh, kw], or for a transposed convolution [C, Cout/g, kh, kw]
// scattered into the output.
func nnRefConv2d(x []float64, xd []int64, w []float64, wd []int64, bias []float64, s, p, d, op [2]int64, g int64, transposed bool) ([]float64, []int64) {
	N, C, H, W := xd[0], xd[1], xd[2], xd[3]
	kh, kw := wd[2], wd[3]
	var cout, oh, ow int64
	if transposed {
		cout = wd[1] * g
		oh = (H-1)*s[0] - 2*p[0] + d[0]*(kh-1) + op[0] + 1
		ow = (W-1)*s[1] - 2*p[1] + d[1]*(kw-1) + op[1] + 1
	} else {
		cout = wd[0]
		oh = (H+2*p[0]-d[0]*(kh-1)-1)/s[0] + 1
		ow = (W+2*p[1]-d[1]*(kw-1)-1)/s[1] + 1
	}
	out := make([]float64, N*cout*oh*ow)
	at := func(n, c, h, j int64) int64 { return ((n*cout+c)*oh+h)*ow + j }
	xat := func(n, c, h, j int64) float64 { return x[((n*C+c)*H+h)*W+j] }
	wat := func(a, b, h, j int64) float64 { return w[((a*wd[1]+b)*kh+h)*kw+j] }
	for n := int64(0); n < N; n++ {
		if transposed {
			cing, coutg := C/g, cout/g
			for ic := int64(0); ic < C; ic++ {
				grp := ic / cing
				for ih := int64(0); ih < H; ih++ {
					for iw := int64(0); iw < W; iw++ {
						for oc := int64(0); oc < coutg; oc++ {
							for a := int64(0); a < kh; a++ {
								for b := int64(0); b < kw; b++ {
									h, ww := ih*s[0]-p[0]+a*d[0], iw*s[1]-p[1]+b*d[1]
									if h >= 0 && h < oh && ww >= 0 && ww < ow {
										out[at(n, grp*coutg+oc, h, ww)] += xat(n, ic, ih, iw) * wat(ic, oc, a, b)
									}
								}
							}
						}
					}
				}
			}
		} else {
			cing, coutg := C/g, cout/g
			for oc := int64(0); oc < cout; oc++ {
				grp := oc / coutg
				for h := int64(0); h < oh; h++ {
					for ww := int64(0); ww < ow; ww++ {
						sum := 0.0
						for ic := int64(0); ic < cing; ic++ {
							for a := int64(0); a < kh; a++ {
								for b := int64(0); b < kw; b++ {
									ih, iw := h*s[0]-p[0]+a*d[0], ww*s[1]-p[1]+b*d[1]
									if ih >= 0 && ih < H && iw >= 0 && iw < W {
										sum += xat(n, grp*cing+ic, ih, iw) * wat(oc, ic, a, b)
									}
								}
							}
						}
						out[at(n, oc, h, ww)] = sum
					}
				}
			}
		}
		if bias != nil {
			for oc := int64(0); oc < cout; oc++ {
				for h := int64(0); h < oh; h++ {
					for ww := int64(0); ww < ow; ww++ {
						out[at(n, oc, h, ww)] += bias[oc]
					}
				}
			}
		}
	}
	return out, []int64{N, cout, oh, ow}
}

// nnRefPool2d is PyTorch's max_pool2d (value, plane index) or avg_pool2d.
func nnRefPool2d(x []float64, xd []int64, k, s, p, d [2]int64, ceil, avg, countPad bool, divisor int64) (vals, idx []float64, od []int64) {
	N, C, H, W := xd[0], xd[1], xd[2], xd[3]
	osz := func(in, k, s, p, d int64) int64 {
		span := in + 2*p - d*(k-1) - 1
		o := span/s + 1
		if ceil {
			o = (span+s-1)/s + 1
			if (o-1)*s >= in+p {
				o--
			}
		}
		return o
	}
	oh, ow := osz(H, k[0], s[0], p[0], d[0]), osz(W, k[1], s[1], p[1], d[1])
	for n := int64(0); n < N; n++ {
		for c := int64(0); c < C; c++ {
			plane := x[(n*C+c)*H*W : (n*C+c+1)*H*W]
			for h := int64(0); h < oh; h++ {
				for w := int64(0); w < ow; w++ {
					h0, w0 := h*s[0]-p[0], w*s[1]-p[1]
					if avg {
						h1, w1 := min(h0+k[0], H+p[0]), min(w0+k[1], W+p[1])
						size := (h1 - h0) * (w1 - w0)
						h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, H), min(w1, W)
						sum := 0.0
						for i := h0; i < h1; i++ {
							for j := w0; j < w1; j++ {
								sum += plane[i*W+j]
							}
						}
						if !countPad {
							size = (h1 - h0) * (w1 - w0)
						}
						if divisor != 0 {
							size = divisor
						}
						vals = append(vals, sum/float64(size))
						continue
					}
					h1, w1 := min(h0+(k[0]-1)*d[0]+1, H), min(w0+(k[1]-1)*d[1]+1, W)
					for h0 < 0 {
						h0 += d[0]
					}
					for w0 < 0 {
						w0 += d[1]
					}
					best, bi := math.Inf(-1), h0*W+w0
					for i := h0; i < h1; i += d[0] {
						for j := w0; j < w1; j += d[1] {
							if v := plane[i*W+j]; v > best {
								best, bi = v, i*W+j
							}
						}
					}
					vals = append(vals, best)
					idx = append(idx, float64(bi))
				}
			}
		}
	}
	return vals, idx, []int64{N, C, oh, ow}
}

// nnRefResize1D resizes the last axis of rows of length in to out with
// half_pixel coordinates (edge-clamped): linear or Keys cubic (a=-0.75).
func nnRefResize1D(x []float64, in, out int64, cubic bool) []float64 {
	rows := int64(len(x)) / in
	res := make([]float64, 0, rows*out)
	scale := float64(out) / float64(in)
	clamp := func(i int64) int64 { return min(max(i, 0), in-1) }
	keys := func(d float64) float64 {
		const a = -0.75
		d = math.Abs(d)
		switch {
		case d <= 1:
			return (a+2)*d*d*d - (a+3)*d*d + 1
		case d < 2:
			return a*d*d*d - 5*a*d*d + 8*a*d - 4*a
		}
		return 0
	}
	for r := int64(0); r < rows; r++ {
		row := x[r*in : (r+1)*in]
		for o := int64(0); o < out; o++ {
			xo := (float64(o)+0.5)/scale - 0.5
			if !cubic {
				xc := math.Min(math.Max(xo, 0), float64(in-1))
				x0 := int64(math.Floor(xc))
				t := xc - float64(x0)
				res = append(res, (1-t)*row[x0]+t*row[clamp(x0+1)])
				continue
			}
			f := int64(math.Floor(xo))
			v := 0.0
			for i := f - 1; i <= f+2; i++ {
				v += keys(xo-float64(i)) * row[clamp(i)]
			}
			res = append(res, v)
		}
	}
	return res
}

// nnInput is one input of an execution test: dtype, dims and values.
type nnInput struct {
	dt   tensor.DType
	dims []int64
	vals []float64
}

func TestNNExecute(t *testing.T) {
	client := nnOpenPlugin(t)
	f32, f16 := tensor.Float32, tensor.Float16
	type input = nnInput
	in := func(dt tensor.DType, seed int64, dims ...int64) input {
		return input{dt, dims, nnRand(seed, tensor.NumElements(dims))}
	}
	// Shared inputs and their references.
	x1 := in(f32, 1, 2, 4, 7, 6)
	w1 := in(f32, 2, 6, 2, 3, 2)
	b1 := in(f32, 3, 6)
	conv1, conv1d := nnRefConv2d(x1.vals, x1.dims, w1.vals, w1.dims, b1.vals, [2]int64{2, 1}, [2]int64{1, 0}, [2]int64{1, 2}, [2]int64{}, 2, false)
	xdw, wdw, bdw := in(f32, 51, 2, 3, 7, 6), in(f32, 52, 3, 1, 3, 2), in(f32, 53, 3)
	dw1, dw1d := nnRefConv2d(xdw.vals, xdw.dims, wdw.vals, wdw.dims, bdw.vals, [2]int64{2, 1}, [2]int64{1, 1}, [2]int64{1, 2}, [2]int64{}, 3, false)
	dw2, dw2d := nnRefConv2d(xdw.vals, xdw.dims, wdw.vals, wdw.dims, nil, [2]int64{1, 2}, [2]int64{0, 2}, [2]int64{2, 1}, [2]int64{}, 3, false)
	x2 := in(f32, 4, 1, 4, 3, 4)
	w2 := in(f32, 5, 4, 3, 3, 2)
	conv2, conv2d := nnRefConv2d(x2.vals, x2.dims, w2.vals, w2.dims, nil, [2]int64{3, 2}, [2]int64{1, 1}, [2]int64{1, 2}, [2]int64{1, 1}, 2, true)
	w3 := in(f32, 6, 4, 2, 1, 1)
	conv3, conv3d := nnRefConv2d(x2.vals, x2.dims, w3.vals, w3.dims, nil, [2]int64{2, 2}, [2]int64{1, 0}, [2]int64{1, 1}, [2]int64{0, 1}, 1, true)
	xh := in(f16, 7, 1, 2, 5, 5)
	wh := in(f16, 8, 3, 2, 3, 3)
	convh, convhd := nnRefConv2d(xh.vals, xh.dims, wh.vals, wh.dims, nil, [2]int64{1, 1}, [2]int64{1, 1}, [2]int64{1, 1}, [2]int64{}, 1, false)
	xq, wg := in(f32, 20, 2, 4, 2, 3), in(f32, 15, 5, 4, 3, 3)
	bg := in(f32, 16, 5)
	conv4, conv4d := nnRefConv2d(xq.vals, xq.dims, wg.vals, wg.dims, bg.vals, [2]int64{2, 1}, [2]int64{1, 2}, [2]int64{1, 2}, [2]int64{}, 1, false)
	w1x1 := in(f32, 17, 3, 4, 1, 1)
	conv5, conv5d := nnRefConv2d(x1.vals, x1.dims, w1x1.vals, w1x1.dims, nil, [2]int64{2, 2}, [2]int64{}, [2]int64{1, 1}, [2]int64{}, 1, false)
	xs, ws := in(f32, 18, 1, 4, 2, 2), in(f32, 19, 3, 4, 3, 3)
	conv6, conv6d := nnRefConv2d(xs.vals, xs.dims, ws.vals, ws.dims, nil, [2]int64{1, 1}, [2]int64{1, 1}, [2]int64{1, 1}, [2]int64{}, 1, false)
	xp := in(f32, 9, 2, 2, 9, 11)
	mp, mpIdx, mpd := nnRefPool2d(xp.vals, xp.dims, [2]int64{3, 2}, [2]int64{2, 3}, [2]int64{1, 1}, [2]int64{1, 1}, true, false, false, 0)
	mpd2v, mpd2i, mpd2 := nnRefPool2d(xp.vals, xp.dims, [2]int64{2, 3}, [2]int64{3, 2}, [2]int64{1, 1}, [2]int64{2, 2}, true, false, false, 0)
	ap, _, apd := nnRefPool2d(xp.vals, xp.dims, [2]int64{3, 3}, [2]int64{2, 2}, [2]int64{1, 1}, [2]int64{1, 1}, true, true, false, 0)
	ap2, _, ap2d := nnRefPool2d(xp.vals, xp.dims, [2]int64{3, 2}, [2]int64{2, 2}, [2]int64{1, 1}, [2]int64{1, 1}, true, true, true, 0)
	xr := in(f32, 10, 1, 2, 3, 5)

	cases := []struct {
		name    string
		target  *fxgraph.Op
		inputs  []input
		args    func(in []*fxgraph.Node) []any
		kwargs  map[string]any
		tuple   int
		want    [][]float64
		wantDim [][]int64
		tol     float64
	}{
		{"conv2d groups stride dilation bias", fxgraph.AtenConvolution, []input{x1, w1, b1},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], in[2], nnL(2, 1), nnL(1, 0), nnL(1, 2), false, nnL(0, 0), int64(2)}
			}, nil, 0, [][]float64{conv1}, [][]int64{conv1d}, 1e-5},
		{"conv depthwise stride pad dilation bias", fxgraph.AtenConvolution, []input{xdw, wdw, bdw},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], in[2], nnL(2, 1), nnL(1, 1), nnL(1, 2), false, nnL(0, 0), int64(3)}
			}, nil, 0, [][]float64{dw1}, [][]int64{dw1d}, 1e-5},
		{"conv depthwise dilated", fxgraph.AtenConvolution, []input{xdw, wdw},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(1, 2), nnL(0, 2), nnL(2, 1), false, nnL(0, 0), int64(3)}
			}, nil, 0, [][]float64{dw2}, [][]int64{dw2d}, 1e-5},
		{"conv transposed groups", fxgraph.AtenConvolution, []input{x2, w2},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(3, 2), nnL(1, 1), nnL(1, 2), true, nnL(1, 1), int64(2)}
			}, nil, 0, [][]float64{conv2}, [][]int64{conv2d}, 1e-5},
		{"conv transposed cropping", fxgraph.AtenConvolution, []input{x2, w3},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(2, 2), nnL(1, 0), nnL(1, 1), true, nnL(0, 1), int64(1)}
			}, nil, 0, [][]float64{conv3}, [][]int64{conv3d}, 1e-5},
		{"conv f16", fxgraph.AtenConvolution, []input{xh, wh},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), int64(1)}
			}, nil, 0, [][]float64{convh}, [][]int64{convhd}, 2e-2},
		{"conv2d 3x3 on 2x3, stride pad dilation bias", fxgraph.AtenConvolution, []input{xq, wg, bg},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], in[2], nnL(2, 1), nnL(1, 2), nnL(1, 2), false, nnL(0, 0), int64(1)}
			}, nil, 0, [][]float64{conv4}, [][]int64{conv4d}, 1e-5},
		{"conv2d 1x1 stride 2", fxgraph.AtenConvolution, []input{x1, w1x1},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(2, 2), nnL(0, 0), nnL(1, 1), false, nnL(0, 0), int64(1)}
			}, nil, 0, [][]float64{conv5}, [][]int64{conv5d}, 1e-5},
		{"conv2d 3x3 kernel on a 2x2 input", fxgraph.AtenConvolution, []input{xs, ws},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), int64(1)}
			}, nil, 0, [][]float64{conv6}, [][]int64{conv6d}, 1e-5},
		{"max_pool2d ceil with indices", fxgraph.AtenMaxPool2dWithIndices, []input{xp},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 2), nnL(2, 3), nnL(1, 1), nnL(1, 1), true} },
			nil, 2, [][]float64{mp, mpIdx}, [][]int64{mpd, mpd}, 0},
		{"max_pool2d ceil, indices unused", fxgraph.AtenMaxPool2dWithIndices, []input{xp},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 2), nnL(2, 3), nnL(1, 1), nnL(1, 1), true} },
			nil, 1, [][]float64{mp}, [][]int64{mpd}, 0},
		{"max_pool2d dilated with indices", fxgraph.AtenMaxPool2dWithIndices, []input{xp},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(2, 3), nnL(3, 2), nnL(1, 1), nnL(2, 2), true} },
			nil, 2, [][]float64{mpd2v, mpd2i}, [][]int64{mpd2, mpd2}, 0},
		{"avg_pool2d exclude pad ceil", fxgraph.AtenAvgPool2d, []input{xp},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 3), nnL(2, 2), nnL(1, 1), true, false} },
			nil, 0, [][]float64{ap}, [][]int64{apd}, 1e-6},
		{"avg_pool2d include pad ceil", fxgraph.AtenAvgPool2d, []input{xp},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 2), nnL(2, 2), nnL(1, 1), true, true} },
			nil, 0, [][]float64{ap2}, [][]int64{ap2d}, 1e-6},
		{"matmul broadcast", fxgraph.AtenMatmul, []input{in(f32, 11, 2, 1, 2, 3), in(f32, 12, 3, 3, 2)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1]} }, nil, 0, nil, [][]int64{{2, 3, 2, 2}}, 1e-6},
		{"matmul int64", fxgraph.AtenMatmul, []input{{tensor.Int64, []int64{2, 2}, []float64{1, -2, 3, 4}}, {tensor.Int64, []int64{2, 2}, []float64{5, 6, -7, 8}}},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1]} }, nil, 0,
			[][]float64{{19, -10, -13, 50}}, [][]int64{{2, 2}}, 0},
		{"matmul vector", fxgraph.AtenMatmul, []input{in(f32, 13, 3), in(f32, 14, 2, 3, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1]} }, nil, 0, nil, [][]int64{{2, 4}}, 1e-6},
		{"addmm", fxgraph.AtenAddmm, []input{in(f32, 15, 4), in(f32, 16, 2, 3), in(f32, 17, 3, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], in[2]} }, map[string]any{"beta": 0.5, "alpha": 2.0}, 0, nil, [][]int64{{2, 4}}, 1e-6},
		{"linear", fxgraph.AtenLinear, []input{in(f32, 30, 2, 2, 3), in(f32, 31, 4, 3), in(f32, 32, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], in[2]} }, nil, 0, nil, [][]int64{{2, 2, 4}}, 1e-6},
		{"adaptive avg pool", fxgraph.Aten_AdaptiveAvgPool2d, []input{in(f32, 33, 1, 2, 5, 6)},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 3)} }, nil, 0, nil, [][]int64{{1, 2, 3, 3}}, 1e-6},
		{"layer norm", fxgraph.AtenNativeLayerNorm, []input{in(f32, 18, 2, 3, 4), in(f32, 19, 3, 4), in(f32, 20, 3, 4)},
			func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 4), in[1], in[2], 1e-5} }, nil, 3, nil,
			[][]int64{{2, 3, 4}, {2, 1, 1}, {2, 1, 1}}, 1e-5},
		{"group norm", fxgraph.AtenNativeGroupNorm, []input{in(f32, 21, 2, 4, 3), in(f32, 22, 4), in(f32, 23, 4)},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], in[2], int64(2), int64(4), int64(3), int64(2), 1e-5}
			}, nil, 3, nil, [][]int64{{2, 4, 3}, {2, 2}, {2, 2}}, 1e-5},
		{"batch norm", fxgraph.Aten_NativeBatchNormLegitNoTraining,
			[]input{in(f32, 24, 2, 3, 2), in(f32, 25, 3), in(f32, 26, 3), in(f32, 27, 3), {f32, []int64{3}, []float64{0.5, 1, 2}}},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], in[2], in[3], in[4], 0.1, 1e-3} }, nil, 1, nil,
			[][]int64{{2, 3, 2}}, 1e-5},
		{"log_softmax", fxgraph.Aten_LogSoftmax, []input{in(f32, 28, 2, 5, 3)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(1), false} }, nil, 0, nil, [][]int64{{2, 5, 3}}, 1e-6},
		{"softmax half_to_float", fxgraph.Aten_Softmax, []input{in(f16, 29, 4, 3)},
			func(in []*fxgraph.Node) []any { return []any{in[0], int64(0), true} }, nil, 0, nil, [][]int64{{4, 3}}, 1e-6},
		{"resize linear", fxgraph.XserveResize, []input{xr},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], nnL(1, 2, 3, 9), nil, nil, "linear", "half_pixel"}
			}, nil, 0, [][]float64{nnRefResize1D(xr.vals, 5, 9, false)}, [][]int64{{1, 2, 3, 9}}, 1e-6},
		{"resize cubic", fxgraph.XserveResize, []input{xr},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], nnL(1, 2, 3, 3), nil, nil, "cubic", "half_pixel"}
			}, nil, 0, [][]float64{nnRefResize1D(xr.vals, 5, 3, true)}, [][]int64{{1, 2, 3, 3}}, 1e-6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var metas []fxgraph.TensorMeta
			var ts []*tensor.Tensor
			for _, x := range c.inputs {
				metas = append(metas, fxgraph.Static(x.dt, x.dims...))
				ts = append(ts, nnTensor(x.dt, x.dims, x.vals))
			}
			want := c.want
			if want == nil {
				want = nnRefOther(c.name, c.inputs[0].vals, c.inputs)
			}
			g := nnCall(c.target, metas, c.args, c.kwargs, c.tuple)
			prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := conformance.Execute(context.Background(), client, prog, ts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if tensor.ShapeString(got[i].Shape) != tensor.ShapeString(c.wantDim[i]) {
					t.Fatalf("output %d shape %v, want %v", i, got[i].Shape, c.wantDim[i])
				}
				for j, w := range want[i] {
					if g := got[i].Float64At(int64(j)); math.Abs(g-w) > c.tol*(1+math.Abs(w)) {
						t.Fatalf("output %d element %d = %v, want %v", i, j, g, w)
					}
				}
			}
		})
	}
}

// nnRefOther computes the references of the cases without a precomputed one.
func nnRefOther(name string, x []float64, ins []nnInput) [][]float64 {
	switch name {
	case "matmul broadcast": // [2,1,2,3] @ [3,3,2] -> [2,3,2,2]
		a, b := ins[0].vals, ins[1].vals
		var out []float64
		for i := 0; i < 2; i++ {
			for j := 0; j < 3; j++ {
				for m := 0; m < 2; m++ {
					for n := 0; n < 2; n++ {
						s := 0.0
						for k := 0; k < 3; k++ {
							s += a[(i*2+m)*3+k] * b[(j*3+k)*2+n]
						}
						out = append(out, s)
					}
				}
			}
		}
		return [][]float64{out}
	case "matmul vector": // [3] @ [2,3,4] -> [2,4]
		a, b := ins[0].vals, ins[1].vals
		var out []float64
		for i := 0; i < 2; i++ {
			for n := 0; n < 4; n++ {
				s := 0.0
				for k := 0; k < 3; k++ {
					s += a[k] * b[(i*3+k)*4+n]
				}
				out = append(out, s)
			}
		}
		return [][]float64{out}
	case "addmm": // 0.5*c[4] + 2*(a[2,3] @ b[3,4])
		c, a, b := ins[0].vals, ins[1].vals, ins[2].vals
		var out []float64
		for m := 0; m < 2; m++ {
			for n := 0; n < 4; n++ {
				s := 0.0
				for k := 0; k < 3; k++ {
					s += a[m*3+k] * b[k*4+n]
				}
				out = append(out, 0.5*c[n]+2*s)
			}
		}
		return [][]float64{out}
	case "linear": // [2,2,3] @ [4,3].T + [4]
		wt, b := ins[1].vals, ins[2].vals
		var out []float64
		for r := 0; r < 4; r++ {
			for o := 0; o < 4; o++ {
				s := b[o]
				for k := 0; k < 3; k++ {
					s += x[r*3+k] * wt[o*3+k]
				}
				out = append(out, s)
			}
		}
		return [][]float64{out}
	case "adaptive avg pool": // [1,2,5,6] -> [1,2,3,3], windows [floor(i*in/out), ceil((i+1)*in/out))
		var out []float64
		for c := 0; c < 2; c++ {
			for i := 0; i < 3; i++ {
				h0, h1 := i*5/3, ((i+1)*5+2)/3
				for j := 0; j < 3; j++ {
					w0, w1 := j*6/3, ((j+1)*6+2)/3
					s := 0.0
					for h := h0; h < h1; h++ {
						for w := w0; w < w1; w++ {
							s += x[(c*5+h)*6+w]
						}
					}
					out = append(out, s/float64((h1-h0)*(w1-w0)))
				}
			}
		}
		return [][]float64{out}
	case "layer norm": // [2, 12] normalized rows
		w, b := ins[1].vals, ins[2].vals
		var out, means, rstds []float64
		for r := 0; r < 2; r++ {
			row := x[r*12 : (r+1)*12]
			m, v := nnMeanVar(row)
			rs := 1 / math.Sqrt(v+1e-5)
			for i, e := range row {
				out = append(out, (e-m)*rs*w[i]+b[i])
			}
			means, rstds = append(means, m), append(rstds, rs)
		}
		return [][]float64{out, means, rstds}
	case "group norm": // [2, 4, 3], 2 groups of 2 channels
		w, b := ins[1].vals, ins[2].vals
		var out, means, rstds []float64
		for n := 0; n < 2; n++ {
			for grp := 0; grp < 2; grp++ {
				part := x[n*12+grp*6 : n*12+grp*6+6]
				m, v := nnMeanVar(part)
				rs := 1 / math.Sqrt(v+1e-5)
				for i, e := range part {
					c := grp*2 + i/3
					out = append(out, (e-m)*rs*w[c]+b[c])
				}
				means, rstds = append(means, m), append(rstds, rs)
			}
		}
		return [][]float64{out, means, rstds}
	case "batch norm": // [2, 3, 2]
		w, b, mean, variance := ins[1].vals, ins[2].vals, ins[3].vals, ins[4].vals
		out := make([]float64, len(x))
		for i := range x {
			c := (i / 2) % 3
			out[i] = (x[i]-mean[c])/math.Sqrt(variance[c]+1e-3)*w[c] + b[c]
		}
		return [][]float64{out}
	case "log_softmax": // [2, 5, 3] along dim 1
		out := make([]float64, len(x))
		for n := 0; n < 2; n++ {
			for k := 0; k < 3; k++ {
				s := 0.0
				for c := 0; c < 5; c++ {
					s += math.Exp(x[(n*5+c)*3+k])
				}
				for c := 0; c < 5; c++ {
					out[(n*5+c)*3+k] = x[(n*5+c)*3+k] - math.Log(s)
				}
			}
		}
		return [][]float64{out}
	case "softmax half_to_float": // [4, 3] along dim 0
		out := make([]float64, len(x))
		for k := 0; k < 3; k++ {
			s := 0.0
			for r := 0; r < 4; r++ {
				s += math.Exp(x[r*3+k])
			}
			for r := 0; r < 4; r++ {
				out[r*3+k] = math.Exp(x[r*3+k]) / s
			}
		}
		return [][]float64{out}
	}
	panic("no reference for " + name)
}

func nnMeanVar(v []float64) (mean, variance float64) {
	for _, e := range v {
		mean += e
	}
	mean /= float64(len(v))
	for _, e := range v {
		variance += (e - mean) * (e - mean)
	}
	return mean, variance / float64(len(v))
}

// nnRefGridSample is PyTorch's grid_sampler_2d in float64.
func nnRefGridSample(x []float64, xd []int64, grid []float64, ho, wo int64, mode, pad int, align bool) []float64 {
	N, C, H, W := xd[0], xd[1], xd[2], xd[3]
	unnorm := func(c float64, size int64) float64 {
		if align {
			return (c + 1) / 2 * float64(size-1)
		}
		return ((c+1)*float64(size) - 1) / 2
	}
	clip := func(c float64, size int64) float64 { return math.Min(math.Max(c, 0), float64(size-1)) }
	reflect := func(c, lo2, hi2 float64) float64 {
		if lo2 == hi2 {
			return 0
		}
		lo, span := lo2/2, (hi2-lo2)/2
		c = math.Abs(c - lo)
		extra := math.Mod(c, span)
		if int64(math.Floor(c/span))%2 == 0 {
			return extra + lo
		}
		return span - extra + lo
	}
	padc := func(c float64, size int64) float64 {
		switch pad {
		case 1:
			return clip(c, size)
		case 2:
			if align {
				return clip(reflect(c, 0, 2*float64(size-1)), size)
			}
			return clip(reflect(c, -1, 2*float64(size)-1), size)
		}
		return c
	}
	val := func(n, c int64, ix, iy float64) float64 {
		if ix < 0 || ix > float64(W-1) || iy < 0 || iy > float64(H-1) {
			return 0
		}
		return x[((n*C+c)*H+int64(iy))*W+int64(ix)]
	}
	cubic := func(t float64) [4]float64 {
		const a = -0.75
		c1 := func(v float64) float64 { return ((a+2)*v-(a+3))*v*v + 1 }
		c2 := func(v float64) float64 { return ((a*v-5*a)*v+8*a)*v - 4*a }
		return [4]float64{c2(t + 1), c1(t), c1(1 - t), c2(2 - t)}
	}
	var out []float64
	for n := int64(0); n < N; n++ {
		for c := int64(0); c < C; c++ {
			for i := int64(0); i < ho; i++ {
				for j := int64(0); j < wo; j++ {
					g := grid[((n*ho+i)*wo+j)*2:]
					ix, iy := unnorm(g[0], W), unnorm(g[1], H)
					switch mode {
					case 0:
						ix, iy = padc(ix, W), padc(iy, H)
						x0, y0 := math.Floor(ix), math.Floor(iy)
						v := val(n, c, x0, y0)*(x0+1-ix)*(y0+1-iy) + val(n, c, x0+1, y0)*(ix-x0)*(y0+1-iy) +
							val(n, c, x0, y0+1)*(x0+1-ix)*(iy-y0) + val(n, c, x0+1, y0+1)*(ix-x0)*(iy-y0)
						out = append(out, v)
					case 1:
						ix, iy = padc(ix, W), padc(iy, H)
						out = append(out, val(n, c, math.RoundToEven(ix), math.RoundToEven(iy)))
					case 2:
						x0, y0 := math.Floor(ix), math.Floor(iy)
						wx, wy := cubic(ix-x0), cubic(iy-y0)
						v := 0.0
						for a := 0; a < 4; a++ {
							for bb := 0; bb < 4; bb++ {
								cx, cy := padc(x0+float64(bb-1), W), padc(y0+float64(a-1), H)
								v += wy[a] * wx[bb] * val(n, c, math.Trunc(cx), math.Trunc(cy))
							}
						}
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}

func TestNNGridSampler(t *testing.T) {
	client := nnOpenPlugin(t)
	xd := []int64{2, 3, 4, 5}
	x := nnRand(40, tensor.NumElements(xd))
	grid := nnRand(41, 2*3*4*2)
	for i := range grid {
		grid[i] *= 0.7 // mostly inside [-1, 1], some outside
	}
	for _, c := range []struct {
		mode, pad int
		align     bool
	}{{0, 0, false}, {0, 2, true}, {1, 2, false}, {1, 0, true}, {2, 1, false}, {2, 2, true}, {2, 0, false}} {
		g := nnCall(fxgraph.AtenGridSampler2d, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, xd...), fxgraph.Static(tensor.Float32, 2, 3, 4, 2)},
			func(in []*fxgraph.Node) []any { return []any{in[0], in[1], int64(c.mode), int64(c.pad), c.align} }, nil, 0)
		prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := conformance.Execute(context.Background(), client, prog,
			[]*tensor.Tensor{nnTensor(tensor.Float32, xd, x), nnTensor(tensor.Float32, []int64{2, 3, 4, 2}, grid)})
		if err != nil {
			t.Fatal(err)
		}
		want := nnRefGridSample(x, xd, grid, 3, 4, c.mode, c.pad, c.align)
		if tensor.ShapeString(got[0].Shape) != "[2,3,3,4]" {
			t.Fatalf("%+v: shape %v", c, got[0].Shape)
		}
		for i, w := range want {
			if g := got[0].Float64At(int64(i)); math.Abs(g-w) > 1e-5*(1+math.Abs(w)) {
				t.Fatalf("%+v: element %d = %v, want %v", c, i, g, w)
			}
		}
	}
}

// nnRefRoiAlign is ONNX's reference RoiAlign (average mode) in float64.
func nnRefRoiAlign(x []float64, xd []int64, rois []float64, batch []int64, oh, ow, sr int64, scale float64, halfPixel bool) []float64 {
	C, H, W := xd[1], xd[2], xd[3]
	var out []float64
	for r := range batch {
		off := 0.0
		if halfPixel {
			off = 0.5
		}
		sw, sh := rois[4*r]*scale-off, rois[4*r+1]*scale-off
		ew, eh := rois[4*r+2]*scale-off, rois[4*r+3]*scale-off
		rw, rh := ew-sw, eh-sh
		if !halfPixel {
			rw, rh = math.Max(rw, 1), math.Max(rh, 1)
		}
		bh, bw := rh/float64(oh), rw/float64(ow)
		interp := func(c int64, y, xx float64) float64 {
			if y < -1 || y > float64(H) || xx < -1 || xx > float64(W) {
				return 0
			}
			y, xx = math.Max(y, 0), math.Max(xx, 0)
			yl, xl := int64(y), int64(xx)
			var yh, xh int64
			if yl >= H-1 {
				yl, yh, y = H-1, H-1, float64(H-1)
			} else {
				yh = yl + 1
			}
			if xl >= W-1 {
				xl, xh, xx = W-1, W-1, float64(W-1)
			} else {
				xh = xl + 1
			}
			ly, lx := y-float64(yl), xx-float64(xl)
			at := func(i, j int64) float64 { return x[((batch[r]*C+c)*H+i)*W+j] }
			return (1-ly)*(1-lx)*at(yl, xl) + (1-ly)*lx*at(yl, xh) + ly*(1-lx)*at(yh, xl) + ly*lx*at(yh, xh)
		}
		for c := int64(0); c < C; c++ {
			for ph := int64(0); ph < oh; ph++ {
				for pw := int64(0); pw < ow; pw++ {
					s := 0.0
					for iy := int64(0); iy < sr; iy++ {
						y := sh + float64(ph)*bh + (float64(iy)+0.5)*bh/float64(sr)
						for ix := int64(0); ix < sr; ix++ {
							xx := sw + float64(pw)*bw + (float64(ix)+0.5)*bw/float64(sr)
							s += interp(c, y, xx)
						}
					}
					out = append(out, s/float64(sr*sr))
				}
			}
		}
	}
	return out
}

func TestNNRoiAlign(t *testing.T) {
	client := nnOpenPlugin(t)
	xd := []int64{2, 3, 6, 7}
	x := nnRand(50, tensor.NumElements(xd))
	rois := []float64{0, 0, 4, 3, 1.5, 2.25, 6.5, 5, -2, 4, 1, 9, 3, 1, 3.2, 1.1}
	batch := []int64{1, 0, 1, 0}
	for _, half := range []bool{true, false} {
		g := nnCall(fxgraph.XserveRoIAlign, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, xd...), fxgraph.Static(tensor.Float32, 4, 4), fxgraph.Static(tensor.Int64, 4)},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], in[2], int64(3), int64(2), int64(2), 0.5, half}
			}, nil, 0)
		prog, err := lower.New(lower.Options{}, cpu.Platform()).Lower(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		bt := tensor.FromInt64s(batch)
		got, err := conformance.Execute(context.Background(), client, prog,
			[]*tensor.Tensor{nnTensor(tensor.Float32, xd, x), nnTensor(tensor.Float32, []int64{4, 4}, rois), bt})
		if err != nil {
			t.Fatal(err)
		}
		want := nnRefRoiAlign(x, xd, rois, batch, 3, 2, 2, 0.5, half)
		if tensor.ShapeString(got[0].Shape) != "[4,3,3,2]" {
			t.Fatalf("shape %v", got[0].Shape)
		}
		for i, w := range want {
			if g := got[0].Float64At(int64(i)); math.Abs(g-w) > 1e-5*(1+math.Abs(w)) {
				t.Fatalf("half_pixel %v: element %d = %v, want %v", half, i, g, w)
			}
		}
	}
}

// TestConvWeightsHWIO: on CPU a weight that only feeds convolutions is a
// parameter in [kh, kw, in, out] order (Param.Perm says how it was made) and
// the results still match a direct convolution; a weight with another use,
// or the option off, keeps PyTorch's order.
func TestConvWeightsHWIO(t *testing.T) {
	client := nnOpenPlugin(t)
	f32 := tensor.Float32
	xd, wd := []int64{2, 4, 7, 6}, []int64{6, 2, 3, 2}
	xv, wv, bv := nnRand(41, tensor.NumElements(xd)), nnRand(42, tensor.NumElements(wd)), nnRand(43, 6)
	want, wantDims := nnRefConv2d(xv, xd, wv, wd, bv, [2]int64{2, 1}, [2]int64{1, 0}, [2]int64{1, 2}, [2]int64{}, 2, false)
	build := func(alsoAdded bool) *fxgraph.Graph {
		g := fxgraph.New()
		x := g.AddPlaceholder("x", fxgraph.Static(f32, xd...))
		w := g.AddConstant("w", nnTensor(f32, wd, wv))
		b := g.AddConstant("b", nnTensor(f32, []int64{6}, bv))
		conv := g.AddCall(fxgraph.AtenConvolution, []any{x, w, b, nnL(2, 1), nnL(1, 0), nnL(1, 2), false, nnL(0, 0), int64(2)}, nil)
		if !alsoAdded {
			g.SetOutput(conv)
			return g
		}
		y := g.AddPlaceholder("y", fxgraph.Static(f32, wd...))
		g.SetOutput(conv, g.AddCall(fxgraph.AtenAddTensor, []any{w, y}, nil))
		return g
	}
	off := false
	for _, c := range []struct {
		name      string
		opts      lower.Options
		alsoAdded bool
		wantShape []int64
		wantPerm  []int
	}{
		{"cpu", lower.Options{}, false, []int64{3, 2, 2, 6}, []int{2, 3, 1, 0}},
		{"option off", lower.Options{ConvWeightsHWIO: &off}, false, wd, nil},
		{"weight used elsewhere", lower.Options{}, true, wd, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := build(c.alsoAdded)
			prog, err := lower.New(c.opts, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			ws := prog.Weights()
			if len(ws) == 1 && ws[0].Value != g.Attrs[ws[0].Name] {
				t.Errorf("the weight's Value is not the graph's tensor: every bucket would hold its own copy")
			}
			if len(ws) != 1 || !slices.Equal(ws[0].Shape, c.wantShape) || !slices.Equal(ws[0].Perm, c.wantPerm) || !slices.Equal(ws[0].HostValue().Shape, c.wantShape) {
				t.Fatalf("weights %+v, want one of shape %v with perm %v", ws, c.wantShape, c.wantPerm)
			}
			yv := nnRand(44, tensor.NumElements(wd))
			ins := []*tensor.Tensor{nnTensor(f32, xd, xv)}
			if c.alsoAdded {
				ins = append(ins, nnTensor(f32, wd, yv))
			}
			got, err := conformance.Execute(context.Background(), client, prog, ins)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[0].Shape, wantDims) {
				t.Fatalf("shape %v, want %v", got[0].Shape, wantDims)
			}
			for j, w := range want {
				if g := got[0].Float64At(int64(j)); math.Abs(g-w) > 1e-5*(1+math.Abs(w)) {
					t.Fatalf("element %d = %v, want %v", j, g, w)
				}
			}
			if c.alsoAdded {
				for j, w := range wv {
					if g := got[1].Float64At(int64(j)); math.Abs(g-(w+yv[j])) > 1e-6 {
						t.Fatalf("w+y element %d = %v, want %v", j, g, w+yv[j])
					}
				}
			}
		})
	}
}

// TestDepthwiseMulAdd: on CPU a depthwise convolution lowers to slices,
// multiplies and adds (no grouped stablehlo.convolution); with the option
// off, or when the groups do not make it depthwise, it stays a convolution.
// TestNNExecute checks the results of the CPU form against a direct
// convolution.
func TestDepthwiseMulAdd(t *testing.T) {
	off := false
	for _, c := range []struct {
		name     string
		opts     lower.Options
		wd       []int64
		groups   int64
		wantConv bool
	}{
		{"cpu", lower.Options{}, []int64{4, 1, 3, 3}, 4, false},
		{"option off", lower.Options{DepthwiseMulAdd: &off}, []int64{4, 1, 3, 3}, 4, true},
		{"depth multiplier 2", lower.Options{}, []int64{8, 1, 3, 3}, 4, true},
		{"two channels per group", lower.Options{}, []int64{4, 2, 3, 3}, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := nnCall(fxgraph.AtenConvolution, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, 1, 4, 6, 6), fxgraph.Static(tensor.Float32, c.wd...)},
				func(in []*fxgraph.Node) []any {
					return []any{in[0], in[1], nil, nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), c.groups}
				}, nil, 0)
			p, err := lower.New(c.opts, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(p.Module), "stablehlo.convolution"); got != c.wantConv {
				t.Errorf("convolution in the module: %v, want %v:\n%s", got, c.wantConv, p.Module)
			}
		})
	}
}

// TestConvAsDot: on CPU a convolution with one group whose kernel has more
// taps than its input has positions lowers to slices, a concatenation and
// one dot_general (no stablehlo.convolution); other convolutions, with the
// option off, with groups, or when the patch matrix would be too large, it
// stays a convolution. TestNNExecute checks the results.
func TestConvAsDot(t *testing.T) {
	off := false
	for _, c := range []struct {
		name     string
		opts     lower.Options
		xd, wd   []int64
		groups   int64
		wantConv bool
	}{
		{"cpu, 3x3 on 2x2", lower.Options{}, []int64{1, 4, 2, 2}, []int64{8, 4, 3, 3}, 1, false},
		{"3x3 on 1x8", lower.Options{}, []int64{2, 4, 1, 8}, []int64{8, 4, 3, 3}, 1, false},
		{"3x3 on 3x3: XLA's own", lower.Options{}, []int64{1, 4, 3, 3}, []int64{8, 4, 3, 3}, 1, true},
		{"1x1: XLA's own", lower.Options{}, []int64{2, 4, 6, 6}, []int64{8, 4, 1, 1}, 1, true},
		{"option off", lower.Options{ConvAsDot: &off}, []int64{1, 4, 2, 2}, []int64{8, 4, 3, 3}, 1, true},
		{"not on cuda", lower.Options{Platform: "cuda"}, []int64{1, 4, 2, 2}, []int64{8, 4, 3, 3}, 1, true},
		{"groups", lower.Options{}, []int64{1, 4, 2, 2}, []int64{8, 2, 3, 3}, 2, true},
		{"patches too large", lower.Options{}, []int64{1 << 17, 64, 2, 2}, []int64{64, 64, 3, 3}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := nnCall(fxgraph.AtenConvolution, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, c.xd...), fxgraph.Static(tensor.Float32, c.wd...)},
				func(in []*fxgraph.Node) []any {
					return []any{in[0], in[1], nil, nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), c.groups}
				}, nil, 0)
			p, err := lower.New(c.opts, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			module := string(p.Module)
			if got := strings.Contains(module, "stablehlo.convolution"); got != c.wantConv {
				t.Errorf("convolution in the module: %v, want %v", got, c.wantConv)
			}
			if got := strings.Contains(module, "stablehlo.dot_general"); got == c.wantConv {
				t.Errorf("dot_general in the module: %v, want %v", got, !c.wantConv)
			}
		})
	}
}

// TestKernelSite: each kernel call carries a "site" attribute that is the
// same for the same call lowered again and differs when an attribute does
// (cpukernels/common.h, "Call sites").
func TestKernelSite(t *testing.T) {
	site := regexp.MustCompile(`site = (-?[0-9]+) : i64`)
	lowerConv := func(stride int64) string {
		t.Helper()
		g := nnCall(fxgraph.AtenConvolution, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, 1, 4, 8, 8), fxgraph.Static(tensor.Float32, 8, 4, 3, 3)},
			func(in []*fxgraph.Node) []any {
				return []any{in[0], in[1], nil, []int64{stride, stride}, []int64{1, 1}, []int64{1, 1}, false, []int64{0, 0}, int64(1)}
			}, nil, 0)
		p, err := lower.New(lower.Options{Kernels: []string{cpu.ConvKernel}}, cpu.Platform()).Lower(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := site.FindAllStringSubmatch(string(p.Module), -1)
		if len(m) != 1 || m[0][1] == "0" {
			t.Fatalf("want one nonzero site attribute, got %q in:\n%s", m, p.Module)
		}
		return m[0][1]
	}
	if a, b := lowerConv(1), lowerConv(1); a != b {
		t.Errorf("the same convolution lowered twice: sites %s and %s", a, b)
	}
	if a, b := lowerConv(1), lowerConv(2); a == b {
		t.Errorf("strides 1 and 2: the same site %s", a)
	}
}

// TestConvKernelLowering: with cpu.ConvKernel among Options.Kernels, a
// float32 (or half, computed in float32) convolution that is not
// transposed and has 1 to 3 spatial dims lowers to that custom call, with
// channels-last operand and result layouts and the HWIO weight layout; the
// others, and every convolution without the kernel, stay XLA's.
// TestConvKernelMatchesORT (importer/onnx) checks the results.
func TestConvKernelLowering(t *testing.T) {
	k := []string{cpu.ConvKernel}
	for _, c := range []struct {
		name       string
		opts       lower.Options
		dt         tensor.DType
		xd, wd     []int64
		transposed bool
		groups     int64
		want       string // in the module when the kernel is used, "" when not
	}{
		{"2d", lower.Options{Kernels: k}, tensor.Float32, []int64{2, 4, 6, 6}, []int64{8, 4, 3, 3}, false, 1,
			`operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>], result_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>]`},
		{"1d", lower.Options{Kernels: k}, tensor.Float32, []int64{2, 4, 9}, []int64{8, 4, 3}, false, 1,
			`operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<[2, 1, 0]> : tensor<3xindex>]`},
		{"3d groups", lower.Options{Kernels: k}, tensor.Float32, []int64{1, 4, 5, 5, 5}, []int64{8, 2, 3, 3, 3}, false, 2,
			`backend_config = {activation = 0 : i64, alpha = 0.0 : f32, dilation = array<i64: 1, 1, 1>, groups = 2 : i64, has_bias = 0 : i64, pad_hi = array<i64: 1, 1, 1>, pad_lo = array<i64: 1, 1, 1>, residual = 0 : i64, site = `},
		{"depthwise", lower.Options{Kernels: k}, tensor.Float32, []int64{1, 4, 6, 6}, []int64{4, 1, 3, 3}, false, 4, `groups = 4 : i64`},
		{"float16 in float32", lower.Options{Kernels: k}, tensor.Float16, []int64{1, 4, 6, 6}, []int64{8, 4, 3, 3}, false, 1, `xserve_conv_f32`},
		{"float64: XLA's", lower.Options{Kernels: k}, tensor.Float64, []int64{1, 4, 6, 6}, []int64{8, 4, 3, 3}, false, 1, ""},
		{"transposed: XLA's", lower.Options{Kernels: k}, tensor.Float32, []int64{1, 4, 6, 6}, []int64{4, 8, 3, 3}, true, 1, ""},
		{"no kernels", lower.Options{}, tensor.Float32, []int64{1, 4, 6, 6}, []int64{8, 4, 3, 3}, false, 1, ""},
		{"zero input channels: XLA's", lower.Options{Kernels: k}, tensor.Float32, []int64{1, 0, 6, 6}, []int64{8, 0, 3, 3}, false, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			spatial := len(c.xd) - 2
			ones, zeros := make([]int64, spatial), make([]int64, spatial)
			for i := range ones {
				ones[i] = 1
			}
			g := nnCall(fxgraph.AtenConvolution, []fxgraph.TensorMeta{fxgraph.Static(c.dt, c.xd...), fxgraph.Static(c.dt, c.wd...)},
				func(in []*fxgraph.Node) []any {
					return []any{in[0], in[1], nil, ones, ones, ones, c.transposed, zeros, c.groups}
				}, nil, 0)
			p, err := lower.New(c.opts, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			module := string(p.Module)
			used := strings.Contains(module, `call_target_name = "`+cpu.ConvKernel+`"`)
			if used != (c.want != "") {
				t.Fatalf("kernel used: %v, want %v:\n%s", used, c.want != "", module)
			}
			if used && (!strings.Contains(module, c.want) || !strings.Contains(module, "api_version = 4 : i32") || strings.Contains(module, "stablehlo.convolution")) {
				t.Errorf("module lacks %q (or has a stablehlo.convolution):\n%s", c.want, module)
			}
		})
	}
}

// TestConvKernelFusesActivation: a residual added to a kernel convolution,
// and an activation that is all its users compute (relu, clamp to [0, 6] or hardtanh(0, 6),
// sigmoid, SiLU as an op or as x * sigmoid(x), hardswish, tanh, GELU exact
// or tanh, leaky relu) is applied by the kernel (its activation attribute)
// and lowers to nothing of its own; a convolution with other users, or
// another clamp, keeps the op. TestConvKernelMatchesORT (importer/onnx)
// checks the results.
func TestConvKernelFusesActivation(t *testing.T) {
	k := []string{cpu.ConvKernel}
	call := func(target *fxgraph.Op, args ...any) func(g *fxgraph.Graph, x *fxgraph.Node) *fxgraph.Node {
		return func(g *fxgraph.Graph, x *fxgraph.Node) *fxgraph.Node {
			return g.AddCall(target, append([]any{x}, args...), nil)
		}
	}
	silu := func(sigFirst bool) func(g *fxgraph.Graph, x *fxgraph.Node) *fxgraph.Node {
		return func(g *fxgraph.Graph, x *fxgraph.Node) *fxgraph.Node {
			s := g.AddCall(fxgraph.AtenSigmoid, []any{x}, nil)
			if sigFirst {
				return g.AddCall(fxgraph.AtenMulTensor, []any{s, x}, nil)
			}
			return g.AddCall(fxgraph.AtenMulTensor, []any{x, s}, nil)
		}
	}
	for _, c := range []struct {
		name    string
		act     func(g *fxgraph.Graph, conv *fxgraph.Node) *fxgraph.Node
		both    bool // the convolution is an output too
		wantAct string
	}{
		{"relu", call(fxgraph.AtenRelu), false, "activation = 1 : i64, alpha = 0.0 : f32"},
		{"clamp 0 6", call(fxgraph.AtenClamp, 0.0, 6.0), false, "activation = 2 : i64"},
		{"hardtanh 0 6", call(fxgraph.AtenHardtanh, 0.0, 6.0), false, "activation = 2 : i64"},
		{"clamp min 0", call(fxgraph.AtenClamp, 0.0), false, "activation = 1 : i64"},
		{"sigmoid", call(fxgraph.AtenSigmoid), false, "activation = 3 : i64"},
		{"silu", call(fxgraph.AtenSilu), false, "activation = 4 : i64"},
		{"x * sigmoid(x)", silu(false), false, "activation = 4 : i64"},
		{"sigmoid(x) * x", silu(true), false, "activation = 4 : i64"},
		{"hardswish", call(fxgraph.AtenHardswish), false, "activation = 5 : i64"},
		{"tanh", call(fxgraph.AtenTanh), false, "activation = 6 : i64"},
		{"gelu", call(fxgraph.AtenGelu), false, "activation = 7 : i64"},
		{"gelu tanh", func(g *fxgraph.Graph, x *fxgraph.Node) *fxgraph.Node {
			return g.AddCall(fxgraph.AtenGelu, []any{x}, map[string]any{"approximate": "tanh"})
		}, false, "activation = 8 : i64"},
		{"leaky relu", call(fxgraph.AtenLeakyRelu, 0.25), false, "activation = 9 : i64, alpha = 0.25 : f32"},
		{"residual add, relu", func(g *fxgraph.Graph, x *fxgraph.Node) *fxgraph.Node {
			r := g.AddPlaceholder("r", fxgraph.Static(tensor.Float32, 1, 8, 6, 6))
			return g.AddCall(fxgraph.AtenRelu, []any{g.AddCall(fxgraph.AtenAddTensor, []any{r, x}, nil)}, nil)
		}, false, "activation = 1 : i64"},
		{"clamp 0 1: not fused", call(fxgraph.AtenClamp, 0.0, 1.0), false, "activation = 0 : i64"},
		{"relu, convolution also an output: not fused", call(fxgraph.AtenRelu), true, "activation = 0 : i64"},
		{"x * sigmoid(x), convolution also an output: not fused", silu(false), true, "activation = 0 : i64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := fxgraph.New()
			x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, 1, 4, 6, 6))
			w := g.AddPlaceholder("w", fxgraph.Static(tensor.Float32, 8, 4, 3, 3))
			conv := g.AddCall(fxgraph.AtenConvolution, []any{x, w, nil, nnL(1, 1), nnL(1, 1), nnL(1, 1), false, nnL(0, 0), int64(1)}, nil)
			y := c.act(g, conv)
			if c.both {
				g.SetOutput(y, conv)
			} else {
				g.SetOutput(y)
			}
			p, err := lower.New(lower.Options{Kernels: k}, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			module := string(p.Module)
			if !strings.Contains(module, c.wantAct) {
				t.Errorf("module lacks %q:\n%s", c.wantAct, module)
			}
			// Fused, the module computes nothing but the custom call (and
			// the weight's transpose to the kernel's [kh, kw, in, out],
			// which XLA folds into an HWIO-uploaded weight).
			var ops []string
			for _, line := range strings.Split(module, "\n") {
				if strings.Contains(line, `"stablehlo.transpose"(%w) {permutation = array<i64: 2, 3, 1, 0>}`) {
					continue
				}
				if i := strings.Index(line, `"stablehlo.`); i >= 0 && !strings.Contains(line, "stablehlo.custom_call") {
					ops = append(ops, strings.TrimSpace(line[i:]))
				}
			}
			if fused := !strings.Contains(c.wantAct, "= 0 :"); fused != (len(ops) == 0) {
				t.Errorf("fused %v, but other ops in the module: %q", fused, ops)
			}
		})
	}
}

// TestMaxPoolKernelMatchesXLA runs max pooling through the CPU max-pooling
// kernel (cpu.PoolKernel) and through XLA's own reduce_window on the same
// plugin, on inputs with NaN (alone in a window, and filling one), -Inf
// and +Inf: the two agree exactly, NaN included (a window with NaN gives
// NaN, as in PyTorch). TestPoolKernelMatchesORT (importer/onnx) checks
// the kernel against ONNX Runtime on ordinary inputs; ONNX Runtime drops
// NaN from most windows.
func TestMaxPoolKernelMatchesXLA(t *testing.T) {
	client := nnOpenPlugin(t)
	if !slices.Contains(client.Kernels(), cpu.PoolKernel) {
		t.Fatalf("the CPU kernel library is not loaded, or lacks %s (%v): run make pjrt", cpu.PoolKernel, client.KernelsError())
	}
	for _, c := range []struct {
		name                     string
		dims                     []int64
		window, stride, pad, dil []int64
		ceil                     bool
	}{
		{"2d 3x3 stride 2 pad 1", []int64{2, 5, 9, 9}, nnI(3, 3), nnI(2, 2), nnI(1, 1), nnI(1, 1), false},
		{"2d ceil", []int64{1, 3, 8, 7}, nnI(3, 2), nnI(2, 2), nnI(1, 0), nnI(1, 1), true},
		{"2d dilated", []int64{1, 4, 10, 10}, nnI(2, 3), nnI(1, 2), nnI(1, 2), nnI(2, 2), false},
		{"1d", []int64{2, 3, 17}, nnI(3), nnI(2), nnI(1), nnI(1), false},
		{"3d", []int64{1, 2, 5, 6, 7}, nnI(2, 2, 3), nnI(2, 2, 2), nnI(0, 1, 1), nnI(1, 1, 1), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := tensor.NumElements(c.dims)
			vals := nnRand(int64(len(c.name)), n)
			vals[3], vals[n/2] = math.NaN(), math.Inf(-1)
			vals[n-1] = math.Inf(1)
			for i := n / 3; i < n/3+c.dims[len(c.dims)-1]*2; i++ { // two rows of NaN: whole windows
				vals[i] = math.NaN()
			}
			x := nnTensor(tensor.Float32, c.dims, vals)
			target := fxgraph.MaxPoolWithIndicesOp(len(c.window))
			if len(c.window) == 1 {
				target = fxgraph.AtenMaxPool1d
			}
			tuple := 1 // the values only: the kernel does not compute indices
			if len(c.window) == 1 {
				tuple = 0
			}
			g := nnCall(target, []fxgraph.TensorMeta{fxgraph.Static(tensor.Float32, c.dims...)},
				func(in []*fxgraph.Node) []any {
					return []any{in[0], nnL(c.window...), nnL(c.stride...), nnL(c.pad...), nnL(c.dil...), c.ceil}
				}, nil, tuple)
			run := func(kernels []string) (*tensor.Tensor, string) {
				prog, err := lower.New(lower.Options{Platform: client.Platform(), Kernels: kernels}, cpu.Platform()).Lower(g, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := conformance.Execute(context.Background(), client, prog, []*tensor.Tensor{x})
				if err != nil {
					t.Fatal(err)
				}
				return got[0], string(prog.Module)
			}
			got, module := run(client.Kernels())
			if !strings.Contains(module, cpu.PoolKernel) {
				t.Fatalf("the module does not call %s:\n%s", cpu.PoolKernel, module)
			}
			want, module := run([]string{})
			if strings.Contains(module, cpu.PoolKernel) {
				t.Fatalf("without kernels the module calls %s", cpu.PoolKernel)
			}
			if tensor.ShapeString(got.Shape) != tensor.ShapeString(want.Shape) {
				t.Fatalf("shape %v, XLA's %v", got.Shape, want.Shape)
			}
			nans := 0
			for i := range want.NumElements() {
				g, w := got.Float64At(i), want.Float64At(i)
				if math.IsNaN(w) {
					nans++
				}
				if math.IsNaN(g) != math.IsNaN(w) || (!math.IsNaN(w) && g != w) {
					t.Fatalf("element %d = %v, XLA's reduce_window gives %v", i, g, w)
				}
			}
			if nans == 0 {
				t.Fatal("no NaN in the result: the case does not test NaN")
			}
		})
	}
}

// TestMaxPoolKernelLowering: float32 max pooling whose indices are unused
// lowers to PoolKernel when the kernels are loaded; used indices, float64,
// and no kernels keep XLA's reduce_window.
func TestMaxPoolKernelLowering(t *testing.T) {
	k := []string{cpu.PoolKernel}
	for _, c := range []struct {
		name   string
		opts   lower.Options
		dt     tensor.DType
		tuple  int // outputs used: 1 values, 2 values and indices
		kernel bool
	}{
		{"float32", lower.Options{Kernels: k}, tensor.Float32, 1, true},
		{"indices used: XLA's", lower.Options{Kernels: k}, tensor.Float32, 2, false},
		{"float64: XLA's", lower.Options{Kernels: k}, tensor.Float64, 1, false},
		{"no kernels", lower.Options{}, tensor.Float32, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := nnCall(fxgraph.AtenMaxPool2dWithIndices, []fxgraph.TensorMeta{fxgraph.Static(c.dt, 1, 2, 6, 6)},
				func(in []*fxgraph.Node) []any { return []any{in[0], nnL(3, 3), nnL(2, 2), nnL(1, 1)} }, nil, c.tuple)
			p, err := lower.New(c.opts, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			text := string(p.Module)
			if got := strings.Contains(text, cpu.PoolKernel); got != c.kernel {
				t.Errorf("kernel call %v, want %v:\n%s", got, c.kernel, text)
			}
			if c.kernel && !strings.Contains(text, "window = array<i64: 3, 3>") {
				t.Errorf("the kernel call lacks its window:\n%s", text)
			}
		})
	}
}

func nnI(v ...int64) []int64 { return v }

// TestAddmmKernelFusesBias: aten.addmm(bias, x, w) with unit alpha and beta
// and a bias over the output columns (an ONNX Gemm, a classifier layer)
// lowers to one MatmulKernel call that adds the bias and applies the relu
// after it; with another alpha the bias stays an add. TestMatmulKernelMatchesORT
// (importer/onnx, matmul_gemm_bias_relu) checks the numbers.
func TestAddmmKernelFusesBias(t *testing.T) {
	for _, c := range []struct {
		name  string
		alpha float64
		fused bool
	}{{"unit alpha", 1, true}, {"alpha 0.5", 0.5, false}} {
		t.Run(c.name, func(t *testing.T) {
			g := fxgraph.New()
			bias := g.AddPlaceholder("bias", fxgraph.Static(tensor.Float32, 64))
			x := g.AddPlaceholder("x", fxgraph.Static(tensor.Float32, 6, 128))
			w := g.AddPlaceholder("w", fxgraph.Static(tensor.Float32, 128, 64))
			mm := g.AddCall(fxgraph.AtenAddmm, []any{bias, x, w}, map[string]any{"alpha": c.alpha})
			g.SetOutput(g.AddCall(fxgraph.AtenRelu, []any{mm}, nil))
			p, err := lower.New(lower.Options{Kernels: []string{cpu.MatmulKernel}}, cpu.Platform()).Lower(g, nil)
			if err != nil {
				t.Fatal(err)
			}
			module := string(p.Module)
			if !strings.Contains(module, cpu.MatmulKernel) {
				t.Fatalf("no %s call:\n%s", cpu.MatmulKernel, module)
			}
			fused := strings.Contains(module, "has_bias = 1") && strings.Contains(module, "activation = 1 :") &&
				!strings.Contains(module, "stablehlo.add") && !strings.Contains(module, "stablehlo.maximum")
			if fused != c.fused {
				t.Errorf("bias and relu fused %v, want %v:\n%s", fused, c.fused, module)
			}
		})
	}
}
