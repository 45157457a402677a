package fxgraph

import "fmt"

// KwOnly is the ArgSpec.Pos of a keyword-only argument.
const KwOnly = 1 << 20

// argSchemas declares, per op, the arguments with a default that more than
// one rule reads (shape, fold, lowering). init attaches them to the ops
// (Op.Args); rules read them with Node.ParamFloat, ParamInt, ParamBool and
// Param, never with a default of their own.
var argSchemas = map[string][]ArgSpec{
	"aten.leaky_relu.default": {{"negative_slope", 1, ArgFloat, 0.01}},
	"aten.elu.default":        {{"alpha", 1, ArgFloat, 1.0}, {"scale", 2, ArgFloat, 1.0}, {"input_scale", 3, ArgFloat, 1.0}},
	"aten.gelu.default":       {{"approximate", 1, ArgAny, "none"}},
	"aten.hardtanh.default":   {{"min_val", 1, ArgFloat, -1.0}, {"max_val", 2, ArgFloat, 1.0}},
	"aten.softplus.default":   {{"beta", 1, ArgFloat, 1.0}, {"threshold", 2, ArgFloat, 20.0}},
	"aten.threshold.default":  {{"threshold", 1, ArgFloat, 0.0}, {"value", 2, ArgFloat, 0.0}},
	"aten.add.Tensor":         {addAlpha},
	"aten.add.Scalar":         {addAlpha},
	"aten.sub.Tensor":         {addAlpha},
	"aten.sub.Scalar":         {addAlpha},
	"aten.rsub.Tensor":        {addAlpha},
	"aten.rsub.Scalar":        {addAlpha},
	"aten.addmm.default":      {{"beta", KwOnly, ArgFloat, 1.0}, {"alpha", KwOnly, ArgFloat, 1.0}},
	"aten._native_batch_norm_legit_no_training.default": {normEps(6)},
	"aten.native_layer_norm.default":                    {normEps(4)},
	"aten.native_group_norm.default":                    {{"group", 6, ArgInt, int64(1)}, normEps(7)},
	"aten.grid_sampler_2d.default": {
		{"interpolation_mode", 2, ArgInt, int64(0)}, {"padding_mode", 3, ArgInt, int64(0)}, {"align_corners", 4, ArgBool, false},
	},
	"xserve.roi_align":                {{"spatial_scale", 6, ArgFloat, 1.0}, {"half_pixel", 7, ArgBool, true}},
	"aten.var.correction":             {varCorrection},
	"aten.std.correction":             {varCorrection},
	"aten.linalg_vector_norm.default": {{"ord", 1, ArgFloat, 2.0}},
	"aten.nll_loss_forward.default":   nllArgs,
	"aten.nll_loss2d_forward.default": nllArgs,
	"aten.index_put.default":          {{"accumulate", 3, ArgBool, false}},
	"aten.slice.Tensor":               {{"step", 4, ArgInt, int64(1)}},
	"aten.triu.default":               {triDiagonal},
	"aten.tril.default":               {triDiagonal},
	"aten.pixel_shuffle.default":      {pixelFactor},
	"aten.pixel_unshuffle.default":    {pixelFactor},
	"aten.constant_pad_nd.default":    {{"value", 2, ArgAny, int64(0)}},
	"aten.arange.start":               {arangeStart},
	"aten.arange.start_step":          {arangeStart, {"step", 2, ArgAny, int64(1)}},
	// reduce is required by torch; "" (plain scatter) when absent.
	"aten.scatter_reduce.two": {{"reduce", 4, ArgAny, ""}},
}

var (
	addAlpha      = ArgSpec{"alpha", 2, ArgAny, int64(1)}
	varCorrection = ArgSpec{"correction", KwOnly, ArgFloat, 1.0}
	triDiagonal   = ArgSpec{"diagonal", 1, ArgInt, int64(0)}
	arangeStart   = ArgSpec{"start", 0, ArgAny, int64(0)}
	// pixelFactor is required: no default.
	pixelFactor = ArgSpec{"factor", 1, ArgInt, nil}
	// nllArgs: reduction 1 is mean (0 none, 2 sum), as in PyTorch.
	nllArgs = []ArgSpec{{"reduction", 3, ArgInt, int64(1)}, {"ignore_index", 4, ArgInt, int64(-100)}}
)

// normEps is the eps of a normalization op at position i: 1e-5 by default,
// as in PyTorch.
func normEps(i int) ArgSpec { return ArgSpec{"eps", i, ArgFloat, 1e-5} }

// attachArgSchemas sets Op.Args from argSchemas; a schema for an op that
// does not exist is a programming error.
func attachArgSchemas(ops map[string]*Op) {
	for name, args := range argSchemas {
		op, ok := ops[name]
		if !ok {
			panic("fxgraph: argument schema for unknown op " + name)
		}
		op.Args = append(op.Args, args...)
	}
}

// param returns the schema of argument name of the op n calls; an argument
// without a default (required) that n does not pass is an error.
func (n *Node) param(name string) (ArgSpec, error) {
	op, ok := OpByName(n.Target)
	if !ok {
		return ArgSpec{}, fmt.Errorf("%w: node %s calls %s", ErrUnsupported, n.Name, n.Target)
	}
	a, err := op.spec(n, name)
	if err != nil {
		return ArgSpec{}, err
	}
	if a.Default == nil && n.ArgOr(a.Pos, name, nil) == nil {
		return ArgSpec{}, fmt.Errorf("fxgraph: node %s (%s) has no argument %s, which is required", n.Name, n.Target, name)
	}
	return a, nil
}

// paramDefault is a's default, or (for a required argument, which param
// has checked is given) zero of its kind, never used.
func paramDefault(a ArgSpec) any {
	if a.Default != nil {
		return a.Default
	}
	switch a.Kind {
	case ArgInt:
		return int64(0)
	case ArgFloat:
		return 0.0
	case ArgBool:
		return false
	}
	return nil
}

// Param returns argument name of n as given (positional or keyword), or its
// default from the op's schema (Op.Args).
func (n *Node) Param(name string) (any, error) {
	a, err := n.param(name)
	if err != nil {
		return nil, err
	}
	return n.ArgOr(a.Pos, name, a.Default), nil
}

// ParamFloat returns float argument name of n, or its schema default.
func (n *Node) ParamFloat(name string) (float64, error) {
	a, err := n.param(name)
	if err != nil {
		return 0, err
	}
	def, ok := AsFloat(paramDefault(a))
	if !ok {
		return 0, fmt.Errorf("fxgraph: op %s argument %q has no float default", n.Target, name)
	}
	return n.FloatArg(a.Pos, name, def)
}

// ParamInt returns int argument name of n, or its schema default.
func (n *Node) ParamInt(name string) (int64, error) {
	a, err := n.param(name)
	if err != nil {
		return 0, err
	}
	def, ok := AsInt(paramDefault(a))
	if !ok {
		return 0, fmt.Errorf("fxgraph: op %s argument %q has no int default", n.Target, name)
	}
	return n.IntArg(a.Pos, name, def)
}

// ParamBool returns bool argument name of n, or its schema default.
func (n *Node) ParamBool(name string) (bool, error) {
	a, err := n.param(name)
	if err != nil {
		return false, err
	}
	def, ok := paramDefault(a).(bool)
	if !ok {
		return false, fmt.Errorf("fxgraph: op %s argument %q has no bool default", n.Target, name)
	}
	return n.BoolArg(a.Pos, name, def)
}
