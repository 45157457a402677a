package onnx

// registerReductions registers converters of reductions, ArgMax/ArgMin, CumSum and TopK.
func registerReductions(cs converters) {}
