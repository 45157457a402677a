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

// ArgSpec describes one argument of an operator: its position in Args
// (KwOnly for a keyword-only argument), its keyword name, its kind and its
// default (used when the node passes neither). HasDefault is false for a
// required argument; an optional one may default to nil (None). Shape rules,
// folding and lowering rules read defaults from here, so that each is
// written once.
type ArgSpec struct {
	Name       string
	Pos        int
	Kind       ArgKind
	Default    any
	HasDefault bool
}

// Op is one operator: its target name (what Node.Target prints), the schema
// of its arguments, how it derives its result's Meta, and optionally how it
// folds on the host. Every ATen overload is a value generated from torch's
// schema (aten_gen.go: AtenAddTensor is aten.add.Tensor); the operators of
// xserve's own (XserveResize, ...) and the higher-order ones (Cond,
// WhileLoop, GetItem) are defined beside them. An op is in the IR when it has
// a shape rule; the others (aten.linear, aten.scaled_dot_product_attention)
// are what importers decompose. Nodes hold the *Op (Node.Op) and package
// lower registers its lowering rule under the same value.
type Op struct {
	// Name is the call target, e.g. "aten.add.Tensor".
	Name string
	// Args is the schema: every argument in order, for ATen ops torch's
	// (with the IR's defaults where torch has none: op_args.go). Rules read
	// arguments by name with Node.ParamFloat, ParamInt, ParamBool and Param.
	Args []ArgSpec
	// Shape computes the node's Meta; nil for an op outside the IR.
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

// InIR reports whether the op is an operator of the IR (it has a shape
// rule), rather than one importers decompose.
func (o *Op) InIR() bool { return o != nil && o.Shape != nil }

// String returns the op's name.
func (o *Op) String() string { return o.Name }

// Arg returns the spec of the argument called name.
func (o *Op) Arg(name string) (ArgSpec, bool) {
	if i := o.argIndex(name); i >= 0 {
		return o.Args[i], true
	}
	return ArgSpec{}, false
}

func (o *Op) argIndex(name string) int {
	for i, a := range o.Args {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// CheckArgs checks n's arguments against the op's schema: no more
// positional arguments than the schema has positional ones, and kwargs
// only by names it has. An op without a schema accepts anything.
func (o *Op) CheckArgs(n *Node) error {
	if len(o.Args) == 0 {
		return nil
	}
	positional := 0
	for _, a := range o.Args {
		if a.Pos != KwOnly {
			positional++
		}
	}
	if len(n.Args) > positional {
		return fmt.Errorf("fxgraph: node %s (%s) passes %d positional arguments, its schema has %d", n.Name, o.Name, len(n.Args), positional)
	}
	for k := range n.Kwargs {
		if o.argIndex(k) < 0 {
			return fmt.Errorf("fxgraph: node %s (%s) passes keyword argument %q, which its schema does not have", n.Name, o.Name, k)
		}
	}
	return nil
}

func (o *Op) spec(n *Node, name string) (ArgSpec, error) {
	a, ok := o.Arg(name)
	if !ok {
		return ArgSpec{}, fmt.Errorf("fxgraph: op %s has no argument %q in its schema (node %s)", o.Name, name, n.Name)
	}
	return a, nil
}

// The operators that are not ATen overloads.
var (
	// GetItem takes element Args[1] of the tuple produced by node Args[0].
	GetItem = &Op{Name: "getitem", Args: []ArgSpec{{"tuple", 0, ArgTensor, nil, false}, {"index", 1, ArgInt, nil, false}}}
	// Cond is the higher-order operator cond, as torch.cond:
	//
	//	cond(pred, true_graph, false_graph, operands) -> tuple
	//
	// pred is a bool tensor of one element known only at run time; true_graph
	// and false_graph are get_attr nodes of subgraphs (Graph.AddSubgraph) whose
	// placeholders take operands (a list of nodes) in order and whose outputs
	// agree in dtype and shape; the node is the tuple of the outputs of the
	// branch pred selects. A branch sees nothing of the enclosing graph but its
	// operands (importers pass every value a branch captures as an operand, and
	// copy constants into the branch).
	Cond = &Op{Name: "cond"}
	// WhileLoop is the higher-order operator while_loop, as torch's
	// while_loop:
	//
	//	while_loop(cond_graph, body_graph, carried_inputs, additional_inputs) -> tuple
	//
	// Both subgraphs take the carried values then the additional ones (lists
	// of nodes) as placeholders; cond_graph returns a bool tensor of one
	// element, body_graph the next carried values (same dtypes and shapes).
	// The node is the tuple of the carried values after the last iteration.
	WhileLoop = &Op{Name: "while_loop"}
	// Deferred is the op of a deferred graph's outputs (Graph.IsDeferred):
	// it stands for a value the importer can only build once the input
	// sizes are known. Nothing lowers it: the importer imports the model
	// again at those sizes before any shape pass or lowering sees it.
	Deferred = &Op{Name: "xserve.deferred.default"}
)

// opTable holds every operator of the IR by name, allOps every operator
// (the IR's and those importers decompose). Both are built once, in init,
// and never written afterwards.
var opTable, allOps map[string]*Op

func init() {
	allOps = map[string]*Op{}
	for _, op := range append(append(append([]*Op(nil), atenOps...), GetItem, Cond, WhileLoop, Deferred, XserveResize, XserveRNN, XserveORTTanh, XserveRoIAlign, XserveTreeEnsemble, XserveConvFused, XserveMatmulFused, XserveQLinearConv), append(stringOps, imageOps...)...) {
		if _, dup := allOps[op.Name]; dup {
			panic("fxgraph: operator defined twice: " + op.Name)
		}
		allOps[op.Name] = op
	}
	r := &Registry{ops: map[string]*Op{}}
	r.define(GetItem, getItemShape, nil)
	registerElementwise(r)
	registerShapeOps(r)
	registerNN(r)
	registerQuant(r)
	registerFold(r)
	registerReductions(r)
	registerRNN(r)
	registerControlFlow(r)
	registerTrees(r)
	registerStrings(r)
	registerImages(r)
	attachIRDefaults()
	attachScalarTwins()
	opTable = r.ops
}

// OpByName returns the operator whose target name is name (an ATen
// overload such as "aten.add.Tensor", or one of xserve's): how the .pt2
// importer goes from a serialized target to its Op. The op may be outside
// the IR (Op.InIR).
func OpByName(name string) (*Op, bool) {
	op, ok := allOps[name]
	return op, ok
}

// mustOp returns the operator called name, for the definitions in init
// that build names (aten.reflection_pad2d.default); a wrong name panics.
func mustOp(name string) *Op {
	op, ok := allOps[name]
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
