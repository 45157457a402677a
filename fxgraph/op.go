package fxgraph

import (
	"fmt"
	"sort"
)

// ArgKind is the kind of value an operator argument takes.
type ArgKind int

// The kinds of operator arguments.
const (
	// ArgAny is an argument whose kind the schema does not constrain.
	ArgAny ArgKind = iota
	// ArgTensor is a tensor node.
	ArgTensor
	// ArgInt is a Python int.
	ArgInt
	// ArgFloat is a Python float (an int is accepted).
	ArgFloat
	// ArgBool is a Python bool.
	ArgBool
	// ArgInts is a list of ints.
	ArgInts
)

// ArgSpec describes one argument of an operator: its position in Args, its
// keyword name, its kind and its default (used when the node passes
// neither; nil for a required argument). Shape rules, folding and lowering rules read defaults from here,
// so that each is written once.
type ArgSpec struct {
	Name    string
	Pos     int
	Kind    ArgKind
	Default any
}

// Op is one operator of the IR: its target name (what Node.Target holds),
// the schema of the arguments whose defaults matter, how it derives its
// result's Meta, and optionally how it folds on the host. An Op is defined
// once, in this package; package lower registers its lowering rule under the
// same *Op value, and importers emit nodes whose Target is Op.Name.
type Op struct {
	// Name is the call target, e.g. "aten.add.Tensor".
	Name string
	// Args lists the arguments with a default that rules read by name
	// (Node.ParamFloat, ParamInt, ParamBool, Param); it need not list every
	// argument.
	Args []ArgSpec
	// Shape computes the node's Meta. Required.
	Shape ShapeFunc
	// Eval folds the node on the host; nil means the op is never folded.
	Eval EvalFunc
	// ShapeOnly marks ops whose value depends only on the shapes of their
	// inputs (aten.sym_size, aten._shape_as_tensor): they fold as soon as those
	// shapes are static, even when the inputs are not constant.
	ShapeOnly bool
	// Host marks an op that only the host computes (string operators): it
	// has an Eval and no lowering rule, and SplitHost runs it before or
	// after the program.
	Host bool
	// Twin, for a .Scalar overload whose other operand is a Python number
	// (aten.mul.Scalar), is the .Tensor overload that computes the same
	// thing (aten.mul.Tensor): rules written for the twin apply unchanged.
	Twin *Op
}

// String returns the op's name.
func (o *Op) String() string { return o.Name }

// Arg returns the spec of the argument called name.
func (o *Op) Arg(name string) (ArgSpec, bool) {
	for _, a := range o.Args {
		if a.Name == name {
			return a, true
		}
	}
	return ArgSpec{}, false
}

func (o *Op) spec(n *Node, name string) (ArgSpec, error) {
	a, ok := o.Arg(name)
	if !ok {
		return ArgSpec{}, fmt.Errorf("fxgraph: op %s has no argument %q in its schema (node %s)", o.Name, name, n.Name)
	}
	return a, nil
}

// opTable holds every operator of the IR by name. It is built once, in
// init, and never written afterwards.
var opTable map[string]*Op

func init() {
	r := &Registry{ops: map[string]*Op{}}
	registerGetItem(r)
	registerElementwise(r)
	registerShapeOps(r)
	registerNN(r)
	registerReductions(r)
	registerRNN(r)
	registerControlFlow(r)
	registerTrees(r)
	registerStrings(r)
	attachArgSchemas(r.ops)
	attachScalarTwins(r.ops)
	opTable = r.ops
}

// OpByName returns the operator whose target name is name: how importers
// and passes go from a Node.Target to its Op.
func OpByName(name string) (*Op, bool) {
	op, ok := opTable[name]
	return op, ok
}

// MustOp returns the operator called name and panics when there is none:
// for registering rules at start-up, where a wrong name is a programming
// error.
func MustOp(name string) *Op {
	op, ok := opTable[name]
	if !ok {
		panic("fxgraph: no operator " + name)
	}
	return op
}

// Ops returns every operator of the IR, sorted by name.
func Ops() []*Op {
	out := make([]*Op, 0, len(opTable))
	for _, op := range opTable {
		out = append(out, op)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
