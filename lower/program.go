package lower

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
	"github.com/xserve/xserve/tensor"
)

// ParamKind says where a program parameter's value comes from.
type ParamKind int

const (
	// Input parameters come from the request.
	Input ParamKind = iota
	// Weight parameters are constant tensors of the model, uploaded once.
	Weight
)

// String returns "input" or "weight".
func (k ParamKind) String() string {
	if k == Weight {
		return "weight"
	}
	return "input"
}

// Param is one parameter of the program's main function, in order.
type Param struct {
	// Name is the graph input name (inputs) or the Graph.Attrs key (weights).
	Name  string
	Kind  ParamKind
	DType tensor.DType
	Shape []int64
	// Value is the weight's host tensor (nil for inputs). For a weight whose
	// dtype was narrowed (int64 -> int32), Value already holds the narrowed
	// data. With Perm set, Value is in the graph's order and the parameter
	// takes it transposed: see HostValue.
	Value *tensor.Tensor
	// Perm, when set, is the permutation of Value's dims the parameter takes
	// (Options.ConvWeightsHWIO); Shape is already permuted. Value stays the
	// graph's tensor, shared by every bucket's program, and the transposed
	// copy exists only while it is uploaded.
	Perm []int
}

// HostValue returns a weight's value as the program takes it: Value, or for
// a weight with Perm a new tensor holding Value transposed by Perm.
func (p Param) HostValue() *tensor.Tensor {
	if p.Perm == nil || p.Value == nil {
		return p.Value
	}
	return p.Value.Transpose(p.Perm)
}

// PermutedShape returns shape with its dims reordered by perm (shape itself
// when perm is nil): the shape of a tensor of that shape transposed by perm.
func PermutedShape(shape []int64, perm []int) []int64 {
	if perm == nil {
		return shape
	}
	out := make([]int64, len(perm))
	for i, d := range perm {
		out[i] = shape[d]
	}
	return out
}

// Output is one result of the program, in order.
type Output struct {
	Name  string
	DType tensor.DType
	Shape []int64
}

// Program is a lowered graph for one shape bucket.
type Program struct {
	// Module is the StableHLO module in MLIR text form.
	Module []byte
	// Params lists the main function's parameters in order.
	Params []Param
	// Outputs lists the main function's results in order.
	Outputs []Output
	// Dims are the symbol sizes this program was specialized for.
	Dims map[string]int64
	// Bounded lists the outputs returned padded, with their valid size in a
	// count output (fxgraph.BoundedOutput); Trim slices them on the host.
	Bounded []fxgraph.BoundedOutput
	// Guards lists the results, last of all, that are true when the run
	// reached a part of the model the importer could not build
	// (fxgraph.GuardOutput); CheckGuards reads and drops them.
	Guards []fxgraph.GuardOutput
	// Usage says what the module's ops use (custom calls, element types
	// computed on), for a platform to judge (platforms.Check).
	Usage stablehlo.Usage
}

// CheckGuards fails with the guard's message when a guard result of the run
// is true, and otherwise returns outs without the guard results (the last
// len(p.Guards)). Without guards it returns outs unchanged.
func (p *Program) CheckGuards(outs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if len(p.Guards) == 0 {
		return outs, nil
	}
	for _, g := range p.Guards {
		if g.Output >= len(outs) {
			return nil, fmt.Errorf("lower: guard output %d of %d results", g.Output, len(outs))
		}
		if t := outs[g.Output]; t.NumElements() != 1 || t.Float64At(0) != 0 {
			return nil, fmt.Errorf("lower: %s", g.Message)
		}
	}
	return outs[:len(outs)-len(p.Guards)], nil
}

// Trim turns the program's results into the model's outputs: each bounded
// output sliced to its valid size along its axis (the value of its count
// output), and the count outputs dropped. Without bounded outputs it
// returns outs unchanged.
func (p *Program) Trim(outs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if len(p.Bounded) == 0 {
		return outs, nil
	}
	drop := map[int]bool{}
	trimmed := append([]*tensor.Tensor(nil), outs...)
	for _, b := range p.Bounded {
		if b.Output >= len(outs) || b.Count >= len(outs) {
			return nil, fmt.Errorf("lower: bounded output %d (count %d) of %d results", b.Output, b.Count, len(outs))
		}
		c := outs[b.Count]
		if c.NumElements() != 1 {
			return nil, fmt.Errorf("lower: count output %d is %s, want one element", b.Count, c)
		}
		t, err := slicePrefix(outs[b.Output], b.Axis, c.Int64At(0))
		if err != nil {
			return nil, fmt.Errorf("lower: output %d: %w", b.Output, err)
		}
		trimmed[b.Output] = t
		drop[b.Count] = true
	}
	var res []*tensor.Tensor
	for i, t := range trimmed {
		if !drop[i] {
			res = append(res, t)
		}
	}
	return res, nil
}

// slicePrefix returns the first n entries of t along axis.
func slicePrefix(t *tensor.Tensor, axis int, n int64) (*tensor.Tensor, error) {
	if axis < 0 || axis >= t.Rank() || n < 0 || n > t.Shape[axis] {
		return nil, fmt.Errorf("cannot keep %d entries along axis %d of %s", n, axis, t)
	}
	shape := append([]int64(nil), t.Shape...)
	shape[axis] = n
	out := tensor.New(t.DType, shape...)
	outer := tensor.NumElements(t.Shape[:axis])
	inner := tensor.NumElements(t.Shape[axis+1:]) * int64(t.DType.Size())
	src, dst := t.Shape[axis]*inner, n*inner
	for o := range outer {
		copy(out.Data[o*dst:(o+1)*dst], t.Data[o*src:o*src+dst])
	}
	return out, nil
}

// Hash returns the hex SHA-256 of the module text: the compile-cache key.
func (p *Program) Hash() string {
	sum := sha256.Sum256(p.Module)
	return hex.EncodeToString(sum[:])
}

// Inputs returns the input parameters in order.
func (p *Program) Inputs() []Param { return p.byKind(Input) }

// Weights returns the weight parameters in order.
func (p *Program) Weights() []Param { return p.byKind(Weight) }

func (p *Program) byKind(k ParamKind) []Param {
	var out []Param
	for _, q := range p.Params {
		if q.Kind == k {
			out = append(out, q)
		}
	}
	return out
}

// String summarizes the program's signature.
func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "program %s (%d params, %d outputs)", p.Hash()[:12], len(p.Params), len(p.Outputs))
	return b.String()
}
