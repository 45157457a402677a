package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerSample registers DeformConv. (GridSample is in ops_nn.go; its
// 5-D form comes here through gridSample3D.)
func registerSample(cs converters) {
	cs.register("", "DeformConv", 19, nnDeformConv)
}

// sampler reads taps of an image x [N, C, spatial...] at computed integer
// coordinates, with the IR's ops: x laid out channels-last as a table of
// N*prod(spatial) rows of C values, each tap one index_select of rows, zero
// where a coordinate falls outside the image. It is how GridSample (5-D)
// and DeformConv interpolate.
type sampler struct {
	c     *Ctx
	rows  *fxgraph.Node // [N*P, C]
	sp    []int64       // spatial sizes
	n, ch int64
	out   []int64       // the coordinates' shape: [N, positions...]
	base  *fxgraph.Node // row of each batch entry's first pixel, broadcasting against out
}

func newSampler(c *Ctx, x *fxgraph.Node, out []int64) (*sampler, error) {
	d, ok := Meta(x).Shape.Static()
	if !ok {
		return nil, Unsupported("sampling an image of symbolic shape %s", Meta(x).Shape)
	}
	s := &sampler{c: c, n: d[0], ch: d[1], sp: d[2:], out: out}
	perm := []any{int64(0)}
	for j := range s.sp {
		perm = append(perm, int64(j+2))
	}
	perm = append(perm, int64(1))
	cl, err := c.Emit(fxgraph.AtenPermute, x, perm)
	if err != nil {
		return nil, err
	}
	p := tensor.NumElements(s.sp)
	if s.rows, err = c.Emit(fxgraph.AtenReshape, cl, []any{s.n * p, s.ch}); err != nil {
		return nil, err
	}
	bd := make([]int64, len(out))
	for i := range bd {
		bd[i] = 1
	}
	bd[0] = s.n
	base := tensor.New(tensor.Int64, bd...)
	for b := range s.n {
		base.SetInt64(b, b*p)
	}
	s.base = c.Constant("sample_batch_rows", base)
	return s, nil
}

// tap returns w * x[n, :, coords...] as [N, positions..., C], zero where a
// coordinate (integral floats of shape out, one per spatial dim) is
// outside the image. w (shape out) may be nil for 1.
func (s *sampler) tap(coords []*fxgraph.Node, w *fxgraph.Node) (*fxgraph.Node, error) {
	c := s.c
	var valid, row *fxgraph.Node
	stride := tensor.NumElements(s.sp)
	for j, co := range coords {
		size := s.sp[j]
		stride /= size
		in, err := s.inside(co, size)
		if err != nil {
			return nil, err
		}
		if valid == nil {
			valid = in
		} else if valid, err = c.Emit(fxgraph.AtenLogicalAnd, valid, in); err != nil {
			return nil, err
		}
		cl, err := c.Emit(fxgraph.AtenClamp, co, 0.0, float64(size-1))
		if err != nil {
			return nil, err
		}
		ci, err := nnCast(c, cl, tensor.Int64)
		if err != nil {
			return nil, err
		}
		if stride != 1 {
			if ci, err = c.Emit(fxgraph.AtenMulScalar, ci, stride); err != nil {
				return nil, err
			}
		}
		if row == nil {
			row, err = c.Emit(fxgraph.AtenAddTensor, ci, s.base)
		} else {
			row, err = c.Emit(fxgraph.AtenAddTensor, row, ci)
		}
		if err != nil {
			return nil, err
		}
	}
	flat, err := c.Emit(fxgraph.AtenReshape, row, []any{int64(-1)})
	if err != nil {
		return nil, err
	}
	g, err := c.Emit(fxgraph.AtenIndexSelect, s.rows, int64(0), flat)
	if err != nil {
		return nil, err
	}
	if g, err = c.Emit(fxgraph.AtenReshape, g, append(ints(s.out), s.ch)); err != nil {
		return nil, err
	}
	dt := Meta(g).DType
	wt, err := nnCast(c, valid, dt)
	if err != nil {
		return nil, err
	}
	if w != nil {
		if wt, err = c.Emit(fxgraph.AtenMulTensor, wt, w); err != nil {
			return nil, err
		}
	}
	if wt, err = c.Emit(fxgraph.AtenUnsqueeze, wt, int64(-1)); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenMulTensor, g, wt)
}

// inside is 0 <= co <= size-1.
func (s *sampler) inside(co *fxgraph.Node, size int64) (*fxgraph.Node, error) {
	ge, err := s.c.Emit(fxgraph.AtenGeScalar, co, 0.0)
	if err != nil {
		return nil, err
	}
	le, err := s.c.Emit(fxgraph.AtenLeScalar, co, float64(size-1))
	if err != nil {
		return nil, err
	}
	return s.c.Emit(fxgraph.AtenLogicalAnd, ge, le)
}

// linear returns the multilinear interpolation of x at the fractional
// coordinates pos (one per spatial dim, shape out): the 2^dims corner taps
// weighted by their distances, corners outside the image contributing
// zero. The result is [N, positions..., C].
func (s *sampler) linear(pos []*fxgraph.Node) (*fxgraph.Node, error) {
	c := s.c
	lo := make([]*fxgraph.Node, len(pos))
	frac := make([]*fxgraph.Node, len(pos))
	for j, p := range pos {
		var err error
		if lo[j], err = c.Emit(fxgraph.AtenFloor, p); err != nil {
			return nil, err
		}
		if frac[j], err = c.Emit(fxgraph.AtenSubTensor, p, lo[j]); err != nil {
			return nil, err
		}
	}
	var acc *fxgraph.Node
	for corner := range 1 << len(pos) {
		coords := make([]*fxgraph.Node, len(pos))
		var w *fxgraph.Node
		for j := range pos {
			var wj *fxgraph.Node
			var err error
			if corner>>(len(pos)-1-j)&1 == 1 {
				if coords[j], err = c.Emit(fxgraph.AtenAddScalar, lo[j], 1.0); err != nil {
					return nil, err
				}
				wj = frac[j]
			} else {
				coords[j] = lo[j]
				if wj, err = c.Emit(fxgraph.AtenRsubScalar, frac[j], 1.0); err != nil {
					return nil, err
				}
			}
			if w == nil {
				w = wj
			} else if w, err = c.Emit(fxgraph.AtenMulTensor, w, wj); err != nil {
				return nil, err
			}
		}
		t, err := s.tap(coords, w)
		if err != nil {
			return nil, err
		}
		if acc == nil {
			acc = t
		} else if acc, err = c.Emit(fxgraph.AtenAddTensor, acc, t); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// channelsFirst moves the channels of [N, positions..., C] to dim 1.
func channelsFirst(c *Ctx, y *fxgraph.Node) (*fxgraph.Node, error) {
	r := Meta(y).Rank()
	perm := []any{int64(0), int64(r - 1)}
	for j := 1; j < r-1; j++ {
		perm = append(perm, int64(j))
	}
	return c.Emit(fxgraph.AtenPermute, y, perm)
}

// gridSample3D converts a 5-D GridSample: x [N, C, D, H, W] sampled at
// grid [N, Do, Ho, Wo, 3] of normalized (x, y, z), linearly (trilinear)
// or at the nearest voxel (ties to even), padding_mode zeros, border or
// reflection, as PyTorch's grid_sampler_3d computes it.
func gridSample3D(c *Ctx, x, grid *fxgraph.Node, mode, pad int64, align bool) (*fxgraph.Node, error) {
	gd, ok := Meta(grid).Shape.Static()
	if !ok || len(gd) != 5 || gd[4] != 3 {
		return nil, fmt.Errorf("GridSample grid of shape %s for a 5-D input, want [N, Do, Ho, Wo, 3]", Meta(grid).Shape)
	}
	if mode == 2 {
		return nil, fmt.Errorf("GridSample mode cubic on a 5-D input (ONNX defines it for 4-D only)")
	}
	s, err := newSampler(c, x, gd[:4])
	if err != nil {
		return nil, err
	}
	pos := make([]*fxgraph.Node, 3) // z, y, x: the grid holds them reversed
	for j := range pos {
		g, err := c.Emit(fxgraph.AtenSelectInt, grid, int64(4), int64(2-j))
		if err != nil {
			return nil, err
		}
		if pos[j], err = gridCoord(c, g, s.sp[j], pad, align); err != nil {
			return nil, err
		}
	}
	var y *fxgraph.Node
	if mode == 1 {
		for j := range pos {
			if pos[j], err = c.Emit(fxgraph.AtenRound, pos[j]); err != nil {
				return nil, err
			}
		}
		y, err = s.tap(pos, nil)
	} else {
		y, err = s.linear(pos)
	}
	if err != nil {
		return nil, err
	}
	return channelsFirst(c, y)
}

// gridCoord turns normalized grid coordinates g into pixel coordinates
// along an axis of the given size, then applies padding_mode (border
// clips, reflection reflects about the edges then clips, zeros leaves
// them for the taps to zero).
func gridCoord(c *Ctx, g *fxgraph.Node, size, pad int64, align bool) (*fxgraph.Node, error) {
	fs := float64(size)
	v, err := c.Emit(fxgraph.AtenAddScalar, g, 1.0)
	if err != nil {
		return nil, err
	}
	if align { // (g + 1) / 2 * (size - 1)
		v, err = c.Emit(fxgraph.AtenMulScalar, v, (fs-1)/2)
	} else if v, err = c.Emit(fxgraph.AtenMulScalar, v, fs); err == nil { // ((g + 1) * size - 1) / 2
		if v, err = c.Emit(fxgraph.AtenSubScalar, v, 1.0); err == nil {
			v, err = c.Emit(fxgraph.AtenDivScalar, v, 2.0)
		}
	}
	if err != nil || pad == 0 {
		return v, err
	}
	if pad == 2 {
		lo, hi := -0.5, fs-0.5
		if align {
			lo, hi = 0, fs-1
		}
		if v, err = reflectCoord(c, v, lo, hi); err != nil {
			return nil, err
		}
	}
	return c.Emit(fxgraph.AtenClamp, v, 0.0, fs-1)
}

// reflectCoord reflects v into [lo, hi] about its ends, as many times as
// it takes.
func reflectCoord(c *Ctx, v *fxgraph.Node, lo, hi float64) (*fxgraph.Node, error) {
	span := hi - lo
	if span <= 0 {
		return c.Emit(fxgraph.AtenMulScalar, v, 0.0)
	}
	d, err := c.Emit(fxgraph.AtenSubScalar, v, lo)
	if err != nil {
		return nil, err
	}
	if d, err = c.Emit(fxgraph.AtenAbs, d); err != nil {
		return nil, err
	}
	extra, err := c.Emit(fxgraph.AtenRemainderScalar, d, span)
	if err != nil {
		return nil, err
	}
	flips, err := c.Emit(fxgraph.AtenDivScalar, d, span)
	if err == nil {
		flips, err = c.Emit(fxgraph.AtenFloor, flips)
	}
	if err == nil {
		flips, err = c.Emit(fxgraph.AtenRemainderScalar, flips, 2.0)
	}
	if err != nil {
		return nil, err
	}
	even, err := c.Emit(fxgraph.AtenEqScalar, flips, 0.0)
	if err != nil {
		return nil, err
	}
	up, err := c.Emit(fxgraph.AtenAddScalar, extra, lo)
	if err != nil {
		return nil, err
	}
	down, err := c.Emit(fxgraph.AtenRsubScalar, extra, hi)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenWhereSelf, even, up, down)
}

// nnDeformConv converts DeformConv (X, W, offset, B, mask), 2-D: for each
// kernel tap, X interpolated bilinearly (zero outside) at the tap's
// position plus its learned offset (per offset group), times the mask;
// the taps of all channels then meet the weights in one batched matmul
// per group, plus the bias.
func nnDeformConv(c *Ctx, n *Node) error {
	in, err := c.someInputs(5, 3)
	if err != nil {
		return err
	}
	x, w, off := in[0], in[1], in[2]
	xd, xok := Meta(x).Shape.Static()
	wd, wok := Meta(w).Shape.Static()
	od, ook := Meta(off).Shape.Static()
	if !xok || !wok || !ook || len(xd) != 4 || len(wd) != 4 || len(od) != 4 {
		return Unsupported("DeformConv of %s, %s, %s (static 2-D only)", Meta(x).Shape, Meta(w).Shape, Meta(off).Shape)
	}
	dc, err := readDeformConv(c, xd, wd, od)
	if err != nil {
		return err
	}
	cols, err := dc.columns(c, x, off, in[4])
	if err != nil {
		return err
	}
	y, err := dc.multiply(c, cols, w, in[3])
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// deformConv holds DeformConv's sizes and attributes.
type deformConv struct {
	n, ch, oc, kh, kw, oh, ow int64
	groups, offGroups         int64
	stride, dil, pads         []int64
}

func readDeformConv(c *Ctx, xd, wd, od []int64) (*deformConv, error) {
	dc := &deformConv{n: xd[0], ch: xd[1], oc: wd[0], kh: wd[2], kw: wd[3], oh: od[2], ow: od[3],
		groups: c.AttrInt("group", 1), offGroups: c.AttrInt("offset_group", 1)}
	if k := c.AttrInts("kernel_shape", nil); k != nil && (len(k) != 2 || k[0] != dc.kh || k[1] != dc.kw) {
		return nil, fmt.Errorf("DeformConv kernel_shape %v for weights of shape %v", k, wd)
	}
	var err error
	if dc.stride, err = nnSpatialAttr(c, "strides", 2, 1); err != nil {
		return nil, err
	}
	if dc.dil, err = nnSpatialAttr(c, "dilations", 2, 1); err != nil {
		return nil, err
	}
	dc.pads = c.AttrInts("pads", []int64{0, 0, 0, 0})
	k := dc.kh * dc.kw
	switch {
	case len(dc.pads) != 4:
		return nil, fmt.Errorf("DeformConv pads %v, want 4 values", dc.pads)
	case dc.groups <= 0 || dc.ch != wd[1]*dc.groups || dc.oc%dc.groups != 0:
		return nil, fmt.Errorf("DeformConv input of %d channels, weights %v, group %d", dc.ch, wd, dc.groups)
	case dc.offGroups <= 0 || dc.ch%dc.offGroups != 0 || od[1] != dc.offGroups*k*2 || od[0] != dc.n:
		return nil, fmt.Errorf("DeformConv offset of shape %v for offset_group %d and a %dx%d kernel", od, dc.offGroups, dc.kh, dc.kw)
	}
	return dc, nil
}

// columns returns the sampled, masked taps as [N, oh*ow, C*K] (channel c's
// taps at c*K + k, as the weights are laid out).
func (dc *deformConv) columns(c *Ctx, x, off, mask *fxgraph.Node) (*fxgraph.Node, error) {
	k := dc.kh * dc.kw
	s, err := newSampler(c, x, []int64{dc.n, dc.oh, dc.ow})
	if err != nil {
		return nil, err
	}
	// offsets [N, og, K, 2, oh, ow]; mask [N, og, K, oh, ow].
	off6, err := c.Emit(fxgraph.AtenReshape, off, []any{dc.n, dc.offGroups, k, int64(2), dc.oh, dc.ow})
	if err != nil {
		return nil, err
	}
	var mask5 *fxgraph.Node
	if mask != nil {
		if mask5, err = c.Emit(fxgraph.AtenReshape, mask, []any{dc.n, dc.offGroups, k, dc.oh, dc.ow}); err != nil {
			return nil, err
		}
	}
	dt := Meta(x).DType
	cpg := dc.ch / dc.offGroups
	var groups []*fxgraph.Node
	for g := range dc.offGroups {
		var taps []*fxgraph.Node
		for t := range k {
			pos := make([]*fxgraph.Node, 2)
			for j := range pos {
				// base position of output (i, j) for tap t along this axis.
				base := tensor.New(dt, 1, dc.oh, dc.ow)
				for oi := range dc.oh {
					for oj := range dc.ow {
						o, kk := oi, t/dc.kw
						if j == 1 {
							o, kk = oj, t%dc.kw
						}
						base.SetFloat64(oi*dc.ow+oj, float64(o*dc.stride[j]-dc.pads[j]+kk*dc.dil[j]))
					}
				}
				o, err := selectAll(c, off6, int64(g), int64(t), int64(j)) // [N, oh, ow]
				if err != nil {
					return nil, err
				}
				if pos[j], err = c.Emit(fxgraph.AtenAddTensor, o, c.Constant("deform_base", base)); err != nil {
					return nil, err
				}
			}
			v, err := s.linear(pos) // [N, oh, ow, C]
			if err != nil {
				return nil, err
			}
			if v, err = c.Emit(fxgraph.AtenSliceTensor, v, int64(3), int64(g)*cpg, int64(g+1)*cpg, int64(1)); err != nil {
				return nil, err
			}
			if mask5 != nil {
				m, err := selectAll(c, mask5, int64(g), int64(t))
				if err == nil {
					m, err = c.Emit(fxgraph.AtenUnsqueeze, m, int64(-1))
				}
				if err == nil {
					v, err = c.Emit(fxgraph.AtenMulTensor, v, m)
				}
				if err != nil {
					return nil, err
				}
			}
			if v, err = c.Emit(fxgraph.AtenUnsqueeze, v, int64(-1)); err != nil {
				return nil, err
			}
			taps = append(taps, v)
		}
		cat, err := c.Emit(fxgraph.AtenCat, nodes(taps), int64(-1)) // [N, oh, ow, cpg, K]
		if err != nil {
			return nil, err
		}
		groups = append(groups, cat)
	}
	all, err := c.Emit(fxgraph.AtenCat, nodes(groups), int64(3)) // [N, oh, ow, C, K]
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenReshape, all, []any{dc.n, dc.oh * dc.ow, dc.ch * k})
}

// selectAll indexes dims 1, 2, ... of x by idx in turn.
func selectAll(c *Ctx, x *fxgraph.Node, idx ...int64) (*fxgraph.Node, error) {
	var err error
	for _, i := range idx {
		if x, err = c.Emit(fxgraph.AtenSelectInt, x, int64(1), i); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// multiply applies the weights [oc, C/groups, kh, kw] to the columns [N,
// P, C*K] group by group and adds the bias: [N, oc, oh, ow].
func (dc *deformConv) multiply(c *Ctx, cols, w, bias *fxgraph.Node) (*fxgraph.Node, error) {
	k := dc.kh * dc.kw
	g := dc.groups
	cg, ocg := dc.ch/g, dc.oc/g
	p := dc.oh * dc.ow
	col, err := c.Emit(fxgraph.AtenReshape, cols, []any{dc.n, p, g, cg * k})
	if err != nil {
		return nil, err
	}
	if col, err = c.Emit(fxgraph.AtenPermute, col, []any{int64(0), int64(2), int64(1), int64(3)}); err != nil { // [N, g, P, cg*K]
		return nil, err
	}
	wm, err := c.Emit(fxgraph.AtenReshape, w, []any{g, ocg, cg * k})
	if err != nil {
		return nil, err
	}
	if wm, err = c.Emit(fxgraph.AtenPermute, wm, []any{int64(0), int64(2), int64(1)}); err != nil { // [g, cg*K, ocg]
		return nil, err
	}
	y, err := c.Emit(fxgraph.AtenMatmul, col, wm) // [N, g, P, ocg]
	if err != nil {
		return nil, err
	}
	if y, err = c.Emit(fxgraph.AtenPermute, y, []any{int64(0), int64(1), int64(3), int64(2)}); err != nil {
		return nil, err
	}
	if y, err = c.Emit(fxgraph.AtenReshape, y, []any{dc.n, dc.oc, dc.oh, dc.ow}); err != nil {
		return nil, err
	}
	if bias == nil {
		return y, nil
	}
	b, err := viewAlong(c, bias, 4, 1)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenAddTensor, y, b)
}
