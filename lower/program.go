package lower

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

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
