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
package fxgraph
