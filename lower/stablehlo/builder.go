package stablehlo

import (
	"fmt"
	"strconv"
	"strings"
)

// Module is a StableHLO module under construction. It is not safe for
// concurrent use.
type Module struct {
	name  string
	funcs []*Function
	next  int // the next value number, unique in the module
	names map[string]bool
}

// NewModule returns an empty module called name.
func NewModule(name string) *Module {
	return &Module{name: sanitize(name), names: map[string]bool{}}
}

// Param is a parameter of a function: a name (sanitized and made unique in
// the module; "" numbers it) and its type.
type Param struct {
	Name string
	Type Type
}

// Function is one func.func of the module.
type Function struct {
	m      *Module
	name   string
	params []*Value
	body   *Block
}

// Value is the result of an op, a function parameter or a region argument.
type Value struct {
	name  string
	typ   Type
	owner *Module
	block *Block // the block that defines it
}

// Block returns the block that defines v: the block of the op that made
// it, or the function or region it is an argument of.
func (v *Value) Block() *Block { return v.block }

// Type returns the value's tensor type.
func (v *Value) Type() Type { return v.typ }

// String returns the value's SSA name, e.g. %3.
func (v *Value) String() string { return v.name }

// Block is a list of ops: a function's body or a region.
type Block struct {
	m        *Module
	args     []*Value
	ops      []*op
	returned bool
	used     bool // attached to an op (regions) or a function
	region   bool
}

type op struct {
	results  string // "%3", "%3:2" or "" (terminators)
	name     string
	operands []*Value
	regions  []*Block
	attrs    []string // "key = value"
	sig      string   // "(tensor<..>, ...) -> ..."
	// resultTypes are the results' types (Usage reads them).
	resultTypes []Type
}

// Func adds a function called name with the given parameters; its body
// is the returned function's Block.
func (m *Module) Func(name string, params ...Param) (*Function, error) {
	f := &Function{m: m, name: sanitize(name)}
	for _, fn := range m.funcs {
		if fn.name == f.name {
			return nil, fmt.Errorf("stablehlo: function @%s defined twice", f.name)
		}
	}
	f.body = &Block{m: m, used: true}
	for _, p := range params {
		if _, err := f.AddParam(p.Name, p.Type); err != nil {
			return nil, err
		}
	}
	m.funcs = append(m.funcs, f)
	return f, nil
}

// AddParam appends a parameter to the function; ops may already use the
// earlier ones.
func (f *Function) AddParam(name string, t Type) (*Value, error) {
	if err := t.valid(); err != nil {
		return nil, fmt.Errorf("stablehlo: parameter %d of @%s: %v", len(f.params), f.name, err)
	}
	if f.body.returned {
		return nil, fmt.Errorf("stablehlo: parameter %d of @%s: the function has already returned", len(f.params), f.name)
	}
	v := &Value{name: f.m.paramName(name), typ: t, owner: f.m, block: f.body}
	f.params = append(f.params, v)
	f.body.args = f.params
	return v, nil
}

func (m *Module) paramName(want string) string {
	base, name := sanitize(want), sanitize(want)
	if want == "" {
		base, name = "arg", "arg0"
	} else if base[0] >= '0' && base[0] <= '9' {
		base, name = "p"+base, "p"+base
	}
	for i := 1; m.names[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
		if want == "" {
			name = base + strconv.Itoa(i)
		}
	}
	m.names[name] = true
	return "%" + name
}

// sanitize keeps the characters MLIR allows in a symbol or value name.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '$':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// Name returns the function's symbol name without "@".
func (f *Function) Name() string { return f.name }

// Param returns parameter i.
func (f *Function) Param(i int) *Value { return f.params[i] }

// Params returns the parameters in order.
func (f *Function) Params() []*Value { return append([]*Value(nil), f.params...) }

// Body returns the block ops of the function are added to.
func (f *Function) Body() *Block { return f.body }

// Return ends the function returning values, which fixes its result types.
func (f *Function) Return(values ...*Value) error { return f.body.ret("func.return", values) }

// Region returns a new block with arguments of the given types, to be built
// and then handed to an op that takes a region (reduce, sort, while, ...).
func (b *Block) Region(argTypes ...Type) *Block {
	r := &Block{m: b.m, region: true}
	for _, t := range argTypes {
		r.args = append(r.args, &Value{name: b.m.newName(), typ: t, owner: b.m, block: r})
	}
	return r
}

// AddArg appends an argument to a region that has no ops yet.
func (b *Block) AddArg(t Type) (*Value, error) {
	if !b.region || len(b.ops) > 0 {
		return nil, fmt.Errorf("stablehlo: arguments are added to regions before their ops")
	}
	if err := t.valid(); err != nil {
		return nil, fmt.Errorf("stablehlo: region argument: %v", err)
	}
	v := &Value{name: b.m.newName(), typ: t, owner: b.m, block: b}
	b.args = append(b.args, v)
	return v, nil
}

// Arg returns argument i of the block.
func (b *Block) Arg(i int) *Value { return b.args[i] }

// Args returns the block's arguments.
func (b *Block) Args() []*Value { return append([]*Value(nil), b.args...) }

// Return ends a region returning values ("stablehlo.return").
func (b *Block) Return(values ...*Value) error {
	if !b.region {
		return fmt.Errorf("stablehlo: return: the block is a function body; use Function.Return")
	}
	return b.ret("stablehlo.return", values)
}

func (b *Block) ret(name string, values []*Value) error {
	if b.returned {
		return fmt.Errorf("stablehlo: %s: the block has already returned", name)
	}
	if err := b.check(name, values); err != nil {
		return err
	}
	b.ops = append(b.ops, &op{name: name, operands: values, sig: "(" + typesString(values) + ") -> ()"})
	b.returned = true
	return nil
}

// results returns the types a returned block yields.
func (b *Block) results() []Type {
	if !b.returned || len(b.ops) == 0 {
		return nil
	}
	last := b.ops[len(b.ops)-1]
	out := make([]Type, len(last.operands))
	for i, v := range last.operands {
		out[i] = v.typ
	}
	return out
}

func (m *Module) newName() string {
	n := m.next
	m.next++
	return "%" + strconv.Itoa(n)
}

// check verifies that the block can take another op with these operands.
func (b *Block) check(name string, operands []*Value) error {
	if b.returned {
		return fmt.Errorf("stablehlo: %s: the block has already returned", name)
	}
	for i, v := range operands {
		if v == nil {
			return fmt.Errorf("stablehlo: %s: operand %d is nil", name, i)
		}
		if v.owner != b.m {
			return fmt.Errorf("stablehlo: %s: operand %d (%s) belongs to another module", name, i, v.name)
		}
	}
	return nil
}

// emit appends an op with the given results and returns its values.
func (b *Block) emit(name string, operands []*Value, regions []*Block, attrs []string, results ...Type) ([]*Value, error) {
	if err := b.check("stablehlo."+name, operands); err != nil {
		return nil, err
	}
	for i, r := range regions {
		if !r.returned {
			return nil, fmt.Errorf("stablehlo: %s: region %d does not return", name, i)
		}
		if r.used {
			return nil, fmt.Errorf("stablehlo: %s: region %d is already used by another op", name, i)
		}
		if r.m != b.m {
			return nil, fmt.Errorf("stablehlo: %s: region %d belongs to another module", name, i)
		}
	}
	for _, r := range regions {
		r.used = true
	}
	id := b.m.newName()
	if !strings.Contains(name, ".") {
		name = "stablehlo." + name
	}
	o := &op{name: name, operands: operands, regions: regions, attrs: attrs, resultTypes: results}
	vals := make([]*Value, len(results))
	switch len(results) {
	case 0:
	case 1:
		o.results = id
		vals[0] = &Value{name: id, typ: results[0], owner: b.m, block: b}
	default:
		o.results = id + ":" + strconv.Itoa(len(results))
		for i, t := range results {
			vals[i] = &Value{name: id + "#" + strconv.Itoa(i), typ: t, owner: b.m, block: b}
		}
	}
	o.sig = "(" + typesString(operands) + ") -> "
	if len(results) == 1 {
		o.sig += results[0].String()
	} else if len(results) == 0 {
		o.sig += "()"
	} else {
		o.sig += "(" + typeList(results) + ")"
	}
	b.ops = append(b.ops, o)
	return vals, nil
}

// emit1 is emit for ops with one result.
func (b *Block) emit1(name string, operands []*Value, regions []*Block, attrs []string, result Type) (*Value, error) {
	vals, err := b.emit(name, operands, regions, attrs, result)
	if err != nil {
		return nil, err
	}
	return vals[0], nil
}

func typeList(ts []Type) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return strings.Join(parts, ", ")
}

// Text prints the module. Every function must have returned.
func (m *Module) Text() ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "module @%s {\n", m.name)
	for _, f := range m.funcs {
		if !f.body.returned {
			return nil, fmt.Errorf("stablehlo: function @%s does not return", f.name)
		}
		params := make([]string, len(f.params))
		for i, p := range f.params {
			params[i] = p.name + ": " + p.typ.String()
		}
		fmt.Fprintf(&b, "  func.func @%s(%s) -> (%s) {\n", f.name, strings.Join(params, ", "), typeList(f.body.results()))
		for _, o := range f.body.ops {
			o.write(&b, "    ")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return []byte(b.String()), nil
}

func (o *op) write(b *strings.Builder, indent string) {
	b.WriteString(indent)
	if o.results != "" {
		b.WriteString(o.results + " = ")
	}
	names := make([]string, len(o.operands))
	for i, v := range o.operands {
		names[i] = v.name
	}
	fmt.Fprintf(b, "%q(%s)", o.name, strings.Join(names, ", "))
	if len(o.regions) > 0 {
		b.WriteString(" (")
		for i, r := range o.regions {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("{\n")
			if len(r.args) > 0 {
				args := make([]string, len(r.args))
				for j, a := range r.args {
					args[j] = a.name + ": " + a.typ.String()
				}
				fmt.Fprintf(b, "%s  ^bb0(%s):\n", indent, strings.Join(args, ", "))
			}
			for _, ro := range r.ops {
				ro.write(b, indent+"    ")
			}
			b.WriteString(indent + "}")
		}
		b.WriteString(")")
	}
	if len(o.attrs) > 0 {
		b.WriteString(" {" + strings.Join(o.attrs, ", ") + "}")
	}
	b.WriteString(" : " + o.sig + "\n")
}
