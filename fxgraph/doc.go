// Package fxgraph is xserve's intermediate representation: a small, FX-like
// graph of nodes whose call targets are PyTorch Core ATen operators
// (AtenConvolution is aten.convolution.default, AtenAddTensor is
// aten.add.Tensor, ...).
//
// A Graph is an ordered list of Nodes. Each Node has one of four opcodes,
// exactly as torch.fx:
//
//   - placeholder: a graph input; Target is the input's name.
//   - get_attr: a constant tensor held by the graph (a weight, a buffer or a
//     folded constant); Target is the key in Graph.Attrs.
//   - call_function: applies its operator (Node.Op, an *Op; Target is the
//     op's name, for printing) to Args and Kwargs.
//   - output: the graph's single return; Args[0] is the list of returned nodes.
//
// Args hold *Node references and literals: int64, float64, bool, string,
// tensor.DType, nil, and []any lists of those. Every node carries Meta: the
// dtype and shape of each value it produces, where a dimension is either a
// concrete size or a symbol ("batch", "s0") shared across the graph.
//
// All edits go through Graph methods so that the users of each node stay
// correct; Validate checks the invariants; String prints the graph in FX's
// code form and Table in FX's tabular form. Passes (shape propagation,
// specialization to a shape bucket, constant folding, dead-code elimination)
// live in this package and depend on no importer or backend.
//
// # Operators
//
// Each operator is one *Op value: its Name (the target nodes print), the
// schema of its arguments with defaults (Op.Args), its shape rule
// (Op.Shape), its host fold (Op.Eval, optional) and, for a .Scalar
// overload, its .Tensor Twin. Every ATen overload is generated from torch's
// operator schemas by gen_aten.py into aten_gen.go (make aten-ops), one
// exported value each (AtenFooBar for aten.foo.bar, Aten_Foo for the private
// aten._foo.default); xserve's own operators (XserveResize, XserveRNN,
// XserveRoIAlign) and the higher-order ones (Cond, WhileLoop, GetItem) are
// defined beside their shape rules. An op is in the IR once it has a shape
// rule; the ATen ops without one (aten.linear, aten.scaled_dot_product_attention)
// are what importers decompose. The table is built once at start-up and never
// written afterwards; Ops lists the IR, OpByName goes from a torch target
// string (the .pt2 importer) to its Op, and Emitter.Emit emits a node of an
// Op value, checking its arguments against the schema (Op.CheckArgs). Every
// rule that needs a parameter with a default reads it through the schema
// (Node.ParamFloat, ParamInt, ParamBool, Param), so a default such as
// leaky_relu's slope is written once; irDefaults (op_args.go) gives the few
// defaults the IR has where torch's schema says None.
//
// To add an operator:
//
//  1. Give it a shape rule here: r.define(AtenFoo, fooShape, fooEval) in the
//     family's register function (ops_*.go, called from init in op.go); an
//     ATen overload missing from aten_gen.go is added to EXTRA in
//     gen_aten.py, an operator of xserve's own is defined as a value with
//     its schema beside its shape rule.
//  2. Give it a lowering rule in package lower: Registry.Register with the
//     op value (fxgraph.AtenFoo) in the family's file there.
//  3. Add a test in package lower that lowers a node of it and runs it on
//     the PJRT plugin against a reference from PyTorch or ONNX Runtime.
//
// lower's completeness test walks Ops and fails for an op missing any of
// the three.
package fxgraph
