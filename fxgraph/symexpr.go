package fxgraph

import (
	"fmt"
	"strconv"
	"strings"
)

// SymExpr is an integer expression of symbols: what a torch.export input
// dim may be besides a plain symbol (a cached decoder's attention mask is
// past + 1). Graph.SymbolExprs maps the derived symbol an input dim carries
// to its expression; a caller binds the plain symbols and evaluates the
// derived ones from them.
type SymExpr struct {
	// Op is "sym", "int", "add", "mul", "floordiv" or "mod".
	Op string
	// Sym names the symbol of Op "sym"; Value is the integer of Op "int".
	Sym   string
	Value int64
	// Args are the operands of the other ops (add and mul take two or more,
	// floordiv and mod two).
	Args []*SymExpr
}

// Eval returns the expression's value with the symbols' sizes in dims.
func (e *SymExpr) Eval(dims map[string]int64) (int64, error) {
	switch e.Op {
	case "int":
		return e.Value, nil
	case "sym":
		v, ok := dims[e.Sym]
		if !ok {
			return 0, fmt.Errorf("fxgraph: %s: symbol %s has no size", e, e.Sym)
		}
		return v, nil
	}
	vals := make([]int64, len(e.Args))
	for i, a := range e.Args {
		v, err := a.Eval(dims)
		if err != nil {
			return 0, err
		}
		vals[i] = v
	}
	switch e.Op {
	case "add", "mul":
		acc := vals[0]
		for _, v := range vals[1:] {
			if e.Op == "add" {
				acc += v
			} else {
				acc *= v
			}
		}
		return acc, nil
	case "floordiv", "mod":
		if len(vals) != 2 || vals[1] == 0 {
			return 0, fmt.Errorf("fxgraph: %s: division by zero", e)
		}
		q, r := vals[0]/vals[1], vals[0]%vals[1]
		if r != 0 && (r < 0) != (vals[1] < 0) { // Python's floor division
			q, r = q-1, r+vals[1]
		}
		if e.Op == "mod" {
			return r, nil
		}
		return q, nil
	}
	return 0, fmt.Errorf("fxgraph: symbolic expression op %q", e.Op)
}

// Symbols returns the symbols the expression reads, in order of first use.
func (e *SymExpr) Symbols() []string {
	var out []string
	seen := map[string]bool{}
	var walk func(*SymExpr)
	walk = func(x *SymExpr) {
		if x.Op == "sym" && !seen[x.Sym] {
			seen[x.Sym] = true
			out = append(out, x.Sym)
		}
		for _, a := range x.Args {
			walk(a)
		}
	}
	walk(e)
	return out
}

// Substitute returns the expression with each symbol replaced by what f
// gives for it (a symbol of another name, or an integer).
func (e *SymExpr) Substitute(f func(sym string) *SymExpr) *SymExpr {
	if e.Op == "sym" {
		if r := f(e.Sym); r != nil {
			return r
		}
		return e
	}
	if len(e.Args) == 0 {
		return e
	}
	out := &SymExpr{Op: e.Op, Sym: e.Sym, Value: e.Value, Args: make([]*SymExpr, len(e.Args))}
	for i, a := range e.Args {
		out.Args[i] = a.Substitute(f)
	}
	return out
}

// Solve returns the size of the expression's one symbol at which the
// expression is v, for sym + c and c * sym (nested), or false.
func (e *SymExpr) Solve(v int64) (string, int64, bool) {
	syms := e.Symbols()
	if len(syms) != 1 {
		return "", 0, false
	}
	x := e
	for x.Op != "sym" {
		var inner *SymExpr
		var consts []int64
		for _, a := range x.Args {
			if len(a.Symbols()) > 0 {
				inner = a
				continue
			}
			c, err := a.Eval(nil)
			if err != nil {
				return "", 0, false
			}
			consts = append(consts, c)
		}
		switch {
		case x.Op == "add":
			for _, c := range consts {
				v -= c
			}
		case x.Op == "mul":
			for _, c := range consts {
				if c == 0 || v%c != 0 {
					return "", 0, false
				}
				v /= c
			}
		default:
			return "", 0, false
		}
		x = inner
	}
	return x.Sym, v, true
}

// String prints the expression as torch prints it: "s49 + 1", "2*s3",
// "(s0 + 1)//2", "Mod(s0, 4)".
func (e *SymExpr) String() string {
	switch e.Op {
	case "int":
		return strconv.FormatInt(e.Value, 10)
	case "sym":
		return e.Sym
	case "add", "mul":
		sep := " + "
		if e.Op == "mul" {
			sep = "*"
		}
		parts := make([]string, len(e.Args))
		for i, a := range e.Args {
			parts[i] = a.String()
			if e.Op == "mul" && a.Op == "add" {
				parts[i] = "(" + parts[i] + ")"
			}
		}
		return strings.Join(parts, sep)
	case "floordiv":
		return paren(e.Args[0]) + "//" + paren(e.Args[1])
	case "mod":
		return "Mod(" + e.Args[0].String() + ", " + e.Args[1].String() + ")"
	}
	return "?"
}

func paren(e *SymExpr) string {
	if e.Op == "sym" || e.Op == "int" {
		return e.String()
	}
	return "(" + e.String() + ")"
}

// BindDerived returns dims with every derived symbol of g (SymbolExprs)
// set to its expression's value at dims' sizes; a derived symbol dims
// already has must equal that value. dims is not changed.
func (g *Graph) BindDerived(dims map[string]int64) (map[string]int64, error) {
	if len(g.SymbolExprs) == 0 {
		return dims, nil
	}
	out := make(map[string]int64, len(dims)+len(g.SymbolExprs))
	for k, v := range dims {
		out[k] = v
	}
	for name, e := range g.SymbolExprs {
		v, err := e.Eval(dims)
		if err != nil {
			return nil, err
		}
		if have, ok := dims[name]; ok && have != v {
			return nil, fmt.Errorf("fxgraph: %s is %d, but %s is %d at these sizes", name, have, e, v)
		}
		out[name] = v
	}
	return out, nil
}
