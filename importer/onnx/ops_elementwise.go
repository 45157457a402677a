package onnx

// registerElementwise registers converters of pointwise ONNX operators.
func registerElementwise(cs converters) {}
