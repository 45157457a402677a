// Package onnx imports ONNX models into the xserve IR (fxgraph).
//
// Decoding: .onnx files are decoded directly from the protobuf wire format
// with google.golang.org/protobuf/encoding/protowire against the ONNX spec
// (onnx.proto). We do not use github.com/owulveryck/onnx-go: it drops opset
// imports, dim_param symbols, fp16/bf16/int8/uint8 tensors and the bodies of
// If/Loop, all of which xserve needs. The decoder supports every tensor
// dtype, raw_data and typed fields, external data files next to the model,
// opset imports, symbolic dims and subgraphs, and never panics on corrupt
// input (it is fuzzed).
//
// Mapping: each ONNX operator is converted, according to the opset version
// the model imports for its domain, into Core ATen operators of the IR. The
// converters live in a table keyed by (domain, op type) with the opset
// version each one applies from, grouped by family in ops_*.go files. An
// operator (or an attribute value) without a converter is an error naming
// the operator, the node and the opset, wrapping ErrUnsupported: never a
// silently wrong result.
//
// Control flow: XLA programs are static, and lowering does not emit while or case
// for these yet, so control flow is resolved at import. If inlines the
// selected branch when the condition is known at import, else both branches
// with a where() per output (their outputs must agree in dtype and shape).
// Loop is unrolled when its trip count and condition are known at import,
// Scan (opset 9+) when its scan length is static (at most MaxLoopUnroll
// iterations each).
//
// Sequences and optionals (ops_sequence.go) exist only during the import: a
// sequence of known length is a list of IR tensors, an optional none or its
// content; sequence and optional graph inputs and outputs are laid out as
// their tensors (ImportOptions, Value.Flatten; docs/DATA-DEPENDENT.md).
// Signal operators (ops_signal.go) build windows and mel filters as
// constants and compute DFT and STFT as products with constant cosine and
// sine matrices; Det is unrolled Gaussian elimination. Random operators
// (ops_random.go) use a counter-based generator of IR integer ops. The
// ai.onnx.preview.training optimizers Adagrad, Adam and Momentum
// (ops_training.go) are pointwise update steps, and Gradient reverse-mode
// differentiation of the preceding nodes (Add, Sub, Mul, Div, Neg, Identity). TfIdfVectorizer of integer
// input (ops_tfidf.go) gathers every n-gram with a constant index table.
package onnx
