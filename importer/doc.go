// Package importer loads a model file into the IR, choosing the importer by
// the file's extension: .onnx (package onnx) or .pt2, a torch.export archive
// (package fx).
package importer
