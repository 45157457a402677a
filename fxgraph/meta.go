package fxgraph

import (
	"fmt"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// Dim is one dimension of a shape: a concrete size when Sym is empty,
// otherwise the symbol Sym (its Size is then ignored).
type Dim struct {
	Size int64
	Sym  string
}

// D returns a concrete dimension.
func D(n int64) Dim { return Dim{Size: n} }

// S returns a symbolic dimension.
func S(sym string) Dim { return Dim{Sym: sym} }

// IsStatic reports whether d is a concrete size.
func (d Dim) IsStatic() bool { return d.Sym == "" }

// String prints the size or the symbol.
func (d Dim) String() string {
	if d.Sym != "" {
		return d.Sym
	}
	return fmt.Sprint(d.Size)
}

// Shape is a list of dimensions; an empty Shape is a scalar.
type Shape []Dim

// StaticShape builds a Shape of concrete dims.
func StaticShape(dims ...int64) Shape {
	s := make(Shape, len(dims))
	for i, d := range dims {
		s[i] = D(d)
	}
	return s
}

// Static returns the concrete dims and true when no dim is symbolic.
func (s Shape) Static() ([]int64, bool) {
	out := make([]int64, len(s))
	for i, d := range s {
		if !d.IsStatic() {
			return nil, false
		}
		out[i] = d.Size
	}
	return out, true
}

// IsStatic reports whether every dim is concrete.
func (s Shape) IsStatic() bool {
	for _, d := range s {
		if !d.IsStatic() {
			return false
		}
	}
	return true
}

// Symbols returns the distinct symbols of s in order of appearance.
func (s Shape) Symbols() []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range s {
		if d.Sym != "" && !seen[d.Sym] {
			seen[d.Sym] = true
			out = append(out, d.Sym)
		}
	}
	return out
}

// Clone returns a copy of s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Equal reports whether two shapes have the same dims (symbols by name).
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// String prints "[batch,3,224,224]".
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TensorMeta is the dtype and shape of one tensor value.
type TensorMeta struct {
	DType tensor.DType
	Shape Shape
}

// Static is a convenience constructor for a TensorMeta with concrete dims.
func Static(dt tensor.DType, dims ...int64) TensorMeta {
	return TensorMeta{DType: dt, Shape: StaticShape(dims...)}
}

// String prints "float32[batch,3]".
func (m TensorMeta) String() string { return m.DType.String() + m.Shape.String() }

// Rank returns the number of dims.
func (m TensorMeta) Rank() int { return len(m.Shape) }

// Meta is what a node produces: one TensorMeta for a plain tensor result, or
// several with Tuple set for an operator returning a tuple (whose elements are
// then taken by "getitem" nodes, as in FX).
type Meta struct {
	Vals  []TensorMeta
	Tuple bool
}

// Val returns the single tensor produced by a non-tuple node.
func (m Meta) Val() TensorMeta {
	if len(m.Vals) == 0 {
		return TensorMeta{}
	}
	return m.Vals[0]
}

// One is a Meta holding a single tensor.
func One(dt tensor.DType, shape Shape) Meta {
	return Meta{Vals: []TensorMeta{{DType: dt, Shape: shape}}}
}

// String prints the meta as FX's "val" would read.
func (m Meta) String() string {
	if !m.Tuple {
		if len(m.Vals) == 0 {
			return "?"
		}
		return m.Vals[0].String()
	}
	parts := make([]string, len(m.Vals))
	for i, v := range m.Vals {
		parts[i] = v.String()
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
