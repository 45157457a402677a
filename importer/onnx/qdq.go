package onnx

import "github.com/xserve/xserve/tensor"

// fuseQDQ returns gr's nodes with each DequantizeLinear -> Conv ->
// QuantizeLinear group of a static QDQ model (ONNX Runtime's quantizer
// writes them) replaced by the QLinearConv it stands for, as ONNX Runtime
// does before running such a model: the input and the int8 weight
// dequantized, the bias dequantized from int32 (or none), the Conv's
// result quantized and used by nothing else. ORT then computes the int32
// accumulation, adds the int32 bias as it is (its dequantization scale is
// not read) and requantizes once; converting the group as QLinearConv
// gives that arithmetic (and, on CPU, oneDNN's int8 convolution), where
// the three operators alone compute in float32. The DequantizeLinear nodes
// stay (dead code unless something else reads them).
func fuseQDQ(gr *Graph) []*Node {
	prod, uses, inits := indexQDQ(gr, gr.Nodes)
	quantizedBy := map[*Node]*Node{} // Conv -> the QuantizeLinear of its result
	var consumer = map[string]*Node{}
	for _, n := range gr.Nodes {
		for _, in := range n.Inputs {
			consumer[in] = n
		}
	}
	for _, n := range gr.Nodes {
		if n.OpType != "Conv" || !isDefaultDomain(n.Domain) || len(n.Outputs) != 1 || uses[n.Outputs[0]] != 1 {
			continue
		}
		if q := consumer[n.Outputs[0]]; q != nil && qdqPlain(q, "QuantizeLinear") && q.Inputs[0] == n.Outputs[0] {
			quantizedBy[n] = q
		}
	}
	if len(quantizedBy) == 0 {
		return gr.Nodes
	}
	out := make([]*Node, 0, len(gr.Nodes))
	dropped := map[*Node]bool{}
	for _, n := range gr.Nodes {
		if dropped[n] {
			continue
		}
		q := quantizedBy[n]
		if q == nil {
			out = append(out, n)
			continue
		}
		fused := qdqConv(n, q, prod, inits)
		if fused == nil {
			out = append(out, n)
			continue
		}
		out = append(out, fused)
		dropped[q] = true
	}
	return out
}

// indexQDQ returns the node of nodes that produces each value, how many
// times each value is read (a graph output counts once), and gr's
// initializers by name.
func indexQDQ(gr *Graph, nodes []*Node) (map[string]*Node, map[string]int, map[string]*tensor.Tensor) {
	prod, uses := map[string]*Node{}, map[string]int{}
	for _, n := range nodes {
		for _, o := range n.Outputs {
			prod[o] = n
		}
		for _, in := range n.Inputs {
			uses[in]++
		}
	}
	for _, o := range gr.Outputs {
		uses[o.Name]++
	}
	inits := map[string]*tensor.Tensor{}
	for _, in := range gr.Initializers {
		inits[in.Name] = in.Tensor
	}
	return prod, uses, inits
}

// isDefaultDomain reports whether domain names the ONNX operator set.
func isDefaultDomain(domain string) bool { return domain == "" || domain == "ai.onnx" }

// qdqPlain reports whether n is a default-domain op of type op without
// block quantization or an output_dtype attribute.
func qdqPlain(n *Node, op string) bool {
	if n == nil || n.OpType != op || !isDefaultDomain(n.Domain) || len(n.Inputs) < 2 {
		return false
	}
	if a := n.Attr("block_size"); a != nil && a.I != 0 {
		return false
	}
	if a := n.Attr("output_dtype"); a != nil && a.I != 0 {
		return false
	}
	return true
}

// qdqInputs returns the (data, scale, zero point) inputs of the
// DequantizeLinear that produces value v, padded to three ("" for no zero
// point), or nil.
func qdqInputs(v string, prod map[string]*Node) []string {
	dq := prod[v]
	if !qdqPlain(dq, "DequantizeLinear") {
		return nil
	}
	in := append([]string(nil), dq.Inputs...)
	for len(in) < 3 {
		in = append(in, "")
	}
	return in[:3]
}

// qdqConv builds the QLinearConv of Conv n whose result q quantizes, or
// nil when n's operands are not dequantized as QLinearConv takes them:
// the weight an int8 initializer (per output channel along axis 0, or per
// tensor), the bias an int32 initializer with zero point 0 or none.
func qdqConv(n, q *Node, prod map[string]*Node, inits map[string]*tensor.Tensor) *Node {
	if len(n.Inputs) < 2 {
		return nil
	}
	x, w := qdqInputs(n.Inputs[0], prod), qdqInputs(n.Inputs[1], prod)
	if x == nil || w == nil {
		return nil
	}
	if xs := inits[x[1]]; xs != nil && xs.NumElements() != 1 {
		return nil
	}
	if wt := inits[w[0]]; wt == nil || wt.DType != tensor.Int8 {
		return nil
	}
	if ws := inits[w[1]]; ws == nil || (ws.NumElements() > 1 && qdqAxis(prod[n.Inputs[1]]) != 0) {
		return nil
	}
	bias := ""
	if len(n.Inputs) > 2 && n.Inputs[2] != "" {
		b := qdqInputs(n.Inputs[2], prod)
		if b == nil {
			return nil
		}
		if bt := inits[b[0]]; bt == nil || bt.DType != tensor.Int32 {
			return nil
		}
		if b[2] != "" {
			if z := inits[b[2]]; z == nil || anyNonZero(z) {
				return nil
			}
		}
		bias = b[0]
	}
	yz := ""
	if len(q.Inputs) > 2 {
		yz = q.Inputs[2]
	}
	inputs := []string{x[0], x[1], x[2], w[0], w[1], w[2], q.Inputs[1], yz}
	if bias != "" {
		inputs = append(inputs, bias)
	}
	return &Node{Name: n.Name + "_qlinear", OpType: "QLinearConv", Domain: n.Domain, Inputs: inputs,
		Outputs: []string{q.Outputs[0]}, Attributes: n.Attributes, DocString: n.DocString}
}

// qdqAxis is a DequantizeLinear's axis attribute (1 when absent).
func qdqAxis(dq *Node) int64 {
	if a := dq.Attr("axis"); a != nil {
		return a.I
	}
	return 1
}

// anyNonZero reports whether t holds a value other than 0.
func anyNonZero(t *tensor.Tensor) bool {
	for _, v := range t.Int64s() {
		if v != 0 {
			return true
		}
	}
	return false
}
