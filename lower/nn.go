package lower

// registerNN registers the rules of convolution, pooling, normalization, matmul and softmax.
func registerNN(r *Registry) {}
