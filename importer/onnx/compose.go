package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
)

// Call runs the converter of default-domain operator op at opset version
// opset on the IR values ins (nil for an omitted optional input) with
// attrs, as if it were a node of the model, and returns its first nOut
// outputs. Converters of composite operators (com.microsoft's fused and
// quantized ops) build on the standard ones this way.
func (c *Ctx) Call(op string, opset int64, ins []*fxgraph.Node, nOut int, attrs ...*Attribute) ([]*fxgraph.Node, error) {
	return c.callIn("", op, opset, ins, nOut, attrs...)
}

// callIn is Call for an operator of domain.
func (c *Ctx) callIn(domain, op string, opset int64, ins []*fxgraph.Node, nOut int, attrs ...*Attribute) ([]*fxgraph.Node, error) {
	conv, ok := c.s.im.conv.lookup(domain, op, opset)
	if !ok {
		return nil, fmt.Errorf("no converter for %s at opset %d", op, opset)
	}
	base := c.node.Name
	if len(c.node.Outputs) > 0 {
		base += "/" + c.node.Outputs[0]
	}
	prefix := fmt.Sprintf("%s/%s%d", base, op, c.calls)
	c.calls++
	sub := &Node{Name: c.node.Name, OpType: op, Domain: domain, Attributes: attrs}
	for i, in := range ins {
		if in == nil {
			sub.Inputs = append(sub.Inputs, "")
			continue
		}
		name := fmt.Sprintf("%s/in%d", prefix, i)
		c.s.env[name] = in
		sub.Inputs = append(sub.Inputs, name)
	}
	for j := 0; j < nOut; j++ {
		sub.Outputs = append(sub.Outputs, fmt.Sprintf("%s/out%d", prefix, j))
	}
	sc := &Ctx{s: c.s, node: sub, Opset: opset}
	if err := conv(sc, sub); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	outs := make([]*fxgraph.Node, nOut)
	for j, name := range sub.Outputs {
		v, ok := c.s.env[name]
		if !ok {
			return nil, fmt.Errorf("%s produced no output %d", op, j)
		}
		outs[j] = v
		delete(c.s.env, name)
	}
	for _, name := range sub.Inputs {
		delete(c.s.env, name)
	}
	return outs, nil
}

// Call1 is Call for an operator with one output.
func (c *Ctx) Call1(op string, opset int64, ins []*fxgraph.Node, attrs ...*Attribute) (*fxgraph.Node, error) {
	outs, err := c.Call(op, opset, ins, 1, attrs...)
	if err != nil {
		return nil, err
	}
	return outs[0], nil
}

// AInt is an int attribute for Call.
func AInt(name string, v int64) *Attribute { return &Attribute{Name: name, Type: AttrInt, I: v} }

// AFloat is a float attribute for Call.
func AFloat(name string, v float32) *Attribute {
	return &Attribute{Name: name, Type: AttrFloat, F: v}
}

// AInts is an ints attribute for Call.
func AInts(name string, v []int64) *Attribute { return &Attribute{Name: name, Type: AttrInts, Ints: v} }

// AString is a string attribute for Call.
func AString(name, v string) *Attribute {
	return &Attribute{Name: name, Type: AttrString, S: []byte(v)}
}

// passAttrs returns the node's attributes called names (those it has).
func (c *Ctx) passAttrs(names ...string) []*Attribute {
	var out []*Attribute
	for _, n := range names {
		if a := c.Attr(n); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// mustInput returns input i, or nil when it is missing or undefined.
func (c *Ctx) mustInput(i int) *fxgraph.Node {
	n, err := c.Input(i)
	if err != nil {
		return nil
	}
	return n
}
