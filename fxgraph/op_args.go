package fxgraph

import "fmt"

// KwOnly is the ArgSpec.Pos of a keyword-only argument.
const KwOnly = 1 << 20

// irDefaults are the defaults the IR gives to arguments torch's schema
// leaves as None where None means a value (aten.var.correction: None is
// Bessel's correction, 1). init applies them to the generated schemas.
var irDefaults = map[*Op][]ArgSpec{
	AtenVarCorrection: {varCorrection},
	AtenStdCorrection: {varCorrection},
}

var varCorrection = ArgSpec{"correction", KwOnly, ArgFloat, 1.0, true}

// attachIRDefaults applies irDefaults; an argument the schema does not
// have is a programming error.
func attachIRDefaults() {
	for op, args := range irDefaults {
		for _, a := range args {
			i := op.argIndex(a.Name)
			if i < 0 {
				panic("fxgraph: IR default for unknown argument " + op.Name + " " + a.Name)
			}
			op.Args[i] = a
		}
	}
}

// param returns the schema of argument name of the op n calls; an argument
// without a default (required) that n does not pass is an error.
func (n *Node) param(name string) (ArgSpec, error) {
	if n.Op == nil {
		return ArgSpec{}, fmt.Errorf("%w: node %s calls no operator", ErrUnsupported, n.Name)
	}
	a, err := n.Op.spec(n, name)
	if err != nil {
		return ArgSpec{}, err
	}
	if !a.HasDefault && n.ArgOr(a.Pos, name, nil) == nil {
		return ArgSpec{}, fmt.Errorf("fxgraph: node %s (%s) has no argument %s, which is required", n.Name, n.Target, name)
	}
	return a, nil
}

// given reports whether n passes argument a (positionally or by keyword).
func (n *Node) given(a ArgSpec) bool { return n.ArgOr(a.Pos, a.Name, nil) != nil }

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
	if n.given(a) {
		return n.FloatArg(a.Pos, name, 0.0)
	}
	def, ok := AsFloat(a.Default)
	if !ok {
		return 0, fmt.Errorf("fxgraph: op %s argument %q has no float default", n.Target, name)
	}
	return def, nil
}

// ParamInt returns int argument name of n, or its schema default.
func (n *Node) ParamInt(name string) (int64, error) {
	a, err := n.param(name)
	if err != nil {
		return 0, err
	}
	if n.given(a) {
		return n.IntArg(a.Pos, name, int64(0))
	}
	def, ok := AsInt(a.Default)
	if !ok {
		return 0, fmt.Errorf("fxgraph: op %s argument %q has no int default", n.Target, name)
	}
	return def, nil
}

// ParamBool returns bool argument name of n, or its schema default.
func (n *Node) ParamBool(name string) (bool, error) {
	a, err := n.param(name)
	if err != nil {
		return false, err
	}
	if n.given(a) {
		return n.BoolArg(a.Pos, name, false)
	}
	def, ok := a.Default.(bool)
	if !ok {
		return false, fmt.Errorf("fxgraph: op %s argument %q has no bool default", n.Target, name)
	}
	return def, nil
}
