package lower

import (
	"bytes"
	"fmt"
	"sort"
)

// SetAliases marks parameters of p's main function as aliased to outputs
// (parameter index -> output index): the compiler then writes each such
// output into its parameter's buffer when the caller donates it
// (engine.ExecuteOptions.Donate), so that state a program updates (a
// decoder's key/value cache) stays in place on the device. It adds
// tf.aliasing_output attributes to the module's @main signature, as JAX
// does for donated arguments; parameter and output must have the same
// dtype and shape.
func (p *Program) SetAliases(aliases map[int]int) error {
	params := sortedKeys(aliases)
	for _, i := range params {
		o := aliases[i]
		if i < 0 || i >= len(p.Params) || o < 0 || o >= len(p.Outputs) {
			return fmt.Errorf("lower: alias of parameter %d to output %d: out of range (%d parameters, %d outputs)", i, o, len(p.Params), len(p.Outputs))
		}
		in, out := p.Params[i], p.Outputs[o]
		if in.DType != out.DType || fmt.Sprint(in.Shape) != fmt.Sprint(out.Shape) {
			return fmt.Errorf("lower: alias of parameter %d (%s %s%v) to output %d (%s %s%v): dtype and shape differ",
				i, in.Name, in.DType, in.Shape, o, out.Name, out.DType, out.Shape)
		}
	}
	const head = "func.func @main("
	start := bytes.Index(p.Module, []byte(head))
	if start < 0 {
		return fmt.Errorf("lower: module has no %s...) signature", head)
	}
	start += len(head)
	end := bytes.Index(p.Module[start:], []byte(") -> "))
	if end < 0 {
		return fmt.Errorf("lower: module's @main signature has no results")
	}
	end += start
	// The emitter prints each parameter as "%name: type", without commas
	// inside the type.
	parts := bytes.Split(p.Module[start:end], []byte(", %"))
	if len(parts) != len(p.Params) {
		return fmt.Errorf("lower: module's @main has %d parameters, the program lists %d", len(parts), len(p.Params))
	}
	for _, i := range params {
		if bytes.Contains(parts[i], []byte("{")) {
			return fmt.Errorf("lower: parameter %d of @main already has attributes", i)
		}
		parts[i] = fmt.Appendf(bytes.Clone(parts[i]), " {tf.aliasing_output = %d : i32}", aliases[i])
	}
	var b bytes.Buffer
	b.Write(p.Module[:start])
	b.Write(bytes.Join(parts, []byte(", %")))
	b.Write(p.Module[end:])
	p.Module = b.Bytes()
	return nil
}

func sortedKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
