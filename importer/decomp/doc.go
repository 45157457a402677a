// Package decomp converts calls of ATen operators the IR does not have
// (aten.linear, aten.scaled_dot_product_attention, aten.conv2d, the
// training IR's composites, the upsample family, ...) into IR operators:
// one decomposition table, keyed by fxgraph's op values, that both
// importers use, as torch's decomposition table serves torch.export. The
// .pt2 importer decomposes every call of such an operator an archive holds;
// the ONNX importer expresses ONNX operators (Attention, the com.microsoft
// attention family) as calls of ATen operators and lets this package
// decompose them, so that each computation is written once.
//
// A decomposition reads its call's arguments by schema name (Call), emits
// IR nodes through the importers' fxgraph.Emitter (shape rules at once,
// constant folding) and binds the call's outputs.
package decomp
