package stablehlo

import (
	"strconv"
	"strings"
)

// Usage says what a module's ops use, for a platform to judge: how often
// each op occurs, which custom call targets it calls, and which element
// types its values hold and its computing ops compute on.
type Usage struct {
	// Ops counts each op by name ("stablehlo.add"), regions included.
	Ops map[string]int
	// CustomCalls counts the custom calls by call_target_name.
	CustomCalls map[string]int
	// Values counts, per element type, the function parameters and op
	// results of that type.
	Values map[ElementType]int
	// Compute counts, per element type, the ops that compute on values of
	// that type (arithmetic, comparisons, reductions, products,
	// convolutions, ...): every op but those that only make, move,
	// convert or route values (routing ops).
	Compute map[ElementType]int
}

// routing are the ops that make, move, convert or route values (control
// flow) without computing on them: Usage.Compute leaves them out.
var routing = map[string]bool{
	"stablehlo.constant": true, "stablehlo.iota": true, "stablehlo.convert": true,
	"stablehlo.bitcast_convert": true, "stablehlo.reshape": true, "stablehlo.broadcast_in_dim": true,
	"stablehlo.transpose": true, "stablehlo.slice": true, "stablehlo.dynamic_slice": true,
	"stablehlo.dynamic_update_slice": true, "stablehlo.concatenate": true, "stablehlo.pad": true,
	"stablehlo.reverse": true, "stablehlo.gather": true, "stablehlo.select": true,
	"stablehlo.return": true, "stablehlo.tuple": true, "stablehlo.get_tuple_element": true,
	"stablehlo.optimization_barrier": true, "func.return": true,
	"stablehlo.while": true, "stablehlo.case": true, "stablehlo.if": true,
}

// Usage walks the module's functions and regions.
func (m *Module) Usage() Usage {
	u := Usage{Ops: map[string]int{}, CustomCalls: map[string]int{}, Values: map[ElementType]int{}, Compute: map[ElementType]int{}}
	for _, f := range m.funcs {
		for _, p := range f.params {
			u.Values[p.typ.Elem]++
		}
		u.addBlock(f.body)
	}
	return u
}

func (u *Usage) addBlock(b *Block) {
	for _, o := range b.ops {
		u.Ops[o.name]++
		if t := o.target(); t != "" {
			u.CustomCalls[t]++
		}
		elems := map[ElementType]bool{}
		for _, v := range o.operands {
			elems[v.typ.Elem] = true
		}
		for _, t := range o.resultTypes {
			u.Values[t.Elem]++
			elems[t.Elem] = true
		}
		if !routing[o.name] {
			for e := range elems {
				u.Compute[e]++
			}
		}
		for _, r := range o.regions {
			for _, a := range r.args {
				u.Values[a.typ.Elem]++
			}
			u.addBlock(r)
		}
	}
}

// target returns a custom call's call_target_name, or "".
func (o *op) target() string {
	if o.name != "stablehlo.custom_call" {
		return ""
	}
	for _, a := range o.attrs {
		if v, ok := strings.CutPrefix(a, "call_target_name = "); ok {
			if t, err := strconv.Unquote(v); err == nil {
				return t
			}
			return v
		}
	}
	return ""
}

// Count is the number of ops.
func (u Usage) Count() int {
	n := 0
	for _, c := range u.Ops {
		n += c
	}
	return n
}
