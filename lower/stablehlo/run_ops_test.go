package stablehlo_test

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

type vals = []*stablehlo.Value

// iota6 is [[0 1 2] [3 4 5]] as float32.
func iota6() *tensor.Tensor { return tensor.FromFloat32s([]float32{0, 1, 2, 3, 4, 5}, 2, 3) }

// addRegion returns a region adding two scalars of t.
func addRegion(t *testing.T, b *stablehlo.Block, elem stablehlo.ElementType) *stablehlo.Block {
	t.Helper()
	r := b.Region(stablehlo.TensorOf(elem), stablehlo.TensorOf(elem))
	s, err := r.Add(r.Arg(0), r.Arg(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Return(s); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestShapeOpsRun(t *testing.T) {
	out := oneOp(t, []stablehlo.Type{f32(2, 3), i32()}, []*tensor.Tensor{iota6(), tensor.Scalar(tensor.Int32, 1)}, func(b *stablehlo.Block, p vals) (vals, error) {
		x, one := p[0], p[1]
		io, err := b.Iota(i32(2, 3), 1)
		if err != nil {
			return nil, err
		}
		rs, err := b.Reshape(x, 3, 2)
		if err != nil {
			return nil, err
		}
		tr, err := b.Transpose(x, 1, 0)
		if err != nil {
			return nil, err
		}
		sl, err := b.Slice(x, []int64{0, 0}, []int64{2, 3}, []int64{1, 2})
		if err != nil {
			return nil, err
		}
		zero, _ := b.ScalarConstant(stablehlo.F32, -1)
		pd, err := b.Pad(x, zero, []int64{1, 0}, []int64{0, -1}, []int64{0, 1})
		if err != nil {
			return nil, err
		}
		rv, err := b.Reverse(x, 1)
		if err != nil {
			return nil, err
		}
		cc, err := b.Concatenate(0, x, x)
		if err != nil {
			return nil, err
		}
		z, _ := b.ScalarConstant(stablehlo.I32, 0)
		ds, err := b.DynamicSlice(x, vals{one, one}, []int64{1, 2})
		if err != nil {
			return nil, err
		}
		upd, _ := b.Constant(f32(1, 2), make([]byte, 8))
		du, err := b.DynamicUpdateSlice(x, upd, vals{z, one})
		if err != nil {
			return nil, err
		}
		return vals{io, rs, tr, sl, pd, rv, cc, ds, du}, nil
	})
	checkValues(t, "iota", out[0], []int64{2, 3}, []float64{0, 1, 2, 0, 1, 2})
	checkValues(t, "reshape", out[1], []int64{3, 2}, []float64{0, 1, 2, 3, 4, 5})
	checkValues(t, "transpose", out[2], []int64{3, 2}, []float64{0, 3, 1, 4, 2, 5})
	checkValues(t, "slice", out[3], []int64{2, 2}, []float64{0, 2, 3, 5})
	// pad: a row of -1 on top, interior -1 between columns, last column cut.
	checkValues(t, "pad", out[4], []int64{3, 4}, []float64{-1, -1, -1, -1, 0, -1, 1, -1, 3, -1, 4, -1})
	checkValues(t, "reverse", out[5], []int64{2, 3}, []float64{2, 1, 0, 5, 4, 3})
	checkValues(t, "concatenate", out[6], []int64{4, 3}, []float64{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5})
	checkValues(t, "dynamic_slice", out[7], []int64{1, 2}, []float64{4, 5})
	checkValues(t, "dynamic_update_slice", out[8], []int64{2, 3}, []float64{0, 0, 0, 3, 4, 5})
}

func TestGatherScatterRun(t *testing.T) {
	idx := tensor.FromInt64s([]int64{1, 0, 1}, 3, 1)
	out := oneOp(t, []stablehlo.Type{f32(2, 3), stablehlo.TensorOf(stablehlo.I64, 3, 1)}, []*tensor.Tensor{iota6(), idx}, func(b *stablehlo.Block, p vals) (vals, error) {
		// rows x[idx]: a [3,3] gather.
		g, err := b.Gather(p[0], p[1], stablehlo.GatherDims{OffsetDims: []int64{1}, CollapsedSliceDims: []int64{0}, StartIndexMap: []int64{0}, IndexVectorDim: 1}, []int64{1, 3}, false)
		if err != nil {
			return nil, err
		}
		// x with the gathered rows added back at idx: row 1 gets 2*row1, row 0 gets row 0.
		s, err := b.Scatter(vals{p[0]}, p[1], vals{g}, stablehlo.ScatterDims{UpdateWindowDims: []int64{1}, InsertedWindowDims: []int64{0}, ScatterDimsToOperandDims: []int64{0}, IndexVectorDim: 1}, addRegion(t, b, stablehlo.F32), false, false)
		if err != nil {
			return nil, err
		}
		return vals{g, s[0]}, nil
	})
	checkValues(t, "gather", out[0], []int64{3, 3}, []float64{3, 4, 5, 0, 1, 2, 3, 4, 5})
	checkValues(t, "scatter", out[1], []int64{2, 3}, []float64{0, 2, 4, 9, 12, 15})
}

func TestNNOpsRun(t *testing.T) {
	img := tensor.FromFloat32s([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 1, 1, 4, 4)
	out := oneOp(t, []stablehlo.Type{f32(2, 3), f32(1, 1, 4, 4)}, []*tensor.Tensor{iota6(), img}, func(b *stablehlo.Block, p vals) (vals, error) {
		x, im := p[0], p[1]
		// x @ x^T
		mm, err := b.DotGeneral(x, x, stablehlo.DotDims{LhsContract: []int64{1}, RhsContract: []int64{1}}, stablehlo.PrecisionHighest, stablehlo.Invalid)
		if err != nil {
			return nil, err
		}
		// a 2x2 box filter, stride 2, NCHW / OIHW.
		k, err := b.ScalarConstant(stablehlo.F32, 1)
		if err != nil {
			return nil, err
		}
		kk, err := b.BroadcastInDim(k, []int64{1, 1, 2, 2}, nil)
		if err != nil {
			return nil, err
		}
		conv, err := b.Convolution(im, kk, stablehlo.ConvDims{
			InputBatch: 0, InputFeature: 1, InputSpatial: []int64{2, 3},
			KernelOutput: 0, KernelInput: 1, KernelSpatial: []int64{2, 3},
			OutputBatch: 0, OutputFeature: 1, OutputSpatial: []int64{2, 3},
			Strides: []int64{2, 2},
		}, stablehlo.PrecisionHighest, stablehlo.Invalid)
		if err != nil {
			return nil, err
		}
		// 3x3 max pool, stride 1, padding 1 (-inf).
		ninf, _ := b.ScalarConstant(stablehlo.F32, -1e30)
		mx := b.Region(f32(), f32())
		m, _ := mx.Maximum(mx.Arg(0), mx.Arg(1))
		if err := mx.Return(m); err != nil {
			return nil, err
		}
		pool, err := b.ReduceWindow(vals{im}, vals{ninf}, stablehlo.Window{Dims: []int64{1, 1, 3, 3}, Strides: []int64{1, 1, 2, 2}, Padding: [][2]int64{{0, 0}, {0, 0}, {1, 1}, {1, 1}}}, mx)
		if err != nil {
			return nil, err
		}
		return vals{mm, conv, pool[0]}, nil
	})
	checkValues(t, "dot_general", out[0], []int64{2, 2}, []float64{5, 14, 14, 50})
	checkValues(t, "convolution", out[1], []int64{1, 1, 2, 2}, []float64{1 + 2 + 5 + 6, 3 + 4 + 7 + 8, 9 + 10 + 13 + 14, 11 + 12 + 15 + 16})
	checkValues(t, "reduce_window", out[2], []int64{1, 1, 2, 2}, []float64{6, 8, 14, 16})
}

func TestControlFlowRun(t *testing.T) {
	n := tensor.Scalar(tensor.Int32, 5)
	out := oneOp(t, []stablehlo.Type{i32(), f32(2, 3)}, []*tensor.Tensor{n, iota6()}, func(b *stablehlo.Block, p vals) (vals, error) {
		// while i < n: acc += i; i += 1  ->  acc = 0+1+2+3+4 = 10
		zero, _ := b.ScalarConstant(stablehlo.I32, 0)
		cond := b.Region(i32(), i32())
		lt, err := cond.Compare(cond.Arg(0), p[0], stablehlo.LT, stablehlo.CompareDefault)
		if err != nil {
			return nil, err
		}
		if err := cond.Return(lt); err != nil {
			return nil, err
		}
		body := b.Region(i32(), i32())
		one, _ := body.ScalarConstant(stablehlo.I32, 1)
		next, _ := body.Add(body.Arg(0), one)
		acc, _ := body.Add(body.Arg(1), body.Arg(0))
		if err := body.Return(next, acc); err != nil {
			return nil, err
		}
		w, err := b.While(vals{zero, zero}, cond, body)
		if err != nil {
			return nil, err
		}
		// case on n-4 (= 1): branch 1 negates x.
		four, _ := b.ScalarConstant(stablehlo.I32, 4)
		idx, _ := b.Subtract(p[0], four)
		br0, br1 := b.Region(), b.Region()
		if err := br0.Return(p[1]); err != nil {
			return nil, err
		}
		neg, _ := br1.Negate(p[1])
		if err := br1.Return(neg); err != nil {
			return nil, err
		}
		cs, err := b.Case(idx, br0, br1)
		if err != nil {
			return nil, err
		}
		// if n > 4: 1.0 else 2.0
		gt, _ := b.Compare(p[0], four, stablehlo.GT, stablehlo.CompareDefault)
		yes, no := b.Region(), b.Region()
		c1, _ := yes.ScalarConstant(stablehlo.F32, 1)
		c2, _ := no.ScalarConstant(stablehlo.F32, 2)
		if err := yes.Return(c1); err != nil {
			return nil, err
		}
		if err := no.Return(c2); err != nil {
			return nil, err
		}
		iff, err := b.If(gt, yes, no)
		if err != nil {
			return nil, err
		}
		return vals{w[1], cs[0], iff[0]}, nil
	})
	checkValues(t, "while", out[0], nil, []float64{10})
	checkValues(t, "case", out[1], []int64{2, 3}, []float64{0, -1, -2, -3, -4, -5})
	checkValues(t, "if", out[2], nil, []float64{1})
}

// TestSortRun sorts values descending together with their indices (TopK's
// building block), stably.
func TestSortRun(t *testing.T) {
	x := tensor.FromFloat32s([]float32{3, 1, 4, 1, 5, 9, 2, 6}, 2, 4)
	out := oneOp(t, []stablehlo.Type{f32(2, 4)}, []*tensor.Tensor{x}, func(b *stablehlo.Block, p vals) (vals, error) {
		idx, err := b.Iota(i32(2, 4), 1)
		if err != nil {
			return nil, err
		}
		cmp := b.Region(f32(), f32(), i32(), i32())
		gt, err := cmp.Compare(cmp.Arg(0), cmp.Arg(1), stablehlo.GT, stablehlo.CompareTotal)
		if err != nil {
			return nil, err
		}
		if err := cmp.Return(gt); err != nil {
			return nil, err
		}
		return b.Sort(vals{p[0], idx}, 1, true, cmp)
	})
	checkValues(t, "sorted values", out[0], []int64{2, 4}, []float64{4, 3, 1, 1, 9, 6, 5, 2})
	checkValues(t, "sorted indices", out[1], []int64{2, 4}, []float64{2, 0, 1, 3, 1, 3, 0, 2})
}

// TestCustomCallRun calls XLA's TopK custom call, which the CPU compiler
// expands into a sort, and pins the op's printed form.
func TestCustomCallRun(t *testing.T) {
	x := tensor.FromFloat32s([]float32{3, 1, 4, 1, 5, 9, 2, 6}, 2, 4)
	out := oneOp(t, []stablehlo.Type{f32(2, 4)}, []*tensor.Tensor{x}, func(b *stablehlo.Block, p vals) (vals, error) {
		return b.CustomCall("TopK", vals{p[0]}, []stablehlo.Type{f32(2, 2), i32(2, 2)}, "", false)
	})
	checkValues(t, "top 2 values", out[0], []int64{2, 2}, []float64{4, 3, 9, 6})
	checkValues(t, "top 2 indices", out[1], []int64{2, 2}, []float64{2, 0, 1, 3})

	m := stablehlo.NewModule("m")
	f, _ := m.Func("main", stablehlo.Param{Name: "x", Type: f32(2, 4)})
	r, err := f.Body().CustomCall("TopK", vals{f.Param(0)}, []stablehlo.Type{f32(2, 2), i32(2, 2)}, "k=2", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Return(r...); err != nil {
		t.Fatal(err)
	}
	text, _ := m.Text()
	want := `    %0:2 = "stablehlo.custom_call"(%x) {call_target_name = "TopK", has_side_effect = false, backend_config = "k=2", api_version = 2 : i32} : (tensor<2x4xf32>) -> (tensor<2x2xf32>, tensor<2x2xi32>)
    "func.return"(%0#0, %0#1) : (tensor<2x2xf32>, tensor<2x2xi32>) -> ()
`
	if !strings.Contains(string(text), want) {
		t.Errorf("text =\n%s\nwant it to contain\n%s", text, want)
	}
}

// TestConstantsRun round-trips constants of every element type through the
// plugin: non-splat data (hex), splats (one literal), NaN and infinities.
func TestConstantsRun(t *testing.T) {
	types := []struct {
		elem stablehlo.ElementType
		dt   tensor.DType
	}{
		{stablehlo.Bool, tensor.Bool}, {stablehlo.I8, tensor.Int8}, {stablehlo.I16, tensor.Int16}, {stablehlo.I32, tensor.Int32},
		{stablehlo.I64, tensor.Int64}, {stablehlo.U8, tensor.Uint8}, {stablehlo.U16, tensor.Uint16}, {stablehlo.U32, tensor.Uint32},
		{stablehlo.U64, tensor.Uint64}, {stablehlo.F16, tensor.Float16}, {stablehlo.BF16, tensor.BFloat16}, {stablehlo.F32, tensor.Float32},
		{stablehlo.F64, tensor.Float64},
	}
	for _, c := range types {
		t.Run(c.elem.String(), func(t *testing.T) {
			vals := []float64{1, 0, 1, 1}
			if c.elem != stablehlo.Bool {
				vals = []float64{-3, 0, 7, 100}
				if c.elem.IsUnsigned() {
					vals[0] = 3
				}
				if c.elem.IsFloat() {
					vals = []float64{-1.5, math.Inf(1), math.NaN(), 0.25}
				}
			}
			nonSplat := tensor.New(c.dt, 2, 2)
			for i, v := range vals {
				nonSplat.SetFloat64(int64(i), v)
			}
			splat := tensor.New(c.dt, 3)
			for i := range int64(3) {
				splat.SetFloat64(i, vals[0])
			}
			out := oneOp(t, nil, nil, func(b *stablehlo.Block, _ []*stablehlo.Value) ([]*stablehlo.Value, error) {
				ns, err := b.Constant(stablehlo.TensorOf(c.elem, 2, 2), nonSplat.Data)
				if err != nil {
					return nil, err
				}
				sp, err := b.Constant(stablehlo.TensorOf(c.elem, 3), splat.Data)
				if err != nil {
					return nil, err
				}
				sc, err := b.ScalarConstant(c.elem, vals[0])
				if err != nil {
					return nil, err
				}
				return []*stablehlo.Value{ns, sp, sc}, nil
			})
			checkValues(t, "non-splat", out[0], []int64{2, 2}, vals)
			checkValues(t, "splat", out[1], []int64{3}, []float64{vals[0], vals[0], vals[0]})
			checkValues(t, "scalar", out[2], nil, vals[:1])
		})
	}
}

// TestFFICallRun calls xserve's CPU convolution kernel (cpukernels/, a
// typed-FFI handler `make pjrt` installs next to the plugin) through
// FFICall: a 1x1 convolution whose weights pick one input channel shows the
// kernel reads the channels-last operand layout XLA was asked for and
// applies bias and the relu activation; a call without a required attribute fails with
// the kernel's message, and the client keeps working. It also pins the
// op's printed form.
func TestFFICallRun(t *testing.T) {
	c := testClient(t)
	if !slices.Contains(c.Kernels(), "xserve_conv_f32") {
		t.Fatalf("the CPU kernel library is not loaded (%v): run make pjrt", c.KernelsError())
	}
	x := tensor.FromFloat32s([]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 1, 2, 2, 3)
	w := tensor.FromFloat32s([]float32{-1, 0}, 1, 1, 2, 1) // [kH, kW, in, out]
	b := tensor.FromFloat32s([]float32{2.5}, 1)
	nchw, weights := []int64{1, 3, 2, 0}, []int64{3, 2, 1, 0}
	call := func(p vals, act int64, attrs ...string) stablehlo.FFICall {
		all := []stablehlo.FFIAttr{
			{Name: "activation", Int: act}, {Name: "alpha", IsFloat: true}, {Name: "dilation", Ints: []int64{1, 1}, Array: true}, {Name: "groups", Int: 1},
			{Name: "pad_hi", Ints: []int64{0, 0}, Array: true}, {Name: "pad_lo", Ints: []int64{0, 0}, Array: true},
			{Name: "stride", Ints: []int64{1, 1}, Array: true}, {Name: "has_bias", Int: 1}, {Name: "residual", Int: 0},
		}
		var keep []stablehlo.FFIAttr
		for _, a := range all {
			if len(attrs) == 0 || slices.Contains(attrs, a.Name) {
				keep = append(keep, a)
			}
		}
		return stablehlo.FFICall{Target: "xserve_conv_f32", Operands: p, Results: []stablehlo.Type{f32(1, 1, 2, 3)}, Attrs: keep,
			OperandLayouts: [][]int64{nchw, weights, {0}}, ResultLayouts: [][]int64{nchw}}
	}
	params := []stablehlo.Type{f32(1, 2, 2, 3), f32(1, 1, 2, 1), f32(1)}
	out := oneOp(t, params, []*tensor.Tensor{x, w, b}, func(blk *stablehlo.Block, p vals) (vals, error) {
		plain, err := blk.FFICall(call(p, 0))
		if err != nil {
			return nil, err
		}
		relu, err := blk.FFICall(call(p, 1))
		if err != nil {
			return nil, err
		}
		return vals{plain[0], relu[0]}, nil
	})
	checkValues(t, "-channel 0 + 2.5", out[0], []int64{1, 1, 2, 3}, []float64{2.5, 1.5, 0.5, -0.5, -1.5, -2.5})
	checkValues(t, "relu(-channel 0 + 2.5)", out[1], []int64{1, 1, 2, 3}, []float64{2.5, 1.5, 0.5, 0, 0, 0})

	m := stablehlo.NewModule("m")
	f, _ := m.Func("main", stablehlo.Param{Name: "x", Type: params[0]}, stablehlo.Param{Name: "w", Type: params[1]}, stablehlo.Param{Name: "b", Type: params[2]})
	r, err := f.Body().FFICall(call(f.Params(), 0, "groups", "stride", "has_bias", "residual"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Return(r...); err != nil {
		t.Fatal(err)
	}
	text, _ := m.Text()
	want := `%0 = "stablehlo.custom_call"(%x, %w, %b) {call_target_name = "xserve_conv_f32", api_version = 4 : i32, backend_config = {groups = 1 : i64, has_bias = 1 : i64, residual = 0 : i64, stride = array<i64: 1, 1>}, operand_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>, dense<[3, 2, 1, 0]> : tensor<4xindex>, dense<[0]> : tensor<1xindex>], result_layouts = [dense<[1, 3, 2, 0]> : tensor<4xindex>]} : (tensor<1x2x2x3xf32>, tensor<1x1x2x1xf32>, tensor<1xf32>) -> tensor<1x1x2x3xf32>`
	if !strings.Contains(string(text), want) {
		t.Errorf("text =\n%s\nwant it to contain\n%s", text, want)
	}
	ctx := context.Background()
	exe, err := c.Compile(ctx, text, nil)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	defer exe.Close()
	var bufs []*pjrt.Buffer
	for _, in := range []*tensor.Tensor{x, w, b} {
		buf, err := c.Upload(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Close()
		bufs = append(bufs, buf)
	}
	_, err = exe.Run(ctx, bufs)
	if err == nil || !strings.Contains(err.Error(), "xserve_conv_f32: missing or malformed attribute") {
		t.Errorf("run without pad_lo, pad_hi, dilation, activation, alpha: err = %v, want the kernel's attribute error", err)
	}
	again := oneOp(t, params, []*tensor.Tensor{x, w, b}, func(blk *stablehlo.Block, p vals) (vals, error) {
		return blk.FFICall(call(p, 0))
	})
	checkValues(t, "after a failed call", again[0], []int64{1, 1, 2, 3}, []float64{2.5, 1.5, 0.5, -0.5, -1.5, -2.5})
}

// TestMatmulKernelRun calls xserve's CPU matrix-product kernel through
// FFICall with each operand plain or transposed, batched or not, with a
// bias, a residual and an activation, and checks it against XLA's own
// dot_general (and add, maximum) of the same operands on the same plugin.
func TestMatmulKernelRun(t *testing.T) {
	c := testClient(t)
	if !slices.Contains(c.Kernels(), "xserve_matmul_f32") {
		t.Fatalf("the CPU kernel library is not loaded (%v): run make pjrt", c.KernelsError())
	}
	rnd := func(seed int, dims ...int64) *tensor.Tensor {
		n := tensor.NumElements(dims)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(float64(seed*7919+i*31))) * 2
		}
		return tensor.FromFloat32s(v, dims...)
	}
	for _, tc := range []struct {
		name           string
		batch          int64 // 0: rank 2
		transA, transB bool
		bias, relu     bool
		residual       bool
	}{
		{"2d", 0, false, false, false, false, false},
		{"2d trans_b bias", 0, false, true, true, false, false},
		{"2d trans_a relu", 0, true, false, false, true, false},
		{"batched trans both", 3, true, true, false, false, false},
		{"batched bias relu", 2, false, false, true, true, false},
		{"2d residual", 0, false, false, false, false, true},
		{"batched bias residual relu", 2, false, true, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const m, k, n = 5, 7, 6
			dims := func(r, c int64, trans bool) []int64 {
				if trans {
					r, c = c, r
				}
				if tc.batch == 0 {
					return []int64{r, c}
				}
				return []int64{tc.batch, r, c}
			}
			a, b, bias := rnd(1, dims(m, k, tc.transA)...), rnd(2, dims(k, n, tc.transB)...), rnd(3, n)
			res := rnd(4, dims(m, n, false)...)
			off := int64(len(a.Shape) - 2)
			types := []stablehlo.Type{f32(a.Shape...), f32(b.Shape...), f32(n), f32(res.Shape...)}
			flag := func(v bool) int64 {
				if v {
					return 1
				}
				return 0
			}
			act := int64(0)
			if tc.relu {
				act = 1
			}
			outs := oneOp(t, types, []*tensor.Tensor{a, b, bias, res}, func(blk *stablehlo.Block, p vals) (vals, error) {
				ops := vals{p[0], p[1]}
				if tc.bias {
					ops = append(ops, p[2])
				}
				if tc.residual {
					ops = append(ops, p[3])
				}
				kernel, err := blk.FFICall(stablehlo.FFICall{
					Target: "xserve_matmul_f32", Operands: ops, Results: []stablehlo.Type{f32(dims(m, n, false)...)},
					Attrs: []stablehlo.FFIAttr{{Name: "activation", Int: act}, {Name: "alpha", IsFloat: true},
						{Name: "trans_a", Int: flag(tc.transA)}, {Name: "trans_b", Int: flag(tc.transB)},
						{Name: "has_bias", Int: flag(tc.bias)}, {Name: "residual", Int: flag(tc.residual)}},
				})
				if err != nil {
					return nil, err
				}
				d := stablehlo.DotDims{LhsContract: []int64{off + 1}, RhsContract: []int64{off}}
				if tc.transA {
					d.LhsContract = []int64{off}
				}
				if tc.transB {
					d.RhsContract = []int64{off + 1}
				}
				if tc.batch > 0 {
					d.LhsBatch, d.RhsBatch = []int64{0}, []int64{0}
				}
				ref, err := blk.DotGeneral(p[0], p[1], d, stablehlo.PrecisionHighest, stablehlo.Invalid)
				if err != nil {
					return nil, err
				}
				// dot_general puts a transposed lhs's free dim after the
				// batch dims too, so ref is [batch, m, n] in every case.
				if tc.bias {
					bb, err := blk.BroadcastInDim(p[2], dims(m, n, false), []int64{int64(len(a.Shape) - 1)})
					if err != nil {
						return nil, err
					}
					if ref, err = blk.Add(ref, bb); err != nil {
						return nil, err
					}
				}
				if tc.residual {
					if ref, err = blk.Add(ref, p[3]); err != nil {
						return nil, err
					}
				}
				if tc.relu {
					z, err := blk.ScalarConstant(stablehlo.F32, 0)
					if err != nil {
						return nil, err
					}
					zero, err := blk.BroadcastInDim(z, dims(m, n, false), nil)
					if err != nil {
						return nil, err
					}
					if ref, err = blk.Maximum(ref, zero); err != nil {
						return nil, err
					}
				}
				return vals{kernel[0], ref}, nil
			})
			checkValues(t, "kernel vs dot_general", outs[0], outs[1].Shape, values(outs[1]))
		})
	}
}

// TestDivideRun divides float32 values by 255 where x * (1/255) differs
// from IEEE division in the last bit: XLA CPU compiles a float32 divide as
// a multiplication by the reciprocal, so float32 division in float64,
// rounded once to float32, is what gives ONNX Runtime's quantization
// scales (lower's quantized recurrent rule computes them so).
func TestDivideRun(t *testing.T) {
	var xs []float32
	for i := 1; len(xs) < 64 && i < 100000; i++ {
		x := float32(i) * 0.01
		if x/255 != x*float32(1.0/255) {
			xs = append(xs, x)
		}
	}
	n := int64(len(xs))
	out := oneOp(t, []stablehlo.Type{f32(n)}, []*tensor.Tensor{tensor.FromFloat32s(xs)}, func(b *stablehlo.Block, p vals) (vals, error) {
		c, err := b.ScalarConstant(stablehlo.F64, 255)
		if err != nil {
			return nil, err
		}
		d, err := b.BroadcastInDim(c, []int64{n}, nil)
		if err != nil {
			return nil, err
		}
		x64, err := b.Convert(p[0], stablehlo.F64)
		if err != nil {
			return nil, err
		}
		q, err := b.Divide(x64, d)
		if err != nil {
			return nil, err
		}
		q32, err := b.Convert(q, stablehlo.F32)
		return vals{q32}, err
	})
	for i, x := range xs {
		if got, want := float32(out[0].Float64At(int64(i))), x/255; got != want {
			t.Errorf("%g / 255 = %g, want %g", x, got, want)
		}
	}
}

// TestOptimizationBarrierRun adds z to x*y with the product behind an
// optimization_barrier: each result is the float32 product rounded, then
// the sum rounded, as ONNX Runtime's LSTM computes its cell state. XLA CPU
// may otherwise fuse the product into a fused multiply-add (one rounding),
// which differs in the last bit for about a fifth of these inputs.
func TestOptimizationBarrierRun(t *testing.T) {
	const n = 4096
	r := rand.New(rand.NewSource(1))
	var xs, ys, zs [n]float32
	for i := range xs {
		xs[i], ys[i], zs[i] = r.Float32()*2-1, r.Float32()*2-1, r.Float32()*2-1
	}
	ins := []*tensor.Tensor{tensor.FromFloat32s(xs[:]), tensor.FromFloat32s(ys[:]), tensor.FromFloat32s(zs[:])}
	out := oneOp(t, []stablehlo.Type{f32(n), f32(n), f32(n)}, ins, func(b *stablehlo.Block, p vals) (vals, error) {
		m, err := b.Multiply(p[0], p[1])
		if err != nil {
			return nil, err
		}
		kept, err := b.OptimizationBarrier(m)
		if err != nil {
			return nil, err
		}
		s, err := b.Add(kept[0], p[2])
		return vals{s}, err
	})
	bad := 0
	for i := range xs {
		if got, want := float32(out[0].Float64At(int64(i))), float32(xs[i]*ys[i])+zs[i]; got != want {
			if bad++; bad <= 3 {
				t.Errorf("%g * %g + %g = %g, want %g (the product rounded first)", xs[i], ys[i], zs[i], got, want)
			}
		}
	}
}
