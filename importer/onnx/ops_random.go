package onnx

import (
	"fmt"
	"math"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Random operators: RandomUniform(Like), RandomNormal(Like), Bernoulli and
// Dropout in training mode. The numbers come from a counter-based generator
// composed of IR integer ops: element i of a tensor hashes the counter
// (i * streams + stream) with a 32-bit key derived from the seed attribute
// (a multiply-xorshift mixer, every step masked to 32 bits), so a program
// is a pure function and gives the same samples on every run and backend.
// Without a seed attribute the key derives from the node's output name:
// samples are reproducible per model, not fresh per run (ONNX leaves
// unseeded generators to the implementation). Shapes must be static.

func registerRandom(cs converters) {
	cs.add("RandomUniform", rndUniform(false))
	cs.add("RandomUniformLike", rndUniform(true))
	cs.add("RandomNormal", rndNormal(false))
	cs.add("RandomNormalLike", rndNormal(true))
	cs.register("", "Bernoulli", 15, rndBernoulli)
}

// rndKey returns the generator key of the node: from its seed attribute, or
// from its first output's name.
func rndKey(c *Ctx) int64 {
	var z uint64
	if a := c.Attr("seed"); a != nil {
		z = math.Float64bits(float64(a.F))
	} else {
		for _, b := range []byte(c.node.Outputs[0]) {
			z = z*131 + uint64(b)
		}
	}
	// A splitmix64 finalizer spreads nearby seeds apart.
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return int64(z & 0xffffffff)
}

// rndBits returns int64 values in [0, 2^32) of the given static shape,
// one per element, for stream s of n streams.
func rndBits(c *Ctx, dims []int64, s, n int64) (*fxgraph.Node, error) {
	e := &sigEmitter{c: c}
	count := tensor.NumElements(dims)
	idx := make([]int64, count)
	for i := range idx {
		idx[i] = int64(i)*n + s
	}
	x := c.Constant("rng_counter", tensor.FromInt64s(idx, dims...))
	k := func(v int64) *fxgraph.Node { return c.ScalarConst(tensor.Int64, float64(v)) }
	mask := func(v *fxgraph.Node) *fxgraph.Node { return e.op(fxgraph.AtenBitwiseAndTensor, v, k(0xffffffff)) }
	xorShift := func(v *fxgraph.Node, by int64) *fxgraph.Node {
		return e.op(fxgraph.AtenBitwiseXorTensor, v, e.op(fxgraph.AtenBitwiseRightShiftTensor, v, k(by)))
	}
	x = mask(e.op(fxgraph.AtenAddTensor, e.op(fxgraph.AtenMulTensor, x, k(0x9e3779b9)), k(rndKey(c))))
	x = xorShift(x, 16)
	x = mask(e.op(fxgraph.AtenMulTensor, x, k(0x7feb352d)))
	x = xorShift(x, 15)
	x = mask(e.op(fxgraph.AtenMulTensor, x, k(0x846ca68b)))
	x = xorShift(x, 16)
	return x, e.err
}

// rndUnit returns uniform samples in [0, 1) of dtype dt (in (0, 1] when
// open0 is set), stream s of n.
func rndUnit(c *Ctx, dims []int64, dt tensor.DType, s, n int64, open0 bool) (*fxgraph.Node, error) {
	bits, err := rndBits(c, dims, s, n)
	if err != nil {
		return nil, err
	}
	e := &sigEmitter{c: c}
	// 24 random bits for float32 and smaller (exact in float32), 32 else.
	shift, scale := int64(8), math.Ldexp(1, -24)
	if dt == tensor.Float64 {
		shift, scale = 0, math.Ldexp(1, -32)
	}
	v := e.op(fxgraph.AtenBitwiseRightShiftTensor, bits, c.ScalarConst(tensor.Int64, float64(shift)))
	if open0 {
		v = e.op(fxgraph.AtenAddTensor, v, c.ScalarConst(tensor.Int64, 1))
	}
	if e.err != nil {
		return nil, e.err
	}
	wide := tensor.Float32
	if dt == tensor.Float64 {
		wide = tensor.Float64
	}
	f, err := ewCastTo(c, v, wide)
	if err != nil {
		return nil, err
	}
	if f, err = c.Emit(fxgraph.AtenMulTensor, f, c.ScalarConst(wide, scale)); err != nil {
		return nil, err
	}
	return ewCastTo(c, f, dt)
}

// rndShape returns the static shape and dtype of a random op's output: the
// shape attribute and dtype attribute (default float), or for the *Like
// forms the input's shape and the dtype attribute (default the input's).
func rndShape(c *Ctx, like bool) ([]int64, tensor.DType, error) {
	if !like {
		shape := c.AttrInts("shape", nil)
		if c.Attr("shape") == nil {
			return nil, 0, fmt.Errorf("attribute shape is required")
		}
		dt, err := shONNXDType(c.AttrInt("dtype", 1))
		return shape, dt, err
	}
	x, err := c.Input(0)
	if err != nil {
		return nil, 0, err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok {
		return nil, 0, Unsupported("random values of symbolic shape %s", m.Shape)
	}
	dt := m.DType
	if a := c.Attr("dtype"); a != nil {
		if dt, err = shONNXDType(a.I); err != nil {
			return nil, 0, err
		}
	}
	return dims, dt, nil
}

func rndCheckFloat(dt tensor.DType) error {
	if !dt.IsFloat() {
		return fmt.Errorf("random values of dtype %s, want a float dtype", dt)
	}
	return nil
}

// rndUniform converts RandomUniform(Like): low + (high-low) * U[0, 1).
func rndUniform(like bool) Converter {
	return func(c *Ctx, _ *Node) error {
		dims, dt, err := rndShape(c, like)
		if err != nil {
			return err
		}
		if err := rndCheckFloat(dt); err != nil {
			return err
		}
		u, err := rndUnit(c, dims, dt, 0, 1, false)
		if err != nil {
			return err
		}
		lo, hi := c.AttrFloat("low", 0), c.AttrFloat("high", 1)
		if u, err = c.Emit(fxgraph.AtenMulScalar, u, hi-lo); err != nil {
			return err
		}
		if u, err = c.Emit(fxgraph.AtenAddScalar, u, lo); err != nil {
			return err
		}
		c.SetOutput(0, u)
		return nil
	}
}

// rndNormal converts RandomNormal(Like) by the Box-Muller transform of two
// uniform streams: mean + scale * sqrt(-2 ln u1) cos(2 pi u2).
func rndNormal(like bool) Converter {
	return func(c *Ctx, _ *Node) error {
		dims, dt, err := rndShape(c, like)
		if err != nil {
			return err
		}
		if err := rndCheckFloat(dt); err != nil {
			return err
		}
		wide := tensor.Float32
		if dt == tensor.Float64 {
			wide = tensor.Float64
		}
		u1, err := rndUnit(c, dims, wide, 0, 2, true)
		if err != nil {
			return err
		}
		u2, err := rndUnit(c, dims, wide, 1, 2, false)
		if err != nil {
			return err
		}
		e := &sigEmitter{c: c}
		r := e.op(fxgraph.AtenSqrt, e.op(fxgraph.AtenMulScalar, e.op(fxgraph.AtenLog, u1), -2.0))
		z := e.op(fxgraph.AtenMulTensor, r, e.op(fxgraph.AtenCos, e.op(fxgraph.AtenMulScalar, u2, 2*math.Pi)))
		z = e.op(fxgraph.AtenAddScalar, e.op(fxgraph.AtenMulScalar, z, c.AttrFloat("scale", 1)), c.AttrFloat("mean", 0))
		if e.err != nil {
			return e.err
		}
		out, err := ewCastTo(c, z, dt)
		if err != nil {
			return err
		}
		c.SetOutput(0, out)
		return nil
	}
}

// rndBernoulli converts Bernoulli: 1 where U[0, 1) < p, else 0.
func rndBernoulli(c *Ctx, _ *Node) error {
	p, err := c.Input(0)
	if err != nil {
		return err
	}
	dims, dt, err := rndShape(c, true)
	if err != nil {
		return err
	}
	pm := Meta(p).DType
	if err := rndCheckFloat(pm); err != nil {
		return err
	}
	u, err := rndUnit(c, dims, pm, 0, 1, false)
	if err != nil {
		return err
	}
	hit, err := c.Emit(fxgraph.AtenLtTensor, u, p)
	if err != nil {
		return err
	}
	out, err := ewCastTo(c, hit, dt)
	if err != nil {
		return err
	}
	c.SetOutput(0, out)
	return nil
}

// rndDropout converts Dropout in training mode, or in a mode known only at
// run time (training, when non-nil, is the bool scalar that selects it):
// an element is kept where U[0, 1) >= ratio and scaled by 1/(1-ratio).
// ratio is a constant or a run-time scalar.
func rndDropout(c *Ctx, x, ratio, training *fxgraph.Node) error {
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !ok {
		return Unsupported("Dropout in training mode of symbolic shape %s", m.Shape)
	}
	if err := rndCheckFloat(m.DType); err != nil {
		return err
	}
	u, err := rndUnit(c, dims, m.DType, 0, 1, false)
	if err != nil {
		return err
	}
	r, err := ewCastTo(c, ratio, m.DType)
	if err != nil {
		return err
	}
	e := &sigEmitter{c: c}
	keep := e.op(fxgraph.AtenGeTensor, u, r)
	scale := e.op(fxgraph.AtenRsubScalar, r, 1.0) // 1 - ratio
	y := e.op(fxgraph.AtenWhereSelf, keep, e.op(fxgraph.AtenDivTensor, x, scale), c.ScalarConst(m.DType, 0))
	if training != nil {
		y = e.op(fxgraph.AtenWhereSelf, training, y, x)
		keep = e.op(fxgraph.AtenLogicalOr, keep, e.op(fxgraph.AtenLogicalNot, training))
	}
	if e.err != nil {
		return e.err
	}
	c.SetOutput(0, y)
	c.SetOutput(1, keep)
	return nil
}
