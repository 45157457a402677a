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
	// dtype was narrowed (int64 -> int32), Value already holds the narrowed data.
	Value *tensor.Tensor
	// Perm, when set, says the weight is stored transposed: Value is the
	// graph's tensor Graph.Attrs[Name] transposed by Perm (see
	// Options.ConvWeightsHWIO).
	Perm []int
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
