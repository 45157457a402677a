package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// registerNorm registers GroupNormalization, LpNormalization and Swish.
// (BatchNormalization, LayerNormalization and InstanceNormalization are in
// ops_nn.go.)
func registerNorm(cs converters) {
	cs.register("", "GroupNormalization", 18, nnGroupNormalization)
	cs.add("LpNormalization", nnLpNormalization)
	cs.register("", "Swish", 24, ewSwish)
}

// nnGroupNormalization converts GroupNormalization (X, scale, bias):
// native_group_norm over num_groups groups of the channels, in float32
// (stash_type 1). At opset 18 scale and bias hold one value a group, from
// opset 21 one a channel.
func nnGroupNormalization(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	scale, err := c.Input(1)
	if err != nil {
		return err
	}
	bias, err := c.Input(2)
	if err != nil {
		return err
	}
	if st := c.AttrInt("stash_type", 1); st != 1 {
		return Unsupported("GroupNormalization stash_type %d", st)
	}
	xm := Meta(x)
	d, ok := xm.Shape.Static()
	if !ok || len(d) < 2 {
		return Unsupported("GroupNormalization of shape %s (static, rank >= 2)", xm.Shape)
	}
	groups := c.AttrInt("num_groups", 0)
	if groups <= 0 || d[1]%groups != 0 {
		return fmt.Errorf("GroupNormalization num_groups %d for %d channels", groups, d[1])
	}
	hw := tensor.NumElements(d[2:])
	var params [2]*fxgraph.Node
	for i, p := range []*fxgraph.Node{scale, bias} {
		if params[i], err = nnCast(c, p, tensor.Float32); err != nil {
			return err
		}
		if c.Opset < 21 { // one value a group: repeat it for each channel of the group
			idx := tensor.New(tensor.Int64, d[1])
			for ch := range d[1] {
				idx.SetInt64(ch, ch/(d[1]/groups))
			}
			if params[i], err = c.Emit(fxgraph.AtenIndexSelect, params[i], int64(0), c.Constant("group_of_channel", idx)); err != nil {
				return err
			}
		}
	}
	x32, err := nnCast(c, x, tensor.Float32)
	if err != nil {
		return err
	}
	gn, err := c.Emit(fxgraph.AtenNativeGroupNorm, x32, params[0], params[1], d[0], d[1], hw, groups, c.AttrFloat("epsilon", 1e-5))
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.GetItem, gn, int64(0))
	if err != nil {
		return err
	}
	if y, err = nnCast(c, y, xm.DType); err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// nnLpNormalization converts LpNormalization: x over its L1 or L2 norm
// along axis.
func nnLpNormalization(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	p := c.AttrInt("p", 2)
	if p != 1 && p != 2 {
		return fmt.Errorf("LpNormalization p %d, want 1 or 2", p)
	}
	axis, err := fxgraph.NormDim(c.AttrInt("axis", -1), max(Meta(x).Rank(), 1))
	if err != nil {
		return fmt.Errorf("axis: %w", err)
	}
	norm, err := c.Emit(fxgraph.AtenLinalgVectorNorm, x, p, []any{int64(axis)}, true)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenDivTensor, x, norm)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}

// ewSwish converts Swish (opset 24): x * sigmoid(alpha * x).
func ewSwish(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	ax, err := c.Emit(fxgraph.AtenMulScalar, x, float64(c.AttrFloat("alpha", 1)))
	if err != nil {
		return err
	}
	s, err := c.Emit(fxgraph.AtenSigmoid, ax)
	if err != nil {
		return err
	}
	y, err := c.Emit(fxgraph.AtenMulTensor, x, s)
	if err != nil {
		return err
	}
	c.SetOutput(0, y)
	return nil
}
