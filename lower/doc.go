// Package lower turns an fxgraph.Graph into a StableHLO program for one shape
// bucket: Lower specializes the graph's symbolic dims to the bucket's sizes,
// folds what became constant, and emits one StableHLO function through our
// own emitter, package lower/stablehlo, calling one Rule per operator.
// Rules add ops with the typed Block methods of lower/stablehlo
// (ctx.Fn.Block().Add(x, y)); values are *stablehlo.Value with a
// stablehlo.Type, dtypes map to element types with Context.Elem. Long
// formulas use a chain (chain.go), which keeps the first error and adds
// each op to the block of its first operand, so that the same helper
// builds in the main function and in a region (a reduction body) alike.
// The package imports neither go-xla nor pjrt (no cgo).
//
// Rules live in a Registry keyed by the IR's operator values (*fxgraph.Op),
// one per op, grouped by family in files (elementwise.go, shape.go, nn.go,
// reduce.go, control.go); lowering a node runs the rule of its op
// (Node.Op). All rules share one
// signature, as JAX's lowering registry does:
//
//	func(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error)
//
// A rule reads parameters with defaults from the op's schema
// (n.ParamFloat("eps"), ...), never with a default of its own, and a .Scalar
// overload reuses its .Tensor twin's rule (fxgraph.Op.Twin).
//
// Adding an operator takes one definition, one rule and one test:
//
//  1. the Op in package fxgraph (shape rule, argument schema; see its
//     package doc);
//  2. here, r.Register(fxgraph.AtenFoo, lowerFoo) in the
//     family's register function;
//  3. a test in this package that lowers a node of the op and runs it on the
//     PJRT plugin, compared with PyTorch or ONNX Runtime.
//
// completeness_test.go walks fxgraph.Ops: TestEveryOpIsComplete fails for an
// op without a shape rule or a lowering rule, and TestMain, after a full run
// of the package, for an op no test lowered.
//
// Control flow: the higher-order op cond (fxgraph.Cond) lowers to
// stablehlo.if. Each branch subgraph is lowered into a region by the same
// rules (Context.lowerSubgraph): its operands are copied into the region
// first, so that every op of the branch lands there, and its constants over
// the inline limit become weight parameters of the main function like the
// main graph's.
//
// Data-dependent output sizes (ONNX NonZero, Compress, Unique,
// NonMaxSuppression): the graph lists such outputs
// in Graph.Bounded. The program returns each padded to a static upper bound
// along one axis, plus its valid size as an int64 scalar output appended
// after the model's outputs; Program.Trim slices the results on the host
// and drops the counts. `xserve run` and the conformance runner call Trim;
// serving does not yet (see docs/DATA-DEPENDENT.md).
//
// Weights (get_attr tensors larger than Options.InlineConstantMax elements)
// become parameters of the program, never constants: the serving layer
// uploads them to the device once and every bucket's executable shares them.
// The Program records the order of parameters and which are weights.
//
// Lowering is deterministic: the same graph, bucket and options give
// byte-identical StableHLO text.
package lower
