package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// castNarrow emits the conversions to the 8- and 4-bit types whose ONNX
// rules differ from a plain convert (aten._to_copy, which rounds to nearest
// even and, like ml_dtypes, overflows to infinity or NaN):
//
//   - to float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ) with the node's
//     saturate attribute set (its default, from opset 19 on: Cast, CastLike,
//     QuantizeLinear), values beyond the type's range, infinities included,
//     become its largest finite value of the same sign;
//   - to FLOAT8E8M0, the exponent of the float32 value is taken and rounded
//     as round_mode says ("up", the default, "down" or "nearest"), as the
//     ONNX reference does on the bits;
//   - from floats to INT4 and UINT4, values are truncated toward zero and
//     wrapped (the ONNX reference's astype), through int32, where XLA's
//     convert would saturate.
//
// It reports whether it handled the conversion; when not, the caller emits
// a plain convert.
func castNarrow(c *Ctx, x *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, bool, error) {
	src := Meta(x).DType
	switch {
	case dt == tensor.Float8E8M0FNU:
		y, err := castE8M0(c, x, c.AttrInt("saturate", 1) != 0, c.AttrString("round_mode", "up"))
		return y, true, err
	case dt.IsMinifloat() && dt != tensor.Float4E2M1FN && c.AttrInt("saturate", 1) != 0:
		y, err := castSaturated(c, x, dt)
		return y, true, err
	case (dt == tensor.Int4 || dt == tensor.Uint4) && src.IsFloat():
		i, err := ewCastTo(c, x, tensor.Int32)
		if err != nil {
			return nil, true, err
		}
		y, err := ewCastTo(c, i, dt)
		return y, true, err
	}
	return nil, false, nil
}

// castSaturated clamps x (in float32 unless already a float) to dt's finite
// range before converting: NaN stays NaN, infinities become the extremes.
func castSaturated(c *Ctx, x *fxgraph.Node, dt tensor.DType) (*fxgraph.Node, error) {
	if !Meta(x).DType.IsFloat() {
		var err error
		if x, err = ewCastTo(c, x, tensor.Float32); err != nil {
			return nil, err
		}
	}
	m := dt.MaxFinite()
	y, err := c.Emit(fxgraph.AtenClamp, x, -m, m)
	if err != nil {
		return nil, err
	}
	return ewCastTo(c, y, dt)
}

// castE8M0 converts x to FLOAT8E8M0 as onnx.numpy_helper.to_float8e8m0
// does: the biased exponent of float32(x) (the sign ignored), incremented
// when round_mode rounds up (up: any of the fraction bits the reference
// tests, 0x4FFFFF, set; nearest: guard bit set and round, sticky or a
// nonzero exponent), but not past 0xFE when saturating; NaN and infinity
// give 0xFF.
func castE8M0(c *Ctx, x *fxgraph.Node, saturate bool, mode string) (*fxgraph.Node, error) {
	f, err := ewCastTo(c, x, tensor.Float32)
	if err != nil {
		return nil, err
	}
	bits, err := c.Emit(fxgraph.AtenViewDtype, f, tensor.Int32)
	if err != nil {
		return nil, err
	}
	exp, err := c.Emit(fxgraph.AtenBitwiseRightShiftTensorScalar, bits, int64(23))
	if err != nil {
		return nil, err
	}
	if exp, err = c.Emit(fxgraph.AtenBitwiseAndScalar, exp, int64(0xff)); err != nil {
		return nil, err
	}
	var up *fxgraph.Node
	switch mode {
	case "up":
		up, err = bitsSet(c, bits, 0x4fffff)
	case "nearest":
		up, err = e8m0RoundsUp(c, bits, exp)
	case "down":
	default:
		return nil, fmt.Errorf("round_mode %q, want up, down or nearest", mode)
	}
	if err != nil {
		return nil, err
	}
	e := exp
	if up != nil {
		ok, err := c.Emit(fxgraph.AtenNeScalar, exp, int64(0xff))
		if err != nil {
			return nil, err
		}
		if saturate {
			below, err := c.Emit(fxgraph.AtenNeScalar, exp, int64(0xfe))
			if err != nil {
				return nil, err
			}
			if ok, err = c.Emit(fxgraph.AtenLogicalAnd, ok, below); err != nil {
				return nil, err
			}
		}
		if up, err = c.Emit(fxgraph.AtenLogicalAnd, up, ok); err != nil {
			return nil, err
		}
		inc, err := ewCastTo(c, up, tensor.Int32)
		if err != nil {
			return nil, err
		}
		if e, err = c.Emit(fxgraph.AtenAddTensor, exp, inc); err != nil {
			return nil, err
		}
	}
	u8, err := ewCastTo(c, e, tensor.Uint8)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenViewDtype, u8, tensor.Float8E8M0FNU)
}

// bitsSet is (bits & mask) != 0.
func bitsSet(c *Ctx, bits *fxgraph.Node, mask int64) (*fxgraph.Node, error) {
	m, err := c.Emit(fxgraph.AtenBitwiseAndScalar, bits, mask)
	if err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenNeScalar, m, int64(0))
}

// e8m0RoundsUp is round_mode "nearest"'s increment: the guard bit (0x400000)
// and any of the round bit (0x200000), the sticky bits (0x1FFFFF) or a
// nonzero exponent.
func e8m0RoundsUp(c *Ctx, bits, exp *fxgraph.Node) (*fxgraph.Node, error) {
	g, err := bitsSet(c, bits, 0x400000)
	if err != nil {
		return nil, err
	}
	rs, err := bitsSet(c, bits, 0x3fffff)
	if err != nil {
		return nil, err
	}
	lsb, err := c.Emit(fxgraph.AtenNeScalar, exp, int64(0))
	if err != nil {
		return nil, err
	}
	if rs, err = c.Emit(fxgraph.AtenLogicalOr, rs, lsb); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenLogicalAnd, g, rs)
}
