package onnx

// registerShapeOps registers converters of shape and indexing ONNX operators.
func registerShapeOps(cs converters) {}
