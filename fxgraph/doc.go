// Package fxgraph is xserve's intermediate representation: a small, FX-like
// graph of nodes whose call targets are PyTorch Core ATen operator names
// ("aten.convolution.default", "aten.add.Tensor", ...).
//
// A Graph is an ordered list of Nodes. Each Node has one of four opcodes,
// exactly as torch.fx:
//
//   - placeholder: a graph input; Target is the input's name.
//   - get_attr: a constant tensor held by the graph (a weight, a buffer or a
//     folded constant); Target is the key in Graph.Attrs.
//   - call_function: applies the operator named by Target to Args and Kwargs.
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
// Each operator is one *Op value, defined once in this package: its Name
// (the call target nodes carry), the schema of its arguments with defaults
// (Op.Args, declared in op_args.go), its shape rule (Op.Shape), its host
// fold (Op.Eval, optional) and, for a .Scalar overload, its .Tensor Twin.
// The table is built once at start-up and never written afterwards; Ops
// lists it, OpByName goes from a Node.Target (or a torch target string in the
// FX importer) to its Op, and Emitter.EmitOp emits a node of an Op value.
// Every rule that needs a parameter with a default reads it through the
// schema (Node.ParamFloat, ParamInt, ParamBool, Param), so a default such as
// a norm's eps is written once.
//
// To add an operator:
//
//  1. Define it here: r.Register(&Op{Name: "aten.foo.default", Shape:
//     fooShape, Eval: fooEval}) in the family's register function (ops_*.go,
//     called from init in op.go), and list its arguments with defaults in
//     argSchemas (op_args.go).
//  2. Give it a lowering rule in package lower: Registry.Register with the
//     op value (fxgraph.MustOp(name)) in the family's file there.
//  3. Add a test in package lower that lowers a node of it and runs it on
//     the PJRT plugin against a reference from PyTorch or ONNX Runtime.
//
// lower's completeness test walks Ops and fails for an op missing any of
// the three.
package fxgraph
