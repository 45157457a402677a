package onnx

import (
	"sort"
)

// UnsupportedOp is one operator of a model that the importer has no
// converter for, with every node that uses it.
type UnsupportedOp struct {
	Op     string   // operator type, e.g. "MatMulInteger"
	Domain string   // "" for the default ONNX domain
	Opset  int64    // the model's opset version for Domain (0: domain not imported)
	Nodes  []string // node names (or "#k in graph G" for unnamed nodes)
}

// UnsupportedOps lists every operator of m (main graph, If/Loop/Scan bodies
// and model-local function bodies) that has no converter at the opset the
// model imports, sorted by domain and op. Unlike Import it does not stop at
// the first one; an op whose converter exists may still fail on particular
// attributes or shapes, which only Import finds.
func (im *Importer) UnsupportedOps(m *Model) []UnsupportedOp {
	opsets := map[string]int64{}
	for _, o := range m.OpsetImports {
		opsets[normDomain(o.Domain)] = o.Version
	}
	funcs := map[string]bool{}
	for _, f := range m.Functions {
		funcs[normDomain(f.Domain)+":"+f.Name] = true
	}
	found := map[string]*UnsupportedOp{}
	var visit func(nodes []*Node, graph string, opsets map[string]int64)
	visit = func(nodes []*Node, graph string, opsets map[string]int64) {
		for k, n := range nodes {
			for _, a := range n.Attributes {
				if a.G != nil {
					visit(a.G.Nodes, a.G.Name, opsets)
				}
				for _, g := range a.Graphs {
					visit(g.Nodes, g.Name, opsets)
				}
			}
			d := normDomain(n.Domain)
			if funcs[d+":"+n.OpType] {
				continue // inlined from the model's own function
			}
			v, ok := opsets[d]
			if ok {
				if _, ok := im.conv.lookup(d, n.OpType, v); ok {
					continue
				}
			}
			key := d + ":" + n.OpType
			u := found[key]
			if u == nil {
				u = &UnsupportedOp{Op: n.OpType, Domain: d, Opset: v}
				found[key] = u
			}
			name := n.Name
			if name == "" {
				name = "#" + itoa(k) + " in graph " + graph
			}
			u.Nodes = append(u.Nodes, name)
		}
	}
	if m.Graph != nil {
		visit(m.Graph.Nodes, m.Graph.Name, opsets)
	}
	for _, f := range m.Functions {
		fo := copyOpsets(opsets)
		for _, o := range f.OpsetImports {
			fo[normDomain(o.Domain)] = o.Version
		}
		visit(f.Nodes, "function "+f.Name, fo)
	}
	out := make([]UnsupportedOp, 0, len(found))
	for _, u := range found {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Op < out[j].Op
	})
	return out
}

func normDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

func itoa(k int) string {
	if k == 0 {
		return "0"
	}
	var b []byte
	for ; k > 0; k /= 10 {
		b = append([]byte{byte('0' + k%10)}, b...)
	}
	return string(b)
}
