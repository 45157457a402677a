package onnx

import (
	"strconv"

	"github.com/xserve/xserve/tensor"
)

// onnxInt32 is ONNX's TensorProto.INT32 code, Cast's "to" for an index.
const onnxInt32 = 6

// tableOps are the elementwise operators a DequantizeLinear -> ... ->
// QuantizeLinear chain may hold to become a lookup table: each output
// element depends on its input element alone, and each is made of
// add, multiply, divide, min, max and compare (no transcendental
// function, whose host and XLA approximations differ).
var tableOps = map[string]bool{
	"Relu": true, "HardSwish": true, "HardSigmoid": true, "Clip": true, "LeakyRelu": true,
	"Neg": true, "Abs": true, "Identity": true,
}

// qdqTable is one chain that fuseQDQTables replaces: the DequantizeLinear
// that starts it, the elementwise nodes, and the QuantizeLinear that ends
// it.
type qdqTable struct {
	dq    *Node
	chain []*Node
	q     *Node
	dtype tensor.DType // the DequantizeLinear input's, uint8 or int8
}

// fuseQDQTables returns nodes with each DequantizeLinear -> elementwise
// chain (tableOps) -> QuantizeLinear of a uint8 or int8 tensor with
// constant per-tensor scales and zero points replaced by a lookup in a
// 256-entry table: the same chain's nodes applied to the 256 values the
// input type holds, so that each entry is the chain's result for that
// value. The table's operands are constants, so the importer folds it
// (fxgraph's evaluator: each op in float64, rounded to float32); where the
// generic lowering rounds inside one op differently (HardSwish is one op,
// XLA computes it in float32 steps) an entry could differ by one step on a
// value that falls on a half: TestQDQTableEqualsChain finds none on all 256
// inputs of either type. The lookup is a Gather, on every platform. Chain
// nodes must feed only the next one; the DequantizeLinear stays (dead
// unless read elsewhere).
func fuseQDQTables(gr *Graph, nodes []*Node) []*Node {
	prod, uses, inits := indexQDQ(gr, nodes)
	tables := map[*Node]*qdqTable{}
	inChain := map[*Node]bool{}
	for _, n := range nodes {
		if t := qdqTableAt(n, prod, uses, inits); t != nil {
			tables[n] = t
			for _, c := range t.chain {
				inChain[c] = true
			}
		}
	}
	if len(tables) == 0 {
		return nodes
	}
	out := make([]*Node, 0, len(nodes))
	for _, n := range nodes {
		switch {
		case inChain[n]:
		case tables[n] != nil:
			out = append(out, tables[n].nodes()...)
		default:
			out = append(out, n)
		}
	}
	return out
}

// qdqTableAt returns the chain that QuantizeLinear q ends, or nil when q
// does not end one fuseQDQTables replaces.
func qdqTableAt(q *Node, prod map[string]*Node, uses map[string]int, inits map[string]*tensor.Tensor) *qdqTable {
	if !qdqPlain(q, "QuantizeLinear") || !qdqScalarParams(q, inits) {
		return nil
	}
	var chain []*Node
	n := prod[q.Inputs[0]]
	for n != nil && tableOps[n.OpType] && isDefaultDomain(n.Domain) && len(n.Outputs) == 1 && uses[n.Outputs[0]] == 1 {
		for _, in := range n.Inputs[1:] {
			if in != "" && (inits[in] == nil || inits[in].NumElements() != 1) {
				return nil
			}
		}
		chain = append([]*Node{n}, chain...)
		n = prod[n.Inputs[0]]
	}
	if len(chain) == 0 || !qdqPlain(n, "DequantizeLinear") || !qdqScalarParams(n, inits) || len(n.Inputs) < 3 {
		return nil
	}
	zp := inits[n.Inputs[2]] // the input type is the zero point's
	if zp == nil || (zp.DType != tensor.Uint8 && zp.DType != tensor.Int8) {
		return nil
	}
	return &qdqTable{dq: n, chain: chain, q: q, dtype: zp.DType}
}

// qdqScalarParams reports whether a QuantizeLinear's or
// DequantizeLinear's scale and zero point (when given) are one-element
// initializers.
func qdqScalarParams(n *Node, inits map[string]*tensor.Tensor) bool {
	for _, in := range n.Inputs[1:] {
		if in == "" {
			continue
		}
		if t := inits[in]; t == nil || t.NumElements() != 1 {
			return false
		}
	}
	return true
}

// nodes are the nodes that replace the chain: the table (the 256 values
// of the input type, dequantized, the chain, quantized) and the lookup
// (the input as an int32 index, offset by 128 for int8, gathered from the
// table) whose result is the QuantizeLinear's output.
func (t *qdqTable) nodes() []*Node {
	pre := t.q.Outputs[0] + "__table"
	name := func(s string) string { return pre + "_" + s }
	values, offset := make([]uint8, 256), int32(0)
	for i := range values {
		values[i] = uint8(i)
	}
	dt := t.dtype
	if dt == tensor.Int8 {
		offset = 128
		for i := range values {
			values[i] = uint8(i - 128)
		}
	}
	domain := tensor.New(dt, 256)
	copy(domain.Data, values)
	out := []*Node{constNode(name("domain"), domain)}
	dq := *t.dq
	dq.Name, dq.Inputs, dq.Outputs = name("dq"), append([]string{name("domain")}, t.dq.Inputs[1:]...), []string{name("dq")}
	out = append(out, &dq)
	prev := name("dq")
	for i, c := range t.chain {
		cc := *c
		v := name("chain" + strconv.Itoa(i))
		cc.Name, cc.Inputs, cc.Outputs = v, append([]string{prev}, c.Inputs[1:]...), []string{v}
		out = append(out, &cc)
		prev = v
	}
	q := *t.q
	q.Name, q.Inputs, q.Outputs = name("q"), append([]string{prev}, t.q.Inputs[1:]...), []string{name("q")}
	out = append(out, &q)
	idx := name("index")
	out = append(out, &Node{Name: idx, OpType: "Cast", Inputs: []string{t.dq.Inputs[0]}, Outputs: []string{idx},
		Attributes: []*Attribute{{Name: "to", Type: AttrInt, I: onnxInt32}}})
	if offset != 0 {
		off := tensor.New(tensor.Int32)
		off.SetInt64(0, int64(offset))
		out = append(out, constNode(name("offset"), off),
			&Node{Name: name("shifted"), OpType: "Add", Inputs: []string{idx, name("offset")}, Outputs: []string{name("shifted")}})
		idx = name("shifted")
	}
	return append(out, &Node{Name: pre, OpType: "Gather", Inputs: []string{name("q"), idx}, Outputs: []string{t.q.Outputs[0]},
		Attributes: []*Attribute{{Name: "axis", Type: AttrInt, I: 0}}})
}

// constNode is a Constant node whose output v is t.
func constNode(v string, t *tensor.Tensor) *Node {
	return &Node{Name: v, OpType: "Constant", Outputs: []string{v}, Attributes: []*Attribute{{Name: "value", Type: AttrTensor, T: t}}}
}
