package fx

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xserve/xserve/fxgraph"
)

// parseSymExpr parses the sympy srepr of a torch.export size expression
// ("Add(Symbol('s49', positive=True, integer=True), Integer(1))"): Add,
// Mul, FloorDiv (and CleanDiv, an exact one), Mod (and PythonMod) of
// Symbols and Integers. Plain infix text ("s49 + 1") is not srepr and is
// refused.
func parseSymExpr(text string) (*fxgraph.SymExpr, error) {
	p := &sreprParser{s: text}
	e, err := p.expr(0)
	if err != nil {
		return nil, fmt.Errorf("size expression %q: %w", text, err)
	}
	if p.skipSpace(); p.i != len(p.s) {
		return nil, fmt.Errorf("size expression %q: unexpected %q at %d", text, p.s[p.i:], p.i)
	}
	return e, nil
}

// maxExprDepth bounds the nesting of a size expression.
const maxExprDepth = 32

type sreprParser struct {
	s string
	i int
}

func (p *sreprParser) skipSpace() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sreprParser) ident() string {
	p.skipSpace()
	start := p.i
	for p.i < len(p.s) && (p.s[p.i] == '_' || p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z' || p.s[p.i] >= '0' && p.s[p.i] <= '9') {
		p.i++
	}
	return p.s[start:p.i]
}

func (p *sreprParser) expect(c byte) error {
	p.skipSpace()
	if p.i >= len(p.s) || p.s[p.i] != c {
		return fmt.Errorf("want %q at %d", c, p.i)
	}
	p.i++
	return nil
}

// sreprOps maps sympy (and torch.utils._sympy) function names to SymExpr ops.
var sreprOps = map[string]string{"Add": "add", "Mul": "mul", "FloorDiv": "floordiv", "CleanDiv": "floordiv", "Mod": "mod", "PythonMod": "mod"}

func (p *sreprParser) expr(depth int) (*fxgraph.SymExpr, error) {
	if depth > maxExprDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxExprDepth)
	}
	name := p.ident()
	if err := p.expect('('); err != nil {
		return nil, err
	}
	switch name {
	case "Symbol":
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != '\'' {
			return nil, fmt.Errorf("Symbol without a quoted name at %d", p.i)
		}
		end := strings.IndexByte(p.s[p.i+1:], '\'')
		if end < 0 {
			return nil, fmt.Errorf("unterminated Symbol name")
		}
		sym := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		// Skip the assumptions (positive=True, integer=True).
		close := strings.IndexByte(p.s[p.i:], ')')
		if close < 0 {
			return nil, fmt.Errorf("unterminated Symbol")
		}
		p.i += close + 1
		return &fxgraph.SymExpr{Op: "sym", Sym: symbolName(sym)}, nil
	case "Integer":
		p.skipSpace()
		start := p.i
		for p.i < len(p.s) && (p.s[p.i] == '-' || p.s[p.i] >= '0' && p.s[p.i] <= '9') {
			p.i++
		}
		v, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		if err != nil {
			return nil, err
		}
		return &fxgraph.SymExpr{Op: "int", Value: v}, p.expect(')')
	}
	op, ok := sreprOps[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s (only Add, Mul, FloorDiv, Mod of Symbols and Integers)", ErrUnsupported, name)
	}
	e := &fxgraph.SymExpr{Op: op}
	for {
		a, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		e.Args = append(e.Args, a)
		p.skipSpace()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if err := p.expect(')'); err != nil {
			return nil, err
		}
		break
	}
	if (op == "floordiv" || op == "mod") && len(e.Args) != 2 || len(e.Args) < 2 {
		return nil, fmt.Errorf("%s with %d operands", name, len(e.Args))
	}
	return e, nil
}
