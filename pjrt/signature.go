package pjrt

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// paramType is the type of one parameter of a program's @main function, as
// read from its StableHLO text. known is false for types Execute cannot check
// (dynamic or unranked shapes, tokens, tuples, unknown element types).
type paramType struct {
	known bool
	dtype tensor.DType
	shape []int64
}

func (p paramType) String() string {
	if !p.known {
		return "?"
	}
	return p.dtype.String() + tensor.ShapeString(p.shape)
}

var mainFuncRe = regexp.MustCompile(`func\.func\s+(?:(?:public|private|nested)\s+)?@main\s*\(`)

// parseMainParams reads the parameter types of the @main function of a
// StableHLO module in MLIR text form. ok is false when the text has no
// recognizable @main signature (for example MLIR bytecode or the generic op
// form); Execute then leaves argument checks to the plugin.
func parseMainParams(text []byte) (params []paramType, ok bool) {
	loc := mainFuncRe.FindIndex(text)
	if loc == nil {
		return nil, false
	}
	parts, ok := splitTopLevel(text[loc[1]:])
	if !ok {
		return nil, false
	}
	if len(parts) == 1 && strings.TrimSpace(parts[0]) == "" {
		return []paramType{}, true
	}
	params = make([]paramType, len(parts))
	for i, part := range parts {
		// "%name: type {attrs} loc(...)"
		colon := strings.IndexByte(part, ':')
		if colon < 0 || !strings.HasPrefix(strings.TrimSpace(part), "%") {
			return nil, false
		}
		params[i] = parseTensorType(strings.TrimSpace(part[colon+1:]))
	}
	return params, true
}

// splitTopLevel splits s, which starts just after an opening '(', at the
// commas not nested in brackets or strings, up to the matching ')'.
func splitTopLevel(s []byte) (parts []string, ok bool) {
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			// Skip a string literal, honoring backslash escapes.
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '(', '<', '{', '[':
			depth++
		case ')', '>', '}', ']':
			if depth == 0 {
				if c != ')' {
					return nil, false
				}
				return append(parts, string(s[start:i])), true
			}
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, string(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, false
}

var mlirElementTypes = map[string]tensor.DType{
	"i1":           tensor.Bool,
	"i8":           tensor.Int8,
	"i16":          tensor.Int16,
	"i32":          tensor.Int32,
	"i64":          tensor.Int64,
	"ui8":          tensor.Uint8,
	"ui16":         tensor.Uint16,
	"ui32":         tensor.Uint32,
	"ui64":         tensor.Uint64,
	"f16":          tensor.Float16,
	"bf16":         tensor.BFloat16,
	"f32":          tensor.Float32,
	"f64":          tensor.Float64,
	"complex<f32>": tensor.Complex64,
	"complex<f64>": tensor.Complex128,
}

// parseTensorType reads a type such as "tensor<2x3xf32>" or "tensor<i1>" at
// the start of s (anything after it, such as attributes, is ignored).
func parseTensorType(s string) paramType {
	const prefix = "tensor<"
	if !strings.HasPrefix(s, prefix) {
		return paramType{}
	}
	// Find the matching '>'.
	depth, end := 1, -1
	for i := len(prefix); i < len(s) && end < 0; i++ {
		switch s[i] {
		case '<':
			depth++
		case '>':
			depth--
			if depth == 0 {
				end = i
			}
		}
	}
	if end < 0 {
		return paramType{}
	}
	body := s[len(prefix):end]
	// Drop an encoding: "2x3xf32, #enc".
	if i := topLevelComma(body); i >= 0 {
		body = body[:i]
	}
	body = strings.TrimSpace(body)
	shape := []int64{}
	for len(body) > 0 && body[0] >= '0' && body[0] <= '9' {
		x := strings.IndexByte(body, 'x')
		if x < 0 {
			return paramType{}
		}
		d, err := strconv.ParseInt(body[:x], 10, 64)
		if err != nil {
			return paramType{}
		}
		shape = append(shape, d)
		body = body[x+1:]
	}
	dt, ok := mlirElementTypes[strings.ReplaceAll(body, " ", "")]
	if !ok { // '?' (dynamic), '*' (unranked) or an element type we do not map
		return paramType{}
	}
	return paramType{known: true, dtype: dt, shape: shape}
}

// topLevelComma returns the index of the first comma of s not nested in
// brackets, or -1.
func topLevelComma(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<', '(', '[', '{':
			depth++
		case '>', ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}
