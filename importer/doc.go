// Package importer loads a model file into the IR, choosing the importer by
// the file's extension (.onnx; .pt2 once the torch.export importer lands).
package importer
