package stablehlo

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

func typesOfValues(vs []*Value) []Type {
	out := make([]Type, len(vs))
	for i, v := range vs {
		out[i] = v.typ
	}
	return out
}

// While runs body while cond holds. cond takes the loop values and returns
// a tensor<i1>; body takes them and returns their next values (same types).
// The results are the values after the last iteration.
func (b *Block) While(operands []*Value, cond, body *Block) ([]*Value, error) {
	if err := b.check("while", operands); err != nil {
		return nil, err
	}
	types := typesOfValues(operands)
	if err := checkRegion("while", cond, types, []Type{TensorOf(Bool)}); err != nil {
		return nil, fmt.Errorf("condition: %w", err)
	}
	if err := checkRegion("while", body, types, types); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	return b.emit("while", operands, []*Block{cond, body}, nil, types...)
}

// Case runs branch index (a tensor<i32>; out of range runs the last
// branch) and returns its results. Branches take no arguments (they use
// values of the enclosing block) and return the same types.
func (b *Block) Case(index *Value, branches ...*Block) ([]*Value, error) {
	if err := b.check("case", []*Value{index}); err != nil {
		return nil, err
	}
	if !index.typ.Equal(TensorOf(I32)) {
		return nil, shapeErr("case", "index is %s, want tensor<i32>", index.typ)
	}
	if len(branches) == 0 {
		return nil, shapeErr("case", "no branches")
	}
	if err := checkRegion("case", branches[0], nil, nil); err != nil {
		return nil, fmt.Errorf("branch 0: %w", err)
	}
	results := branches[0].results()
	for i, br := range branches[1:] {
		if err := checkRegion("case", br, nil, results); err != nil {
			return nil, fmt.Errorf("branch %d: %w", i+1, err)
		}
	}
	return b.emit("case", []*Value{index}, branches, nil, results...)
}

// OptimizationBarrier returns its operands unchanged; the compiler may not
// move computations across it nor fuse through it.
func (b *Block) OptimizationBarrier(operands ...*Value) ([]*Value, error) {
	if err := b.check("optimization_barrier", operands); err != nil {
		return nil, err
	}
	if len(operands) == 0 {
		return nil, shapeErr("optimization_barrier", "no operands")
	}
	return b.emit("optimization_barrier", operands, nil, nil, typesOfValues(operands)...)
}

// If runs onTrue or onFalse by pred (a tensor<i1>), as Case does.
func (b *Block) If(pred *Value, onTrue, onFalse *Block) ([]*Value, error) {
	if err := b.check("if", []*Value{pred}); err != nil {
		return nil, err
	}
	if !pred.typ.Equal(TensorOf(Bool)) {
		return nil, shapeErr("if", "pred is %s, want tensor<i1>", pred.typ)
	}
	if err := checkRegion("if", onTrue, nil, nil); err != nil {
		return nil, fmt.Errorf("true branch: %w", err)
	}
	if err := checkRegion("if", onFalse, nil, onTrue.results()); err != nil {
		return nil, fmt.Errorf("false branch: %w", err)
	}
	return b.emit("if", []*Value{pred}, []*Block{onTrue, onFalse}, nil, onTrue.results()...)
}

// Sort sorts inputs (all of one shape) together along dim. comparator
// takes two scalars per input (lhs_0, rhs_0, lhs_1, rhs_1, ...) and returns
// tensor<i1>: whether lhs goes first.
func (b *Block) Sort(inputs []*Value, dim int64, stable bool, comparator *Block) ([]*Value, error) {
	if err := b.check("sort", inputs); err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		return nil, shapeErr("sort", "no inputs")
	}
	for _, in := range inputs {
		if !in.typ.SameShape(inputs[0].typ) {
			return nil, shapeErr("sort", "inputs %s differ in shape", typesString(inputs))
		}
	}
	r := int64(inputs[0].typ.Rank())
	if dim < -r || dim >= r || r == 0 {
		return nil, shapeErr("sort", "dimension %d out of range for %s", dim, inputs[0].typ)
	}
	var args []Type
	for _, in := range inputs {
		args = append(args, TensorOf(in.typ.Elem), TensorOf(in.typ.Elem))
	}
	if err := checkRegion("sort", comparator, args, []Type{TensorOf(Bool)}); err != nil {
		return nil, err
	}
	attrs := []string{fmt.Sprintf("dimension = %d : i64", dim), fmt.Sprintf("is_stable = %t", stable)}
	return b.emit("sort", inputs, []*Block{comparator}, attrs, typesOfValues(inputs)...)
}

// CustomCall calls a target the backend provides, e.g. an XLA CPU or GPU
// kernel, with the given operands and result types. backendConfig is passed
// as a string (API version 2, the one XLA's CPU and GPU backends take).
func (b *Block) CustomCall(target string, operands []*Value, results []Type, backendConfig string, hasSideEffect bool) ([]*Value, error) {
	if err := b.check("custom_call", operands); err != nil {
		return nil, err
	}
	if target == "" {
		return nil, shapeErr("custom_call", "no call_target_name")
	}
	for _, r := range results {
		if err := r.valid(); err != nil {
			return nil, shapeErr("custom_call", "result type: %v", err)
		}
	}
	attrs := []string{
		"call_target_name = " + strconv.Quote(target),
		fmt.Sprintf("has_side_effect = %t", hasSideEffect),
		"backend_config = " + strconv.Quote(backendConfig),
		"api_version = 2 : i32",
	}
	return b.emit("custom_call", operands, nil, attrs, results...)
}

// FFIAttr is an attribute of a typed-FFI custom call: an i64 scalar, an
// i64 array when Array is set (Ints may then be empty), or an f32 scalar
// when IsFloat is set.
type FFIAttr struct {
	Name    string
	Int     int64
	Ints    []int64
	Array   bool
	Float   float32
	IsFloat bool
}

// FFICall describes a custom call to a typed-FFI handler (API version 4):
// the handler reads Attrs by name, and the operands and results in the
// physical layouts given, each as minor-to-major dimension order (nil: XLA's
// default, row-major).
type FFICall struct {
	Target         string
	Operands       []*Value
	Results        []Type
	Attrs          []FFIAttr
	OperandLayouts [][]int64
	ResultLayouts  [][]int64
}

// FFICall emits c as a stablehlo.custom_call.
func (b *Block) FFICall(c FFICall) ([]*Value, error) {
	if err := b.check("custom_call", c.Operands); err != nil {
		return nil, err
	}
	if c.Target == "" {
		return nil, shapeErr("custom_call", "no call_target_name")
	}
	for _, r := range c.Results {
		if err := r.valid(); err != nil {
			return nil, shapeErr("custom_call", "result type: %v", err)
		}
	}
	// In name order, as MLIR keeps a dictionary and XLA hands them over.
	attrsByName := slices.SortedFunc(slices.Values(c.Attrs), func(a, b FFIAttr) int { return strings.Compare(a.Name, b.Name) })
	cfg := make([]string, len(attrsByName))
	for i, a := range attrsByName {
		switch {
		case a.Array:
			cfg[i] = fmt.Sprintf("%s = array<i64%s>", a.Name, joinInts(": ", a.Ints))
		case a.IsFloat:
			cfg[i] = fmt.Sprintf("%s = %s : f32", a.Name, floatLiteral(strconv.FormatFloat(float64(a.Float), 'g', -1, 32)))
		default:
			cfg[i] = fmt.Sprintf("%s = %d : i64", a.Name, a.Int)
		}
	}
	attrs := []string{
		"call_target_name = " + strconv.Quote(c.Target),
		"api_version = 4 : i32",
		"backend_config = {" + strings.Join(cfg, ", ") + "}",
	}
	layouts := func(name string, ls [][]int64, types []Type) (string, error) {
		if ls == nil {
			return "", nil
		}
		if len(ls) != len(types) {
			return "", shapeErr("custom_call", "%d %s for %d values", len(ls), name, len(types))
		}
		parts := make([]string, len(ls))
		for i, l := range ls {
			if len(l) != len(types[i].Dims) {
				return "", shapeErr("custom_call", "%s %d has %d dims for rank %d", name, i, len(l), len(types[i].Dims))
			}
			parts[i] = fmt.Sprintf("dense<[%s]> : tensor<%dxindex>", joinInts("", l), len(l))
		}
		return name + " = [" + strings.Join(parts, ", ") + "]", nil
	}
	opTypes := typesOfValues(c.Operands)
	ol, err := layouts("operand_layouts", c.OperandLayouts, opTypes)
	if err != nil {
		return nil, err
	}
	rl, err := layouts("result_layouts", c.ResultLayouts, c.Results)
	if err != nil {
		return nil, err
	}
	if ol != "" || rl != "" {
		if ol == "" || rl == "" {
			return nil, shapeErr("custom_call", "operand and result layouts go together")
		}
		attrs = append(attrs, ol, rl)
	}
	return b.emit("custom_call", c.Operands, nil, attrs, c.Results...)
}

// joinInts writes v as ", "-separated integers, after prefix when v is not
// empty.
func joinInts(prefix string, v []int64) string {
	if len(v) == 0 {
		return ""
	}
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return prefix + strings.Join(s, ", ")
}
