package fx

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
)

// The JSON form of torch/_export/serde/schema.py (schema 8.x). Only the
// fields the importer reads are declared; the decoder skips the rest
// (metadata, stack traces, module call graph), so later minor versions that
// add fields still decode.

// supportedMajor is the schema major version torch 2.8 to 2.14 write.
const supportedMajor = 8

type schemaVersion struct {
	Major *int64 `json:"major"`
	Minor *int64 `json:"minor"`
}

// versionProbe is decoded first, so that an unknown major version is
// reported as such rather than as whatever field it broke.
type versionProbe struct {
	SchemaVersion *schemaVersion `json:"schema_version"`
	TorchVersion  string         `json:"torch_version"`
}

type exportedProgram struct {
	GraphModule      *graphModule               `json:"graph_module"`
	OpsetVersion     map[string]int64           `json:"opset_version"`
	RangeConstraints map[string]rangeConstraint `json:"range_constraints"`
	SchemaVersion    *schemaVersion             `json:"schema_version"`
	TorchVersion     string                     `json:"torch_version"`
}

type graphModule struct {
	Graph     *graph          `json:"graph"`
	Signature *graphSignature `json:"signature"`
}

type graph struct {
	Inputs       []union               `json:"inputs"`
	Outputs      []union               `json:"outputs"`
	Nodes        []node                `json:"nodes"`
	TensorValues map[string]tensorMeta `json:"tensor_values"`
}

type node struct {
	Target  string          `json:"target"`
	Inputs  []namedArgument `json:"inputs"`
	Outputs []union         `json:"outputs"`
	Name    *string         `json:"name"`
}

// kindKeyword is schema.ArgumentKind.KEYWORD (UNKNOWN is 0, POSITIONAL 1).
const kindKeyword = 2

type namedArgument struct {
	Name string `json:"name"`
	Arg  union  `json:"arg"`
	Kind *int64 `json:"kind"`
}

type tensorMeta struct {
	DType         int64   `json:"dtype"`
	Sizes         []union `json:"sizes"`
	Strides       []union `json:"strides"`
	StorageOffset *union  `json:"storage_offset"`
	Layout        *int64  `json:"layout"`
	RequiresGrad  bool    `json:"requires_grad"`
	Device        *device `json:"device"`
}

type device struct {
	Type  string `json:"type"`
	Index *int64 `json:"index"`
}

// layoutStrided is schema.Layout.Strided, the only layout of dense tensors.
const layoutStrided = 7

type symExpr struct {
	ExprStr string `json:"expr_str"`
}

type rangeConstraint struct {
	MinVal *jnum `json:"min_val"`
	MaxVal *jnum `json:"max_val"`
}

type graphSignature struct {
	InputSpecs  []union `json:"input_specs"`
	OutputSpecs []union `json:"output_specs"`
}

type tensorArgument struct {
	Name string `json:"name"`
}

type userInputSpec struct {
	Arg union `json:"arg"`
}

type inputToParameterSpec struct {
	Arg           tensorArgument `json:"arg"`
	ParameterName string         `json:"parameter_name"`
}

type inputToBufferSpec struct {
	Arg        tensorArgument `json:"arg"`
	BufferName string         `json:"buffer_name"`
	Persistent *bool          `json:"persistent"`
}

type inputToTensorConstantSpec struct {
	Arg                tensorArgument `json:"arg"`
	TensorConstantName string         `json:"tensor_constant_name"`
}

type inputToConstantInputSpec struct {
	Name  string `json:"name"`
	Value union  `json:"value"`
}

type userOutputSpec struct {
	Arg union `json:"arg"`
}

// mutationSpec covers the output specs that name what they write.
type mutationSpec struct {
	Arg           tensorArgument `json:"arg"`
	BufferName    string         `json:"buffer_name"`
	ParameterName string         `json:"parameter_name"`
	UserInputName string         `json:"user_input_name"`
}

type payloadConfig struct {
	Config map[string]payloadMeta `json:"config"`
}

type payloadMeta struct {
	PathName   string      `json:"path_name"`
	IsParam    bool        `json:"is_param"`
	UsePickle  bool        `json:"use_pickle"`
	TensorMeta *tensorMeta `json:"tensor_meta"`
}

// union is a serialized schema union (_Union): a JSON object with exactly
// one key naming the variant.
type union struct {
	Kind string
	Raw  json.RawMessage
}

// UnmarshalJSON keeps the variant name and its undecoded value.
func (u *union) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if len(m) != 1 {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return fmt.Errorf("union value has fields [%s], want exactly one", strings.Join(keys, ", "))
	}
	for k, v := range m {
		u.Kind, u.Raw = k, v
	}
	return nil
}

// decode decodes the variant's value into v.
func (u union) decode(v any) error {
	if err := json.Unmarshal(u.Raw, v); err != nil {
		return fmt.Errorf("%s: %v", u.Kind, err)
	}
	return nil
}

// jnum is a JSON number that torch may also write as the strings
// "Infinity", "-Infinity" or "NaN" (serialize.py's _dataclass_to_dict).
type jnum float64

// UnmarshalJSON accepts a number or one of torch's non-finite strings.
func (f *jnum) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "Infinity", "inf":
			*f = jnum(math.Inf(1))
		case "-Infinity", "-inf":
			*f = jnum(math.Inf(-1))
		case "NaN", "nan":
			*f = jnum(math.NaN())
		default:
			return fmt.Errorf("number %q", s)
		}
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = jnum(v)
	return nil
}

// decodeInt decodes a JSON integer.
func decodeInt(raw json.RawMessage) (int64, error) {
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, err
	}
	return v, nil
}

// symbolRE matches the srepr of a sympy Symbol ("Symbol('s77',
// positive=True, integer=True)") and captures its name.
var symbolRE = regexp.MustCompile(`^Symbol\('([A-Za-z_][A-Za-z0-9_]*)'(?:,[^()]*)?\)$`)

// identRE matches a bare symbol name, as torch < 2.6 printed it ("s0").
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseSymbol returns the symbol an expression is, or "" when it is a
// compound expression (2*s0, s0 + 1).
func parseSymbol(expr string) string {
	expr = strings.TrimSpace(expr)
	if m := symbolRE.FindStringSubmatch(expr); m != nil {
		return m[1]
	}
	if identRE.MatchString(expr) {
		return expr
	}
	return ""
}

// integerRE matches the srepr of a sympy Integer ("Integer(4)").
var integerRE = regexp.MustCompile(`^Integer\((-?[0-9]+)\)$`)

// symDim is one size of a tensor meta: a static size, a symbol, or an
// expression the importer does not decompose.
type symDim struct {
	size int64
	sym  string
	expr string // set for compound expressions
}

// decodeSymInt reads a serialized SymInt union.
func decodeSymInt(u union) (symDim, error) {
	switch u.Kind {
	case "as_int":
		v, err := decodeInt(u.Raw)
		if err != nil {
			return symDim{}, fmt.Errorf("as_int: %v", err)
		}
		return symDim{size: v}, nil
	case "as_expr":
		var e symExpr
		if err := u.decode(&e); err != nil {
			return symDim{}, err
		}
		if s := parseSymbol(e.ExprStr); s != "" {
			return symDim{sym: s}, nil
		}
		if m := integerRE.FindStringSubmatch(strings.TrimSpace(e.ExprStr)); m != nil {
			var v int64
			if _, err := fmt.Sscan(m[1], &v); err == nil {
				return symDim{size: v}, nil
			}
		}
		if e.ExprStr == "" {
			return symDim{}, errors.New("as_expr has an empty expr_str")
		}
		return symDim{expr: e.ExprStr}, nil
	}
	return symDim{}, fmt.Errorf("SymInt variant %q", u.Kind)
}
