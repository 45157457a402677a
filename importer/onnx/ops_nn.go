package onnx

// registerNN registers converters of convolution, pooling, normalization, matmul and softmax.
func registerNN(cs converters) {}
