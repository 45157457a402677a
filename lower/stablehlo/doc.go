// Package stablehlo is xserve's own typed StableHLO emitter: it builds a
// module of functions op by op and prints it as MLIR text in the generic
// form ("%1 = "stablehlo.add"(%a, %b) : (...) -> ..."), which PJRT plugins
// parse.
//
// Every op is checked against the StableHLO spec's shape and type rules when
// it is added, and an error names the op and the shapes involved; a program
// that builds prints without further checks. Ops are methods on a Block: a
// function's body, or a region (the body of reduce, sort, while, case,
// scatter, reduce_window) made with Block.Region and handed to the op that
// owns it. Values defined in an enclosing block may be used inside a region.
//
// The package knows nothing about xserve's IR; package lower maps IR nodes
// to these ops.
package stablehlo
