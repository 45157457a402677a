package onnx

// registerControlFlow registers converters of If and Loop.
func registerControlFlow(cs converters) {}
